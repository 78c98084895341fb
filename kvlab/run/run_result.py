"""How a multi-rank run ended: each rank's :class:`RankResult`, the ranks that died or hung
(:class:`RankFailure`) and the run's :class:`DistributedResult`. Statuses and reasons are
derived from the requests each rank holds, never copied."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from kvlab.core.cause import Cause, Reason
from kvlab.core.memory import GIB, MemoryBudget
from kvlab.core.request import LIVE_STATES, UNFINISHED_STATUSES, Request
from kvlab.run.rank_config import Fault, RunConfig


class Outcome(StrEnum):
    """How a rank or a whole run ended: one vocabulary (a run ends as its first failed rank)."""

    FINISHED = "finished"  # a rank did its work
    COMPLETED = "completed"  # the run: every rank finished
    RAISED = "raised"  # the rank whose engine raised
    SHUT_DOWN = "shut down"  # went down with a rank that raised, died or hung
    DIED = "died"  # its process exited without a result
    HUNG = "hung"  # stopped answering; killed
    STOPPED = "stopped"  # a rank still stepping when the run passed deadline_s
    DEADLINE = "deadline"  # the run passed deadline_s


class RankRunStatus(StrEnum):
    """A request's status that only a multi-rank run has, beside RequestState's."""

    LOST = "lost"  # its rank died, hung or was stopped
    NOT_ROUTED = "not routed"  # the run ended before it arrived


#: The rank outcomes whose unfinished requests are lost.
LOSING = (Outcome.DIED, Outcome.HUNG, Outcome.STOPPED)


@dataclass(frozen=True, kw_only=True)
class RankResult:
    """One rank's run: its pool before and after the MIN, how it ended and its requests."""

    rank: int
    outcome: Outcome
    error: str | None  # why it stopped, if it did not finish
    traceback: str | None  # the raising rank's traceback, trimmed to kvlab frames
    budget: MemoryBudget
    bytes_per_block: int  # the model's
    local_blocks: int  # its own pool, before the MIN
    blocks: int  # after the MIN: the pool it built
    capacity_tokens: int  # after the MIN (the all-reduced token capacity)
    max_seq_len: int  # clamped
    max_blocks_per_seq: int
    requests: tuple[Request, ...]  # those routed to it, as it last knew them
    iterations: int
    end_step: int

    @property
    def workspace_bytes(self) -> int:
        return self.budget.workspace_bytes

    @property
    def local_quota_bytes(self) -> int:
        return self.budget.kv_quota_bytes

    @property
    def quota_bytes(self) -> int:
        """The quota its pool uses after the MIN (model bytes)."""
        return self.blocks * self.bytes_per_block

    @property
    def status(self) -> dict[str, str]:
        """Request id -> its status: a RequestState's, or "lost" on a rank that failed."""
        lost = self.outcome in LOSING
        return {
            r.request_id: RankRunStatus.LOST if lost and r.state in LIVE_STATES else r.state.status
            for r in self.requests
        }

    @property
    def reasons(self) -> dict[str, Reason | None]:
        """Request id -> why it ended as it did; an unfinished one names why its rank stopped."""
        return {r.request_id: self._reason(r) for r in self.requests}

    def _reason(self, request: Request) -> Reason | None:
        if request.state not in LIVE_STATES or self.outcome in (Outcome.FINISHED, Outcome.RAISED):
            return request.reason
        if self.outcome in LOSING:
            return Reason(Cause.LOST_WITH_ITS_RANK, dict(rank=self.rank), self.error or "")
        return Reason(Cause.RANK_STOPPED, dict(step=self.end_step), self.error or "")


