"""How a multi-rank run ended: every rank's result, the ranks that died or hung
(:class:`RankFailure`), each request's status and reason, as tables and text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvlab.core.memory import GIB
from kvlab.core.request import UNFINISHED_STATUSES
from kvlab.run.rank import RankResult
from kvlab.run.rank_config import Fault, RunConfig


@dataclass(frozen=True)
class RankFailure:
    """A rank that ended the run without a result: it "died" (its process exited) or "hung"
    (it stopped answering and was killed), the last step it reached, and when."""

    rank: int
    kind: str  # "died" or "hung"
    step: int  # the last step the rank reached
    at_s: float  # seconds into the run: its exit seen (died), or last heard from (hung)
    detail: str  # "exit code -9: SIGKILL", "no answer by timeout_s=4; killed", ...

    def what(self) -> str:
        return f"{self.kind} at step {self.step}, {self.at_s:.1f} s into the run ({self.detail})"

    def describe(self) -> str:
        return f"rank {self.rank} {self.what()}"


@dataclass(frozen=True)
class DistributedResult:
    """Every rank's result and how the run ended: "completed" (every rank finished), "shut
    down" (a rank raised; every rank went down), "died" (a rank process exited without a
    result), "hung" (no rank made progress for ``timeout_s``; the ranks were killed) or
    "deadline" (the run passed ``deadline_s`` while its ranks were still making progress; they
    were stopped). ``failures``: the ranks that died or hung, with the step and time. ``unrouted``: request id -> why no rank
    received it. ``fault_fired``: whether ``fault`` fired (None without one)."""

    ranks: tuple[RankResult, ...]
    ended: str
    reason: str
    mode: str  # "process" or "in-process"
    backend: str | None
    policy: str
    wall_s: float
    startup_s: float  # process start + init_process_group (0 in-process)
    work_s: float
    pids: tuple[int, ...] = ()  # the rank processes (all ended when run_ranks returns)
    timeout_s: float | None = None  # the seconds without progress that make a hang
    failures: tuple[RankFailure, ...] = ()
    unrouted: Mapping[str, str] = field(default_factory=dict)
    fault: Fault | None = None
    fault_fired: bool | None = None
    deadline_s: float | None = None  # the whole run's limit, if it had one

    @property
    def failure(self) -> RankFailure | None:
        """The failure that ended the run (the first death, else the first hang), if any."""
        return self.failures[0] if self.failures else None

    def request_outcomes(self) -> dict[str, tuple[int | None, str, str]]:
        """Every request of the run: id -> (rank it was routed to or None, status, reason)."""
        outcomes: dict[str, tuple[int | None, str, str]] = {}
        for r in self.ranks:
            for request_id, status in r.status.items():
                outcomes[request_id] = (r.rank, status, r.reasons.get(request_id, ""))
        for request_id, why in self.unrouted.items():
            outcomes[request_id] = (None, "not routed", why)
        return outcomes

    @property
    def engine_down(self) -> bool:
        return self.ended != "completed"

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def rank_rows(self) -> list[dict]:
        """One dict per rank: its workspace, its own pool, the pool after the MIN, the row
        width, its requests by status and how it ended (the notebooks show these as a table).
        In a run that went down, an unfinished status is what the request was doing when the run
        stopped, and says so ("1 running when the run stopped")."""
        rows = []
        for r in self.ranks:
            counts: dict[str, int] = {}
            for status in r.status.values():
                if self.engine_down and status in UNFINISHED_STATUSES:
                    status = f"{status} when the run stopped"
                counts[status] = counts.get(status, 0) + 1
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
                    "outcome": _outcome_text(r),
                }
            )
        return rows

    def table(self) -> str:
        """:meth:`rank_rows` as text, one line per rank (the command's report)."""
        lines = [
            f"{'rank':>4} {'workspace':>10} {'local pool':>22} {'pool after MIN':>24} "
            f"{'row':>6}  requests  outcome"
        ]
        for row in self.rank_rows():
            lines.append(
                f"{row['rank']:>4} {row['workspace (GiB)']:>7.1f} GiB "
                f"{row['own pool (pages)']:>7} blk {row['own quota (GiB)']:>7.1f} GiB "
                f"{row['pool after MIN (pages)']:>7} blk = {row['pool after MIN (tokens)']:>9} tok "
                f"{row['row (entries)']:>6}  {row['requests']}  {cut_between_words(row['outcome'])}"
            )
        return "\n".join(lines)

    @property
    def headline(self) -> str:
        """How the run ended, in one line."""
        return (
            f"{self.world_size} ranks ({self.mode}{', ' + self.backend if self.backend else ''}), "
            f"policy {self.policy}: {self.ended} - {self.reason}"
        )

    def explain(self) -> str:
        head = self.headline
        timing = (
            f"wall {self.wall_s:.2f} s (startup {self.startup_s:.2f} s, work {self.work_s:.2f} s)"
        )
        if self.timeout_s is not None:
            timing += f", timeout_s={self.timeout_s:g}"
        if self.deadline_s is not None:
            timing += f", deadline_s={self.deadline_s:g}"
        counts: dict[str, int] = {}
        for _, status, _ in self.request_outcomes().values():
            counts[status] = counts.get(status, 0) + 1
        lines = [
            head,
            self.table(),
            f"requests: {sum(counts.values())} ("
            + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            + ")",
        ]
        lines += [f"  {request_id}: {why}" for request_id, why in sorted(self.unrouted.items())][:5]
        if self.fault is not None:
            lines.append(
                f"fault: {self.fault!r} "
                + ("fired" if self.fault_fired else "did not fire (the run never reached it)")
            )
        return "\n".join(lines + [timing])


def _outcome_text(r: RankResult) -> str:
    if not r.error:
        return r.outcome
    return r.error if r.error.startswith(r.outcome) else f"{r.outcome}: {r.error}"


def cut_between_words(text: str, width: int = 100) -> str:
    """``text`` in at most ``width`` characters, cut between words."""
    if len(text) <= width:
        return text
    return text[: width - 3].rsplit(" ", 1)[0] + "..."


def ending(results: Sequence[RankResult]) -> tuple[str, str]:
    """How a run ended ("completed", "shut down", "died", "hung", "deadline") and why, from
    its ranks' results."""
    raised = [r for r in results if r.outcome == "raised"]
    if raised:
        return "shut down", f"rank {raised[0].rank} raised {raised[0].error}; every rank shut down"
    failed = [r for r in results if r.outcome == "died"] + [
        r for r in results if r.outcome == "hung"
    ]
    if failed:
        named = "; ".join(f"rank {r.rank} {r.error}" for r in failed[:3])
        more = f"; and {len(failed) - 3} more rank(s)" if len(failed) > 3 else ""
        return failed[0].outcome, named + more
    stopped = [r for r in results if r.outcome == "stopped"]
    if stopped:
        return "deadline", (
            f"{stopped[0].error.split(': ', 1)[1]}; {len(stopped)} rank(s) "
            "stopped while still making progress"
        )
    shut = [r for r in results if r.outcome == "shut down"]
    if shut:  # a peer failed a collective
        return "shut down", shut[0].error or "shut down"
    unfinished = sum(1 for r in results for s in r.status.values() if s in UNFINISHED_STATUSES)
    if unfinished:
        return "completed", f"{unfinished} request(s) unfinished: {results[0].error}"
    return "completed", "every rank finished its work"


def unrouted_reasons(config: RunConfig, ranks: Sequence[RankResult], cause: str) -> dict[str, str]:
    """Why each request that no rank received was not routed: the run ended first."""
    routed = {request_id for r in ranks for request_id in r.status}
    end = max((r.end_step for r in ranks), default=0)
    return {
        r.request_id: f"not routed: the run ended at step {end} ({cause}); it arrives at step "
        f"{r.arrival_step}"
        for r in config.requests
        if r.request_id not in routed
    }
