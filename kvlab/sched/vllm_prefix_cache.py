"""vLLM 0.34.0's prefix cache for one full-attention group, as the vLLM peer's committed pages: the
cached blocks of ``BlockPool`` (vllm/v1/core/block_pool.py) and their lookup
(``FullAttentionManager.find_longest_cache_hit``, vllm/v1/core/single_type_kv_cache_manager.py).

A block is cached under the hash of its tokens and every token before it, once it is full
(``cache_full_blocks``); kvlab's manager keeps a cache's cached blocks as its first ``committed``
pages. What :class:`~kvlab.core.prefix_cache.PrefixCache` does with held pages is what vLLM's
free-block queue does with cached ones: ``touch`` is :meth:`hold`; a request's blocks are freed
last first and a cached one no request holds goes to the back of the queue (:meth:`release`);
allocation takes the free blocks no hash names first, then evicts from the queue's front
(the manager's ``_make_room``, then :meth:`evict`). Unlike TensorRT-LLM's tree, vLLM keeps a
block computed twice: both copies stay cached under one hash, the first cached found first.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvlab.core.pool import PagePool
from kvlab.core.prefix_cache import PrefixCache


class VllmPrefixCache(PrefixCache):
    """The cached blocks of a pool by hash (vLLM's ``BlockHashToBlockMap``). Only the holding,
    releasing and least-recently-released queue of PrefixCache are used; its prefix-key lookup
    and commits are TensorRT-LLM's and the peer never calls them."""

    def __init__(self, pool: PagePool, block_size: int):
        super().__init__(pool, block_size, enable_partial_reuse=False)
        #: block hash -> the pages cached under it, the one a lookup finds first
        self._by_hash: dict[int, dict[int, None]] = {}
        self._cached = 0

    @property
    def committed_blocks(self) -> int:
        return self._cached

    def num_evictable(self, pages: Sequence[int]) -> int:
        """How many of ``pages`` no request holds: a hit on one takes it out of the free queue,
        so it counts against the free blocks (``_get_num_evictable_blocks``)."""
        return sum(self._holders[page] == 0 for page in pages)

    def longest_hit(self, hashes: Sequence[int], max_blocks: int) -> list[int]:
        """``find_longest_cache_hit``: a cached page for each of the first ``hashes``, up to the
        first one not cached and at most ``max_blocks`` (``get_cached_block``)."""
        pages = []
        for block_hash in hashes[:max_blocks]:
            cached = self._by_hash.get(block_hash)
            if cached is None:
                break
            pages.append(next(iter(cached)))
        return pages

    def cache(self, pages: Sequence[int], start: int, hashes: Sequence[int]) -> None:
        """``cache_full_blocks``: ``pages[i]``, held by the cache that computed it, is cached
        under ``hashes[i]`` for ``start <= i < len(hashes)``, beside any page cached there."""
        for index in range(start, len(hashes)):
            page, block_hash = pages[index], hashes[index]
            self._by_hash.setdefault(block_hash, {})[page] = None
            self._key[page] = (block_hash, (index + 1) * self.tokens_per_block)
            self._holders[page] = 1
        self._cached += max(0, len(hashes) - start)

    def evict(self, count: int) -> list[int]:
        """The ``count`` cached pages at the free queue's front lose their hash
        (``_maybe_evict_cached_block``) and go back to the pool."""
        freed = [self._evictable.popitem(last=False)[0] for _ in range(max(0, count))]
        for page in freed:
            key = self._key[page]
            assert key is not None, f"evictable page {page} is not cached"
            copies = self._by_hash[key[0]]
            del copies[page]
            if not copies:
                del self._by_hash[key[0]]
            self._key[page] = None
        self._cached -= len(freed)
        self.evictable_blocks -= len(freed)
        self.evicted_blocks += len(freed)
        return freed

    def check_invariants(self, holders: dict[int, int]) -> None:
        """``holders``: cached page -> caches holding it, counted by the manager."""
        assert self.evictable_blocks == len(self._evictable), "the evictable count drifted"
        cached = [
            (page, block_hash) for block_hash, pages in self._by_hash.items() for page in pages
        ]
        assert len(cached) == self._cached == sum(key is not None for key in self._key)
        for page, block_hash in cached:
            key = self._key[page]
            assert key is not None and key[0] == block_hash, f"cached page {page}: hash disagrees"
            assert self.pool.is_allocated(page), f"cached page {page} is free in the pool"
            assert self._holders[page] == holders.get(page, 0), f"cached page {page}: holders"
            assert (self._holders[page] == 0) == (page in self._evictable), page
        assert all(self._key[page] is not None for page in holders), (
            "a cache holds a page the prefix cache does not have"
        )

    def __repr__(self) -> str:
        return (
            f"VllmPrefixCache({self._cached} cached blocks, {self.evictable_blocks} free, "
            f"{self.evicted_blocks} evicted)"
        )
