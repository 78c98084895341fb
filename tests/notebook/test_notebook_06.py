"""Notebook 06 (your deployment, planned) runs headless under papermill: it reproduces the walk's
figures from the presets, follows its parameters and refuses bad ones by name."""

from __future__ import annotations

import json
import shlex
from html.parser import HTMLParser

import pytest
from notebook_runner import execute

from kvlab.core.paths import NOTEBOOK_DIR
from kvlab.notebook.findings import read_findings
from kvlab.notebook.panel import PANEL_MIME

pytestmark = pytest.mark.notebook
import papermill  # noqa: E402

NB06 = NOTEBOOK_DIR / "06_your_deployment.ipynb"  # nb06, executed once: tests/notebook/conftest.py


def test_notebook_06_plans_the_walk_from_the_presets(nb06):
    nb, _ = nb06
    findings = read_findings(nb)
    assert [(f["scenario"], f["outcome"]) for f in findings] == [
        ("issue #21470 (16 x GB300)", "crash"),
        ("issue #21470 (16 x GB300)", "reject"),
        ("issue #21470 (16 x GB300)", "reject"),
        ("llama-3.1-70b on h100-80gb, tp 4", "ok"),  # V1, chunked prefill: every context fits
        ("4 MiB repro", "crash"),
        ("Qwen3.5-27B, PR #17261", "crash"),
    ]
    assert (
        "contexts from 958,849 tokens raise; pool 958,784 tokens, row 29,964 entries"
        in findings[0]["numbers"]
    )
    assert findings[2]["policy"] == "V1 manager (the default)"
    assert "64 blocks, row 68 (fix 260)" in findings[4]["numbers"]
    assert findings[5]["numbers"] == "513 slots need 37.48 GiB of 24.86 GiB"
    panels = [o for c in nb.cells for o in c.get("outputs", []) if PANEL_MIME in o.get("data", {})]
    assert len(panels) == 1 and len(panels[0]["data"][PANEL_MIME]["figures"]) == 2


def test_notebook_06_follows_its_parameters(tmp_path):
    nb, _ = execute(
        NB06,
        tmp_path,
        model="llama-3.1-8b",
        gpu="h200",
        tp_size=1,
        max_seq_len=32768,
        max_batch_size=64,
    )
    mine = read_findings(nb)[3]
    assert mine["scenario"] == "llama-3.1-8b on h200, tp 1" and mine["outcome"] == "ok"
    assert mine["numbers"] == "longest context that finishes: 32,768 tokens"
    (tmp_path / "v2").mkdir()
    nb, _ = execute(
        NB06,
        tmp_path / "v2",
        model="llama-3.1-8b",
        gpu="h200",
        tp_size=1,
        max_seq_len=32768,
        max_batch_size=64,
        manager="v2",
    )
    assert read_findings(nb)[3]["numbers"] == "longest context that finishes: 32,768 tokens"


@pytest.mark.parametrize(
    "parameters, named",
    [
        (dict(model="gpt-5"), "model must be one of"),
        (dict(gpu="tpu"), "gpu must be one of"),
        (dict(tp_size=0), "tp_size must be in"),
        (dict(max_seq_len=-1), "max_seq_len must be in"),
        (dict(tp_size=3), "tp_size must divide num_attention_heads"),
        (dict(manager="v3"), "manager must be one of"),
    ],
)
def test_notebook_06_refuses_a_bad_parameter_by_name(tmp_path, parameters, named):
    with pytest.raises(papermill.PapermillExecutionError, match=named):
        execute(NB06, tmp_path, fail_on_error=False, **parameters)


# --- the plan panel, as a learner saw it in the browser (third pass) ------------------------------

#: Notebook 06 §2's panel at issue #21470's deployment, as plan_panel() starts.
DEFAULTS = dict(
    model="qwen3-235b-a22b",
    gpu="gb300",
    manager="v2",
    weights_gib=22.0,
    workspace_gib=28.0,
    max_seq_len=1 << 20,
    max_batch_size=16,
    ranks=16,
)


