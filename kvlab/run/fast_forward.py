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

The passes it does step, a plain Scheduler runs as :class:`_ForwardedScheduler`, which keeps
what phase 1 found among the leading running requests from pass to pass (:class:`_Head`: the
decoders, the deferred contexts, heaps of next page crossings and of last tokens), brings it up
to the events since (a finish, a context that finished, a state change) and answers a step
within the pages a cache holds and a certainly refused first chunk from one comparison each;
its stretches take their end and their crossings from those heaps. A plain VllmScheduler runs
as :class:`_ForwardedVllmScheduler`, which answers a decode within the blocks a request holds
at once. Each answers as the full path would (kept off the teaching path).

Covered: kvlab.sched.scheduler.Scheduler (TensorRT-LLM's V2 loop) under every admission
policy, stretches for requests of beam width 1 without draft tokens, the refused ones outside
block reuse; the vLLM peer with async scheduling (its default) and the SGLang peer, each
stretch a subclass of :class:`_Stretch` that says what a repeat of the peer's pass does and
why its decisions repeat. There the arrivals join a stretch whose head is refused (or whose
batch is full) instead of ending it: they queue behind it. Anything else is stepped as usual.
tests/run/test_fast_forward.py holds the two paths to the same results.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from kvlab.core.kv_cache import KVCache
from kvlab.core.manager import KVCacheManager
from kvlab.core.request import Request, RequestState
from kvlab.sched.base import ScheduledBatch, SchedulerBase
from kvlab.sched.context_plan import PassBudget, ScheduleAction
from kvlab.sched.scheduler import Scheduler
from kvlab.sched.sglang import SglangScheduler
from kvlab.sched.vllm import VllmScheduler


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
    def _fetch_and_activate(self) -> None: ...


def _one_page_more(manager: KVCacheManager, cache: KVCache) -> None:
    """A page crossing the caller counted room for: the cache takes one page more."""
    granted = manager.grow([cache], [len(cache.pages) + 1])
    assert granted, "the free pages counted were refused"


class _Head:
    """What the sweep found among the leading active requests, kept from pass to pass while
    only decoding changes them: the requests swept, the decoding ones (in batch order, with
    their caches), the contexts deferred, and heaps of each decoder's next page crossing and
    of the pass a stretch must end in for it, so that a pass or a stretch costs its crossings
    and events, not a visit to every running request."""

    def __init__(self) -> None:
        self.requests: list[Request] = []  # the active requests swept, in order
        self.ranks: dict[str, int] = {}  # each one's place among them when it was swept
        self.next_rank = 0
        self.decoding: list[Request] = []  # batch order (rank order)
        self.decoding_ranks: list[int] = []
        self.caches: list[KVCache] = []  # the decoding requests' caches, batch order
        self.cache_of: dict[int, KVCache] = {}  # a decoder's cache by its rank
        self.pending: list[Request] = []  # the contexts deferred, in order
        #: (the pass its cache needs a page in, rank, cache), one live entry per decoder
        self.crossings: list[tuple[int, int, KVCache]] = []
        #: (the pass of its last token or its row's last token, rank), one per decoder
        self.ends: list[tuple[int, int]] = []
        #: the decoders that joined or were swept this pass, (rank, request, cache): their
        #: ends, and the swept ones' crossings, are scheduled after it
        self.fresh: list[tuple[int, Request, KVCache]] = []
        self.stop: Request | None = None  # the request where the walk takes over
        self.open = True  # swept to the list's end: requests submitted since extend it

    def add_decoder(self, request: Request, rank: int, cache: KVCache) -> None:
        """``request`` decodes from now on, at its rank's place in batch order (fresh: its
        end comes after this pass)."""
        at = bisect.bisect(self.decoding_ranks, rank)
        self.decoding.insert(at, request)
        self.decoding_ranks.insert(at, rank)
        self.caches.insert(at, cache)
        self.cache_of[rank] = cache
        self.fresh.append((rank, request, cache))

    def remove_decoder(self, request: Request) -> None:
        """``request`` finished (its heap entries are dropped as they come up)."""
        rank = self.ranks.pop(request.request_id)
        at = bisect.bisect_left(self.decoding_ranks, rank)
        del self.decoding[at], self.decoding_ranks[at], self.caches[at], self.cache_of[rank]

    def schedule_crossing(self, iteration: int, rank: int, cache: KVCache, block: int) -> None:
        """After pass ``iteration``: the pass the cache next needs a page in."""
        due = iteration + 1 + len(cache.pages) * block - cache.capacity
        heapq.heappush(self.crossings, (due, rank, cache))

    def schedule_ends(self, iteration: int, row_tokens: int) -> None:
        """After pass ``iteration``: the pass each fresh decoder's stretch must end in."""
        for rank, request, cache in self.fresh:
            left = min(
                request.output_limit - request.num_generated - 1, row_tokens - cache.capacity
            )
            heapq.heappush(self.ends, (iteration + left, rank))
        self.fresh = []

    def first_end(self) -> int | None:
        """The first pass a decoder's stretch must end in."""
        ends, cache_of = self.ends, self.cache_of
        while ends and ends[0][1] not in cache_of:
            heapq.heappop(ends)
        return ends[0][0] if ends else None

    def crossing_now(self, iteration: int) -> list[tuple[int, KVCache]]:
        """(rank, cache) of the decoders that need a page in pass ``iteration``, batch order."""
        crossings, cache_of, due = self.crossings, self.cache_of, []
        while crossings and crossings[0][0] <= iteration:
            passed, rank, cache = heapq.heappop(crossings)
            if cache_of.get(rank) is cache:
                assert passed == iteration, "a crossing was missed"
                due.append((rank, cache))
        return due


class _ForwardedScheduler(Scheduler):
    """The Scheduler a fast-forwarded run wears (:meth:`FastForward.accelerated`): its stepped
    passes decode the leading running requests from a :class:`_Head` kept across passes (the
    walk does the rest) and answer a step within a page and a certainly refused first chunk
    from one comparison each, as the full path would."""

    #: (the pass, :meth:`_first_chunk_room`'s answer in it), until an attempt moves pages
    _room: tuple[int, tuple[int, int] | None] | None = None
    #: what the last sweep found, while it holds
    _head: _Head | None = None
    #: the requests whose state changed since the head was last checked
    _touched: list[Request]

    def _set_state(self, request: Request, state: RequestState) -> None:
        super()._set_state(request, state)
        if self._head is not None:
            self._touched.append(request)

    def _schedule_generations(
        self, budget: PassBudget, batch: ScheduledBatch, start: int = 0
    ) -> list[Request]:
        """Phase 1 from ``start``: the leading requests it can only decode one token each
        (none in flight, beam, draft, disaggregated or suspended; room in the budgets; each
        crossing a page within its row, free or cached and evictable, none a shrink) from the
        head the last pass left, where it still holds, else from a sweep; the walk takes over
        at the first request that is not such (a suspended one, most often), as it would."""
        if self._inflight or start:
            self._head = None
            return super()._schedule_generations(budget, batch, start)
        manager = self.manager
        block, width = manager.tokens_per_block, manager.max_blocks_per_seq
        room, iteration = self._room_for_growth(), self.iteration
        head = self._checked_head()
        growing = head.crossing_now(iteration) if head is not None else []
        if head is None or len(growing) > room or any(len(c.pages) >= width for _, c in growing):
            head, growing = _Head(), []
            self._head, self._touched = head, []
        crossing, joined = len(growing), len(head.fresh)  # the sweep's come after them
        if head.open:
            self._sweep(head, room, growing)
        for _, cache in growing:  # one page each, in batch order, as the walk takes them
            _one_page_more(manager, cache)
        for cache in head.caches:
            cache.capacity += 1
        for rank, cache in growing[:crossing]:
            head.schedule_crossing(iteration, rank, cache, block)
        for rank, _, cache in head.fresh[joined:]:
            head.schedule_crossing(iteration, rank, cache, block)
        head.schedule_ends(iteration, manager.page_index_span_tokens)
        count = len(head.decoding)
        batch.generation_requests += head.decoding
        if count:
            batch.beam_width = 1
        budget.num_tokens += count
        budget.num_requests += count
        pending = list(head.pending)
        if head.stop is not None:
            pending += super()._schedule_generations(budget, batch, len(head.requests))
        return pending

    def _checked_head(self) -> _Head | None:
        """The last pass's head if it still holds, brought up to the state changes since:
        finished decoders leave it, contexts that finished join its decoders; None where a
        decoder stopped running, the active requests moved, the walk's first request is no
        longer one it stops at, or a join does not fit the budgets."""
        head = self._head
        if head is None:
            return None
        touched, self._touched = self._touched, []
        finished = False
        for request in touched:
            rank = head.ranks.get(request.request_id)
            if rank is None or rank not in head.cache_of:
                continue  # past the head, or a context: pending until it finishes
            if request.state is not RequestState.FINISHED:
                return None  # a decoder stopped running
            head.remove_decoder(request)
            finished = True
        if finished:
            head.requests = [r for r in head.requests if r.state is not RequestState.FINISHED]
            head.open = head.open or head.stop is None  # one ended at the budget goes on
        if any(r.is_context_finished for r in head.pending) and not self._join(head):
            return None
        active, swept = self._active, len(head.requests)
        if active[:swept] != head.requests:  # identity first: a match costs no __eq__
            return None
        stop = head.stop
        if stop is not None:
            if swept >= len(active) or active[swept] is not stop:
                return None
            if not self._stops(stop, head):  # the sweep goes on from it this pass
                head.stop, head.open = None, True
        return head

    def _join(self, head: _Head) -> bool:
        """The head's contexts that finished join its decoders (False: one is not a plain
        decode within the budgets, or the head ended at a budget)."""
        if not head.open and head.stop is None:
            return False
        block, iteration = self.manager.tokens_per_block, self.iteration
        still = []
        for request in head.pending:
            if not request.is_context_finished:
                still.append(request)
                continue
            count = len(head.decoding) + 1
            if not self._decodes_plainly(request, count) or count > self.max_num_requests:
                return False
            cache = self.manager.caches[request.request_id]
            held = len(cache.pages) * block
            if not held - block <= cache.capacity <= held:
                return False
            rank = head.ranks[request.request_id]
            head.add_decoder(request, rank, cache)
            # as if it had decoded last pass: due this pass if it crosses now, with the others
            head.schedule_crossing(iteration - 1, rank, cache, block)
        head.pending = still
        # the sweep stops at a full requests' budget only where a request comes after it
        return len(head.decoding) < self.max_num_requests or not (still or head.stop)

    def _decodes_plainly(self, request: Request, count: int) -> bool:
        """A context-finished request decodes one token as the ``count``-th of the sweep:
        running, one beam, no draft tokens, within the token budget."""
        return (
            request.state is RequestState.RUNNING
            and request.beam_width == 1
            and not request.num_draft_tokens
            and (self.max_num_tokens is None or count <= self.max_num_tokens)
        )

    def _stops(self, request: Request, head: _Head) -> bool:
        """The sweep, having taken the head's decoders, stops at ``request`` for its flags
        (a stop for want of room, or for a shrink, is looked at again)."""
        count = len(head.decoding)
        return request.disagg_generation_init or (
            count < self.max_num_requests
            and request.is_context_finished
            and not self._decodes_plainly(request, count + 1)
        )

    def _sweep(self, head: _Head, room: int, growing: list[tuple[int, KVCache]]) -> None:
        """Extend the open ``head`` over the active requests past it, as phase 1 takes them
        (its new decoders are fresh); the caches crossing a page join ``growing`` (``room``
        pages in all). The head stays open only where the sweep reached the list's end."""
        manager = self.manager
        caches, block, width = manager.caches, manager.tokens_per_block, manager.max_blocks_per_seq
        active, ranks = self._active, head.ranks
        head.open = False
        for request in active[len(head.requests) :]:
            if self._stops(request, head):
                head.stop = request
                return
            if len(head.decoding) >= self.max_num_requests:
                return  # the walk stops where the requests' budget is full
            rank = head.next_rank
            if request.is_context_finished:
                cache = caches[request.request_id]
                held = len(cache.pages) * block
                if cache.capacity >= held:
                    if len(growing) == room or len(cache.pages) >= width:
                        head.stop = request
                        return
                    growing.append((rank, cache))
                elif cache.capacity < held - block:
                    head.stop = request
                    return
                head.add_decoder(request, rank, cache)
            else:
                head.pending.append(request)
            head.requests.append(request)
            ranks[request.request_id] = rank
            head.next_rank += 1
        head.open = True

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
        self._room = None  # the attempt may move pages
        return super()._schedule_context(request, budget, batch, preempted)

    def _certainly_refused(self, request: Request, budget: PassBudget) -> bool:
        """A first chunk of a request holding no cache and reusing nothing, whose plan needs
        more tokens than :meth:`_first_chunk_room` has, yet fits a row (more raises
        PageIndexTooShort)."""
        manager = self.manager
        room = self._first_chunk_room()
        if (
            room is None
            or not request.is_first_context_chunk
            or request.request_id in manager.caches
            or (request.prefix_hashes and manager.reuses(request))
        ):
            return False
        plan = self._plan_context(request, budget.remaining_tokens)
        return plan is not None and room[0] < plan[2] <= room[1]

    def _first_chunk_room(self) -> tuple[int, int] | None:
        """(the tokens a first chunk's pages may hold: the free pages and all that suspended
        caches could move down, the tokens a row holds), the same for every refused attempt
        of a pass; None when a refusal is not certain: a residency cap is checked first, a
        refusal preempts (``_try_preempt_for_pages``) or no page-index row is free."""
        if self._room is not None and self._room[0] == self.iteration:
            return self._room[1]
        manager = self.manager
        room = None
        if not (
            manager.max_resident_sequences() is not None
            or (self.enable_recompute_pause and not manager.has_cache_tier_below_gpu)
            or manager.free_slots == 0
        ):
            extra = manager.num_extra_kv_tokens
            room = (
                manager.allocatable_blocks * manager.tokens_per_block - extra,
                manager.page_index_span_tokens - extra,
            )
        self._room = (self.iteration, room)
        return room


class _ForwardedVllmScheduler(VllmScheduler):
    """The VllmScheduler a fast-forwarded run wears: a running request's decode within the
    blocks it holds is answered without ``allocate_slots``' accounting, as it would answer (no
    block needed, none taken; its output limit keeps it under max_model_len), and a
    ``cache_blocks`` that fills no block returns before it is called."""

    def _schedule_running(self, request: Request, budget: int, batch: ScheduledBatch) -> int:
        if request.is_context_finished:
            cache = self.manager.caches[request.request_id]
            held = len(cache.pages) * self.manager.tokens_per_block
            if not cache.suspended and cache.capacity < held:
                cache.capacity += 1
                batch.generation_requests.append(request)
                self._cache_blocks(request, self._num_tokens(request))
                return 1
        return super()._schedule_running(request, budget, batch)

    def _cache_blocks(self, request: Request, num_tokens: int) -> None:
        """``cache_blocks``, not entered where the tokens fill no new block (its first test)."""
        filled = num_tokens // self.manager.tokens_per_block
        if (
            self.prefix_cache is not None
            and filled > self.manager.caches[request.request_id].committed
        ):
            super()._cache_blocks(request, num_tokens)


class _Stretch:
    """A steady pass about to repeat (a subclass for each loop): the requests it decoded and
    refused, and what each repeat does."""

    #: arrivals join the stretch (their requests queue behind a head that is not admitted)
    #: rather than end it
    folds_arrivals = False

    def __init__(self, engine: Engine, decoding: list[Request], refused: list[Request]):
        self.engine, self.decoding, self.refused = engine, decoding, refused
        self.manager = manager = engine.scheduler.manager
        self.caches = [manager.caches[r.request_id] for r in decoding]
        self._taken: list[tuple[int, int]] = []  # (pass, batch order) of each crossing covered
        self._next = 0

    def end_within(self, limit: int) -> int:
        """``limit`` or fewer passes: a request's last token, or its row's, ends the stretch
        in its pass."""
        row_tokens = self.manager.page_index_span_tokens
        for request, cache in zip(self.decoding, self.caches):
            limit = min(
                limit, request.output_limit - request.num_generated, row_tokens - cache.capacity
            )
        return limit

    def plan(self, limit: int) -> int:
        """The passes the stretch may take, at most ``limit``: the crossings into new pages,
        pass by pass and in batch order, while :meth:`room` covers them; taken from a heap of
        next crossings, so the cost follows the crossings, not requests x passes."""
        tokens_per_block = self.manager.tokens_per_block
        crossings = [
            (cache.num_blocks * tokens_per_block - cache.capacity + 1, order)
            for order, cache in enumerate(self.caches)
        ]
        crossings = [entry for entry in crossings if entry[0] <= limit]
        heapq.heapify(crossings)
        free = self.room()
        while crossings and crossings[0][0] <= limit:
            passed, order = heapq.heappop(crossings)
            if len(self._taken) == free:
                return passed - 1  # pass ``passed`` would need a page the pool lacks
            self._taken.append((passed, order))
            heapq.heappush(crossings, (passed + tokens_per_block, order))
        return limit

    def room(self) -> int:
        """Pages the stretch's crossings may take, one at a time."""
        raise NotImplementedError

    def each_pass(self, passed: int) -> None:
        """Pass ``passed``'s crossings, one allocation each, as the pass makes them."""
        taken = self._taken
        while self._next < len(taken) and taken[self._next][0] == passed:
            self.cross(taken[self._next][1], passed)
            self._next += 1

    def cross(self, order: int, passed: int) -> None:
        _one_page_more(self.manager, self.caches[order])

    def before_tokens(self) -> None:
        """The end of the stretch's last pass, before its tokens are produced."""


class _TrtllmStretch(_Stretch):
    """TensorRT-LLM's steady pass, its decoders all the scheduler's :class:`_Head`: the end
    and the crossings come from the head's heaps (which it leaves up to date), so a stretch
    costs its crossings and one final count, not requests x passes."""

    def __init__(self, engine: Engine, head: _Head, refused: list[Request]):
        scheduler = engine.scheduler
        assert isinstance(scheduler, _ForwardedScheduler)
        self.engine, self.scheduler, self.head, self.refused = engine, scheduler, head, refused
        self.decoding, self.caches = head.decoding, head.caches
        self.manager = scheduler.manager
        self._crossings: list[tuple[int, KVCache]] = []  # (pass, cache) of each one covered
        self._next = 0

    def end_within(self, limit: int) -> int:
        end = self.head.first_end()
        return limit if end is None else min(limit, end - self.scheduler.iteration)

    def plan(self, limit: int) -> int:
        head, start = self.head, self.scheduler.iteration
        crossings, cache_of, block = head.crossings, head.cache_of, self.manager.tokens_per_block
        free, taken = self.scheduler._room_for_growth(), self._crossings
        while crossings and crossings[0][0] <= start + limit:
            due, group = crossings[0][0], []  # a pass's crossings, all or none
            while crossings and crossings[0][0] == due:
                entry = heapq.heappop(crossings)
                if cache_of.get(entry[1]) is entry[2]:
                    group.append(entry)
            if len(taken) + len(group) > free:
                for entry in group:
                    heapq.heappush(crossings, entry)
                return due - start - 1  # that pass would need a page the pool lacks
            for _, rank, cache in group:
                taken.append((due - start, cache))
                heapq.heappush(crossings, (due + block, rank, cache))
        return limit

    def each_pass(self, passed: int) -> None:
        taken = self._crossings
        while self._next < len(taken) and taken[self._next][0] == passed:
            _one_page_more(self.manager, taken[self._next][1])
            self._next += 1


class _VllmStretch(_Stretch):
    """The vLLM peer's steady pass (async scheduling on): every running request decodes, the
    waiting queue's head, if tried, is refused. A crossing allocates a block and caches the one
    it filled (``allocate_slots``, ``cache_blocks``: the peer's own code). The refusal repeats:
    the whole prompt must fit (``scheduler_reserve_full_isl``), a block cached meanwhile adds at
    most one held block to the head's hit while its crossing takes a free one, and an eviction
    only shortens the hit or puts a held copy first, taking a free block as it does."""

    def __init__(self, engine: Engine, decoding: list[Request], refused: list[Request]):
        super().__init__(engine, decoding, refused)
        scheduler = engine.scheduler
        assert isinstance(scheduler, VllmScheduler)
        self.scheduler = scheduler
        self.folds_arrivals = bool(refused) or len(scheduler.running) >= scheduler.max_batch_size
        self.generated = [r.num_generated for r in decoding]  # at the stretch's start

    def room(self) -> int:
        return self.manager.free_blocks  # what a decode's ``allocate_slots`` may take

    def each_pass(self, passed: int) -> None:
        self.scheduler._prune_half_retired()
        super().each_pass(passed)

    def cross(self, order: int, passed: int) -> None:
        request, cache, scheduler = self.decoding[order], self.caches[order], self.scheduler
        request.num_generated = self.generated[order] + passed - 1  # as the pass finds them
        computed = cache.capacity = request.prompt_len + request.num_generated - 1
        granted = scheduler._allocate(request, computed + 1, admitting=False)
        assert granted, "the free blocks counted were refused"
        if scheduler.prefix_cache is not None:
            scheduler._cache_blocks(request, computed + 1)

    def before_tokens(self) -> None:
        self.scheduler.late.push(self.decoding)


class _SglangStretch(_Stretch):
    """The SGLang peer's steady decode: the running batch decodes one token each in one
    allocation a pass (``prepare_for_decode``) while the pool holds it without evicting, no
    prefill is tried (the batch is full, or nothing waits) and the new-token ratio decays a
    step. The pages are taken pass by pass (the records show the pool as it was) and written
    into the caches' rows at the stretch's end."""

    def __init__(self, engine: Engine, decoding: list[Request], refused: list[Request]):
        super().__init__(engine, decoding, refused)
        scheduler = engine.scheduler
        assert isinstance(scheduler, SglangScheduler)
        self.scheduler = scheduler
        self.folds_arrivals = scheduler.batch_is_full
        self._pages: list[list[int]] = []  # each pass's allocation

    def plan(self, limit: int) -> int:
        return min(limit, self.manager.free_blocks // len(self.decoding))

    def each_pass(self, passed: int) -> None:
        scheduler = self.scheduler
        last = scheduler._last_step
        assert last is not None, "a steady pass came before"
        scheduler._last_step = max(last + 1, scheduler._submit_step)
        scheduler._prune_half_retired()
        scheduler.new_token_ratio.decay_step()
        pages = self.manager.allocate_pages(len(self.caches))
        assert pages is not None, "the free tokens counted for the decode batch were refused"
        self._pages.append(pages)

    def before_tokens(self) -> None:
        rounds = len(self._pages)  # cache i's pages: the i-th of each pass's, in pass order
        pages = [page for i in range(len(self.caches)) for page in (p[i] for p in self._pages)]
        self.manager.append_pages(self.caches, [rounds] * len(self.caches), pages)
        self.scheduler.late.push(self.decoding)


#: The schedulers a fast-forwarded run wears, by the plain ones they stand for.
FORWARDED: dict[type[SchedulerBase], type[SchedulerBase]] = {
    Scheduler: _ForwardedScheduler,
    VllmScheduler: _ForwardedVllmScheduler,
}


class FastForward:
    """Steps ``engine`` pass by pass, or a whole steady stretch at once where one starts."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.skipped = 0  # passes applied in stretches; the engine's other passes were stepped

    @contextmanager
    def accelerated(self) -> Iterator[None]:
        """While it lasts, a plain Scheduler runs as :class:`_ForwardedScheduler` and a plain
        VllmScheduler as :class:`_ForwardedVllmScheduler`."""
        scheduler = self.engine.scheduler
        plain = type(scheduler)
        forwarded = FORWARDED.get(plain)
        if forwarded is None:
            yield
            return
        scheduler.__class__ = forwarded
        try:
            yield
        finally:
            scheduler.__class__ = plain
            for name in ("_room", "_head", "_touched"):
                vars(scheduler).pop(name, None)

    def advance(self, max_steps: int) -> None:
        """The steady stretch before ``max_steps`` if one starts here, else one stepped pass."""
        if not self._skip_stretch(max_steps):
            self.engine.iterate()

    def _steady(self) -> _Stretch | None:
        """The last pass if it was steady and the next repeats it."""
        engine = self.engine
        scheduler, batch = engine.scheduler, engine.last_batch
        if batch is None or engine.error is not None:
            return None
        if type(scheduler) is _ForwardedScheduler:
            return self._steady_trtllm(scheduler, batch)
        if type(scheduler) is _ForwardedVllmScheduler:
            return self._steady_vllm(scheduler, batch)
        if type(scheduler) is SglangScheduler:
            return self._steady_sglang(scheduler, batch)
        return None

    @staticmethod
    def _decodes_only(batch: ScheduledBatch) -> bool:
        """The pass only decoded, one token each of plain requests past their first token."""
        return FastForward._nothing_but_decodes(batch) and all(
            r.state is RequestState.RUNNING
            and r.beam_width == 1
            and not r.num_draft_tokens
            and r.first_token_step is not None
            for r in batch.generation_requests
        )

    @staticmethod
    def _nothing_but_decodes(batch: ScheduledBatch) -> bool:
        return not (
            batch.context_requests
            or batch.paused_requests
            or batch.recompute_paused_requests
            or batch.fitting_disagg_gen_init_requests
            or batch.aborted_requests
            or batch.deferred_behind_contributor
            or batch.num_aborted_context_rows
            or batch.num_aborted_generation_rows
        )

    def _steady_trtllm(
        self, scheduler: _ForwardedScheduler, batch: ScheduledBatch
    ) -> _Stretch | None:
        engine = self.engine
        if engine.queue and engine.num_active < (engine.max_num_active_requests or 0):
            return None  # the queue's head is handed over next pass
        head = scheduler._head  # its decoders are plain ones past their first token
        if (
            head is None
            or scheduler._touched  # a state changed after the sweep
            or not batch.generation_requests
            or len(batch.generation_requests) != len(head.decoding)
            or len(head.decoding) != scheduler.counts[RequestState.RUNNING]
            or not self._nothing_but_decodes(batch)
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
        return _TrtllmStretch(engine, head, batch.refused_requests)

    def _steady_vllm(self, scheduler: VllmScheduler, batch: ScheduledBatch) -> _Stretch | None:
        """Async scheduling on; every running request decoded, none with its last token in
        flight, its full blocks cached; the head refused if it was tried, and no request
        finished after it was (the last batch's results are processed after the refusal)."""
        decoding, running = batch.generation_requests, scheduler.running
        if (
            not scheduler.args.async_scheduling
            or scheduler._has_retired
            or not decoding
            or len(decoding) != len(running)
            or not self._decodes_only(batch)
            or any(a is not b for a, b in zip(decoding, running))
        ):
            return None
        caching, waiting = scheduler.prefix_cache is not None, scheduler.waiting
        tried = bool(waiting) and len(running) < scheduler.max_batch_size
        refused = batch.refused_requests
        if len(refused) != tried or (refused and refused[0] is not waiting[0]):
            return None
        if refused and caching and not scheduler.args.scheduler_reserve_full_isl:
            return None  # a chunk's own check alone: a shorter hit may let it in
        block_size, caches = scheduler.args.block_size, scheduler.manager.caches
        for request in decoding:
            cache = caches[request.request_id]
            if request.num_generated >= request.output_limit or cache.capacity != (
                request.prompt_len + request.num_generated - 1
            ):
                return None
            if caching and cache.committed != (cache.capacity - 1) // block_size:
                return None
        scheduler.late.open()  # this pass's tokens in flight, as its schedule() opens them
        return _VllmStretch(self.engine, decoding, refused)

    def _steady_sglang(self, scheduler: SglangScheduler, batch: ScheduledBatch) -> _Stretch | None:
        """The running batch decoded, none aborting or with its last token out, the last
        result processed no prefill, and no prefill will be tried: none is chunked and the
        batch is full or nothing waits."""
        decoding, running = batch.generation_requests, scheduler.running
        if (  # the scheduler's flags first: they are cheaper to read than the batch
            scheduler._aborting
            or scheduler._late_prefill
            or scheduler.chunked_req is not None
            or scheduler.last_prefill is not None
            or not (scheduler.batch_is_full or not scheduler.waiting)
            or not decoding
            or len(decoding) != len(running)
            or not self._decodes_only(batch)
            or any(a is not b for a, b in zip(decoding, running))
            or any(r.num_generated >= r.output_limit for r in decoding)
        ):
            return None
        return _SglangStretch(self.engine, decoding, [])

    def _skip_stretch(self, max_steps: int) -> bool:
        """Apply the steady stretch that starts at the engine's step (False: none starts)."""
        stretch = self._steady()
        if stretch is None:
            return False
        engine = self.engine
        decoding, caches = stretch.decoding, stretch.caches
        # the passes before the next event other than a crossing the pool cannot cover
        limit = max_steps - engine.step
        if engine.has_pending_arrivals and not stretch.folds_arrivals:
            limit = min(limit, engine.arrivals[engine.next_arrival].arrival_step - engine.step)
        limit = stretch.end_within(limit)
        if limit < 1:
            return False
        limit = stretch.plan(limit)
        if limit < 1:
            return False
        batch = engine.last_batch
        assert batch is not None
        start = engine.step
        capacities = [cache.capacity for cache in caches]
        generated = [request.num_generated for request in decoding]
        for passed in range(1, limit + 1):
            engine.step = start + passed - 1
            if stretch.folds_arrivals:
                engine._fetch_and_activate()
            stretch.each_pass(passed)
            if passed == limit:
                for request, cache, capacity, before in zip(
                    decoding, caches, capacities, generated
                ):
                    cache.capacity = capacity + limit
                    request.num_generated = before + limit - 1
                stretch.before_tokens()
                self._end_stretch(stretch, limit)
            engine._record(batch)
        engine.step = start + limit
        self.skipped += limit
        if engine.check_invariants:
            engine._check_invariants()
        return True

    def _end_stretch(self, stretch: _Stretch, passes: int) -> None:
        """The counts after the stretch's ``passes`` passes: the last pass's tokens produced as
        the executor produces them, in batch order (a last one finishes its request)."""
        engine = self.engine
        for request in stretch.decoding:
            if request.num_generated + 1 >= request.output_limit:
                engine._produce_token(request)
            else:
                request.num_generated += 1
        for request in stretch.refused:
            request.num_refusals += passes
        engine.scheduler.iteration += passes
        engine.scheduler.batch_done()
        engine.iterations += passes
