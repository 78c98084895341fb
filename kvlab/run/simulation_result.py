"""What a run of the executor loop reports (kvlab.run.simulation): the result record, its
summary, the reasons its requests end with (causes and numbers; kvlab.analysis.sentences words
them), and the loop's per-step record and invariants."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvlab.core.cause import Cause, Reason
from kvlab.core.checks import MAX_COUNT, check_int, check_items
from kvlab.core.request import LIVE_STATES, UNFINISHED_STATUSES, Request, RequestState
from kvlab.run.trace import StepRecord, Trace

if TYPE_CHECKING:  # pragma: no cover
    from collections import deque

    import pandas as pd

    from kvlab.sched.base import ScheduledBatch, SchedulerBase

#: The Request fields :meth:`SimulationResult.requests_to_pandas` shows, in order.
REQUEST_COLUMNS = (
    "prompt_len max_new_tokens num_generated arrival_step first_scheduled_step first_token_step"
    " end_step num_suspensions num_recomputes num_refusals"
).split()


@dataclass
class SimulationResult:
    """Outcome of ``simulate``: per-request status and reason, the error that stopped the
    engine (or None) and the per-step trace."""

    status: dict[str, RequestState]
    reasons: dict[str, Reason | None]
    error: BaseException | None
    trace: Trace
    requests: dict[str, Request]
    end_step: int  # the first step the run did not reach
    iterations: int  # scheduler passes run

    def outcome(self) -> tuple[Any, ...]:
        """What a run decided: the error's type, every request's status, state, reason and
        :data:`REQUEST_COLUMNS`, the events and the step records (two runs agreeing on it ran
        alike: kvlab.run.fast_forward against stepping)."""
        return (
            None if self.error is None else type(self.error).__name__,
            self.status,
            {
                i: (r.state, r.reason, *(getattr(r, column) for column in REQUEST_COLUMNS))
                for i, r in self.requests.items()
            },
            self.trace.events,
            self.trace.steps,
        )

    def ids_with_status(self, status: str) -> list[str]:
        return [request_id for request_id, value in self.status.items() if value == status]

    def summary(self) -> dict[str, Any]:
        """Counts per status, goodput and latencies in steps (means over the requests they
        apply to; None where none does), and ``reused_tokens``: context tokens a cached prefix
        provided (block reuse), summed over the requests' last contexts."""
        requests = self.requests.values()
        finished = [self.requests[i] for i in self.ids_with_status(RequestState.FINISHED)]

        def mean_steps(
            step_of: Callable[[Request], int | None], among: Iterable[Request] = requests
        ) -> float | None:
            """Mean steps from arrival to ``step_of`` over the requests that reached it."""
            waits = [step - r.arrival_step for r in among if (step := step_of(r)) is not None]
            return sum(waits) / len(waits) if waits else None

        statuses = (RequestState.FINISHED, RequestState.REJECTED, *UNFINISHED_STATUSES)
        summary: dict[str, Any] = {s.value: len(self.ids_with_status(s)) for s in statuses}
        summary.update(
            iterations=self.iterations,
            error=None if self.error is None else type(self.error).__name__,
            goodput_tokens_per_step=(
                sum(r.num_generated for r in finished) / self.iterations if self.iterations else 0.0
            ),
            mean_wait_steps=mean_steps(lambda r: r.first_scheduled_step),
            mean_queue_steps=mean_steps(lambda r: r.activated_step),
            mean_ttft_steps=mean_steps(lambda r: r.first_token_step),
            mean_latency_steps=mean_steps(lambda r: r.end_step, finished),
            suspensions=sum(r.num_suspensions for r in requests),
            recomputes=sum(r.num_recomputes for r in requests),
            reused_tokens=sum(r.prepopulated_prompt_len for r in requests),
        )
        return summary

    def requests_to_pandas(self) -> pd.DataFrame:
        """One row per request: status, the cause of its reason, lengths, steps and preemption
        counts."""
        import pandas as pd

        rows = [
            dict(
                request_id=r.request_id,
                status=self.status[r.request_id],
                state=r.state,
                cause=reason.cause if (reason := self.reasons[r.request_id]) else None,
                **{column: getattr(r, column) for column in REQUEST_COLUMNS},
                reused_tokens=r.prepopulated_prompt_len,
            )
            for r in self.requests.values()
        ]
        return pd.DataFrame(rows)


def refused_to_start(requests: Iterable[Request], message: str) -> SimulationResult:
    """The result of an engine that refused to start (vLLM's start-up checks): every request
    rejected with ``message``, nothing run, and a ValueError as the error."""
    copies = {r.request_id: r for r in fresh_copies(requests)}
    for request in copies.values():
        request.state = RequestState.REJECTED
        request.reason = Reason(Cause.ENGINE_REFUSED_TO_START, message=message)
    return SimulationResult(
        status=dict.fromkeys(copies, RequestState.REJECTED),
        reasons={i: r.reason for i, r in copies.items()},
        error=ValueError(message),
        trace=Trace(),
        requests=copies,
        end_step=0,
        iterations=0,
    )


