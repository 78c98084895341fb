"""Every notebook is stored clean and paired: no outputs or execution counts, a py:percent twin
in sync (read both with jupytext, compare cell types and sources), a markdown title first, then
exactly one `parameters` cell with ``SMOKE: bool = False``, kernel ``python3``, and no
machine-specific paths (docs/DESIGN.md, "Conventions")."""

from __future__ import annotations

import re
from pathlib import Path

import jupytext  # noqa: E402
import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
IPYNBS = sorted(p for p in NOTEBOOKS.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
IDS = [str(p.relative_to(NOTEBOOKS)) for p in IPYNBS]
MACHINE_PATH = re.compile(r"(/work/|/root/|/home/|/tmp/|/Users/|[A-Za-z]:\\\\)")


def test_the_walkthrough_notebooks_exist():
    names = {p.name for p in IPYNBS}
    assert {
        "02_single_gpu_repro_4mib.ipynb",
        "03_the_one_line_fix.ipynb",
        "04_admission_control.ipynb",
        "05_mamba_residency.ipynb",
    } <= names


def cells_of(notebook) -> list:
    return [
        (c.cell_type, c.source.strip(), "parameters" in c.metadata.get("tags", []))
        for c in notebook.cells
    ]


@pytest.mark.parametrize("path", IPYNBS, ids=IDS)
def test_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has outputs"
            assert cell.execution_count is None, f"cell {i} has an execution count"
    assert "widgets" not in nb.metadata, "widget state is stored"
    assert "papermill" not in nb.metadata, "this is an executed copy"


#: The pairing's metadata filter: no jupytext version in a twin's header.
VERSION_FILTER = "-jupytext.text_representation.jupytext_version"


@pytest.mark.parametrize("path", IPYNBS, ids=IDS)
def test_kernel_and_pairing_metadata(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.kernelspec.name == "python3"
    assert nb.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"
    # a save with another jupytext version (a learner's JupyterLab) leaves the twin unchanged
    assert nb.metadata.jupytext.get("notebook_metadata_filter") == VERSION_FILTER
    assert "jupytext_version:" not in path.with_suffix(".py").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", IPYNBS, ids=IDS)
def test_py_percent_twin_is_in_sync(path):
    twin = path.with_suffix(".py")
    assert twin.is_file(), (
        f"{twin.name} is missing: jupytext --set-formats ipynb,py:percent {path.name}"
    )
    assert "format_name: percent" in twin.read_text(encoding="utf-8")
    from_ipynb, from_py = jupytext.read(path), jupytext.read(twin)
    assert cells_of(from_py) == cells_of(from_ipynb), (
        f"{path.name} and {twin.name} differ: run `jupytext --sync {path.name}`"
    )


@pytest.mark.parametrize("path", IPYNBS, ids=IDS)
def test_title_then_one_parameters_cell_with_smoke(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert tagged == [1], f"parameters cells at {tagged}; want exactly one, right after the title"
    source = nb.cells[1].source
    assert nb.cells[1].cell_type == "code"
    assert re.search(r"^SMOKE: bool = False\b", source, re.M), "no `SMOKE: bool = False` line"
    for line in source.splitlines():  # typed defaults: `name: type = value  # comment`
        if line.strip() and not line.lstrip().startswith("#"):
            assert re.match(r"^[A-Za-z_]\w*: [\w\[\], .|]+ = ", line), (
                f"untyped parameter: {line!r}"
            )


@pytest.mark.parametrize("path", IPYNBS, ids=IDS)
def test_no_machine_specific_paths(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        assert not MACHINE_PATH.search(cell.source), f"cell {i} names a machine-specific path"


@pytest.mark.parametrize("path", IPYNBS, ids=IDS)
def test_no_markdown_line_is_a_heading_by_accident(path):
    """A wrapped sentence whose line starts with "#21470" renders as a heading; headings are
    words ("## 2. The same workload ...")."""
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type == "markdown":
            stray = [line for line in cell.source.splitlines() if re.match(r"#\d", line)]
            assert not stray, f"cell {i}: {stray}"


@pytest.mark.parametrize("path", IPYNBS, ids=IDS)
def test_imports_no_private_module(path):
    """A notebook uses kvlab's public names, never a private module (``kvlab.core.checks``)."""
    code = "\n".join(
        c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"
    )
    assert not re.search(r"(from|import)\s+kvlab(\.\w+)*\._", code)


def test_every_percent_script_has_its_notebook():
    for script in NOTEBOOKS.rglob("*.py"):
        if "format_name: percent" in script.read_text(encoding="utf-8"):
            assert script.with_suffix(".ipynb").is_file(), f"{script.name} has no .ipynb twin"
