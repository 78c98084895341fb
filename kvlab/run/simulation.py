"""simulate(): the executor loop around a Scheduler, one scheduler iteration per step.

Each step: the requests arriving at it join the executor's queue, and the queue's head is
handed to the scheduler while fewer than ``max_num_active_requests`` requests are active (the
real ``PyExecutor._fetch_and_activate_new_requests``: the executor keeps the backlog, the
scheduler only ever walks the active set; the request is validated, here by the Scheduler's
front door and admission policy, as it is activated). Then one scheduling pass, then "execute" the
batch: a context chunk advances ``context_current_position`` and its cache's history, and
commits the pages it filled for reuse (``KVCacheManager.update_context``); a context that completes
produces the first token; a generation step produces one token (draft tokens, reserved with a
last context chunk, a DISAGG_GENERATION_INIT or a generation step, are all rejected, so their
pages are rewound); a fitted DISAGG_GENERATION_INIT request receives its
context and the first token from its context server; a request that reaches
``max_new_tokens`` finishes and its cache is freed. Steps in which nothing is in the engine
are skipped (the engine idles until the next arrival).

A PageIndexTooShort from resize or a SchedulerDeadlock stops the run as the real executor
loop (PyExecutor) stops: the error is kept in ``result.error``, the trace keeps every step up
to and including the one that raised, and every request still in the engine keeps its
status with a reason "engine stopped at step N by ...". Any other exception is a kvlab bug
and propagates. The caller's Requests are not touched: the run works on copies
(``result.requests``), so one workload can be replayed under several schedulers.

:class:`Engine` is that loop one iteration at a time (``iterate``), for callers that drive
several engines in lockstep (``kvlab.run.distributed``: one engine per rank, stepped together as
the attention-DP executor steps its ranks); ``simulate`` runs one Engine to the end.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from kvlab.core.checks import MAX_COUNT, check_int, check_items, check_param
from kvlab.core.kv_cache import PageIndexTooShort
from kvlab.core.request import LIVE_STATES, Request, RequestState
from kvlab.core.words import a_or_an, counted
from kvlab.run.trace import Event, StepRecord, Trace
from kvlab.sched.base import ScheduledBatch, SchedulerBase
from kvlab.sched.scheduler import SchedulerDeadlock

ENGINE_ERRORS = (PageIndexTooShort, SchedulerDeadlock)
#: The statuses a summary counts.
SUMMARY_STATUSES = (
    RequestState.FINISHED,
    RequestState.REJECTED,
    RequestState.WAITING,
    RequestState.RUNNING,
)


@dataclass
class SimulationResult:
    """Outcome of ``simulate``: per-request status and reason, the error that stopped the
    engine (or None) and the per-step trace."""

    status: dict[str, RequestState]
    reasons: dict[str, str]
    error: BaseException | None
    trace: Trace
    requests: dict[str, Request]
    end_step: int  # the first step the run did not reach
    iterations: int  # scheduler passes run

    def ids_with_status(self, status: str) -> list[str]:
        return [request_id for request_id, value in self.status.items() if value == status]

    def summary(self) -> dict:
        """Counts per status, goodput and latencies in steps (means over the requests they
        apply to; None where none does), and ``reused_tokens``: context tokens a cached prefix
        provided (block reuse), summed over the requests' last contexts."""
        finished = [self.requests[i] for i in self.ids_with_status(RequestState.FINISHED)]
        started = [r for r in self.requests.values() if r.first_scheduled_step is not None]
        with_token = [r for r in self.requests.values() if r.first_token_step is not None]

        def mean(values):
            return sum(values) / len(values) if values else None

        activated = [r for r in self.requests.values() if r.activated_step is not None]
        summary = {status.value: len(self.ids_with_status(status)) for status in SUMMARY_STATUSES}
        summary.update(
            iterations=self.iterations,
            error=None if self.error is None else type(self.error).__name__,
            goodput_tokens_per_step=(
                sum(r.num_generated for r in finished) / self.iterations if self.iterations else 0.0
            ),
            mean_wait_steps=mean([r.first_scheduled_step - r.arrival_step for r in started]),
            mean_queue_steps=mean([r.activated_step - r.arrival_step for r in activated]),
            mean_ttft_steps=mean([r.first_token_step - r.arrival_step for r in with_token]),
            mean_latency_steps=mean([r.end_step - r.arrival_step for r in finished]),
            suspensions=sum(r.num_suspensions for r in self.requests.values()),
            recomputes=sum(r.num_recomputes for r in self.requests.values()),
            reused_tokens=sum(r.prepopulated_prompt_len for r in self.requests.values()),
        )
        return summary

    def requests_to_pandas(self):
        """One row per request: status, reason, lengths, steps and preemption counts."""
        import pandas as pd

        rows = [
            dict(
                request_id=r.request_id,
                status=self.status[r.request_id],
                state=r.state,
                reason=self.reasons[r.request_id],
                prompt_len=r.prompt_len,
                max_new_tokens=r.max_new_tokens,
                num_generated=r.num_generated,
                arrival_step=r.arrival_step,
                first_scheduled_step=r.first_scheduled_step,
                first_token_step=r.first_token_step,
                end_step=r.end_step,
                num_suspensions=r.num_suspensions,
                num_recomputes=r.num_recomputes,
                num_refusals=r.num_refusals,
                reused_tokens=r.prepopulated_prompt_len,
            )
            for r in self.requests.values()
        ]
        return pd.DataFrame(rows)


