"""Exercise 4: break or continue. The phase-2 loop of ``KVCacheV2Scheduler`` in PR #17261
(scheduler_v2.py, the resident-sequence cap; docs/REFERENCE.md §5) has ``break`` where
``continue`` belongs. Self-contained here: :func:`schedule_pending_contexts_buggy` is the PR's
loop, reduced to the cap (notebook 05 runs the same bug on kvlab's Scheduler, as
``kvlab.case_studies.BreakOnCapScheduler``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from kvlab.workshop.feedback import (NOT_YET, CheckResult, Hint, check_flags, call_learner, finish,
                                     learner_name)


@dataclass(frozen=True)
class PendingContext:
    """A context request waiting in phase 2, reduced to what the resident cap reads.
    ``is_first_context_chunk``: it has no resident state yet, so scheduling it starts a new
    sequence (and claims a recurrent-state slot for the rest of its life)."""

    request_id: str
    is_first_context_chunk: bool


def schedule_pending_contexts_buggy(pending_ctx: Sequence[PendingContext], num_resident: int,
                                    max_resident: Optional[int], max_num_requests: int) -> List[str]:
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


def _ctx(spec: str) -> List[PendingContext]:
    """'new-a old-b' -> [first chunk 'new-a', non-first chunk 'old-b']."""
    return [PendingContext(word, word.startswith("new")) for word in spec.split()]


#: (label, pending (new-* = first chunk, old-* = a later chunk), resident, cap, max requests,
#:  expected, the hint a first failure gets, what the case teaches (from the second failure on))
SCAN_CASES = [
    ("the review's case: a capped first chunk before a started one", "new-a old-b", 1, 1, 8, ["old-b"],
     "'new-a' must wait (1 of 1 resident slots taken), but 'old-b' already holds its slot: "
     "why did your scan never reach 'old-b'?",
     "'new-a' must wait (1 of 1 resident slots taken), but 'old-b' already holds its slot; "
     "`break` ended the scan at 'new-a' and starved 'old-b' - skip only the capped request (`continue`)"),
    ("room for one more new sequence", "new-a new-b old-c", 1, 2, 8, ["new-a", "old-c"],
     "'new-a' takes the last slot: does your loop know the slot is taken when it reaches 'new-b'?",
     "'new-a' takes the last slot (count it: num_resident += 1), 'new-b' must wait, 'old-c' still runs"),
    ("started chunks never count against the cap", "old-a old-b old-c", 3, 3, 8, ["old-a", "old-b", "old-c"],
     "does a later chunk of a started sequence need a new slot?",
     "the cap gates only first chunks: a later chunk needs no new slot"),
    ("no cap (attention-only: max_resident None)", "new-a new-b", 5, None, 8, ["new-a", "new-b"],
     "what does max_resident None mean?",
     "None means unbounded"),
    ("every new sequence capped", "new-a new-b", 2, 2, 8, [],
     "how many slots are free for a first chunk?",
     "no slot is free: no first chunk may start"),
    ("the batch budget is full", "old-a old-b old-c", 0, None, 2, ["old-a", "old-b"],
     "the batch budget is a limit too",
     "max_num_requests still ends the scan"),
]


def run_resident_iterations(fn, max_steps: int = 12) -> tuple:
    """Drive ``fn`` as the scheduler would, one call per iteration: 'waiter' arrived first but
    could not start; 'runner' started and holds the only resident slot (cap 1), with two chunks
    to go; a scheduled chunk completes in its iteration, and a finished request frees its slot.
    Returns (steps to finish everything or None if it stalls, one log line per iteration)."""
    chunks_left = {"waiter": 2, "runner": 2}
    started = {"waiter": False, "runner": True}
    resident, log = 1, []
    for step in range(max_steps):
        pending = [PendingContext(r, not started[r]) for r in ("waiter", "runner") if chunks_left[r]]
        if not pending:
            return step, log
        scheduled = list(fn(pending, resident, 1, 8))
        for r in scheduled:
            resident += 0 if started[r] else 1
            started[r] = True
            chunks_left[r] -= 1
            if chunks_left[r] == 0:
                resident -= 1
        log.append(f"iteration {step}: pending {[p.request_id for p in pending]}, scheduled {scheduled}, "
                   f"resident {resident}/1")
    return None, log


def _scan_overrun(got: List[str], expected: List[str], resident: int, cap, budget: int) -> Optional[str]:
    """What a scan did wrong when it scheduled what the budget or a full cap forbids (the cases'
    own questions are about the other slips), or None."""
    if len(got) > budget:
        return f"{len(got)} scheduled: more than max_num_requests={budget}, the batch budget"
    extra = [r for r in got if r not in expected and r.startswith("new")]
    if extra and cap is not None and resident >= cap:  # every slot was taken from the start
        return (f"{', '.join(repr(r) for r in extra)} started a new sequence with no resident "
                f"slot free (cap {cap}): a fix must keep the cap, and hold a first chunk back when "
                "every slot is taken")
    return None


def check_resident_scan(fn: Callable[..., List[str]], *, strict: bool = False,
                        reveal: Optional[bool] = None) -> CheckResult:
    """Exercise 4: ``fn(pending_ctx, num_resident, max_resident, max_num_requests)`` returns the
    ids scheduled, on SCAN_CASES and over several iterations (run_resident_iterations). A wrong
    case gets a question first; the fix only from the check's second failure on."""
    check_flags(strict, reveal)
    failures, passes = [], []
    for label, spec, resident, cap, budget, expected, question, lesson in SCAN_CASES:
        got, error = call_learner(fn, _ctx(spec), resident, cap, budget)
        where = f"pending [{spec}], {resident} resident, cap {cap}, max {budget} requests"
        if error is NOT_YET:
            failures.append(NOT_YET)
        elif error:
            failures.append(f"{label} ({where}): {error}")
        elif list(got or []) != expected:
            wrong = f"{label} ({where}): scheduled {list(got or [])}, expected {expected}"
            overrun = _scan_overrun(list(got or []), expected, resident, cap, budget)
            failures.append(f"{wrong} - {overrun}" if overrun else
                            Hint(f"{wrong} - {question}", f"{wrong} - {lesson}"))
        else:
            passes.append(f"{label}: {expected}")
    try:
        steps, log = run_resident_iterations(fn)
    except NotImplementedError:
        failures.append(NOT_YET)
    except Exception as exc:
        failures.append(f"over several iterations: raised {type(exc).__name__}: {exc}")
    else:
        if steps is None:
            failures.append("over several iterations: the scheduler stalls - 'runner' holds the only slot "
                            "and never gets its next chunk, so it never frees the slot 'waiter' waits for: "
                            + " | ".join(log[:3]) + " | ...")
        else:
            passes.append(f"over several iterations: everything finishes in {steps} iterations")
    return finish("check_resident_scan", failures, passes, strict, reveal=reveal,
                   learner=learner_name(fn))


__all__ = ["PendingContext", "SCAN_CASES", "check_resident_scan", "run_resident_iterations",
           "schedule_pending_contexts_buggy"]
