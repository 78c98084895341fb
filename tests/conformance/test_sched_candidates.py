"""TensorRT-LLM's KVCacheV2Scheduler tests of which requests are candidates and of edge
cases, ported onto kvlab.

Mirrors the upstream classes TestBeamWidth, TestStateFiltering, TestCanSchedule and
TestEdgeCases of NVIDIA/TensorRT-LLM
``tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py`` at commit
0046b12caeb6c565d87675ced31951b62b9abd25 (inventory: ``inventory/v2_scheduler_2.txt``).

A generation request is physical (its context ran in a set-up pass and holds its pages), so
generation requests are built before the contexts a test schedules. Upstream's
``schedule_request(active_requests, inflight_request_ids)`` takes the ids the overlap
executor still has in flight: kvlab's ``Scheduler.schedule(inflight_request_ids=...)``. kvlab's
ScheduledBatch has no ``num_fitting_requests``; it is counted as upstream counts it, context
plus generation requests (``support.num_fitting``).

kvlab requests have no LlmRequestState value. The one request outside upstream's state window
[CONTEXT_INIT, GENERATION_TO_COMPLETE) that a kvlab pass is handed is one that generated its
last token in the pass before: the executor finishes it then (``Scheduler.finish``: state
"finished", cache freed, upstream's GENERATION_COMPLETE) and it stays in the scheduler's
active list until the next pass, which drops it. kvlab has no state before the window (a
request is "waiting" from its submission, and one the front door rejects never joins the
active list) and no GENERATION_TO_COMPLETE (no request keeps its cache past its last token):
the tests built on those states are listed as not modelled.
"""

from __future__ import annotations

import pytest
from support import Bench, ids, num_fitting


def finished_in_last_pass(bench, request_id):
    """A request that generates its only token in a set-up pass: the executor finishes it after
    it (upstream's GENERATION_COMPLETE), and it is still in the scheduler's active list, which
    upstream's tests hand the scheduler, when the next pass begins."""
    with bench.set_up_budget():
        request = bench.context(request_id, 64, max_new_tokens=1)
        bench.schedule()
    assert request.state == "finished" and request_id not in bench.manager.caches
    assert any(r is request for r in bench.scheduler._active), "set-up: it left the active list"
    return request


# == TestBeamWidth ===========================================================================


@pytest.mark.upstream("TestBeamWidth::test_all_same_beam")
def test_all_same_beam():
    bench = Bench(max_num_tokens=100)
    bench.generations("0", "1", "2")  # beam width 1
    out = bench.schedule()
    assert len(out.generation_requests) == 3


@pytest.mark.upstream("TestBeamWidth::test_beam_mismatch_skip")
def test_beam_mismatch_skip():
    bench = Bench(max_num_tokens=100)
    bench.generation("0", beam=1)
    bench.generation("1", beam=2)  # mismatch -> skip
    bench.generation("2", beam=1)
    out = bench.schedule()
    assert ids(out.generation_requests) == ["0", "2"]


@pytest.mark.upstream("TestBeamWidth::test_first_gen_sets_beam")
def test_first_gen_sets_beam():
    bench = Bench(max_num_tokens=100)
    bench.generations("0", "1", beam=2)
    out = bench.schedule()
    assert len(out.generation_requests) == 2


@pytest.mark.upstream("TestBeamWidth::test_beam_mismatch_after_budget")
def test_beam_mismatch_after_budget():
    """Budget hit before beam mismatch is relevant."""
    bench = Bench(max_num_tokens=1)
    bench.generation("0", beam=1)
    bench.generation("1", beam=2)
    out = bench.schedule()
    assert ids(out.generation_requests) == ["0"]


# == TestStateFiltering ======================================================================


@pytest.mark.upstream("TestStateFiltering::test_inflight_skipped")
def test_inflight_skipped():
    bench = Bench(max_num_tokens=100)
    bench.generations("0", "1")
    out = bench.scheduler.schedule(inflight_request_ids=frozenset({"0"}))
    assert ids(out.generation_requests) == ["1"]


@pytest.mark.upstream("TestStateFiltering::test_context_init_passes")
def test_context_init_passes():
    bench = Bench(max_num_tokens=1000)
    bench.context("0", 100)
    out = bench.schedule()
    assert len(out.context_requests) == 1


@pytest.mark.upstream(
    "TestStateFiltering::test_gen_complete_filtered",
    adaptation="upstream's GENERATION_COMPLETE request is one that generated its only token in "
    "the pass before (kvlab's executor finishes it and frees its cache then); it is "
    "still in the scheduler's active list, and the pass drops it",
)
def test_gen_complete_filtered():
    bench = Bench(max_num_tokens=100)
    finished_in_last_pass(bench, "0")
    out = bench.schedule()
    assert num_fitting(out) == 0


@pytest.mark.upstream("TestStateFiltering::test_gen_in_progress_passes")
def test_gen_in_progress_passes():
    bench = Bench(max_num_tokens=100)
    bench.generations("0")
    out = bench.schedule()
    assert len(out.generation_requests) == 1


@pytest.mark.upstream(
    "TestStateFiltering::test_inflight_does_not_count_toward_batch",
    adaptation="the manager gets its own page-index slots (upstream's mock IndexMapper never "
    "runs out), so both requests can hold a cache under max_batch_size=1",
)
def test_inflight_does_not_count_toward_batch():
    bench = Bench(max_batch_size=1, max_num_tokens=100, slots=2)
    bench.generations("0", "1")
    out = bench.scheduler.schedule(inflight_request_ids=frozenset({"0"}))
    assert ids(out.generation_requests) == ["1"]


