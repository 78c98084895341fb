"""kvlab.core.paged_attention: K and V go into the pages the row names, and paged attention through
the row equals attention over a contiguous cache; the row's entries are really what is read."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kvlab import KVCacheManager, KVGeometry
from kvlab.core.paged_attention import (
    contiguous_attention,
    gather_kv,
    kv_pages,
    paged_attention,
    paged_vs_contiguous,
    write_kv,
)

LENGTHS = (5, 30, 17)
HEADS, KV_HEADS, HEAD_DIM, TPB, LAYERS = 6, 2, 16, 8, 3


def build(dtype="float32", lengths=LENGTHS, seed=0):
    """Caches grown one page at a time in turn (interleaved pages), K and V written for every
    layer. Returns the manager, caches and the written [(k, v) per cache] per layer."""
    geo = KVGeometry(
        num_layers=LAYERS,
        num_kv_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        dtype=dtype,
        tokens_per_block=TPB,
    )
    mgr = KVCacheManager(
        geo, quota_bytes=16 * geo.bytes_per_block, max_seq_len=64, max_batch_size=len(lengths)
    )
    caches = [mgr.create_cache(f"r{i}") for i in range(len(lengths))]
    for step in range(max(lengths) // TPB + 1):
        for cache, n in zip(caches, lengths):
            cache.resize(min(n, (step + 1) * TPB))
    gen = torch.Generator().manual_seed(seed)
    written = []
    for layer in range(LAYERS):
        kvs = [
            (
                torch.randn(n, KV_HEADS, HEAD_DIM, generator=gen),
                torch.randn(n, KV_HEADS, HEAD_DIM, generator=gen),
            )
            for n in lengths
        ]
        for cache, (k, v) in zip(caches, kvs):
            write_kv(mgr, cache, layer, k, v)
        written.append(kvs)
    return mgr, caches, written


def queries(counts, seed=1, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, HEADS, HEAD_DIM, generator=gen).to(dtype) for n in counts]


def test_pages_interleave_so_no_sequence_is_contiguous():
    mgr, caches, _ = build()
    assert caches[1].pages == [1, 3, 5, 7]
    assert caches[1].page_indices[:4].tolist() == caches[1].pages
    mgr.check_invariants()


def test_write_lands_where_the_row_says():
    mgr, caches, written = build()
    pages = kv_pages(mgr)
    assert pages.shape == (16, LAYERS, 2, TPB, KV_HEADS, HEAD_DIM)
    cache, (k, v) = caches[1], written[2][1]
    for token in (0, 7, 8, 29):
        page = int(cache.page_indices[token // TPB])
        assert torch.equal(pages[page, 2, 0, token % TPB], k[token])
        assert torch.equal(pages[page, 2, 1, token % TPB], v[token])


@pytest.mark.parametrize("layer", range(LAYERS))
@pytest.mark.parametrize("mode", ["decode", "prefill", "chunk"])
def test_paged_equals_contiguous_for_every_sequence(layer, mode):
    mgr, caches, written = build()
    counts = {"decode": [1] * 3, "prefill": list(LENGTHS), "chunk": [3, 4, 5]}[mode]
    qs = queries(counts)
    outs = paged_attention(mgr, caches, layer, qs)
    for out, q, (k, v), cache in zip(outs, qs, written[layer], caches):
        assert out.shape == q.shape
        got_k, got_v = gather_kv(mgr, cache, layer)
        assert torch.equal(got_k, k) and torch.equal(got_v, v)
        torch.testing.assert_close(out, contiguous_attention(k, v, q), rtol=1e-5, atol=1e-5)


def test_shorter_lengths_read_a_prefix():
    mgr, caches, written = build()
    qs = queries([1, 1, 1])
    outs = paged_attention(mgr, caches, 0, qs, lengths=[3, 9, 17])
    for out, q, (k, v), n in zip(outs, qs, written[0], [3, 9, 17]):
        torch.testing.assert_close(out, contiguous_attention(k[:n], v[:n], q))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_worked_check_matches_in_every_float_dtype(dtype, device):
    result = paged_vs_contiguous(device=device, dtype=dtype)
    assert result["max_abs_error"] <= (1e-3 if device == "cpu" else 1e-2)  # GPU kernels round more
    assert result["pages"]["seq-0"] == [0, 3, 5]


def test_contiguous_attention_matches_torch_sdpa_with_gqa():
    gen = torch.Generator().manual_seed(3)
    k, v = torch.randn(2, 11, KV_HEADS, HEAD_DIM, generator=gen)
    q = torch.randn(11, HEADS, HEAD_DIM, generator=gen)
    want = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True
    ).transpose(0, 1)
    torch.testing.assert_close(contiguous_attention(k, v, q), want, rtol=1e-5, atol=1e-5)
    last = F.scaled_dot_product_attention(
        q[-1:].transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), enable_gqa=True
    ).transpose(0, 1)
    torch.testing.assert_close(contiguous_attention(k, v, q[-1:]), last, rtol=1e-5, atol=1e-5)


def test_swapping_two_row_entries_reorders_the_keys_and_restoring_fixes_it():
    mgr, caches, written = build()
    cache, k = caches[1], written[0][1][0]
    decode, prefill = queries([1]), queries([LENGTHS[1]])
    before = [paged_attention(mgr, [cache], 0, q)[0] for q in (decode, prefill)]
    row = cache.page_indices
    row[[0, 1]] = row[[1, 0]].clone()
    got_k, _ = gather_kv(mgr, cache, 0)
    assert torch.equal(got_k[:TPB], k[TPB : 2 * TPB]) and torch.equal(got_k[TPB : 2 * TPB], k[:TPB])
    # one decoding query sees every key: the same set in another order gives the same output;
    # a causal prefill's early queries now see other keys
    torch.testing.assert_close(paged_attention(mgr, [cache], 0, decode)[0], before[0])
    assert not torch.allclose(paged_attention(mgr, [cache], 0, prefill)[0], before[1])
    row[[0, 1]] = row[[1, 0]].clone()
    assert torch.equal(paged_attention(mgr, [cache], 0, prefill)[0], before[1])


def test_a_row_pointing_at_another_sequences_page_reads_that_page():
    mgr, caches, written = build()
    q = queries([1])
    before = paged_attention(mgr, caches[:1], 1, q)[0]
    caches[0].page_indices[0] = caches[2].pages[0]
    assert not torch.allclose(paged_attention(mgr, caches[:1], 1, q)[0], before)
    got_k, got_v = gather_kv(mgr, caches[0], 1)
    assert torch.equal(got_k, written[1][2][0][: LENGTHS[0]])
    assert torch.equal(got_v, written[1][2][1][: LENGTHS[0]])


def test_an_unused_entry_where_a_page_is_needed_is_a_clear_error():
    mgr, caches, _ = build()
    caches[1].page_indices[2] = -1
    with pytest.raises(
        ValueError, match=r"row of 'r1' holds -1 at entry 2: not a page of the pool"
    ):
        gather_kv(mgr, caches[1], 0)
    with pytest.raises(ValueError, match="entry 2"):
        write_kv(mgr, caches[1], 0, *torch.zeros(2, 1, KV_HEADS, HEAD_DIM), start=17)


def test_writes_go_to_the_right_page_after_a_resize_and_through_start():
    mgr, caches, written = build()
    cache = caches[0]
    assert cache.resize(12)
    extra = torch.ones(7, KV_HEADS, HEAD_DIM)
    write_kv(mgr, cache, 0, extra, -extra, start=5)
    k, v = gather_kv(mgr, cache, 0)
    assert torch.equal(k[:5], written[0][0][0]) and torch.equal(k[5:], extra)
    assert torch.equal(v[5:], -extra)


@pytest.mark.parametrize("dtype", ["fp8", "nvfp4"])
def test_non_float_kv_dtypes_are_refused(dtype):
    geo = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=16, dtype=dtype, tokens_per_block=8)
    mgr = KVCacheManager(geo, quota_bytes=4 * geo.bytes_per_block, max_seq_len=32, max_batch_size=1)
    cache = mgr.create_cache("r")
    cache.resize(8)
    with pytest.raises(ValueError, match=rf"float KV dtype.*dtype='{dtype}'"):
        write_kv(mgr, cache, 0, torch.zeros(1, 1, 16), torch.zeros(1, 1, 16))


def test_mla_geometry_is_refused():
    geo = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=16, tokens_per_block=8, kv_factor=1)
    mgr = KVCacheManager(geo, quota_bytes=4 * geo.bytes_per_block, max_seq_len=32, max_batch_size=1)
    with pytest.raises(ValueError, match="kv_factor=1"):
        kv_pages(mgr)


def test_worked_check_validates_its_arguments():
    with pytest.raises(ValueError, match="dtype must be one of"):
        paged_vs_contiguous(dtype="fp8")
    with pytest.raises(ValueError, match="num_heads must be a multiple of the 2 KV heads"):
        paged_vs_contiguous(num_heads=3)
    with pytest.raises(ValueError, match="at least one sequence"):
        paged_vs_contiguous(lengths=[])


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(lengths=10**30), TypeError, "lengths must be a sequence of numbers"),
        (dict(lengths="45"), TypeError, "lengths must be a sequence of numbers"),
        (dict(lengths=[45, 0]), ValueError, "lengths[1] must be in [1, "),
        (dict(lengths=[]), ValueError, "lengths must name at least one sequence"),
        (dict(seed=None), TypeError, "seed must be an int in [0, "),
        (dict(seed=10**30), ValueError, "seed must be in [0, "),
        (dict(seed=-1), ValueError, "seed must be in [0, "),
    ],
)
def test_paged_vs_contiguous_names_a_bad_argument(kwargs, error, text):
    with pytest.raises(error) as info:
        paged_vs_contiguous(**kwargs)
    assert text in str(info.value)
