"""kvlab.sched.vllm: vLLM 0.34.0's scheduling loop, its start-up and front-door checks with
vLLM's messages, and the invariants under random workloads. (tests/conformance/test_real_peers.py
holds it to the real vLLM, request by request.)"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab import KVGeometry, Request, VllmEngineArgs, VllmScheduler, simulate
from kvlab.analysis.presets import seed_geometry
from kvlab.core.cause import Cause
from kvlab.core.kv_cache import KVCache
from kvlab.core.request import RequestState
from kvlab.sched.vllm import (
    estimated_max_model_len,
    format_gib,
    front_door_error,
    startup_error,
)

SEED = seed_geometry()  # 2,048 B a token, 32-token blocks
TOY = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=4)


def engine(blocks=64, max_model_len=None, **kwargs):
    """vLLM's plain ``Scheduler`` without caching: the mechanics each test names (caching and
    the AsyncScheduler, both on by default, have tests of their own)."""
    fields = dict(
        max_num_seqs=4,
        max_num_batched_tokens=8192,
        enable_chunked_prefill=False,
        enable_prefix_caching=False,
        async_scheduling=False,
    )
    fields.update(kwargs)
    return VllmEngineArgs(
        SEED, blocks, max_model_len or estimated_max_model_len(SEED, blocks), **fields
    )


def test_start_up_refuses_a_max_model_len_the_pool_less_its_null_block_cannot_hold():
    assert estimated_max_model_len(SEED, 64) == 2016  # 63 usable blocks, not 64
    assert startup_error(engine(max_model_len=2016)) is None
    assert startup_error(engine(max_model_len=2048)) == (
        "To serve at least one request with the model's max seq len (2048), (0.0 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (0.0 GiB). Based on the "
        "available memory, the estimated maximum model length is 2016. Try increasing "
        "`gpu_memory_utilization` when initializing the engine (this flag also controls CPU "
        "memory reservation on the CPU backend, despite its name). Decreasing `max_model_len` "
        "also reduces what is needed. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )
    assert format_gib(37_480_000_000) == "34.91" and format_gib(1 << 20) == "0.0"
    assert startup_error(engine(blocks=1, max_model_len=32)).startswith(
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
    )
    with pytest.raises(ValueError, match=r"estimated maximum model length is 2016"):
        VllmScheduler(engine(max_model_len=2048))


def test_start_up_checks_the_token_budget_first():
    assert startup_error(engine(max_model_len=2048, max_num_batched_tokens=1024)) == (
        "max_num_batched_tokens (1024) is smaller than max_model_len (2048). This effectively "
        "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject "
        "longer sequences. Please increase max_num_batched_tokens or decrease max_model_len."
    )
    assert startup_error(engine(max_num_batched_tokens=3, enable_chunked_prefill=True)) == (
        "max_num_batched_tokens (3) must be greater than or equal to max_num_seqs (4)."
    )


def test_a_pool_shrunk_after_start_up_keeps_the_max_model_len_it_started_with():
    args = engine().replace(num_gpu_blocks=40, startup_num_gpu_blocks=64)
    assert args.startup_blocks == 64 and startup_error(args) is None
    assert startup_error(args.replace(startup_num_gpu_blocks=None)).startswith(  # a 40-block start
        "To serve at least one request with the model's max seq len (2016)"
    )
    assert VllmScheduler(args).manager.free_blocks == 39


def test_block_zero_is_the_null_block_of_a_real_pool(device):
    scheduler = VllmScheduler(engine(), device=device)
    pool = scheduler.manager.pool
    assert pool.storage.device.type == device and pool.nbytes == 64 * SEED.bytes_per_block
    assert scheduler.null_block == 0 and pool.is_allocated(0)
    manager = scheduler.manager
    assert not manager.caches and manager.free_slots == 4  # no cache, no row: max_num_seqs rows
    assert manager.free_blocks == 63
    scheduler.check_invariants()
    result = simulate(
        scheduler,
        [Request("a", 1000, 8), Request("b", 1000, 8, arrival_step=1)],
        check_invariants=True,
    )
    assert result.status == {"a": RequestState.FINISHED, "b": RequestState.FINISHED}
    assert result.requests["b"].first_scheduled_step == result.requests["a"].end_step + 1


def test_the_front_door_rejects_with_vllms_messages():
    assert front_door_error(Request("a", 2017, 4), 2016).startswith(
        "The decoder prompt (length 2017) is longer than the maximum model length of 2016."
    )
    assert front_door_error(Request("b", 2016, 4), 2016).startswith(
        "The decoder prompt (length 2016) plus the number of requested output tokens (at least 1) "
        "is longer than the maximum model length of 2016."
    )
    assert front_door_error(Request("c", 8, 0), 2016) == (
        "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
    )
    assert front_door_error(Request("d", 2015, 4), 2016) is None
    with pytest.raises(ValueError, match="num_draft_tokens=0"):
        VllmScheduler(engine()).submit(Request("e", 8, 4, num_draft_tokens=1))
    with pytest.raises(ValueError, match="cache_salt must be None for kvlab's vLLM peer"):
        VllmScheduler(engine()).submit(Request("s", 8, 4, cache_salt="tenant-a"))


def test_a_sequence_stops_at_max_model_len():
    result = simulate(VllmScheduler(engine()), [Request("r", 2000, 100)], check_invariants=True)
    request = result.requests["r"]
    assert (
        result.status["r"] is RequestState.FINISHED and request.num_generated == 16
    )  # 2000 + 16 = 2016
    reason = result.reasons["r"]
    assert reason is not None and reason.cause is Cause.FINISHED
    assert reason.numbers["stopped_at"] == 2016 and reason.numbers["max_new_tokens"] == 100


def test_a_prompt_over_the_usable_pool_blocks_the_head_of_the_queue_forever():
    scheduler = VllmScheduler(engine().replace(num_gpu_blocks=40, startup_num_gpu_blocks=64))
    requests = [Request("head", 1800, 4), Request("behind", 8, 4, arrival_step=1)]
    result = simulate(scheduler, requests, max_steps=500, check_invariants=True)
    assert result.status == {"head": RequestState.WAITING, "behind": RequestState.WAITING}
    assert result.error is None and result.end_step == 500  # no stall detector
    assert result.requests["head"].num_refusals == 500


def test_chunked_prefill_without_full_prompt_reservation_preempts_itself_in_a_loop():
    args = engine(enable_chunked_prefill=True, max_num_batched_tokens=512).replace(
        num_gpu_blocks=40, startup_num_gpu_blocks=64, scheduler_reserve_full_isl=False
    )
    result = simulate(VllmScheduler(args), [Request("long", 1800, 4)], max_steps=40)
    recomputes = result.trace.column("num_recompute_paused")
    # chunks of 512 tokens take 16 and 32 blocks; the third would need 48: the request is the
    # only one running, so it preempts itself and starts over at the next step, for good
    assert recomputes[:6] == [0, 0, 1, 0, 0, 1]
    assert result.requests["long"].num_recomputes == sum(recomputes) == 13
    assert result.status["long"] is RequestState.RUNNING and result.error is None


def test_no_admission_in_a_step_that_preempted_and_the_victim_goes_back_to_the_head():
    args = engine(9, 32).replace(geometry=TOY, max_num_batched_tokens=64)  # 8 blocks of 4
    requests = [Request("a", 14, 10), Request("b", 14, 10), Request("c", 4, 2, arrival_step=1)]
    result = simulate(
        VllmScheduler(args, debug=True), requests, max_steps=200, check_invariants=True
    )
    events = [
        (e.step, e.kind, e.request_id)
        for e in result.trace.events
        if e.kind in ("started", "recompute_paused", "finished")
    ]
    # a and b take 4 blocks each. "c" (one block) waits behind a full pool; at step 3 "a" needs a
    # fifth block and "b", admitted last, is preempted to the head of the queue, where it
    # needs 4 blocks again: "c" waits behind it until "a" finishes
    assert events[:4] == [
        (0, "started", "a"),
        (0, "started", "b"),
        (3, "recompute_paused", "b"),
        (9, "finished", "a"),
    ]
    assert (10, "started", "c") in events
    assert all(status is RequestState.FINISHED for status in result.status.values())


# --- prefix caching ------------------------------------------------------------------------------


def cached(blocks: int, max_model_len: int, **kwargs) -> VllmEngineArgs:
    """TOY's 4-token blocks with prefix caching on, chunks of 64 tokens, vLLM's plain
    ``Scheduler`` (the AsyncScheduler has tests of its own)."""
    fields = dict(max_num_seqs=4, max_num_batched_tokens=64, async_scheduling=False)
    return VllmEngineArgs(TOY, blocks, max_model_len, **(fields | kwargs))


def shared(request_id, prompt_len, max_new_tokens, arrival_step, hashes):
    """A request whose prompt is the blocks of 8 tokens that ``hashes`` name."""
    return Request(
        request_id,
        prompt_len,
        max_new_tokens,
        arrival_step,
        prefix_hashes=hashes,
        tokens_per_hash=8,
    )


def tokens_at(result, request_id):
    """The tokens scheduled in the step the request was first admitted."""
    step = result.requests[request_id].first_scheduled_step
    return next(row.tokens_scheduled for row in result.trace.steps if row.step == step)


@pytest.mark.parametrize("caching", [True, False])
def test_a_hit_stops_one_token_short_and_costs_no_token_budget(caching):
    # "a" (16 tokens, 4 blocks) is cached when it is allocated; after it finished "b" repeats it
    # and hits 3 blocks (a hit leaves the last token to compute, so a prompt of exactly 4
    # blocks hits 3 of them), "c" extends it and hits all 4: 4 + 4 tokens in their step
    requests = [
        shared("a", 16, 2, 0, (1, 2)),
        shared("b", 16, 2, 4, (1, 2)),
        shared("c", 20, 2, 4, (1, 2, 3)),
    ]
    args = cached(16, 60, enable_prefix_caching=caching)
    result = simulate(VllmScheduler(args, debug=True), requests, check_invariants=True)
    assert set(result.status.values()) == {RequestState.FINISHED}
    hits = {i: r.prepopulated_prompt_len for i, r in result.requests.items()}
    assert hits == ({"a": 0, "b": 12, "c": 16} if caching else dict.fromkeys("abc", 0))
    assert tokens_at(result, "b") == (8 if caching else 36)


def test_a_free_hit_still_counts_against_the_free_blocks():
    # 7 usable blocks. "a" leaves its 4 blocks cached and free; "r" takes 2 of the 3 others.
    # "b" (6 blocks) hits a's 4: vLLM counts them as taken from the 5 free blocks, so it needs
    # 6 - 4 + 4 = 6 > 5 and waits until "r" finishes and frees its blocks
    requests = [
        shared("a", 16, 1, 0, (1, 2)),
        Request("r", 8, 8, 1),
        shared("b", 24, 1, 2, (1, 2, 3)),
    ]
    result = simulate(VllmScheduler(cached(8, 28), debug=True), requests, check_invariants=True)
    assert result.requests["a"].end_step == 0
    assert result.requests["b"].first_scheduled_step == result.requests["r"].end_step + 1


def test_eviction_takes_the_oldest_cached_block_first_and_a_requests_deepest_first():
    # 11 usable blocks. "x", then "y", leave 4 cached blocks each; "z" (6 blocks) takes the 3
    # blocks never cached and evicts 3 from the free queue's front: x's, deepest first. The
    # probes then find all of y's blocks (16 tokens) and x's first block only (4 tokens)
    requests = [
        shared("x", 16, 1, 0, (1, 2)),
        shared("y", 16, 1, 1, (3, 4)),
        Request("z", 22, 1, 2),
        shared("y-probe", 17, 1, 3, (3, 4, 5)),
        shared("x-probe", 17, 1, 3, (1, 2, 5)),
    ]
    result = simulate(VllmScheduler(cached(12, 44), debug=True), requests, check_invariants=True)
    hits = {i: r.prepopulated_prompt_len for i, r in result.requests.items()}
    assert hits == {"x": 0, "y": 0, "z": 0, "y-probe": 16, "x-probe": 4}


@pytest.mark.parametrize("caching", [True, False])
def test_a_preempted_request_keeps_its_cached_blocks_and_hits_those_not_evicted(caching):
    # 8 usable blocks. "a" and "b" decode until at step 9 "a" needs a fifth block: "b",
    # admitted last, is preempted with 4 full blocks cached. "a" evicts b's deepest three as it
    # grows to 7 blocks; when "a" finishes, "b" comes back to its first block (4 tokens)
    args = cached(9, 32, scheduler_reserve_full_isl=False, enable_prefix_caching=caching)
    requests = [Request("a", 8, 20), Request("b", 8, 12)]
    result = simulate(VllmScheduler(args, debug=True), requests, check_invariants=True)
    b = result.requests["b"]
    assert [e.step for e in result.trace.events if e.kind == "recompute_paused"] == [9]
    assert b.prepopulated_prompt_len == (4 if caching else 0)
    assert tokens_at(result, "a") == 16  # both prompts at step 0
    assert b.num_recomputes == 1 and result.status["b"] is RequestState.FINISHED


def test_requests_finishing_in_one_step_free_their_blocks_in_the_order_they_ran():
    # at step 3 "d" decodes its last token, then "p" is admitted and finishes with its one
    # token: vLLM frees d's cached blocks first, so "z" evicts those and the first probe finds
    # p's (the second finds nothing: d's are gone)
    requests = [
        shared("d", 8, 4, 0, (1,)),
        shared("p", 8, 1, 3, (2,)),
        Request("z", 16, 1, 4),
        shared("p-probe", 9, 1, 5, (2, 9)),
        shared("d-probe", 9, 1, 5, (1, 9)),
    ]
    result = simulate(VllmScheduler(cached(7, 24), debug=True), requests, check_invariants=True)
    assert result.requests["d"].end_step == result.requests["p"].end_step == 3
    hits = {i: r.prepopulated_prompt_len for i, r in result.requests.items()}
    assert (hits["d-probe"], hits["p-probe"]) == (0, 8)


def test_a_block_computed_twice_stays_cached_twice_and_the_first_is_found_first():
    scheduler = VllmScheduler(cached(9, 32))
    prefix_cache, manager = scheduler.prefix_cache, scheduler.manager
    assert prefix_cache is not None and manager.prefix_cache is prefix_cache
    one, two = manager.create_cache("one"), manager.create_cache("two")
    assert manager.grow_each([one], 8) and manager.grow_each([two], 4)
    prefix_cache.cache(one.pages, 0, [11, 12])
    prefix_cache.cache(two.pages, 0, [11])  # the same first block, computed again
    one.committed, two.committed = 2, 1
    assert prefix_cache.committed_blocks == 3
    assert prefix_cache.longest_hit([11, 12, 13], 3) == one.pages
    (first, second), copy = one.pages, two.pages[0]
    manager.free(one)  # freed last first: the queue is second, first, then copy
    manager.free(two)
    manager.check_invariants()
    for evicted, found in [(second, [first]), (first, [copy]), (copy, [])]:
        freed = prefix_cache.evict(1)
        manager.pool.free(freed)
        assert freed == [evicted] and prefix_cache.longest_hit([11, 12], 2) == found
    manager.check_invariants()


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_async_scheduling_frees_a_finished_request_one_batch_later(async_scheduling):
    # one sequence at a time: a's last token is sampled at step 1; the AsyncScheduler processes
    # that batch after schedule(2), which schedules nothing, so b starts at step 3, not 2
    args = cached(16, 60, max_num_seqs=1, async_scheduling=async_scheduling)
    requests = [Request("a", 8, 2), Request("b", 8, 2)]
    result = simulate(VllmScheduler(args, debug=True), requests, check_invariants=True)
    assert result.requests["a"].end_step == 1
    assert result.requests["b"].first_scheduled_step == (3 if async_scheduling else 2)
    tokens = [row.tokens_scheduled for row in result.trace.steps]
    assert tokens == ([8, 1, 0, 8, 1, 0] if async_scheduling else [8, 1, 8, 1])


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_run_that_stops_with_a_last_token_in_flight_leaves_it_running(async_scheduling):
    # a's last token is sampled at step 1; a run of two steps stops before the AsyncScheduler
    # processes that batch, so a has not ended (the real run stored as
    # tiny/stops-as-the-last-token-samples/async agrees)
    args = cached(16, 60, max_num_seqs=1, async_scheduling=async_scheduling)
    result = simulate(VllmScheduler(args), [Request("a", 8, 2)], max_steps=2)
    a = result.requests["a"]
    if async_scheduling:
        assert result.status["a"] is RequestState.RUNNING and a.end_step is None
        assert a.reason.cause is Cause.STILL_RUNNING and a.num_generated == 2
    else:
        assert result.status["a"] is RequestState.FINISHED and a.end_step == 1


def test_the_defaults_are_vllms_own():
    args = VllmEngineArgs(TOY, 16, 60)  # vllm/config/cache.py, vllm/config/vllm.py (0.34)
    assert args.enable_prefix_caching and args.async_scheduling


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_request_preempted_with_its_last_token_in_flight_is_finished_by_it(async_scheduling):
    # 4 usable blocks: a holds 2 and needs a third at step 4; b's last token is sampled at step
    # 3. The AsyncScheduler still holds b's 2 blocks at schedule(4): it preempts b, the last
    # admitted, and b's token then finishes it while preempted
    args = cached(5, 16, enable_prefix_caching=False, async_scheduling=async_scheduling)
    requests = [Request("a", 5, 9), Request("b", 4, 4)]
    result = simulate(VllmScheduler(args, debug=True), requests, check_invariants=True)
    assert result.status == {"a": RequestState.FINISHED, "b": RequestState.FINISHED}
    assert result.requests["b"].end_step == 3
    assert result.requests["b"].num_recomputes == (1 if async_scheduling else 0)
    paused = [e.step for e in result.trace.events if e.kind == "recompute_paused"]
    assert paused == ([4] if async_scheduling else [])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(st.integers(1, 60), st.integers(0, 30), st.integers(0, 10)),
        min_size=1,
        max_size=10,
    ),
    blocks=st.integers(2, 24),
    chunked=st.booleans(),
    reserve=st.booleans(),
    budget=st.integers(4, 80),
    seqs=st.integers(1, 4),
    watermark=st.sampled_from([0.0, 0.2]),
    shrink=st.integers(0, 6),
    caching=st.booleans(),
    async_scheduling=st.booleans(),
)
def test_invariants_and_a_stated_end_for_every_request(
    specs, blocks, chunked, reserve, budget, seqs, watermark, shrink, caching, async_scheduling
):
    max_model_len = estimated_max_model_len(TOY, blocks)
    args = VllmEngineArgs(
        TOY,
        max(2, blocks - shrink),
        max_model_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=max(budget, seqs, 0 if chunked else max_model_len),
        enable_chunked_prefill=chunked,
        scheduler_reserve_full_isl=reserve,
        watermark=watermark,
        startup_num_gpu_blocks=blocks,
        enable_prefix_caching=caching,
        async_scheduling=async_scheduling,
    )
    # with caching, prompts share the first of their 8-token blocks with one in three others
    requests = [
        shared(f"r{i}", p, m, a, (i % 3, i, i)[: -(-p // 8)]) for i, (p, m, a) in enumerate(specs)
    ]
    scheduler = VllmScheduler(args, debug=True)
    result = simulate(scheduler, requests, max_steps=400, check_invariants=True)
    assert set(result.status) == {r.request_id for r in requests}
    assert all(result.reasons.values())
    for request in result.requests.values():
        if result.status[request.request_id] is RequestState.FINISHED:
            assert request.num_generated == min(
                request.max_new_tokens, max_model_len - request.prompt_len
            )
    if set(result.status.values()) <= {RequestState.FINISHED, RequestState.REJECTED}:
        assert scheduler.manager.free_blocks == scheduler.manager.total_blocks - 1  # the null block


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_a_decode_within_its_blocks_decides_as_allocate_slots(seed, caching, monkeypatch):
    rng = random.Random(seed)
    prompts = [rng.randint(1, 24) for _ in range(12)]
    requests = [
        shared(f"r{i}", p, rng.randint(1, 16), rng.randint(0, 20), (1, 2, 3)[: -(-p // 8)])
        for i, p in enumerate(prompts)
    ]
    args = cached(9, 32, max_num_batched_tokens=48, enable_prefix_caching=caching)

    def run():
        fresh = [dataclasses.replace(r) for r in requests]
        result = simulate(VllmScheduler(args, debug=True), fresh, max_steps=300)
        return result.status, result.trace.steps, result.trace.events

    shipped = run()
    assert any(e.kind == "recompute_paused" for e in shipped[2])  # a decode outgrew the pool
    monkeypatch.setattr(KVCache, "grow_within_pages", lambda cache, num_tokens: False)
    assert run() == shipped  # every decode through allocate_slots
