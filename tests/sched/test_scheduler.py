"""Scheduler scenarios modelled on the real KVCacheV2Scheduler's tests (docs/REFERENCE.md §4).

A toy geometry keeps the numbers small: 4 tokens per block, 128 bytes per block, so
``pool(n)`` is a pool of n blocks = 4n tokens.
"""

from __future__ import annotations

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
)
from kvlab.core.cause import Cause, Reason
from kvlab.sched.deadlock import DEADLOCK_REMEDY

TOY = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, dtype="float16", tokens_per_block=4)


def pool(blocks: int, max_seq_len: int = 64, slots: int = 8, width: str = "configured", **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxSeqLenClampWarning)
        return KVCacheManager(
            TOY, blocks * TOY.bytes_per_block, max_seq_len, slots, page_index_policy=width, **kwargs
        )


def run_pass(scheduler, *requests):
    """Submit requests (if any) and run one pass; execute it as simulate() would."""
    for request in requests:
        assert scheduler.submit(request).admitted
    batch = scheduler.schedule()
    for request in batch.context_requests:
        request.context_current_position += request.context_chunk_size
        if request.is_context_finished:
            request.num_generated += 1
    for request in batch.generation_requests:
        request.num_generated += 1
    for request in batch.fitting_disagg_gen_init_requests:  # the KV transfer lands
        request.context_current_position, request.num_generated = request.prompt_len, 1
    scheduler.check_invariants()
    return batch


def ids(requests):
    return [r.request_id for r in requests]


def started(scheduler, *specs):
    """Submit (request_id, prompt_len[, max_new_tokens]) requests and run the one pass that
    schedules all their contexts: they are then generating, with capacity == prompt_len."""
    requests = [Request(spec[0], spec[1], spec[2] if len(spec) > 2 else 100) for spec in specs]
    batch = run_pass(scheduler, *requests)
    assert ids(batch.context_requests) == ids(requests)
    return requests


def test_failed_context_allocation_skips_and_the_following_generation_is_scheduled():
    scheduler = Scheduler(pool(8), max_num_tokens=64)
    (gen,) = started(scheduler, ("gen", 16))  # 4 blocks, then grows
    big, small = Request("big", 20, 4), Request("small", 8, 4)  # 5 blocks: never fits now
    batch = run_pass(scheduler, big, small)
    assert ids(batch.generation_requests) == ["gen"]
    assert ids(batch.context_requests) == ["small"]  # SKIP continues past "big"
    assert big.state == "waiting" and big.num_refusals == 1
    assert "big" not in scheduler.manager.caches  # its cache was freed
    assert gen.num_generated == 2


def test_a_failed_context_consumes_no_budget():
    scheduler = Scheduler(pool(7), max_num_tokens=24)
    big, small = Request("big", 20, 4), Request("small", 16, 4)  # 20 + 16 > 24: only one fits
    scheduler.submit(Request("holder", 8, 100))  # 3 blocks once it grows: 4 left
    run_pass(scheduler)
    batch = run_pass(scheduler, big, small)
    assert ids(batch.context_requests) == ["small"]
    assert batch.num_tokens == 1 + 16  # the holder's step + small only


def test_non_chunked_budget_miss_stops_later_contexts():
    scheduler = Scheduler(pool(64), max_num_tokens=100)
    batch = run_pass(scheduler, Request("a", 60, 4), Request("b", 50, 4), Request("c", 10, 4))
    assert ids(batch.context_requests) == ["a"]  # "b" STOPs; "c" would have fit
    assert scheduler.manager.caches.keys() == {"a"}


def test_non_chunked_prepare_failure_stops_later_contexts():
    scheduler = Scheduler(pool(64, slots=1), max_num_tokens=100)
    run_pass(scheduler, Request("holder", 8, 100))  # takes the only page-index slot
    batch = run_pass(scheduler, Request("a", 8, 4), Request("b", 8, 4))
    assert ids(batch.generation_requests) == ["holder"]
    assert batch.context_requests == []


def test_chunked_context_takes_the_budget_left_rounded_to_the_unit():
    scheduler = Scheduler(pool(64), max_num_tokens=30, chunked_prefill=True)
    a, b = Request("a", 20, 4), Request("b", 50, 4)
    batch = run_pass(scheduler, a, b)
    # 10 left -> 8; _sort_requests puts b's non-last chunk before a's last one
    assert [(r.request_id, r.context_chunk_size) for r in batch.context_requests] == [
        ("b", 8),
        ("a", 20),
    ]
    batch = run_pass(scheduler)
    assert ids(batch.generation_requests) == ["a"]
    assert batch.context_requests[0].context_chunk_size == 28  # 29 left -> 28
    assert b.context_current_position == 36


