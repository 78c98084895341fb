"""Suspension in the manager (the native ``suspend`` and ``resume``, REFERENCE.md §4a): a
suspended cache keeps its pages on the GPU until an allocation needs them; then, while the tier
below has room (kvlab.core.host_tier), their bytes are copied down and the pages given back, and
a resume brings them back into pages of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvlab.core.manager_views import ManagerViews
from kvlab.core.pool import put_pages, take_pages

if TYPE_CHECKING:  # pragma: no cover
    from kvlab.core.kv_cache import KVCache
    from kvlab.core.request import Request


class Suspension(ManagerViews):
    """Mixed into kvlab.core.manager.KVCacheManager, which moves the pages."""

    def suspend(self, request: Request | str) -> None:
        """The scheduler's ``suspend`` of a request's cache (:meth:`suspend_cache`)."""
        self.suspend_cache(self.get_cache(request))

    def resume(self, request: Request | str) -> bool:
        """The scheduler's ``resume`` of a request's cache (:meth:`resume_cache`)."""
        return self.resume_cache(self.get_cache(request))

    def suspend_cache(self, cache: KVCache) -> None:
        """Native ``suspend``: its pages stay on the GPU until an allocation needs them."""
        if not cache.suspended:
            cache.suspended = True
            if cache.pages:
                self.host_tier.track(cache, next(self.prefix_cache.clock))

    def resume_cache(self, cache: KVCache) -> bool:
        """Native ``resume``: refused (False) above ``max_util_for_resume`` (evictable pages
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
            put_pages(pool.storage, pages, cache.host_copy)
            self.host_tier.give_back(count)
            cache.host_copy = None
            self._append(cache, pages)
        self.host_tier.untrack(cache)
        cache.suspended = False
        return True

    def _move_down(self, cache: KVCache) -> None:
        """Copy a suspended cache's page bytes to the tier below (dropping cached pages there
        to make room) and give the pages back."""
        self.prefix_cache.make_host_room(cache.num_blocks)
        self.host_tier.take(cache)
        cache.host_copy = take_pages(self.pool.storage, cache.pages)
        self.shrink(cache, 0)
