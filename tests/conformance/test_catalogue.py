"""docs/CONFORMANCE.md: which of TensorRT-LLM's own tests kvlab passes, generated here.

The inventory (``inventory/*.txt``) lists every test function of each upstream test file, as
``TestClass::test_name`` under a header naming the file and the commit read. Each conformance
module marks a ported test ``@pytest.mark.upstream("TestClass::test_name", adaptation=...)``
and lists what it cannot express in a module-level ``NOT_MODELLED = {name: reason}``. A port
without an adaptation is counted as faithful, one with an adaptation as adapted (the
adaptation is printed under the test). This test checks that every inventoried upstream test
is ported or listed (never both, never neither), runs the ported ones in a subprocess to count
what passes, and compares docs/CONFORMANCE.md and the README's headline with what it found.
``KVLAB_WRITE_DOCS=1 pytest tests/conformance/test_catalogue.py`` rewrites both.
"""

from __future__ import annotations

import ast
import collections
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from bounds import HANG_S
from peers import ENGINES
from peers import render as render_peer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DOC = ROOT / "docs" / "CONFORMANCE.md"
README = ROOT / "README.md"
BEGIN, END = "<!-- conformance:begin -->", "<!-- conformance:end -->"


def read_inventory():
    """{upstream path: {"commits": set, "tests": [TestClass::test_name, ...]}}"""
    files = collections.OrderedDict()
    for path in sorted((HERE / "inventory").glob("*.txt")):
        upstream = commit = None
        names = []
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line.startswith("# upstream:"):
                upstream = line.split(":", 1)[1].strip()
            elif line.startswith("# commit:"):
                commit = line.split(":", 1)[1].strip()
            elif line and not line.startswith("#"):
                names.append(line)
        assert upstream and commit, f"{path.name}: needs '# upstream:' and '# commit:' headers"
        entry = files.setdefault(upstream, {"commits": set(), "tests": []})
        entry["commits"].add(commit)
        entry["tests"].extend(names)
    return files


def _string_constants(tree):
    """The module's top-level NAME = "text" assignments (adaptations may be built from them)."""
    constants = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            try:
                value = _evaluate(node.value, constants)
            except ValueError:
                continue
            if isinstance(value, str):
                constants[node.targets[0].id] = value
    return constants


def _evaluate(node, constants):
    """A literal, a name of a string constant, or a + of those."""
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _evaluate(node.left, constants) + _evaluate(node.right, constants)
    return ast.literal_eval(node)


def _marker_args(decorator, constants):
    """('TestX::test_y', adaptation) for @pytest.mark.upstream(...), else None."""
    if not (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "upstream"
    ):
        return None
    name = _evaluate(decorator.args[0], constants)
    adaptation = next(
        (_evaluate(k.value, constants) for k in decorator.keywords if k.arg == "adaptation"), ""
    )
    return name, adaptation


def read_modules():
    """Ported tests ({upstream name: [(module, local test, adaptation)]}) and not-modelled
    reasons ({upstream name: (module, reason)}) from every conformance module's source."""
    ported = collections.defaultdict(list)
    not_modelled = {}
    for path in sorted(HERE.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = _string_constants(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                for decorator in node.decorator_list:
                    found = _marker_args(decorator, constants)
                    if found:
                        ported[found[0]].append((path.stem, node.name, found[1]))
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "NOT_MODELLED"
            ):
                for name, reason in ast.literal_eval(node.value).items():
                    assert name not in not_modelled, f"{name} listed twice as not modelled"
                    not_modelled[name] = (path.stem, reason)
    return ported, not_modelled


def run_ported():
    """Run the conformance modules once; {(module, test function): passed?}."""
    report = HERE / ".catalogue-junit.xml"
    modules = [str(p) for p in sorted(HERE.glob("test_*.py")) if p.name != Path(__file__).name]
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={report}",
                *modules,
            ],
            cwd=ROOT,
            capture_output=True,
            timeout=HANG_S,
            check=False,
        )
        outcomes = {}
        for case in ET.parse(report).getroot().iter("testcase"):
            module = case.get("classname", "").split(".")
            module = next((m for m in module if m.startswith("test_")), "")
            function = case.get("name", "").split("[", 1)[0]
            failed = any(child.tag in ("failure", "error", "skipped") for child in case)
            key = (module, function)
            outcomes[key] = outcomes.get(key, True) and not failed
        return outcomes
    finally:
        report.unlink(missing_ok=True)


