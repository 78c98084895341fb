"""The layers of kvlab (README, "Design"): each module imports only from its own layer or the
layers below it, at module level and inside functions alike."""

from __future__ import annotations

import ast
import re
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
#: Packages inside a layer (``notebook/viz``), each a folder with an ``__init__.py``.
SUBPACKAGES = {
    str(p.parent.relative_to(PACKAGE))
    for p in MODULES
    if p.name == "__init__.py" and PACKAGE not in (p.parent, p.parent.parent)
}


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


def test_the_readme_module_map_matches_the_tree():
    """Every module appears in the README's map under its layer (a package of a layer, ``viz/``,
    with its modules indented below it), and the map names no module or package that does not
    exist."""
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Design", 1)[1].split("```", 2)[1]
    mapped, packages, layer, package = set(), set(), "", ""
    for line in block.splitlines():
        indent, entry = len(line) - len(line.lstrip(" ")), (line.split() or [""])[0]
        if indent == 2:  # a layer, or a one-module layer
            layer, package = (entry.rstrip("/") if entry.endswith("/") else ""), ""
            if entry.endswith(".py"):
                mapped.add(entry)
        elif indent == 4 and layer:  # a module of the layer, or a package of it
            package = f"{layer}/{entry.rstrip('/')}" if entry.endswith("/") else ""
            packages.update([package] if package else [])
        if layer:
            folder = package if package and indent > 4 else layer
            mapped.update(f"{folder}/{name}" for name in re.findall(r"\b(\w+\.py)\b", line))
    modules = {str(p.relative_to(PACKAGE)) for p in MODULES if not p.name.startswith("__")}
    assert modules - mapped == set(), "modules the README's map leaves out"
    assert mapped - modules == set(), "the README's map names modules that do not exist"
    assert packages == SUBPACKAGES, (
        "the README's map and the tree disagree on the packages of a layer"
    )


def test_the_design_layer_table_matches_the_tree():
    """docs/DESIGN.md's layer table names every module of each layer, and no other; a package of
    a layer as `` `viz/` (`style`, `pages`, ...) ``, naming each of its modules."""
    design = (PACKAGE.parent / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    rows = [line for line in design.splitlines() if re.match(r"\| `\w+/?` \|", line)]
    assert rows, "DESIGN.md has no layer table"
    for row in rows:
        layer_cell, modules_cell = row.split("|")[1:3]
        layer = layer_cell.strip().strip("`")
        if not layer.endswith("/"):
            assert (PACKAGE / f"{layer}.py").exists(), (
                f"DESIGN.md names a layer {layer} that is not a module"
            )
            continue
        package_pattern = r"`(\w+)/` \(([^)]*)\)"
        named = {
            f"{package}/{module}"
            for package, inner in re.findall(package_pattern, modules_cell)
            for module in re.findall(r"`(\w+)`", inner)
        }
        named |= set(re.findall(r"`(\w+)`", re.sub(package_pattern, "", modules_cell)))
        tree = {
            str(p.relative_to(PACKAGE / layer).with_suffix(""))
            for p in MODULES
            if p.is_relative_to(PACKAGE / layer) and not p.name.startswith("__")
        }
        assert named == tree, (
            f"{layer}: DESIGN.md names {sorted(named - tree)} not in the tree, "
            f"leaves out {sorted(tree - named)}"
        )
    layers = {row.split("|")[1].strip().strip("`").rstrip("/") for row in rows}
    assert set(LAYERS) - {"cli"} <= layers, "DESIGN.md's table leaves out a layer"