def simulate(
    scheduler: SchedulerBase,
    requests: Iterable[Request],
    max_steps: int = 10_000,
    *,
    check_invariants: bool = False,
    max_num_active_requests: int | None = None,
) -> SimulationResult:
    """Run ``requests`` through a fresh ``scheduler`` for steps 0 .. max_steps - 1 (module
    docstring). ``check_invariants`` checks the scheduler's and the run's invariants after
    every step; ``max_num_active_requests``: see :class:`Engine`."""
    if not isinstance(scheduler, SchedulerBase):
        raise TypeError(
            f"scheduler must be a kvlab scheduler (Scheduler, VllmScheduler, "
            f"SglangScheduler), got {type(scheduler).__name__}"
        )
    if scheduler.iteration or scheduler.submitted_requests:
        raise ValueError("scheduler has already run; build a fresh Scheduler (and manager) per run")
    max_steps = check_param("max_steps", max_steps)
    if not isinstance(check_invariants, bool):
        raise TypeError(f"check_invariants must be a bool, got {check_invariants!r}")
    run = Engine(
        scheduler,
        requests,
        check_invariants=check_invariants,
        max_num_active_requests=max_num_active_requests,
    )
    run.execute_until(max_steps)
    return run.result(max_steps)


def refused_to_start(requests: Iterable[Request], message: str) -> SimulationResult:
    """The result of an engine that refused to start (vLLM's start-up checks): every request
    rejected with ``message``, nothing run, and a ValueError as the error."""
    copies = {r.request_id: r for r in _fresh_copies(requests)}
    for request in copies.values():
        request.state, request.reason = (
            RequestState.REJECTED,
            f"the engine refused to start: {message}",
        )
    return SimulationResult(
        status=dict.fromkeys(copies, RequestState.REJECTED),
        reasons={i: r.reason for i, r in copies.items()},
        error=ValueError(message),
        trace=Trace(),
        requests=copies,
        end_step=0,
        iterations=0,
    )


def finished_reason(request: Request, step: int) -> str:
    """The reason a request that finished at ``step`` gives."""
    prompt = f"{request.prompt_len:,}"
    reason = (
        f"finished at step {step:,}: {counted(request.num_generated, 'token')} generated after "
        f"{a_or_an(prompt)} {prompt}-token prompt"
    )
    if request.output_limit < request.max_new_tokens:  # vLLM's max_model_len, SGLang's clip
        reason += (
            f", stopped short of max_new_tokens={request.max_new_tokens:,} by the engine's "
            f"length limit at {request.prompt_len + request.num_generated:,} tokens "
            "(finish reason 'length')"
        )
    return reason


