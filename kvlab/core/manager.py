"""KVCacheManager: owns the pool, the page-index table, the tier below and the prefix cache,
and alone moves pages between them; clamps max_seq_len.

Mirrors ``KVCacheManagerV2`` (tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py,
REFERENCE.md §2): its construction in order (the longest sequence the pool holds, the clamp, the
page-index width by policy, the table, the tier below: ``host_cache_size`` None is the automatic
host tier, 0 none) and the scheduler's calls of the same names (``prepare_context``,
``resize_context``, ``try_allocate_generation``, ``prepare_disagg_gen_init``, ``suspend``,
``resume``). A PageIndexTooShort goes up uncaught, tagged with its request.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import torch

from kvlab.core.arith import div_ceil
from kvlab.core.checks import MAX_COUNT, check_choice, check_int, check_param
from kvlab.core.geometry import KVGeometry
from kvlab.core.host_tier import HostTier, lower_tier_bytes
from kvlab.core.kv_cache import KVCache, PageIndexTooShort
from kvlab.core.page_index import WIDTH_POLICIES, PageIndexTable, max_blocks_per_seq, width_seq_len
from kvlab.core.pool import MAX_POOL_BLOCKS, PagePool, resolve_device
from kvlab.core.prefix_cache import PrefixCache
from kvlab.core.request import Request

#: ``BlockReuseConfig.policy`` values: when a context's pages are committed for reuse.
BLOCK_REUSE_POLICIES = ("all_reusable", "per_request")


class MaxSeqLenClampWarning(UserWarning):
    """max_seq_len was larger than the pool can hold and was clamped."""


def _tag(exc: PageIndexTooShort, request: Request) -> None:
    """Name the request a PageIndexTooShort hit (``str(exc)`` stays the native message)."""
    exc.request_id = request.request_id
    exc.add_note(
        f"kvlab: while resizing request {request.request_id!r}: it needs "
        f"{exc.needed_entries:,} page-index entries, the row has {exc.available_entries:,}"
    )


def _allocate_pool(quota_bytes: int, num_blocks: int, bytes_per_block: int, device) -> PagePool:
    """The pool's real storage; torch's refusal to allocate it becomes a MemoryError that names
    quota_bytes (torch raises a RuntimeError on the CPU, OutOfMemoryError on CUDA)."""
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


class KVCacheManager:
    """A rank's paged KV cache: pool, page-index table and the caches of its sequences."""

    @classmethod
    def expecting_clamp(cls, *args, **kwargs) -> KVCacheManager:
        """A manager built where the max_seq_len clamp is the point (the seed's experiment,
        sweeps over pools, the ranks): the clamp happens as always, without the
        MaxSeqLenClampWarning that tells a user it did."""
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
        device="cpu",
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
    ):
        if not isinstance(geometry, KVGeometry):
            raise TypeError(f"geometry must be a KVGeometry, got {type(geometry).__name__}")
        quota_bytes = check_param("quota_bytes", quota_bytes)
        max_seq_len = check_param("max_seq_len", max_seq_len)
        max_batch_size = check_param("max_batch_size", max_batch_size)
        # validated here, before the clamp warning, so a bad argument warns nothing
        width_policy = check_choice("page_index_policy", page_index_policy, WIDTH_POLICIES)
        pp_size = check_param("pp_size", pp_size)
        for name, flag in (
            ("disaggregated", disaggregated),
            ("enable_block_reuse", enable_block_reuse),
            ("enable_partial_reuse", enable_partial_reuse),
        ):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r}")
        self.enable_block_reuse = enable_block_reuse
        self.block_reuse_policy = check_choice(
            "block_reuse_policy", block_reuse_policy, BLOCK_REUSE_POLICIES
        )
        self.geometry = geometry
        self.quota_bytes = quota_bytes
        self.page_index_policy = width_policy
        self.num_extra_kv_tokens = check_param("num_extra_kv_tokens", num_extra_kv_tokens)
        self.reserved_draft_tokens = check_param("reserved_draft_tokens", reserved_draft_tokens)
        device = resolve_device(device)

        total_blocks = geometry.blocks_in(quota_bytes)
        if total_blocks == 0:
            raise ValueError(
                f"quota_bytes={quota_bytes} holds no page: one page of "
                f"{geometry.tokens_per_block} tokens takes {geometry.bytes_per_block} bytes"
            )
        if total_blocks > MAX_POOL_BLOCKS:  # before anything is allocated
            raise ValueError(
                f"quota_bytes={quota_bytes} holds {total_blocks} pages of "
                f"{geometry.bytes_per_block} bytes; a pool may have at most "
                f"MAX_POOL_BLOCKS={MAX_POOL_BLOCKS}: lower quota_bytes or raise "
                "tokens_per_block"
            )
        # 1. the longest single sequence the pool holds, in whole blocks, less the extra KV
        #    tokens (get_num_available_tokens; GPU pages only, whatever the comment there says)
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
        self.max_blocks_per_seq = max_blocks_per_seq(
            width_seq_len(page_index_policy, self.configured_max_seq_len, self.max_seq_len),
            geometry.tokens_per_block,
            num_extra_kv_tokens,
            reserved_draft_tokens,
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
        # 5. the tier below the GPU: None provisions the automatic host tier (the real default)
        self.host_cache_size = host_cache_size
        if isinstance(max_util_for_resume, bool) or not (
            isinstance(max_util_for_resume, (int, float)) and 0 < max_util_for_resume <= 1
        ):
            raise ValueError(f"max_util_for_resume must be in (0, 1], got {max_util_for_resume!r}")
        self.max_util_for_resume = float(max_util_for_resume)
        self.host_tier = HostTier(
            lower_tier_bytes(host_cache_size, disk_cache_size, quota_bytes)
            // geometry.bytes_per_block
        )
        # 6. block reuse: every allocation goes through the prefix cache (empty with reuse off)
        self.prefix_cache = PrefixCache(
            self.pool, geometry.tokens_per_block, enable_partial_reuse and enable_block_reuse
        )
        self._caches: dict[str, KVCache] = {}
        #: The live caches by request id, read-only: they change only through this manager.
        self.caches: Mapping[str, KVCache] = MappingProxyType(self._caches)

    # -- capacity -----------------------------------------------------------------------
    @property
    def device(self):
        return self.pool.device

    @property
    def total_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def free_blocks(self) -> int:
        """Pages an allocation may take without moving a cache: free ones and cached ones no
        cache holds (evictable; the real manager counts them as available too)."""
        return self.pool.free_blocks + self.prefix_cache.evictable_blocks

    @property
    def allocatable_blocks(self) -> int:
        """At most this many pages an allocation could get now: the free ones plus those
        suspended caches could move to the tier below (an upper bound)."""
        return self.free_blocks + self.host_tier.movable_blocks

    @property
    def free_slots(self) -> int:
        """Page-index rows free for a new cache."""
        return self.page_index.free_slots

    @property
    def tokens_per_block(self) -> int:
        return self.geometry.tokens_per_block

    @property
    def page_index_span_tokens(self) -> int:
        """The most tokens one row can address: width * tokens_per_block."""
        return self.max_blocks_per_seq * self.tokens_per_block

    @property
    def can_evict(self) -> bool:
        """A tier below the GPU exists (the real ``len(cache_tiers) > 1``)."""
        return self.host_tier.num_blocks > 0

    @property
    def has_cache_tier_below_gpu(self) -> bool:
        return self.can_evict

    def max_resident_sequences(self) -> int | None:
        """Sequences that may be resident at once; None = unbounded (attention-only)."""
        return None

    # -- moving pages: the one door of the pool ------------------------------------------
    def blocks_for(self, capacity: int) -> int:
        """Pages ``capacity`` tokens take; PageIndexTooShort when the row is narrower (the
        native ``_checkPageIndexBufferCapacity``, before any allocation)."""
        blocks = div_ceil(capacity, self.tokens_per_block)
        if blocks > self.max_blocks_per_seq:
            raise PageIndexTooShort(blocks, self.max_blocks_per_seq)
        return blocks

    def _make_room(self, count: int) -> None:
        """Where fewer than ``count`` pages are free: evict cached pages no cache holds (least
        recently released first), after moving suspended caches' pages down if even those are
        too few; nothing moves when that cannot make enough (REFERENCE.md §10)."""
        pool, cached = self.pool, self.prefix_cache
        shortfall = count - pool.free_blocks - cached.evictable_blocks
        if shortfall > 0:
            movers = self.host_tier.choose(shortfall)
            if movers is None:
                return
            for cache in movers:
                self._move_down(cache)
        if count > pool.free_blocks:  # a cache that moved down may have freed shared pages
            pool.free(cached.evict(min(count - pool.free_blocks, cached.evictable_blocks)))

    def allocate_pages(self, count: int) -> list[int] | None:
        """``count`` pages through the pool's one door (:meth:`_make_room`); None when too few."""
        self._make_room(count)
        return self.pool.allocate(count)

    def grow(self, caches: list[KVCache], blocks: list[int]) -> bool:
        """Give each cache ``blocks`` pages, taking those they lack in one allocation, all or
        none: False, nothing changed, when the pool cannot make enough."""
        needs = [count - cache.num_blocks for cache, count in zip(caches, blocks)]
        total = sum(needs)
        if total:
            self._make_room(total)
            pages = self.pool.allocate(total)
            if pages is None:
                return False
            start = 0
            for cache, need in zip(caches, needs):
                self._append(cache, pages[start : start + need])
                start += need
        return True

    def shrink(self, cache: KVCache, keep: int) -> None:
        """Give back the cache's pages from ``keep`` on: committed ones to the prefix cache
        (held no more), the rest to the pool."""
        tail = cache.pages[keep:]
        del cache.pages[keep:]
        self.page_index.clear(cache.slot, keep)
        held = cache.committed - keep
        if held > 0:
            self.prefix_cache.release(tail[:held])
            tail = tail[held:]
            cache.committed = keep
        self.pool.free(tail)

    def _append(self, cache: KVCache, pages: list[int]) -> None:
        self.page_index.write(cache.slot, cache.num_blocks, pages)
        cache.pages.extend(pages)

    def _move_down(self, cache: KVCache) -> None:
        """Copy a suspended cache's page bytes to the tier below and give the pages back."""
        self.host_tier.take(cache)
        storage = self.pool.storage
        index = torch.tensor(cache.pages, dtype=torch.long, device=storage.device)
        cache.host_copy = storage.index_select(0, index).cpu()
        self.shrink(cache, 0)

    def row(self, cache: KVCache) -> torch.Tensor:
        """A cache's base page indices: a zero-copy view of its row."""
        return self.page_index.row(cache.slot)

    def suspend_cache(self, cache: KVCache) -> None:
        """Make the cache inactive (native ``suspend``); its pages stay on the GPU until an
        allocation needs them and the tier below has room (kvlab.core.host_tier)."""
        if not cache.suspended:
            cache.suspended = True
            if cache.pages:
                self.host_tier.track(cache)

    def resume_cache(self, cache: KVCache) -> bool:
        """Make a suspended cache active again (native ``resume``): refused (False) while the
        GPU's page utilization is above ``max_util_for_resume`` (cached pages no cache holds
        count as free), or when its pages below cannot come back."""
        if not cache.suspended:
            return True
        pool = self.pool
        if pool.used_blocks - self.prefix_cache.evictable_blocks > (
            self.max_util_for_resume * pool.num_blocks
        ):
            return False
        if cache.host_copy is not None:
            count = cache.host_copy.shape[0]
            pages = self.allocate_pages(count)
            if pages is None:
                return False
            storage = pool.storage
            index = torch.tensor(pages, dtype=torch.long, device=storage.device)
            storage.index_copy_(0, index, cache.host_copy.to(storage.device))
            self.host_tier.give_back(count)
            cache.host_copy = None
            self._append(cache, pages)
        self.host_tier.untrack(cache)
        cache.suspended = False
        return True

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
        if not isinstance(request, (Request, str)):
            raise TypeError(f"request must be a Request or a request id, got {request!r:.60}")
        request_id = request if isinstance(request, str) else request.request_id
        try:
            return self._caches[request_id]
        except KeyError:
            raise KeyError(f"no cache for request {request_id!r}") from None

    def free(self, request: Request | KVCache | str) -> None:
        """Release a cache: its pages (device or host) and its page-index slot."""
        cache = request if isinstance(request, KVCache) else self.get_cache(request)
        if self._caches.get(cache.request_id) is not cache:
            # a cache already freed (or another manager's): releasing its slot again would
            # clear the row of whichever cache holds that slot now
            raise KeyError(f"cache {cache.request_id!r} is not a live cache of this manager")
        self.release(cache)
        cache.freed = True
        self.page_index.release_slot(cache.slot)
        del self._caches[cache.request_id]

    def is_request_active(self, request: Request | str) -> bool:
        """The request holds an active (not suspended) cache."""
        request_id = request if isinstance(request, str) else request.request_id
        cache = self._caches.get(request_id)
        return cache is not None and cache.is_active

    # -- what the scheduler asks ---------------------------------------------------------
    def prepare_context(self, request: Request) -> bool:
        """The real ``prepare_context``: the request's cache, created if it has none, active.
        False when no page-index row is free or a suspended cache cannot resume. With block
        reuse a new cache starts holding the longest cached prefix of the prompt less its last
        token (a partially matched page copied into its own); the context starts after it."""
        cache = self._caches.get(request.request_id)
        if cache is not None:
            return self.resume_cache(cache)
        if self.page_index.free_slots == 0:
            return False
        cache = self.create_cache(request.request_id)
        if self.reuses(request) and request.context_current_position == 0:
            self._reuse_prefix(cache, request)
        return True

    def reuses(self, request: Request) -> bool:
        """Block reuse is on and the request's prompt has an identity to match."""
        return self.enable_block_reuse and bool(request.prefix_hashes)

    def probe_first_new_block_key(self, request: Request) -> tuple | None:
        """The key of the first whole prompt page not committed yet (None: reuse off, no
        hashes, or none left): the real ``probe_first_new_block_key``."""
        if not self.reuses(request):
            return None
        return self.prefix_cache.first_new_key(request)

    def _reuse_prefix(self, cache: KVCache, request: Request) -> None:
        prefix_cache = self.prefix_cache
        match = prefix_cache.match(request, request.context_len - 1)
        pages, tokens = match.pages, match.tokens
        prefix_cache.hold(pages)
        cache.committed = len(pages)
        if match.partial is not None:
            prefix_cache.hold([match.partial])  # not evicted to make room for its own copy
            copy = self.allocate_pages(1)
            if copy is None:  # no page to copy into: the whole pages only
                tokens -= match.partial_tokens
            else:
                storage = self.pool.storage
                storage[copy[0]].copy_(storage[match.partial])
                pages = pages + copy
            prefix_cache.release([match.partial])
        if pages:
            self._append(cache, pages)
            cache.capacity = cache.history_length = tokens
        request.context_current_position = request.prepopulated_prompt_len = tokens

    def update_context(self, request: Request) -> None:
        """The context ran up to ``context_current_position`` (the real
        ``update_context_resources``): the history advances, and with block reuse the computed
        prompt pages are committed: after every chunk under "all_reusable" (the default), else
        once the context is complete."""
        cache = self._caches.get(request.request_id)
        if cache is None or cache.suspended:  # suspended since it ran: the next pass resumes it
            return
        position = request.context_current_position
        cache.history_length = max(cache.history_length, position)
        if not self.reuses(request):
            return
        finished = request.is_context_finished
        if finished or self.block_reuse_policy == "all_reusable":
            cache.committed, rebased = self.prefix_cache.commit(
                cache.pages, cache.committed, request, position, finished
            )
            for index, page in rebased:  # computed twice: the tree's page replaces its own
                self.pool.free([cache.pages[index]])
                cache.pages[index] = page
                self.page_index.write(cache.slot, index, [page])

    def resize_context(self, request: Request, num_tokens: int) -> bool:
        """The real ``resize_context``: grow the cache to hold the next ``num_tokens`` context
        tokens and the extra KV tokens; on False a first chunk's cache is suspended."""
        num_tokens = check_int("num_tokens", num_tokens, low=0, high=MAX_COUNT)
        cache = self.get_cache(request)
        target = request.context_current_position + num_tokens + self.num_extra_kv_tokens
        try:
            if cache.resize(max(cache.capacity, target)):
                return True
        except PageIndexTooShort as exc:
            _tag(exc, request)
            raise
        if request.is_first_context_chunk:
            self.suspend_cache(cache)
        return False

    def try_allocate_generation(self, request: Request) -> bool:
        """The real ``try_allocate_generation``: resume the cache if suspended, then grow it by
        one token plus the draft tokens."""
        cache = self.get_cache(request)
        if not self.resume_cache(cache):
            return False
        try:
            return cache.resize(cache.capacity + 1 + request.num_draft_tokens)
        except PageIndexTooShort as exc:
            _tag(exc, request)
            raise

    def grow_each(self, caches: Sequence[KVCache], num_tokens: int = 1) -> bool:
        """Grow every one of ``caches`` (active, this manager's) by ``num_tokens``, all or
        none, each ending as ``resize(capacity + num_tokens)`` leaves it: a decode batch's
        growth, as SGLang's ``prepare_for_decode`` allocates it in one go
        (sglang/srt/managers/schedule_batch.py)."""
        num_tokens = check_int("num_tokens", num_tokens, low=0, high=MAX_COUNT)
        for cache in caches:
            if self._caches.get(cache.request_id) is not cache or cache.suspended:
                raise ValueError(
                    f"caches: {cache.request_id!r} is not an active cache of this manager"
                )
        blocks = [self.blocks_for(cache.capacity + num_tokens) for cache in caches]
        if not self.grow(list(caches), blocks):
            return False
        for cache in caches:
            cache.capacity += num_tokens
        return True

    def prepare_disagg_gen_init(self, request: Request) -> bool:
        """The real ``prepare_disagg_gen_init``: a cache sized for the transferred context, its
        draft tokens and the extra KV tokens, with the prompt as its history. Refused (False)
        or raising, the cache is freed."""
        if request.request_id not in self._caches:
            if self.page_index.free_slots == 0:
                return False
            self.create_cache(request.request_id)
        cache = self._caches[request.request_id]
        target = request.prompt_len + request.num_draft_tokens + self.num_extra_kv_tokens
        try:
            fitted = cache.resize(max(cache.capacity, target), request.prompt_len)
        except PageIndexTooShort as exc:
            _tag(exc, request)
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

    def suspend(self, request: Request | str) -> None:
        self.suspend_cache(self.get_cache(request))

    def resume(self, request: Request | str) -> bool:
        return self.resume_cache(self.get_cache(request))

    # -- checks -------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise AssertionError unless: pages are conserved, no page is owned twice, and every
        row holds exactly its cache's pages followed by unused entries."""
        owned, holders = [], {}
        for cache in self._caches.values():
            owned += cache.pages[cache.committed :]
            for page in cache.pages[: cache.committed]:
                holders[page] = holders.get(page, 0) + 1
        assert len(owned) == len(set(owned)), "a page is owned by two caches"
        prefix_cache = self.prefix_cache
        prefix_cache.check_invariants(holders)
        assert not any(prefix_cache.is_committed(page) for page in owned), (
            "an owned page is committed"
        )
        host = sum(cache.suspended_blocks for cache in self._caches.values())
        assert host == self.host_tier.used_blocks <= self.host_tier.num_blocks, (
            f"the host tier holds {host} pages, accounted {self.host_tier!r}"
        )
        self.host_tier.check_invariants()
        free = self.pool.free_blocks
        assert len(owned) + prefix_cache.committed_blocks + free == self.total_blocks, (
            f"pages not conserved: {len(owned)} owned + {prefix_cache.committed_blocks} committed "
            f"+ {free} free != {self.total_blocks}"
        )
        assert all(self.pool.is_allocated(page) for page in owned), "owned page marked free"
        for cache in self._caches.values():
            row = cache.page_indices.tolist()
            n = cache.num_blocks
            assert row[:n] == cache.pages, f"row of {cache.request_id!r} disagrees with its pages"
            assert all(v == -1 for v in row[n:]), f"row of {cache.request_id!r} has stale entries"

    def __repr__(self) -> str:
        return (
            f"KVCacheManager({self.total_blocks:,} blocks x {self.geometry.bytes_per_block:,} B, "
            f"max_seq_len={self.max_seq_len:,} (configured {self.configured_max_seq_len:,}), "
            f"max_blocks_per_seq={self.max_blocks_per_seq:,} [{self.page_index_policy}], "
            f"device={self.device})"
        )
