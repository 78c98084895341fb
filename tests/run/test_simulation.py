"""simulate(): the seed's cases end to end, the run's bookkeeping, the peers' styles."""

from __future__ import annotations

import dataclasses
import traceback
import warnings

import pytest

from kvlab import (
    KVCacheManager,
    KVGeometry,
    MaxSeqLenClampWarning,
    PageIndexTooShort,
    Request,
    Scheduler,
    SchedulerDeadlock,
    SglangScheduler,
    SglangServerArgs,
    VllmEngineArgs,
    VllmScheduler,
    simulate,
)
from kvlab.analysis.presets import seed_geometry
from kvlab.core.cause import Cause, Reason
from kvlab.run.trace import StepRecord
from kvlab.run.workload import LogNormal, poisson_workload

SMALL = [Request(f"s{i}", prompt_len=256, max_new_tokens=32, arrival_step=i) for i in range(3)]


def seed_scheduler(seed_manager, policy, admission="none", **kwargs):
    """The seed (4 MiB pool, max_seq_len 8192, batch size 1) under the contract's scheduler."""
    kwargs.setdefault("stall_limit", 20)
    return Scheduler(
        seed_manager(policy), admission=admission, max_num_tokens=8192, max_batch_size=8, **kwargs
    )


def test_the_design_contract(seed_manager):
    sched = Scheduler(
        seed_manager("configured"),
        admission="none",
        max_num_tokens=8192,
        max_batch_size=8,
        stall_limit=1000,
    )
    result = simulate(
        sched,
        [
            Request("big", prompt_len=8192, max_new_tokens=16),
            Request("s1", prompt_len=256, max_new_tokens=32),
        ],
        max_steps=5000,
    )
    assert result.status["s1"] == "finished"
    assert result.status["big"] == "waiting"
    big = result.reasons["big"]
    assert big is not None and big.cause is Cause.STILL_WAITING
    assert dict(context_len=8192, pages=256, total_blocks=64, free_blocks=64).items() <= (
        big.numbers.items()
    )
    assert big.numbers["error"] == "SchedulerDeadlock"
    assert isinstance(result.error, SchedulerDeadlock) and isinstance(result.error, RuntimeError)
    assert len(result.trace) == result.iterations
    assert list(result.trace.to_pandas().columns) == list(StepRecord._fields)


def test_clamped_width_crashes_the_engine_and_keeps_the_trace(seed_manager):
    scheduler = seed_scheduler(seed_manager, "clamped")
    requests = [Request("s0", 256, 32), Request("big", 8192, 16), Request("s1", 256, 32, 40)]
    result = simulate(scheduler, requests, max_steps=5000, check_invariants=True)
    # "big" waits behind s0 (one page-index slot, and 256 + 8192 tokens exceed the budget)
    assert isinstance(result.error, PageIndexTooShort)
    assert str(result.error) == "User-provided base page indices is too short"
    assert result.status == {"s0": "finished", "big": "waiting", "s1": "waiting"}
    assert result.requests["s0"].end_step == 31
    assert len(result.trace) == 33 and result.trace[-1].step == 32  # the step that raised
    assert result.trace.events[-1][:3] == (32, "engine_stopped", "big")
    big, s1 = result.reasons["big"], result.reasons["s1"]
    assert big is not None and s1 is not None
    assert big.cause is Cause.STILL_WAITING and big.message == str(result.error)
    assert dict(
        stopped_at_step=32, error="PageIndexTooShort", raised_by_this_request=True
    ).items() <= (big.numbers.items())
    assert big.numbers["refusals"] == 32 and big.numbers["pages"] == 256
    assert s1.cause is Cause.NOT_SUBMITTED and s1.numbers["arrival_step"] == 40
    assert s1.numbers["raised_by_this_request"] is False


def test_a_request_the_engine_stopped_before_any_refusal_says_so(seed_manager):
    """Raising in its first pass, the request was never refused: its reason does not count
    "0 scheduling passes"."""
    result = simulate(
        seed_scheduler(seed_manager, "clamped"), [Request("big", 8192, 16)], max_steps=50
    )
    big = result.reasons["big"]
    assert big is not None and big.cause is Cause.STILL_WAITING
    assert big.numbers["refusals"] == 0 and big.numbers["stopped_at_step"] == 0
    assert big.numbers["raised_by_this_request"] is True


