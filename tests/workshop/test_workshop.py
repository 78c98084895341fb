"""The workshop's checks (kvlab.workshop): each fails on the starter code and passes on the
solutions, and names the slip for the typical mistakes; the exercise notebooks run to the end
under papermill, a failed check raising only with STRICT=True."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvlab import AdmissionPolicy, Verdict, workshop
from kvlab.sched.admission import CapacityAdmission, NoAdmission
from kvlab.workshop import CHECK_MIME, CheckFailed, CheckResult
from notebook_runner import execute as run_notebook

WORKSHOP = Path(__file__).resolve().parents[2] / "notebooks" / "workshop"
#: exercise notebook -> the checks it calls, in order
EXERCISES = {
    "ex1_page_index_width": ["check_page_index_width"],
    "ex2_predict_the_valueerror": ["check_predictions", "check_trigger"],
    "ex3_admission_check": ["check_admission", "check_admission_policy"],
    "ex4_break_or_continue": ["check_resident_scan"],
}
ALL_CHECKS = [name for checks in EXERCISES.values() for name in checks]


def run_in_process(name: str, **parameters) -> dict:
    """Execute a workshop notebook's code cells here (no kernel) and return its namespace: the
    learner's functions as the notebook defines them, and the checks' results."""
    jupytext = pytest.importorskip("jupytext")
    nb = jupytext.read(WORKSHOP / f"{name}.py")
    namespace: dict = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        exec(compile(cell.source, f"<{name}>", "exec"), namespace)
        if "parameters" in cell.metadata.get("tags", []):
            namespace.update(parameters)
    return namespace


def feedback(result: CheckResult) -> str:
    return "\n".join(result.lines)


# --- starter code fails each check; the solutions pass -------------------------------------------

@pytest.fixture(scope="module")
def solutions():
    return run_in_process("solutions", STRICT=True, SMOKE=True)


@pytest.fixture(scope="module")
def starters():
    return {name: run_in_process(name, SMOKE=True) for name in EXERCISES}


def calls(ns: dict) -> dict:
    """Each check applied to the functions and values a notebook defines."""
    return {
        "check_page_index_width": lambda: workshop.check_page_index_width(
            ns["page_index_width"], ns["seed_max_seq_len"]),
        "check_predictions": lambda: workshop.check_predictions(ns["predictions"]),
        "check_trigger": lambda: workshop.check_trigger(ns["trigger_the_value_error"]),
        "check_admission": lambda: workshop.check_admission(ns["classify"]),
        "check_admission_policy": lambda: workshop.check_admission_policy(ns["ClassifyAdmission"]()),
        "check_resident_scan": lambda: workshop.check_resident_scan(ns["schedule_pending_contexts"]),
    }


@pytest.mark.parametrize("check", ALL_CHECKS)
def test_each_check_fails_on_the_starter_code(starters, check):
    notebook = next(name for name, checks in EXERCISES.items() if check in checks)
    result = calls(starters[notebook])[check]()
    assert not result.passed and result.check == check
    assert result.lines and "PASSED" not in str(result)


@pytest.mark.parametrize("check", ALL_CHECKS)
def test_each_check_passes_on_the_solution(solutions, check):
    result = calls(solutions)[check]()
    assert result.passed, str(result)


def test_checks_accept_kvlabs_own_answers():
    from kvlab.core.page_index import max_blocks_per_seq

    assert workshop.check_page_index_width(max_blocks_per_seq, {"clamped": 2048, "configured": 8192})
    assert workshop.check_admission(CapacityAdmission().classify)
    assert workshop.check_admission_policy(CapacityAdmission())


# --- exercise 1: the slips the feedback names ----------------------------------------------------

def width(plus_one=1, align=4, ceil=True, use_extra=True, use_draft=True):
    def fn(L, t, e, d):
        tokens = L + (e if use_extra else 0) + (d if use_draft else 0) + plus_one
        blocks = -(-tokens // t) if ceil else tokens // t
        return -(-blocks // align) * align
    return fn


def test_width_feedback_missing_plus_one():
    text = feedback(workshop.check_page_index_width(width(plus_one=0)))
    assert ("the seed, clamped row: page_index_width(2048, 32, 0, 0) returned 64, expected 68 - "
            "you forgot the +1 decode token: ceil((2048+0+0)/32)=64 -> 64") in text


def test_width_feedback_no_rounding_to_4():
    text = feedback(workshop.check_page_index_width(width(align=1)))
    assert "returned 65, expected 68 - you did not round up to a multiple of 4" in text
    assert "returned 257, expected 260" in text


def test_width_feedback_rounding_to_8():
    text = feedback(workshop.check_page_index_width(width(align=8)))
    assert "returned 72, expected 68 - you rounded up to a multiple of 8" in text


def test_width_feedback_floor_and_left_out_tokens():
    assert "rounded the division down" in feedback(workshop.check_page_index_width(width(ceil=False)))
    assert "left out the extra KV tokens (100)" in feedback(workshop.check_page_index_width(width(use_extra=False)))
    assert "left out the draft tokens (100)" in feedback(workshop.check_page_index_width(width(use_draft=False)))


def test_width_feedback_configured_instead_of_clamped():
    result = workshop.check_page_index_width(width(), {"clamped": 8192, "configured": 8192})
    assert not result.passed
    assert ("seed_max_seq_len['clamped'] = 8192, expected 2048 - you used the configured max_seq_len "
            "for the clamped row") in feedback(result)
    assert "4 MiB / 2048 B per token = 2048 tokens = 64 blocks of 32" in feedback(result)
    swapped = workshop.check_page_index_width(width(), {"clamped": 2048, "configured": 2048})
    assert "not the clamped 2048" in feedback(swapped)


def test_width_feedback_wrong_type_and_not_implemented_once():
    text = feedback(workshop.check_page_index_width(lambda L, t, e, d: math.ceil((L + e + d + 1) / t / 4) * 4.0))
    assert "returned 68.0 (float); return an int" in text

    def starter(*args):
        raise NotImplementedError

    result = workshop.check_page_index_width(starter)
    assert result.lines[0].startswith("not implemented yet") and "(all 9 cases)" in result.lines[0]


# --- exercise 2 ----------------------------------------------------------------------------------

def test_predictions_feedback_explains_the_row_of_each_policy():
    right = {"A": "crash", "B": "refused", "C": "ok", "D": "refused", "E": "crash", "F": "crash", "G": "ok"}
    assert workshop.check_predictions(right)
    # thinking the clamped row is as wide as the configured one: A and F "refused"
    text = feedback(workshop.check_predictions({**right, "A": "refused", "D": "crash", "X": "ok", "C": "fine"}))
    assert ("A (4 MiB pool, resize to 8192 tokens, clamped row): you predicted 'refused', the resize gave "
            "'crash' - the clamped row is sized from max_seq_len 2048: ceil((2048+1)/32) -> 68 entries") in text
    assert "66 entries fit the row (66 <= 68) but 66 pages > 64" in text
    assert "'fine' is not an outcome" in text and "unknown case names ['X']" in text


def test_trigger_feedback():
    from kvlab.core.kv_cache import PageIndexTooShort

    def escaped():
        raise PageIndexTooShort(256, 68)

    assert "escaped your function" in feedback(workshop.check_trigger(escaped))
    assert "configured row's answer" in feedback(workshop.check_trigger(lambda: False))
    assert "256 and 68" in feedback(workshop.check_trigger(lambda: PageIndexTooShort(300, 132)))
    assert workshop.check_trigger(lambda: PageIndexTooShort(256, 68))


# --- exercise 3 ----------------------------------------------------------------------------------

def classify_like(total_attr="total_blocks", count_output=True, check_span=True):
    def classify(request, manager):
        verdict, reason = CapacityAdmission().classify(request, manager)
        tokens = request.prompt_len + (request.max_new_tokens if count_output else 0)
        demand = manager.geometry.blocks_for_tokens(tokens + manager.num_extra_kv_tokens
                                                    + request.num_draft_tokens)
        limits = [getattr(manager, total_attr)] + ([manager.max_blocks_per_seq] if check_span else [])
        if demand > min(limits):
            return "never fits", f"needs {demand} blocks, limit {min(limits)}"
        return ("fits now", "") if verdict == "never fits" else (verdict, reason)
    return classify


def test_admission_feedback_on_typical_mistakes():
    text = feedback(workshop.check_admission(classify_like(count_output=False)))
    assert "prompt fits, prompt + output does not: expected 'never fits', got 'fits now'" in text
    assert "prompt + max_new_tokens" in text
    text = feedback(workshop.check_admission(classify_like(total_attr="free_blocks")))
    assert ("the pool is busy: expected 'temporarily blocked', got 'never fits' - pages held by others "
            "are temporary pressure") in text
    text = feedback(workshop.check_admission(classify_like(check_span=False)))
    assert "a big pool, a request past the row: expected 'never fits'" in text
    text = feedback(workshop.check_admission(lambda r, m: ("never fits", "too big")
                                             if CapacityAdmission().classify(r, m)[0] == "never fits"
                                             else CapacityAdmission().classify(r, m)))
    assert "should state the numbers: 257 blocks needed" in text
    assert "return a pair" in feedback(workshop.check_admission(lambda r, m: "fits now"))


def test_admission_feedback_when_classify_allocates():
    def greedy(request, manager):
        manager.create_cache(request.request_id)
        return CapacityAdmission().classify(request, manager)

    assert "an admission check only reads" in feedback(workshop.check_admission(greedy))


def test_admission_policy_feedback():
    text = feedback(workshop.check_admission_policy(NoAdmission()))
    assert "clamped row: the engine stopped at step" in text and "PageIndexTooShort" in text
    assert "configured row: the engine stopped at step" in text and "SchedulerDeadlock" in text

    class RejectsPressure(AdmissionPolicy):
        def admit(self, request, manager):
            verdict, reason = CapacityAdmission().classify(request, manager)
            return Verdict(verdict == "fits now", reason or "busy")

    assert "'s2' is only temporarily blocked" in feedback(workshop.check_admission_policy(RejectsPressure()))
    assert "instance of your AdmissionPolicy subclass" in feedback(workshop.check_admission_policy(CapacityAdmission))


# --- exercise 4 ----------------------------------------------------------------------------------

def scan(on_cap="continue", count_new=True, cap_all=False):
    def fn(pending_ctx, num_resident, max_resident, max_num_requests):
        scheduled = []
        for req in pending_ctx:
            if len(scheduled) >= max_num_requests:
                break
            starts_new = max_resident is not None and (cap_all or req.is_first_context_chunk)
            if starts_new and num_resident >= max_resident:
                if on_cap == "break":
                    break
                continue
            scheduled.append(req.request_id)
            num_resident += starts_new and count_new and req.is_first_context_chunk
        return scheduled
    return fn


def test_scan_feedback_break_instead_of_continue():
    result = workshop.check_resident_scan(workshop.schedule_pending_contexts_buggy)
    assert not result.passed
    text = feedback(result)
    assert "scheduled [], expected ['old-b']" in text and "`break` ended the scan at 'new-a'" in text
    assert "the scheduler stalls" in text
    assert feedback(workshop.check_resident_scan(scan(on_cap="break"))) == text
    assert workshop.check_resident_scan(scan())


def test_scan_feedback_other_slips():
    assert "count it: num_resident += 1" in feedback(workshop.check_resident_scan(scan(count_new=False)))
    assert "the cap gates only first chunks" in feedback(workshop.check_resident_scan(scan(cap_all=True)))
    steps, log = workshop.run_resident_iterations(scan())
    assert steps == 4 and len(log) == 4
    assert workshop.run_resident_iterations(workshop.schedule_pending_contexts_buggy)[0] is None


# --- CheckResult ---------------------------------------------------------------------------------

def test_check_result_strict_display_and_truth():
    failed = workshop.check_predictions({})
    assert not failed and failed.headline == "check_predictions: FAILED"
    with pytest.raises(CheckFailed, match="check_predictions: FAILED") as info:
        workshop.check_predictions({"A": "<b>"}, strict=True)
    assert isinstance(info.value, AssertionError)
    html = workshop.check_predictions({"A": "<b>"})._repr_html_()
    assert "&lt;b&gt;" in html and "<b>" not in html.replace('<b style', '')
    bundle = failed._repr_mimebundle_()
    assert bundle[CHECK_MIME]["passed"] is False and bundle["text/plain"] == str(failed)


# --- the notebooks under papermill ---------------------------------------------------------------

def execute(name: str, out_dir: Path, **parameters):
    return run_notebook(WORKSHOP / f"{name}.ipynb", out_dir, fail_on_error=False, **parameters)


def check_outputs(nb) -> list:
    return [o["data"][CHECK_MIME] for c in nb.cells for o in c.get("outputs", [])
            if CHECK_MIME in o.get("data", {})]


@pytest.mark.notebook
@pytest.mark.parametrize("name", list(EXERCISES))
def test_starter_notebook_runs_to_the_end_and_reports_failure(name, tmp_path):
    nb, seconds = execute(name, tmp_path)
    results = check_outputs(nb)
    assert [r["check"] for r in results] == EXERCISES[name]
    assert not any(r["passed"] for r in results)
    assert seconds < 30, f"{name} took {seconds:.0f} s"


@pytest.mark.notebook
def test_starter_notebook_raises_with_strict(tmp_path):
    papermill = pytest.importorskip("papermill")
    with pytest.raises(papermill.PapermillExecutionError) as info:
        execute("ex1_page_index_width", tmp_path, STRICT=True)
    assert info.value.ename == "CheckFailed" and "check_page_index_width: FAILED" in info.value.evalue


@pytest.mark.notebook
def test_solutions_notebook_passes_every_check_with_strict(tmp_path):
    papermill = pytest.importorskip("papermill")
    try:
        nb, seconds = execute("solutions", tmp_path, STRICT=True)
    except papermill.PapermillExecutionError as exc:
        pytest.fail(f"solutions: cell {exc.cell_index} raised {exc.ename}: {exc.evalue}", pytrace=False)
    results = check_outputs(nb)
    assert [r["check"] for r in results] == ALL_CHECKS
    assert all(r["passed"] for r in results)
    assert seconds < 30
