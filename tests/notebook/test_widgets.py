"""kvlab.notebook.widgets, headless: set a control's value, read the figures and the verdict; every
panel (repro, admission, mamba, ranks) and the Panel pattern under them."""

from __future__ import annotations

import asyncio
import re
from html import escape as html_escape

import ipywidgets as W
import plotly.graph_objects as go
import pytest

from kvlab.analysis.sentences import sentence
from kvlab.notebook import viz
from kvlab.notebook.panel import Debouncer, Panel, verdict_html
from kvlab.notebook.plot_view import PlotView
from kvlab.notebook.widgets import (
    ADMISSION_PANEL_POLICIES,
    admission_model,
    admission_panel,
    admission_verdict,
    context_choices,
    mamba_panel,
    ranks_panel,
    repro_panel,
)

HELD = 1


@pytest.fixture
def panel():
    return repro_panel()  # the seed: 4 MiB, 8192 tokens, 32 tokens per block, clamped


def row(panel):
    return list(panel.figures["row"].data[0].x)


def test_the_seed_crashes_with_the_native_message(panel):
    assert panel.outcome == "crash"
    assert "ValueError: User-provided base page indices is too short" in panel.verdict_text
    assert "256 page-index entries, the row has 68" in panel.verdict_text
    assert row(panel) == [256, 64, 68]
    assert viz.OUTCOME_COLORS["crash"] in panel.verdict.value


def test_controls_drive_figures_and_verdict_as_the_model_says(panel):
    views = dict(panel.views)
    traces = [len(f.data) for f in panel.figures.values()]

    panel.controls["policy"].value = "configured"  # the one-line fix
    assert panel.outcome == "refused"
    assert "resize returned False" in panel.verdict_text
    assert row(panel) == [256, 64, 260]

    panel.controls["pool_mib"].value = 32.0  # 512 pages: the request fits
    assert panel.outcome == "ok" and panel.verdict_text.startswith("allocated")
    assert row(panel) == [256, 512, 260]
    z = [v for r in panel.figures["pool"].data[0].z for v in r if v is not None]
    assert z.count(HELD) == 256 and len(z) == 512

    panel.controls["context"].value = 131072  # 4096 pages: the row holds them, the pool does not
    assert panel.outcome == "refused"
    assert row(panel) == [4096, 512, 4100]
    # redrawn in place: the same views, the same traces
    assert all(panel.views[name] is view for name, view in views.items())
    assert [len(f.data) for f in panel.figures.values()] == traces


def test_tokens_per_block_changes_the_page_arithmetic(panel):
    panel.controls["tokens_per_block"].value = 64
    assert row(panel) == [
        128,
        32,
        36,
    ]  # 8192/64 needed; 4 MiB / (2048 B x 64) pages; ceil(2049/64)=33 -> 36
    assert panel.outcome == "crash"


def test_a_pool_below_one_page_gets_a_verdict_not_a_traceback(panel):
    panel.controls["pool_mib"].value = 2.0**-6  # 16 KiB < one 64 KiB page
    assert panel.error is None and panel.outcome is None
    assert panel.verdict_text.startswith("no pool: 16,384 B")
    assert row(panel) == [256, 0, 0]
    assert panel.figures["pool"].layout.title.text.startswith("No pool")
    panel.controls["tokens_per_block"].value = 8  # 16 KiB now holds one page of 8 tokens
    assert panel.model.result.total_blocks == 1
    assert panel.outcome == "crash" and row(panel) == [1024, 1, 4]  # row: ceil((8 + 1) / 8) -> 4


def test_set_changes_several_controls_and_recomputes_once(panel):
    before = panel.updates
    panel.set(pool_mib=64.0, policy="configured", context=4096)
    assert panel.updates == before + 1
    assert panel.values == {
        "pool_mib": 64.0,
        "context": 4096,
        "tokens_per_block": 32,
        "policy": "configured",
    }
    assert panel.outcome == "ok"
    with pytest.raises(ValueError, match="unknown control"):
        panel.set(pool=1)


def test_a_compute_error_is_shown_and_the_figures_stay():
    slider = W.IntSlider(value=1, min=0, max=10)

    def compute(values):
        if values["x"] == 0:
            raise ZeroDivisionError("x must not be 0")
        return values["x"]

    p = Panel(
        {"x": slider},
        compute,
        lambda x: {"f": {"data": [{"type": "bar", "x": [x], "y": [1]}], "layout": {}}},
        lambda x: ("ok", verdict_html("ok", f"x = {x}")),
        title="t",
    )
    slider.value = 3
    assert list(p.figures["f"].data[0].x) == [3] and p.verdict_text == "x = 3"
    slider.value = 0
    assert isinstance(p.error, ZeroDivisionError) and p.outcome is None
    assert "cannot compute: ZeroDivisionError: x must not be 0" in p.verdict_text
    assert list(p.figures["f"].data[0].x) == [3]
    slider.value = 5
    assert p.error is None and list(p.figures["f"].data[0].x) == [5]


def test_debouncer_runs_synchronously_without_an_event_loop():
    seen = []
    d = Debouncer(lambda: seen.append(1), wait_s=0.05)
    for _ in range(3):
        d()
    assert (d.calls, d.runs, len(seen)) == (3, 3, 3) and not d.pending


def test_debouncer_coalesces_a_burst_inside_an_event_loop():
    state = {"value": 0}
    seen = []
    d = Debouncer(lambda: seen.append(state["value"]), wait_s=0.05)

    async def burst():
        for value in range(1, 11):
            state["value"] = value
            d()
        assert seen == [1]  # the leading edge ran at once ...
        assert d.pending  # ... the other nine are folded into one trailing run
        await asyncio.sleep(0.15)
        assert seen == [1, 10]  # which saw the final value
        assert not d.pending
        state["value"] = 11
        d()  # a quiet period has passed: runs at once again
        assert seen == [1, 10, 11]
        state["value"] = 12
        d()
        assert d.flush() and seen == [1, 10, 11, 12]  # flush applies a pending run now
        assert not d.flush()

    asyncio.run(burst())
    assert d.calls == 12 and d.runs == 4


def test_debouncer_with_zero_wait_runs_every_call_even_in_a_loop():
    seen = []
    d = Debouncer(lambda: seen.append(1), wait_s=0)

    async def burst():
        for _ in range(5):
            d()

    asyncio.run(burst())
    assert len(seen) == 5


def test_a_panel_refuses_a_bad_wait():
    with pytest.raises(ValueError, match=r"wait_s must be in \[0.0, 10.0\]"):
        repro_panel(wait_s=-1)