def test_configured_width_alone_deadlocks_at_the_stall_limit(seed_manager):
    scheduler = seed_scheduler(seed_manager, "configured", stall_limit=7)
    result = simulate(scheduler, [Request("big", 8192, 16)], max_steps=5000, check_invariants=True)
    assert isinstance(result.error, SchedulerDeadlock)
    assert "0 generation and 1 context request(s)" in str(result.error)
    assert result.iterations == 7 and result.trace.column("stalled_passes") == list(range(1, 8))
    assert result.trace[-1].free_blocks == 64  # refused: nothing kept


def test_configured_width_starves_beside_small_requests_that_finish(seed_manager):
    scheduler = seed_scheduler(seed_manager, "configured", stall_limit=1000)
    result = simulate(
        scheduler, [Request("big", 8192, 16)] + SMALL, max_steps=200, check_invariants=True
    )
    assert result.error is None
    assert [result.status[r.request_id] for r in SMALL] == ["finished"] * 3
    assert result.status["big"] == "waiting"
    assert result.requests["big"].num_refusals == result.iterations
    big = result.reasons["big"]
    assert big is not None and big.cause is Cause.STILL_WAITING
    assert big.numbers["max_steps"] == 200 and "error" not in big.numbers
    assert max(result.trace.column("stalled_passes")) < 1000


def test_capacity_rejects_the_big_request_with_numbers_and_the_small_ones_finish(seed_manager):
    for policy in ("clamped", "configured"):
        scheduler = seed_scheduler(seed_manager, policy, admission="capacity")
        result = simulate(
            scheduler, [Request("big", 8192, 16)] + SMALL, max_steps=5000, check_invariants=True
        )
        assert result.error is None
        assert result.status == {
            "big": "rejected",
            "s0": "finished",
            "s1": "finished",
            "s2": "finished",
        }
        big = result.reasons["big"]
        assert big is not None and big.cause is Cause.DEMAND_OVER_POOL
        assert (big.numbers["demand"], big.numbers["total_blocks"]) == (257, 64)


def test_sglang_rejects_at_the_front_door():
    scheduler = SglangScheduler(
        SglangServerArgs(seed_geometry(tokens_per_block=1), 2048, 8192, max_running_requests=4)
    )
    result = simulate(
        scheduler, [Request("big", 4096, 16)] + SMALL, max_steps=5000, check_invariants=True
    )
    # 4,096 fits the context length (8,192) but not SGLang's limit of the pool's 2,048 tokens
    # less 6: its scheduler turns the request away as a one-token abort a prefill finishes
    big = result.reasons["big"]
    assert big is not None and big.cause is Cause.FRONT_DOOR
    assert big.message.startswith(
        "Input length (4096 tokens) exceeds the maximum allowed length (2042 tokens)."
    )
    assert result.status["big"] == "rejected"
    assert all(result.status[r.request_id] == "finished" for r in SMALL)


def pressure_scheduler(admission, host_cache_size=None, **kwargs):
    geometry = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=16)
    if admission == "vllm":
        return VllmScheduler(
            VllmEngineArgs(
                geometry, 64, 1008, max_num_seqs=16, max_num_batched_tokens=1024, **kwargs
            )
        )
    if admission == "sglang":
        return SglangScheduler(
            SglangServerArgs(
                KVGeometry(1, 1, 8, tokens_per_block=1),
                1024,
                1024,
                max_running_requests=16,
                max_prefill_tokens=1024,
                **kwargs,
            )
        )
    manager = KVCacheManager(
        geometry,
        64 * geometry.bytes_per_block,
        1024,
        max_batch_size=16,
        host_cache_size=host_cache_size,
    )
    return Scheduler(manager, admission=admission, max_num_tokens=1024, max_batch_size=16, **kwargs)


