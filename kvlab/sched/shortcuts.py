"""The TensorRT-LLM scheduler's two speed shortcuts, behind one switch, :data:`ENABLED`; each
answers exactly as the full path would (tests/sched/test_fast_paths.py compares both ways):

- a generation step within the pages its cache holds grows in place instead of asking the
  manager (``KVCache.grow_within_pages`` inline);
- a pending first chunk that is certainly refused is refused from one comparison instead of a
  whole attempt (like the real ``_pending_ctx_certainly_blocked``); only the pool's
  ``failed_allocations`` counter misses the skipped attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvlab.core.kv_cache import KVCache
from kvlab.core.manager import KVCacheManager
from kvlab.core.request import Request
from kvlab.sched.context_plan import ContextPlan

#: Off: every step and every pending chunk takes the full path.
ENABLED = True


def grows_within_pages(cache: KVCache, num_tokens: int, tokens_per_block: int) -> bool:
    """Grow ``cache`` by ``num_tokens`` if the pages it holds cover them (``resize``'s answer
    when no page moves); False, changing nothing, otherwise."""
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


@dataclass(slots=True)
class CertainRefusal:
    """Refuses, for one pass until it schedules something, each pending first chunk whose
    attempt would be refused: ``plan`` is what the attempt would plan (the scheduler's
    ``plan_context`` at this point of the pass)."""

    manager: KVCacheManager
    plan: Callable[[Request], ContextPlan | None]
    window: tuple[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self.window = refusal_window(self.manager)

    def refuses_first_chunk(self, request: Request) -> bool:
        """``request`` holds no cache, cannot reuse, and its plan (not one the budget STOPs)
        certainly is refused."""
        if request.request_id in self.manager.caches or (
            request.prefix_hashes and self.manager.reuses(request)
        ):
            return False
        plan = self.plan(request)
        fit, span = self.window
        return plan is not None and fit < plan[2] <= span


def pending_refusal(
    manager: KVCacheManager, plan: Callable[[Request], ContextPlan | None], preempts: bool
) -> CertainRefusal | None:
    """The certain refusal of this point of the pass, or None when off or when an attempt could
    end otherwise than its refusal: a residency cap is checked first, a refusal ``preempts``
    (``_try_preempt_for_pages``), or no page-index slot is free (the attempt answers for it)."""
    if not ENABLED or manager.max_resident_sequences() is not None or preempts:
        return None
    if manager.free_slots == 0:
        return None
    return CertainRefusal(manager, plan)
