"""Checks for the workshop exercises (notebooks/workshop/), with feedback that says what is wrong.

One check per exercise; each calls the learner's code on a set of cases, compares it with kvlab's
own answer, and returns a :class:`CheckResult` (it displays as a green or red list in Jupyter).
A check never raises on a wrong answer unless ``strict=True``; then it raises :class:`CheckFailed`
naming the check, which is how the tests prove that starter code fails and solutions pass.

Hint, then reveal. A failed case first gives what is wrong and a hint that does not give the
answer away (a question, the slip's name); when the case still fails the same way after the
learner changed their answer, in the same kernel session, it shows the worked arithmetic (the
formula with the case's numbers). Running the check again unchanged shows the hint again, and a
new slip gets its own hint first. :mod:`kvlab.workshop.feedback` remembers the hints each check
has shown and for which answers (``reset_hints()`` forgets them; a pass does too).
``reveal=True`` shows the arithmetic at once, ``reveal=False`` keeps to hints.

A learner's function that still raises ``NotImplementedError`` is reported once, in one line
naming the function, not once per case.

====  =====================================  ======================================================
 ex.  check                                  mirrors
====  =====================================  ======================================================
 1    ``check_page_index_width(fn, seed)``   ``max_blocks_per_seq`` of ``KVCacheManagerV2.__init__``
                                             (kvlab/core/page_index.py; docs/REFERENCE.md §2)
 2    ``check_predictions(dict)``,           native ``KvCache::resize`` check order: the row is
      ``check_trigger(fn)``                  checked before the pool (kvlab/core/kv_cache.py; §3)
 3    ``check_admission(classify)``,         PR #21720's per-request feasibility
      ``check_admission_policy(policy)``     (kvlab/sched/admission.py ``CapacityAdmission``; §4)
 4    ``check_resident_scan(fn)``            the phase-2 loop of ``KVCacheV2Scheduler`` in PR
                                             #17261 (scheduler_v2.py, the resident-sequence cap;
                                             §5), with the bug the review found
====  =====================================  ======================================================

Reading order: ``feedback`` (the result, the hints, calling the learner's code) ->
``ex1_page_index_width`` -> ``ex2_predict_the_valueerror`` -> ``ex3_admission_check`` ->
``ex4_the_resident_cap``: one module per exercise, named as its notebook. Exercise 4 is
self-contained: :func:`schedule_pending_contexts_buggy` is the PR's loop, reduced to the cap
(notebook 05 runs the same bug on kvlab's Scheduler, as ``kvlab.case_studies.BreakOnCapScheduler``).
"""

from kvlab.workshop.ex1_page_index_width import check_page_index_width
from kvlab.workshop.ex2_predict_the_valueerror import (
    check_predictions,
    check_trigger,
    describe_prediction_cases,
)
from kvlab.workshop.ex3_admission_check import (
    check_admission,
    check_admission_policy,
    run_admission_workload,
)
from kvlab.workshop.ex4_the_resident_cap import (
    PendingContext,
    check_resident_scan,
    run_resident_iterations,
    schedule_pending_contexts_buggy,
)
from kvlab.workshop.feedback import CHECK_MIME, HINTS_ONLY, CheckFailed, CheckResult, reset_hints

__all__ = [
    "CHECK_MIME",
    "CheckFailed",
    "CheckResult",
    "HINTS_ONLY",
    "PendingContext",
    "check_admission",
    "check_admission_policy",
    "check_page_index_width",
    "check_predictions",
    "check_resident_scan",
    "check_trigger",
    "describe_prediction_cases",
    "reset_hints",
    "run_admission_workload",
    "run_resident_iterations",
    "schedule_pending_contexts_buggy",
]
