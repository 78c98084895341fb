"""The TensorRT-LLM scheduler's two speed shortcuts, kept off its teaching path behind one
switch, :data:`ENABLED`; each answers exactly as the full path would (tests/sched/test_fast_paths.py
runs both ways and compares everything observable):

- a generation step the pages its cache holds already cover grows in place
  (``KVCache.grow_within_pages``) instead of asking the manager;
- a pending first chunk that is certainly refused is refused from one comparison instead of a
  whole attempt (like the real ``_pending_ctx_certainly_blocked``). Only the pool's
  ``failed_allocations`` counter misses the skipped attempt.
"""

from __future__ import annotations

from kvlab.core.kv_cache import KVCache
from kvlab.core.manager import KVCacheManager
from kvlab.core.request import Request
from kvlab.sched.context_plan import plan_context

#: Off: every step and every pending chunk takes the full path.
ENABLED = True


def grows_within_pages(cache: KVCache, num_tokens: int, tokens_per_block: int) -> bool:
    """The step fits the pages ``cache`` holds, and its capacity grew: ``resize``'s answer when
    no page moves, without the manager's round trip (``KVCache.grow_within_pages`` inline)."""
    if not ENABLED:
        return False
    capacity = cache.capacity + num_tokens
    if cache.suspended or capacity > len(cache.pages) * tokens_per_block:
        return False
    cache.capacity = capacity
    return True


def refusal_window(manager: KVCacheManager) -> tuple[int, int]:
    """(fit, span): a new cache growing to ``fit < tokens <= span`` is certainly refused and
    leaves nothing behind: it needs more pages than are free plus all that suspended caches could
    move down, yet no more than a row holds (more would raise PageIndexTooShort)."""
    extra = manager.num_extra_kv_tokens
    return (
        manager.allocatable_blocks * manager.tokens_per_block - extra,
        manager.page_index_span_tokens - extra,
    )


class CertainRefusal:
    """Refuses, for one pass until it schedules something, each pending first chunk whose
    attempt would be refused: it asks :func:`plan_context` what the attempt would resize by."""

    __slots__ = ("fit", "span", "manager", "budget_left", "chunked", "max_context", "unit")

    def __init__(
        self,
        manager: KVCacheManager,
        budget_left: int | None,
        chunked: bool,
        max_context_length: int | None,
        chunk_unit: int,
    ):
        self.fit, self.span = refusal_window(manager)
        self.manager = manager
        self.budget_left = budget_left
        self.chunked = chunked
        self.max_context = max_context_length
        self.unit = chunk_unit

    def refuses_first_chunk(self, request: Request) -> bool:
        """``request`` holds no cache, cannot reuse, and its plan (not one the budget STOPs)
        certainly is refused."""
        if request.request_id in self.manager.caches or (
            request.prefix_hashes and self.manager.reuses(request)
        ):
            return False
        plan = plan_context(request, self.budget_left, self.chunked, self.max_context, self.unit)
        return plan is not None and self.fit < plan[2] <= self.span


def pending_refusal(
    manager: KVCacheManager,
    budget_left: int | None,
    chunked: bool,
    max_context_length: int | None,
    chunk_unit: int,
    preempts: bool,
) -> CertainRefusal | None:
    """The certain refusal of this point of the pass, or None when off or when an attempt could
    end otherwise than its refusal: a residency cap is checked first, a refusal ``preempts``
    (``_try_preempt_for_pages``), or no page-index slot is free (the attempt answers for it)."""
    if not ENABLED or manager.max_resident_sequences() is not None or preempts:
        return None
    if manager.free_slots == 0:
        return None
    return CertainRefusal(manager, budget_left, chunked, max_context_length, chunk_unit)
