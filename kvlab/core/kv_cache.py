"""KVCache: one sequence's pages, resized in the native check order.

Mirrors native ``KvCache::resize(capacity, history)``
(cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/kvCache.cpp), docs/REFERENCE.md §3:

1. history shrinking, then history > capacity: ValueError with the native text
   ("History length cannot be decreased", "History length cannot exceed capacity");
2. same number of blocks as now: True;
3. ``_checkPageIndexBufferCapacity``: a row shorter than ceil(capacity / tokens_per_block)
   raises PageIndexTooShort, BEFORE any allocation, so it raises even when the pool could
   never have satisfied the request;
4. not enough free pages: False, with no side effects;
5. otherwise allocate and return True.

(The older pure-Python core allocated first and checked afterwards; kvlab models the native
order.) The cache's page-index row is a zero-copy view of the manager's table and holds the
real page ids it owns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kvlab.core.arith import div_ceil
from kvlab.core.checks import MAX_COUNT, check_int

if TYPE_CHECKING:  # pragma: no cover
    from kvlab.core.page_index import PageIndexTable
    from kvlab.core.prefix_cache import PrefixCache

#: The native message, verbatim (issue #21470's traceback).
PAGE_INDEX_TOO_SHORT_MESSAGE = "User-provided base page indices is too short"
#: The native resize's history checks, verbatim (``std::invalid_argument``, a ValueError in Python).
HISTORY_DECREASED_MESSAGE = "History length cannot be decreased"
HISTORY_ABOVE_CAPACITY_MESSAGE = "History length cannot exceed capacity"


class PageIndexTooShort(ValueError):
    """The native resize's ValueError: the cache's page-index row is narrower than the pages
    the new capacity needs. ``str(exc)`` is exactly the native message; the numbers are kept
    as attributes."""

    def __init__(self, needed_entries: int, available_entries: int):
        super().__init__(PAGE_INDEX_TOO_SHORT_MESSAGE)
        self.needed_entries = needed_entries
        self.available_entries = available_entries


class KVCache:
    """The pages of one sequence, their page-index row, and its capacity in tokens. Built by
    ``KVCacheManager.create_cache``, which hands it its collaborators: the prefix cache its
    pages come from and go back to (with the pool and the tier below the GPU behind it) and
    the page-index table its row is in. Its first ``committed`` pages are held in the prefix
    cache, possibly shared with other caches; the rest are its own."""

    __slots__ = (
        "request_id",
        "slot",
        "pool",
        "page_index",
        "host_tier",
        "prefix_cache",
        "tokens_per_block",
        "max_util_for_resume",
        "pages",
        "committed",
        "capacity",
        "history_length",
        "suspended",
        "_host_copy",
        "freed",
    )

    def __init__(
        self,
        request_id: str,
        slot: int,
        *,
        prefix_cache: PrefixCache,
        page_index: PageIndexTable,
        tokens_per_block: int,
        max_util_for_resume: float,
    ):
        self.request_id = request_id
        self.slot = slot
        self.prefix_cache = prefix_cache
        self.pool = prefix_cache.pool
        self.page_index = page_index
        self.host_tier = prefix_cache.host_tier
        self.tokens_per_block = tokens_per_block
        self.max_util_for_resume = max_util_for_resume
        self.pages: list[int] = []
        #: the leading pages committed to the prefix cache, held there, not owned
        self.committed = 0
        self.capacity = 0
        self.history_length = 0
        self.suspended = False
        self._host_copy: torch.Tensor | None = None  # page bytes while suspended
        self.freed = False  # set by KVCacheManager.free: the handle may no longer act

    def _check_live(self) -> None:
        if self.freed:
            raise RuntimeError(
                f"cache {self.request_id!r} was freed (KVCacheManager.free): its "
                f"page-index slot {self.slot} may belong to another cache now; "
                "ask the manager for the request's cache again"
            )

    @property
    def num_blocks(self) -> int:
        """Pages held on the device (0 while suspended to the host tier)."""
        return len(self.pages)

    @property
    def page_indices(self) -> torch.Tensor:
        """The user-provided base page indices: this cache's row of the host table."""
        self._check_live()
        return self.page_index.row(self.slot)

    def grow_within_pages(self, num_tokens: int) -> bool:
        """Grow the capacity by ``num_tokens`` if the pages held already cover it (True), else
        change nothing (False): ``resize(capacity + num_tokens)``'s answer whenever no page
        moves, without its checks (a generation step needs a new page once a page's worth of
        tokens). The executor's hot path."""
        if self.freed:
            self._check_live()
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens)
        capacity = self.capacity + num_tokens
        if self.suspended or capacity > len(self.pages) * self.tokens_per_block:
            return False
        self.capacity = capacity
        return True

    def resize(self, capacity: int, history_length: int | None = None) -> bool:
        """Grow or shrink to ``capacity`` tokens in the native check order (module docstring)."""
        self._check_live()
        capacity = check_int("capacity", capacity, low=0, high=MAX_COUNT)
        history = (
            self.history_length
            if history_length is None
            else check_int("history_length", history_length, low=0, high=MAX_COUNT)
        )
        if history < self.history_length:
            raise ValueError(HISTORY_DECREASED_MESSAGE)
        if history > capacity:
            raise ValueError(HISTORY_ABOVE_CAPACITY_MESSAGE)
        if self.suspended:
            raise RuntimeError(f"cache {self.request_id!r} is suspended; resume it before resizing")
        new_blocks = div_ceil(capacity, self.tokens_per_block)
        if new_blocks != self.num_blocks:
            width = self.page_index.width
            if new_blocks > width:
                raise PageIndexTooShort(new_blocks, width)
            if new_blocks < self.num_blocks:
                self._release_tail(new_blocks)
            elif not self._grow(new_blocks - self.num_blocks):
                return False
        self.capacity = capacity
        self.history_length = history
        return True

    def _grow(self, count: int) -> bool:
        pages = self.prefix_cache.allocate(count)
        if pages is None:
            return False
        self._append(pages)
        return True

    def _append(self, pages: list[int]) -> None:
        self.page_index.write(self.slot, self.num_blocks, pages)
        self.pages.extend(pages)

    def _release_tail(self, keep: int) -> None:
        """Give back the pages from ``keep`` on: committed ones to the prefix cache (held no
        more), the others to the pool."""
        tail = self.pages[keep:]
        del self.pages[keep:]
        self.page_index.clear(self.slot, keep)
        held = self.committed - keep
        if held > 0:
            self.prefix_cache.release(tail[:held])
            tail = tail[held:]
            self.committed = keep
        self.pool.free(tail)

    @property
    def is_active(self) -> bool:
        """Not suspended (the real ``is_active``)."""
        return not self.suspended

    def suspend(self) -> None:
        """Make the cache inactive (the native ``suspend``); capacity and history are kept.
        Its pages stay on the GPU, held, until an allocation needs them and the tier below has
        room (kvlab.core.host_tier); with no tier below, suspending frees nothing."""
        self._check_live()
        if self.suspended:
            return
        self.suspended = True
        if self.pages:
            self.host_tier.track(self)

    def move_to_lower_tier(self) -> None:
        """Copy a suspended cache's page bytes down and give the device pages back (called by
        ``HostTier.make_room``, which accounts for the tier's pages)."""
        storage = self.pool.storage
        index = torch.tensor(self.pages, dtype=torch.long, device=storage.device)
        self._host_copy = storage.index_select(0, index).cpu()
        self._release_tail(0)

    def resume(self) -> bool:
        """Make a suspended cache active again (the native ``resume``): refused (False, still
        suspended) while the GPU's page utilization is above the manager's
        ``max_util_for_resume`` (cached pages no cache holds count as free), or when pages
        that moved down cannot come back (they come back into pages of its own)."""
        self._check_live()
        if not self.suspended:
            return True
        pool = self.pool
        used = pool.used_blocks - self.prefix_cache.evictable_blocks
        if used > self.max_util_for_resume * pool.num_blocks:
            return False
        if self._host_copy is not None:
            count = self._host_copy.shape[0]
            pages = self.prefix_cache.allocate(count)
            if pages is None:
                return False
            storage = pool.storage
            index = torch.tensor(pages, dtype=torch.long, device=storage.device)
            storage.index_copy_(0, index, self._host_copy.to(storage.device))
            self.page_index.write(self.slot, 0, pages)
            self.host_tier.give_back(count)
            self.pages = pages
            self._host_copy = None
        self.host_tier.untrack(self)
        self.suspended = False
        return True

    def release(self) -> None:
        """Give back every page, on the device or in the tier below; the cache ends empty."""
        self._check_live()
        self.host_tier.untrack(self)
        self._release_tail(0)
        self.host_tier.give_back(self.suspended_blocks)
        self._host_copy = None
        self.suspended = False
        self.capacity = self.history_length = 0

    @property
    def suspended_blocks(self) -> int:
        """Pages held in the host tier while suspended there."""
        return 0 if self._host_copy is None else self._host_copy.shape[0]

    def __repr__(self) -> str:
        state = (
            f"suspended, {self.suspended_blocks} pages in the host tier"
            if self._host_copy is not None
            else f"{self.num_blocks} pages" + (", suspended in place" if self.suspended else "")
        )
        return f"KVCache({self.request_id!r}, capacity={self.capacity}, {state})"
