"""Admission policies: registry, verdicts with numbers, and property tests under every policy.

"capacity" is PR #21720's proposal (not merged); the Scheduler's default stays "none", the
merged behaviour (test_the_default_is_the_merged_behaviour)."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab import (
    ADMISSION_POLICIES,
    KVCacheManager,
    KVGeometry,
    MaxSeqLenClampWarning,
    Request,
    Scheduler,
    SchedulerDeadlock,
    make_admission,
    simulate,
)
from kvlab.core.cause import Cause, Reason
from kvlab.sched.admission import (
    FITS_NOW,
    NEVER_FITS,
    TEMPORARILY_BLOCKED,
    CapacityAdmission,
    demand_blocks,
)

TOY = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, dtype="float16", tokens_per_block=4)


def manager(blocks, max_seq_len=4096, width="configured", slots=8, host_blocks=None):
    """``host_blocks``: pages of the tier below the GPU (None: the automatic host tier)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxSeqLenClampWarning)
        return KVCacheManager(
            TOY,
            blocks * TOY.bytes_per_block,
            max_seq_len,
            slots,
            page_index_policy=width,
            host_cache_size=(None if host_blocks is None else host_blocks * TOY.bytes_per_block),
        )


def test_the_default_is_the_merged_behaviour():
    assert Scheduler(manager(8)).admission.name == "none"


def test_registry_and_instances():
    assert set(ADMISSION_POLICIES) == {"none", "capacity"}
    assert isinstance(make_admission("capacity"), CapacityAdmission)
    policy = CapacityAdmission()
    assert make_admission(policy) is policy
    with pytest.raises(
        ValueError, match=r"admission must be one of \['capacity', 'none'\], got 'fcfs'"
    ):
        make_admission("fcfs")
    for peer, name in (("vllm", "vLLM"), ("sglang", "SGLang")):
        with pytest.raises(
            ValueError,
            match=rf"got '{peer}': {name}'s scheduler is a loop of its "
            rf"own, kvlab.sched.{peer}",
        ):
            make_admission(peer)


def test_capacity_classifies_now_later_and_never():
    policy = CapacityAdmission()
    mgr = manager(16)  # 16 blocks, width 1028
    assert policy.classify(Request("ok", 20, 4), mgr) == (FITS_NOW, None)
    holder = mgr.create_cache("holder")
    holder.resize(40)  # 10 blocks held, 6 free
    feasibility, reason = policy.classify(Request("later", 30, 4), mgr)
    assert feasibility == TEMPORARILY_BLOCKED
    assert reason == Reason(
        Cause.TEMPORARILY_BLOCKED,
        dict(first_blocks=8, free_blocks=6, free_slots=reason.numbers["free_slots"]),
    )
    feasibility, reason = policy.classify(Request("never", 60, 8), mgr)
    assert feasibility == NEVER_FITS
    assert reason == Reason(
        Cause.DEMAND_OVER_POOL,
        dict(demand=17, prompt_len=60, max_new_tokens=8, tokens_per_block=4, total_blocks=16),
    )
    assert policy.admit(Request("later", 30, 4), mgr).admitted  # pressure: retried


def test_capacity_rejects_beyond_the_page_index_span():
    mgr = manager(64, max_seq_len=40)  # width: ceil(41 / 4) -> 12
    verdict = CapacityAdmission().admit(Request("long", 50, 4), mgr)
    assert not verdict.admitted
    assert verdict.reason is not None and verdict.reason.cause is Cause.DEMAND_OVER_PAGE_INDEX
    assert verdict.reason.numbers["demand"] == 14
    assert verdict.reason.numbers["max_blocks_per_seq"] == 12


def test_capacity_rejects_only_the_request_that_can_never_fit():
    requests = [Request(f"r{i}", 24, 8, arrival_step=i) for i in range(6)]
    requests[2] = Request("giant", 60, 8, arrival_step=2)  # 17 blocks > 16
    requests[4] = Request("long_output", 8, 60, arrival_step=4)
    scheduler = Scheduler(manager(16), admission="capacity", max_num_tokens=256, max_batch_size=4)
    result = simulate(scheduler, requests, max_steps=2000, check_invariants=True)
    assert result.ids_with_status("rejected") == ["giant", "long_output"]
    assert len(result.ids_with_status("finished")) == 4 and result.error is None


def test_demand_counts_extra_and_draft_tokens():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxSeqLenClampWarning)
        mgr = KVCacheManager(TOY, 16 * TOY.bytes_per_block, 64, 1, num_extra_kv_tokens=3)
    assert demand_blocks(Request("r", 10, 2, num_draft_tokens=2), mgr) == 5  # 17 tokens