# == TestEdgeCases ===========================================================================


@pytest.mark.upstream("TestEdgeCases::test_empty_active_requests")
def test_empty_active_requests():
    bench = Bench(max_num_tokens=100)
    out = bench.schedule()
    assert num_fitting(out) == 0


@pytest.mark.upstream("TestEdgeCases::test_all_inflight")
def test_all_inflight():
    bench = Bench(max_num_tokens=100)
    bench.generations("0", "1")
    out = bench.scheduler.schedule(inflight_request_ids=frozenset({"0", "1"}))
    assert num_fitting(out) == 0


@pytest.mark.upstream(
    "TestEdgeCases::test_max_num_tokens_zero",
    adaptation="kvlab's Scheduler refuses max_num_tokens=0 at construction (upstream accepts "
    "it); it is built with 1024 and given the token budget 0 afterwards",
)
def test_max_num_tokens_zero():
    bench = Bench(max_num_tokens=1024)
    bench.generations("0")
    bench.scheduler.max_num_tokens = 0
    out = bench.schedule()
    assert len(out.generation_requests) == 0


@pytest.mark.upstream(
    "TestEdgeCases::test_max_batch_size_zero",
    adaptation="kvlab's Scheduler refuses max_batch_size=0 at construction (upstream accepts "
    "it); it is built with 100 and given the request budget 0 afterwards",
)
def test_max_batch_size_zero():
    bench = Bench(max_num_tokens=1000)
    bench.generations("0")
    bench.context("1", 50)
    bench.scheduler.max_batch_size = bench.scheduler.max_num_requests = 0
    out = bench.schedule()
    assert num_fitting(out) == 0


@pytest.mark.upstream("TestEdgeCases::test_very_large_batch")
def test_very_large_batch():
    bench = Bench(max_batch_size=2000, max_num_tokens=2000, num_blocks=2100)
    bench.generations(*(str(i) for i in range(1000)))
    out = bench.schedule()
    assert len(out.generation_requests) == 1000


@pytest.mark.upstream(
    "TestEdgeCases::test_interleaved_states",
    adaptation="kvlab has neither UNKNOWN nor GENERATION_TO_COMPLETE: the filtered requests 0 "
    "and 3 are requests that generated their only token in a set-up pass, still in "
    "the scheduler's active list (kvlab's one state outside the window). That pass "
    "runs the contexts of 0, 2 and 3; an outside tenant leaves their 3 pages free, so "
    "request 1's 256-token transfer (4 pages) is refused and it stays "
    "DISAGG_GENERATION_INIT",
)
def test_interleaved_states():
    bench = Bench(max_num_tokens=1000)
    filtered = [bench.context("0", 64, max_new_tokens=1)]
    bench.disagg("1", 256)
    gen = bench.context("2", 64)
    filtered.append(bench.context("3", 64, max_new_tokens=1))
    bench.hold_all_but(3)
    setup = bench.schedule()
    bench.release_held()
    assert ids(setup.context_requests) == ["0", "2", "3"]
    assert setup.fitting_disagg_gen_init_requests == [] and gen.state == "running"
    assert all(r.state == "finished" for r in filtered)
    assert ids(bench.scheduler._active) == ["0", "1", "2", "3"]  # 4 joins them at the pass
    bench.context("4", 100)
    out = bench.schedule()
    assert ids(out.fitting_disagg_gen_init_requests) == ["1"]
    assert ids(out.generation_requests) == ["2"]
    assert ids(out.context_requests) == ["4"]


NOT_MODELLED = {
    "TestStateFiltering::test_unknown_state_filtered": "a request in state UNKNOWN, before the scheduler's state window, handed to the pass: "
    "kvlab has no state before the window (a request is waiting from its submission, and "
    "one the front door rejects never joins the active list), so no pass is handed one",
    "TestStateFiltering::test_gen_to_complete_filtered": "the state window's exclusive end, GENERATION_TO_COMPLETE: kvlab has no such state (its "
    "executor finishes a request and frees its cache in the step of its last token); a "
    "finished request still in the active list is test_gen_complete_filtered's port",
    "TestStateFiltering::test_all_requests_filtered": "its requests are in UNKNOWN and GENERATION_TO_COMPLETE, neither of which kvlab has (see "
    "those two tests); with kvlab's one filtered state it would repeat "
    "test_gen_complete_filtered",
    "TestEdgeCases::test_single_request_each_type": "encoder-decoder: one of its three passes schedules an ENCODER_INIT request on a "
    "scheduler whose state window is widened to ENCODER_INIT; kvlab has no encoder. Its "
    "generation and context passes are test_gen_in_progress_passes' and "
    "test_context_init_passes' ports",
    "TestStateFiltering::test_context_init_waiting_on_encoder_event_is_filtered": "encoder-decoder / cross-attention: a context request waiting on its encoder output "
    "event; kvlab has no encoder",
    "TestCanSchedule::test_always_true": "mocks of internal call signatures with no observable behaviour: can_schedule is the "
    "executor's hook that the V2 scheduler answers True whatever it is given; kvlab's "
    "Scheduler has no such hook and nothing depends on it",
    "TestCanSchedule::test_empty_list": "mocks of internal call signatures with no observable behaviour: can_schedule is the "
    "executor's hook that the V2 scheduler answers True whatever it is given; kvlab's "
    "Scheduler has no such hook and nothing depends on it",
}
