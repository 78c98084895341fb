"""TensorRT-LLM's KVCacheV2Scheduler tests of draft tokens on a last context chunk, ported
onto kvlab.

Mirrors the upstream class TestDraftTokenFitting of NVIDIA/TensorRT-LLM
``tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py`` at commit
0046b12caeb6c565d87675ced31951b62b9abd25 (inventory: ``inventory/v2_scheduler_2.txt``).

Upstream asserts ``req.discard_draft_tokens.assert_not_called()``: the V2 scheduler keeps
every draft token and adds all of them to the last chunk's tokens, past the budget check. In
kvlab that is: the request still has its draft tokens, and the pass's token count
(``batch.num_tokens``, upstream's budget) holds the chunk plus all of them. A non-last chunk
carries none.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
from support import Bench, ids, tiny_geometry

from kvlab import Engine, KVCacheManager, MaxSeqLenClampWarning, Scheduler

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


def _chunked(**kwargs) -> Bench:
    return _bench(chunked_prefill=True, chunk_unit_size=64, **kwargs)


def _last_chunk_with_drafts(max_num_tokens, length, draft):
    bench = _chunked(max_num_tokens=max_num_tokens)
    req = bench.context("0", length, draft=draft)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert req.context_chunk_size == length  # the last chunk
    assert req.num_draft_tokens == draft  # not discarded
    assert out.num_tokens == length + draft  # every draft token in the budget
    return bench


@pytest.mark.upstream("TestDraftTokenFitting::test_draft_fits_in_page_remainder")
def test_draft_fits_in_page_remainder():
    _last_chunk_with_drafts(200, 100, 5)  # 100 % 64 = 36, 28 slots left in the page


@pytest.mark.upstream("TestDraftTokenFitting::test_draft_exceeds_page_remainder")
def test_draft_exceeds_page_remainder():
    _last_chunk_with_drafts(200, 128, 5)  # chunk ends on a page boundary


@pytest.mark.upstream("TestDraftTokenFitting::test_draft_partially_fits")
def test_draft_partially_fits():
    _last_chunk_with_drafts(200, 100, 30)  # 28 slots left, 30 drafts


@pytest.mark.upstream("TestDraftTokenFitting::test_budget_limits_draft_space")
def test_budget_limits_draft_space():
    _last_chunk_with_drafts(110, 100, 20)  # 100 + 20 = 120 > 110, past the budget check


@pytest.mark.upstream("TestDraftTokenFitting::test_max_context_length_limits_draft")
def test_max_context_length_limits_draft():
    bench = _last_chunk_with_drafts(110, 100, 20)
    assert bench.scheduler.max_context_length == 110


@pytest.mark.upstream(
    "TestDraftTokenFitting::test_draft_tokens_add_to_batch_budget",
    adaptation="the generation request is built first (its context runs in a set-up pass); "
               "upstream lists it after the context, which the phases make no difference to")
def test_draft_tokens_add_to_batch_budget():
    bench = _chunked(max_num_tokens=200)
    _generations(bench, "1")
    bench.context("0", 100, draft=5)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert ids(out.generation_requests) == ["1"]
    assert out.num_tokens == 100 + 5 + 1  # upstream's comment: 106


@pytest.mark.upstream(
    "TestDraftTokenFitting::test_non_last_chunk_no_draft_fitting",
    adaptation="the chunk is really not the last (1000 tokens, 200 of budget), where upstream's "
               "mock says so")
def test_non_last_chunk_no_draft_fitting():
    bench = _chunked(max_num_tokens=200)
    req = bench.context("0", 1000, draft=5)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert req.context_chunk_size == 192
    assert req.num_draft_tokens == 5
    assert out.num_tokens == 192  # a non-last chunk carries no draft tokens


NOT_MODELLED = {}
