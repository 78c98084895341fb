"""Case studies: the three findings of the review of PR #17261's residency clamp (a proposal,
closed without merging; docs/REFERENCE.md §5). kvlab.sched.scheduler and kvlab.core.mamba hold the
fixed behaviour only; each finding's bug is a subclass here overriding one hook, and
:func:`run_review_findings` runs each with its bug and with its fix (notebook 05).

1. :class:`NoneFirstManager`: a rank with no local Mamba layers answers None
   (``max_resident_sequences``) before reading the all-reduced cap, so pipeline ranks disagree.
2. :class:`DisaggBypassScheduler`: DISAGG_GENERATION_INIT requests are neither gated by the cap
   nor counted toward it (``_disagg_gen_init_under_cap``).
3. :class:`BreakOnCapScheduler`: a first chunk refused at the cap ``break``s the scan
   (``_residency_refusal``), so non-first chunks behind it are never scheduled.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.core.geometry import KVGeometry, MambaGeometry
from kvlab.core.mamba import MambaHybridCacheManager, StateSlotsExhausted
from kvlab.core.request import Request
from kvlab.run.comm import ThreadComm, in_threads
from kvlab.sched.context_plan import ScheduleAction
from kvlab.sched.deadlock import SchedulerDeadlock
from kvlab.sched.scheduler import Scheduler


class NoneFirstManager(MambaHybridCacheManager):
    """Finding 1's bug: an attention-only rank returns None before the all-reduced cap."""

    def max_resident_sequences(self) -> int | None:
        if self.local_num_mamba_layers == 0:
            return None
        return super().max_resident_sequences()


class DisaggBypassScheduler(Scheduler):
    """Finding 2's bug: DISAGG_GENERATION_INIT bypasses the residency cap."""

    def _disagg_gen_init_under_cap(self) -> bool:
        return False


class BreakOnCapScheduler(Scheduler):
    """Finding 3's bug: a capped first chunk stops phase 2 (``break``, not ``continue``)."""

    def _residency_refusal(self) -> ScheduleAction:
        return ScheduleAction.STOP


# The scenarios: a tiny hybrid model with 2816-byte slots and 128-byte attention pages of 4 tokens.
REVIEW_MAMBA = MambaGeometry(
    num_mamba_layers=2,
    mamba_num_heads=4,
    mamba_head_dim=8,
    d_state=8,
    n_groups=2,
    d_conv=4,
    conv_dtype="bfloat16",
    ssm_dtype="float32",
)
REVIEW_ATTN = KVGeometry(
    num_layers=1, num_kv_heads=1, head_dim=8, dtype="float16", tokens_per_block=4
)


@dataclass(frozen=True)
class FindingRun:
    """One review finding of PR #17261's clamp run once, with (``bug=True``) or without its fix."""

    finding: int
    bug: bool
    metrics: tuple[tuple[str, int | None], ...]  # (label, value) for the figure; None: no cap
    outcome: str  # "ok", "stall" or "crash" (kvlab's outcome names)
    what: str  # what the run did, in words: "ok", "ranks disagree", ...
    detail: str

    @property
    def label(self) -> str:
        return "bug" if self.bug else "fix"


def _review_manager(
    affordable: int,
    max_batch_size: int,
    manager_class=MambaHybridCacheManager,
    pages: int = 20,
    **kwargs,
):
    """PR #17261's clamped manager (the findings are the review of that proposal)."""
    quota = (affordable + 1) * REVIEW_MAMBA.bytes_per_slot + pages * REVIEW_ATTN.bytes_per_block
    return manager_class(
        REVIEW_ATTN,
        REVIEW_MAMBA,
        quota,
        max_seq_len=pages * REVIEW_ATTN.tokens_per_block,
        max_batch_size=max_batch_size,
        residency="clamped",
        **kwargs,
    )