def _fresh_copies(requests: Iterable[Request]) -> list[Request]:
    if isinstance(requests, Request) or not isinstance(requests, Iterable):
        raise TypeError("requests must be an iterable of Request")
    copies = []
    seen = set()
    for request in check_items("requests", requests, "Request objects"):
        if not isinstance(request, Request):
            raise TypeError(f"requests must hold Request objects, got {type(request).__name__}")
        if request.request_id in seen:
            raise ValueError(f"request_id {request.request_id!r} appears twice in requests")
        seen.add(request.request_id)
        copies.append(dataclasses.replace(request))
    return copies


class Engine:
    """The executor loop around one Scheduler, steppable: ``iterate()`` runs the iteration of
    step ``step`` (the loop of ``PyExecutor._executor_loop``,
    tensorrt_llm/_torch/pyexecutor/py_executor.py, one pass at a time). The Requests given
    (now or later with ``add_requests``) are copied; ``result()`` reports on the copies.

    ``max_num_active_requests``: the executor's limit on requests handed to the scheduler (the
    real ``PyExecutor.max_num_active_requests``, ``model_engine.get_max_num_sequences()``: the
    engine's max_batch_size for one pipeline stage). None: the scheduler's ``max_batch_size``.
    """

    def __init__(
        self,
        scheduler: SchedulerBase,
        requests: Iterable[Request] = (),
        *,
        check_invariants: bool = False,
        max_num_active_requests: int | None = None,
    ):
        if not isinstance(scheduler, SchedulerBase):
            raise TypeError(f"scheduler must be a Scheduler (or a peer's), got {scheduler!r:.60}")
        if not isinstance(check_invariants, bool):
            raise TypeError(f"check_invariants must be a bool, got {check_invariants!r:.60}")
        self.scheduler = scheduler
        self.max_num_active_requests = (
            scheduler.max_num_active_requests
            if max_num_active_requests is None
            else check_param("max_num_active_requests", max_num_active_requests)
        )
        self.requests: list[Request] = []
        self._ids: set = set()
        self.arrivals: list[Request] = []
        self.next_arrival = 0
        #: arrived requests the executor has not handed to the scheduler yet, oldest first
        self.queue: deque[Request] = deque()
        self.check_invariants = check_invariants
        self.trace = Trace()
        self.error: BaseException | None = None
        #: what the latest scheduling pass decided (None before the first pass)
        self.last_batch: ScheduledBatch | None = None
        self.step = 0
        self.iterations = 0
        self.add_requests(requests)

    def add_requests(self, requests: Iterable[Request]) -> list[Request]:
        """Queue copies of ``requests`` as arrivals (none may arrive before ``step``); return
        the copies."""
        copies = _fresh_copies(requests)
        for request in copies:
            if request.request_id in self._ids:
                raise ValueError(f"request_id {request.request_id!r} is already in this engine")
            if request.arrival_step < self.step:
                raise ValueError(
                    f"request {request.request_id!r} arrives at step "
                    f"{request.arrival_step}, before the engine's step {self.step}"
                )
        self._ids.update(r.request_id for r in copies)
        self.requests.extend(copies)
        pending = self.arrivals[self.next_arrival :] + copies
        # stable: list order breaks ties
        self.arrivals[self.next_arrival :] = sorted(pending, key=lambda r: r.arrival_step)
        return copies

    @property
    def num_active(self) -> int:
        """Requests the scheduler holds: waiting for a first chunk, running or suspended."""
        counts = self.scheduler.counts
        return (
            counts[RequestState.WAITING]
            + counts[RequestState.RUNNING]
            + counts[RequestState.SUSPENDED]
        )

    @property
    def num_live(self) -> int:
        """Active requests plus those in the executor's queue."""
        return self.num_active + len(self.queue)

    @property
    def has_pending_arrivals(self) -> bool:
        return self.next_arrival < len(self.arrivals)

    def advance_to(self, step: int) -> None:
        """Move the engine's clock forward to ``step`` (idle steps are skipped, never run; an
        earlier step leaves the clock where it is)."""
        self.step = max(self.step, check_int("step", step, low=0, high=MAX_COUNT))

    def iterate(self) -> bool:
        """Step ``step``: submit the requests arriving by then and, if any request is live,
        run one scheduling pass and execute its batch, then advance to the next step. Returns
        False (and stays at this step) when nothing was live. An engine error is kept in
        ``error`` (the engine has stopped); ``iterate`` must not be called after that."""
        if self.error is not None:
            raise RuntimeError(f"the engine stopped at step {self.step - 1}: {self.error}")
        self._fetch_and_activate()
        if not self.num_live:
            return False
        try:
            batch = self.scheduler.schedule()
        except ENGINE_ERRORS as exc:
            self.error = exc
            self.iterations += 1
            self.trace.events.append(
                Event(self.step, "engine_stopped", getattr(exc, "request_id", ""), str(exc))
            )
            self.last_batch = ScheduledBatch()
            self._record(self.last_batch)
            self.step += 1
            return True
        self.last_batch = batch
        self._execute(batch)
        self.iterations += 1
        self._record(batch)
        if self.check_invariants:
            self._check_invariants()
        self.step += 1
        return True

    def execute_until(self, max_steps: int) -> None:
        """Iterate until the engine stops, has nothing left to do, or reaches ``max_steps``."""
        max_steps = check_int("max_steps", max_steps, low=0, high=MAX_COUNT)
        while self.step < max_steps and self.error is None:
            if not self.num_live:
                if not self.has_pending_arrivals:
                    return
                self.advance_to(self.arrivals[self.next_arrival].arrival_step)
                if self.step >= max_steps:
                    return
            self.iterate()

    def _fetch_and_activate(self) -> None:
        """Arrivals join the queue; the queue's head becomes active while there is room."""
        while (
            self.next_arrival < len(self.arrivals)
            and self.arrivals[self.next_arrival].arrival_step <= self.step
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
                self.trace.events.append(
                    Event(self.step, "rejected", request.request_id, verdict.reason)
                )

    def _execute(self, batch: ScheduledBatch) -> None:
        step, events = self.step, self.trace.events
        for request in batch.paused_requests:
            events.append(Event(step, "suspended", request.request_id))
        for request in batch.recompute_paused_requests:
            events.append(
                Event(
                    step,
                    "recompute_paused",
                    request.request_id,
                    f"{request.context_len} context tokens to recompute",
                )
            )
        for request in batch.aborted_requests:  # one that never started was turned away
            request.end_step = step
            kind = "rejected" if request.first_scheduled_step is None else "aborted"
            events.append(Event(step, kind, request.request_id, request.reason))
        for request in batch.fitting_disagg_gen_init_requests:
            self._mark_started(request)
            request.context_current_position = request.prompt_len
            self.scheduler.manager.reject_draft_tokens(request)
            self._produce_token(request)  # the context server's first token
        update = self.scheduler.manager.update_context
        for request in batch.context_requests:
            self._mark_started(request)
            request.context_current_position += request.context_chunk_size
            update(request)
            if request.is_context_finished:
                self.scheduler.manager.reject_draft_tokens(request)
                self._produce_token(request)
        for request in batch.generation_requests:
            self.scheduler.manager.reject_draft_tokens(request)
            if (
                request.first_token_step is None
                or request.num_generated + 1 >= request.output_limit
            ):
                self._produce_token(request)  # a first or a last token: events to record
            else:
                request.num_generated += 1

    def _mark_started(self, request: Request) -> None:
        if request.first_scheduled_step is None:
            request.first_scheduled_step = self.step
            self.trace.events.append(Event(self.step, "started", request.request_id))

    def _produce_token(self, request: Request) -> None:
        if request.num_generated < request.output_limit:
            request.num_generated += 1
            if request.first_token_step is None:
                request.first_token_step = self.step
                self.trace.events.append(Event(self.step, "first_token", request.request_id))
        if request.num_generated >= request.output_limit and request.is_context_finished:
            # is_finished_generating, its cheap half first
            self.scheduler.finish(request)
            request.end_step = self.step
            request.reason = finished_reason(request, self.step)
            self.trace.events.append(Event(self.step, "finished", request.request_id))

    def _record(self, batch: ScheduledBatch) -> None:
        scheduler, manager = self.scheduler, self.scheduler.manager
        counts = scheduler.counts
        self.trace.steps.append(
            StepRecord(
                self.step,
                manager.free_blocks,
                manager.total_blocks - manager.free_blocks,
                manager.host_tier.used_blocks,
                counts[RequestState.RUNNING],
                counts[RequestState.WAITING],
                len(self.queue),
                counts[RequestState.SUSPENDED],
                len(batch.context_requests) + batch.num_aborted_context_rows,
                len(batch.generation_requests),
                batch.num_tokens,
                len(batch.paused_requests),
                len(batch.recompute_paused_requests),
                counts[RequestState.REJECTED],
                counts[RequestState.FINISHED],
                scheduler.stalled_passes,
            )
        )

    def _check_invariants(self) -> None:
        """The scheduler's invariants, plus: submitted == finished + rejected + waiting +
        running (suspended counted as running), and nothing lost."""
        self.scheduler.check_invariants()
        counts = self.scheduler.counts
        submitted = len(self.scheduler.submitted_requests)
        assert submitted + len(self.queue) == self.next_arrival, "an arrival was lost"
        assert all(r.state is RequestState.WAITING and r.activated_step is None for r in self.queue)
        assert (
            self.max_num_active_requests is None or self.num_active <= self.max_num_active_requests
        ), "more active requests than allowed"
        assert submitted == (
            counts[RequestState.FINISHED]
            + counts[RequestState.REJECTED]
            + counts[RequestState.WAITING]
            + counts[RequestState.RUNNING]
            + counts[RequestState.SUSPENDED]
        )
        unsubmitted = self.arrivals[self.next_arrival :]
        assert all(
            r.state is RequestState.WAITING and r.first_scheduled_step is None for r in unsubmitted
        )
        assert self.next_arrival + len(unsubmitted) == len(self.requests), "a request was lost"

    def result(self, max_steps: int) -> SimulationResult:
        max_steps = check_int("max_steps", max_steps, low=0, high=MAX_COUNT)
        end_step = self.step
        for request in self.requests:
            if request.state in LIVE_STATES:
                request.reason = self._unfinished_reason(request, max_steps)
        return SimulationResult(
            status={r.request_id: r.state.status for r in self.requests},
            reasons={r.request_id: r.reason for r in self.requests},
            error=self.error,
            trace=self.trace,
            requests={r.request_id: r for r in self.requests},
            end_step=end_step,
            iterations=self.iterations,
        )

    def _unfinished_reason(self, request: Request, max_steps: int) -> str:
        submitted = request.activated_step is not None
        if request.state is RequestState.WAITING and submitted:
            geometry = self.scheduler.manager.geometry
            refusals = request.num_refusals
            passes = (
                "not refused by any scheduling pass before the run ended"
                if refusals == 0
                else "refused in 1 scheduling pass"
                if refusals == 1
                else f"refused in {refusals:,} scheduling passes"
            )
            detail = (
                f"{passes}; its context of "
                f"{request.context_len:,} tokens needs "
                f"{geometry.blocks_for_tokens(request.context_len):,} pages, the pool has "
                f"{self.scheduler.manager.total_blocks:,}, {self.scheduler.manager.free_blocks:,} of them "
                "free when the run ended"
            )
        elif submitted:  # running, or suspended (reported as running: it keeps its KV)
            detail = (
                "suspended, its pages held, after "
                if request.state is RequestState.SUSPENDED
                else ""
            ) + f"{request.num_generated:,} of {request.max_new_tokens:,} tokens generated"
        elif request.arrival_step < self.step:
            detail = (
                f"in the executor's queue since step {request.arrival_step:,}, behind "
                f"{self.max_num_active_requests:,} active requests (max_num_active_requests)"
            )
        else:
            detail = f"it arrives at step {request.arrival_step:,}"
        if self.error is not None:
            culprit = getattr(self.error, "request_id", None) == request.request_id
            return (
                f"engine stopped at step {self.step - 1:,} by {type(self.error).__name__}"
                f"{' raised by this request' if culprit else ''} ({detail}): {self.error}"
            )
        if not submitted and request.arrival_step < self.step:
            return f"still queued when the run ended at max_steps={max_steps}: {detail}"
        if not submitted:
            return f"not submitted: {detail}, and the run ended at max_steps={max_steps}"
        return f"still {request.state} when the run ended at max_steps={max_steps}: {detail}"
