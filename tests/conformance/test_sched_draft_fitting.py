"""TensorRT-LLM's KVCacheV2Scheduler tests of draft tokens on a last context chunk, ported
onto kvlab.

Mirrors the upstream class TestDraftTokenFitting of NVIDIA/TensorRT-LLM
``tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py`` at commit
0046b12caeb6c565d87675ced31951b62b9abd25 (inventory: ``inventory/v2_scheduler_2.txt``).

Upstream asserts ``req.discard_draft_tokens.assert_not_called()``: the V2 scheduler keeps
every draft token, whatever room the chunk's last page has left (the page remainder), and adds
all of them to the last chunk's tokens, past the budget check. kvlab has no
``discard_draft_tokens``; what a discard would change is measured instead: the pass's token
count (``batch.num_tokens``, upstream's budget) holds the chunk plus every draft token, and the
chunk's resize takes the pages of all of them, a page past the remainder where they do not fit
in it (``pages_allocated`` of a fresh pool). A non-last chunk carries none.
"""

from __future__ import annotations

import pytest
from support import Bench, ids


def _last_chunk_with_drafts(max_num_tokens, length, draft, pages):
    bench = Bench(chunked_prefill=True, chunk_unit_size=64, max_num_tokens=max_num_tokens)
    req = bench.context("0", length, draft=draft)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert req.context_chunk_size == length  # the last chunk
    assert out.num_tokens == length + draft  # every draft token in the budget
    assert bench.manager.pool.counters.pages_allocated == pages  # and in the resize
    return bench


@pytest.mark.upstream("TestDraftTokenFitting::test_draft_fits_in_page_remainder")
def test_draft_fits_in_page_remainder():
    _last_chunk_with_drafts(200, 100, 5, pages=2)  # 100 % 64 = 36: 28 slots left, 5 drafts


@pytest.mark.upstream("TestDraftTokenFitting::test_draft_exceeds_page_remainder")
def test_draft_exceeds_page_remainder():
    _last_chunk_with_drafts(200, 128, 5, pages=3)  # no slot left: the drafts take a third page


@pytest.mark.upstream("TestDraftTokenFitting::test_draft_partially_fits")
def test_draft_partially_fits():
    _last_chunk_with_drafts(200, 100, 30, pages=3)  # 28 slots left, 30 drafts: a third page


@pytest.mark.upstream("TestDraftTokenFitting::test_budget_limits_draft_space")
def test_budget_limits_draft_space():
    _last_chunk_with_drafts(110, 100, 20, pages=2)  # 100 + 20 = 120 > 110, past the budget check


@pytest.mark.upstream("TestDraftTokenFitting::test_max_context_length_limits_draft")
def test_max_context_length_limits_draft():
    bench = _last_chunk_with_drafts(110, 100, 20, pages=2)
    assert bench.scheduler.max_context_length == 110


@pytest.mark.upstream(
    "TestDraftTokenFitting::test_draft_tokens_add_to_batch_budget",
    adaptation="the generation request is built first (its context runs in a set-up pass); "
    "upstream lists it after the context, which the phases make no difference to",
)
def test_draft_tokens_add_to_batch_budget():
    bench = Bench(chunked_prefill=True, chunk_unit_size=64, max_num_tokens=200)
    bench.generations("1")
    bench.context("0", 100, draft=5)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert ids(out.generation_requests) == ["1"]
    assert out.num_tokens == 100 + 5 + 1  # upstream's comment: 106


@pytest.mark.upstream(
    "TestDraftTokenFitting::test_non_last_chunk_no_draft_fitting",
    adaptation="the chunk is really not the last (1000 tokens, 200 of budget), where upstream's "
    "mock says so",
)
def test_non_last_chunk_no_draft_fitting():
    bench = Bench(chunked_prefill=True, chunk_unit_size=64, max_num_tokens=200)
    req = bench.context("0", 1000, draft=5)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert req.context_chunk_size == 192
    assert out.num_tokens == 192  # a non-last chunk carries no draft tokens
    assert bench.manager.pool.counters.pages_allocated == 3  # nor pages for them


NOT_MODELLED = {}