def test_panel_coalesces_slider_drags_inside_an_event_loop():
    async def drag():
        p = repro_panel(wait_s=0.05)
        start = p.updates
        for value in (8.0, 16.0, 32.0, 64.0, 2.0, 4.0, 32.0):
            p.controls["pool_mib"].value = value
        assert p.updates == start + 1  # the first change ran; the rest wait for the window
        await asyncio.sleep(0.15)
        assert p.updates == start + 2
        assert p.values["pool_mib"] == 32.0 and p.outcome == "ok"
        assert list(p.figures["row"].data[0].x) == [256, 512, 260]  # 32 MiB: not clamped

    asyncio.run(drag())


def _sent_states(monkeypatch, widgets):
    """The comm messages' states the widgets send while a test runs, in order, as (widget, state)."""
    sent = []
    for widget in widgets:
        monkeypatch.setattr(
            widget,
            "_send",
            lambda msg, buffers=None, w=widget: sent.append((w, dict(msg.get("state", {})))),
        )
    return sent


def test_a_move_sends_the_verdict_before_any_figure(panel, monkeypatch):
    """The browser shows the verdict at once; each figure costs it a plotly redraw."""
    sent = _sent_states(monkeypatch, [panel.verdict, *panel.views.values()])
    panel.controls["pool_mib"].value = 32.0
    assert sent[0][0] is panel.verdict and "allocated" in sent[0][1]["value"]
    assert [w for w, _ in sent[1:]] == list(panel.views.values())  # each figure once
    assert all(set(state) == {"figure_json"} for _, state in sent[1:])


def test_a_view_sends_a_figure_only_when_it_changed(panel, monkeypatch):
    sent = _sent_states(monkeypatch, list(panel.views.values()))
    panel.controls["context"].value = 8192  # the value it has: no message at all
    panel.refresh()  # same values again: nothing changed, nothing sent
    assert sent == []
    panel.controls["pool_mib"].value = 32.0
    assert len(sent) == 2


def test_panel_displays_the_widget_with_a_static_fallback(panel):
    bundle = panel._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == panel.widget.model_id
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["type"] == "heatmap"
    assert (
        "kvlab-verdict" in bundle["text/html"] and bundle["text/html"].count("Plotly.newPlot") == 2
    )
    assert "ValueError" in bundle["text/plain"]
    assert isinstance(panel.widget, W.VBox)
    assert all(isinstance(v, PlotView) for v in panel.views.values())
    assert all(isinstance(f, go.Figure) for f in panel.figures.values())


def test_repro_panel_checks_its_arguments_and_widens_the_pool_slider():
    with pytest.raises(ValueError, match="policy"):
        repro_panel(policy="wide")
    with pytest.raises(ValueError, match="pool_mib"):
        repro_panel(pool_mib=0)
    big = repro_panel(pool_mib=4096.0, context=5000)
    assert big.values["pool_mib"] == 4096.0 and big.values["context"] == 5000
    assert big.model.result.pool_bytes == 4096 * 2**20


def test_context_choices_are_log_spaced_and_include_extras():
    choices = context_choices([5000])
    assert choices[0] == 32 and choices[-1] == 131072 and 5000 in choices and 8192 in choices
    assert choices == sorted(set(choices))


# --- notebook 04: the admission panel ---------------------------------------------------------------


@pytest.fixture
def adm():
    return admission_panel(
        num_small=3, stall_limit=50
    )  # the seed: 4 MiB, 8192 tokens, none/clamped


def stalled(panel):
    return list(panel.figures["timeline"].data[5].y)


def test_admission_panel_names_each_outcome_with_the_numbers(adm):
    views = dict(adm.views)

    def demand():
        return adm.figures["demand"]

    assert adm.outcome == "crash"
    assert "PageIndexTooShort" in adm.verdict_text
    assert (
        "context of 8,192 tokens needs 256 pages, 257 with its 16 output tokens; the pool has 64"
        in adm.verdict_text
    )
    # the crash is the context's 256 entries against the row of 68, as notebook 02's figure says
    assert list(demand().data[0].x) == [256, 64, 68]
    assert list(demand().data[0].y)[0] == "request: 256 entries (257 with its output)"
    assert "context 256 pages, 257 to complete" in demand().layout.title.text

    adm.set(policy="none/configured")  # the one-line fix: starve, then deadlock
    assert adm.outcome == "stall"
    assert "3 of 3 small requests finished" in adm.verdict_text
    assert "SchedulerDeadlock after 50 passes" in adm.verdict_text
    assert stalled(adm)[-1] == 50 and list(demand().data[0].x) == [256, 64, 260]

    adm.set(policy="capacity")  # PR #21720
    assert adm.outcome == "reject"
    assert adm.verdict_text.startswith(
        "Rejected: Request requires 257 KV cache blocks to complete, "
        "which exceeds the total capacity of 64 blocks"
    )
    assert max(stalled(adm)) == 0

    adm.set(pool_mib=32.0)  # 512 pages: everything fits
    assert adm.outcome == "ok" and adm.verdict_text.startswith("OK: 4 requests, all finished in ")
    assert list(demand().data[0].x)[:2] == [256, 512]
    # redrawn in place: the same views, the same traces
    assert adm.views == views
    assert len(adm.figures["timeline"].data) == 7 and len(demand().data) == 1


def test_the_panels_verdicts_count_one_thing_in_the_singular():
    """ "1 request", "1 page", "1 sequence": never "1 requests" or "1 pages"."""
    from kvlab.notebook.widgets import mamba_panel

    alone = admission_panel(context=32, policy="capacity", num_small=0).verdict_text
    assert (
        alone.startswith("OK: 1 request, all finished in 16 steps.")
        and "needs 1 page, 2 with" in alone
    )
    one_left = mamba_panel(max_batch_size=340).verdict_text  # the clamp keeps 339 resident
    assert "339 resident" in one_left and "the queue holds 1 sequence." in one_left
    assert not re.search(r"\b1 (requests|pages|sequences|steps)\b", alone + one_left)


def test_admission_panel_controls_drive_the_model(adm):
    adm.controls["context"].value = 1024  # fits 64 pages: ok under every policy
    assert adm.outcome == "ok"
    for policy in ADMISSION_PANEL_POLICIES:
        adm.controls["policy"].value = policy
        assert adm.outcome == "ok", policy
    adm.controls["context"].value = 4096
    adm.controls["policy"].value = "sglang"
    assert adm.outcome == "reject" and "Input length (4096 tokens)" in adm.verdict_text
    assert adm.model.phase_verdict is None  # no closed form for the peers
    adm.controls["policy"].value = "none/configured"
    assert adm.model.phase_verdict == "stall" and adm.outcome == "stall"


def test_admission_panel_without_a_pool_says_so():
    adm = admission_panel(pool_mib=2.0**-5, num_small=1)  # 32 KiB < one 64 KiB page
    assert adm.error is None and adm.outcome is None
    assert adm.verdict_text.startswith("no pool")
    assert len(adm.figures["timeline"].data[0].x) == 0
    adm.set(pool_mib=1.0)  # 16 pages: a pool again, the figures fill in place
    assert adm.outcome == "crash" and len(adm.figures["timeline"].data[0].x) == 1


