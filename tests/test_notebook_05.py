"""Notebook 05 (recurrent-state residency: merged code raises; proposals PR #17261, closed
without merging, and PR #18985, open) runs headless under papermill with its findings asserted
inside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvlab.findings import read_findings
from kvlab.walkthrough import PLOTLY_MIME
from notebook_runner import execute as run_notebook

pytestmark = pytest.mark.notebook

papermill = pytest.importorskip("papermill")

NB05 = Path(__file__).resolve().parent.parent / "notebooks" / "05_mamba_residency.ipynb"


@pytest.fixture(scope="module")
def nb05(tmp_path_factory):
    return run_notebook(NB05, tmp_path_factory.mktemp("nb05"))


def outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(str(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


CLAMP = "clamp (proposal, PR #17261, closed without merging)"
DEFAULT = "feasible default (proposal, PR #18985, open)"


def test_notebook_05_reconciles_the_pr_and_runs_the_findings(nb05):
    nb, seconds = nb05
    findings = read_findings(nb)
    assert [(f["scenario"], f["policy"], f["outcome"]) for f in findings] == [
        ("qwen3.5-27b-h100", "merged", "crash"), ("qwen3.5-27b-h100", CLAMP, "ok"),
        ("qwen3.5-27b-h100", DEFAULT, "ok"),
        ("review finding 1", "bug", "stall"), ("review finding 1", "fix", "ok"),
        ("review finding 2", "bug", "crash"), ("review finding 2", "fix", "ok"),
        ("review finding 3", "bug", "stall"), ("review finding 3", "fix", "ok")]
    assert "513 slots x 78,446,592 B + one page = 37.48 GiB vs quota 24.86 GiB" in findings[0]["numbers"]
    assert findings[1]["numbers"].startswith("339 resident + 1 dummy, 173 queue")
    assert "bfloat16 SSM state implied" in findings[1]["numbers"]
    assert findings[2]["numbers"] == "max_batch_size default 339 fits; an explicit 512 still raises, in GiB"
    assert "rank 1 admitted 8" in findings[3]["numbers"] and "rank 1 admitted 3" in findings[4]["numbers"]
    text = outputs_text(nb)
    assert "ValueError: The V2 Mamba GPU cache quota is too small for live recurrent states" in text
    assert "got 24.86 GiB, need at least 37.48 GiB" in text  # PR #18985's proposed message
    assert "largest max_batch_size whose floor fits 24.86 GiB: 339" in text
    assert sum(PLOTLY_MIME in out.get("data", {}) for c in nb.cells for out in c.get("outputs", [])) >= 4
    assert seconds < 30, f"notebook 05 (SMOKE) took {seconds:.0f} s"


def test_notebook_05_float32_and_a_big_quota(tmp_path):
    nb, _ = run_notebook(NB05, tmp_path, ssm_dtype="float32", quota_gib=80.0)
    findings = read_findings(nb)
    assert findings[0]["policy"] == "merged" and findings[0]["outcome"] == "ok"
    assert "73.55 GiB vs quota 80.00 GiB" in findings[0]["numbers"]
    assert findings[1]["numbers"].startswith("512 resident + 1 dummy, 0 queue")
    assert findings[2]["outcome"] == "ok" and findings[2]["numbers"].endswith("an explicit 512 builds")


def test_notebook_05_rejects_bad_parameters(tmp_path):
    with pytest.raises(papermill.PapermillExecutionError, match="ssm_dtype"):
        run_notebook(NB05, tmp_path, fail_on_error=False, ssm_dtype="fp8")
