"""kvlab.analysis.compare: one workload under several policies, the engine's outcome, the table."""

from __future__ import annotations

import pytest

from kvlab import PageIndexTooShort, SchedulerDeadlock, VllmScheduler
from kvlab.analysis.compare import (
    EngineConfig,
    build_scheduler,
    engine_args,
    long_and_small,
    not_yet_and_never,
    outcome_table,
    request_timeline,
    run_policies,
    tier_runs,
    vllm_startup_error,
)
from kvlab.analysis.presets import engine_outcome
from kvlab.core.request import RequestState
from kvlab.run.workload import LogNormal, poisson_workload
from kvlab.sched.policies import POLICIES, TRTLLM_POLICIES
from kvlab.sched.sglang import SglangScheduler, SglangServerArgs
from kvlab.sched.trtllm_settings import TrtllmSettings
from kvlab.sched.vllm import VllmEngineArgs


def test_the_seed_workload_crashes_stalls_or_is_rejected_cleanly():
    runs = run_policies(long_and_small(8192, num_small=4), engine=EngineConfig(stall_limit=50))
    assert {p: engine_outcome(r) for p, r in runs.items()} == {
        "none/clamped": "crash",
        "none/configured": "stall",
        "capacity": "reject",
        "vllm": "reject",
        "sglang": "reject",
    }
    assert isinstance(runs["none/clamped"].error, PageIndexTooShort)
    assert isinstance(runs["none/configured"].error, SchedulerDeadlock)
    for policy in ("capacity", "vllm", "sglang"):
        result = runs[policy]
        assert result.status["long"] == RequestState.REJECTED and result.error is None
        assert all(result.status[f"s{i}"] == RequestState.FINISHED for i in range(4))
    assert runs["none/configured"].status["long"] == RequestState.WAITING
    assert all(runs["none/configured"].status[f"s{i}"] == RequestState.FINISHED for i in range(4))


def test_a_large_pool_runs_everything():
    runs = run_policies(
        long_and_small(8192, num_small=2), TRTLLM_POLICIES, EngineConfig(pool_mib=32.0)
    )
    assert {engine_outcome(r) for r in runs.values()} == {"ok"}


def test_not_yet_waits_and_never_is_rejected_under_capacity():
    engine = EngineConfig()
    trio = not_yet_and_never(engine)
    assert [r.request_id for r in trio] == ["hog", "later", "never"]
    result = run_policies(trio, ["capacity"], engine)["capacity"]
    assert result.status == {
        "hog": RequestState.FINISHED,
        "later": RequestState.FINISHED,
        "never": RequestState.REJECTED,
    }
    timeline = {r["request_id"]: r for r in request_timeline(result)}
    assert timeline["later"]["started"] >= timeline["hog"]["ended"] > timeline["later"]["arrival"]
    assert timeline["never"]["ended"] == timeline["never"]["arrival"]
    with pytest.raises(ValueError, match="at least 4 pages"):
        not_yet_and_never(EngineConfig(pool_mib=0.125))


def test_outcome_table_has_a_row_per_policy_with_reasons():
    runs = run_policies(long_and_small(8192, num_small=2), engine=EngineConfig(stall_limit=20))
    table = outcome_table(runs)
    assert list(table.index) == list(POLICIES)
    assert table.loc["capacity", "reasons"].startswith("Request requires 257 KV cache blocks")
    assert table.loc["sglang", "reasons"].startswith(
        "The input (8192 tokens) is longer than the model's context length (8192 tokens)."
    )
    assert table.loc["vllm", "reasons"].startswith("The decoder prompt (length 8192)")
    assert table.loc["none/configured", "max_stalled_passes"] == 20
    assert table.loc["none/clamped", "error"].startswith("PageIndexTooShort")
    assert (table.finished + table.rejected + table.unfinished == 3).all()


def test_a_mixed_workload_rejects_exactly_what_never_fits_under_capacity():
    engine = EngineConfig()
    workload = poisson_workload(
        40,
        rate=0.05,
        prompt_len=LogNormal(256, 1.0, 16, 8192),
        max_new_tokens=LogNormal(64, 0.8, 1, 512),
        seed=0,
    )
    manager = engine.manager()
    from kvlab.sched.admission import demand_blocks

    never = {r.request_id for r in workload if demand_blocks(r, manager) > engine.total_blocks}
    result = run_policies(workload, ["capacity"], engine)["capacity"]
    assert set(result.ids_with_status(RequestState.REJECTED)) == never
    assert len(result.ids_with_status(RequestState.FINISHED)) == len(workload) - len(never)