def test_admission_panel_checks_its_arguments():
    with pytest.raises(ValueError, match="policy"):
        admission_panel(policy="fifo")
    with pytest.raises(ValueError, match="pool_mib"):
        admission_panel(pool_mib=-1)


# --- notebook 05's panel: mamba_panel ----------------------------------------------------------


@pytest.fixture()
def mamba():
    return mamba_panel()  # the PR's: 24.86 GiB, 512 sequences, bf16 SSM state


def mamba_bars(mamba):
    """GiB per part and bar; a part of zero bytes is not drawn (None), read as 0 here."""
    return {t.name: tuple(v or 0 for v in t.y) for t in mamba.figures["stack"].data}


def bar_names(fig) -> list:
    """Each bar's name: the first line of its category label (its parts follow, one a line)."""
    return [x.split("<br>")[0].replace("<b>", "").replace("</b>", "") for x in fig.data[0].x]


def test_the_pr_merged_raises_and_the_proposals_keep_339(mamba):
    assert mamba.outcome == "crash"
    text = mamba.verdict_text
    assert "Merged raises: 513 slots x 74.8 MiB + one page = 37.48 GiB > quota 24.86 GiB" in text
    assert "ValueError at construction" in text
    assert "Proposal PR #17261 (closed without merging), the clamp: 339 resident (+1 dummy)" in text
    assert "the queue holds 173 sequences" in text
    assert "Proposal PR #18985 (open): a max_batch_size default of at most 339 fits" in text
    assert "an explicit 512 still raises" in text
    assert mamba.model.feasible_max_batch_size == 339
    fig = mamba.figures["stack"]
    # a legend entry names one part, and says so when the part is too thin to see on a 37 GiB
    # axis; its sizes are under each bar, one part a line, with units
    assert [t.name.split(":")[0] for t in fig.data] == [lab for _, lab, _ in viz.RESIDENCY_PARTS]
    assert [t.name.endswith("too thin to see") for t in fig.data] == [False, True, True, True]
    # merged raises at construction: its bar is what it would need, not slots it holds
    assert bar_names(fig) == [
        "merged: needs 37.5 GiB, does not build",
        "PR #17261 clamp (proposal)",
    ]
    merged, clamp = (x.split("<br>")[1:] for x in fig.data[0].x)
    assert "it would need:" in merged[0]
    assert any("resident state slots 37.4 GiB" in line for line in merged)
    assert any("dummy slots (CUDA-graph padding) 74.8 MiB" in line for line in clamp)
    # merged leaves nothing unused: not drawn there, not listed under it; the clamp leaves 399 KiB
    assert fig.data[3].y[0] is None and not any("unused" in line for line in merged)
    assert any("unused 399.4 KiB" in line for line in clamp) and fig.data[3].showlegend
    raw, clamped = zip(*mamba_bars(mamba).values())
    assert sum(raw) > 24.86 > sum(clamped[:3])
    quota_line = mamba.figures["stack"].layout.shapes[0]
    assert abs(quota_line.y0 - 24.86) < 0.01


def test_a_big_quota_lets_merged_code_build_and_the_figure_updates_in_place(mamba):
    view = mamba.views["stack"]
    before = mamba_bars(mamba)
    mamba.set(quota_gib=40.0)
    assert mamba.views["stack"] is view  # redrawn, not rebuilt
    assert mamba.outcome == "ok" and "Merged builds" in mamba.verdict_text
    fig = mamba.figures["stack"]
    assert bar_names(fig) == ["merged", "PR #17261 clamp (proposal)"]
    assert "512 sequences, all resident" in mamba.verdict_text
    mamba.set(max_batch_size=1)
    assert "1 sequence, resident (merged" in mamba.verdict_text
    assert mamba_bars(mamba) != before
    assert abs(fig.layout.shapes[0].y0 - 40.0) < 0.01


def test_float32_halves_the_residency(mamba):
    mamba.set(ssm_dtype="float32")
    assert "73.55 GiB" in mamba.verdict_text and "the clamp: 172 resident" in mamba.verdict_text
    assert "at most 172 fits" in mamba.verdict_text


def test_a_smaller_batch_fits(mamba):
    mamba.set(max_batch_size=300)
    assert mamba.outcome == "ok" and "300 sequences, all resident" in mamba.verdict_text
    mamba.controls["max_batch_size"].value = 400  # a single control change refreshes too
    assert mamba.outcome == "crash" and "the clamp: 339 resident" in mamba.verdict_text


def test_a_quota_below_one_slot_clamps_to_zero(mamba):
    mamba.set(quota_gib=0.1, ssm_dtype="float32")  # 102 MiB: less than a dummy and a 147 MiB slot
    # what does not fit is one slot with the dummy and a page: 2 x 146.8 MiB + 2 MiB
    assert (
        "keeps 0: one sequence's slot with 1 dummy slot and one page needs 295.6 MiB"
        in mamba.verdict_text
    )
    assert "no max_batch_size default fits" in mamba.verdict_text
    assert mamba_bars(mamba)["resident state slots"][1] == 0
    resident = mamba.figures["stack"].data[0]
    assert (
        resident.y[1] is None and "resident" not in resident.x[1]
    )  # zero bytes: not drawn, not listed
    # learner pass C: the clamp's bar says it raises too, not "unused 102.4 MiB" as if it built
    assert "no sequence fits: it raises too" in resident.x[1] and "unused" not in resident.x[1]


def test_a_part_no_bar_has_is_not_in_the_legend():
    fit = {"resident": 30 * 2**30, "dummies": 2**26, "pages": 2**30, "unused": 0}
    spec = viz.residency_stack_spec({"raw": fit, "clamped": fit, "raw_fits": True}, 32 * 2**30)
    shown = [t["name"] for t in spec["data"] if t["showlegend"]]
    # a part under 1 % of the tallest bar says so, with its size: the bar alone does not show it
    assert shown == [
        "resident state slots",
        "dummy slots (CUDA-graph padding): 64.0 MiB, too thin to see",
        "attention pages",
    ]
    assert bar_names(go.Figure(spec))[0] == "merged"  # it builds: no "would need"
    assert "would need" not in spec["data"][0]["x"][0]
    assert len(spec["data"]) == 4 and spec["data"][3]["y"] == [None, None]  # 4 traces, always
    assert not any("|" in t["name"] for t in spec["data"])