def _panel_plan(**changes):
    from kvlab.notebook.widgets.plan import plan_figures, plan_model, plan_verdict

    plan = plan_model({**DEFAULTS, **changes})
    return plan, plan_verdict(plan), plan_figures(plan)


def _subtitle(fig):
    import re

    return " ".join(re.findall(r"<span[^>]*>(.*?)</span>", fig["layout"]["title"]["text"]))


def test_a_deployment_with_no_pool_is_labelled_cannot_start_and_its_figures_say_why():
    """ranks = 1 with 400 GiB of weights: no KV pool. The verdict names no exception kvlab does
    not model; the context figure has no axes to read, only why it is empty; the per-rank figure
    has one rank, one value, and the GPU's memory drawn under the bar that overflows it."""
    from kvlab.core.memory import GIB
    from kvlab.notebook import viz

    plan, (outcome, text), figs = _panel_plan(
        ranks=1, weights_gib=400.0, workspace_gib=64.0, max_seq_len=4096
    )
    assert not plan.blocks and "kvlab does not model the exact start-up error" in plan.explain(
        width=None
    )
    assert (
        "CANNOT START" in text
        and "VALUEERROR" not in text.upper().split("</PRE>")[0].split("<PRE")[0]
    )
    assert viz.OUTCOME_COLORS[outcome] in text
    ranges = figs["ranges"]
    assert (
        ranges["layout"]["xaxis"]["visible"] is False
        and ranges["layout"]["yaxis"]["visible"] is False
    )
    assert any("Nothing to draw" in a["text"] for a in ranges["layout"]["annotations"])
    assert not any(t.get("showlegend", True) and t["x"] for t in ranges["data"])  # nothing drawn
    ranks = figs["ranks"]
    assert ranks["layout"]["title"]["text"].startswith("Per-rank memory (1 rank)<br>")
    gpu = plan.deployment.gpu_gib
    peak = plan.budgets[0].peak_memory_bytes / GIB
    assert _subtitle(ranks) == (
        f"no KV pool: weights, workspace, activations and non-torch memory "
        f"take {peak:,.1f} GiB of the GPU's {gpu:,.1f} GiB"
    )  # one value
    line = ranks["layout"]["shapes"][0]
    assert line["y0"] == line["y1"] == gpu
    top = sum(t["y"][0] for t in ranks["data"])
    assert (
        top > gpu and ranks["layout"]["yaxis"]["range"][1] >= top
    )  # the bar, whole, over the line


@pytest.mark.parametrize("manager", ["auto", "v2"])
def test_the_per_rank_subtitle_gives_what_the_bars_draw(manager):
    """Each rank's own KV memory in the subtitle is its bars' pool + share lost to the MIN (+ a
    hybrid's slots): under V1 not the memory free at construction, which is more."""
    from kvlab.core.memory import GIB
    from kvlab.notebook.viz.ranks import BUDGET_PARTS

    plan, _, figs = _panel_plan(manager=manager)
    bars = {key: t["y"] for (key, _, _), t in zip(BUDGET_PARTS, figs["ranks"]["data"])}
    own = [sum(v) for v in zip(bars["KV pool"], bars["lost to MIN"], bars["state slots"])]
    subtitle = _subtitle(figs["ranks"])
    assert f"{min(own):,.1f}-{max(own):,.1f} GiB before the MIN" in subtitle
    assert f"every rank's pool is {plan.blocks:,} blocks" in subtitle
    if plan.manager == "v1":  # what V1 has free at construction is not what it builds
        assert f"{max(plan.quotas) / GIB:,.1f}" not in subtitle and "own KV pool" in subtitle


def test_one_rank_with_a_pool_gives_one_value():
    plan, _, figs = _panel_plan(model="llama-3.1-8b", weights_gib=0.0, ranks=1)
    subtitle = _subtitle(figs["ranks"])
    assert plan.blocks and subtitle.startswith(
        f"one rank, no MIN all-reduce: its KV pool is {plan.blocks:,} blocks"
    )