def rank_result(
    config: RunConfig,
    rank: int,
    *,
    outcome: Outcome,
    error: str | None,
    pool: Sequence[int] = (0, 0, 0, 0),
    requests: Iterable[Request] = (),
    traceback: str | None = None,
    iterations: int = 0,
    end_step: int = 0,
) -> RankResult:
    """A RankResult from rank ``rank``'s budget in ``config`` and ``pool``: (blocks after the
    MIN, capacity tokens, clamped max_seq_len, max_blocks_per_seq); zeros before its build."""
    blocks, capacity, max_seq_len, width = pool
    return RankResult(
        rank=rank,
        outcome=outcome,
        error=error,
        traceback=traceback,
        budget=config.budgets[rank],
        bytes_per_block=config.geometry.bytes_per_block,
        local_blocks=config.pool_plan()[0][rank],
        blocks=blocks,
        capacity_tokens=capacity,
        max_seq_len=max_seq_len,
        max_blocks_per_seq=width,
        requests=tuple(requests),
        iterations=iterations,
        end_step=end_step,
    )


@dataclass(frozen=True, kw_only=True)
class RankFailure:
    """A rank that ended the run without a result: it died or hung, at a step, at a time."""

    rank: int
    kind: Outcome  # DIED or HUNG
    step: int  # the last step the rank reached
    at_s: float  # seconds into the run: its exit seen (died), or last heard from (hung)
    detail: str  # "exit code -9: SIGKILL", "no progress for timeout_s=4 s; killed", ...

    def what(self) -> str:
        return f"{self.kind} at step {self.step}, {self.at_s:.1f} s into the run ({self.detail})"

    def describe(self) -> str:
        return f"rank {self.rank} {self.what()}"


@dataclass(frozen=True, kw_only=True)
class DistributedResult:
    """Every rank's result and how the run ended (:attr:`ended`: an :class:`Outcome`, and
    :attr:`reason`), both derived from the ranks. ``failures``: the ranks that died or hung;
    ``not_routed``: the requests no rank received; ``fault_fired``: None without a fault."""

    ranks: tuple[RankResult, ...]
    mode: str  # "process" or "in-process"
    backend: str | None
    policy: str
    wall_s: float
    startup_s: float  # process start + init_process_group (0 in-process)
    pids: tuple[int, ...] = ()  # the rank processes (all ended when run_ranks returns)
    timeout_s: float | None = None  # the seconds without progress that make a hang
    deadline_s: float | None = None  # the whole run's limit, if it had one
    failures: tuple[RankFailure, ...] = ()
    not_routed: tuple[Request, ...] = ()
    fault: Fault | None = None
    fault_fired: bool | None = None

    @property
    def work_s(self) -> float:
        return self.wall_s - self.startup_s

    @property
    def ended(self) -> Outcome:
        return ending(self.ranks)[0]

    @property
    def reason(self) -> str:
        reason = ending(self.ranks)[1]
        if self.fault is not None and self.fault_fired is False:
            reason += (
                f"; {self.fault!r} did not fire: rank {self.fault.rank} never ran step "
                f"{self.fault.step} (the run ended at step {self.end_step})"
            )
        return reason

    @property
    def end_step(self) -> int:
        return max((r.end_step for r in self.ranks), default=0)

    @property
    def failure(self) -> RankFailure | None:
        """The failure that ended the run (the first death, else the first hang), if any."""
        return self.failures[0] if self.failures else None

    @property
    def unrouted(self) -> dict[str, Reason]:
        """Request id -> why no rank received it: the run ended first."""
        cause = self.failures[0].describe() if self.failures else ending(self.ranks)[1]
        return {
            r.request_id: Reason(
                Cause.NOT_ROUTED, dict(end_step=self.end_step, arrival_step=r.arrival_step), cause
            )
            for r in self.not_routed
        }

    def request_outcomes(self) -> dict[str, tuple[int | None, str, Reason | None]]:
        """Every request of the run: id -> (rank it was routed to or None, status, reason)."""
        outcomes: dict[str, tuple[int | None, str, Reason | None]] = {}
        for r in self.ranks:
            reasons = r.reasons
            for request_id, status in r.status.items():
                outcomes[request_id] = (r.rank, status, reasons[request_id])
        for request_id, why in self.unrouted.items():
            outcomes[request_id] = (None, RankRunStatus.NOT_ROUTED, why)
        return outcomes

    @property
    def engine_down(self) -> bool:
        return self.ended != Outcome.COMPLETED

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def rank_rows(self) -> list[dict[str, object]]:
        """One dict per rank: its workspace, its own pool, the pool after the MIN, the row
        width, its requests by status ("1 running when the run stopped" in a run that went
        down) and how it ended (the notebooks show these as a table)."""
        rows: list[dict[str, object]] = []
        for r in self.ranks:
            counts = Counter(
                f"{s} when the run stopped" if self.engine_down and s in UNFINISHED_STATUSES else s
                for s in r.status.values()
            )
            error = r.error or ""
            outcome = error if error.startswith(r.outcome) else f"{r.outcome}: {error}"
            rows.append(
                {
                    "rank": r.rank,
                    "workspace (GiB)": r.workspace_bytes / GIB,
                    "own pool (pages)": r.local_blocks,
                    "own quota (GiB)": r.local_quota_bytes / GIB,
                    "pool after MIN (pages)": r.blocks,
                    "pool after MIN (tokens)": r.capacity_tokens,
                    "row (entries)": r.max_blocks_per_seq,
                    "requests": ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "-",
                    "outcome": outcome if error else str(r.outcome),
                }
            )
        return rows

    def table(self) -> str:
        """:meth:`rank_rows` as text, one line per rank (the command's report)."""
        line = "{:>4} {:>7.1f} GiB {:>7} blk {:>7.1f} GiB {:>7} blk = {:>9} tok {:>6}  {}  {}"
        head = f"{'rank':>4} {'workspace':>10} {'local pool':>22} {'pool after MIN':>24} {'row':>6}"
        rows = [
            [*row.values()][:-1] + [cut_between_words(str(row["outcome"]))]
            for row in self.rank_rows()
        ]
        return "\n".join([f"{head}  requests  outcome", *(line.format(*row) for row in rows)])

    @property
    def headline(self) -> str:
        """How the run ended, in one line."""
        return (
            f"{self.world_size} ranks ({self.mode}{', ' + self.backend if self.backend else ''}), "
            f"policy {self.policy}: {self.ended} - {self.reason}"
        )


