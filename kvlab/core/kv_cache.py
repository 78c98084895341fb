"""KVCache: the record of one sequence's pages, resized in the native check order (native
``KvCache::resize``, cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/kvCache.cpp;
REFERENCE.md §3): history checks, then ``_checkPageIndexBufferCapacity`` (PageIndexTooShort,
before any allocation), then the pages, all or none (False). Its manager moves the pages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kvlab.core.checks import check_int

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from kvlab.core.page_index import PageIndexTable

#: The native messages, verbatim (issue #21470's traceback; ``std::invalid_argument``).
PAGE_INDEX_TOO_SHORT_MESSAGE = "User-provided base page indices is too short"
HISTORY_DECREASED_MESSAGE = "History length cannot be decreased"
HISTORY_ABOVE_CAPACITY_MESSAGE = "History length cannot exceed capacity"


class PageIndexTooShort(ValueError):
    """The native resize's ValueError: the row is narrower than the pages the new capacity
    needs. ``str(exc)`` is the native message; a note and the attributes give the numbers."""

    def __init__(self, needed_entries: int, available_entries: int, request_id: str = ""):
        super().__init__(PAGE_INDEX_TOO_SHORT_MESSAGE)
        self.needed_entries = needed_entries
        self.available_entries = available_entries
        self.request_id = request_id
        if request_id:
            self.add_note(
                f"kvlab: while resizing request {request_id!r}: it needs "
                f"{needed_entries:,} page-index entries, the row has {available_entries:,}"
            )


class CacheOwner(Protocol):
    """What a cache asks of its manager (kvlab.core.manager.KVCacheManager)."""

    page_index: PageIndexTable

    @property
    def tokens_per_block(self) -> int: ...
    def blocks_for(self, capacity: int, request_id: str) -> int: ...
    def grow(self, caches: list[KVCache], blocks: list[int]) -> bool: ...
    def shrink(self, cache: KVCache, keep: int) -> None: ...
    def suspend_cache(self, cache: KVCache) -> None: ...
    def resume_cache(self, cache: KVCache) -> bool: ...
    def release(self, cache: KVCache) -> None: ...


@dataclass(slots=True, eq=False)
class KVCache:
    """One sequence's pages (the first ``committed`` held in the prefix cache, the rest its own),
    its page-index ``slot``, capacity and history in tokens, and while suspended to the tier
    below, the bytes of its pages (``host_copy``)."""

    request_id: str
    slot: int
    manager: CacheOwner
    pages: list[int] = field(default_factory=list)
    committed: int = 0
    capacity: int = 0
    history_length: int = 0
    suspended: bool = False
    host_copy: torch.Tensor | None = None
    freed: bool = False

    def _check_live(self) -> None:
        if self.freed:
            raise RuntimeError(
                f"cache {self.request_id!r} was freed (KVCacheManager.free): its page-index slot "
                f"{self.slot} may belong to another cache now; ask the manager for it again"
            )

    @property
    def num_blocks(self) -> int:
        """Pages held on the device (0 once suspended to the tier below)."""
        return len(self.pages)

    @property
    def suspended_blocks(self) -> int:
        """Pages held in the tier below."""
        return 0 if self.host_copy is None else self.host_copy.shape[0]

    @property
    def is_active(self) -> bool:
        return not self.suspended

    @property
    def page_indices(self) -> torch.Tensor:
        """The user-provided base page indices: this cache's row of the table (a view)."""
        self._check_live()
        return self.manager.page_index.row(self.slot)

    def resize(self, capacity: int, history_length: int | None = None) -> bool:
        """Grow or shrink to ``capacity`` tokens in the native check order (module docstring)."""
        self._check_live()
        capacity = check_int("capacity", capacity)
        history = self.history_length
        if history_length is not None:
            history = check_int("history_length", history_length)
            if history < self.history_length:
                raise ValueError(HISTORY_DECREASED_MESSAGE)
        if history > capacity:
            raise ValueError(HISTORY_ABOVE_CAPACITY_MESSAGE)
        if self.suspended:
            raise RuntimeError(f"cache {self.request_id!r} is suspended; resume it before resizing")
        blocks = self.manager.blocks_for(capacity, self.request_id)
        held = len(self.pages)
        if blocks < held:
            self.manager.shrink(self, blocks)
        elif blocks > held and not self.manager.grow([self], [blocks]):
            return False
        self.capacity = capacity
        self.history_length = history
        return True

    def grow_within_pages(self, num_tokens: int) -> bool:
        """``resize(capacity + num_tokens)`` when the pages held cover it (True); else nothing
        changes (False)."""
        self._check_live()
        capacity = self.capacity + check_int("num_tokens", num_tokens)
        if self.suspended or capacity > self.num_blocks * self.manager.tokens_per_block:
            return False
        self.capacity = capacity
        return True

    def suspend(self) -> None:
        self._check_live()
        self.manager.suspend_cache(self)

    def resume(self) -> bool:
        self._check_live()
        return self.manager.resume_cache(self)

    def release(self) -> None:
        """Give back every page, on the device or below; the cache ends empty."""
        self._check_live()
        self.manager.release(self)

    def __repr__(self) -> str:
        where = f"{self.num_blocks} pages" + (", suspended in place" if self.suspended else "")
        if self.host_copy is not None:
            where = f"suspended, {self.suspended_blocks} pages in the host tier"
        return f"KVCache({self.request_id!r}, capacity={self.capacity}, {where})"