def test_the_plan_text_wraps_between_words():
    """JupyterLab's pre breaks anywhere ("268.0 Gi|B"): the plan's pre wraps between words."""
    import re

    _, (_, text), _ = _panel_plan()
    style = re.search(r'<pre style="([^"]*)">', text).group(1)
    assert "word-break:normal" in style and "overflow-wrap:anywhere" in style


def test_every_control_label_is_whole():
    """A description is cut with an ellipsis past its box: each fits, at about 7.2 px a
    character (the browser measured "max_batch_size (sequences)", 26 characters, at 187 px)."""
    from kvlab.notebook.widgets import plan_panel

    panel = plan_panel()
    for name, control in panel.controls.items():
        room = int(control.style.description_width.removesuffix("px"))
        assert len(control.description) * 7.2 <= room, name
        assert int(control.layout.width.removesuffix("px")) > room + 150, name  # and a slider


def _text_span(a, top):
    """An annotation's text, in px along the narrowest plot the panel draws (estimated)."""
    from kvlab.notebook.viz.plan import CHAR_PX, PLOT_PX

    x = a["x"] / top * PLOT_PX + a.get("ax", 0) if a["xref"] == "x" else a["x"] * PLOT_PX
    width = CHAR_PX * len(a["text"])
    return {
        "left": (x, x + width),
        "right": (x - width, x),
        "center": (x - width / 2, x + width / 2),
    }[a["xanchor"]]


@pytest.mark.parametrize(
    "changes",
    [
        dict(
            model="qwen3.5-27b",
            weights_gib=0.0,
            workspace_gib=0.0,
            max_batch_size=2048,
            gpu="h100-80gb",
        ),
        {},
    ],
)
def test_the_context_figures_notes_stay_inside_the_plot(changes):
    """§2's last step: the narrow bands sit at the axis' left end, so their names go right of
    them, not over the policy labels and off the figure; at #21470's they stay left."""
    plan, _, figs = _panel_plan(**changes)
    top = plan.deployment.configured_max_seq_len
    notes = [a for a in figs["ranges"]["layout"]["annotations"] if a["xref"] in ("x", "paper")]
    assert len(notes) >= 2
    for a in notes:
        low, high = _text_span(a, top)
        assert 0 <= low and high <= 450, a["text"]
    if changes:
        assert {a["xanchor"] for a in notes} == {"left"}