def cut_between_words(text: str, width: int = 100) -> str:
    """``text`` in at most ``width`` characters, cut between words."""
    return text if len(text) <= width else text[: width - 3].rsplit(" ", 1)[0] + "..."


def ending(results: Sequence[RankResult]) -> tuple[Outcome, str]:
    """How a run ended and why, from its ranks' results."""
    by = {kind: [r for r in results if r.outcome == kind] for kind in Outcome}
    if by[Outcome.RAISED]:
        first = by[Outcome.RAISED][0]
        return Outcome.SHUT_DOWN, f"rank {first.rank} raised {first.error}; every rank shut down"
    failed = by[Outcome.DIED] + by[Outcome.HUNG]
    if failed:
        named = "; ".join(f"rank {r.rank} {r.error}" for r in failed[:3])
        more = f"; and {len(failed) - 3} more rank(s)" if len(failed) > 3 else ""
        return failed[0].outcome, named + more
    if by[Outcome.STOPPED]:
        stopped = by[Outcome.STOPPED]
        return Outcome.DEADLINE, (
            f"{(stopped[0].error or '').split(': ', 1)[1]}; {len(stopped)} rank(s) "
            "stopped while still making progress"
        )
    if by[Outcome.SHUT_DOWN]:  # a peer failed a collective
        return Outcome.SHUT_DOWN, by[Outcome.SHUT_DOWN][0].error or "shut down"
    unfinished = sum(s in UNFINISHED_STATUSES for r in results for s in r.status.values())
    if unfinished:
        return Outcome.COMPLETED, f"{unfinished} request(s) unfinished: {results[0].error}"
    return Outcome.COMPLETED, "every rank finished its work"


def not_routed(config: RunConfig, ranks: Iterable[RankResult]) -> tuple[Request, ...]:
    """The requests of ``config`` that no rank received."""
    routed = {r.request_id for rank in ranks for r in rank.requests}
    return tuple(r for r in config.requests if r.request_id not in routed)