#: kvlab's block reuse against the V2 manager's, item by item (issue 41, item 4).
REUSE_SECTION = """## TensorRT-LLM reuse: what kvlab models and what not

kvlab's block reuse (`kvlab/core/prefix_cache.py`, `block_reuse.py`, `host_tier.py`,
`suspension.py`) against KVCacheManagerV2's, read in NVIDIA/TensorRT-LLM:
`tensorrt_llm/runtime/kv_cache_manager_v2/_block_radix_tree.py` at
`065ff9e93780bc0bdbfdbc7156a306ca14f5850c`; `_eviction_controller/_eviction_controller.py` at
`2fd4eb8b459c0d2ebaf876c6a2d3864a793d99fd`; `_storage_manager.py` and `_core/_kv_cache.py` at
`00f6bd61f297eaefd98fcabd562d3a8e3df12a96`; `tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py`
at `0004396720054fd8e205cbf616f21f0b57c6b412`.

| upstream | kvlab |
|---|---|
| Eviction from the GPU moves a page to the host tier and keeps it in the radix tree; a match brings it back | modelled: the most recently released pages the tier has room for move down, older ones there are dropped; a prefix whose pages below find no GPU page is cut before them (upstream refuses the resume) |
| One LRU queue for cached pages and suspended caches' pages | modelled: one order by release or suspension; a suspended cache moves down whole |
| A new cache starts suspended, so `max_util_for_resume` gates it | not modelled: a new cache starts active. Gating it turns notebook 03's chunked, no-tier preemption livelock (the `preempt_for_pages` path) into a deadlock, and the version the seed ran was not checked for the gate; the upstream defaults read differ (0.9, 0.95, 0.97) |
| A partial block that is a prefix of a sibling is not inserted; a longer one replaces a shorter partial sibling | modelled (a replaced page a cache still holds goes back to the pool when it lets go) |
| Partial matching is skipped under a node of 32 or more children | modelled |
| Keys chained under a root scoped by LoRA id and cache salt | the cache salt is modelled (`Request.cache_salt`); LoRA ids are not: kvlab has no LoRA |
| The `per_conversation` commit policy | not modelled: it needs conversation ids on requests and the drop plans of earlier turns' committed blocks (`ConversationManager`, `plan_committed_block_drop`); `block_reuse_policy` has `all_reusable` and `per_request` |
| Sliding-window layers matched window-aware (VSWA) | not modelled: kvlab models full attention only, one window for every layer |
"""


def is_adapted(where) -> bool:
    """A port is adapted when one of its kvlab tests says an adaptation, else faithful."""
    return any(adaptation for _, _, adaptation in where)