def test_the_quota_slider_steps_in_half_gib_and_offers_the_key_quotas():
    """A slider a keyboard can use (0.5 GiB a press, not 0.01 over 80 GiB), on which the PR's
    quota, the default, the quotas the notebook asks for and a panel's own quota all lie."""
    from kvlab.analysis.mamba_residency import PR_QUOTA_BYTES
    from kvlab.core.memory import GIB
    from kvlab.notebook.widgets import MAMBA_QUOTA_STEP_GIB

    panel = mamba_panel()
    slider = panel.controls["quota_gib"]
    offered = [v for _, v in slider.options]
    assert MAMBA_QUOTA_STEP_GIB == 0.5 and len(offered) <= 200
    assert (
        slider.value == 24.86 and int(slider.value * GIB) == PR_QUOTA_BYTES
    )  # the default, the PR's
    steps = {round(b - a, 2) for a, b in zip(offered, offered[1:])}
    assert max(steps) == 0.5
    # less than one slot, where merged builds (37.48 GiB needed, bf16; 73.55 float32), an H100
    assert {0.1, 37.5, 74.0, 80.0} <= set(offered) and dict(slider.options)["24.86"] == 24.86
    for quota in (0.1, 24.86, 37.5, 74.0):
        panel.set(quota_gib=quota)
        assert panel.model.quota_gib == quota
    assert (
        panel.set(quota_gib=37.5).outcome == "ok" and panel.set(quota_gib=37.0).outcome == "crash"
    )
    own = mamba_panel(quota_gib=33.3)  # a notebook parameter off the grid is offered too
    assert own.controls["quota_gib"].value == 33.3 and own.model.quota_gib == 33.3
    with pytest.raises(ValueError, match="quota_gib"):
        panel.set(quota_gib=24.87)  # not a position of the slider: said, not clamped


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="ssm_dtype"):
        mamba_panel(ssm_dtype="fp8")
    with pytest.raises(ValueError, match="quota_gib"):
        mamba_panel(quota_gib=0.0)


# --- notebook 01's panel: ranks_panel ----------------------------------------------------------


NATIVE = "User-provided base page indices is too short"


@pytest.fixture(scope="module")
def ranks():
    return ranks_panel()  # the scenario's assumptions: 28 GiB on rank 0, a 1,000,000-token context


def ranks_fit(ranks):
    bar = ranks.figures["requests"].data[0]
    return dict(zip(bar.x, bar.y)), dict(zip(bar.x, bar.marker.color))


def test_the_report_clamps_and_the_long_context_crashes(ranks):
    ranks.set(workspace_gib=28.0, context=1_000_000)
    assert ranks.outcome == "crash"
    text = ranks.verdict_text
    assert (
        "max_seq_len 1,048,576 is clamped to 958,784" in text
        and "long-ctx (rank 0) would raise" in text
    )
    assert f"Predicted: shut down - rank 0 raises ValueError: {NATIVE} on long-ctx" in text
    tokens, colors = ranks_fit(ranks)
    assert tokens["long-ctx"] == 1_000_064 and colors["long-ctx"] == viz.OUTCOME_COLORS["crash"]
    assert colors["bg-000"] == colors["bg-047"] == viz.OUTCOME_COLORS["ok"]
    budget = ranks.figures["budget"]
    assert [t.name for t in budget.data] == [label for _, label, _ in viz.BUDGET_PARTS]
    assert budget.data[4].name == "KV pool (after the MIN)"  # 16 ranks: there is a MIN
    pool = budget.data[4].y
    assert len(pool) == 16 and len({round(v, 6) for v in pool}) == 1  # one pool after the MIN
    lost = budget.data[6].y
    assert lost[0] > lost[-1] == 0  # rank 0 lost the most to the MIN; the last rank set it


def test_the_ranks_run_html_names_a_model_that_is_not_the_panels():
    from kvlab.notebook.widgets.ranks import ranks_run_html

    for bad in (None, "x", 0):
        with pytest.raises(TypeError, match="^model must be a RanksModel"):
            ranks_run_html(bad, None)


def test_less_workspace_lifts_the_clamp_and_every_rank_finishes(ranks):
    ranks.set(workspace_gib=0.0)
    assert ranks.outcome == "ok"
    assert "no clamp" in ranks.verdict_text and "Predicted: completed" in ranks.verdict_text
    _, colors = ranks_fit(ranks)
    assert colors["long-ctx"] == viz.OUTCOME_COLORS["ok"]


def test_a_shorter_context_fits_the_clamped_row(ranks):
    ranks.set(workspace_gib=28.0, context=524_288)
    assert ranks.outcome == "ok" and "is clamped to 958,784" in ranks.verdict_text
    assert "no request exceeds the row" in ranks.verdict_text


def test_more_workspace_shrinks_every_pool(ranks):
    ranks.set(workspace_gib=28.0, context=1_000_000)
    before = ranks.model.plan.ranks[0].blocks
    ranks.controls["workspace_gib"].value = 48.0
    after = ranks.model.plan.ranks
    assert {r.blocks for r in after} == {after[-1].local_blocks} and after[0].blocks < before
    assert ranks.outcome == "crash"


def test_figures_are_updated_in_place(ranks):
    views = dict(ranks.views)
    traces = [len(f.data) for f in ranks.figures.values()]
    ranks.set(workspace_gib=10.0, context=131_072)
    assert ranks.views == views
    assert [len(f.data) for f in ranks.figures.values()] == traces


def test_ranks_panel_checks_its_arguments():
    with pytest.raises(ValueError, match="workspace_gib"):
        ranks_panel(workspace_gib=-1.0)
    with pytest.raises(ValueError, match="ranks"):
        ranks_panel(ranks=0)
    small = ranks_panel(ranks=2, context=960_000)
    assert len(small.model.plan.ranks) == 2 and small.values["context"] == 960_000


@pytest.mark.parametrize(
    "workspace, context, outcome, ended",
    [
        (28.0, 1_000_000, "crash", f"shut down - rank 0 raised ValueError: {NATIVE}"),
        (0.0, 1_000_000, "ok", "completed - every rank finished its work"),
    ],
)
def test_the_button_runs_the_ranks_and_agrees_with_the_plan(
    ranks, workspace, context, outcome, ended
):
    ranks.set(workspace_gib=workspace, context=context)
    assert ranks.action_result is None and ranks.action_output.value == ""
    ranks.action_button.click()  # what the reader's click does
    result = ranks.action_result
    assert result.world_size == 16 and result.mode == "in-process"
    assert ranks.outcome == outcome and f"{result.ended} - {result.reason}".startswith(ended)
    assert (
        "As predicted." in ranks.action_output.value
        and "NOT as predicted" not in ranks.action_output.value
    )
    assert "pool after MIN" in ranks.action_output.value  # said once, above the per-rank table
    ranks.set(context=524_288)  # the run described other values: it is cleared
    assert ranks.action_result is None and ranks.action_output.value == ""


