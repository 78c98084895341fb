"""kvlab.widgets.ranks_panel (notebook 01), headless: set a control, read the figures and verdict."""

from __future__ import annotations

import pytest

from kvlab import viz
from kvlab.widgets import ranks_panel

NATIVE = "User-provided base page indices is too short"


@pytest.fixture(scope="module")
def panel():
    return ranks_panel()  # the scenario's assumptions: 28 GiB on rank 0, a 1,000,000-token context


def fit(panel):
    bar = panel.figures["requests"].data[0]
    return dict(zip(bar.x, bar.y)), dict(zip(bar.x, bar.marker.color))


def test_the_report_clamps_and_the_long_context_crashes(panel):
    panel.set(workspace_gib=28.0, context=1_000_000)
    assert panel.outcome == "crash"
    text = panel.verdict_text
    assert "max_seq_len 1,048,576 is clamped to 958,752" in text and "long-ctx (rank 0) would raise" in text
    assert f"Predicted: shut down - rank 0 raises ValueError: {NATIVE} on long-ctx" in text
    tokens, colors = fit(panel)
    assert tokens["long-ctx"] == 1_000_064 and colors["long-ctx"] == viz.OUTCOME_COLORS["crash"]
    assert colors["bg-000"] == colors["bg-047"] == viz.OUTCOME_COLORS["ok"]
    budget = panel.figures["budget"]
    assert [t.name for t in budget.data] == [label for _, label, _ in viz.BUDGET_PARTS]
    pool = budget.data[4].y
    assert len(pool) == 16 and len(set(round(v, 6) for v in pool)) == 1  # one pool after the MIN
    lost = budget.data[5].y
    assert lost[0] > lost[-1] == 0  # rank 0 lost the most to the MIN; the last rank set it


def test_less_workspace_lifts_the_clamp_and_every_rank_finishes(panel):
    panel.set(workspace_gib=0.0)
    assert panel.outcome == "ok"
    assert "no clamp" in panel.verdict_text and "Predicted: completed" in panel.verdict_text
    _, colors = fit(panel)
    assert colors["long-ctx"] == viz.OUTCOME_COLORS["ok"]


def test_a_shorter_context_fits_the_clamped_row(panel):
    panel.set(workspace_gib=28.0, context=524_288)
    assert panel.outcome == "ok" and "is clamped to 958,752" in panel.verdict_text
    assert "no request exceeds the row" in panel.verdict_text


def test_more_workspace_shrinks_every_pool(panel):
    panel.set(workspace_gib=28.0, context=1_000_000)
    before = panel.model.plan.ranks[0].blocks
    panel.controls["workspace_gib"].value = 48.0
    after = panel.model.plan.ranks
    assert {r.blocks for r in after} == {after[-1].local_blocks} and after[0].blocks < before
    assert panel.outcome == "crash"


def test_figures_are_updated_in_place(panel):
    budget, requests = panel.figures["budget"], panel.figures["requests"]
    traces = [len(budget.data), len(requests.data)]
    panel.set(workspace_gib=10.0, context=131_072)
    assert panel.figures["budget"] is budget and panel.figures["requests"] is requests
    assert [len(budget.data), len(requests.data)] == traces


def test_ranks_panel_checks_its_arguments():
    with pytest.raises(ValueError, match="workspace_gib"):
        ranks_panel(workspace_gib=-1.0)
    with pytest.raises(ValueError, match="ranks"):
        ranks_panel(ranks=0)
    small = ranks_panel(ranks=2, context=960_000)
    assert len(small.model.plan.ranks) == 2 and small.values["context"] == 960_000


@pytest.mark.parametrize("workspace, context, outcome, ended", [
    (28.0, 1_000_000, "crash", f"shut down - rank 0 raised ValueError: {NATIVE}"),
    (0.0, 1_000_000, "ok", "completed - every rank finished its work"),
])
def test_the_button_runs_the_ranks_and_agrees_with_the_plan(panel, workspace, context, outcome, ended):
    panel.set(workspace_gib=workspace, context=context)
    assert panel.action_result is None and panel.action_output.value == ""
    panel.action_button.click()  # what the reader's click does
    result = panel.action_result
    assert result.world_size == 16 and result.mode == "in-process"
    assert panel.outcome == outcome and f"{result.ended} - {result.reason}".startswith(ended)
    assert "As predicted." in panel.action_output.value and "NOT as predicted" not in panel.action_output.value
    assert "pool after MIN" in panel.action_output.value  # the per-rank table
    panel.set(context=524_288)  # the run described other values: it is cleared
    assert panel.action_result is None and panel.action_output.value == ""


def test_a_panel_without_an_action_says_so(panel):
    from kvlab.widgets import repro_panel
    with pytest.raises(ValueError, match="no action"):
        repro_panel().act()
