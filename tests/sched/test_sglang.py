"""kvlab.sched.sglang: SGLang 0.5.23's scheduling loop, its start-up and front-door checks with
SGLang's messages, the max_new_tokens clip, retraction (order, queue, new-token ratio), the
ignore_eos reservation, on_idle's ratio reset, and the invariants under random workloads.

The expected steps below are what the real SGLang did on the same workloads
(kvlab/backends/sglang_driver.py); these tests do not need SGLang installed."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab import Engine, KVGeometry, Request, simulate
from kvlab.core.cause import Cause, Reason
from kvlab.core.request import RequestState
from kvlab.sched.sglang import (
    DECODE_OOM_ABORT,
    DEFAULT_CHUNKED_PREFILL_SIZE,
    DEFAULT_MAX_PREFILL_TOKENS,
    MAX_RUNNING_ZERO,
    POOL_TOO_SMALL,
    SglangScheduler,
    SglangServerArgs,
    clipped_max_new_tokens,
    front_door_error,
    startup_error,
)
from kvlab.sched.sglang_prefill import CLIP_MAX_NEW_TOKENS, NewTokenRatio, PrefillAdder

TOKEN = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=1)  # 32 B a token


def server(max_total_tokens=2000, context_length=4096, **kwargs):
    """SGLang's event_loop_normal without the radix cache, which most tests here are about
    (SGLang, and SglangServerArgs, default to the overlap loop and the cache)."""
    fields = dict(chunked_prefill_size=512, disable_radix_cache=True, disable_overlap_schedule=True)
    fields.update(kwargs)
    return SglangServerArgs(TOKEN, max_total_tokens, context_length, **fields)


def rows(result, first=0, last=None):
    """The step rows as the driver reports them: step, free tokens, running, waiting, prefill
    rows, decode rows, tokens, retracted."""
    return [
        [
            s.step,
            s.free_blocks,
            s.running,
            s.waiting,
            s.num_context,
            s.num_generation,
            s.tokens_scheduled,
            s.num_recompute_paused,
        ]
        for s in result.trace.steps[first:last]
    ]


def events(result, kinds=("started", "recompute_paused", "finished", "rejected", "aborted")):
    return [(e.step, e.kind, e.request_id) for e in result.trace.events if e.kind in kinds]


# --- arguments and start-up ------------------------------------------------------------------


def test_defaults_are_sglangs():
    args = SglangServerArgs(TOKEN, 2048, 8192)
    assert (args.chunked_prefill_size, args.max_prefill_tokens) == (4096, 16384)
    assert DEFAULT_CHUNKED_PREFILL_SIZE == 4096 and DEFAULT_MAX_PREFILL_TOKENS == 16384
    assert args.schedule_conservativeness == 1.0 and args.ignore_eos is False
    # SGLang ships its radix cache and its overlap scheduler on
    assert args.disable_radix_cache is False and args.disable_overlap_schedule is False
    assert args.max_running_requests is None and args.resolved_max_running_requests == 1024
    assert (args.max_req_len, args.max_req_input_len) == (2047, 2042)
    assert args.chunk_size == 4096 and args.replace(chunked_prefill_size=-1).chunk_size is None


@pytest.mark.parametrize(
    "tokens, context, given, expected",
    [
        (2000, 4096, None, 1000),  # T // 2 caps the estimate of 2048
        (2048, 8192, None, 1024),
        (100_000, 8192, None, 4096),  # int(T / C * 512) = 6250, at most 4096
        (100_000, 65536, None, 2048),  # 781, at least 2048
        (2000, 4096, 4, 4),
        (2000, 4096, 5000, 1000),  # the value given, at most T // 2
        (2, 4096, None, 1),
    ],
)
def test_max_running_requests_is_settled_as_resolve_max_num_reqs(tokens, context, given, expected):
    args = SglangServerArgs(TOKEN, tokens, context, max_running_requests=given)
    assert args.resolved_max_running_requests == expected
    if tokens <= 2048:  # (a larger page-index table is only slower to build)
        scheduler = SglangScheduler(args)
        assert scheduler.max_batch_size == scheduler.max_running_requests == expected
        assert scheduler.max_num_active_requests is None


# --- the overlap loop (event_loop_overlap) -----------------------------------------------------


def _tiny(**kwargs):
    return server(600, max_prefill_tokens=128, chunked_prefill_size=128, **kwargs)


def test_the_overlap_loop_processes_a_batch_after_scheduling_the_next():
    # the real SGLang, overlap on and off (radix cache on and off), gave these rows
    requests = [Request("a", 8, 2), Request("b", 8, 5)]
    overlap = simulate(
        SglangScheduler(
            _tiny(
                max_running_requests=2, disable_radix_cache=False, disable_overlap_schedule=False
            ),
            debug=True,
        ),
        requests,
        check_invariants=True,
    )
    normal = simulate(SglangScheduler(_tiny(max_running_requests=2)), requests)
    for result in (overlap, normal):  # a finish counts in the step that ran its last token
        assert events(result) == [
            (0, "started", "a"),
            (0, "started", "b"),
            (1, "finished", "a"),
            (4, "finished", "b"),
        ]
    # a's last token is in flight at step 2: a is still running, and leaves the decode batch
    assert [s.num_generation for s in overlap.trace] == [0, 2, 1, 1, 1, 0]
    assert [s.running for s in overlap.trace] == [2, 2, 1, 1, 1, 0]
    # a's tokens enter the tree as step 2 processes step 1 (evictable, never freed); a trailing
    # step processes b's last batch
    assert [s.free_blocks for s in overlap.trace] == [584, 582, 581, 580, 579, 579]
    assert [s.finished_total for s in overlap.trace] == [0, 0, 1, 1, 1, 2]
    assert [s.free_blocks for s in normal.trace] == [584, 591, 590, 589, 600]
    assert [s.finished_total for s in normal.trace] == [0, 1, 1, 1, 2]


def test_the_overlap_loop_frees_a_finished_slot_one_step_later():
    requests = [Request(f"r{i}", 20, 400, i) for i in range(8)]  # tiny/retractions
    overlap = simulate(SglangScheduler(_tiny(disable_overlap_schedule=False)), requests)
    normal = simulate(SglangScheduler(_tiny()), requests)
    assert events(overlap)[:5] == [
        (0, "started", "r0"),
        (399, "finished", "r0"),
        (401, "started", "r1"),
        (402, "started", "r2"),
        (683, "recompute_paused", "r2"),
    ]  # the real SGLang's; without the overlap loop r1 starts at step 400
    assert events(normal)[2] == (400, "started", "r1")
    assert (overlap.end_step, normal.end_step) == (2456, 2447)


def test_a_one_token_abort_decodes_once_before_its_result_is_processed():
    # the real SGLang's rows: "big" is over max_req_input_len, so SGLang prefills one token and
    # aborts it; the overlap loop merges it into the running batch before processing that
    # result, and it decodes once beside "fits" (step 2) before it leaves
    requests = [Request("fits", 100, 6, 0), Request("big", 2042, 4, 1)]
    for radix, free in ((False, 1947), (True, 1945)):
        args = server(2048, 8192, max_running_requests=4, chunked_prefill_size=-1)
        args = args.replace(disable_overlap_schedule=False, disable_radix_cache=not radix)
        result = simulate(SglangScheduler(args, debug=True), requests, check_invariants=True)
        assert [s.num_generation for s in result.trace] == [0, 0, 2, 1, 1, 1, 1, 0]
        assert [s.rejected_total for s in result.trace] == [0, 0, 1, 1, 1, 1, 1, 1]
        assert events(result, ("rejected",)) == [(2, "rejected", "big")]  # as it is processed
        # with the radix cache its two tokens (id 0 and the sampled one) stay in the tree
        assert result.trace.steps[2].free_blocks == free


def test_a_retraction_drops_the_token_in_flight():
    # SGLang skips a retracted request's result (batch_result_processor.py:1022-1027): the
    # token its last decode computed is never appended, so it recomputes one token fewer
    for overlap, kept in ((True, 280), (False, 281)):
        args = _tiny(disable_overlap_schedule=not overlap)
        engine = Engine(SglangScheduler(args), [Request(f"r{i}", 20, 400, i) for i in range(8)])
        while not engine.last_batch or not engine.last_batch.recompute_paused_requests:
            engine.iterate()
        (victim,) = engine.last_batch.recompute_paused_requests
        assert (engine.step - 1, victim.request_id) == (683 if overlap else 682, "r2")
        assert victim.num_generated == victim.recomputed_tokens == kept


def test_argument_checks_name_the_parameter_and_the_range():
    with pytest.raises(ValueError, match=r"tokens_per_block must be 1 \(SGLang's page_size 1\)"):
        SglangServerArgs(dataclasses.replace(TOKEN, tokens_per_block=32), 2048, 4096)
    with pytest.raises(ValueError, match=r"max_total_tokens must be in \[1, "):
        SglangServerArgs(TOKEN, 0, 4096)
    with pytest.raises(ValueError, match=r"max_running_requests must be in \[1, "):
        SglangServerArgs(TOKEN, 2048, 4096, max_running_requests=0)
    with pytest.raises(ValueError, match=r"chunked_prefill_size must be -1 \(chunking off\) or"):
        SglangServerArgs(TOKEN, 2048, 4096, chunked_prefill_size=0)
    with pytest.raises(ValueError, match=r"max_prefill_tokens must be in \[1, "):
        SglangServerArgs(TOKEN, 2048, 4096, max_prefill_tokens=0)
    with pytest.raises(ValueError, match=r"schedule_conservativeness must be in \[0.0, 100.0\]"):
        SglangServerArgs(TOKEN, 2048, 4096, schedule_conservativeness=-1)
    with pytest.raises(TypeError, match="ignore_eos must be a bool"):
        SglangServerArgs(TOKEN, 2048, 4096, ignore_eos=1)
    with pytest.raises(TypeError, match="disable_radix_cache must be a bool"):
        SglangServerArgs(TOKEN, 2048, 4096, disable_radix_cache="no")
    with pytest.raises(TypeError, match="disable_overlap_schedule must be a bool"):
        SglangServerArgs(TOKEN, 2048, 4096, disable_overlap_schedule=0)
    with pytest.raises(TypeError, match="args must be a SglangServerArgs"):
        SglangScheduler(dict(max_total_tokens=2048))


def test_start_up_refuses_with_sglangs_messages():
    assert startup_error(server(max_total_tokens=1)) == MAX_RUNNING_ZERO
    assert MAX_RUNNING_ZERO == "max_running_request is zero"
    assert startup_error(server(context_length=1)) == POOL_TOO_SMALL
    assert POOL_TOO_SMALL == "Memory pool size is too small"
    assert startup_error(server(max_total_tokens=2)) is None
    with pytest.raises(ValueError, match="^max_running_request is zero$"):
        SglangScheduler(server(max_total_tokens=1))


def test_the_pool_is_a_real_one_of_one_token_pages(device):
    scheduler = SglangScheduler(server(), device=device)
    manager = scheduler.manager
    assert manager.total_blocks == manager.free_blocks == 2000
    assert manager.pool.storage.device.type == device and manager.pool.nbytes == 2000 * 32
    assert manager.max_batch_size == 1000 and manager.page_index.width >= 2000
    scheduler.check_invariants()


# --- the front doors -----------------------------------------------------------------------


def test_the_tokenizer_manager_rejects_at_arrival_with_sglangs_messages():
    assert front_door_error(Request("ctx", 1100, 10), 1024) == (
        "The input (1100 tokens) is longer than the model's context length (1024 tokens)."
    )
    assert front_door_error(Request("exact", 1024, 0), 1024).startswith("The input (1024 tokens)")
    assert front_door_error(Request("total", 900, 200), 1024) == (
        "Requested token count exceeds the model's maximum context length of 1024 tokens. You "
        "requested a total of 1100 tokens: 900 tokens from the input messages and 200 tokens for "
        "the completion. Please reduce the number of tokens in the input messages or the "
        "completion to fit within the limit."
    )
    assert front_door_error(Request("fits", 900, 124), 1024) is None
    with pytest.raises(ValueError, match="num_draft_tokens=0, beam_width=1"):
        SglangScheduler(server()).submit(Request("d", 8, 4, beam_width=2))
    with pytest.raises(ValueError, match="cache_salt must be None for kvlab's SGLang peer"):
        SglangScheduler(server()).submit(Request("s", 8, 4, cache_salt="tenant-a"))


def test_an_input_over_max_req_input_len_is_a_one_token_abort_that_a_prefill_batch_rejects():
    # SGLang: ok and pool share the step-0 prefill batch (2 rows, 301 tokens), edge runs alone at
    # step 1 (1 row, 1 token); the trace counts the abort's row (num_aborted_context_rows)
    requests = [
        Request("ok", 300, 50),
        Request("pool", 2100, 10),
        Request("edge", 1994, 1, 1),
        Request("edge-1", 1993, 1, 1),
    ]
    result = simulate(SglangScheduler(server(), debug=True), requests, check_invariants=True)
    message = (
        "Input length ({} tokens) exceeds the maximum allowed length (1994 tokens). Use a "
        "shorter input or enable --allow-auto-truncate."
    )
    assert result.reasons["pool"] == Reason(Cause.FRONT_DOOR, message=message.format(2100))
    assert result.reasons["edge"] == Reason(Cause.FRONT_DOOR, message=message.format(1994))
    assert rows(result, 0, 2) == [
        [0, 1700, 1, 0, 2, 0, 301, 0],  # the abort is a context row
        [1, 1700, 1, 1, 1, 0, 1, 0],
    ]
    assert events(result) == [
        (0, "rejected", "pool"),
        (0, "started", "ok"),
        (1, "rejected", "edge"),
        (50, "finished", "ok"),
        (51, "started", "edge-1"),
        (54, "finished", "edge-1"),
    ]
    assert result.status["pool"] is result.status["edge"] is RequestState.REJECTED
    assert result.requests["pool"].first_scheduled_step is None


# --- max_new_tokens -----------------------------------------------------------------------------


def test_max_new_tokens_is_clipped_at_admission():
    args = server(max_total_tokens=1000, context_length=1000)  # max_req_len 999
    assert clipped_max_new_tokens(args, 500, 499) == 498  # 999 - 500 - 1 and 1000 - 500 - 2
    assert clipped_max_new_tokens(args, 400, 600) == 598
    assert clipped_max_new_tokens(args, 998, 5) == 0
    assert clipped_max_new_tokens(server(), 300, 100) == 100
    result = simulate(SglangScheduler(args), [Request("x", 500, 499), Request("y", 400, 600, 5)])
    assert [(r.output_limit, r.num_generated, r.end_step) for r in result.requests.values()] == [
        (498, 498, 497),
        (598, 598, 1095),
    ]  # SGLang: finish reason "length"


def test_a_zero_max_new_tokens_finishes_at_its_prefill():
    result = simulate(SglangScheduler(server()), [Request("zero", 10, 0), Request("one", 10, 1)])
    assert sorted(events(result)) == [
        (0, "finished", "one"),
        (0, "finished", "zero"),
        (0, "started", "one"),
        (0, "started", "zero"),
    ]
    assert result.requests["zero"].num_generated == 0
    assert rows(result) == [[0, 2000, 0, 0, 2, 0, 20, 0]]


# --- the ignore_eos reservation ---------------------------------------------------------------


def test_under_ignore_eos_the_clip_can_leave_a_request_one_token_short_for_good():
    # 300 + 698 tokens on 1,000: the adder wants 1 token to spare beyond the whole output
    # (IGNORE_EOS_RESERVE_TOKENS) and never admits it; SGLang has no stall detector
    stalled = simulate(
        SglangScheduler(server(max_total_tokens=1000, ignore_eos=True)),
        [Request("c0", 300, 900), Request("c1", 300, 900)],
        max_steps=300,
    )
    assert stalled.status == {"c0": RequestState.WAITING, "c1": RequestState.WAITING}
    assert [r.output_limit for r in stalled.requests.values()] == [698, 698]
    assert set(map(tuple, rows(stalled))) == {(s, 1000, 0, 2, 0, 0, 0, 0) for s in range(300)}
    fits = simulate(
        SglangScheduler(server(max_total_tokens=1000, ignore_eos=True)),
        [Request("c0", 300, 697), Request("c1", 300, 697)],
    )
    assert events(fits) == [
        (0, "started", "c0"),
        (696, "finished", "c0"),
        (697, "started", "c1"),
        (1393, "finished", "c1"),
    ]
    eos = simulate(
        SglangScheduler(server(max_total_tokens=1000)),  # without ignore_eos
        [Request("c0", 300, 900), Request("c1", 300, 900)],
    )
    assert (
        eos.status == {"c0": RequestState.FINISHED, "c1": RequestState.FINISHED}
        and len(eos.trace) == 1396
    )


def test_ignore_eos_reserves_every_output_token_and_never_retracts():
    requests = [Request(f"a{i}", 300, 400) for i in range(8)]
    result = simulate(
        SglangScheduler(server(ignore_eos=True), debug=True), requests, check_invariants=True
    )
    starts = [(e.step, e.request_id) for e in result.trace.events if e.kind == "started"]
    assert starts == [
        (0, "a0"),
        (0, "a1"),
        (401, "a2"),
        (401, "a3"),
        (802, "a4"),
        (802, "a5"),
        (1203, "a6"),
        (1203, "a7"),
    ]  # two at a time: 2 x 700 fit
    assert rows(result, 0, 3) == [
        [0, 1488, 2, 6, 2, 0, 512, 0],
        [1, 1400, 2, 6, 1, 0, 88, 0],
        [2, 1398, 2, 6, 0, 2, 2, 0],
    ]
    assert len(result.trace) == 1604 and result.summary()["recomputes"] == 0


# --- retraction -----------------------------------------------------------------------------


def test_retraction_frees_the_last_of_the_fewest_outputs_to_the_back_and_resets_the_ratio():
    # SGLang admits a2 at step 1 on a ratio-scaled reservation; at step 368 the three need 3
    # tokens and 2 are free: a2 (a tie with a0 and a1 on outputs and prompt: the last one) is
    # retracted to the back of the queue, and the ratio goes from 0.3328 to 774 / 801
    requests = [Request(f"a{i}", 300, 400) for i in range(8)]
    scheduler = SglangScheduler(server(), debug=True)
    result = simulate(scheduler, requests, max_steps=369, check_invariants=True)
    assert rows(result, 366, 369) == [
        [366, 5, 3, 5, 0, 3, 3, 0],
        [367, 2, 3, 5, 0, 3, 3, 0],
        [368, 666, 2, 6, 0, 2, 2, 1],
    ]
    assert events(result) == [
        (0, "started", "a0"),
        (0, "started", "a1"),
        (1, "started", "a2"),
        (368, "recompute_paused", "a2"),
    ]
    assert [r.request_id for r in scheduler.waiting] == ["a3", "a4", "a5", "a6", "a7", "a2"]
    assert scheduler.new_token_ratio.current == min(1.0, (367 + 367 + 2 * 20) / (400 + 400 + 1))
    a2 = result.requests["a2"]
    assert (a2.num_recomputes, a2.context_len, a2.num_generated) == (1, 300 + 367, 367)
    full = simulate(SglangScheduler(server()), requests)
    assert (
        events(full, ("recompute_paused", "finished"))[-5:]
        == [
            (1170, "recompute_paused", "a7"),
            (1202, "finished", "a5"),
            (1202, "finished", "a6"),
            (1237, "finished", "a2"),
            (1237, "finished", "a7"),
        ]
        and len(full.trace) == 1238
    )
    assert full.requests["a2"].num_generated == 400  # prompt + 367 recomputed


def test_the_ratio_decays_each_decode_step_to_its_floor():
    ratio = NewTokenRatio(1.0)
    assert (ratio.init, ratio.min) == (0.7, min(0.7 * 0.14, 1.0))
    assert ratio.decay == (0.7 - 0.7 * 0.14) / 600
    for _ in range(366):
        ratio.decay_step()
    assert round(ratio.current, 4) == 0.3328  # SGLang's log at that retraction
    for _ in range(1000):
        ratio.decay_step()
    assert ratio.current == ratio.min
    ratio.reset()
    assert ratio.current == 0.7 and NewTokenRatio(2.0).init == 1.0
    assert NewTokenRatio.after_retract([10, 30], [100, 200]) == (40 + 40) / 301
    assert NewTokenRatio.after_retract([], []) == 0.0


def _decoding(outputs, prompts=(10, 12, 5), tokens=400):
    """A scheduler whose three running requests ("a", "b", "c") have ``outputs`` tokens each, in
    a pool filled up by a cache standing in for other memory."""
    scheduler = SglangScheduler(server(max_total_tokens=tokens, context_length=4096))
    requests = [Request(name, p, 100) for name, p in zip("abc", prompts)]
    for request in requests:
        scheduler.submit(request)
    scheduler.schedule()  # all three in one prefill batch
    assert [r.request_id for r in scheduler.last_prefill] == ["a", "b", "c"]
    for request, out in zip(requests, outputs):
        request.context_current_position, request.num_generated = request.prompt_len, out
        scheduler.manager.caches[request.request_id].resize(request.prompt_len + out - 1)
    filler = scheduler.manager.create_cache("filler")
    filler.resize(scheduler.manager.free_blocks)
    return scheduler, requests


def test_retraction_order_is_fewest_outputs_then_longest_prompt():
    scheduler, (a, b, c) = _decoding([21, 1, 18])
    batch = scheduler.schedule()  # decode: 3 tokens needed, none free
    # b has the fewest outputs: retracted first, and its 12 tokens are enough for two
    assert batch.recompute_paused_requests == [b] and scheduler.waiting == [b]
    assert scheduler.running == [a, c] and batch.generation_requests == [a, c]
    assert scheduler.new_token_ratio.current == (21 + 18 + 2 * 20) / (100 + 100 + 1)
    assert (b.state, b.num_recomputes, b.context_len, b.context_current_position) == (
        RequestState.WAITING,
        1,
        12 + 1,
        0,
    )
    scheduler.manager.free("filler")
    scheduler.check_invariants()
    scheduler, (a, b, c) = _decoding([5, 30, 5])  # a and c tie on outputs: a's prompt
    batch = scheduler.schedule()  # is longer, a goes first
    assert batch.recompute_paused_requests == [a]
    assert scheduler.running == [b, c]  # filter_batch keeps the sorted order


@pytest.mark.parametrize("overlap", [False, True])
def test_an_abort_whose_prompt_shares_a_cached_prefix_matches_nothing(overlap):
    # set_finish_with_abort (managers/schedule_batch.py) makes an abort's prompt one token, so
    # the radix tree's copy of a longer prompt's prefix is not matched for it
    shared = dict(prefix_hashes=(7, 8, 9, 10), tokens_per_hash=512)
    requests = [Request("first", 1600, 4, **shared), Request("too-long", 2000, 4, 10, **shared)]
    args = server(disable_radix_cache=False, disable_overlap_schedule=not overlap)
    result = simulate(SglangScheduler(args, debug=True), requests, check_invariants=True)
    assert result.status == {"first": RequestState.FINISHED, "too-long": RequestState.REJECTED}
    assert result.reasons["too-long"].cause is Cause.FRONT_DOOR
    assert result.requests["too-long"].prepopulated_prompt_len == 0


def test_the_last_request_is_aborted_when_even_it_cannot_decode():
    # unreachable through admission (the clip keeps one request within the pool); forced here
    scheduler = SglangScheduler(server(max_total_tokens=16, context_length=4096))
    request = Request("only", 4, 10)
    scheduler.submit(request)
    scheduler.schedule()
    request.context_current_position, request.num_generated = 4, 1
    scheduler.manager.caches["only"].resize(16)
    batch = scheduler.schedule()
    assert batch.aborted_requests == [request] and not batch.generation_requests
    assert request.state is RequestState.REJECTED
    assert request.reason == Reason(Cause.ABORTED_OUT_OF_MEMORY, message=DECODE_OOM_ABORT)
    assert DECODE_OOM_ABORT == (
        "Out of memory even after retracting all other requests in the decode batch. Aborting "
        "the last request."
    )
    assert scheduler.new_token_ratio.current == scheduler.new_token_ratio.init  # on_idle
    scheduler.check_invariants()


# --- admission ---------------------------------------------------------------------------------


def test_a_long_prompt_is_chunked_and_small_ones_wait_for_its_last_chunk():
    requests = [Request("long", 8192, 16)] + [Request(f"s{i}", 256, 32, 4 * i) for i in range(6)]
    result = simulate(
        SglangScheduler(server(16384, 16384, max_running_requests=8, max_prefill_tokens=4096)),
        requests,
    )
    assert rows(result, 0, 2) == [[0, 15872, 1, 1, 1, 0, 512, 0], [1, 15360, 1, 1, 1, 0, 512, 0]]
    assert events(result, ("started",)) == [
        (0, "started", "long"),
        (16, "started", "s0"),
        (16, "started", "s1"),
        (17, "started", "s2"),
        (17, "started", "s3"),
        (18, "started", "s4"),
        (20, "started", "s5"),
    ]
    assert result.requests["long"].end_step == 34 and len(result.trace) == 52


def test_the_clip_of_the_reservation_is_4096_tokens():
    assert CLIP_MAX_NEW_TOKENS == 4096
    scheduler = SglangScheduler(server(24000, 32768, ignore_eos=True))
    request = Request("g", 1000, 9000)
    scheduler.submit(request)
    scheduler.schedule()  # its first chunk
    adder = PrefillAdder(
        [request], 0.7, lambda: 24000, 16384, 512, True, scheduler.origin_len, scheduler.output_len
    )
    assert adder.total_offset == 4096 * 1.0  # not 9000, and under ignore_eos not scaled by 0.7


def test_on_idle_resets_the_ratio_only_where_sglang_idles():
    # z decays the ratio for 700 steps. A after a gap (an idle iteration resets the ratio to 0.7)
    # leaves B waiting until A finishes; A right after z's last step (no idle iteration) keeps
    # the decayed ratio, and B is admitted beside it
    z, ab = (
        [Request("z", 100, 700)],
        lambda t: [Request("A", 100, 1500, t), Request("B", 800, 100, t + 1)],
    )
    gap = simulate(SglangScheduler(server()), z + ab(800))
    assert events(gap, ("started",))[1:] == [(800, "started", "A"), (2300, "started", "B")]
    assert (gap.end_step, gap.iterations) == (2401, 2301)
    adjacent = simulate(SglangScheduler(server()), z + ab(700))
    assert events(adjacent, ("started",))[1:] == [(700, "started", "A"), (701, "started", "B")]
    assert (adjacent.end_step, adjacent.iterations) == (2202, 2202)
    between = simulate(SglangScheduler(server()), z + [Request("r", 5000, 1, 700)] + ab(701))
    assert events(between, ("started",))[1:] == [(701, "started", "A"), (2201, "started", "B")]


def test_max_running_requests_bounds_the_batch():
    requests = [Request(f"r{i}", 10, 50) for i in range(6)]
    result = simulate(
        SglangScheduler(server(max_running_requests=2), debug=True), requests, check_invariants=True
    )
    assert max(s.running for s in result.trace) == 2
    assert events(result, ("started",))[:3] == [
        (0, "started", "r0"),
        (0, "started", "r1"),
        (50, "started", "r2"),
    ]


# --- invariants ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(st.integers(1, 120), st.integers(0, 60), st.integers(0, 30)),
        min_size=1,
        max_size=12,
    ),
    tokens=st.integers(2, 160),
    context=st.integers(2, 200),
    running=st.one_of(st.none(), st.integers(1, 5)),
    chunk=st.sampled_from([-1, 1, 4, 16, 64]),
    prefill=st.sampled_from([1, 8, 64, 16384]),
    conservativeness=st.sampled_from([0.0, 0.3, 1.0, 1.7]),
    ignore_eos=st.booleans(),
    radix=st.booleans(),
    overlap=st.booleans(),
)
def test_invariants_and_a_stated_end_for_every_request(
    specs, tokens, context, running, chunk, prefill, conservativeness, ignore_eos, radix, overlap
):
    args = SglangServerArgs(
        TOKEN,
        tokens,
        context,
        max_running_requests=running,
        chunked_prefill_size=chunk,
        max_prefill_tokens=prefill,
        schedule_conservativeness=conservativeness,
        ignore_eos=ignore_eos,
        disable_radix_cache=not radix,
        disable_overlap_schedule=not overlap,
    )
    if startup_error(args) is not None:
        with pytest.raises(ValueError):
            SglangScheduler(args)
        return
    requests = [Request(f"r{i}", p, m, a) for i, (p, m, a) in enumerate(specs)]
    scheduler = SglangScheduler(args, debug=True)
    engine = Engine(scheduler, requests, check_invariants=True)
    engine.execute_until(400)
    result = engine.result(400)
    assert set(result.status) == {r.request_id for r in requests}
    assert all(result.reasons.values())
    for request in result.requests.values():
        status = result.status[request.request_id]
        if status is RequestState.FINISHED:
            assert (
                request.num_generated
                == request.output_limit
                == clipped_max_new_tokens(args, request.prompt_len, request.max_new_tokens)
            )
        elif status is RequestState.REJECTED:
            assert request.reason is not None
            assert request.reason.cause in (Cause.FRONT_DOOR, Cause.ABORTED_OUT_OF_MEMORY)
            assert request.reason.message.startswith(
                ("The input (", "Requested token count", "Input length (", "Out of memory")
            )
        assert request.num_generated <= request.max_new_tokens
    for step in result.trace:
        assert step.running <= scheduler.max_running_requests
        assert step.free_blocks + step.used_blocks == tokens
    if set(result.status.values()) <= {RequestState.FINISHED, RequestState.REJECTED}:
        # what the radix cache keeps is unlocked: free or evictable, every token
        tree = scheduler.tree
        kept = 0 if tree is None else tree.evictable_size
        assert scheduler.manager.free_blocks + kept == tokens
        assert tree is None or tree.protected_size == 0
        assert not scheduler.waiting and scheduler.chunked_req is None
        # (as in SGLang, the running batch drops its finished requests at the next step; with
        # the overlap loop, a one-token abort merged into it before its result was processed)
        done = (RequestState.FINISHED, RequestState.REJECTED if overlap else RequestState.FINISHED)
        assert all(r.state in done for r in scheduler.running)
