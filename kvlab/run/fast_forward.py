"""Fast-forward: the executor loop's passes between two events, applied at once and exactly
(kvlab.run.simulation.Engine's default; ``fast_forward=False`` steps every pass, the teaching
path). [kvlab] No real engine does this: it is how kvlab replays an hour of traffic quickly.

A pass is *steady* when it scheduled every running request for one decode token and nothing
else: no context chunk, pause, preemption, abort, finish or deferral; at most refusals of
waiting or suspended requests (a refused attempt moves nothing: kvlab.core.manager's
``_make_room`` moves pages only when that makes enough room). The passes after a steady pass
repeat it until an event: an arrival, a request's last token (its pass ends the stretch), a
page crossing the free pages cannot cover (nor the cached pages a growth evicts one by one
while no suspended cache competes), or one past the request's page-index row, or
``max_steps``. Within that stretch nothing frees a page and nothing new is handed to the
scheduler, so every refusal repeats (pages only get scarcer), no one else is tried (the budget
that stopped the walk is the same) and every running request grows by one token a pass. The
stretch is applied in one go: tokens and capacities from its length; the pages crossed taken
pass by pass in batch order, as the passes take them (from a heap of next crossings, so the
cost follows the crossings, not requests x passes); the refusal counts; one StepRecord per
pass. The event's own pass is then stepped as usual. Only the pool's ``failed_allocations``
counter, which no result reports, counts the stepped passes' attempts alone.

The passes it does step, a plain Scheduler runs as :class:`_ForwardedScheduler`, which answers
a step within the pages a cache holds and a certainly refused first chunk from one comparison
each, as the full path would answer (kept off the teaching path).

Covered: kvlab.sched.scheduler.Scheduler (TensorRT-LLM's V2 loop) under every admission
policy; stretches for requests of beam width 1 without draft tokens, the refused ones outside
block reuse. Anything else, the vLLM and SGLang peers included, is stepped as usual.
tests/run/test_fast_forward.py holds the two paths to the same results.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from kvlab.core.kv_cache import KVCache
from kvlab.core.request import Request, RequestState
from kvlab.sched.base import ScheduledBatch, SchedulerBase
from kvlab.sched.context_plan import PassBudget, ScheduleAction
from kvlab.sched.scheduler import Scheduler


class Engine(Protocol):
    """What fast-forward reads and drives of kvlab.run.simulation.Engine."""

    scheduler: SchedulerBase
    last_batch: ScheduledBatch | None
    error: BaseException | None
    queue: deque[Request]
    arrivals: list[Request]
    next_arrival: int
    max_num_active_requests: int | None
    check_invariants: bool
    step: int
    iterations: int

    @property
    def num_active(self) -> int: ...
    @property
    def has_pending_arrivals(self) -> bool: ...
    def iterate(self) -> bool: ...
    def _record(self, batch: ScheduledBatch) -> None: ...
    def _produce_token(self, request: Request) -> None: ...
    def _check_invariants(self) -> None: ...


class _ForwardedScheduler(Scheduler):
    """The Scheduler a fast-forwarded run wears (:meth:`FastForward.accelerated`): its stepped
    passes decode the running requests in one sweep and answer a step within a page and a
    certainly refused first chunk from one comparison each, as the full path would."""

    def _schedule_generations(self, budget: PassBudget, batch: ScheduledBatch) -> list[Request]:
        """Phase 1 in one sweep where it can only decode the running requests it reaches one
        token each: no request in flight, beam, draft, disaggregated or suspended decode; room
        in the token budget; each crossing a page within its row, free or cached and evictable
        (no suspended cache competing for the room), none a shrink. Else the walk."""
        if self._inflight:
            return super()._schedule_generations(budget, batch)
        manager = self.manager
        caches, block = manager.caches, manager.tokens_per_block
        decoding: list[Request] = []
        pending: list[Request] = []
        growing: list[KVCache] = []  # the caches crossing into a new page, in batch order
        for request in self._active:
            if request.disagg_generation_init:
                return super()._schedule_generations(budget, batch)
            if len(decoding) >= budget.max_num_requests:
                break  # the walk stops where the requests' budget is full
            if not request.is_context_finished:
                pending.append(request)
                continue
            if (
                request.state is not RequestState.RUNNING
                or request.beam_width != 1
                or request.num_draft_tokens
            ):
                return super()._schedule_generations(budget, batch)
            cache = caches[request.request_id]
            held = len(cache.pages) * block
            if cache.capacity >= held:
                growing.append(cache)
            elif cache.capacity < held - block:
                return super()._schedule_generations(budget, batch)
            decoding.append(request)
        count = len(decoding)
        if (
            (budget.max_num_tokens is not None and count > budget.max_num_tokens)
            or len(growing) > self._room_for_growth()
            or any(len(cache.pages) >= manager.max_blocks_per_seq for cache in growing)
        ):
            return super()._schedule_generations(budget, batch)
        for cache in growing:  # one page each, in batch order, as the walk takes them
            granted = manager.grow([cache], [len(cache.pages) + 1])
            assert granted, "the free pages counted were refused"
        for request in decoding:
            caches[request.request_id].capacity += 1
        batch.generation_requests += decoding
        if decoding:
            batch.beam_width = 1
        budget.num_tokens += count
        budget.num_requests += count
        return pending

    def _room_for_growth(self) -> int:
        """Pages growths one page at a time get: the free ones, and the cached ones each evicts
        as it needs them (``_make_room``) while no suspended cache's pages compete."""
        manager = self.manager
        return manager.pool.free_blocks if manager.host_tier.blocks_on_gpu else manager.free_blocks

    def _try_allocate_generation(self, request: Request) -> bool:
        """A step within the pages the cache holds: ``resize``'s answer when no page moves."""
        cache = self.manager.caches[request.request_id]
        capacity = cache.capacity + 1 + request.num_draft_tokens
        held = len(cache.pages) * self.manager.tokens_per_block
        if not cache.suspended and held - self.manager.tokens_per_block < capacity <= held:
            cache.capacity = capacity
            return True
        return super()._try_allocate_generation(request)

    def _schedule_context(
        self, request: Request, budget: PassBudget, batch: ScheduledBatch, preempted: list[Request]
    ) -> tuple[ScheduleAction, int]:
        """A first chunk whose attempt would be refused is refused without it."""
        if self._certainly_refused(request, budget):
            return ScheduleAction.SKIP, 0
        return super()._schedule_context(request, budget, batch, preempted)

    def _certainly_refused(self, request: Request, budget: PassBudget) -> bool:
        """A first chunk of a request holding no cache and reusing nothing, whose plan needs
        more pages than are free plus all that suspended caches could move down, yet no more
        than a row holds (more raises PageIndexTooShort); not when a residency cap is checked
        first, a refusal preempts (``_try_preempt_for_pages``) or no page-index row is free."""
        manager = self.manager
        if (
            manager.max_resident_sequences() is not None
            or (self.enable_recompute_pause and not manager.has_cache_tier_below_gpu)
            or manager.free_slots == 0
            or not request.is_first_context_chunk
            or request.request_id in manager.caches
            or (request.prefix_hashes and manager.reuses(request))
        ):
            return False
        plan = self._plan_context(request, budget.remaining_tokens)
        if plan is None:
            return False
        extra = manager.num_extra_kv_tokens
        fit = manager.allocatable_blocks * manager.tokens_per_block - extra
        return fit < plan[2] <= manager.page_index_span_tokens - extra