PRESSURE = poisson_workload(
    60,
    rate=1.0,
    prompt_len=LogNormal(120, 0.6, 8, 400),
    max_new_tokens=LogNormal(80, 0.6, 1, 300),
    seed=7,
)


@pytest.mark.parametrize(
    "admission, kwargs, preempted",
    [
        ("none", dict(host_cache_size=0), "recomputes"),  # no tier below the GPU
        ("none", dict(), "suspensions"),  # the automatic host tier
        ("capacity", dict(chunked_prefill=True), "recomputes"),
        ("vllm", dict(), "recomputes"),
        (
            "sglang",
            dict(),
            "recomputes",
        ),  # its decaying guess of the output fell short: retractions
    ],
)
def test_every_style_finishes_a_workload_under_pressure(admission, kwargs, preempted):
    result = simulate(
        pressure_scheduler(admission, **kwargs), PRESSURE, max_steps=20_000, check_invariants=True
    )
    summary = result.summary()
    assert result.error is None and summary["finished"] == len(PRESSURE)
    assert preempted is None or summary[preempted] > 0  # the pool really was short
    assert summary["goodput_tokens_per_step"] > 0


def test_a_run_is_deterministic_and_leaves_the_callers_requests_alone():
    requests = poisson_workload(
        30, rate=0.5, prompt_len=64, max_new_tokens=LogNormal(40, 1.0), seed=3
    )
    before = [dataclasses.asdict(r) for r in requests]
    first = simulate(pressure_scheduler("capacity"), requests, max_steps=5000)
    second = simulate(pressure_scheduler("capacity"), requests, max_steps=5000)
    assert [dataclasses.asdict(r) for r in requests] == before
    assert first.trace.steps == second.trace.steps and first.trace.events == second.trace.events
    assert first.status == second.status and first.reasons == second.reasons


def test_every_request_ends_with_a_status_and_a_reason():
    requests = [Request("early", 64, 8), Request("late", 64, 8, arrival_step=50)]
    result = simulate(pressure_scheduler("none"), requests, max_steps=5)
    assert result.status == {"early": "running", "late": "waiting"}
    assert result.reasons["early"] == Reason(
        Cause.STILL_RUNNING, dict(state="running", generated=5, max_new_tokens=8, max_steps=5)
    )
    assert result.reasons["late"] == Reason(
        Cause.NOT_SUBMITTED, dict(state="waiting", arrival_step=50, max_steps=5)
    )
    frame = result.requests_to_pandas()
    assert list(frame.cause) == [Cause.STILL_RUNNING, Cause.NOT_SUBMITTED]


def test_idle_steps_are_skipped_until_the_next_arrival():
    requests = [Request("a", 16, 2), Request("b", 16, 2, arrival_step=1000)]
    result = simulate(pressure_scheduler("none"), requests, max_steps=5000)
    assert result.trace.column("step") == [0, 1, 1000, 1001]
    kinds = [(e.step, e.kind, e.request_id) for e in result.trace.events]
    assert kinds[:3] == [(0, "started", "a"), (0, "first_token", "a"), (1, "finished", "a")]


def test_draft_tokens_are_reserved_each_step_and_rewound():
    scheduler = pressure_scheduler("none")
    result = simulate(
        scheduler,
        [Request("spec", 15, 4, num_draft_tokens=3)],
        max_steps=100,
        check_invariants=True,
    )
    assert result.status["spec"] == "finished"
    # 16-token blocks; each step reserves 1 + 3 tokens (19, 20 = 2 blocks), then rewinds the drafts
    assert result.trace.column("used_blocks") == [1, 1, 2, 0]
    assert result.requests["spec"].num_generated == 4


