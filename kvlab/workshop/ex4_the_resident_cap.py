"""Exercise 4: the resident cap's scan. The phase-2 loop of ``KVCacheV2Scheduler`` in PR #17261
(scheduler_v2.py, the resident-sequence cap; docs/REFERENCE.md §5) has the bug the review found.
Self-contained here: :func:`schedule_pending_contexts_buggy` is the PR's loop, reduced to the cap
(notebook 05 runs the same bug on kvlab's Scheduler, as ``kvlab.case_studies.BreakOnCapScheduler``).
A wrong case's feedback is read off what the learner's loop returned: the usual slips (SLIPS) are
run on the case, and the one that returns the same ids names the mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvlab.core.words import counted
from kvlab.workshop.feedback import (
    NOT_YET,
    CheckResult,
    Hint,
    call_learner,
    check_flags,
    finish,
    learner_name,
)


@dataclass(frozen=True)
class PendingContext:
    """A context request waiting in phase 2, reduced to what the resident cap reads.
    ``is_first_context_chunk``: it has no resident state yet, so scheduling it starts a new
    sequence (and claims a recurrent-state slot for the rest of its life)."""

    request_id: str
    is_first_context_chunk: bool


def schedule_pending_contexts_buggy(
    pending_ctx: Sequence[PendingContext],
    num_resident: int,
    max_resident: int | None,
    max_num_requests: int,
) -> list[str]:
    """The phase-2 loop of PR #17261 (scheduler_v2.py, ``KVCacheV2Scheduler``, around the
    resident-sequence guard the review flagged), reduced to the cap. Returns the ids scheduled
    this iteration, in order. ``max_resident`` None means unbounded (attention-only models).
    It has the bug the review found."""
    scheduled = []
    for req in pending_ctx:
        if len(scheduled) >= max_num_requests:  # the batch is full: nothing later fits either
            break
        # A first context chunk starts a new sequence and therefore claims a
        # state slot for the rest of its lifetime.
        starts_new_sequence = max_resident is not None and req.is_first_context_chunk
        if starts_new_sequence and num_resident >= max_resident:
            break
        scheduled.append(req.request_id)
        if starts_new_sequence:
            num_resident += 1
    return scheduled


def _ctx(spec: str) -> list[PendingContext]:
    """'new-a old-b' -> [first chunk 'new-a', non-first chunk 'old-b']."""
    return [PendingContext(word, word.startswith("new")) for word in spec.split()]


#: (label, pending (new-* = first chunk, old-* = a later chunk), resident, cap, max requests, expected)
SCAN_CASES = [
    (
        "the review's case: a capped first chunk before a started one",
        "new-a old-b",
        1,
        1,
        8,
        ["old-b"],
    ),
    ("room for one more new sequence", "new-a new-b old-c", 1, 2, 8, ["new-a", "old-c"]),
    (
        "started chunks never count against the cap",
        "old-a old-b old-c",
        3,
        3,
        8,
        ["old-a", "old-b", "old-c"],
    ),
    ("no cap (attention-only: max_resident None)", "new-a new-b", 5, None, 8, ["new-a", "new-b"]),
    ("every new sequence capped", "new-a new-b", 2, 2, 8, []),
    ("the batch budget is full", "old-a old-b old-c", 0, None, 2, ["old-a", "old-b"]),
]


def _scan(
    pending_ctx: Sequence[PendingContext],
    num_resident: int,
    max_resident: int | None,
    max_num_requests: int,
    *,
    stop_at_cap: bool = False,
    count_new: bool = True,
    gate_started: bool = False,
    none_as_zero: bool = False,
    ignore_cap: bool = False,
    past_cap: bool = False,
) -> list[str]:
    """The loop as the fix has it, or with one of the slips in SLIPS (a keyword set True, or
    ``count_new`` False): what a learner's loop with that slip returns."""
    scheduled = []
    cap = 0 if max_resident is None and none_as_zero else max_resident
    for req in pending_ctx:
        if len(scheduled) >= max_num_requests:
            break
        gated = cap is not None and (req.is_first_context_chunk or gate_started)
        if gated and (num_resident > cap if past_cap else num_resident >= cap) and not ignore_cap:
            if stop_at_cap:
                break
            continue
        scheduled.append(req.request_id)
        if cap is not None and req.is_first_context_chunk and count_new:
            num_resident += 1
    return scheduled