def test_chunked_failures_skip_and_a_failed_first_chunk_is_retried_from_scratch():
    scheduler = Scheduler(pool(5), max_num_tokens=64, chunked_prefill=True)
    (holder,) = started(scheduler, ("holder", 12, 2))  # 4 blocks once it grows, 1 left
    late = Request("late", 8, 2)  # first chunk needs 2 blocks
    small = Request("small", 2, 2)
    batch = run_pass(scheduler, late, small)  # holder finishes its 2 tokens
    assert ids(batch.context_requests) == ["small"]  # "late" SKIPped, not STOPped
    assert late.state == "waiting" and late.context_current_position == 0
    assert "late" not in scheduler.manager.caches
    assert holder.is_finished_generating
    scheduler.finish(holder)
    batch = run_pass(scheduler)
    assert ids(batch.context_requests) == ["late"] and late.context_chunk_size == 8


def test_eviction_suspends_from_the_tail():
    scheduler = Scheduler(pool(6), max_num_tokens=64)  # the automatic host tier: 6 pages
    a, b, c = started(scheduler, ("a", 8), ("b", 8), ("c", 8))  # 2 blocks each: pool full
    batch = run_pass(scheduler)  # a grows to 9 tokens: a 3rd block
    assert ids(batch.paused_requests) == ["c"]  # the tail, not "b"
    assert ids(batch.generation_requests) == ["a", "b"]  # c's 2 blocks serve a and b
    assert c.state == "suspended" and scheduler.manager.host_tier.used_blocks == 2
    assert batch.recompute_paused_requests == []
    batch = run_pass(scheduler)
    assert c.state == "suspended"  # past the frontier: not resumed
    scheduler.finish(a)
    run_pass(scheduler)
    assert c.state == "running" and scheduler.manager.host_tier.used_blocks == 0  # resumed


def test_without_a_host_tier_suspension_frees_nothing_then_victims_are_recompute_paused():
    scheduler = Scheduler(pool(6, host_cache_size=0), max_num_tokens=64)
    a, b, c = started(scheduler, ("a", 8), ("b", 8), ("c", 8))
    batch = run_pass(scheduler)  # c, then b, suspended in place: no page freed
    assert ids(batch.paused_requests) == ["c", "b", "a"]  # a suspends itself last
    assert batch.recompute_paused_requests == [] and batch.generation_requests == []
    assert scheduler.manager.free_blocks == 0 and scheduler.stalled_passes == 0
    batch = run_pass(scheduler)  # suspended last pass: now recompute-pause candidates
    assert ids(batch.recompute_paused_requests) == ["c"]
    assert ids(batch.generation_requests) == ["a", "b"] and batch.paused_requests == []
    assert c.state == "waiting" and c.context_current_position == 0
    assert c.context_len == 8 + 1  # prompt + its generated token


def test_first_chunks_are_never_victims():
    scheduler = Scheduler(pool(5), max_num_tokens=64, chunked_prefill=True)
    a, b = started(scheduler, ("a", 8), ("b", 8))  # 2 blocks each, 1 free
    fresh = Request("fresh", 4, 4)  # the tail: a first chunk
    batch = run_pass(scheduler, fresh)  # a takes the free block
    assert ids(batch.generation_requests) == ["a"]
    assert ids(batch.paused_requests) == ["b"]  # b suspends itself, not fresh
    for _ in range(3):  # the pool is full, so b may not resume: phase 1 stops at b every pass
        batch = run_pass(scheduler)
        assert ids(batch.generation_requests) == ["a"] and b.state == "suspended"
        assert batch.paused_requests == [] and batch.recompute_paused_requests == []
        assert fresh.is_first_context_chunk and fresh.state == "waiting"


def test_a_generation_that_cannot_grow_suspends_itself_and_stops_phase_one():
    scheduler = Scheduler(pool(3), max_num_tokens=64)
    (a,) = started(scheduler, ("a", 12))  # the whole pool
    batch = run_pass(scheduler)
    assert ids(batch.paused_requests) == ["a"] and a.state == "suspended"
    assert scheduler.stalled_passes == 0  # a suspension is progress
    assert scheduler.manager.free_blocks == 0  # its pages stay, held on the GPU
    batch = run_pass(scheduler)  # utilization 3/3 > max_util_for_resume: no resume
    assert not batch.made_progress and a.state == "suspended" and a.num_suspensions == 1
    assert scheduler.stalled_passes == 1


def test_deadlock_on_the_stall_limit_th_stalled_pass():
    """A lone request that never fits: passes 1 .. K-1 stall, pass K raises (K = stall_limit,
    as the real ``_stalled_schedules >= _DEADLOCK_STALL_ITERS``)."""
    stall_limit = 5
    scheduler = Scheduler(pool(8), max_num_tokens=64, stall_limit=stall_limit)
    scheduler.submit(Request("big", 40, 4))  # 10 blocks > 8
    for stalled in range(1, stall_limit):
        assert run_pass(scheduler).made_progress is False
        assert scheduler.stalled_passes == stalled
    with pytest.raises(SchedulerDeadlock) as info:
        scheduler.schedule()
    assert str(info.value) == (
        "V2 scheduler deadlock: 0 generation and 1 context request(s) active but none could be "
        f"scheduled, suspended or preempted in {stall_limit} consecutive attempts. The KV cache "
        f"pool is likely exhausted. {DEADLOCK_REMEDY}"
    )
    assert isinstance(info.value, RuntimeError) and scheduler.iteration == stall_limit