@pytest.mark.parametrize(
    "changes",
    [
        dict(
            model="qwen3.5-27b",
            weights_gib=0.0,
            workspace_gib=0.0,
            max_batch_size=2048,
            gpu="h100-80gb",
        ),
        dict(model="nemotron-nano-9b-v2", weights_gib=0.0),
        {},
    ],
)
def test_the_per_rank_legend_sits_under_the_rank_labels(changes):
    """A legend entry too long for two columns puts the legend in one: the figure's foot grows
    by its rows, under the rotated rank labels, instead of the legend rising over them."""
    from kvlab.notebook.viz.plan import LEGEND_ROW_PX, LEGEND_TEXT_PX, TICKS_PX

    _, _, figs = _panel_plan(**changes)
    layout = figs["ranks"]["layout"]
    names = [t["name"] for t in figs["ranks"]["data"] if t["showlegend"]]
    one_column = any("too thin to see" in n for n in names)
    assert one_column == bool(changes)
    rows = len(names) if one_column else -(-len(names) // 2)
    legend = layout["legend"]
    assert (legend["yref"], legend["yanchor"], legend["y"]) == ("container", "bottom", 0)
    assert legend["entrywidth"] == (2 if one_column else 1) * LEGEND_TEXT_PX
    assert layout["margin"]["b"] >= TICKS_PX[True] + LEGEND_ROW_PX * rows


def test_section_3_says_max_seq_len_is_lowered_to_the_models_own(nb06):
    """§3's table shows mistral-7b-v0.1 finishing 32,768 tokens, not clamped, at a max_seq_len of
    131,072: the prose says why, with the plan's numbers, and the table gives the max_seq_len."""
    from kvlab.analysis.deployment import Deployment, plan_deployment
    from kvlab.analysis.gpus import GPUS
    from kvlab.analysis.models import load_model

    nb, _ = nb06
    params = {}
    exec(next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", [])), {}, params)
    mistral = plan_deployment(
        Deployment(
            model=load_model("mistral-7b-v0.1"),
            gpu_gib=GPUS[params["gpu"]].gib,
            tp_size=params["tp_size"],
            max_seq_len=params["max_seq_len"],
            max_batch_size=params["max_batch_size"],
            chunked_prefill=params["chunked_prefill"],
            manager=params["manager"],
        )
    )
    lowered = mistral.deployment.configured_max_seq_len
    assert lowered < params["max_seq_len"] and mistral.longest() == lowered and not mistral.clamped
    prose = " ".join(next(c.source for c in nb.cells if c.source.startswith("## 3.")).split())
    assert "lowered" in prose and f"mistral-7b-v0.1 plans for its own {lowered:,}" in prose
    assert f"{params['max_seq_len']:,}" in prose
    table = next(
        o["data"]["text/html"]
        for c in nb.cells
        if "preset_row" in c.source
        for o in c.get("outputs", [])
        if "text/html" in o.get("data", {})
    )
    assert ">max_<wbr>seq_<wbr>len<" in table  # a header may wrap at its underscores


# --- §7, your traffic: the notebook's table is kvlab replay's -------------------------------------


class _TableCells(HTMLParser):
    """A pandas Styler's table as rows of cell texts (its th and td, tags dropped)."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("th", "td"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _count(text: str):
    return None if text == "" else int(text.replace(",", ""))


def test_section_7_shows_what_kvlab_replay_prints(nb06, capsys):
    """§7's table (finished, rejected, unfinished, crashed, waits p50/p99 per run) is the JSON of
    the command the notebook prints for the same deployment, trace and --limit."""
    from kvlab.cli import main
    from kvlab.core.paths import REPOSITORY

    nb, _ = nb06
    cell = next(c for c in nb.cells if c.cell_type == "code" and "replay_trace(" in c.source)
    html = next(
        o["data"]["text/html"]
        for o in cell.get("outputs", [])
        if "text/html" in o.get("data", {}) and "<table" in o["data"]["text/html"]
    )
    parser = _TableCells()
    parser.feed(html)
    header = next(r for r in parser.rows if "finished" in r)
    body = [r for r in parser.rows if len(r) == len(header) and r[0] not in ("", "run")]
    shown = {r[0]: dict(zip(header[1:], r[1:])) for r in body}
    command = next(
        line
        for c in nb.cells
        if c.cell_type == "code" and "shlex.quote" in c.source
        for o in c.get("outputs", [])
        for line in o.get("text", "").splitlines()
        if line.startswith("kvlab replay ")
    )
    argv = shlex.split(command)[1:]
    trace = argv.index("--trace") + 1
    argv[trace] = str(REPOSITORY / argv[trace])
    assert "--limit" in argv and argv[argv.index("--limit") + 1] == "300"  # SMOKE's rows
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert len(runs) == len(shown) == 5
    for run in runs:
        row = shown[f"{run['engine']} {run['policy']}"]
        for key in ("finished", "rejected", "unfinished", "crashed"):
            assert _count(row[key]) == run[key], (run["engine"], run["policy"], key)
        assert _count(row["wait p50 (it)"]) == run["wait_p50"]
        assert _count(row["wait p99 (it)"]) == run["wait_p99"]
        assert row["outcome"] == run["outcome"]
    assert sum(run["finished"] for run in runs) == 5 * 300  # the defaults serve every request


@pytest.mark.parametrize(
    "parameters, named",
    [
        (dict(traffic="azure-chat"), r"traffic must be one of \['azure-code', 'azure-conv'"),
        (dict(traffic="no/such/file.csv"), "traffic must be one of"),
        (dict(traffic_requests=0), "traffic_requests must be in"),
    ],
)
def test_notebook_06_refuses_a_bad_traffic_by_name(tmp_path, parameters, named):
    with pytest.raises(papermill.PapermillExecutionError, match=named):
        execute(NB06, tmp_path, fail_on_error=False, **parameters)
