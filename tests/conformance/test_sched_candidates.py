"""TensorRT-LLM's KVCacheV2Scheduler tests of which requests are candidates and of edge
cases, ported onto kvlab.

Mirrors the upstream classes TestBeamWidth, TestStateFiltering, TestCanSchedule and
TestEdgeCases of NVIDIA/TensorRT-LLM
``tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py`` at commit
0046b12caeb6c565d87675ced31951b62b9abd25 (inventory: ``inventory/v2_scheduler_2.txt``).

A generation request is physical (its context ran in a set-up pass and holds its pages), so
generation requests are built before the contexts a test schedules. Upstream's
``schedule_request(active_requests, inflight_request_ids)`` takes the ids the overlap
executor still has in flight; kvlab's ``Scheduler.schedule()`` takes none, so those tests are
ported against ``schedule(inflight_request_ids=...)`` and marked xfail. kvlab's
ScheduledBatch has no ``num_fitting_requests``; it is counted as upstream counts it, context
plus generation requests.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
from support import NEVER_DONE, Bench, ids, tiny_geometry

from kvlab import Engine, KVCacheManager, MaxSeqLenClampWarning, Request, Scheduler

# -- local set-up helpers ------------------------------------------------------------------
# support.Bench still hands ``host_cache_blocks`` to the Scheduler, which no longer takes it
# (the tier below the GPU moved to ``KVCacheManager(host_cache_size=...)``). ``_bench`` uses
# support.Bench when it builds, else the same bench with the tier on the manager. The set-up
# passes widen ``max_num_requests`` too (the request budget is no longer ``max_batch_size``).


class _ManagerTierBench(Bench):
    """support.Bench with the tier below the GPU on the manager: none without ``can_evict``
    (host_cache_size=0), the automatic host tier with it (host_cache_size=None)."""

    def __init__(self, *, tokens_per_block=64, num_blocks=4096, max_batch_size=100,
                 max_num_tokens=1024, can_evict=False, **scheduler_kwargs):
        geometry = tiny_geometry(tokens_per_block)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MaxSeqLenClampWarning)
            self.manager = KVCacheManager(
                geometry, quota_bytes=num_blocks * geometry.bytes_per_block,
                max_seq_len=num_blocks * tokens_per_block, max_batch_size=max_batch_size,
                host_cache_size=None if can_evict else 0)
        self.scheduler = Scheduler(self.manager, max_num_tokens=max_num_tokens,
                                   max_batch_size=max_batch_size, **scheduler_kwargs)
        self.engine = Engine(self.scheduler)
        self._held = []


def _bench(**kwargs) -> Bench:
    try:
        return Bench(**kwargs)
    except TypeError as exc:
        if "host_cache_blocks" not in str(exc):
            raise
        return _ManagerTierBench(**kwargs)


@contextlib.contextmanager
def _setup_budget(scheduler, max_num_tokens=1 << 30):
    """A set-up pass's own budgets; the test's are restored after it."""
    names = [n for n in ("max_num_tokens", "max_batch_size", "max_num_requests")
             if hasattr(scheduler, n)]
    saved = {n: getattr(scheduler, n) for n in names}
    scheduler.max_num_tokens = max_num_tokens
    for name in names[1:]:
        setattr(scheduler, name, 1 << 20)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(scheduler, name, value)


def _generations(bench, *request_ids, prompt_len=64, draft=0):
    """Requests in generation, their contexts run together in one set-up pass (build them
    before any context the test schedules: that pass schedules whatever is pending)."""
    with _setup_budget(bench.scheduler):
        requests = [bench.context(i, prompt_len, draft=draft) for i in request_ids]
        bench.schedule()
    assert all(r.is_context_finished and r.state == "running" for r in requests), "set-up"
    return requests


def _disagg(bench, request_id, prompt_len=100):
    """A DISAGG_GENERATION_INIT request (upstream's make_disagg_request), submitted at the
    next pass."""
    (request,) = bench.engine.add_requests([Request(
        request_id, prompt_len, NEVER_DONE, arrival_step=bench.engine.step,
        disagg_generation_init=True)])
    return request


def _num_fitting(batch) -> int:
    return len(batch.context_requests) + len(batch.generation_requests)


_INFLIGHT_GAP = ("kvlab gap: Scheduler.schedule() takes no inflight_request_ids (the overlap "
                 "executor's in-flight set, skipped and not counted toward the batch)")


# == TestBeamWidth ===========================================================================

@pytest.mark.upstream("TestBeamWidth::test_all_same_beam")
def test_all_same_beam():
    bench = _bench(max_num_tokens=100)
    _generations(bench, "0", "1", "2")  # beam width 1, kvlab's only width
    out = bench.schedule()
    assert len(out.generation_requests) == 3


# == TestStateFiltering ======================================================================

@pytest.mark.upstream("TestStateFiltering::test_inflight_skipped")
def test_inflight_skipped():
    bench = _bench(max_num_tokens=100)
    _generations(bench, "0", "1")
    out = bench.scheduler.schedule(inflight_request_ids=frozenset({"0"}))
    assert ids(out.generation_requests) == ["1"]


@pytest.mark.upstream("TestStateFiltering::test_context_init_passes")
def test_context_init_passes():
    bench = _bench(max_num_tokens=1000)
    bench.context("0", 100)
    out = bench.schedule()
    assert len(out.context_requests) == 1


@pytest.mark.upstream("TestStateFiltering::test_gen_in_progress_passes")
def test_gen_in_progress_passes():
    bench = _bench(max_num_tokens=100)
    _generations(bench, "0")
    out = bench.schedule()
    assert len(out.generation_requests) == 1


@pytest.mark.upstream("TestStateFiltering::test_inflight_does_not_count_toward_batch")
def test_inflight_does_not_count_toward_batch():
    bench = _bench(max_batch_size=1, max_num_tokens=100)
    _generations(bench, "0", "1")
    out = bench.scheduler.schedule(inflight_request_ids=frozenset({"0"}))
    assert ids(out.generation_requests) == ["1"]


# == TestEdgeCases ===========================================================================

@pytest.mark.upstream("TestEdgeCases::test_empty_active_requests")
def test_empty_active_requests():
    bench = _bench(max_num_tokens=100)
    out = bench.schedule()
    assert _num_fitting(out) == 0


@pytest.mark.upstream(
    "TestEdgeCases::test_single_request_each_type",
    adaptation="the encoder part (a widened-state scheduler scheduling an ENCODER_INIT "
               "request) is left out: kvlab has no encoder. In the second pass the generation "
               "request of the first is live too, as it would be in an engine")
def test_single_request_each_type():
    bench = _bench(max_num_tokens=1000)
    _generations(bench, "0")
    out = bench.schedule()
    assert len(out.generation_requests) == 1
    bench.context("1", 100)
    out = bench.schedule()
    assert len(out.context_requests) == 1


@pytest.mark.upstream("TestEdgeCases::test_all_inflight")
def test_all_inflight():
    bench = _bench(max_num_tokens=100)
    _generations(bench, "0", "1")
    out = bench.scheduler.schedule(inflight_request_ids=frozenset({"0", "1"}))
    assert _num_fitting(out) == 0


@pytest.mark.upstream(
    "TestEdgeCases::test_max_num_tokens_zero",
    adaptation="kvlab's Scheduler refuses max_num_tokens=0 at construction (upstream accepts "
               "it); it is built with 1024 and given the token budget 0 afterwards")
def test_max_num_tokens_zero():
    bench = _bench(max_num_tokens=1024)
    _generations(bench, "0")
    bench.scheduler.max_num_tokens = 0
    out = bench.schedule()
    assert len(out.generation_requests) == 0


@pytest.mark.upstream(
    "TestEdgeCases::test_max_batch_size_zero",
    adaptation="kvlab's Scheduler refuses max_batch_size=0 at construction (upstream accepts "
               "it); it is built with 100 and given the request budget 0 afterwards")
def test_max_batch_size_zero():
    bench = _bench(max_num_tokens=1000)
    _generations(bench, "0")
    bench.context("1", 50)
    scheduler = bench.scheduler
    scheduler.max_batch_size = 0
    if hasattr(scheduler, "max_num_requests"):
        scheduler.max_num_requests = 0
    out = bench.schedule()
    assert _num_fitting(out) == 0


@pytest.mark.upstream("TestEdgeCases::test_very_large_batch")
def test_very_large_batch():
    bench = _bench(max_batch_size=2000, max_num_tokens=2000, num_blocks=2100)
    _generations(bench, *(str(i) for i in range(1000)))
    out = bench.schedule()
    assert len(out.generation_requests) == 1000


@pytest.mark.upstream(
    "TestEdgeCases::test_interleaved_states",
    adaptation="kvlab requests have no LlmRequestState value: upstream's two filtered "
               "requests (UNKNOWN, GENERATION_TO_COMPLETE) are a request the front door "
               "rejected (a 2000-token prompt without chunked prefill) and one that finished "
               "(its one token generated); neither is offered to the scheduler again")
def test_interleaved_states():
    bench = _bench(max_num_tokens=1000)
    with _setup_budget(bench.scheduler):
        gen = bench.context("2", 64)
        done = bench.context("3", 64, max_new_tokens=1)
        bench.schedule()
    assert gen.state == "running" and done.state == "finished"
    rejected = bench.context("0", 2000)
    _disagg(bench, "1")
    bench.context("4", 100)
    out = bench.schedule()
    assert rejected.state == "rejected"
    assert ids(out.fitting_disagg_gen_init_requests) == ["1"]
    assert ids(out.generation_requests) == ["2"]
    assert ids(out.context_requests) == ["4"]


NOT_MODELLED = {
    "TestBeamWidth::test_beam_mismatch_skip":
        "beam width > 1: kvlab models beam width 1 only, so no beam mismatch can arise",
    "TestBeamWidth::test_first_gen_sets_beam":
        "beam width > 1: kvlab models beam width 1 only, so no beam mismatch can arise",
    "TestBeamWidth::test_beam_mismatch_after_budget":
        "beam width > 1: kvlab models beam width 1 only, so no beam mismatch can arise",
    "TestStateFiltering::test_unknown_state_filtered":
        "no_schedule_until/after_state filters: upstream filters requests by LlmRequestState "
        "value outside [CONTEXT_INIT, GENERATION_TO_COMPLETE); kvlab requests have no such "
        "state and only live ones are offered to the scheduler",
    "TestStateFiltering::test_gen_to_complete_filtered":
        "no_schedule_until/after_state filters: upstream filters requests by LlmRequestState "
        "value outside [CONTEXT_INIT, GENERATION_TO_COMPLETE); kvlab requests have no such "
        "state and only live ones are offered to the scheduler",
    "TestStateFiltering::test_gen_complete_filtered":
        "no_schedule_until/after_state filters: upstream filters requests by LlmRequestState "
        "value outside [CONTEXT_INIT, GENERATION_TO_COMPLETE); kvlab requests have no such "
        "state and only live ones are offered to the scheduler",
    "TestStateFiltering::test_context_init_waiting_on_encoder_event_is_filtered":
        "encoder-decoder / cross-attention: a context request waiting on its encoder output "
        "event; kvlab has no encoder",
    "TestStateFiltering::test_all_requests_filtered":
        "no_schedule_until/after_state filters: upstream filters requests by LlmRequestState "
        "value outside [CONTEXT_INIT, GENERATION_TO_COMPLETE); kvlab requests have no such "
        "state and only live ones are offered to the scheduler",
    "TestCanSchedule::test_always_true":
        "mocks of internal call signatures with no observable behaviour: can_schedule is the "
        "executor's hook that the V2 scheduler answers True whatever it is given; kvlab's "
        "Scheduler has no such hook and nothing depends on it",
    "TestCanSchedule::test_empty_list":
        "mocks of internal call signatures with no observable behaviour: can_schedule is the "
        "executor's hook that the V2 scheduler answers True whatever it is given; kvlab's "
        "Scheduler has no such hook and nothing depends on it",
}
