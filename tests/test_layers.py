"""The layers of kvlab (docs/DESIGN.md, "Layers"): each module imports only from its own layer or
the layers below it, at module level and inside functions alike, and the map there is the tree."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kvlab"

#: Bottom first. A layer is a package of kvlab or one module; the entry points sit on top.
LAYERS = (
    "core",
    "sched",
    "run",
    "analysis",
    "backends",
    "case_studies",
    "notebook",
    "workshop",
    "cli",
)
TOP = ("__init__", "__main__", "cli", "doctor", "slides")


def layer_of(module: str) -> int:
    """The rank of ``kvlab.<first>...`` in :data:`LAYERS`; the package itself is the top."""
    parts = module.split(".")
    assert parts[0] == "kvlab", module
    first = parts[1] if len(parts) > 1 else "__init__"
    return len(LAYERS) - 1 if first in TOP else LAYERS.index(first)


def imported_modules(path: Path):
    """Every kvlab module the file at ``path`` imports, with its line; relative imports are refused."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}:{node.lineno}: a relative import"
            if node.module == "kvlab":
                for alias in node.names:  # `from kvlab import x`: the top, unless x is a layer
                    yield (f"kvlab.{alias.name}" if alias.name in LAYERS else "kvlab"), node.lineno
            elif node.module and node.module.startswith("kvlab."):
                yield node.module, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "kvlab" or alias.name.startswith("kvlab."):
                    yield alias.name, node.lineno


MODULES = sorted(PACKAGE.rglob("*.py"))
NAMES = [str(p.relative_to(PACKAGE.parent)) for p in MODULES]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def test_every_module_belongs_to_a_layer():
    for path in MODULES:
        layer_of(module_name(path))  # raises ValueError for a module outside every layer


@pytest.mark.parametrize("path", MODULES, ids=NAMES)
def test_no_import_points_upward(path):
    here = layer_of(module_name(path))
    upward = [
        f"line {line}: {target} ({LAYERS[layer_of(target)]})"
        for target, line in imported_modules(path)
        if layer_of(target) > here
    ]
    assert not upward, f"{module_name(path)} ({LAYERS[here]}) imports upward: {upward}"


def test_the_check_sees_an_upward_import(tmp_path):
    """The walk finds a function-level import too: what the test above relies on."""
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from kvlab.notebook.viz import outcome_colour\n")
    assert [(layer_of(t), line) for t, line in imported_modules(path)] == [
        (LAYERS.index("notebook"), 2)
    ]


DESIGN = PACKAGE.parent / "docs" / "DESIGN.md"


def map_entries(design: str) -> list[str]:
    """The paths the module map of ``design`` (the first code block of its "## Layers") names,
    in order: ``kvlab/``, ``kvlab/core/``, ``kvlab/core/pool.py``, ... An entry is the first word
    of a line indented two spaces a level; deeper lines continue the entry above."""
    block = design.split("## Layers", 1)[1].split("```", 2)[1]
    entries, folders = [], []
    for line in block.splitlines():
        indent, word = len(line) - len(line.lstrip(" ")), (line.split() or [""])[0]
        level = indent // 2
        if indent % 2 or level > len(folders) or not word.endswith((".py", "/")):
            continue  # a continuation line, or a word that is no module or folder
        folders[level:] = [word] if word.endswith("/") else []
        entries.append("".join(folders[:level]) + word)
    return entries


def map_mismatch(design: str) -> list[str]:
    """What the map and the tree disagree on: each module (a package by its folder) left out of
    the map, each entry of the map the tree lacks, and layers out of :data:`LAYERS`' order."""
    tree = {str(p.relative_to(PACKAGE.parent)).removesuffix("__init__.py") for p in MODULES}
    entries = map_entries(design)
    layers = [entry.split("/")[1].removesuffix(".py") for entry in entries]
    order = [layer for layer in dict.fromkeys(layers) if layer in LAYERS]
    return (
        [f"left out of the map: {m}" for m in sorted(tree - set(entries))]
        + [f"not in the tree: {e}" for e in sorted(set(entries) - tree)]
        + ([f"layers out of order: {order}"] if order != list(LAYERS) else [])
    )


def test_the_design_module_map_matches_the_tree():
    """docs/DESIGN.md's map names every module under its layer and package, no module that does
    not exist, and the layers bottom first."""
    assert map_mismatch(DESIGN.read_text(encoding="utf-8")) == []


def test_the_map_check_sees_a_missing_and_an_extra_module():
    """What the test above relies on: a map without ``pool.py`` and with ``nothing.py`` fails."""
    design = DESIGN.read_text(encoding="utf-8")
    line = next(line for line in design.splitlines() if line.lstrip().startswith("pool.py "))
    doctored = design.replace(line, line.replace("pool.py", "nothing.py"))
    assert set(map_mismatch(doctored)) - set(map_mismatch(design)) == {
        "left out of the map: kvlab/core/pool.py",
        "not in the tree: kvlab/core/nothing.py",
    }
