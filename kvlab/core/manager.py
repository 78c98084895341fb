"""KVCacheManager: owns the pool, the page-index table, the tier below and the prefix cache,
and alone moves pages between them; clamps max_seq_len.

Mirrors ``KVCacheManagerV2`` (tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py,
REFERENCE.md §2): its construction in order, and the scheduler's calls of the same names
(``prepare_context``, ``resize_context``, ``try_allocate_generation``,
``prepare_disagg_gen_init``, ``suspend``, ``resume``). A PageIndexTooShort goes up uncaught.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Self

import torch

from kvlab.core.arith import div_ceil
from kvlab.core.block_reuse import BlockReuse
from kvlab.core.checks import (
    check_bools,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_param,
)
from kvlab.core.geometry import KVGeometry
from kvlab.core.host_tier import HostTier, lower_tier_bytes
from kvlab.core.kv_cache import KVCache, PageIndexTooShort
from kvlab.core.page_index import WIDTH_POLICIES, PageIndexTable, max_blocks_per_seq, width_seq_len
from kvlab.core.pool import PagePool, pool_blocks, resolve_device
from kvlab.core.prefix_cache import PrefixCache
from kvlab.core.request import Request
from kvlab.core.suspension import Suspension


class MaxSeqLenClampWarning(UserWarning):
    """max_seq_len was larger than the pool can hold and was clamped."""


def _allocate_pool(
    quota_bytes: int, num_blocks: int, bytes_per_block: int, device: torch.device
) -> PagePool:
    """The pool's real storage; torch's refusal (a RuntimeError) becomes a MemoryError."""
    try:
        return PagePool(num_blocks, bytes_per_block, device)
    except RuntimeError as exc:
        if not isinstance(exc, torch.OutOfMemoryError) and "allocate" not in str(exc):
            raise
        raise MemoryError(
            f"quota_bytes={quota_bytes}: the pool of {num_blocks} pages x "
            f"{bytes_per_block} B = {num_blocks * bytes_per_block} bytes cannot be "
            f"allocated on {device}; lower quota_bytes"
        ) from exc


class KVCacheManager(BlockReuse, Suspension):
    """A rank's paged KV cache: pool, page-index table and the caches of its sequences."""

    @classmethod
    def expecting_clamp(cls, *args: Any, **kwargs: Any) -> Self:
        """A manager whose max_seq_len clamp is expected: no MaxSeqLenClampWarning."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MaxSeqLenClampWarning)
            return cls(*args, **kwargs)

    def __init__(
        self,
        geometry: KVGeometry,
        quota_bytes: int,
        max_seq_len: int,
        max_batch_size: int,
        page_index_policy: str = "clamped",
        device: str | torch.device = "cpu",
        pp_size: int = 1,
        num_extra_kv_tokens: int = 0,
        reserved_draft_tokens: int = 0,
        disaggregated: bool = False,
        host_cache_size: int | None = None,
        disk_cache_size: int | None = None,
        max_util_for_resume: float = 0.95,
        overlap_scheduler: bool = False,
        num_reserved_index_slots: int = 1,
        enable_block_reuse: bool = True,
        enable_partial_reuse: bool = True,
        block_reuse_policy: str = "all_reusable",
    ) -> None:
        check_instance("geometry", geometry, KVGeometry)
        quota_bytes = check_param("quota_bytes", quota_bytes)
        max_seq_len = check_param("max_seq_len", max_seq_len)
        max_batch_size = check_param("max_batch_size", max_batch_size)
        policy = check_choice("page_index_policy", page_index_policy, WIDTH_POLICIES)
        check_bools(
            enable_block_reuse=enable_block_reuse, enable_partial_reuse=enable_partial_reuse
        )
        self.enable_block_reuse = enable_block_reuse
        #: ``BlockReuseConfig.policy``: when a context's pages are committed for reuse
        self.block_reuse_policy = check_choice(
            "block_reuse_policy", block_reuse_policy, ("all_reusable", "per_request")
        )
        self.geometry = geometry
        self.quota_bytes = quota_bytes
        self.page_index_policy = policy
        self.num_extra_kv_tokens = check_param("num_extra_kv_tokens", num_extra_kv_tokens)
        self.reserved_draft_tokens = check_param("reserved_draft_tokens", reserved_draft_tokens)
        device = resolve_device(device)

        total_blocks = pool_blocks(quota_bytes, geometry.bytes_per_block, geometry.tokens_per_block)
        # 1. the longest sequence the pool holds (get_num_available_tokens; GPU pages only)
        self.max_num_tokens = total_blocks * geometry.tokens_per_block - self.num_extra_kv_tokens
        if self.max_num_tokens < 1:
            raise ValueError(
                f"quota_bytes={quota_bytes} holds {total_blocks} page(s) of "
                f"{geometry.tokens_per_block} tokens, no more than the "
                f"num_extra_kv_tokens={self.num_extra_kv_tokens}"
            )
        # 2. the clamp
        self.configured_max_seq_len = max_seq_len
        self.max_seq_len = max_seq_len
        if max_seq_len > self.max_num_tokens:
            warnings.warn(
                f"max_seq_len={max_seq_len:,} is larger than the KV cache can hold "
                f"({self.max_num_tokens:,} tokens in {total_blocks:,} blocks); "
                f"clamping max_seq_len to {self.max_num_tokens:,}",
                MaxSeqLenClampWarning,
                stacklevel=2,
            )
            self.max_seq_len = self.max_num_tokens
        # 3. the page-index width, by policy
        seq_len = width_seq_len(policy, max_seq_len, self.max_seq_len)
        self.max_blocks_per_seq = max_blocks_per_seq(
            seq_len, geometry.tokens_per_block, self.num_extra_kv_tokens, self.reserved_draft_tokens
        )
        # 4. the table, then the pool's real storage
        self.page_index = PageIndexTable(
            max_batch_size,
            self.max_blocks_per_seq,
            pp_size=pp_size,
            disaggregated=disaggregated,
            overlap_scheduler=overlap_scheduler,
            num_reserved=num_reserved_index_slots,
            pin_memory=device.type == "cuda",
        )
        self.max_batch_size = max_batch_size
        self.pool = _allocate_pool(quota_bytes, total_blocks, geometry.bytes_per_block, device)
        # 5. the tier below the GPU (None: the automatic host tier), then block reuse
        self.max_util_for_resume = check_float(
            "max_util_for_resume", max_util_for_resume, low=0.0, high=1.0, low_open=True
        )
        self.host_tier = HostTier(
            lower_tier_bytes(host_cache_size, disk_cache_size, quota_bytes)
            // geometry.bytes_per_block
        )
        self.prefix_cache = PrefixCache(
            self.pool,
            geometry.tokens_per_block,
            enable_partial_reuse and enable_block_reuse,
            self.host_tier,
        )
        self._caches: dict[str, KVCache] = {}
        self._held_back: list[int] = []  # pages held outside every cache (:meth:`hold_back`)
        #: The live caches by request id, read-only.
        self.caches: Mapping[str, KVCache] = MappingProxyType(self._caches)

    # -- moving pages: the one door of the pool ------------------------------------------
    def blocks_for(self, capacity: int, request_id: str = "") -> int:
        """Pages ``capacity`` tokens take; PageIndexTooShort when the row is narrower (the
        native ``_checkPageIndexBufferCapacity``, before any allocation)."""
        blocks = div_ceil(capacity, self.tokens_per_block)
        if blocks > self.max_blocks_per_seq:
            raise PageIndexTooShort(blocks, self.max_blocks_per_seq, request_id)
        return blocks

    def _make_room(self, count: int) -> None:
        """Free ``count`` pages where too few are: evict cached pages no cache holds and move
        suspended caches down, least recently released or suspended first (upstream's one
        eviction queue, kvlab.core.host_tier); nothing moves when that cannot do."""
        pool, cached = self.pool, self.prefix_cache
        shortfall = count - pool.free_blocks
        if shortfall <= 0:
            return
        if self.host_tier.blocks_on_gpu:
            movers = self.host_tier.choose(
                shortfall, cached.release_ticks(), cached.pinned_host_blocks
            )
            if movers is None:
                return
            for cache in movers:
                self._move_down(cache)
        elif shortfall > cached.evictable_blocks:
            return
        if count > pool.free_blocks:  # a cache that moved down may have freed shared pages
            pool.give_back(cached.evict(min(count - pool.free_blocks, cached.evictable_blocks)))

    def allocate_pages(self, count: int) -> list[int] | None:
        """``count`` pages after :meth:`_make_room`; None when too few."""
        self._make_room(count)
        return self.pool.allocate(count)

    def grow(self, caches: list[KVCache], blocks: list[int]) -> bool:
        """Give each cache ``blocks`` pages, taking those they lack in one allocation, all or
        none: False, nothing changed, when the pool cannot make enough."""
        needs = [count - len(cache.pages) for cache, count in zip(caches, blocks)]
        total = sum(needs)
        if not total:
            return True
        self._make_room(total)
        pages = self.pool.allocate(total)
        if pages is None:
            return False
        self.append_pages(caches, needs, pages)
        return True

    def append_pages(self, caches: list[KVCache], needs: list[int], pages: list[int]) -> None:
        """Append ``needs[i]`` of the allocated ``pages`` to cache i, in order; one table write."""
        if len(caches) == 1:
            self._append(caches[0], pages)
            return
        starts = [len(cache.pages) for cache in caches]
        taken = 0
        for cache, need in zip(caches, needs):
            cache.pages += pages[taken : taken + need]
            taken += need
        self.page_index.write_runs([cache.slot for cache in caches], starts, needs, pages)

    def shrink(self, cache: KVCache, keep: int) -> None:
        """Give back the cache's pages from ``keep`` on: committed ones to the prefix cache
        (held no more), the rest to the pool."""
        tail = self._cut(cache, keep)
        if not tail:
            return
        held = cache.committed - keep
        if held > 0:
            tail = self.prefix_cache.release(tail[:held]) + tail[held:]
            cache.committed = keep
        self.pool.give_back(tail)

    def _append(self, cache: KVCache, pages: list[int]) -> None:
        self.page_index.write(cache.slot, len(cache.pages), pages)
        cache.pages.extend(pages)

    def release(self, cache: KVCache) -> None:
        """Give back every page of the cache, on the device or below; it ends empty."""
        self.host_tier.untrack(cache)
        self.shrink(cache, 0)
        self.host_tier.give_back(cache.suspended_blocks)
        cache.host_copy = None
        cache.suspended = False
        cache.capacity = cache.history_length = 0

    # -- caches -------------------------------------------------------------------------
    def create_cache(self, request_id: str) -> KVCache:
        """A new, empty cache on a free page-index slot."""
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id must be a non-empty str, got {request_id!r}")
        if request_id in self._caches:
            raise ValueError(f"request_id {request_id!r} already has a cache")
        cache = KVCache(request_id, self.page_index.acquire_slot(), self)
        self._caches[request_id] = cache
        return cache

    def get_cache(self, request: Request | str) -> KVCache:
        """The live cache of a request (or request id); KeyError when it has none."""
        if not isinstance(request, (Request, str)):
            raise TypeError(f"request must be a Request or a request id, got {request!r:.60}")
        request_id = request if isinstance(request, str) else request.request_id
        if request_id not in self._caches:
            raise KeyError(f"no cache for request {request_id!r}")
        return self._caches[request_id]

    def free(self, request: Request | KVCache | str) -> None:
        """Release a cache: its pages (device or host) and its page-index slot."""
        cache = request if isinstance(request, KVCache) else self.get_cache(request)
        if self._caches.get(cache.request_id) is not cache:  # else its slot may be another's now
            raise KeyError(f"cache {cache.request_id!r} is not a live cache of this manager")
        self.release(cache)
        cache.freed = True
        self.page_index.release_slot(cache.slot)
        del self._caches[cache.request_id]

    # -- what the scheduler asks ---------------------------------------------------------
    def prepare_context(self, request: Request) -> bool:
        """The real ``prepare_context``: the request's cache, created (reusing a cached prefix)
        or resumed; False when no page-index row is free or it cannot resume."""
        cache = self._caches.get(request.request_id)
        if cache is not None:
            return self.resume_cache(cache)
        if self.page_index.free_slots == 0:
            return False
        cache = self.create_cache(request.request_id)
        if self.reuses(request) and request.context_current_position == 0:
            self._reuse_prefix(cache, request)
        return True

    def update_context(self, request: Request) -> None:
        """The context ran up to ``context_current_position`` (the real
        ``update_context_resources``): the history advances, computed prompt pages are committed."""
        cache = self._caches.get(request.request_id)
        if cache is None or cache.suspended:  # suspended since it ran: the next pass resumes it
            return
        cache.history_length = max(cache.history_length, request.context_current_position)
        if self.reuses(request):
            self._commit(cache, request)

    def resize_context(self, request: Request, num_tokens: int) -> bool:
        """The real ``resize_context``: grow the cache to hold the next ``num_tokens`` context
        tokens and the extra KV tokens; on False a first chunk's cache is suspended."""
        num_tokens = check_int("num_tokens", num_tokens)
        cache = self.get_cache(request)
        target = request.context_current_position + num_tokens + self.num_extra_kv_tokens
        if cache.resize(max(cache.capacity, target)):
            return True
        if request.is_first_context_chunk:
            self.suspend_cache(cache)
        return False

    def try_allocate_generation(self, request: Request) -> bool:
        """The real ``try_allocate_generation``: resume the cache if suspended, then grow it by
        one token plus the draft tokens."""
        cache = self.get_cache(request)
        if cache.suspended and not self.resume_cache(cache):
            return False
        return cache.resize(cache.capacity + 1 + request.num_draft_tokens)

    def prepare_disagg_gen_init(self, request: Request) -> bool:
        """The real ``prepare_disagg_gen_init``: a cache for the transferred context (+ drafts,
        + extra tokens), history the prompt; refused or raising, the cache is freed."""
        if request.request_id not in self._caches:
            if self.page_index.free_slots == 0:
                return False
            self.create_cache(request.request_id)
        cache = self._caches[request.request_id]
        target = request.prompt_len + request.num_draft_tokens + self.num_extra_kv_tokens
        try:
            fitted = cache.resize(max(cache.capacity, target), request.prompt_len)
        except PageIndexTooShort:
            self.free(cache)
            raise
        if not fitted:
            self.free(cache)
        return fitted

    def reject_draft_tokens(self, request: Request) -> None:
        """Every draft token of the step was rejected: the slots reserved for them go back."""
        if request.num_draft_tokens:
            cache = self.get_cache(request)
            cache.resize(cache.capacity - request.num_draft_tokens)