def test_the_buttons_table_fits_under_the_panel(ranks):
    """What every rank shares (the pool after the MIN, the row) is said once; the table says how
    the ranks ended, ranks that ended alike in one row, at most RANKS_RUN_TABLE_WIDTH px wide
    (the panel is ~1,000 px)."""
    import re

    from kvlab.notebook.widgets import RANKS_RUN_TABLE_WIDTH

    ranks.set(workspace_gib=28.0, context=1_000_000)  # the report's (the fixture is shared)
    ranks.act()
    shown = ranks.action_output.value
    assert (
        "Every rank: pool after MIN (pages) 29,962; pool after MIN (tokens) 958,784; row (entries) 29,964"
        in shown
    )
    table_html = shown[shown.index("<table") :]
    headers = re.findall(r'<th[^>]*class="col_heading[^"]*"[^>]*>(.*?)</th>', table_html)
    assert headers == ["requests", "outcome"]
    assert (
        f'style="max-width:{RANKS_RUN_TABLE_WIDTH}px"' in table_html
        and RANKS_RUN_TABLE_WIDTH <= 1000
    )
    # issue 45: notebook 01 showed section 5's 16-row table again here; the ranks that ended
    # alike are one row now
    ranks_shown = re.findall(r'<th[^>]*class="row_heading[^"]*"[^>]*>(.*?)</th>', table_html)
    assert [re.sub("<[^>]+>", "", r) for r in ranks_shown] == ["0", "1-15"]
    assert table_html.count("shut down: rank 0 raised ValueError") == 1


def test_a_panel_without_an_action_says_so(ranks):
    from kvlab.notebook.widgets import repro_panel

    with pytest.raises(ValueError, match="no action"):
        repro_panel().act()


# --- notebook 03: one scheduling pass at a time -------------------------------------------------


def test_the_step_panel_shows_each_pass_as_the_scheduler_decided_it():
    from kvlab.notebook.widgets import STEP_ENGINE, step_model, step_panel

    first = step_model({"policy": "none/configured", "pass": 1})
    assert first.passes == 1
    assert [(r["request"], r["asked"], r["result"]) for r in first.rows] == [
        ("long", 8192, "refused"),
        ("s0", 256, "scheduled"),
    ]
    assert first.rows[1]["got"] == 256 and first.rows[0]["got"] == 0
    crash = step_model({"policy": "none/clamped", "pass": 10})
    assert crash.passes == 1 and crash.rows[0]["result"] == "crash"  # the engine stopped in pass 1
    assert crash.rows[1]["result"] == "waiting"  # s0 was never reached
    rejected = step_model({"policy": "capacity", "pass": 1})
    assert rejected.rows[0]["result"] == "rejected" and "exceeds" in rejected.rows[0]["why"]
    end = step_model({"policy": "none/configured", "pass": 54})  # past the small requests' end
    assert (
        end.stalled == STEP_ENGINE.stall_limit
        and type(end.result.error).__name__ == "SchedulerDeadlock"
    )
    assert end.rows[0]["why"].endswith(
        "the engine stopped after this pass"
    )  # no next pass to retry in
    assert first.rows[0]["why"].endswith("retried next pass")
    panel = step_panel("none/configured", passes=1)
    panel.set(**{"pass": 2})
    assert (
        panel.model.passes == 2 and panel.model.rows[1]["asked"] == 1
    )  # s0's first generation step
    assert "Press → for the next" in panel.verdict.value
    assert (
        "IN PROGRESS: PASS 2 OF 54" in panel.verdict.value
        and "NO OUTCOME" not in panel.verdict.value
    )
    panel.set(**{"pass": 45})
    assert "IN PROGRESS: PASS 45 OF 54" in panel.verdict.value
    assert "long refused again (45 refusals so far)." in panel.verdict_text
    assert "The stall detector counts 11 of 20" in panel.verdict_text
    # issue 45: under capacity the figure showed the long request rejected while the verdict
    # spoke of the stall detector; it now says what the pass did and why "long" is gone
    capacity = step_panel("capacity", passes=2)
    assert capacity.verdict_text.startswith(
        "Pass 2: s0 scheduled. Earlier, long was rejected at pass 1 (it needs 257 KV cache blocks"
    )
    assert "stall detector" not in capacity.verdict.value
    assert [t.name for t in panel.figures["pass"].data][:2] == [
        "asked (outline)",
        "got (filled, by result)",
    ]


def test_the_step_verdict_says_what_each_pass_did_and_past_events_once_in_the_past():
    """Under capacity the long request is rejected once, at pass 1: that pass says so once,
    later passes refer to it in the past tense, and the last pass says what it did (s1's last
    token) and every request's outcome, not only "every request is done"."""
    from kvlab.notebook.widgets import step_panel

    panel = step_panel("capacity", passes=1)
    first = panel.verdict_text
    assert first.count("rejected") == 1 and first.count("long") == 1
    assert first.startswith("Pass 1: long rejected: Request requires 257 KV cache blocks")
    assert "s0 scheduled" in first
    for later in (2, 20, 33):
        panel.set(**{"pass": later})
        text = panel.verdict_text
        assert "long rejected" not in text and text.count("rejected") == 1
        assert "long was rejected at pass 1 (it needs 257 KV cache blocks" in text
    assert "s0 finished at pass 32" in text  # pass 33: s0's end, in the past too
    panel.set(**{"pass": 32})
    assert "s0 scheduled and finished (its last token); s1 scheduled." in panel.verdict_text
    panel.set(**{"pass": 34})
    assert panel.outcome == "reject"
    assert panel.verdict_text == (
        "Pass 34: s1 scheduled and finished (its last token). The run is over: s0 and s1 "
        "finished (at passes 32 and 34); long was rejected at pass 1: it needs 257 KV cache "
        "blocks, more than the pool's 64."
    )
    assert "finished" in panel.model.rows[0]["why"]  # the figure's hover says it too
    # the other policies: a past event stated once, in the past; the last pass recaps
    configured = step_panel("none/configured", passes=45)
    text = configured.verdict_text
    assert text.count("s0") == text.count("s1") == 1
    assert "Earlier, s0 finished at pass 32 and s1 finished at pass 34." in text
    configured.set(**{"pass": 54})
    assert configured.verdict_text.endswith(
        "stopped the engine: SchedulerDeadlock. The run is over: s0 and s1 finished (at passes "
        "32 and 34); long never ran."
    )
    clamped = step_panel("none/clamped", passes=1)
    assert clamped.verdict_text == (
        "Pass 1: long raised PageIndexTooShort, which stopped the engine; s0 not reached. "
        "The run is over: no request finished; s0 never ran; s1 had not arrived."
    )


