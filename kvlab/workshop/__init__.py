"""The workshop exercises' checks (notebooks/workshop/), one module per exercise, named as its
notebook; :mod:`~kvlab.workshop.feedback` holds what they share. A failed case gives a hint
first and shows the worked arithmetic when it still fails the same way after a change
(``reveal=True``: at once); ``strict=True`` raises :class:`CheckFailed`.
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