@pytest.mark.parametrize(
    "call, error, text",
    [
        (
            lambda s: simulate(s, [Request("a", 4, 4)], max_steps=0),
            ValueError,
            "max_steps must be in",
        ),
        (
            lambda s: simulate(s, [Request("a", 4, 4), Request("a", 8, 4)]),
            ValueError,
            "appears twice",
        ),
        (lambda s: simulate(s, [("a", 4, 4)]), TypeError, "requests must hold Request objects"),
        (lambda s: simulate(s, Request("a", 4, 4)), TypeError, "requests must be an iterable"),
        (
            lambda s: simulate("scheduler", []),
            TypeError,
            r"scheduler must be a Scheduler \(or a peer",
        ),
    ],
)
def test_bad_simulate_arguments(call, error, text):
    with pytest.raises(error, match=text):
        call(pressure_scheduler("none"))


def test_a_scheduler_runs_once():
    scheduler = pressure_scheduler("none")
    simulate(scheduler, [Request("a", 4, 4)])
    with pytest.raises(ValueError, match="build a fresh Scheduler"):
        simulate(scheduler, [Request("b", 4, 4)])


def test_seed_warning_free_manager_for_the_contract():
    with warnings.catch_warnings():
        warnings.simplefilter("error", MaxSeqLenClampWarning)
        with pytest.raises(MaxSeqLenClampWarning):
            KVCacheManager(KVGeometry(2, 2, 128, "float16", 32), 4 * 2**20, 8192, 1)


def _held_up(host_cache_size, enable_recompute_pause=True):
    """Two chunked prefills that each fit alone beside a generating request, on 15 pages: they
    take turns until both hold part of the pool and nothing can grow."""
    geometry = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=4)
    manager = KVCacheManager(
        geometry,
        15 * geometry.bytes_per_block,
        60,
        max_batch_size=3,
        host_cache_size=host_cache_size,
    )
    scheduler = Scheduler(
        manager,
        admission="capacity",
        max_num_tokens=17,
        max_batch_size=3,
        stall_limit=50,
        chunked_prefill=True,
        enable_recompute_pause=enable_recompute_pause,
    )
    requests = [Request("r0", 10, 16), Request("r1", 29, 0, 1), Request("r2", 45, 0)]
    return simulate(scheduler, requests, max_steps=5000, check_invariants=True)


@pytest.mark.parametrize("host_cache_size, freed_by", [(None, "suspensions"), (0, "recomputes")])
def test_chunked_contexts_that_hold_each_other_up_are_freed_by_the_tier_or_preempt_for_pages(
    host_cache_size, freed_by
):
    """With the automatic host tier a started prefill is evicted to the host; with no tier
    below the GPU, ``preempt_for_pages`` recompute-pauses one. Either way all three finish."""
    result = _held_up(host_cache_size)
    assert result.error is None and set(result.status.values()) == {"finished"}
    assert result.summary()[freed_by] > 0


def test_without_a_lower_tier_or_recompute_pause_the_hold_up_deadlocks_even_under_capacity():
    result = _held_up(0, enable_recompute_pause=False)
    assert isinstance(result.error, SchedulerDeadlock)
    assert result.status == {"r0": "running", "r1": "waiting", "r2": "running"}


def test_a_first_context_chunk_reaches_the_pool_in_six_calls(seed_manager, monkeypatch):
    """The teaching path, as the real stack shows it: the executor's iteration asks the scheduler,
    which asks the manager, whose cache's native resize asks it for the pages."""
    from kvlab.core.pool import PagePool
    from kvlab.run.simulation import Engine

    stacks, allocate = [], PagePool.allocate

    def recording(pool, count):
        stacks.append(traceback.extract_stack()[:-1])
        return allocate(pool, count)

    monkeypatch.setattr(PagePool, "allocate", recording)
    engine = Engine(seed_scheduler(seed_manager, "configured"), [Request("a", 100, 4)])
    assert engine.iterate() and stacks
    frames = [frame.name for frame in stacks[0]]
    calls = frames[frames.index("iterate") :] + ["allocate"]
    assert calls == [
        "iterate",  # Engine: one executor iteration
        "schedule",  # Scheduler: one pass of _schedule_loop
        "_schedule_context",  # its phase 2: one context attempt
        "resize_context",  # KVCacheManager
        "resize",  # KVCache: the native check order
        "grow",  # KVCacheManager: the pages it lacks
        "allocate",  # PagePool
    ]
    assert len(calls) - 1 <= 6