def render(inventory, ported, not_modelled, outcomes):
    lines = [
        "# Conformance: kvlab against TensorRT-LLM's own tests and vLLM's and SGLang's own "
        "schedulers",
        "",
        "Generated by `tests/conformance/test_catalogue.py` "
        "(`KVLAB_WRITE_DOCS=1 pytest tests/conformance/test_catalogue.py` rewrites it); "
        "do not edit by hand.",
        "",
        "The upstream tests mock the KV cache manager and script each allocation's answer. "
        "kvlab's ports run on a real pool, manager and scheduler and make the same answers "
        "happen physically (`tests/conformance/support.py`). A port is *faithful* when it "
        "builds upstream's scenario and checks upstream's assertions; *adapted* when "
        "something had to change, and the adaptation is listed under the test. A test "
        "kvlab cannot express, or whose port would test something else, is listed as "
        "*not modelled*, with the reason.",
        "",
    ]
    totals = collections.Counter()
    details = []
    # the file with the most tests first (the scheduler's)
    for upstream, entry in sorted(inventory.items(), key=lambda item: -len(item[1]["tests"])):
        commits = ", ".join(f"`{c}`" for c in sorted(entry["commits"]))
        lines += [
            f"## `{upstream}`",
            "",
            f"NVIDIA/TensorRT-LLM at {commits}.",
            "",
            "| upstream class | tests | faithful | adapted | not modelled | passing |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        by_class = collections.OrderedDict()
        for name in entry["tests"]:
            by_class.setdefault(name.split("::")[0], []).append(name)
        for cls, names in by_class.items():
            n_ported = [n for n in names if n in ported]
            n_adapted = [n for n in n_ported if is_adapted(ported[n])]
            passing = [
                n for n in n_ported if all(outcomes.get((m, f), False) for m, f, _ in ported[n])
            ]
            n_not = [n for n in names if n in not_modelled]
            counts = dict(
                tests=len(names),
                faithful=len(n_ported) - len(n_adapted),
                adapted=len(n_adapted),
                not_modelled=len(n_not),
                passing=len(passing),
            )
            lines.append(
                f"| {cls} | {counts['tests']} | {counts['faithful']} | "
                f"{counts['adapted']} | {counts['not_modelled']} | {counts['passing']} |"
            )
            totals.update(counts)
        lines.append("")
        rows = []
        for name in entry["tests"]:
            if name in not_modelled:
                rows.append(f"| `{name}` | not modelled | {not_modelled[name][1]} |")
            else:
                where = "; ".join(
                    f"`{m}.py::{f}`" + (f" (adaptation: {a})" if a else "")
                    for m, f, a in ported[name]
                )
                state = (
                    "passing"
                    if all(outcomes.get((m, f), False) for m, f, _ in ported[name])
                    else "FAILING"
                )
                kind = "adapted" if is_adapted(ported[name]) else "faithful"
                rows.append(f"| `{name}` | {kind}, {state} | {where} |")
        details += [
            f"### Every test of `{upstream}`",
            "",
            "| upstream test | kvlab | where, or why not |",
            "|---|---|---|",
            *rows,
            "",
        ]
    n_ported = totals["faithful"] + totals["adapted"]
    headline = (
        f"{totals['tests']} upstream tests: {totals['faithful']} ported faithfully, "
        f"{totals['adapted']} adapted (each adaptation said), {totals['not_modelled']} "
        f"not modelled; {totals['passing']} of the {n_ported} ports pass"
    )
    lines[4:4] = [f"**{headline}.**", ""]
    peers = [line for engine in ENGINES for line in render_peer(engine)]
    reuse = REUSE_SECTION.splitlines() + [""]
    return "\n".join(lines + reuse + peers + details), headline


@pytest.mark.slow
def test_every_upstream_test_is_ported_or_listed_and_the_doc_is_current():
    inventory = read_inventory()
    assert inventory, "tests/conformance/inventory/ lists no upstream file"
    ported, not_modelled = read_modules()
    inventoried = [name for entry in inventory.values() for name in entry["tests"]]
    duplicates = [n for n, c in collections.Counter(inventoried).items() if c > 1]
    assert not duplicates, f"inventoried twice: {duplicates}"
    both = sorted(set(ported) & set(not_modelled))
    assert not both, f"both ported and listed as not modelled: {both}"
    missing = sorted(set(inventoried) - set(ported) - set(not_modelled))
    assert not missing, f"upstream tests neither ported nor listed: {missing}"
    unknown = sorted((set(ported) | set(not_modelled)) - set(inventoried))
    assert not unknown, f"marked but not in the inventory: {unknown}"
    for name, (module, reason) in not_modelled.items():
        assert len(reason) >= 20, f"{module}: the reason for {name} says too little: {reason!r}"

    outcomes = run_ported()
    failing = sorted(
        n
        for n, where in ported.items()
        if not all(outcomes.get((m, f), False) for m, f, _ in where)
    )
    assert not failing, f"ported upstream tests that do not pass: {failing}"

    text, headline = render(inventory, ported, not_modelled, outcomes)
    readme = README.read_text(encoding="utf-8")
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1, f"README.md needs {BEGIN} ... {END}"
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    line = (
        f"\n[docs/CONFORMANCE.md](docs/CONFORMANCE.md): TensorRT-LLM's own scheduler and "
        f"manager tests ported onto kvlab's public API: {headline}.\n"
    )
    if os.environ.get("KVLAB_WRITE_DOCS") == "1":
        DOC.write_text(text, encoding="utf-8")
        README.write_text(readme[:start] + line + readme[end:], encoding="utf-8")
    assert DOC.exists() and DOC.read_text(encoding="utf-8") == text, (
        "docs/CONFORMANCE.md is out of date: KVLAB_WRITE_DOCS=1 pytest tests/conformance/test_catalogue.py"
    )
    assert README.read_text(encoding="utf-8")[start : start + len(line)] == line, (
        "README.md's conformance line is out of date: KVLAB_WRITE_DOCS=1 pytest "
        "tests/conformance/test_catalogue.py"
    )
