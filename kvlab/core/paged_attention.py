"""The page-index table in use: K and V written into pool pages and read back through it, in
plain torch, not a kernel (REFERENCE.md §2). ``write_kv`` stores a sequence's K and V through its
row, ``gather_kv`` reads them back as the paged kernels do, ``paged_attention`` attends over what
it gathers and ``paged_vs_contiguous`` checks it against a contiguous cache. A page is viewed as
``[num_layers, 2, tokens_per_block, kv_heads_per_rank, head_dim]``; token ``t`` lives in page
``row[t // tokens_per_block]`` at offset ``t % tokens_per_block``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from kvlab.core.arith import div_ceil
from kvlab.core.checks import check_choice, check_int, check_sequence
from kvlab.core.geometry import KVGeometry
from kvlab.core.kv_cache import KVCache
from kvlab.core.manager import KVCacheManager

#: KV dtypes the reference handles (fp8 and nvfp4 need scales a teaching reference skips).
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def kv_pages(manager: KVCacheManager) -> torch.Tensor:
    """The pool's storage viewed as ``[num_blocks, num_layers, 2, tokens_per_block,
    kv_heads_per_rank, head_dim]`` of the KV dtype (a view: writes land in the pool)."""
    geo = manager.geometry
    if geo.dtype not in TORCH_DTYPES:
        raise ValueError(
            f"paged attention needs a float KV dtype, one of {sorted(TORCH_DTYPES)}; "
            f"the manager's geometry has dtype={geo.dtype!r}"
        )
    if geo.kv_factor != 2:
        raise ValueError(
            f"paged attention needs K and V (kv_factor=2); the manager's geometry has "
            f"kv_factor={geo.kv_factor} (MLA)"
        )
    page = (geo.num_layers, 2, geo.tokens_per_block, geo.kv_heads_per_rank, geo.head_dim)
    storage = manager.pool.storage
    return storage.view(TORCH_DTYPES[geo.dtype]).view(storage.shape[0], *page)


def _row_pages(manager: KVCacheManager, cache: KVCache, entries: torch.Tensor) -> torch.Tensor:
    """The pages at ``entries`` of the cache's page-index row (the host table), on the pool's
    device, as the executor copies the rows there each step."""
    pages = cache.page_indices[entries].long()
    bad = (pages < 0) | (pages >= manager.total_blocks)
    if bool(bad.any()):
        first = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"page-index row of {cache.request_id!r} holds {int(pages[first])} at "
            f"entry {int(entries[first])}: not a page of the pool "
            f"(0..{manager.total_blocks - 1})"
        )
    return pages.to(manager.device)


def write_kv(
    manager: KVCacheManager,
    cache: KVCache,
    layer: int,
    k: torch.Tensor,
    v: torch.Tensor,
    start: int = 0,
) -> None:
    """Store ``k`` and ``v`` (``[num_tokens, kv_heads_per_rank, head_dim]``) of one layer for
    token positions ``[start, start + num_tokens)`` into the pages the cache's row names.
    The cache must already hold those positions (``cache.resize`` first)."""
    pages_view = kv_pages(manager)
    end = start + k.shape[0]
    assert end <= cache.capacity, f"tokens [{start}, {end}) beyond the cache's capacity"
    positions = torch.arange(start, end)
    pages = _row_pages(manager, cache, positions // manager.tokens_per_block)
    offsets = (positions % manager.tokens_per_block).to(manager.device)
    layer_view = pages_view[:, layer]
    layer_view[pages, 0, offsets] = k.to(device=manager.device, dtype=pages_view.dtype)
    layer_view[pages, 1, offsets] = v.to(device=manager.device, dtype=pages_view.dtype)


def gather_kv(
    manager: KVCacheManager, cache: KVCache, layer: int, length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of one layer for the first ``length`` tokens (default: the cache's capacity),
    gathered page by page through the cache's row: two ``[length, kv_heads, head_dim]``."""
    pages_view = kv_pages(manager)
    length = cache.capacity if length is None else length
    pages = _row_pages(manager, cache, torch.arange(div_ceil(length, manager.tokens_per_block)))
    kv = pages_view[pages, layer]  # [blocks, 2, tokens_per_block, heads, head_dim]
    kv = kv.transpose(0, 1).flatten(1, 2)[:, :length]
    return kv[0], kv[1]