@pytest.mark.parametrize(
    "request_arg, manager_arg, text",
    [
        (-1, None, "request must be a Request, got -1 (int)"),
        ("r", None, "request must be a Request"),
        (None, {}, "manager must be a KVCacheManager, got {} (dict)"),
        (None, "x", "manager must be a KVCacheManager"),
    ],
)
def test_demand_names_a_bad_request_or_manager(request_arg, manager_arg, text):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxSeqLenClampWarning)
        mgr = KVCacheManager(TOY, 16 * TOY.bytes_per_block, 64, 1)
    with pytest.raises(TypeError) as info:
        demand_blocks(
            Request("r", 10, 2) if request_arg is None else request_arg,
            mgr if manager_arg is None else manager_arg,
        )
    assert text in str(info.value)


# -- properties -------------------------------------------------------------------------------

request_specs = st.lists(
    st.tuples(st.integers(1, 80), st.integers(0, 40), st.integers(0, 12)), min_size=1, max_size=8
)


def workload(specs):
    return [
        Request(f"r{i}", prompt, new, arrival) for i, (prompt, new, arrival) in enumerate(specs)
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=request_specs,
    blocks=st.integers(4, 24),
    admission=st.sampled_from(sorted(ADMISSION_POLICIES)),
    width=st.sampled_from(["clamped", "configured"]),
    chunked=st.booleans(),
    host=st.sampled_from([0, 6, None]),
    slots=st.integers(1, 4),
)
def test_invariants_hold_under_every_policy(specs, blocks, admission, width, chunked, host, slots):
    mgr = manager(blocks, max_seq_len=96, width=width, slots=slots, host_blocks=host)
    scheduler = Scheduler(
        mgr,
        admission=admission,
        max_num_tokens=64,
        max_batch_size=3,
        stall_limit=40,
        chunked_prefill=chunked,
    )
    result = simulate(scheduler, workload(specs), max_steps=600, check_invariants=True)
    assert set(result.status) == {f"r{i}" for i in range(len(specs))}
    assert set(result.status.values()) <= {"finished", "rejected", "waiting", "running"}
    assert all(result.reasons.values())
    if set(result.status.values()) <= {"finished", "rejected"}:
        assert mgr.free_blocks == mgr.total_blocks and not mgr.caches  # nothing leaked


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=request_specs,
    blocks=st.integers(4, 24),
    width=st.sampled_from(["clamped", "configured"]),
    host=st.sampled_from([0, None]),
)
def test_capacity_never_stalls_when_every_request_fits_alone(specs, blocks, width, host):
    mgr = manager(blocks, max_seq_len=96, width=width, slots=3, host_blocks=host)
    policy = CapacityAdmission()
    requests = [r for r in workload(specs) if policy.admit(r, mgr).admitted]
    scheduler = Scheduler(
        mgr, admission=policy, max_num_tokens=128, max_batch_size=3, stall_limit=200
    )
    result = simulate(scheduler, requests, max_steps=20_000, check_invariants=True)
    assert result.error is None
    assert set(result.status.values()) <= {"finished"}


@pytest.mark.parametrize(
    "chunked, draft, prompt, cause",
    [
        (True, 8, 1, (Cause.STEP_OVER_TOKEN_BUDGET, dict(step_tokens=9, max_num_tokens=4))),
        (
            False,
            3,
            3,
            (Cause.CONTEXT_OVER_TOKEN_BUDGET, dict(context_tokens=6, num_draft_tokens=3)),
        ),
    ],
)
def test_capacity_rejects_a_step_the_token_budget_never_holds(chunked, draft, prompt, cause):
    """A lone request whose step never fits max_num_tokens used to be admitted and deadlock;
    "capacity" rejects it at arrival and names the limit, "none" keeps the real behaviour."""

    def run(admission):
        scheduler = Scheduler(
            manager(64), admission, max_num_tokens=4, chunked_prefill=chunked, stall_limit=5
        )
        return simulate(scheduler, [Request("r", prompt, 2, num_draft_tokens=draft)], max_steps=50)

    result = run("capacity")
    reason = result.reasons["r"]
    assert result.status["r"] == "rejected" and reason is not None
    assert reason.cause is cause[0] and cause[1].items() <= reason.numbers.items()
    assert result.error is None
    assert isinstance(run("none").error, SchedulerDeadlock)


def test_a_chunk_budget_below_one_page_is_refused_at_construction():
    with pytest.raises(ValueError, match="max_num_tokens must be at least chunk_unit_size=4"):
        Scheduler(manager(64), max_num_tokens=3, chunked_prefill=True, max_context_length=64)
