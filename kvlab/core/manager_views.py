"""What a KVCacheManager shows of itself (its capacity counts, its invariants, its repr) and the
operations only the peers ask of it (vLLM's null block and prefix-cache hit, SGLang's decode
growth and its radix tree's held-back pages); kept beside kvlab.core.manager, off its teaching
path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvlab.core.arith import div_ceil
from kvlab.core.checks import check_int

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from kvlab.core.geometry import KVGeometry
    from kvlab.core.host_tier import HostTier
    from kvlab.core.kv_cache import KVCache
    from kvlab.core.page_index import PageIndexTable
    from kvlab.core.pool import PagePool
    from kvlab.core.prefix_cache import PrefixCache
    from kvlab.core.request import Request


class ManagerViews:
    """Mixed into kvlab.core.manager.KVCacheManager (with its other mixins, BlockReuse and
    Suspension, which read the manager through the names declared here)."""

    geometry: KVGeometry
    pool: PagePool
    prefix_cache: PrefixCache
    host_tier: HostTier
    _caches: dict[str, KVCache]
    _held_back: list[int]
    max_seq_len: int
    configured_max_seq_len: int
    max_blocks_per_seq: int
    page_index_policy: str
    page_index: PageIndexTable
    enable_block_reuse: bool
    block_reuse_policy: str
    max_util_for_resume: float

    if TYPE_CHECKING:  # the manager's own doors

        def allocate_pages(self, count: int) -> list[int] | None: ...
        def _append(self, cache: KVCache, pages: list[int]) -> None: ...
        def shrink(self, cache: KVCache, keep: int) -> None: ...
        def get_cache(self, request: Request | str) -> KVCache: ...
        def blocks_for(self, capacity: int, request_id: str = "") -> int: ...
        def grow(self, caches: list[KVCache], blocks: list[int]) -> bool: ...

    @property
    def device(self) -> torch.device:
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

    has_cache_tier_below_gpu = can_evict

    def max_resident_sequences(self) -> int | None:
        """Sequences that may be resident at once; None = unbounded (attention-only)."""
        return None

    def hold_back(self, count: int) -> list[int]:
        """Take ``count`` pages held outside every cache until :meth:`release_held_back`, as vLLM's
        ``BlockPool`` takes its null block at construction for good
        (vllm/v1/core/block_pool.py)."""
        count = check_int("count", count, high=self.free_blocks)
        pages = self.allocate_pages(count)
        assert pages is not None, "the free pages counted were refused"
        self._held_back += pages
        return pages

    def release_held_back(self, count: int) -> None:
        """Return ``count`` of the pages :meth:`hold_back` took to the pool (SGLang's radix
        cache, which holds its tokens outside every request, evicting some)."""
        count = check_int("count", count, high=len(self._held_back))
        if count:
            self.pool.give_back(self._held_back[-count:])
            del self._held_back[-count:]

    def _cut(self, cache: KVCache, keep: int) -> list[int]:
        """The cache's pages from ``keep`` on, taken out of it and out of its page-index row
        (none: nothing changes); where they go is the caller's business."""
        tail = cache.pages[keep:]
        if tail:
            del cache.pages[keep:]
            self.page_index.clear(cache.slot, keep)
        return tail

    def hand_over(self, cache: KVCache, keep: int, count: int) -> None:
        """The cache's pages from ``keep`` on leave it, the last ``count`` of them held back
        (SGLang's radix cache taking over the KV a request computed), the others given back:
        the pool and the held-back pages end as after ``shrink(cache, keep)`` then
        ``hold_back(count)``, without the round trip through the pool."""
        assert cache.committed <= keep, (cache.committed, keep)
        tail = self._cut(cache, keep)
        assert 0 <= count <= len(tail), (count, len(tail))
        if not tail:
            return
        returned = len(tail) - count
        self.pool.give_back(tail[:returned])
        self._held_back += reversed(tail[returned:])  # as the pool hands them out: top first

    def start_with_committed(self, cache: KVCache, pages: Sequence[int]) -> None:
        """An empty cache starts holding committed ``pages``, its first tokens' KV (vLLM's
        prefix-cache hit: ``touch``ed, then the request's first blocks,
        vllm/v1/core/single_type_kv_cache_manager.py ``add_local_computed_blocks``)."""
        assert cache.num_blocks == 0, f"{cache.request_id!r} holds pages already"
        self.prefix_cache.hold(pages)
        self._append(cache, list(pages))
        cache.committed = len(pages)
        cache.capacity = cache.history_length = len(pages) * self.tokens_per_block

    def grow_each(self, caches: Sequence[KVCache], num_tokens: int = 1) -> bool:
        """Grow every one of ``caches`` by ``num_tokens``, all or none, as SGLang's
        ``prepare_for_decode`` does (sglang/srt/managers/schedule_batch.py)."""
        num_tokens = check_int("num_tokens", num_tokens)
        for cache in caches:
            if self._caches.get(cache.request_id) is not cache or cache.suspended:
                raise ValueError(
                    f"caches: {cache.request_id!r} is not an active cache of this manager"
                )
        per_block = self.tokens_per_block
        blocks = [div_ceil(cache.capacity + num_tokens, per_block) for cache in caches]
        if max(blocks, default=0) > self.max_blocks_per_seq:
            for cache in caches:  # blocks_for raises for the first cache past its row
                self.blocks_for(cache.capacity + num_tokens)
        if not self.grow(list(caches), blocks):
            return False
        for cache in caches:
            cache.capacity += num_tokens
        return True

    def is_request_active(self, request: Request | str) -> bool:
        """The request holds an active (not suspended) cache."""
        request_id = request if isinstance(request, str) else request.request_id
        cache = self._caches.get(request_id)
        return cache is not None and cache.is_active

    def check_invariants(self) -> None:
        """Raise AssertionError unless: pages are conserved (owned by a cache or held back,
        committed, or free), no page is owned twice, and every row holds exactly its cache's
        pages followed by unused entries."""
        owned: list[int] = list(self._held_back)
        holders: dict[int, int] = {}
        for cache in self._caches.values():
            owned += cache.pages[cache.committed :]
            for page in cache.pages[: cache.committed]:
                holders[page] = holders.get(page, 0) + 1
        assert len(owned) == len(set(owned)), "a page is owned by two caches (or held back)"
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
        committed = (  # on the GPU
            prefix_cache.committed_blocks - prefix_cache.host_blocks + prefix_cache.orphaned_blocks
        )
        assert len(owned) + committed + free == self.total_blocks, (
            f"pages not conserved: {len(owned)} owned + {committed} committed (or orphaned) "
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
