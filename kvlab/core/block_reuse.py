"""Block reuse in the manager (``KvCacheConfig.enable_block_reuse``, REFERENCE.md §10): a new
cache starts holding the longest committed prefix of its prompt (its pages in the tier below
brought back up), and a context's computed prompt pages are committed for other prompts to reuse
(kvlab.core.prefix_cache keeps them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvlab.core.manager_views import ManagerViews
from kvlab.core.request import Request

if TYPE_CHECKING:  # pragma: no cover
    from kvlab.core.kv_cache import KVCache
    from kvlab.core.prefix_cache import BlockKey


class BlockReuse(ManagerViews):
    """Mixed into kvlab.core.manager.KVCacheManager, which moves the pages."""

    def reuses(self, request: Request) -> bool:
        """Block reuse is on and the request's prompt has an identity to match."""
        return self.enable_block_reuse and bool(request.prefix_hashes)

    def probe_first_new_block_key(self, request: Request) -> BlockKey | None:
        """The key of the first whole prompt page not committed yet (None: reuse off, no
        hashes, or none left): the real ``probe_first_new_block_key``. The walk starts past
        the pages the request's cache committed itself."""
        if not self.reuses(request):
            return None
        cache = self._caches.get(request.request_id)
        return self.prefix_cache.first_new_key(request, 0 if cache is None else cache.committed)

    def _reuse_prefix(self, cache: KVCache, request: Request) -> None:
        """Hold the committed prefix (its pages below come back up) and copy the partial match
        into a page of the cache's own; what finds no GPU page is not reused."""
        prefix_cache = self.prefix_cache
        match = prefix_cache.match(request, request.context_len - 1)
        pages, tokens, partial = match.pages, match.tokens, match.partial
        prefix_cache.hold(pages)
        below = [index for index, page in enumerate(pages) if prefix_cache.is_below(page)]
        if below:  # upstream's resume locks them to the GPU (batched_lock_to_gpu)
            fresh = self.allocate_pages(len(below))
            if fresh is None:  # the prefix before the first page below only
                prefix_cache.release(pages[below[0] :])
                del pages[below[0] :]
                tokens, partial = len(pages) * self.tokens_per_block, None
            else:
                prefix_cache.move_up([pages[index] for index in below], fresh)
                for index, page in zip(below, fresh):
                    pages[index] = page
        cache.committed = len(pages)
        if partial is not None:
            prefix_cache.hold([partial])  # not evicted to make room for its own copy
            copy = self.allocate_pages(1)
            if copy is None:  # no page to copy into: the whole pages only
                tokens -= match.partial_tokens
            else:
                self.pool.storage[copy[0]].copy_(prefix_cache.page_bytes(partial))
                pages = pages + copy
            prefix_cache.release([partial])
        if pages:
            self._append(cache, pages)
            cache.capacity = cache.history_length = tokens
        request.context_current_position = request.prepopulated_prompt_len = tokens

    def _commit(self, cache: KVCache, request: Request) -> None:
        """Commit the prompt pages computed so far: after every chunk under "all_reusable" (the
        real default), else once the context is complete; a page computed twice is given up
        for the tree's ("rebasing"); a partial page a longer one replaced, held by no cache,
        goes back to the pool."""
        finished = request.is_context_finished
        if not (finished or self.block_reuse_policy == "all_reusable"):
            return
        cache.committed, rebased, replaced = self.prefix_cache.commit(
            cache.pages, cache.committed, request, request.context_current_position, finished
        )
        self.pool.give_back(replaced)
        for index, page in rebased:
            self.pool.give_back([cache.pages[index]])
            cache.pages[index] = page
            self.page_index.write(cache.slot, index, [page])
