"""The walkthrough notebooks (01-06; 06 also in test_notebook_06.py) run headless under papermill, with their findings asserted
inside them (docs/DESIGN.md, "Conventions"); a failing cell becomes a test failure that names the
cell. (tests/notebook/test_notebook_hygiene.py checks how they are stored.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from notebook_runner import execute

from kvlab.notebook.findings import read_findings
from kvlab.notebook.panel import PANEL_MIME
from kvlab.notebook.walkthrough import PLOTLY_MIME
from kvlab.notebook.walkthrough import execute as execute_notebook

pytestmark = pytest.mark.notebook

import papermill  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NB01 = NOTEBOOKS / "01_the_16_gpu_report.ipynb"
NB02 = NOTEBOOKS / "02_single_gpu_repro_4mib.ipynb"
NB03 = NOTEBOOKS / "03_the_one_line_fix.ipynb"
NB04 = NOTEBOOKS / "04_admission_control.ipynb"
NB05 = NOTEBOOKS / "05_mamba_residency.ipynb"


def panels(nb) -> list:
    """The outputs that are live panels (each carries its whole self as PANEL_MIME)."""
    return [o for c in nb.cells for o in c.get("outputs", []) if PANEL_MIME in o.get("data", {})]


def outputs(nb, mime: str) -> list:
    return [
        o["data"][mime] for c in nb.cells for o in c.get("outputs", []) if mime in o.get("data", {})
    ]


@pytest.fixture(scope="module")
def nb02(tmp_path_factory):
    """Notebook 02 at its defaults (the seed) with SMOKE on, executed once for the module."""
    return execute(NB02, tmp_path_factory.mktemp("nb02"))


@pytest.fixture(scope="module")
def nb03(tmp_path_factory):
    """Notebook 03 at its defaults (the seed) with SMOKE on, executed once for the module."""
    return execute(NB03, tmp_path_factory.mktemp("nb03"))


@pytest.fixture(scope="module")
def nb04(tmp_path_factory):
    """Notebook 04 at its defaults (the seed) with SMOKE on, executed once for the module."""
    return execute(NB04, tmp_path_factory.mktemp("nb04"))


def test_notebook_02_reproduces_the_crash(nb02):
    nb, _ = nb02
    findings = read_findings(nb)
    assert [(f["scenario"], f["policy"], f["outcome"]) for f in findings] == [
        ("rtx5080-4mib, any host tier", "none/clamped", "crash")
    ]
    numbers = findings[0]["numbers"]
    for text in ("2,048 B/token", "64 blocks = 2,048 tokens", "row 68 entries", "need 256 entries"):
        assert text in numbers


def test_notebook_02_holds_static_figures_and_the_live_panel(nb02):
    nb, _ = nb02
    figures = outputs(nb, PLOTLY_MIME)
    assert len(figures) >= 4  # page map, index row, the panel's static copy, the outcome map
    titles = [f["layout"]["title"]["text"] for f in figures]
    assert any(
        t.startswith("KV pool: 64 pages of 32 tokens; the request needs 256") for t in titles
    )
    assert any(t.startswith("Page-index row: 256 entries needed, 68 available") for t in titles)
    panel = panels(nb)
    assert len(panel) == 1
    assert (
        "kvlab-verdict" in panel[0]["data"]["text/html"]
    )  # the fallback a frontend-less viewer shows
    assert "User-provided base page indices is too short" in panel[0]["data"]["text/plain"]
    streams = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "KVCacheManager.resize_context" in streams and "-> KVCache.resize" in streams
    assert "PageIndexTooShort: User-provided base page indices is too short" in streams


def test_the_report_shows_every_figure_and_the_verdict_of_every_panel(nb02):
    """The offline HTML report (kvlab walkthrough): each panel as its verdict box and one PNG
    per figure, not the first figure with the verdict squeezed into plain text."""
    from kvlab.notebook.walkthrough import image_server, with_static_figures

    nb, _ = nb02
    (panel,) = panels(nb)
    count = len(panel["data"][PANEL_MIME]["figures"])
    assert count >= 2
    with image_server():
        static = with_static_figures(nb)
    (shown,) = [
        o
        for c in static.cells
        for o in c.get("outputs", [])
        if o.get("data", {}).get("text/plain") == panel["data"]["text/plain"]
    ]
    page = shown["data"]["text/html"]
    assert page.count('<img src="data:image/png;base64,') == count
    assert "kvlab-verdict" in page and "<pre>" not in page
    # the verdict's detail is arithmetic in columns: the code font, not the report's text font
    assert '<pre style="font-family:var(--jp-code-font-family, monospace);' in page


def test_notebook_03s_optional_parts_can_be_skipped():
    """What the optional sections define, no later required cell reads (checked on the source,
    no run): a learner who skips them can run everything else."""
    import ast

    import nbformat

    nb = nbformat.read(NB03, as_version=4)
    optional, defined_there, defined_elsewhere, read_elsewhere = False, set(), set(), set()
    for cell in nb.cells:
        first = cell.source.splitlines()[0] if cell.source else ""
        if cell.cell_type == "markdown" and first.startswith("#"):
            optional = first.endswith("(optional)")
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        bound = {
            n.id
            for stmt in tree.body
            for n in ast.walk(stmt)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        } | {stmt.name for stmt in tree.body if isinstance(stmt, ast.FunctionDef)}
        if optional:
            defined_there |= bound
        else:
            defined_elsewhere |= bound
            if defined_there:
                read_elsewhere |= {
                    n.id
                    for n in ast.walk(tree)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                }
    assert defined_there, "no optional section found"
    assert not (defined_there - defined_elsewhere) & read_elsewhere


def test_notebook_03_turns_the_crash_into_a_refusal(nb03):
    nb, _ = nb03
    findings = read_findings(nb)
    assert [(f["policy"], f["outcome"]) for f in findings] == [
        ("none/clamped", "crash"),
        ("none/configured", "refused"),
    ] + [("none/configured", "stall")] * 3 + [("none/configured", "livelock")]
    # each scheduler finding names the tier configuration it describes
    assert all("automatic host tier" in f["scenario"] for f in findings[2:5])
    assert (
        "no tier below the GPU" in findings[5]["scenario"] and "chunked" in findings[5]["scenario"]
    )
    assert "SchedulerDeadlock" in findings[4]["numbers"] and "0 finished" in findings[4]["numbers"]
    assert (
        "no error (livelock)" in findings[5]["numbers"] and "0 finished" in findings[5]["numbers"]
    )
    assert "row 260 entries" in findings[1]["numbers"] and "x3.82" in findings[1]["numbers"]
    assert "279,072 → 1,067,040 B at batch 512" in findings[1]["numbers"]
    titles = [f["layout"]["title"]["text"] for f in outputs(nb, PLOTLY_MIME)]
    assert any(t.startswith("The price of the wider row") for t in titles)
    measured = [
        t for t in titles if ", measured on NVIDIA H200" in t
    ]  # data/measurements/h200.json
    assert len(measured) == 4 and any(
        t.startswith("The KV pool after a growing MoE workspace") for t in measured
    )
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "measured on NVIDIA H200 (driver " in text and "paged vs contiguous attention" in text
    headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown"]
    assert "## Part 2: through the scheduler" in headings
    # the parts a learner may skip say so in their headings, and the top of the notebook lists them
    optional = [h for h in headings if h.endswith("(optional)")]
    assert optional == [
        "## 5. What the table is for (optional)",
        "## 6. The price, measured on an H200 (optional)",
        "### 8b. Does the tier below the GPU change this? (optional)",
    ]
    intro = nb.cells[0].source
    assert "**Optional parts**" in intro and all(f"§{n}" in intro for n in ("5", "6", "8b"))
    assert (
        "refused in 1,000 of 1,000 passes; SchedulerDeadlock after 1,000 stalled passes"
        in findings[2]["numbers"]
    )
    assert (
        "6 of 6 small finished" in findings[3]["numbers"] and "(starved)" in findings[3]["numbers"]
    )
    timelines = [
        f
        for f in outputs(nb, PLOTLY_MIME)
        if f["layout"]["title"]["text"].startswith(("Alone", "Beside"))
    ]
    assert len(timelines) == 2
    for fig in timelines:  # the stalled-pass counter climbs to the real limit; the pool is drawn
        names = [t["name"] for t in fig["data"]]
        assert "stalled passes" in names and "free pages" in names and "used pages" in names
        assert fig["data"][names.index("stalled passes")]["y"][-1] == 1000


def test_notebook_02_follows_its_parameters(tmp_path):
    """A 64 MiB pool holds 8192 tokens: no clamp, a 260-entry row, the resize succeeds."""
    nb, _ = execute(NB02, tmp_path, pool_mib=64, context=8192)
    (finding,) = read_findings(nb)
    assert (finding["scenario"], finding["outcome"]) == ("64MiB-8192tok-32tpb, any host tier", "ok")
    assert (
        "1,024 blocks = 32,768 tokens" in finding["numbers"]
        and "row 260 entries" in finding["numbers"]
    )


def test_notebook_02_refuses_a_bad_parameter_by_name(tmp_path):
    with pytest.raises(papermill.PapermillExecutionError) as info:
        execute_notebook(NB02, tmp_path / "bad.ipynb", {"pool_mib": -1})
    assert info.value.ename == "ValueError" and "pool_mib" in info.value.evalue


def test_notebook_04_separates_not_yet_from_never(nb04):
    nb, _ = nb04
    findings = read_findings(nb)
    trt = [(f["policy"], f["outcome"]) for f in findings[:3]]
    assert trt == [("none/clamped", "crash"), ("none/configured", "stall"), ("capacity", "reject")]
    assert "6 finished, 1 rejected, 0 unfinished" in findings[2]["numbers"]
    assert "long request needs 257 pages of 64" in findings[2]["numbers"]
    mixed = {f["policy"]: f for f in findings[3:8]}
    assert list(mixed) == ["none/clamped", "none/configured", "capacity", "vllm", "sglang"]
    assert [mixed[p]["outcome"] for p in mixed] == ["crash", "stall", "reject", "reject", "reject"]
    assert all("0 unfinished" in mixed[p]["numbers"] for p in ("capacity", "vllm", "sglang"))
    hour = findings[
        8:13
    ]  # Azure's code trace, its first ten minutes with SMOKE, on the shrunk pool
    assert [(f["policy"], f["outcome"]) for f in hour] == [
        ("none/clamped", "crash"),
        ("none/configured", "stall"),
        ("capacity", "reject"),
        ("vllm", "reject"),
        ("sglang", "reject"),
    ]
    assert "1,482 requests in 10 min" in hour[0]["scenario"]
    assert "1,411 finished, 71 rejected, 0 unfinished; 71 can never fit" in hour[2]["numbers"]
    # the peers' doors: vLLM's max_model_len (7,136), SGLang's pool less six tokens (7,162)
    assert "1,413 finished, 69 rejected, 0 unfinished" in hour[3]["numbers"]
    assert "1,413 finished, 69 rejected, 0 unfinished" in hour[4]["numbers"]
    reuse_on, reuse_off = findings[13:15]  # Mooncake's conversation trace, five minutes with SMOKE
    assert "918 requests in 5 min" in reuse_on["scenario"]
    assert reuse_on["policy"] == "capacity, block reuse on" and reuse_on["outcome"] == "ok"
    # evicted pages move to the automatic host tier and come back (5.1 % when they were dropped)
    assert "prompt tokens reused (11.7%; 56.4% of the unbounded cache's)" in reuse_on["numbers"]
    assert reuse_off["numbers"].startswith("0 prompt tokens reused")
    shipped = findings[15:]  # 12 Mooncake conversations on the tight pool, each engine as it ships
    assert [f["policy"].split(":")[0] for f in shipped] == [
        "TensorRT-LLM",
        "vLLM 0.34.0",
        "SGLang 0.5.23",
    ]
    assert shipped[1]["policy"] == "vLLM 0.34.0: prefix caching on, async scheduling on"
    assert shipped[2]["policy"] == "SGLang 0.5.23: radix cache on, overlap schedule on"
    assert all(f["outcome"] == "reject" for f in shipped)
    assert all("2 rejected with caching on and off" in f["numbers"] for f in shipped)


def test_notebook_04_holds_its_table_figures_and_panel(nb04):
    nb, _ = nb04
    titles = [f["layout"]["title"]["text"] for f in outputs(nb, PLOTLY_MIME)]
    assert any(t.startswith("Phase diagram") for t in titles)
    assert (
        sum(t.startswith("Scheduler timeline") or ": the long request beside" in t for t in titles)
        >= 3
    )
    assert any(t.startswith("TensorRT-LLM's regimes on a mixed workload") for t in titles)
    assert any(t.startswith("TensorRT-LLM none / capacity and the peers") for t in titles)
    assert sum(t.startswith("Azure's code hour on the") for t in titles) == 2
    tables = [t.replace("<wbr>", "") for t in outputs(nb, "text/html")]  # headers may wrap at "_"
    assert any("never fits" in t and "temporarily blocked" in t for t in tables)  # not yet vs never
    assert any("goodput_tokens_per_step" in t for t in tables)  # the outcome table (a DataFrame)
    assert any("follow-up" in t and "reused_tokens" in t for t in tables)  # the shared-prefix story
    assert any("of_ceiling" in t for t in tables)  # the Mooncake replay against the ceiling
    assert sum(t.startswith("12 Mooncake conversations on the") for t in titles) == 2
    assert any("defaults" in t and "too-long" in t and "radix cache on" in t for t in tables)  # 8b
    panel = panels(nb)
    assert len(panel) == 2 and "PageIndexTooShort" in panel[0]["data"]["text/plain"]
    assert "vLLM 0.34.0: prefix caching on, async scheduling on" in panel[1]["data"]["text/plain"]


def test_notebook_04_refuses_a_bad_parameter_by_name(tmp_path):
    with pytest.raises(papermill.PapermillExecutionError) as info:
        execute_notebook(NB04, tmp_path / "bad.ipynb", {"stall_limit": 0})
    assert info.value.ename == "ValueError" and "stall_limit" in info.value.evalue


# --- notebook 01: the 16-GPU report --------------------------------------------------------------


@pytest.fixture(scope="module")
def nb01(tmp_path_factory):
    return execute(NB01, tmp_path_factory.mktemp("nb01"))


def test_notebook_01_reconstructs_the_report(nb01):
    nb, _ = nb01
    findings = read_findings(nb)
    assert [(f["scenario"], f["policy"], f["outcome"]) for f in findings] == [
        ("issue_21470_16x_gb300, automatic host tier", "none/clamped", "crash"),
        ("issue_21470_16x_gb300, automatic host tier", "capacity", "reject"),
        ("rtx5080-4mib", "none/clamped", "crash"),
    ]
    assert "MIN 958,784 tokens = 29,962 blocks; row 29,964 entries" in findings[0]["numbers"]
    assert (
        "rank 0 raised ValueError: User-provided base page indices is too short"
        in findings[0]["numbers"]
    )


def test_notebook_01_shows_the_budget_the_traceback_and_the_panel(nb01):
    nb, _ = nb01
    titles = [
        o["data"][PLOTLY_MIME]["layout"]["title"]["text"]
        for c in nb.cells
        for o in c.get("outputs", [])
        if PLOTLY_MIME in o.get("data", {})
    ]
    assert any(
        t.startswith("Per-rank memory: the MoE workspace shrinks the KV pool (16 ranks)")
        for t in titles
    )
    streams = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert 'File "kvlab/core/manager.py"' in streams and "in resize_context" in streams
    assert (
        "kvlab.core.kv_cache.PageIndexTooShort: User-provided base page indices is too short"
        in streams
    )
    rank_tables = [t for t in outputs(nb, "text/html") if "pool after MIN (pages)" in t]
    assert rank_tables and rank_tables[0].count("shut down: rank 0 raised ValueError") >= 15
    assert "958,784" in rank_tables[0]  # counts with thousands separators, in an HTML table
    panel = panels(nb)
    assert len(panel) == 1 and "kvlab-verdict" in panel[0]["data"]["text/html"]
    # the button's run, pressed once in a cell of its own: how it ended, in one line outside
    # the panel (the report without a kernel has it); its rank table is section 5's, once
    said = [
        o.get("text", "")
        for cell in nb.cells
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream"
    ]
    runs = [t for t in said if "Run the ranks: shut down - rank 0 raised ValueError" in t]
    assert len(runs) == 1 and "As predicted." in runs[0]
    # issue 45: the shut-down table was shown four times; once now (the panel's own aside)
    assert sum("shut down: rank 0 raised" in t for t in rank_tables) == 1


def test_notebook_01_follows_its_parameters(tmp_path):
    """Four ranks and less workspace: the pool still clamps, but a 524,288-token context fits."""
    nb, _ = execute(NB01, tmp_path, ranks=4, workspace_gib=10.0, context=524_288)
    clamped, capacity, _ = read_findings(nb)
    assert (clamped["scenario"], clamped["outcome"], capacity["outcome"]) == (
        "4x-10GiB-524288tok, automatic host tier",
        "ok",
        "ok",
    )
    assert "4 ranks" in clamped["numbers"] and "completed" in clamped["numbers"]


# --- notebook 05: recurrent-state residency (merged code raises; proposals PR #17261, closed
# without merging, and PR #18985, open) -----------------------------------------------------------


@pytest.fixture(scope="module")
def nb05(tmp_path_factory):
    return execute(NB05, tmp_path_factory.mktemp("nb05"))


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
    nb, _ = nb05
    findings = read_findings(nb)
    assert [(f["scenario"], f["policy"], f["outcome"]) for f in findings] == [
        ("qwen3.5-27b-h100", "merged", "crash"),
        ("qwen3.5-27b-h100", CLAMP, "ok"),
        ("qwen3.5-27b-h100", DEFAULT, "ok"),
        ("review finding 1", "bug", "ranks disagree"),
        ("review finding 1", "fix", "ok"),
        ("review finding 2", "bug", "crash (StateSlotsExhausted)"),
        ("review finding 2", "fix", "ok"),
        ("review finding 3", "bug", "stall (SchedulerDeadlock)"),
        ("review finding 3", "fix", "ok"),
    ]
    assert (
        "513 slots x 78,446,592 B + one page = 37.48 GiB vs quota 24.86 GiB"
        in findings[0]["numbers"]
    )
    assert findings[1]["numbers"].startswith("339 resident + 1 dummy, 173 queue")
    assert "bfloat16 SSM state implied" in findings[1]["numbers"]
    assert (
        findings[2]["numbers"]
        == "max_batch_size default 339 fits; an explicit 512 still raises, in GiB"
    )
    assert (
        "rank 1 admitted 8" in findings[3]["numbers"]
        and "rank 1 admitted 3" in findings[4]["numbers"]
    )
    text = " ".join(outputs_text(nb).split())  # long lines are printed broken between words
    assert "ValueError: The V2 Mamba GPU cache quota is too small for live recurrent states" in text
    assert "got 24.86 GiB, need at least 37.48 GiB" in text  # PR #18985's proposed message
    assert "largest max_batch_size whose floor fits 24.86 GiB: 339" in text
    assert (
        sum(PLOTLY_MIME in out.get("data", {}) for c in nb.cells for out in c.get("outputs", []))
        >= 4
    )


def test_notebook_05_float32_and_a_big_quota(tmp_path):
    nb, _ = execute(NB05, tmp_path, ssm_dtype="float32", quota_gib=80.0)
    findings = read_findings(nb)
    assert findings[0]["policy"] == "merged" and findings[0]["outcome"] == "ok"
    assert "73.55 GiB vs quota 80.00 GiB" in findings[0]["numbers"]
    assert findings[1]["numbers"].startswith("512 resident + 1 dummy, 0 queue")
    assert findings[2]["outcome"] == "ok" and findings[2]["numbers"].endswith(
        "an explicit 512 builds"
    )


def test_notebook_05_rejects_bad_parameters(tmp_path):
    with pytest.raises(papermill.PapermillExecutionError, match="ssm_dtype"):
        execute(NB05, tmp_path, fail_on_error=False, ssm_dtype="fp8")


# --- every figure of every notebook, rendered ------------------------------------------------------


def notebook_figures(nb) -> list:
    """(where, figure dict) for every figure a notebook shows: its plotly outputs and every
    figure of every live panel."""
    found = []
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if PANEL_MIME in data:
                found += [
                    (f"cell {i}, panel figure {k}", f)
                    for k, f in enumerate(data[PANEL_MIME]["figures"])
                ]
            elif PLOTLY_MIME in data:
                found.append((f"cell {i}", data[PLOTLY_MIME]))
    return found


def _points(trace: dict) -> int:
    for key in ("x", "y", "z", "values"):
        value = trace.get(key)
        if value is not None:
            return len(value) if isinstance(value, (list, tuple, str)) else 1
    return 0


def figure_problems(fig: dict) -> list:
    """What a reader would see wrong in ``fig`` that can be told from its spec: an empty frame,
    a legend entry for a trace with nothing in it, a title or subtitle line wider than the
    figure, category labels too long for their slot that are not rotated."""
    from kvlab.notebook.viz import FIGURE_WIDTH

    layout, traces = fig.get("layout", {}), fig.get("data", [])
    problems = []
    if (
        not any(_points(t) for t in traces)
        and not layout.get("shapes")
        and not layout.get("annotations")
    ):
        problems.append("an empty frame")
    for t in traces:
        if len(traces) > 1 and not _points(t) and t.get("showlegend", True) and t.get("name"):
            problems.append(f"a legend entry for the empty trace {t['name']!r}")
    width = layout.get("width", FIGURE_WIDTH)
    title = layout.get("title", {})
    for line in (title.get("text") or "").split("<br>"):
        px = 6.7 if "font-size:12px" in line else 9.0  # a subtitle line, or the title's
        plain = re.sub(r"<[^>]+>", "", line)
        if len(plain) * px > width - 10:
            problems.append(f"a title line clipped at {width} px: {plain[:60]!r}...")
    for axis_name, axis in layout.items():
        if not axis_name.startswith("xaxis") or axis.get("tickangle") is not None:
            continue
        suffix = axis_name[5:]
        labels = {
            str(x)
            for t in traces
            if t.get("type") == "bar" and t.get("xaxis", "x") == f"x{suffix}"
            for x in (t.get("x") or [])
            if isinstance(x, str)
        }
        domain = axis.get("domain", [0, 1])
        slot = (width - 100) * (domain[1] - domain[0]) / max(len(labels), 1)
        if labels and max(len(x) for x in labels) * 7.5 > slot:
            problems.append(f"{axis_name}'s labels overlap: {sorted(labels)}")
    return problems


@pytest.mark.parametrize("notebook", ["nb01", "nb02", "nb03", "nb04", "nb05", "nb06"])
def test_every_figure_renders_and_shows_what_it_says(notebook, request):
    """Each figure of the notebook (SMOKE run) becomes a PNG through kaleido, and none has a
    problem :func:`figure_problems` can see."""
    import plotly.graph_objects as go
    import plotly.io as pio

    from kvlab.notebook.walkthrough import image_server

    nb, _ = request.getfixturevalue(notebook)
    figures = notebook_figures(nb)
    assert figures, f"{notebook} shows no figure"
    problems = [f"{where}: {p}" for where, fig in figures for p in figure_problems(fig)]
    assert not problems, "\n".join(problems)
    with image_server():
        for where, fig in figures:
            png = pio.to_image(go.Figure(fig), format="png")
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, f"{where}: no image"


def test_the_figure_check_sees_what_it_looks_for():
    empty = {"data": [{"type": "scatter", "x": [], "y": []}], "layout": {}}
    legend = {
        "data": [
            {"type": "bar", "x": ["a"], "y": [1], "name": "a"},
            {"type": "scatter", "x": [], "y": [], "name": "nothing"},
        ],
        "layout": {},
    }
    long_title = {
        "data": [{"type": "bar", "x": ["a"], "y": [1]}],
        "layout": {"title": {"text": "t" * 90}},
    }
    crowded = {
        "data": [{"type": "bar", "x": [f"policy number {i}" for i in range(8)], "y": [1] * 8}],
        "layout": {"xaxis": {}},
    }
    assert figure_problems(empty) == ["an empty frame"]
    assert figure_problems(legend) == ["a legend entry for the empty trace 'nothing'"]
    assert "clipped" in figure_problems(long_title)[0]
    assert "overlap" in figure_problems(crowded)[0]
