"""kvlab.widgets.mamba_panel (notebook 05), headless: set controls, read the verdict and figure."""

from __future__ import annotations

import pytest

from kvlab import viz
from kvlab.widgets import mamba_panel


@pytest.fixture()
def panel():
    return mamba_panel()  # the PR's: 24.86 GiB, 512 sequences, bf16 SSM state


def bars(panel):
    fig = panel.figures["stack"]
    return {t.name: tuple(t.y) for t in fig.data}


def test_the_pr_merged_raises_and_the_proposals_keep_339(panel):
    assert panel.outcome == "crash"
    text = panel.verdict_text
    assert "Merged raises: 513 slots x 74.8 MiB + one page = 37.48 GiB > quota 24.86 GiB" in text
    assert "ValueError at construction" in text
    assert "Proposal PR #17261 (closed without merging), the clamp: 339 resident (+1 dummy)" in text
    assert "173 sequences queue" in text
    assert "Proposal PR #18985 (open): a max_batch_size default of at most 339 fits" in text
    assert "an explicit 512 still raises" in text
    assert panel.model.feasible_max_batch_size == 339
    assert [t.name for t in panel.figures["stack"].data] == [lab for _, lab, _ in viz.RESIDENCY_PARTS]
    assert list(panel.figures["stack"].data[0].x) == ["merged (raises)", "PR #17261 clamp (proposal)"]
    raw, clamped = zip(*bars(panel).values())
    assert sum(raw) > 24.86 > sum(clamped[:3])
    quota_line = panel.figures["stack"].layout.shapes[0]
    assert abs(quota_line.y0 - 24.86) < 0.01


def test_a_big_quota_lets_merged_code_build_and_the_figure_updates_in_place(panel):
    fig = panel.figures["stack"]
    before = bars(panel)
    panel.set(quota_gib=40.0)
    assert panel.figures["stack"] is fig  # patched, not rebuilt
    assert panel.outcome == "ok" and "Merged builds" in panel.verdict_text
    assert list(fig.data[0].x) == ["merged", "PR #17261 clamp (proposal)"]
    assert "all 512 sequences resident" in panel.verdict_text
    assert bars(panel) != before
    assert abs(fig.layout.shapes[0].y0 - 40.0) < 0.01


def test_float32_halves_the_residency(panel):
    panel.set(ssm_dtype="float32")
    assert "73.55 GiB" in panel.verdict_text and "the clamp: 172 resident" in panel.verdict_text
    assert "at most 172 fits" in panel.verdict_text


def test_a_smaller_batch_fits(panel):
    panel.set(max_batch_size=300)
    assert panel.outcome == "ok" and "all 300 sequences resident" in panel.verdict_text
    panel.controls["max_batch_size"].value = 400  # a single control change refreshes too
    assert panel.outcome == "crash" and "the clamp: 339 resident" in panel.verdict_text


def test_a_quota_below_one_slot_clamps_to_zero(panel):
    panel.set(quota_gib=0.1, ssm_dtype="float32")  # 102 MiB: less than a dummy and a 147 MiB slot
    assert "keeps 0: not even one sequence's state fits" in panel.verdict_text
    assert "no max_batch_size default fits" in panel.verdict_text
    assert bars(panel)["resident state slots"][1] == 0


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="ssm_dtype"):
        mamba_panel(ssm_dtype="fp8")
    with pytest.raises(ValueError, match="quota_gib"):
        mamba_panel(quota_gib=0.0)
