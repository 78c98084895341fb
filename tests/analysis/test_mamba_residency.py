"""kvlab.core.mamba's helpers for notebook 05: the dtype table, the fraction sweep, the scaled-down
Qwen3.5-27B, the quota split, the proposals side by side (PR #17261's clamp, closed without
merging; PR #18985's feasible default, open), and the clamp's review findings run with and
without their fixes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import MambaHybridCacheManager
from kvlab.analysis.mamba_residency import (
    PR_QUOTA_BYTES,
    SCALE,
    dtype_rows,
    fraction_rows,
    implied_ssm_dtype,
    proposal_rows,
    qwen_plan,
    residency_bytes,
    scaled_qwen3_5_27b,
)
from kvlab.case_studies import run_review_finding, run_review_findings
from kvlab.core.mamba import QUOTA_TOO_SMALL, proposed_quota_error
from kvlab.core.memory import GIB
from kvlab.notebook import viz


def test_dtype_table_reconciles_the_pr():
    rows = {r["ssm_dtype"]: r for r in dtype_rows()}
    assert rows["bfloat16"]["slots"] == rows["float32"]["slots"] == 513
    assert (rows["bfloat16"]["slots_gib"], rows["float32"]["slots_gib"]) == (37.48, 73.55)
    assert rows["bfloat16"]["slot_bytes"] == 78_446_592
    assert not rows["bfloat16"]["merged_builds"] and rows["bfloat16"]["clamp_resident"] == 339
    assert rows["float32"]["clamp_resident"] == 172
    assert (
        rows["bfloat16"]["feasible_max_batch_size"],
        rows["float32"]["feasible_max_batch_size"],
    ) == (339, 172)
    assert implied_ssm_dtype(37.5, 513) == "bfloat16"
    assert implied_ssm_dtype(73.55, 513) == "float32"
    assert implied_ssm_dtype(50.0, 513) is None


def test_no_fraction_lets_merged_code_build():
    rows = fraction_rows([0.1, 0.5, 0.9, 1.0])
    assert not any(r["merged_builds"] for r in rows)
    assert abs(rows[-1]["quota_gib"] - 24.86) < 1e-6 and rows[-1]["clamp_resident"] == 339
    assert all(r["merged_need_gib"] > r["quota_gib"] for r in rows)
    assert [r["clamp_resident"] for r in rows] == sorted(r["clamp_resident"] for r in rows)
    assert all(r["feasible_max_batch_size"] == r["clamp_resident"] for r in rows)  # pp 1
    # a smaller batch fits at 1.0
    assert fraction_rows([1.0], max_batch_size=300)[0]["merged_builds"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_scaled_model_is_exactly_256_times_smaller(dtype):
    attn, mamba = scaled_qwen3_5_27b(dtype)
    plan = qwen_plan(ssm_dtype=dtype)
    assert mamba.bytes_per_slot * SCALE == plan.slot_bytes
    assert attn.bytes_per_block * SCALE == plan.page_bytes


def test_scaled_manager_keeps_the_pr_residency_and_truncates_warmup():
    attn, mamba = scaled_qwen3_5_27b()
    m = MambaHybridCacheManager(
        attn,
        mamba,
        PR_QUOTA_BYTES // SCALE,
        max_seq_len=64,
        max_batch_size=512,
        warmup_batch_sizes=[1, 64, 256, 512],
        residency="clamped",
    )
    assert m.max_resident_sequences() == 339 and m.state_slots.num_slots == 340
    assert m.warmup_batch_sizes == (1, 64, 256, 339)
    assert m.state_slots.nbytes + m.pool.nbytes <= PR_QUOTA_BYTES // SCALE


@settings(max_examples=100, deadline=None)
@given(
    quota_gib=st.floats(0.05, 100.0),
    batch=st.integers(1, 1024),
    dtype=st.sampled_from(["bfloat16", "float32"]),
)
def test_quota_split_adds_up(quota_gib, batch, dtype):
    plan = qwen_plan(int(quota_gib * GIB), batch, dtype)
    split = residency_bytes(plan)
    clamped = split["clamped"]
    assert split["raw_fits"] == (plan.raw_need_bytes <= plan.quota_bytes)
    assert sum(clamped.values()) == plan.quota_bytes
    if plan.local_cap >= 1:
        assert clamped["resident"] == plan.local_cap * plan.slot_bytes
        assert clamped["pages"] >= plan.page_bytes and clamped["pages"] % plan.page_bytes == 0
    else:
        assert clamped["resident"] == clamped["pages"] == 0
    raw = split["raw"]
    used = raw["resident"] + raw["dummies"] + raw["pages"]
    assert (used <= plan.quota_bytes) == split["raw_fits"]


def test_the_pr_split():
    split = residency_bytes(qwen_plan())
    assert split["clamped"]["resident"] == 339 * 78_446_592
    assert split["raw"]["resident"] == 512 * 78_446_592 and not split["raw_fits"]


def test_scaled_manager_raises_under_merged_residency_and_builds_the_feasible_default():
    attn, mamba = scaled_qwen3_5_27b()
    with pytest.raises(ValueError, match="too small for live recurrent states"):
        MambaHybridCacheManager(
            attn, mamba, PR_QUOTA_BYTES // SCALE, max_seq_len=64, max_batch_size=512
        )
    m = MambaHybridCacheManager(
        attn, mamba, PR_QUOTA_BYTES // SCALE, max_seq_len=64, max_batch_size=339
    )
    assert m.max_resident_sequences() is None and m.state_slots.num_slots == 340
    with pytest.raises(ValueError):
        MambaHybridCacheManager(
            attn, mamba, PR_QUOTA_BYTES // SCALE, max_seq_len=64, max_batch_size=340
        )


def test_the_proposals_side_by_side():
    plan = qwen_plan()
    rows = {r["policy"]: r for r in proposal_rows(plan)}
    assert list(rows) == ["merged", "clamp", "default", "explicit"]
    assert rows["merged"]["outcome"] == rows["explicit"]["outcome"] == "crash"
    assert rows["merged"]["error"] == QUOTA_TOO_SMALL.format(
        got=plan.quota_bytes, need=plan.raw_need_bytes
    )
    assert rows["explicit"]["error"] == proposed_quota_error(plan)
    assert (
        rows["clamp"]["max_batch_size"],
        rows["clamp"]["resident"],
        rows["clamp"]["waiting"],
    ) == (512, 339, 173)
    assert (
        rows["default"]["max_batch_size"],
        rows["default"]["resident"],
        rows["default"]["waiting"],
    ) == (339, 339, 173)
    assert rows["clamp"]["status"] == "proposal, PR #17261, closed without merging"
    assert rows["default"]["status"] == "proposal, PR #18985, open"
    assert abs(rows["clamp"]["state_gib"] - 340 * 78_446_592 / GIB) < 1e-9
    assert all(r["resident"] == r["waiting"] == 0 for r in (rows["merged"], rows["explicit"]))
    fig = viz.residency_proposals_figure(list(rows.values()))
    assert [t.name for t in fig.data] == [lab for _, lab, _ in viz.PROPOSAL_PARTS]
    assert list(fig.data[0].y) == [0, 339, 339, 0] and list(fig.data[1].y) == [0, 173, 173, 0]
    assert sum("ValueError" in a.text for a in fig.layout.annotations) == 2
    # a quota that fits: merged code and every proposal serve all 512
    big = {r["policy"]: r for r in proposal_rows(qwen_plan(int(40 * GIB)))}
    assert all(big[k]["outcome"] == "ok" for k in big)
    assert big["merged"]["resident"] == big["clamp"]["resident"] == 512
    assert big["default"]["max_batch_size"] > 512 and big["default"]["resident"] == 512
    # a quota below one slot: everything raises
    tiny = proposal_rows(qwen_plan(int(0.05 * GIB)))
    assert all(r["outcome"] == "crash" and r["error"] for r in tiny)


def test_each_finding_fails_with_its_bug_and_passes_with_its_fix():
    runs = {(r.finding, r.bug): r for r in run_review_findings()}
    assert len(runs) == 6
    m = {k: dict(r.metrics) for k, r in runs.items()}
    assert m[1, True] == {
        "rank 0 cap": 3,
        "rank 1 cap": None,
        "rank 0 admitted": 3,
        "rank 1 admitted": 8,
    }
    assert m[1, False] == {
        "rank 0 cap": 3,
        "rank 1 cap": 3,
        "rank 0 admitted": 3,
        "rank 1 admitted": 3,
    }
    assert runs[1, True].outcome == "stall" and runs[1, False].outcome == "ok"
    assert m[2, True] == {"cap": 1, "admitted in one pass": 2} and runs[2, True].outcome == "crash"
    assert "no free recurrent-state slot" in runs[2, True].detail
    assert m[2, False] == {"cap": 1, "admitted in one pass": 1} and runs[2, False].outcome == "ok"
    assert m[3, True] == {"B chunks scheduled": 0, "stalled passes": 5}
    assert "V2 scheduler deadlock" in runs[3, True].detail and runs[3, True].outcome == "stall"
    assert (
        m[3, False] == {"B chunks scheduled": 2, "stalled passes": 0}
        and runs[3, False].outcome == "ok"
    )
    fig = viz.review_findings_figure(list(runs.values()))
    assert [t.name for t in fig.data] == ["bug", "fix"] * 3


def test_run_review_finding_validates():
    with pytest.raises(ValueError, match="finding"):
        run_review_finding(4, True)
    with pytest.raises(TypeError, match="bug"):
        run_review_finding(1, 1)


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda: fraction_rows([0.5], total_bytes=[]), TypeError, "total_bytes must be an int"),
        (lambda: fraction_rows([0.5], left_bytes="x"), TypeError, "left_bytes must be an int"),
        (
            lambda: fraction_rows([0.5], left_bytes=81 * GIB),
            ValueError,
            "left_bytes must be in [0, ",
        ),
        (lambda: fraction_rows([0.5], left_bytes=0), ValueError, "left_bytes=0 leaves no KV quota"),
        (lambda: implied_ssm_dtype(slots="x"), TypeError, "slots must be an int"),
        (lambda: implied_ssm_dtype(slots=-1), ValueError, "slots must be in [1, "),
        (lambda: implied_ssm_dtype(slots=float("nan")), TypeError, "slots must be an int"),
        (lambda: implied_ssm_dtype(slots=2**63), ValueError, "slots must be in [1, "),
        (lambda: implied_ssm_dtype(slots_gib=0), ValueError, "slots_gib must be in (0.0, "),
        (
            lambda: implied_ssm_dtype(tolerance_gib=float("nan")),
            ValueError,
            "tolerance_gib must be in [0.0, ",
        ),
        (
            lambda: implied_ssm_dtype(tolerance_gib=10**30),
            ValueError,
            "tolerance_gib must be in [0.0, 37.5]",
        ),
        (
            lambda: implied_ssm_dtype(candidates="bfloat16"),
            TypeError,
            "candidates must be a sequence",
        ),
        (lambda: implied_ssm_dtype(candidates=["fp8"]), ValueError, "candidates[0] must be one of"),
    ],
)
def test_bad_arguments_name_the_parameter(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)
