"""Notebook 06 (your deployment, planned) runs headless under papermill: it reproduces the walk's
figures from the presets, follows its parameters and refuses bad ones by name."""

from __future__ import annotations

import pytest

from kvlab.core.paths import NOTEBOOK_DIR
from kvlab.notebook.findings import read_findings
from kvlab.notebook.panel import PANEL_MIME
from notebook_runner import execute

pytestmark = pytest.mark.notebook
import papermill  # noqa: E402

NB06 = NOTEBOOK_DIR / "06_your_deployment.ipynb"  # nb06, executed once: tests/notebook/conftest.py


def test_notebook_06_plans_the_walk_from_the_presets(nb06):
    nb, _ = nb06
    findings = read_findings(nb)
    assert [(f["scenario"], f["outcome"]) for f in findings] == [
        ("issue #21470 (16 x GB300)", "crash"), ("issue #21470 (16 x GB300)", "reject"),
        ("issue #21470 (16 x GB300)", "reject"),
        ("llama-3.1-70b on h100-80gb, tp 4", "ok"),  # V1, chunked prefill: every context fits
        ("4 MiB repro", "crash"), ("Qwen3.5-27B, PR #17261", "crash")]
    assert "contexts from 958,849 tokens raise; pool 958,752 tokens, row 29,964 entries" in findings[0]["numbers"]
    assert findings[2]["policy"] == "V1 manager (the default)"
    assert "64 blocks, row 68 (fix 260)" in findings[4]["numbers"]
    assert findings[5]["numbers"] == "513 slots need 37.48 GiB of 24.86 GiB"
    panels = [o for c in nb.cells for o in c.get("outputs", []) if PANEL_MIME in o.get("data", {})]
    assert len(panels) == 1 and len(panels[0]["data"][PANEL_MIME]["figures"]) == 2


def test_notebook_06_follows_its_parameters(tmp_path):
    nb, _ = execute(NB06, tmp_path, model="llama-3.1-8b", gpu="h200", tp_size=1, max_seq_len=32768,
                    max_batch_size=64)
    mine = read_findings(nb)[3]
    assert mine["scenario"] == "llama-3.1-8b on h200, tp 1" and mine["outcome"] == "ok"
    assert mine["numbers"] == "longest context that finishes: 32,768 tokens"
    (tmp_path / "v2").mkdir()
    nb, _ = execute(NB06, tmp_path / "v2", model="llama-3.1-8b", gpu="h200", tp_size=1,
                    max_seq_len=32768, max_batch_size=64, manager="v2")
    assert read_findings(nb)[3]["numbers"] == "longest context that finishes: 32,768 tokens"


@pytest.mark.parametrize("parameters, named", [
    (dict(model="gpt-5"), "model must be one of"), (dict(gpu="tpu"), "gpu must be one of"),
    (dict(tp_size=0), "tp_size must be in"), (dict(max_seq_len=-1), "max_seq_len must be in"),
    (dict(tp_size=3), "tp_size must divide num_attention_heads"), (dict(manager="v3"), "manager must be one of")])
def test_notebook_06_refuses_a_bad_parameter_by_name(tmp_path, parameters, named):
    with pytest.raises(papermill.PapermillExecutionError, match=named):
        execute(NB06, tmp_path, fail_on_error=False, **parameters)