def _names(ids: list[str]) -> str:
    return ", ".join(repr(r) for r in ids)


def _stopped_at_cap(spec: str, got: list[str], expected: list[str], resident: int, cap) -> Hint:
    ids = spec.split()
    stopped, behind = ids[len(got)], [r for r in ids[len(got) + 1 :] if r in expected]
    return Hint(
        f"your scan ended at {stopped!r}, which must wait, so it never reached {_names(behind)}, "
        f"which should run this iteration: why did your loop stop at {stopped!r}?",
        f"`break` ended the scan at {stopped!r} and starved {_names(behind)}: skip only the "
        "capped request (`continue`); the batch budget's `break` stays",
    )


def _slots(resident: int, cap: int) -> str:
    free = cap - resident
    return f"{counted(free, 'resident slot') if free else 'no resident slot'} free ({resident} of {cap} taken)"


def _uncounted(spec: str, got: list[str], expected: list[str], resident: int, cap) -> Hint:
    started = [r for r in got if r.startswith("new")]
    takers = [r for r in started if r in expected]
    waits = [r for r in got if r not in expected]
    takes = "takes the last free slot" if cap - resident == 1 else "take the free slots"
    must = "must wait" if len(waits) == 1 else "must all wait"
    return Hint(
        f"your loop started {len(started)} new sequences ({_names(started)}) with "
        f"{_slots(resident, cap)}: does it count the slot each scheduled first chunk takes?",
        f"each first chunk scheduled takes a slot: count it (num_resident += 1). With "
        f"{_slots(resident, cap)}, {_names(takers)} {takes} and {_names(waits)} {must}",
    )


def _uncapped(spec: str, got: list[str], expected: list[str], resident: int, cap) -> Hint:
    started = [r for r in got if r.startswith("new")]
    waits = [r for r in got if r not in expected]
    return Hint(
        f"your loop started {len(started)} new sequences ({_names(started)}) with "
        f"{_slots(resident, cap)}: does it still hold a first chunk back when no slot is free?",
        f"a fix must keep the cap: with {_slots(resident, cap)}, {_names(waits)} must wait",
    )


def _past_cap(spec: str, got: list[str], expected: list[str], resident: int, cap) -> Hint:
    waits = [r for r in got if r not in expected]
    return Hint(
        f"your loop let {_names(waits)} start past the cap ({resident} of {cap} slots taken "
        "before the scan): which comparison lets a first chunk in when num_resident equals "
        "max_resident?",
        "a first chunk starts only while num_resident < max_resident: hold it back when "
        f"num_resident >= max_resident (not >), so {_names(waits)} must wait",
    )


def _gated_started(spec: str, got: list[str], expected: list[str], resident: int, cap) -> Hint:
    held = [r for r in expected if r not in got]
    started = (
        "it continues a started sequence" if len(held) == 1 else "they continue started sequences"
    )
    holds = "holds its" if len(held) == 1 else "hold their"
    return Hint(
        f"your loop held back {_names(held)} at the cap, though {started}: does a later "
        "chunk need a new slot?",
        f"the cap gates only first chunks (is_first_context_chunk): {_names(held)} {holds} "
        "slot already and should run",
    )


def _none_as_capped(spec: str, got: list[str], expected: list[str], resident: int, cap) -> Hint:
    return Hint(
        "max_resident is None here, and your loop let no first chunk start: what does None "
        "mean for the cap?",
        "None means unbounded (attention-only models): no first chunk waits for a slot",
    )


#: the usual slips: (the keyword that gives _scan the slip, its value, the feedback it gets)
SLIPS = [
    ("stop_at_cap", True, _stopped_at_cap),
    ("count_new", False, _uncounted),
    ("gate_started", True, _gated_started),
    ("none_as_zero", True, _none_as_capped),
    ("past_cap", True, _past_cap),
    ("ignore_cap", True, _uncapped),
]