def test_deadlock_after_stall_limit_plus_two_passes_when_the_first_two_progressed():
    """The context fits (progress on pass 1); its growth never does, so it suspends itself
    (progress on pass 2) and may not resume while it fills the pool: stall_limit + 2 passes."""
    stall_limit = 4
    scheduler = Scheduler(pool(3), max_num_tokens=64, stall_limit=stall_limit)
    request = Request("grows", 12, 8)
    run_pass(scheduler, request)
    with pytest.raises(SchedulerDeadlock, match="1 generation and 0 context request"):
        while True:
            run_pass(scheduler)
    assert scheduler.iteration == stall_limit + 2


def test_progress_of_others_resets_the_stall_counter():
    scheduler = Scheduler(pool(8), max_num_tokens=64, stall_limit=3)
    run_pass(scheduler, Request("big", 40, 4), Request("small", 4, 10))
    for _ in range(8):  # "big" starves, no deadlock
        run_pass(scheduler)
        assert scheduler.stalled_passes == 0


def test_disagg_generation_init_is_outside_the_budgets_and_retried():
    scheduler = Scheduler(pool(4, slots=3), max_num_tokens=1, max_batch_size=1)
    (holder,) = started(scheduler, ("holder", 1))
    disagg = Request("disagg", 8, 4, disagg_generation_init=True)  # 2 blocks: fits
    too_big = Request("too_big", 16, 4, disagg_generation_init=True)  # 4 blocks: not now
    batch = run_pass(scheduler, disagg, too_big)
    assert ids(batch.generation_requests) == ["holder"]  # the one batch slot, one token
    assert ids(batch.fitting_disagg_gen_init_requests) == ["disagg"]
    assert too_big.num_refusals == 1 and too_big.state == "waiting"  # retried next iteration
    assert "too_big" not in scheduler.manager.caches


def test_page_index_too_short_reaches_the_caller_with_the_native_message():
    scheduler = Scheduler(pool(16, max_seq_len=256, width="clamped"), max_num_tokens=512)
    scheduler.submit(Request("big", 256, 4))  # 64 entries > the 20-entry row
    with pytest.raises(PageIndexTooShort) as info:
        scheduler.schedule()
    assert str(info.value) == "User-provided base page indices is too short"
    assert info.value.request_id == "big"
    assert "needs 64 page-index entries, the row has 20" in info.value.__notes__[0]


def test_front_door_rejects_a_prompt_over_max_num_tokens_without_chunking():
    scheduler = Scheduler(pool(64), max_num_tokens=100)
    verdict = scheduler.submit(Request("long", 101, 4))
    assert not verdict.admitted
    assert verdict.reason == Reason(
        Cause.FRONT_DOOR,
        message="The sum of prompt length (101.0), query length (0) should not exceed "
        "max_num_tokens (100)",
    )
    chunked = Scheduler(pool(64), max_num_tokens=100, chunked_prefill=True)
    assert chunked.submit(Request("long", 101, 4)).admitted


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(admission="fifo"), ValueError, "admission must be one of"),
        (dict(max_num_tokens=0), ValueError, "max_num_tokens must be in [1, "),
        (dict(max_batch_size=1.5), TypeError, "max_batch_size must be an int"),
        (dict(stall_limit=0), ValueError, "stall_limit must be in [1, "),
        (dict(scheduler_capacity=0), ValueError, "scheduler_capacity must be in [1, "),
        (dict(chunked_prefill="yes"), TypeError, "chunked_prefill must be a bool"),
        (
            dict(chunked_prefill=True, max_context_length=16, chunk_unit_size=32),
            ValueError,
            "chunk_unit_size must be in [1, max_context_length=16]",
        ),
    ],
)
def test_bad_scheduler_arguments_name_the_parameter(kwargs, error, text):
    with pytest.raises(error) as info:
        Scheduler(pool(8), **kwargs)
    assert text in str(info.value)


def test_submit_rejects_duplicates_and_used_requests():
    scheduler = Scheduler(pool(8))
    scheduler.submit(Request("a", 4, 4))
    with pytest.raises(ValueError, match="already submitted"):
        scheduler.submit(Request("a", 4, 4))
    with pytest.raises(TypeError, match="request must be a Request"):
        scheduler.submit("b")
    with pytest.raises(TypeError, match="manager must be a KVCacheManager"):
        Scheduler("manager")
