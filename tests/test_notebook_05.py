"""Notebook 05 (recurrent-state residency, PR #17261) runs headless under papermill with its
findings asserted inside it."""

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


def test_notebook_05_reconciles_the_pr_and_runs_the_findings(nb05):
    nb, seconds = nb05
    findings = read_findings(nb)
    assert [(f["scenario"], f["policy"], f["outcome"]) for f in findings] == [
        ("qwen3.5-27b-h100", "raw", "crash"), ("qwen3.5-27b-h100", "clamped", "ok"),
        ("review finding 1", "bug", "stall"), ("review finding 1", "fix", "ok"),
        ("review finding 2", "bug", "crash"), ("review finding 2", "fix", "ok"),
        ("review finding 3", "bug", "stall"), ("review finding 3", "fix", "ok")]
    assert "513 slots x 78,446,592 B + one page = 37.48 GiB vs quota 24.86 GiB" in findings[0]["numbers"]
    assert findings[1]["numbers"].startswith("339 resident + 1 dummy")
    assert "bfloat16 SSM state implied" in findings[1]["numbers"]
    assert "rank 1 admitted 8" in findings[2]["numbers"] and "rank 1 admitted 3" in findings[3]["numbers"]
    text = outputs_text(nb)
    assert "ValueError: The V2 Mamba GPU cache quota is too small for live recurrent states" in text
    assert sum(PLOTLY_MIME in out.get("data", {}) for c in nb.cells for out in c.get("outputs", [])) >= 3
    assert seconds < 30, f"notebook 05 (SMOKE) took {seconds:.0f} s"


def test_notebook_05_float32_and_a_big_quota(tmp_path):
    nb, _ = run_notebook(NB05, tmp_path, ssm_dtype="float32", quota_gib=80.0)
    findings = read_findings(nb)
    assert findings[0]["outcome"] == "ok" and "73.55 GiB vs quota 80.00 GiB" in findings[0]["numbers"]
    assert findings[1]["numbers"].startswith("512 resident")


def test_notebook_05_rejects_bad_parameters(tmp_path):
    with pytest.raises(papermill.PapermillExecutionError, match="ssm_dtype"):
        run_notebook(NB05, tmp_path, fail_on_error=False, ssm_dtype="fp8")
