"""Notebook 01 (the 16-GPU report) runs headless under papermill with its findings asserted
inside it; kept apart from tests/test_notebooks.py (owned by the notebooks 02-04 work)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvlab.findings import read_findings
from kvlab.walkthrough import PLOTLY_MIME, WIDGET_MIME
from notebook_runner import execute as run_notebook

pytestmark = pytest.mark.notebook

papermill = pytest.importorskip("papermill")

NB01 = Path(__file__).resolve().parent.parent / "notebooks" / "01_the_16_gpu_report.ipynb"


def execute(out_dir: Path, **parameters):
    return run_notebook(NB01, out_dir, **parameters)


@pytest.fixture(scope="module")
def nb01(tmp_path_factory):
    return execute(tmp_path_factory.mktemp("nb01"))


def test_notebook_01_reconstructs_the_report(nb01):
    nb, seconds = nb01
    findings = read_findings(nb)
    assert [(f["scenario"], f["policy"], f["outcome"]) for f in findings] == [
        ("issue_21470_16x_gb300, automatic host tier", "clamped", "crash"),
        ("issue_21470_16x_gb300, automatic host tier", "capacity", "reject"),
        ("rtx5080-4mib", "clamped", "crash")]
    assert "MIN 958,752 tokens = 29961 blocks; row 29964 entries" in findings[0]["numbers"]
    assert "rank 0 raised ValueError: User-provided base page indices is too short" in findings[0]["numbers"]
    assert seconds < 120, f"notebook 01 took {seconds:.0f} s"


def test_notebook_01_shows_the_budget_the_traceback_and_the_panel(nb01):
    nb, _ = nb01
    titles = [o["data"][PLOTLY_MIME]["layout"]["title"]["text"] for c in nb.cells
              for o in c.get("outputs", []) if PLOTLY_MIME in o.get("data", {})]
    assert any(t.startswith("Per-rank memory: the MoE workspace shrinks the KV pool (16 ranks)") for t in titles)
    streams = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert 'File "kvlab/manager.py"' in streams and "in resize_context" in streams
    assert "kvlab.kv_cache.PageIndexTooShort: User-provided base page indices is too short" in streams
    assert streams.count("shut down: rank 0 raised ValueError") >= 15
    panel = [o for c in nb.cells for o in c.get("outputs", []) if WIDGET_MIME in o.get("data", {})]
    assert len(panel) == 1 and "kvlab-verdict" in panel[0]["data"]["text/html"]


def test_notebook_01_follows_its_parameters(tmp_path):
    """Four ranks and less workspace: the pool still clamps, but a 524,288-token context fits."""
    nb, _ = execute(tmp_path, ranks=4, workspace_gib=10.0, context=524_288)
    clamped, capacity, _ = read_findings(nb)
    assert (clamped["scenario"], clamped["outcome"], capacity["outcome"]) == ("4x-10GiB-524288tok, automatic host tier", "ok", "ok")
    assert "4 ranks" in clamped["numbers"] and "completed" in clamped["numbers"]