def test_the_step_panels_legend_shows_the_colours_it_draws():
    """The filled bars' colours vary by request: one legend swatch per result filled this pass,
    in the colour its bars are drawn in, and none for a result drawn as an outline only."""
    from kvlab.notebook.widgets import step_panel

    panel = step_panel("none/configured", passes=3)  # long refused (got 0), s0 and s1 scheduled
    fig = panel.figures["pass"]
    got = fig.data[1]
    drawn = {c for c, x in zip(got.marker.color, got.x) if x}
    legend = {t.name: t.marker.color for t in fig.data[2:] if t.showlegend}
    assert got.showlegend is False and legend == {"scheduled": viz.PASS_RESULTS["scheduled"]}
    assert set(legend.values()) == drawn
    assert len(fig.data) == 2 + len(viz.PASS_RESULTS)  # the same traces whatever the pass


def test_the_pass_slider_spans_the_passes_the_run_has():
    """The slider's last position is the run's last pass, so "Pass N" is always the slider's N,
    and the range follows the policy."""
    from kvlab.notebook.widgets import step_panel, step_passes

    assert [step_passes(p) for p in ("none/clamped", "none/configured", "capacity")] == [1, 54, 34]
    panel = step_panel("none/configured", passes=1)
    slider = panel.controls["pass"]
    assert (slider.min, slider.max) == (1, 54)
    for wanted in (1, 30, 54):
        panel.set(**{"pass": wanted})
        assert panel.model.passes == wanted
        assert panel.figures["pass"].layout.title.text.startswith(f"Pass {wanted}:")
    assert (
        "SchedulerDeadlock" in panel.verdict_text
    )  # the last position is where the engine stopped
    panel.set(policy="capacity")  # 34 passes: the slider shrinks and its value with it
    assert slider.max == 34 and slider.value == 34 == panel.model.passes
    assert panel.figures["pass"].layout.title.text.startswith("Pass 34:")
    panel.set(policy="none/clamped")
    assert slider.max == slider.value == panel.model.passes == 1
    with pytest.raises(ValueError, match="passes"):
        step_panel("capacity", passes=40)  # past the run's end: said, not shown as "Pass 34"


def test_under_a_rejecting_style_the_panels_parts_agree():
    """The verdict says "rejected at admission"; the row figure must not say ValueError."""
    panel = admission_panel(policy="sglang")
    text = viz.figure_text(panel.figures["demand"])
    assert (
        panel.outcome == "reject" and "never reaches the row" in text and "ValueError" not in text
    )


# --- notebook 06: the plan panel ------------------------------------------------------------------


def test_the_plan_panel_starts_at_issue_21470_and_follows_its_controls():
    from kvlab.notebook.widgets import plan_panel

    panel = plan_panel()
    assert panel.outcome == "crash"
    assert panel.verdict_text.startswith(
        "Current code: a context of 958,849 tokens or more raises "
        "ValueError and takes every rank down"
    )
    assert "Admission control: reject, longest 958,720 tokens" in panel.verdict_text
    bands = panel.figures["ranges"]
    crash = next(t for t in bands.data if t.name == viz.OUTCOME_LABELS["crash"])
    assert list(crash.y) == ["current code"] and list(crash.base) == [958_848]
    assert len(panel.figures["ranks"].data[0].x) == 16
    slots = next(
        t for t in panel.figures["ranks"].data if t.name.startswith("recurrent-state slots")
    )
    assert not slots.showlegend and max(slots.y) == 0  # an attention-only model has none
    views = dict(panel.views)

    panel.set(manager="auto")  # what Qwen3-MoE gets by default: V1, which clamps and rejects
    assert panel.outcome == "reject" and panel.verdict_text.startswith(
        "Current code (V1 manager): nothing crashes; prompts of "
    )
    assert "Admission control" not in panel.verdict_text
    assert [t.y[0] for t in panel.figures["ranges"].data if t.type == "bar" and len(t.y)] == [
        "current code (V1)"
    ] * 2
    # learner pass C: V1 has no admission control; its request checks reject at the door
    assert (
        "REJECTED AT THE REQUEST DOOR" in panel.verdict.value
        and "ADMISSION" not in panel.verdict.value
    )
    assert "rejected at the request door" in [
        t.name for t in panel.figures["ranges"].data if t.showlegend
    ]
    panel.set(manager="v2")
    panel.set(workspace_gib=0.0)  # no workspace: the pool holds max_seq_len, no clamp
    assert (
        panel.outcome == "ok" and "longest context that finishes is 1,048,576" in panel.verdict_text
    )
    panel.set(
        model="qwen3.5-27b",
        gpu="h100-80gb",
        weights_gib=52.0,
        ranks=1,
        max_batch_size=512,
        max_seq_len=32768,
    )
    assert panel.outcome == "crash" and panel.verdict_text.startswith(
        "Current code raises at construction: 514 state slots"
    )
    assert "Admission control does not help: nothing starts" in panel.verdict_text
    slots = next(
        t for t in panel.figures["ranks"].data if t.name.startswith("recurrent-state slots")
    )
    assert slots.showlegend and min(slots.y) > 0  # the clamp's slots, beside its pool
    panel.set(model="llama-3.1-8b")  # another model's weights are derived, not the last ones
    assert panel.controls["weights_gib"].value == 0.0
    panel.set(model="deepseek-v3", ranks=1, weights_gib=400.0)
    assert panel.verdict_text.startswith("Cannot start under any policy")
    assert panel.views == views  # redrawn, never rebuilt


def test_the_plan_panels_text_is_wrapped_once_and_its_sliders_name_their_units():
    """The verdict holds explain()'s facts unbroken, one a line, and the browser wraps them to the
    panel (white-space: pre-wrap): wrapped once, not by explain() and again by the page. Every
    slider says its unit."""
    import html
    import re

    from kvlab.notebook.widgets import plan_panel

    panel = plan_panel()
    blocks = re.findall(r'<pre style="([^"]*)">(.*?)</pre>', panel.verdict.value, re.S)
    assert len(blocks) == 1
    style, text = blocks[0]
    assert "white-space:pre-wrap" in style
    assert html.unescape(text) == panel.model.explain(width=None)
    assert (
        html.unescape(text) != panel.model.explain()
    )  # a terminal's copy is wrapped, this one not
    assert (
        panel.model.explain()
        .replace("\n    ", " ")
        .replace("\n", " ")
        .startswith(html.unescape(text).split("\n")[0])
    )
    sliders = {
        n: c.description
        for n, c in panel.controls.items()
        if isinstance(c, (W.FloatSlider, W.SelectionSlider))
    }
    assert sliders == {
        "workspace_gib": "rank 0 workspace (GiB)",
        "max_seq_len": "max_seq_len (tokens)",
        "weights_gib": "weights per rank (GiB)",
        "max_batch_size": "max_batch_size (sequences)",
        "ranks": "ranks (GPUs, attention DP)",
    }


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(model="gpt-5"), "model must be one of"),
        (dict(gpu="tpu"), "gpu must be one of"),
        (dict(ranks=3), "ranks must be one of"),
        (dict(workspace_gib=100.0), "workspace_gib must be a number"),
        (dict(max_seq_len=5000), "max_seq_len must be one of"),
    ],
)
def test_the_plan_panel_names_a_bad_value(kwargs, named):
    from kvlab.notebook.widgets import plan_panel

    with pytest.raises(ValueError, match=named):
        plan_panel(**kwargs)


