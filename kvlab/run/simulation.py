"""simulate(): the executor loop around a scheduler, one iteration per step (the real
``PyExecutor._executor_loop``, tensorrt_llm/_torch/pyexecutor/py_executor.py): arrivals join the
executor's queue, whose head goes to the scheduler while there is room; one scheduling pass; its
batch executes. PageIndexTooShort or SchedulerDeadlock stops the engine, as the real loop stops."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from contextlib import nullcontext

from kvlab.core.cause import Reason
from kvlab.core.checks import MAX_COUNT, check_bools, check_int, check_param, check_param_or
from kvlab.core.kv_cache import PageIndexTooShort
from kvlab.core.request import LIVE_STATES, Request
from kvlab.run.fast_forward import FastForward
from kvlab.run.simulation_result import (
    EngineRecords,
    SimulationResult,
    finished_reason,
    fresh_copies,
    refused_to_start,
)
from kvlab.run.trace import Event, Trace
from kvlab.sched.base import ScheduledBatch, SchedulerBase
from kvlab.sched.deadlock import SchedulerDeadlock

__all__ = ["Engine", "SimulationResult", "finished_reason", "refused_to_start", "simulate"]


def simulate(
    scheduler: SchedulerBase,
    requests: Iterable[Request],
    max_steps: int = 10_000,
    *,
    check_invariants: bool = False,
    max_num_active_requests: int | None = None,
    fast_forward: bool = True,
) -> SimulationResult:
    """Run ``requests`` through a fresh ``scheduler`` for steps 0 .. max_steps - 1;
    ``check_invariants``: after every step; ``max_num_active_requests`` and ``fast_forward``:
    see :class:`Engine`."""
    engine = Engine(
        scheduler,
        check_invariants=check_invariants,
        max_num_active_requests=max_num_active_requests,
        fast_forward=fast_forward,
    )
    if scheduler.iteration or scheduler.submitted_requests:
        raise ValueError("scheduler has already run; build a fresh Scheduler (and manager) per run")
    max_steps = check_param("max_steps", max_steps)
    engine.add_requests(requests)
    engine.execute_until(max_steps)
    return engine.result(max_steps)


class Engine(EngineRecords):
    """The executor loop around one scheduler, one ``iterate()`` per step, on copies of the
    Requests given. ``max_num_active_requests``: the requests handed to the scheduler at once
    (the real ``PyExecutor.max_num_active_requests``); None: the scheduler's own.
    ``fast_forward``: :meth:`execute_until` applies steady stretches of passes at once
    (kvlab.run.fast_forward; same results); False steps every pass."""

    def __init__(
        self,
        scheduler: SchedulerBase,
        requests: Iterable[Request] = (),
        *,
        check_invariants: bool = False,
        max_num_active_requests: int | None = None,
        fast_forward: bool = True,
    ):
        if not isinstance(scheduler, SchedulerBase):
            raise TypeError(f"scheduler must be a Scheduler (or a peer's), got {scheduler!r:.60}")
        self.scheduler = scheduler
        check_bools(check_invariants=check_invariants, fast_forward=fast_forward)
        self.check_invariants = check_invariants
        self.fast_forward = FastForward(self) if fast_forward else None
        self.max_num_active_requests = check_param_or(
            "max_num_active_requests", max_num_active_requests, scheduler.max_num_active_requests
        )
        self.requests: list[Request] = []
        self.arrivals: list[Request] = []  # sorted by arrival step; those before next_arrival came
        self.next_arrival = 0
        #: arrived requests the executor has not handed to the scheduler yet, oldest first
        self.queue: deque[Request] = deque()
        self.trace = Trace()
        self.error: BaseException | None = None
        #: what the latest scheduling pass decided (None before the first pass)
        self.last_batch: ScheduledBatch | None = None
        self.step = 0
        self.iterations = 0
        self.add_requests(requests)

    def add_requests(self, requests: Iterable[Request]) -> list[Request]:
        """Queue copies of ``requests`` (none arriving before ``step``) and return them."""
        copies = fresh_copies(requests)
        known = {r.request_id for r in self.requests}
        for request in copies:
            if request.request_id in known:
                raise ValueError(f"request_id {request.request_id!r} is already in this engine")
            if request.arrival_step < self.step:
                raise ValueError(
                    f"request {request.request_id!r} arrives at step "
                    f"{request.arrival_step}, before the engine's step {self.step}"
                )
        self.requests.extend(copies)
        pending = self.arrivals[self.next_arrival :] + copies  # stable: list order breaks ties
        self.arrivals[self.next_arrival :] = sorted(pending, key=lambda r: r.arrival_step)
        return copies

    @property
    def num_live(self) -> int:
        """Active requests plus those in the executor's queue."""
        return self.num_active + len(self.queue)

    @property
    def has_pending_arrivals(self) -> bool:
        return self.next_arrival < len(self.arrivals)

    def advance_to(self, step: int) -> None:
        """Skip the clock forward to ``step`` (idle steps never run)."""
        self.step = max(self.step, check_int("step", step, low=0, high=MAX_COUNT))

    def iterate(self) -> bool:
        """Step ``step``: activate the arrivals, then, if any request is live, one scheduling
        pass and its batch (False, the clock staying, when none is live)."""
        if self.error is not None:
            raise RuntimeError(f"the engine stopped at step {self.step - 1}: {self.error}")
        self._fetch_and_activate()
        if not self.num_live:
            return False
        try:
            self.last_batch = self.scheduler.schedule()
        except (PageIndexTooShort, SchedulerDeadlock) as exc:
            self.error = exc
            culprit = getattr(exc, "request_id", "")
            self.trace.events.append(Event(self.step, "engine_stopped", culprit))
            self.last_batch = ScheduledBatch()
        else:
            self._execute(self.last_batch)
            self.scheduler.batch_done()
        self.iterations += 1
        self._record(self.last_batch)
        if self.check_invariants and self.error is None:
            self._check_invariants()
        self.step += 1
        return True

    def execute_until(self, max_steps: int) -> None:
        """Iterate until the engine stops, has nothing left to do, or reaches ``max_steps``."""
        max_steps = check_int("max_steps", max_steps, low=0, high=MAX_COUNT)
        fast_forward = self.fast_forward
        with fast_forward.accelerated() if fast_forward is not None else nullcontext():
            while self.error is None and (self.num_live or self.has_pending_arrivals):
                if not self.num_live:
                    self.advance_to(self.arrivals[self.next_arrival].arrival_step)
                if self.step >= max_steps:
                    return
                if fast_forward is None:
                    self.iterate()
                else:
                    fast_forward.advance(max_steps)

    def release_ended(self) -> list[Request]:
        """Hand over and forget the requests that have ended (finished or rejected), and the
        trace so far: a long replay keeps only what is live (kvlab.analysis.replay). [kvlab]
        After it, :meth:`result` and the trace cover only the requests still held."""
        came = self.arrivals[: self.next_arrival]
        ended = [r for r in came if r.state not in LIVE_STATES]
        if ended:
            self.scheduler.forget(ended)
            self.arrivals[: self.next_arrival] = [r for r in came if r.state in LIVE_STATES]
            self.next_arrival -= len(ended)
            self.requests = [r for r in self.requests if r.state in LIVE_STATES]
        self.trace = Trace()
        return ended

    def _fetch_and_activate(self) -> None:
        """Arrivals join the queue; the queue's head becomes active while there is room."""
        while (
            self.has_pending_arrivals and self.arrivals[self.next_arrival].arrival_step <= self.step
        ):
            self.queue.append(self.arrivals[self.next_arrival])
            self.next_arrival += 1
        limit = self.max_num_active_requests
        while self.queue and (limit is None or self.num_active < limit):
            request = self.queue.popleft()
            request.activated_step = self.step
            verdict = self.scheduler.submit(request)
            if not verdict.admitted:
                request.end_step = self.step
                self._event("rejected", request, request.reason)

    def _execute(self, batch: ScheduledBatch) -> None:
        manager = self.scheduler.manager
        for request in batch.paused_requests:
            self._event("suspended", request)
        for request in batch.recompute_paused_requests:
            self._event("recompute_paused", request)
        for request in batch.aborted_requests:  # one that never started was turned away
            request.end_step = self.step
            kind = "rejected" if request.first_scheduled_step is None else "aborted"
            self._event(kind, request, request.reason)
        for request in batch.fitting_disagg_gen_init_requests:
            self._mark_started(request)
            request.context_current_position = request.prompt_len
            manager.reject_draft_tokens(request)
            self._produce_token(request)  # the context server's first token
        for request in batch.context_requests:
            self._mark_started(request)
            request.context_current_position += request.context_chunk_size
            manager.update_context(request)
            if request.is_context_finished:
                manager.reject_draft_tokens(request)
                self._produce_token(request)
        for request in batch.generation_requests:
            if request.num_draft_tokens:
                manager.reject_draft_tokens(request)
            if (
                request.first_token_step is None
                or request.num_generated + 1 >= request.output_limit
            ):
                self._produce_token(request)  # a first or a last token: events to record
            else:
                request.num_generated += 1

    def _event(self, kind: str, request: Request, reason: Reason | None = None) -> None:
        self.trace.events.append(Event(self.step, kind, request.request_id, reason))

    def _mark_started(self, request: Request) -> None:
        if request.first_scheduled_step is None:
            request.first_scheduled_step = self.step
            self._event("started", request)

    def _produce_token(self, request: Request) -> None:
        if request.num_generated < request.output_limit:
            request.num_generated += 1
            if request.first_token_step is None:
                request.first_token_step = self.step
                self._event("first_token", request)
        if request.num_generated >= request.output_limit and request.is_context_finished:
            self.scheduler.finish(request)
            request.end_step = self.step
            request.reason = finished_reason(request, self.step)
            self._event("finished", request)
