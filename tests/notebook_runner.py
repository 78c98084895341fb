"""One way for the tests to run a notebook under papermill (docs/DESIGN.md's conventions)."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import papermill
import pytest

from kvlab.notebook import walkthrough


def execute(src: Path, out_dir: Path, *, fail_on_error: bool = True, **parameters):
    """Run ``src`` (SMOKE on unless given) into ``out_dir``; return (executed notebook, seconds).

    A failing cell becomes a test failure naming the cell, or, with ``fail_on_error=False``,
    papermill's PapermillExecutionError for the test to inspect."""
    parameters.setdefault("SMOKE", True)
    out = Path(out_dir) / Path(src).name
    start = time.perf_counter()
    try:
        walkthrough.execute(Path(src), out, parameters)
    except papermill.PapermillExecutionError as exc:
        if not fail_on_error:
            raise
        source = (exc.source or "").strip().splitlines()
        pytest.fail(
            f"{Path(src).name} with {parameters}: cell {exc.cell_index} (execution count "
            f"{exc.exec_count}, starting {source[0] if source else ''!r}) raised "
            f"{exc.ename}: {exc.evalue}",
            pytrace=False,
        )
    return nbformat.read(out, as_version=4), time.perf_counter() - start