@pytest.mark.parametrize(
    "pool_mib, who_starved",
    [
        (16.0, "it holds the pool while the small requests starved (0 of 6 finished)"),
        (4.0, "refused every pass, the long request starved while 6 of 6 small requests finished"),
    ],
)
def test_admission_verdict_says_who_starved(pool_mib, who_starved):
    """At 16 MiB the long context is admitted and takes the whole pool (its next token needs one
    more page): the small requests starve, not the long one; at 4 MiB it is refused every pass."""
    model = admission_model(
        {"pool_mib": pool_mib, "context": 8192, "policy": "none/configured"}, num_small=6
    )
    outcome, html = admission_verdict(model)
    assert outcome == "stall" and who_starved in html
    long_line = next(line for line in html.split("\n") if line.startswith("long: "))
    assert long_line.startswith(
        "long: suspended" if pool_mib == 16.0 else "long: waiting in the scheduler"
    )
    assert "V2 scheduler deadlock" not in html.split("</b>", 1)[-1].split("phase diagram", 1)[-1]


@pytest.mark.parametrize(
    "pool_mib, policy",
    [
        (4.0, "none/clamped"),
        (16.0, "none/clamped"),
        (16.0, "none/configured"),
        (2**4.5, "vllm"),
        (2**4.5, "none/clamped"),
    ],
)
def test_admission_detail_gives_each_reason_whole(pool_mib, policy):
    """Learner pass: detail lines were cut at 200 characters ("... 64 of..."), and a finished
    request read "after a 8192-token prompt"."""
    model = admission_model({"pool_mib": pool_mib, "context": 8192, "policy": policy})
    _, html = admission_verdict(model)
    detail = html.split("<pre", 1)[1]
    for rid, why in model.result.reasons.items():
        reason = sentence(why)
        if model.result.error is not None:  # the headline gives where and why the engine stopped
            reason = reason.split(" (", 1)[1].removesuffix(f"): {model.result.error}")
            if why.numbers["raised_by_this_request"]:  # it raised in a pass: no refusal count
                reason = reason.split("; ", 1)[1]
        assert html_escape(reason) in detail, rid
    assert "..." not in html and "a 8" not in html and "engine stopped" not in detail
    assert (
        "long: waiting in the scheduler - raised the error; its context of 8,192 tokens" in detail
    ) == (model.outcome == "crash")
    for rid in model.result.status:  # each where the timeline's subtitle counts it
        assert f"{rid}: {viz.end_place(model.result, rid)} - " in detail


# -- notebook 01's panel hints: each can be found on the sliders --------------------------------


def _ranks_positions():
    """The ranks panel's loaded scenario, workspace slider positions and context options."""
    from kvlab.run.scenarios import load_scenario

    controls = ranks_panel().controls
    ws, ctx = controls["workspace_gib"], controls["context"]
    steps = round((ws.max - ws.min) / ws.step)
    return (
        load_scenario("issue-21470"),
        [ws.min + k * ws.step for k in range(steps + 1)],
        [value for _, value in ctx.options],
    )


def _ranks_plan(scenario, workspace_gib, context):
    from kvlab.notebook.widgets.ranks import ranks_model

    return ranks_model(
        dict(workspace_gib=workspace_gib, context=context), scenario=scenario, ranks=16
    ).plan


def test_hint_01_a_workspace_below_which_the_pool_no_longer_clamps():
    scenario, workspaces, contexts = _ranks_positions()
    clamps = {
        w: _ranks_plan(scenario, w, 1_000_000).ranks[0].max_seq_len
        < _ranks_plan(scenario, w, 1_000_000).configured_max_seq_len
        for w in workspaces
    }
    assert not all(clamps.values()) and any(clamps.values())
    first = min(w for w, c in clamps.items() if c)
    assert all(clamps[w] for w in workspaces if w >= first)  # "below which": one threshold


def test_hint_01_the_pool_clamps_and_the_long_context_still_fits():
    scenario, workspaces, contexts = _ranks_positions()
    found = [
        (w, c)
        for w in workspaces[::4]
        for c in contexts
        if (plan := _ranks_plan(scenario, w, c)).ranks[0].max_seq_len < plan.configured_max_seq_len
        and plan.outcome == "ok"
    ]
    assert found


# -- notebook 02's panel hints: each can be found on the sliders --------------------------------


def _repro_positions():
    """Every (pool MiB, context) the repro panel's sliders can take: the log slider's half
    steps of the exponent, and the context slider's options."""
    controls = repro_panel().controls
    pool, ctx = controls["pool_mib"], controls["context"]
    steps = round((pool.max - pool.min) / pool.step)
    return (
        [2.0 ** (pool.min + k * pool.step) for k in range(steps + 1)],
        [value for _, value in ctx.options],
    )


def _repro_outcome(pool_mib, context):
    from kvlab.notebook.widgets.repro import repro_model

    return repro_model(
        dict(pool_mib=pool_mib, context=context, tokens_per_block=32, policy="clamped")
    )


def test_hint_02_the_smallest_pool_on_the_slider_that_holds_8192_tokens():
    """ "its half steps jump from 11.31 MiB, which still crashes, to 16 MiB"."""
    pools, _ = _repro_positions()
    outcomes = {p: _repro_outcome(p, 8192).outcome for p in pools}
    smallest = min(p for p, o in outcomes.items() if o == "ok")
    below = max(p for p in pools if p < smallest)
    assert smallest == 16.0 and f"{below:.4g}" == "11.31" and outcomes[below] == "crash"


def test_hint_02_a_context_just_above_the_clamped_capacity_is_refused():
    """ "try pools between 2 and 4 MiB with a context of 1,536 tokens": one is refused (the
    row's spare entries), not a crash."""
    pools, contexts = _repro_positions()
    assert 1536 in contexts
    refused = [
        (p, c)
        for p in pools
        if 2 <= p <= 4
        for c in (1536,)
        if _repro_outcome(p, c).outcome == "refused"
    ]
    assert refused and all(
        _repro_outcome(p, c).result.context > _repro_outcome(p, c).result.capacity_tokens
        for p, c in refused
    )


def test_hint_02_a_pool_too_small_to_hold_one_page():
    pools, _ = _repro_positions()
    assert any(_repro_outcome(p, 8192).no_pool for p in pools)


# -- notebook 04's panel hints: each can be found on the sliders --------------------------------