def test_vllm_refuses_to_start_with_the_configured_length_and_starts_when_it_fits():
    assert "estimated maximum model length is 2016" in vllm_startup_error(EngineConfig())
    assert vllm_startup_error(EngineConfig(pool_mib=32.0)) is None  # 8,192 fits 511 blocks
    scheduler = build_scheduler("vllm", EngineConfig())
    assert isinstance(scheduler, VllmScheduler) and scheduler.max_model_len == 2016
    assert build_scheduler("vllm", EngineConfig(pool_mib=32.0)).max_model_len == 8192
    with pytest.raises(ValueError, match="No available memory for the cache blocks"):
        build_scheduler("vllm", EngineConfig(pool_mib=0.0625))  # one block: the null one


def test_bad_policy_is_named():
    with pytest.raises(ValueError, match="policy must be one of"):
        build_scheduler("fifo")


@pytest.mark.parametrize(
    "call, error, text",
    [
        (
            lambda: build_scheduler("capacity", engine=10**30),
            TypeError,
            "engine must be an EngineConfig",
        ),
        (
            lambda: run_policies(long_and_small(num_small=0), engine=None),
            TypeError,
            "engine must be an EngineConfig",
        ),
        (
            lambda: run_policies(long_and_small(num_small=0), policies=-1),
            TypeError,
            "policies must be a sequence of policy names",
        ),
        (
            lambda: run_policies(long_and_small(num_small=0), policies="capacity"),
            TypeError,
            "policies must be a sequence of policy names",
        ),
        (
            lambda: run_policies(long_and_small(num_small=0), policies=(p for p in range(2))),
            ValueError,
            "policies[0] must be one of",
        ),
        (
            lambda: tier_runs(long_and_small(num_small=0), engine=""),
            TypeError,
            "engine must be an EngineConfig",
        ),
        (lambda: not_yet_and_never(engine=""), TypeError, "engine must be an EngineConfig"),
        (lambda: not_yet_and_never(max_new_tokens=""), TypeError, "max_new_tokens must be an int"),
        (lambda: long_and_small(long_arrival={}), TypeError, "long_arrival must be an int"),
        (lambda: long_and_small(long_arrival=-1), ValueError, "long_arrival must be in [0, "),
        (lambda: long_and_small(small_prompt=0), ValueError, "small_prompt must be in [1, "),
        (
            lambda: long_and_small(small_new_tokens=2**63),
            ValueError,
            "small_new_tokens must be in [0, ",
        ),
        (lambda: long_and_small(context=float("nan")), TypeError, "context must be an int"),
        (lambda: long_and_small(max_new_tokens=None), TypeError, "max_new_tokens must be an int"),
    ],
)
def test_bad_arguments_name_the_parameter(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)


def test_each_policy_runs_from_its_own_engines_configuration():
    """TensorRT-LLM's settings, vLLM's and SGLang's arguments are each their own type, derived
    from one EngineConfig; each builds its own engine's scheduler."""
    engine = EngineConfig(max_batch_size=3, stall_limit=7)
    kinds = {policy: type(engine_args(policy, engine)) for policy in POLICIES}
    assert kinds == {
        "none/clamped": TrtllmSettings,
        "none/configured": TrtllmSettings,
        "capacity": TrtllmSettings,
        "vllm": VllmEngineArgs,
        "sglang": SglangServerArgs,
    }
    capacity = engine_args("capacity", engine)
    assert capacity == TrtllmSettings(
        engine.geometry,
        engine.quota_bytes,
        engine.max_seq_len,
        3,
        max_num_tokens=engine.max_num_tokens,
        stall_limit=7,
        admission="capacity",
    )
    assert engine_args("none/configured", engine).manager().page_index_policy == "configured"
    assert engine_args("vllm", engine).max_num_seqs == 3
    assert isinstance(build_scheduler("sglang", engine), SglangScheduler)