def finished_reason(request: Request, step: int) -> Reason:
    """The reason a request that finished at ``step`` gives; ``stopped_at`` where the engine's
    length limit stopped it short of max_new_tokens (vLLM's max_model_len, SGLang's clip)."""
    short = request.output_limit < request.max_new_tokens
    return Reason(
        Cause.FINISHED,
        dict(
            step=step,
            generated=request.num_generated,
            prompt_len=request.prompt_len,
            max_new_tokens=request.max_new_tokens,
            stopped_at=request.prompt_len + request.num_generated if short else None,
        ),
    )


def fresh_copies(requests: Iterable[Request]) -> list[Request]:
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


class EngineRecords:
    """The executor loop's trace step and invariants, mixed into kvlab.run.simulation.Engine."""

    scheduler: SchedulerBase
    step: int
    trace: Trace
    queue: deque[Request]
    arrivals: list[Request]
    next_arrival: int
    requests: list[Request]
    max_num_active_requests: int | None
    error: BaseException | None
    iterations: int

    @property
    def num_active(self) -> int:
        """Requests the scheduler holds: waiting for a first chunk, running or suspended."""
        counts = self.scheduler.counts
        return (
            counts[RequestState.WAITING]
            + counts[RequestState.RUNNING]
            + counts[RequestState.SUSPENDED]
        )

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
                len(batch.generation_requests) + batch.num_aborted_generation_rows,
                batch.num_tokens,
                len(batch.paused_requests),
                len(batch.recompute_paused_requests),
                counts[RequestState.REJECTED],
                counts[RequestState.FINISHED],
                scheduler.stalled_passes,
            )
        )

    def _check_invariants(self) -> None:
        """The scheduler's invariants, and no request lost between arrival and result."""
        self.scheduler.check_invariants()
        counts = self.scheduler.counts
        submitted = len(self.scheduler.submitted_requests)
        assert submitted + len(self.queue) == self.next_arrival, "an arrival was lost"
        assert all(r.state is RequestState.WAITING and r.activated_step is None for r in self.queue)
        assert (
            self.max_num_active_requests is None or self.num_active <= self.max_num_active_requests
        ), "more active requests than allowed"
        assert submitted == sum(counts.values())
        unsubmitted = self.arrivals[self.next_arrival :]
        assert all(
            r.state is RequestState.WAITING and r.first_scheduled_step is None for r in unsubmitted
        )
        assert self.next_arrival + len(unsubmitted) == len(self.requests), "a request was lost"

    def result(self, max_steps: int) -> SimulationResult:
        max_steps = check_int("max_steps", max_steps, low=0, high=MAX_COUNT)
        for request in self.requests:
            if request.state in LIVE_STATES:  # not ended, though with vLLM's async scheduling
                request.end_step = None  # its last token may be out, its batch unprocessed
                request.reason = self._unfinished_reason(request, max_steps)
        return SimulationResult(
            status={r.request_id: r.state.status for r in self.requests},
            reasons={r.request_id: r.reason for r in self.requests},
            error=self.error,
            trace=self.trace,
            requests={r.request_id: r for r in self.requests},
            end_step=self.step,
            iterations=self.iterations,
        )

    def _unfinished_reason(self, request: Request, max_steps: int) -> Reason:
        """Where a request still in the engine when the run ended was, with its numbers, and
        what ended the run: the error that stopped the engine, or max_steps."""
        step, error, manager = self.step, self.error, self.scheduler.manager
        submitted = request.activated_step is not None
        numbers: dict[str, int | str | bool | None] = dict(state=str(request.state))
        if request.state is RequestState.WAITING and submitted:
            cause = Cause.STILL_WAITING
            numbers.update(
                refusals=request.num_refusals,
                context_len=request.context_len,
                pages=manager.geometry.blocks_for_tokens(request.context_len),
                total_blocks=manager.total_blocks,
                free_blocks=manager.free_blocks,
            )
        elif submitted:  # running, or suspended (reported as running: it keeps its KV)
            cause = Cause.STILL_RUNNING
            numbers.update(generated=request.num_generated, max_new_tokens=request.max_new_tokens)
        elif request.arrival_step < step:
            cause = Cause.STILL_QUEUED
            numbers.update(
                arrival_step=request.arrival_step,
                max_num_active_requests=self.max_num_active_requests,
            )
        else:
            cause = Cause.NOT_SUBMITTED
            numbers.update(arrival_step=request.arrival_step)
        if error is None:
            return Reason(cause, numbers | {"max_steps": max_steps})
        numbers.update(
            stopped_at_step=step - 1,
            error=type(error).__name__,
            raised_by_this_request=getattr(error, "request_id", None) == request.request_id,
        )
        return Reason(cause, numbers, message=str(error))
