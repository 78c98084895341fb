"""Exercise 4: the resident cap's scan, the phase-2 loop of ``KVCacheV2Scheduler`` in PR #17261
(scheduler_v2.py; docs/REFERENCE.md §5), reduced to the cap. A wrong case's feedback names the
usual slip (SLIPS) whose loop returns the same ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvlab.core.words import counted
from kvlab.workshop.feedback import CheckResult, Hint, Passed, call_learner, finish


@dataclass(frozen=True)
class PendingContext:
    """A context request waiting in phase 2; a first chunk starts a new sequence, which claims a
    recurrent-state slot for the rest of its life."""

    request_id: str
    is_first_context_chunk: bool


def schedule_pending_contexts_buggy(
    pending_ctx: Sequence[PendingContext],
    num_resident: int,
    max_resident: int | None,
    max_num_requests: int,
) -> list[str]:
    """PR #17261's phase-2 loop, with the bug the review found (notebook 05 runs it on kvlab's
    Scheduler as ``BreakOnCapScheduler``): the ids scheduled; ``max_resident`` None: unbounded."""
    scheduled: list[str] = []
    for req in pending_ctx:
        if len(scheduled) >= max_num_requests:  # the batch is full: nothing later fits either
            break
        # A first context chunk starts a new sequence and therefore claims a
        # state slot for the rest of its lifetime.
        starts_new_sequence = max_resident is not None and req.is_first_context_chunk
        # the learner's starter reads the same; mypy cannot narrow max_resident through a bool
        if starts_new_sequence and num_resident >= max_resident:  # type: ignore[operator]
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

#: the usual slips, each a wrong loop that :func:`_scan` plays: stop the scan at the cap, forget
#: to count a started sequence, cap later chunks too, read None as 0, compare with > not >=,
#: drop the cap
SLIPS = ("stop_at_cap", "uncounted", "gate_started", "none_as_zero", "past_cap", "ignore_cap")


def _scan(
    pending_ctx: Sequence[PendingContext],
    num_resident: int,
    max_resident: int | None,
    max_num_requests: int,
    slip: str | None = None,
) -> list[str]:
    """The loop as the fix has it, or with one of SLIPS: what a learner's loop with it returns."""
    scheduled: list[str] = []
    cap = 0 if max_resident is None and slip == "none_as_zero" else max_resident
    for req in pending_ctx:
        if len(scheduled) >= max_num_requests:
            break
        at_cap = cap is not None and (
            num_resident > cap if slip == "past_cap" else num_resident >= cap
        )
        gated = req.is_first_context_chunk or slip == "gate_started"
        if at_cap and gated and slip != "ignore_cap":
            if slip == "stop_at_cap":
                break
            continue
        scheduled.append(req.request_id)
        if cap is not None and req.is_first_context_chunk and slip != "uncounted":
            num_resident += 1
    return scheduled


def _names(ids: list[str]) -> str:
    return ", ".join(repr(r) for r in ids)


def _slots(resident: int, cap: int) -> str:
    free = cap - resident
    return f"{counted(free, 'resident slot') if free else 'no resident slot'} free ({resident} of {cap} taken)"