def _iterate(fn, max_steps: int = 12) -> tuple:
    """:func:`run_resident_iterations`, and the first log line where more sequences were
    resident than the cap (1) allows, or None."""
    chunks_left = {"waiter": 2, "runner": 2}
    started = {"waiter": False, "runner": True}
    resident, log, over_cap = 1, [], None
    for step in range(max_steps):
        pending = [
            PendingContext(r, not started[r]) for r in ("waiter", "runner") if chunks_left[r]
        ]
        if not pending:
            return step, log, over_cap
        before, peak = resident, resident
        scheduled = list(fn(pending, resident, 1, 8))
        for r in scheduled:
            resident += 0 if started[r] else 1
            peak = max(peak, resident)
            started[r] = True
            chunks_left[r] -= 1
            if chunks_left[r] == 0:
                resident -= 1
        log.append(
            f"iteration {step}: {before}/1 resident, pending {[p.request_id for p in pending]}, "
            f"scheduled {scheduled}, then {resident}/1 resident"
            + (
                ""
                if peak <= 1
                else " (over the cap)"
                if peak == resident
                else f" ({peak}/1 during it: over the cap)"
            )
        )
        if peak > 1 and over_cap is None:
            over_cap = log[-1]
    return None, log, over_cap


def run_resident_iterations(fn, max_steps: int = 12) -> tuple:
    """Drive ``fn`` as the scheduler would, one call per iteration: 'waiter' arrived first but
    could not start; 'runner' started and holds the only resident slot (cap 1), with two chunks
    to go; a scheduled chunk completes in its iteration, and a finished request frees its slot.
    Returns (steps to finish everything or None if it stalls, one log line per iteration; a line
    says when more than the cap were resident during its iteration)."""
    steps, log, _ = _iterate(fn, max_steps)
    return steps, log


def _scan_overrun(
    got: list[str], expected: list[str], resident: int, cap, budget: int
) -> Hint | None:
    """What a scan did wrong when it scheduled what the budget or a full cap forbids (a question,
    then the fix), or None."""
    if len(got) > budget:
        over = f"{len(got)} scheduled: more than max_num_requests={budget}, the batch budget"
        return Hint(over, over)
    extra = [r for r in got if r not in expected and r.startswith("new")]
    if extra and cap is not None and resident >= cap:  # every slot was taken from the start
        started = (
            f"{_names(extra)} {'started a new sequence' if len(extra) == 1 else 'started new sequences'} "
            f"with no resident slot free (cap {cap})"
        )
        return Hint(
            f"{started}: does your loop still hold a first chunk back when every slot is taken?",
            f"{started}: a fix must keep the cap, and hold a first chunk back when every slot "
            "is taken",
        )
    return None


def _unexplained(got: list[str], expected: list[str]) -> str:
    """What a scan that matches none of SLIPS got wrong, request by request."""
    if sorted(got) == sorted(expected):
        return "the right requests in another order: schedule them in pending order"
    started = "continues a started sequence: it needs no new slot"
    why = [
        f"{r!r} {started if r.startswith('old') else 'had a free slot'}"
        for r in expected
        if r not in got
    ]
    why += [f"{r!r} had no slot free" for r in got if r not in expected]
    return "; ".join(why)


def _case_answers(fn) -> list:
    """(case, what fn returned (a tuple as a list), the words for its raise or NOT_YET) per
    SCAN_CASES case."""
    answers = []
    for case in SCAN_CASES:
        _, spec, resident, cap, budget, _ = case
        got, error = call_learner(fn, _ctx(spec), resident, cap, budget)
        answers.append((case, list(got) if isinstance(got, tuple) else got, error))
    return answers


def _slip(answers: list):
    """The one slip of SLIPS that gives fn's answer on every case it answered, if there is one."""
    answered = [(case, got) for case, got, error in answers if error is None]
    for slip in SLIPS:
        keyword, value, _ = slip
        if answered and all(
            got == _scan(_ctx(case[1]), *case[2:5], **{keyword: value}) for case, got in answered
        ):
            return slip
    return None