class FastForward:
    """Steps ``engine`` pass by pass, or a whole steady stretch at once where one starts."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @contextmanager
    def accelerated(self) -> Iterator[None]:
        """While it lasts, a plain Scheduler runs as :class:`_ForwardedScheduler`."""
        scheduler = self.engine.scheduler
        if type(scheduler) is not Scheduler:
            yield
            return
        scheduler.__class__ = _ForwardedScheduler
        try:
            yield
        finally:
            scheduler.__class__ = Scheduler

    def advance(self, max_steps: int) -> None:
        """The steady stretch before ``max_steps`` if one starts here, else one stepped pass."""
        if not self._skip_stretch(max_steps):
            self.engine.iterate()

    def _steady_requests(self) -> tuple[list[Request], list[Request]] | None:
        """(decoding, refused) of the last pass if it was steady and the next repeats it."""
        engine = self.engine
        scheduler, batch = engine.scheduler, engine.last_batch
        if type(scheduler) is not _ForwardedScheduler or batch is None or engine.error is not None:
            return None
        if (
            batch.context_requests
            or batch.paused_requests
            or batch.recompute_paused_requests
            or batch.fitting_disagg_gen_init_requests
            or batch.aborted_requests
            or batch.deferred_behind_contributor
            or len(batch.generation_requests) != scheduler.counts[RequestState.RUNNING]
        ):
            return None
        if engine.queue and engine.num_active < (engine.max_num_active_requests or 0):
            return None  # the queue's head is handed over next pass
        decoding = batch.generation_requests
        if not decoding or any(
            r.state is not RequestState.RUNNING
            or r.beam_width != 1
            or r.num_draft_tokens
            or r.first_token_step is None
            for r in decoding
        ):
            return None
        reuse = scheduler.manager.enable_block_reuse
        if any(
            r.state is RequestState.RUNNING
            or r.disagg_generation_init
            or (reuse and r.prefix_hashes)
            for r in batch.refused_requests
        ):
            return None
        return decoding, batch.refused_requests

    def _skip_stretch(self, max_steps: int) -> bool:
        """Apply the steady stretch that starts at the engine's step (False: none starts)."""
        steady = self._steady_requests()
        if steady is None:
            return False
        decoding, refused = steady
        engine = self.engine
        manager = engine.scheduler.manager
        tokens_per_block = manager.tokens_per_block
        row_tokens = manager.max_blocks_per_seq * tokens_per_block
        caches = [manager.caches[r.request_id] for r in decoding]
        # the passes before the next event other than a crossing the pool cannot cover
        limit = max_steps - engine.step
        if engine.has_pending_arrivals:
            limit = min(limit, engine.arrivals[engine.next_arrival].arrival_step - engine.step)
        for request, cache in zip(decoding, caches):  # a last token ends the stretch's last pass
            limit = min(
                limit, request.output_limit - request.num_generated, row_tokens - cache.capacity
            )
        if limit < 1:
            return False
        # the crossings, pass by pass and in batch order, while the free pages (and the cached
        # ones each growth evicts) cover them
        crossings = [
            (cache.num_blocks * tokens_per_block - cache.capacity + 1, order)
            for order, cache in enumerate(caches)
        ]
        crossings = [entry for entry in crossings if entry[0] <= limit]
        heapq.heapify(crossings)
        scheduler = engine.scheduler
        assert isinstance(scheduler, _ForwardedScheduler)
        free = scheduler._room_for_growth()
        taken: list[tuple[int, int]] = []  # (pass, batch order) of each crossing covered
        while crossings and crossings[0][0] <= limit:
            passed, order = heapq.heappop(crossings)
            if len(taken) == free:
                limit = passed - 1  # pass ``passed`` would need a page the pool lacks
                break
            taken.append((passed, order))
            heapq.heappush(crossings, (passed + tokens_per_block, order))
        if limit < 1:
            return False
        batch = engine.last_batch
        assert batch is not None
        start, index = engine.step, 0
        for passed in range(1, limit + 1):
            while index < len(taken) and taken[index][0] == passed:
                cache = caches[taken[index][1]]  # one allocation a crossing, as the pass makes
                granted = manager.grow([cache], [cache.num_blocks + 1])
                assert granted, "the free pages counted were refused"
                index += 1
            engine.step = start + passed - 1
            if passed == limit:
                self._end_stretch(decoding, caches, refused, limit)
            engine._record(batch)
        engine.step = start + limit
        if engine.check_invariants:
            engine._check_invariants()
        return True

    def _end_stretch(
        self, decoding: list[Request], caches: list[KVCache], refused: list[Request], passes: int
    ) -> None:
        """The counts after the stretch's ``passes`` passes; the last pass's tokens produced as
        the executor produces them, in batch order (a last one finishes its request)."""
        engine = self.engine
        for request, cache in zip(decoding, caches):
            cache.capacity += passes
            request.num_generated += passes - 1
        for request in decoding:
            if request.num_generated + 1 >= request.output_limit:
                engine._produce_token(request)
            else:
                request.num_generated += 1
        for request in refused:
            request.num_refusals += passes
        engine.scheduler.iteration += passes
        engine.iterations += passes
