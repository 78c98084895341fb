"""The walkthrough writes each notebook and report under a temporary name and renames it once
whole: a run stopped half way leaves the earlier complete pair as it was (issue 28)."""

from __future__ import annotations

import pytest

from kvlab.notebook import walkthrough


def test_a_run_stopped_half_way_leaves_the_earlier_outputs_whole(tmp_path, monkeypatch):
    source = tmp_path / "src" / "02_demo.ipynb"
    source.parent.mkdir()
    source.write_text("{}")
    executed = tmp_path / "build" / "notebooks" / "02_demo.ipynb"
    report = tmp_path / "build" / "html" / "02_demo.html"
    for path, text in ((executed, "earlier notebook"), (report, "earlier report")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def stopped(path, output, parameters):  # papermill writes as it goes, then the run is killed
        output.write_text('{"cells": [half')
        raise KeyboardInterrupt

    monkeypatch.setattr(walkthrough, "_notebook_parameters", lambda path: {})
    monkeypatch.setattr(walkthrough, "execute", stopped)
    with pytest.raises(KeyboardInterrupt):
        walkthrough.run_notebook(source, tmp_path / "build", {})
    assert executed.read_text() == "earlier notebook" and report.read_text() == "earlier report"
    assert not (executed.parent / ".02_demo.running.ipynb").exists()  # the half-run is gone


def test_the_walkthrough_kernels_run_with_progress_bars_off(tmp_path):
    """An executed notebook keeps a tqdm bar as it last drew it ("policies: 20%"): the
    walkthrough's kernels run with TQDM_DISABLE=1, which the installed tqdm's text bars honour
    (its notebook bars pass ``disable`` themselves, so a bar maker reads the variable too)."""
    import nbformat

    source, executed = tmp_path / "bars.ipynb", tmp_path / "bars.out.ipynb"
    nbformat.write(
        nbformat.v4.new_notebook(
            cells=[
                nbformat.v4.new_code_cell(
                    "import os\nfrom tqdm.std import tqdm\nbar = tqdm(range(3), desc='policies')\n"
                    "print(os.environ.get('TQDM_DISABLE'), bar.disable)\nlist(bar)"
                )
            ]
        ),
        source,
    )
    walkthrough.execute(source, executed, {})
    outputs = nbformat.read(executed, as_version=4).cells[0].outputs
    assert [o.get("text", "") for o in outputs if o.get("name") == "stdout"] == ["1 True\n"]
    assert not any("policies" in str(o) for o in outputs)  # no bar drawn, on stderr or stdout


def test_an_executed_notebooks_kernel_has_sockets_of_its_own(tmp_path):
    """Outside the walkthrough too, a kernel's IPC sockets are in a private folder: jupyter_client
    names them kernel-ipc-N in the notebook's folder otherwise, and two runs there at once (two
    test workers) talked to each other's kernels: "Invalid Signature"."""
    import nbformat

    source, executed = tmp_path / "ip.ipynb", tmp_path / "ip.out.ipynb"
    cell = "import json, ipykernel\nprint(json.load(open(ipykernel.get_connection_file()))['ip'])"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), source)
    walkthrough.execute(source, executed, {})
    (output,) = nbformat.read(executed, as_version=4).cells[0].outputs
    sockets = output["text"].strip()
    assert sockets.startswith("/") and not sockets.startswith(str(tmp_path)), sockets
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ip.ipynb", "ip.out.ipynb"]


def test_an_unusable_runtime_folder_gives_the_kernels_the_temporary_one(tmp_path, monkeypatch):
    """JUPYTER_RUNTIME_DIR below a plain file cannot be made: the kernels' private folder goes
    in the system's temporary folder instead of failing the walkthrough."""
    import tempfile
    from pathlib import Path

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(blocker / "runtime"))
    temporary = Path(tempfile.gettempdir())
    with walkthrough.private_files() as folder:
        assert folder.is_dir() and folder.parent == temporary
    assert not folder.exists()


def test_the_closing_table_fits_100_columns_and_keeps_every_word(tmp_path):
    """Issue 45: the table's lines ran to ~2,000 characters (a finding's numbers on one line)."""
    numbers = " ".join(
        f"rank {r}: 1,234 pages of 32 tokens, row 68 < 256 entries" for r in range(16)
    )
    runs = [
        walkthrough.NotebookRun(
            "01_the_16_gpu_report",
            12.34,
            tmp_path,
            None,
            [
                {
                    "scenario": "issue-21470, 16 ranks",
                    "policy": "none/clamped",
                    "outcome": "shut down",
                    "numbers": numbers,
                },
                {"scenario": "x" * 150, "policy": "p", "outcome": "ok", "numbers": "short"},
            ],
        ),
        walkthrough.NotebookRun(
            "02_single_gpu_repro_4mib",
            3.0,
            tmp_path,
            None,
            [],
            "CellExecutionError in cell 7: " + "y " * 80,
        ),
        walkthrough.NotebookRun("03_the_one_line_fix", 1.0, tmp_path, None),
    ]
    text = walkthrough.summary_table(runs)
    assert max(map(len, text.splitlines())) <= walkthrough.SUMMARY_COLUMNS == 100
    expected = [
        "01_the_16_gpu_report 12.3 s 2 finding(s)",
        f"issue-21470, 16 ranks | none/clamped | shut down {numbers}",
        f"{'x' * 150} | p | ok short",
        "02_single_gpu_repro_4mib 3.0 s FAILED: CellExecutionError in cell 7: " + "y " * 80,
        "03_the_one_line_fix 1.0 s no findings reported",
    ]
    # every word, in order (a word longer than a line is cut across lines)
    assert "".join(text.split()) == "".join("".join(expected).split())