def _scan_feedback(case, got: list[str], slip):
    """A wrong case's feedback: what the returned ids show (an overrun of a limit, the slip that
    gives them, or the requests it got wrong), as a str or a Hint."""
    label, spec, resident, cap, budget, expected = case
    where = f"pending [{spec}], {resident} resident, cap {cap}, max {budget} requests"
    wrong = f"{label} ({where}): scheduled {got}, expected {expected}"
    candidates = ([slip] if slip else []) + SLIPS
    explain = next(
        (
            describe
            for keyword, value, describe in candidates
            if got == _scan(_ctx(spec), resident, cap, budget, **{keyword: value})
        ),
        None,
    )
    overrun = _scan_overrun(got, expected, resident, cap, budget)
    # an off-by-one cap lets one too many in everywhere: its comparison is the question, not the cap
    if overrun and not (explain is _past_cap and len(got) <= budget):
        return Hint(f"{wrong} - {overrun.hint}", f"{wrong} - {overrun.reveal}")
    if explain is None:
        return f"{wrong} - {_unexplained(got, expected)}"
    hint = explain(spec, got, expected, resident, cap)
    return Hint(f"{wrong} - {hint.hint}", f"{wrong} - {hint.reveal}")


def check_resident_scan(
    fn: Callable[..., list[str]], *, strict: bool = False, reveal: bool | None = None
) -> CheckResult:
    """Exercise 4: ``fn(pending_ctx, num_resident, max_resident, max_num_requests)`` returns the
    ids scheduled, on SCAN_CASES and over several iterations (run_resident_iterations). A wrong
    case's feedback says what its returned ids show: a question first; the fix only from the
    same failure after the learner's change on (:func:`~kvlab.workshop.feedback.finish`)."""
    check_flags(strict, reveal)
    failures, passes = [], []
    answers = _case_answers(fn)
    slip = _slip(answers)
    for case, got, error in answers:
        label, expected = case[0], case[5]
        if error is NOT_YET:
            failures.append(NOT_YET)
        elif error:
            failures.append(f"{label}: {error}")
        elif not isinstance(got, list):
            failures.append(f"{label}: returned {got!r}; return the list of the ids scheduled")
        elif got != expected:
            failures.append(_scan_feedback(case, got, slip))
        else:
            passes.append(f"{label}: {expected}")
    try:
        steps, log, over_cap = _iterate(fn)
    except NotImplementedError:
        failures.append(NOT_YET)
    except Exception as exc:
        failures.append(f"over several iterations: raised {type(exc).__name__}: {exc}")
    else:
        if over_cap is not None and slip is not None and slip[2] is _past_cap:
            wrong = f"over several iterations: {over_cap}"
            failures.append(
                Hint(
                    f"{wrong} - which comparison lets a first chunk in when num_resident "
                    "equals max_resident?",
                    f"{wrong} - hold a first chunk back when num_resident >= max_resident (not >)",
                )
            )
        elif over_cap is not None:
            wrong = f"over several iterations: {over_cap}"
            failures.append(
                Hint(
                    f"{wrong} - does your loop still hold a first chunk back when every "
                    "slot is taken?",
                    f"{wrong} - a fix must keep the cap: a first chunk starts only while "
                    "num_resident < max_resident, and each one started counts",
                )
            )
        elif steps is None:
            failures.append(
                "over several iterations: the scheduler stalls - 'runner' holds the only slot "
                "and never gets its next chunk, so it never frees the slot 'waiter' waits for: "
                + " | ".join(log[:3])
                + " | ..."
            )
        else:
            passes.append(f"over several iterations: everything finishes in {steps} iterations")
    return finish(
        "check_resident_scan",
        failures,
        passes,
        strict,
        answer=fn,
        reveal=reveal,
        learner=learner_name(fn),
    )


__all__ = [
    "PendingContext",
    "SCAN_CASES",
    "SLIPS",
    "check_resident_scan",
    "run_resident_iterations",
    "schedule_pending_contexts_buggy",
]