def _slip_hint(slip: str, spec: str, got: list[str], expected: list[str], resident, cap) -> Hint:
    """What a loop with ``slip`` got wrong, read off the ids it returned: a question, then the fix."""
    started = [r for r in got if r.startswith("new")]
    waits = [r for r in got if r not in expected]
    held = [r for r in expected if r not in got]
    if slip == "stop_at_cap":
        ids = spec.split()
        stopped, behind = ids[len(got)], [r for r in ids[len(got) + 1 :] if r in expected]
        return Hint(
            f"your scan ended at {stopped!r}, which must wait, so it never reached {_names(behind)}, "
            f"which should run this iteration: why did your loop stop at {stopped!r}?",
            f"`break` ended the scan at {stopped!r} and starved {_names(behind)}: skip only the "
            "capped request (`continue`); the batch budget's `break` stays",
        )
    if slip == "gate_started":
        one = len(held) == 1
        continues = "it continues a started sequence" if one else "they continue started sequences"
        return Hint(
            f"your loop held back {_names(held)} at the cap, though {continues}: does a later "
            "chunk need a new slot?",
            f"the cap gates only first chunks (is_first_context_chunk): {_names(held)} "
            f"{'holds its' if one else 'hold their'} slot already and should run",
        )
    if slip == "none_as_zero":
        return Hint(
            "max_resident is None here, and your loop let no first chunk start: what does None "
            "mean for the cap?",
            "None means unbounded (attention-only models): no first chunk waits for a slot",
        )
    if slip == "past_cap":
        return Hint(
            f"your loop let {_names(waits)} start past the cap ({resident} of {cap} slots taken "
            "before the scan): which comparison lets a first chunk in when num_resident equals "
            "max_resident?",
            "a first chunk starts only while num_resident < max_resident: hold it back when "
            f"num_resident >= max_resident (not >), so {_names(waits)} must wait",
        )
    question = f"your loop started {len(started)} new sequences ({_names(started)}) with {_slots(resident, cap)}"
    if slip == "ignore_cap":
        return Hint(
            f"{question}: does it still hold a first chunk back when no slot is free?",
            f"a fix must keep the cap: with {_slots(resident, cap)}, {_names(waits)} must wait",
        )
    takers = [r for r in started if r in expected]
    takes = "takes the last free slot" if cap - resident == 1 else "take the free slots"
    must = "must wait" if len(waits) == 1 else "must all wait"
    return Hint(
        f"{question}: does it count the slot each scheduled first chunk takes?",
        f"each first chunk scheduled takes a slot: count it (num_resident += 1). With "
        f"{_slots(resident, cap)}, {_names(takers)} {takes} and {_names(waits)} {must}",
    )


def run_resident_iterations(fn, max_steps: int = 12) -> tuple[int | None, list[str]]:
    """(steps to finish or None if it stalls, a log line per iteration) of ``fn`` scheduling
    'waiter' (not started) and 'runner' (holds the only slot), two chunks each, one per call;
    a line where more sequences were resident than the cap (1) allows says "over the cap"."""
    chunks_left, started = {"waiter": 2, "runner": 2}, {"waiter": False, "runner": True}
    resident = 1
    log: list[str] = []
    for step in range(max_steps):
        pending = [PendingContext(r, not started[r]) for r in chunks_left if chunks_left[r]]
        if not pending:
            return step, log
        before = peak = resident
        scheduled = list(fn(pending, resident, 1, 8))
        for r in scheduled:
            resident += 0 if started[r] else 1
            peak = max(peak, resident)
            started[r] = True
            chunks_left[r] -= 1
            if chunks_left[r] == 0:
                resident -= 1
        over = ""
        if peak > 1:
            over = " (over the cap)" if peak == resident else f" ({peak}/1 during it: over the cap)"
        log.append(
            f"iteration {step}: {before}/1 resident, pending {[p.request_id for p in pending]}, "
            f"scheduled {scheduled}, then {resident}/1 resident{over}"
        )
    return None, log