def _finding_1(bug: bool) -> FindingRun:
    """Rank 0 (Mamba, affords 3 of 8) and rank 1 (attention-only) MIN-reduce in two threads;
    then each rank schedules 8 fresh requests once."""
    manager_class = NoneFirstManager if bug else MambaHybridCacheManager
    comm = ThreadComm(2, timeout_s=30)
    managers: list = [None, None]

    def build(rank):
        if rank == 0:
            managers[0] = _review_manager(3, 8, manager_class, comm=comm.for_rank(0))
        else:
            attention_only = dict(max_seq_len=64, max_batch_size=8, residency="clamped")
            quota = 64 * REVIEW_ATTN.bytes_per_block
            managers[1] = manager_class(
                REVIEW_ATTN, None, quota, **attention_only, comm=comm.for_rank(1)
            )

    in_threads(comm, build)
    caps = [m.max_resident_sequences() for m in managers]
    admitted = []
    for m in managers:
        sched = Scheduler(m, max_num_tokens=256, max_batch_size=8)
        for i in range(8):
            sched.submit(Request(f"r{i}", prompt_len=8, max_new_tokens=4))
        admitted.append(len(sched.schedule().context_requests))
    agree = caps[0] == caps[1] and admitted[0] == admitted[1]
    metrics = (
        ("rank 0 cap", caps[0]),
        ("rank 1 cap", caps[1]),
        ("rank 0 admitted", admitted[0]),
        ("rank 1 admitted", admitted[1]),
    )
    detail = f"caps {caps} (None = unbounded); first chunks admitted in the first pass {admitted}: "
    if agree:
        return FindingRun(1, bug, metrics, "ok", "ok", detail + "the ranks agree")
    detail += "the pipeline ranks would run different batches"
    return FindingRun(1, bug, metrics, "stall", "ranks disagree", detail)


def _finding_2(bug: bool) -> FindingRun:
    """Cap 1, two DISAGG_GENERATION_INIT requests, one scheduler pass."""
    m = _review_manager(1, 4)
    sched = (DisaggBypassScheduler if bug else Scheduler)(m)
    requests = [
        Request(f"d{i}", prompt_len=8, max_new_tokens=4, disagg_generation_init=True)
        for i in range(2)
    ]
    for r in requests:
        sched.submit(r)
    try:
        admitted = len(sched.schedule().fitting_disagg_gen_init_requests)
        outcome, what = "ok", "ok"
        detail = f"{admitted} of 2 admitted; the other waits for the slot"
    except StateSlotsExhausted as exc:
        admitted = sum(r.request_id in m.caches for r in requests) + 1  # + the one that raised
        outcome, what = "crash", "crash (StateSlotsExhausted)"
        detail = f"{admitted} of 2 admitted past the cap: {exc}"
    metrics = (("cap", m.max_resident_sequences()), ("admitted in one pass", admitted))
    return FindingRun(2, bug, metrics, outcome, what, detail)


def _finding_3(bug: bool, stall_limit: int = 5) -> FindingRun:
    """Cap 1: B is mid-prefill and holds the slot; A, a first chunk, sits ahead of B. Run
    passes until B's prefill is done or the stall detector fires."""
    m = _review_manager(1, 2, pages=21)
    sched = (BreakOnCapScheduler if bug else Scheduler)(
        m,
        max_num_tokens=16,
        max_batch_size=4,
        chunked_prefill=True,
        chunk_unit_size=4,
        stall_limit=stall_limit,
    )
    b = Request("B", prompt_len=40, max_new_tokens=2)
    sched.submit(b)
    sched.schedule()
    b.context_current_position += b.context_chunk_size  # the executor ran B's first chunk
    sched.submit(Request("A", prompt_len=8, max_new_tokens=2))
    sched._active.sort(key=lambda r: r.request_id)  # A ahead of B (priority sort, recompute pause)
    scheduled = stalled = 0
    try:
        while not b.is_context_finished:
            if b in sched.schedule().context_requests:
                scheduled += 1
                b.context_current_position += b.context_chunk_size
            else:
                stalled += 1
    except SchedulerDeadlock as exc:
        stalled = exc.stalled_passes  # the raising pass included
        metrics = (("B chunks scheduled", scheduled), ("stalled passes", stalled))
        return FindingRun(
            3, bug, metrics, "stall", "stall (SchedulerDeadlock)", f"B never advanced: {exc}"
        )
    metrics = (("B chunks scheduled", scheduled), ("stalled passes", stalled))
    detail = f"A skipped (capped), B's remaining {scheduled} chunks scheduled"
    return FindingRun(3, bug, metrics, "ok", "ok", detail)


def run_review_finding(finding: int, bug: bool) -> FindingRun:
    """Run one of the review's findings on PR #17261's clamp (1, 2, 3) with its bug or its fix."""
    runners = {1: _finding_1, 2: _finding_2, 3: _finding_3}
    if finding not in runners:
        raise ValueError(f"finding must be 1, 2 or 3, got {finding!r}")
    if not isinstance(bug, bool):
        raise TypeError(f"bug must be a bool, got {bug!r}")
    return runners[finding](bug)


def run_review_findings() -> list[FindingRun]:
    """Every finding, bug then fix: six runs."""
    return [run_review_finding(n, bug) for n in (1, 2, 3) for bug in (True, False)]