def _admission_outcomes(policy, *, pools=None, contexts=None, pool_mib=4.0, context=8192):
    """The panel's outcome at each slider position of the pool (or of the context)."""
    if pools is None and contexts is None:
        raise ValueError("pools or contexts")
    if pools is not None:
        return {
            p: admission_model(
                {"pool_mib": p, "context": context, "policy": policy}, num_small=4
            ).outcome
            for p in pools
        }
    return {
        c: admission_model(
            {"pool_mib": pool_mib, "context": c, "policy": policy}, num_small=4
        ).outcome
        for c in contexts
    }


POOL_STEPS = [2 ** (k / 2) for k in range(-8, 17)]  # the pool slider: 2**-4 to 2**8 MiB, half steps


def test_hint_a_pool_where_clamped_stops_crashing_but_still_stalls():
    outcomes = _admission_outcomes("none/clamped", pools=POOL_STEPS)
    assert "crash" in outcomes.values() and "stall" in outcomes.values()
    first_stall = min(p for p, o in outcomes.items() if o == "stall")
    assert all(outcomes[p] == "crash" for p in POOL_STEPS if p < first_stall)


def test_hint_a_pool_from_which_trtllms_three_policies_say_ok():
    ok = [
        p
        for p in POOL_STEPS
        if all(
            _admission_outcomes(policy, pools=[p])[p] == "ok"
            for policy in ("none/clamped", "none/configured", "capacity")
        )
    ]
    assert ok and all(p in ok for p in POOL_STEPS if p >= ok[0])


def test_hint_the_peers_reject_the_default_context_at_every_pool_and_a_shorter_one_fits():
    for policy in ("vllm", "sglang"):
        assert set(_admission_outcomes(policy, pools=POOL_STEPS).values()) == {"reject"}
        shorter = _admission_outcomes(policy, pools=POOL_STEPS, context=4096)
        assert "ok" in shorter.values(), policy


def test_hint_the_context_from_which_each_peer_rejects_at_the_default_pool():
    for policy in ("vllm", "sglang"):
        outcomes = _admission_outcomes(policy, contexts=context_choices([8192]))
        first_reject = min(c for c, o in outcomes.items() if o == "reject")
        assert outcomes[min(outcomes)] == "ok" and all(
            o == "reject" for c, o in outcomes.items() if c >= first_reject
        ), policy


def test_a_panels_rows_wrap_on_a_narrow_page():
    """Controls in aligned grid columns (two where they fit, else one), and the verdict beside
    the figures: on a page narrower than both it goes below them (flex wrap), at their width,
    not off the right edge (issue 45: misaligned controls, the verdict cramped at laptop width)."""
    from kvlab.notebook.widgets import ranks_panel

    children = ranks_panel().widget.children
    grid = next(child for child in children if isinstance(child, W.GridBox))
    assert "auto-fill" in grid.layout.grid_template_columns
    row = next(child for child in children if isinstance(child, W.HBox))
    assert row.layout.flex_flow == "row wrap"
    assert row.children[1].layout.flex.startswith("1 1 ")  # the verdict grows to fill a line


@pytest.mark.parametrize("control", ["model", "gpu", "ranks", "max_seq_len"])
def test_the_plan_panel_names_an_array_given_for_a_control(control):
    """An array has no one truth value: it is refused as a value the control does not offer."""
    import numpy as np

    from kvlab.notebook.widgets import plan_panel

    with pytest.raises(ValueError, match=f"^{control} must be one of"):
        plan_panel(**{control: np.zeros((2, 2))})


def test_a_panel_breaks_its_figures_subtitles_again_for_its_narrower_width():
    """A figure's subtitle is broken for 720 px; a panel draws it 640 px wide: broken again, no
    line runs past the figure's edge, and the words are all there."""
    from kvlab.notebook.viz.style import FIGURE_WIDTH, SUBTITLE_CHARS

    panel = admission_panel(policy="none/clamped", num_small=6)
    fig = panel.figures["timeline"]
    lines = [re.sub(r"<[^>]+>", "", line) for line in fig.layout.title.text.split("<br>")[1:]]
    assert fig.layout.width == panel.figure_width == 640
    assert len(lines) == 2 and all(
        len(line) <= SUBTITLE_CHARS * 640 // FIGURE_WIDTH for line in lines
    )
    assert " ".join(lines) == (
        "1 pass; at the end: 2 waiting in the scheduler, 5 not yet arrived; "
        "stopped by PageIndexTooShort"
    )
    assert fig.layout.margin.t >= 64 + 17 * 2


def test_a_verdict_keeps_a_command_line_flag_whole():
    """Learner pass B: SGLang's "enable --allow-auto-truncate" broke as "--" over the flag."""
    from kvlab.notebook.panel import verdict_html

    shown = verdict_html("reject", "enable --allow-auto-truncate, or a shorter prompt (a-b)")
    assert '<span style="white-space:nowrap">--allow-auto-truncate</span>' in shown
    assert 'nowrap">a-b' not in shown  # only flags are held together


def test_sglangs_timeline_counts_one_token_pages():
    """Verification pass X2: SGLang's timeline said "KV pool (2,048 pages)" over the demand
    figure's 64 pages of 32 tokens."""
    panel = admission_panel(policy="sglang")
    titles = [a["text"] for a in panel.figures["timeline"].layout.annotations]
    assert "<b>KV pool (2,048 one-token pages)</b>" in titles
    panel.set(policy="capacity")
    assert "<b>KV pool (64 pages)</b>" in [
        a["text"] for a in panel.figures["timeline"].layout.annotations
    ]


def test_a_context_typed_into_the_box_is_taken():
    """Issue 45: notebook 02's context readout took "1536" and ignored it. The box beside the
    slider takes a typed count (commas or not), makes a stop of one the slider lacks, clamps one
    outside its range and puts back anything that is not a count."""
    panel = repro_panel(pool_mib=4.0, context=8192)
    context = panel.controls["context"]
    assert panel.outcome == "crash"
    context.box.value = "1536"
    assert panel.values["context"] == context.slider.value == 1536 and panel.outcome == "ok"
    context.box.value = "1,500"  # not a stop of the slider: made one
    assert panel.values["context"] == 1500 and (f"{1500:,}", 1500) in context.options
    context.box.value = "fifteen hundred"
    assert context.box.value == "1,500" and panel.values["context"] == 1500
    context.box.value = "10**9"
    assert context.box.value == "1,500"
    context.box.value = "999999999"  # clamped to the last stop
    assert panel.values["context"] == 131072 and context.box.value == "131,072"
    context.slider.value = 2048  # the slider moves the box
    assert context.box.value == "2,048" and panel.values["context"] == 2048
    panel.set(context=4096)  # and code moves both
    assert context.slider.value == 4096 and context.box.value == "4,096"