def _scan_feedback(case, got: list[str], slip: str | None):
    """A wrong case's feedback: a limit overrun, the slip that gives the same ids, or the
    requests it got wrong."""
    label, spec, resident, cap, budget, expected = case
    where = f"pending [{spec}], {resident} resident, cap {cap}, max {budget} requests"
    wrong = f"{label} ({where}): scheduled {got}, expected {expected}"
    candidates = ([slip] if slip else []) + list(SLIPS)
    explain = next(
        (s for s in candidates if got == _scan(_ctx(spec), resident, cap, budget, s)), None
    )
    extra = [r for r in got if r not in expected and r.startswith("new")]
    hint = None  # a limit overrun first, else the slip that gives the same ids
    if len(got) > budget:
        over = f"{len(got)} scheduled: more than max_num_requests={budget}, the batch budget"
        hint = Hint(over, over)
    # an off-by-one cap lets one too many in everywhere: its comparison is the question, not the cap
    elif extra and cap is not None and resident >= cap and explain != "past_cap":
        started = "started a new sequence" if len(extra) == 1 else "started new sequences"
        capped = f"{_names(extra)} {started} with no resident slot free (cap {cap})"
        hint = Hint(
            f"{capped}: does your loop still hold a first chunk back when every slot is taken?",
            f"{capped}: a fix must keep the cap, and hold a first chunk back when every slot "
            "is taken",
        )
    elif explain is not None:
        hint = _slip_hint(explain, spec, got, expected, resident, cap)
    if hint:
        return Hint(f"{wrong} - {hint.hint}", f"{wrong} - {hint.reveal}")
    if sorted(got) == sorted(expected):
        return f"{wrong} - the right requests in another order: schedule them in pending order"
    continues = "continues a started sequence: it needs no new slot"
    why = [
        f"{r!r} {continues if r.startswith('old') else 'had a free slot'}"
        for r in expected
        if r not in got
    ]
    why += [f"{r!r} had no slot free" for r in got if r not in expected]
    return f"{wrong} - " + "; ".join(why)


def _iterations_outcome(fn, slip: str | None):
    """The several-iterations case: everything finishes within the cap, else why not."""
    ran, failure = call_learner(run_resident_iterations, fn, where="over several iterations: ")
    if failure:
        return failure
    steps, log = ran
    over_cap = next((line for line in log if line.endswith("over the cap)")), None)
    wrong = f"over several iterations: {over_cap}"
    if over_cap is not None and slip == "past_cap":
        return Hint(
            f"{wrong} - which comparison lets a first chunk in when num_resident equals max_resident?",
            f"{wrong} - hold a first chunk back when num_resident >= max_resident (not >)",
        )
    if over_cap is not None:
        return Hint(
            f"{wrong} - does your loop still hold a first chunk back when every slot is taken?",
            f"{wrong} - a fix must keep the cap: a first chunk starts only while "
            "num_resident < max_resident, and each one started counts",
        )
    if steps is None:
        return (
            "over several iterations: the scheduler stalls - 'runner' holds the only slot "
            "and never gets its next chunk, so it never frees the slot 'waiter' waits for: "
            + " | ".join(log[:3])
            + " | ..."
        )
    return Passed(f"over several iterations: everything finishes in {steps} iterations")


def check_resident_scan(
    fn: Callable[..., list[str]], *, strict: bool = False, reveal: bool | None = None
) -> CheckResult:
    """Exercise 4: ``fn(pending_ctx, num_resident, max_resident, max_num_requests)`` returns the
    ids scheduled, on SCAN_CASES and over several iterations (run_resident_iterations); a wrong
    case's feedback is read off the ids it returned."""
    answers = []
    for case in SCAN_CASES:
        label, spec, resident, cap, budget, _ = case
        got, failure = call_learner(fn, _ctx(spec), resident, cap, budget, where=f"{label}: ")
        answers.append((case, list(got) if isinstance(got, tuple) else got, failure))
    answered = [(case, got) for case, got, failure in answers if failure is None]
    slip = next(
        (
            s
            for s in SLIPS
            if answered and all(got == _scan(_ctx(c[1]), *c[2:5], s) for c, got in answered)
        ),
        None,
    )
    outcomes = []
    for case, got, failure in answers:
        if failure:
            outcomes.append(failure)
        elif not isinstance(got, list):
            outcomes.append(f"{case[0]}: returned {got!r}; return the list of the ids scheduled")
        elif got != case[5]:
            outcomes.append(_scan_feedback(case, got, slip))
        else:
            outcomes.append(Passed(f"{case[0]}: {case[5]}"))
    outcomes.append(_iterations_outcome(fn, slip))
    return finish("check_resident_scan", outcomes, strict, reveal, fn)
