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

kvlab requests have no LlmRequestState value: a request outside upstream's state window
[CONTEXT_INIT, GENERATION_TO_COMPLETE) is, physically, one that is not live. Before the window
(UNKNOWN) stands a request the front door rejected (a prompt over max_num_tokens without
chunked prefill); at or past its end (GENERATION_TO_COMPLETE, GENERATION_COMPLETE) one that
generated its last token, which kvlab's executor finishes and retires in that same step.
Neither is offered to the scheduler again.
"""

from __future__ import annotations

import pytest
from support import Bench, ids, num_fitting

#: The adaptation of the tests whose requests upstream puts outside the state window.
NOT_LIVE = ("kvlab requests have no LlmRequestState value (module docstring): upstream's "
            "UNKNOWN request is one the front door rejected, its GENERATION_TO_COMPLETE and "
            "GENERATION_COMPLETE ones have finished; neither is offered to the scheduler again")


def rejected_at_front_door(bench, request_id):
    """Upstream's UNKNOWN-state request: a 2000-token prompt the front door rejects."""
    request = bench.context(request_id, 2000)
    bench.schedule()
    assert request.state == "rejected"
    return request


def schedules_nothing(bench) -> bool:
    """One pass schedules no context and no generation request."""
    out = bench.schedule()
    return not out.context_requests and not out.generation_requests


def finished(bench, request_id):
    """Upstream's GENERATION_TO_COMPLETE / GENERATION_COMPLETE request: one that generated
    its only token in a set-up pass."""
    with bench.set_up_budget():
        request = bench.context(request_id, 64, max_new_tokens=1)
        bench.schedule()
    assert request.state == "finished"
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


@pytest.mark.upstream("TestStateFiltering::test_unknown_state_filtered", adaptation=NOT_LIVE)
def test_unknown_state_filtered():
    bench = Bench(max_num_tokens=100)
    rejected_at_front_door(bench, "0")
    assert schedules_nothing(bench)


@pytest.mark.upstream("TestStateFiltering::test_gen_to_complete_filtered", adaptation=NOT_LIVE)
def test_gen_to_complete_filtered():
    bench = Bench(max_num_tokens=100)
    finished(bench, "0")
    assert schedules_nothing(bench)


@pytest.mark.upstream("TestStateFiltering::test_gen_complete_filtered", adaptation=NOT_LIVE)
def test_gen_complete_filtered():
    bench = Bench(max_num_tokens=100)
    request = finished(bench, "0")
    assert "0" not in bench.manager.caches and request.end_step is not None
    assert schedules_nothing(bench)


@pytest.mark.upstream("TestStateFiltering::test_all_requests_filtered", adaptation=NOT_LIVE)
def test_all_requests_filtered():
    bench = Bench(max_num_tokens=100)
    rejected_at_front_door(bench, "0")
    finished(bench, "1")
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
               "runs out), so both requests can hold a cache under max_batch_size=1")
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


@pytest.mark.upstream(
    "TestEdgeCases::test_single_request_each_type",
    adaptation="the encoder part (a widened-state scheduler scheduling an ENCODER_INIT "
               "request) is left out: kvlab has no encoder. In the second pass the generation "
               "request of the first is live too, as it would be in an engine")
def test_single_request_each_type():
    bench = Bench(max_num_tokens=1000)
    bench.generations("0")
    out = bench.schedule()
    assert len(out.generation_requests) == 1
    bench.context("1", 100)
    out = bench.schedule()
    assert len(out.context_requests) == 1


@pytest.mark.upstream("TestEdgeCases::test_all_inflight")
def test_all_inflight():
    bench = Bench(max_num_tokens=100)
    bench.generations("0", "1")
    out = bench.scheduler.schedule(inflight_request_ids=frozenset({"0", "1"}))
    assert num_fitting(out) == 0


@pytest.mark.upstream(
    "TestEdgeCases::test_max_num_tokens_zero",
    adaptation="kvlab's Scheduler refuses max_num_tokens=0 at construction (upstream accepts "
               "it); it is built with 1024 and given the token budget 0 afterwards")
def test_max_num_tokens_zero():
    bench = Bench(max_num_tokens=1024)
    bench.generations("0")
    bench.scheduler.max_num_tokens = 0
    out = bench.schedule()
    assert len(out.generation_requests) == 0


@pytest.mark.upstream(
    "TestEdgeCases::test_max_batch_size_zero",
    adaptation="kvlab's Scheduler refuses max_batch_size=0 at construction (upstream accepts "
               "it); it is built with 100 and given the request budget 0 afterwards")
def test_max_batch_size_zero():
    bench = Bench(max_num_tokens=1000)
    bench.generations("0")
    bench.context("1", 50)
    scheduler = bench.scheduler
    scheduler.max_batch_size = 0
    if hasattr(scheduler, "max_num_requests"):
        scheduler.max_num_requests = 0
    out = bench.schedule()
    assert num_fitting(out) == 0


@pytest.mark.upstream("TestEdgeCases::test_very_large_batch")
def test_very_large_batch():
    bench = Bench(max_batch_size=2000, max_num_tokens=2000, num_blocks=2100)
    bench.generations(*(str(i) for i in range(1000)))
    out = bench.schedule()
    assert len(out.generation_requests) == 1000


@pytest.mark.upstream("TestEdgeCases::test_interleaved_states", adaptation=NOT_LIVE)
def test_interleaved_states():
    bench = Bench(max_num_tokens=1000)
    gen = bench.generation("2")
    finished(bench, "3")
    rejected_at_front_door(bench, "0")
    assert gen.state == "running"
    bench.disagg("1")
    bench.context("4", 100)
    out = bench.schedule()
    assert ids(out.fitting_disagg_gen_init_requests) == ["1"]
    assert ids(out.generation_requests) == ["2"]
    assert ids(out.context_requests) == ["4"]


NOT_MODELLED = {
    "TestStateFiltering::test_context_init_waiting_on_encoder_event_is_filtered":
        "encoder-decoder / cross-attention: a context request waiting on its encoder output "
        "event; kvlab has no encoder",
    "TestCanSchedule::test_always_true":
        "mocks of internal call signatures with no observable behaviour: can_schedule is the "
        "executor's hook that the V2 scheduler answers True whatever it is given; kvlab's "
        "Scheduler has no such hook and nothing depends on it",
    "TestCanSchedule::test_empty_list":
        "mocks of internal call signatures with no observable behaviour: can_schedule is the "
        "executor's hook that the V2 scheduler answers True whatever it is given; kvlab's "
        "Scheduler has no such hook and nothing depends on it",
}