def contiguous_attention(k: torch.Tensor, v: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Causal attention of ``q`` (``[num_queries, num_heads, head_dim]``, the LAST num_queries
    positions of the sequence) over ``k``, ``v`` (``[length, kv_heads, head_dim]``). One query
    is a decoding step; ``num_queries == length`` a full prefill. Grouped-query attention:
    query head ``h`` reads KV head ``h // (num_heads // kv_heads)``. Computed in float32,
    returned in q's dtype."""
    length, kv_heads, head_dim = k.shape
    num_queries, num_heads = q.shape[:2]
    group = num_heads // kv_heads
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), kf) * head_dim**-0.5
    query_pos = torch.arange(length - num_queries, length, device=q.device)
    future = torch.arange(length, device=q.device)[None, :] > query_pos[:, None]
    scores = scores.masked_fill(future, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), vf).to(q.dtype)


def paged_attention(
    manager: KVCacheManager,
    caches: Sequence[KVCache],
    layer: int,
    q: Sequence[torch.Tensor],
    lengths: Sequence[int] | None = None,
) -> list[torch.Tensor]:
    """Attention of each sequence's queries ``q[i]`` (``[num_queries, num_heads, head_dim]``)
    over its K and V gathered through its page-index row (:func:`gather_kv`), for a batch of
    caches of different lengths (default: each cache's capacity). Returns one output per
    sequence, shaped like its queries."""
    if lengths is None:
        lengths = [cache.capacity for cache in caches]
    outputs = []
    for cache, queries, length in zip(caches, q, lengths, strict=True):
        k, v = gather_kv(manager, cache, layer, length)
        outputs.append(contiguous_attention(k, v, queries.to(manager.device)))
    return outputs


def paged_vs_contiguous(
    device: str | torch.device = "cpu",
    dtype: str = "float16",
    lengths: Sequence[int] = (45, 100, 7),
    num_heads: int = 4,
    seed: int = 0,
) -> dict[str, Any]:
    """A worked check: sequences of ``lengths`` tokens grow one page at a time in turn, so
    their pages interleave in one pool; random K and V of 2 layers (2 KV heads of 64, 16 tokens
    a page) are written through their rows; ``paged_attention`` of a decoding step and of a
    full prefill is compared with ``contiguous_attention`` over the same K and V.
    Returns max_abs_error (over every layer, sequence and mode), and each sequence's pages.
    A door: notebook 03 and benchmarks/gpu_measurements.py call it, so it checks its arguments."""
    check_choice("dtype", dtype, TORCH_DTYPES)
    lengths = check_sequence("lengths", lengths, check_int, low=1, high=1 << 16)
    if not lengths:
        raise ValueError("lengths must name at least one sequence")
    num_heads = check_int("num_heads", num_heads, low=2, high=256)
    if num_heads % 2:
        raise ValueError(f"num_heads must be a multiple of the 2 KV heads, got {num_heads}")
    seed = check_int("seed", seed, low=0, high=2**64 - 1)  # torch.Generator.manual_seed's range
    geo = KVGeometry(num_layers=2, num_kv_heads=2, head_dim=64, dtype=dtype, tokens_per_block=16)
    blocks = sum(geo.blocks_for_tokens(n) for n in lengths)
    manager = KVCacheManager(
        geo,
        quota_bytes=blocks * geo.bytes_per_block,
        max_seq_len=max(lengths),
        max_batch_size=len(lengths),
        device=device,
    )
    caches = [manager.create_cache(f"seq-{i}") for i in range(len(lengths))]
    for step in range(max(geo.blocks_for_tokens(n) for n in lengths)):
        for cache, n in zip(caches, lengths):
            cache.resize(min(n, (step + 1) * geo.tokens_per_block))
    gen = torch.Generator().manual_seed(seed)
    torch_dtype = TORCH_DTYPES[dtype]
    error = 0.0
    for layer in range(geo.num_layers):
        # K then V of each sequence: [2, n, 2 KV heads, 64]
        kvs = [torch.randn(2, n, 2, 64, generator=gen).to(torch_dtype) for n in lengths]
        for cache, (k, v) in zip(caches, kvs):
            write_kv(manager, cache, layer, k, v)
        for decoding in (True, False):
            qs = [
                torch.randn(1 if decoding else n, num_heads, 64, generator=gen).to(torch_dtype)
                for n in lengths
            ]
            paged = paged_attention(manager, caches, layer, qs)
            for out, (k, v), q in zip(paged, kvs, qs):
                want = contiguous_attention(k, v, q)
                error = max(error, float((out.cpu().float() - want.float()).abs().max()))
    return {"max_abs_error": error, "pages": {c.request_id: list(c.pages) for c in caches}}
