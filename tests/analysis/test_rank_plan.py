"""kvlab.analysis.rank_plan: the closed-form plan of a multi-rank run against real runs of the ranks."""

from __future__ import annotations

import pytest

from kvlab.analysis.rank_plan import outcome_of, plan_ranks
from kvlab.core.request import RequestState
from kvlab.run.distributed import run_ranks
from kvlab.run.rank_config import scenario_config
from kvlab.run.scenarios import load_scenario

SC = load_scenario("issue-21470")

# (policy, rank 0's workspace GiB, long context): every outcome appears
CASES = [
    ("none/clamped", 28.0, 1_000_000),  # the report: rank 0 raises
    ("none/clamped", 28.0, 524_288),  # clamped, yet the context fits the row
    ("none/clamped", 0.0, 1_000_000),  # no clamp
    ("none/clamped", 64.0, 786_432),  # a smaller pool still crashes
    ("none/configured", 28.0, 1_000_000),  # the one-line fix: refused every pass, then the deadlock
    ("none/configured", 10.0, 960_000),
    ("capacity", 28.0, 1_000_000),  # PR #21720: rejected alone
    ("capacity", 40.0, 393_216),
]


def config(policy, workspace, context, ranks=16):
    return scenario_config(
        SC, ranks, policy, workspace_gib=workspace, context_length=context, stall_limit=20
    )


@pytest.mark.parametrize("policy, workspace, context", CASES)
def test_the_plan_says_what_the_real_run_does(policy, workspace, context):
    cfg = config(policy, workspace, context)
    plan = plan_ranks(cfg)
    run = run_ranks(cfg, in_process=True, progress=False)
    assert outcome_of(run) == plan.outcome and run.ended == plan.ended
    placed = {rid: r.rank for r in run.ranks for rid in r.status}
    assert placed == plan.placement
    for p, r in zip(plan.ranks, run.ranks):
        assert (
            p.local_quota_bytes,
            p.local_blocks,
            p.blocks,
            p.capacity_tokens,
            p.quota_bytes,
            p.max_seq_len,
            p.max_blocks_per_seq,
        ) == (
            r.local_quota_bytes,
            r.local_blocks,
            r.blocks,
            r.capacity_tokens,
            r.quota_bytes,
            r.max_seq_len,
            r.max_blocks_per_seq,
        )
    statuses = {rid: s for r in run.ranks for rid, s in r.status.items()}
    for q in plan.requests:
        if q.verdict == "reject":
            assert statuses[q.request_id] == RequestState.REJECTED
        if plan.ended == "completed" and q.verdict == "ok":
            assert statuses[q.request_id] == RequestState.FINISHED


def test_the_cases_cover_every_outcome():
    assert {plan_ranks(config(*case)).outcome for case in CASES} == {
        "crash",
        "stall",
        "reject",
        "ok",
    }


def test_the_report_numbers_match_the_scenario_file():
    plan = plan_ranks(config("none/clamped", 28.0, 1_000_000))
    exp = SC.expected
    r0 = plan.ranks[0]
    assert (r0.blocks, r0.capacity_tokens, r0.max_blocks_per_seq) == (
        exp["total_blocks"],
        exp["capacity_tokens"],
        exp["width_clamped"],
    )
    assert {r.blocks for r in plan.ranks} == {
        plan.ranks[-1].local_blocks
    }  # the last rank sets the MIN
    long_ctx = next(q for q in plan.requests if q.request_id == "long-ctx")
    assert (
        long_ctx.rank == 0
        and long_ctx.verdict == "crash"
        and long_ctx.blocks > r0.max_blocks_per_seq
    )
    assert plan.reason.startswith(
        "rank 0 raises ValueError: User-provided base page indices is too short"
    )
    wide = plan_ranks(config("none/configured", 28.0, 1_000_000)).ranks[0]
    assert wide.max_blocks_per_seq == exp["width_configured"]


def test_one_rank_has_no_min_and_its_own_pool_holds_the_context():
    plan = plan_ranks(config("none/clamped", 28.0, 1_000_000, ranks=1))
    assert plan.ranks[0].blocks == plan.ranks[0].local_blocks and plan.outcome == "ok"


def test_plan_ranks_wants_a_run_config():
    with pytest.raises(TypeError, match="config must be a RunConfig"):
        plan_ranks(SC)
