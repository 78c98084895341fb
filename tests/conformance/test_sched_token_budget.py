"""Token and request budgets of one pass, draft tokens included (non-chunked).

Mirrors ``TestTokenBudget`` and ``TestDraftTokenBudget`` of NVIDIA/TensorRT-LLM
tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py, read at commit
0046b12caeb6c565d87675ced31951b62b9abd25.

Pages are plentiful (4096) in every test here: only the budgets decide.
"""

import pytest
from support import Bench, ids

NOT_MODELLED = {
    "TestTokenBudget::test_encoder_budget_exhausted": "encoder-decoder: kvlab has no ENCODER_INIT requests nor encoder budget",
}


# -- TestTokenBudget ------------------------------------------------------------------------


@pytest.mark.upstream("TestTokenBudget::test_gen_budget_exhausted")
def test_gen_budget_exhausted():
    bench = Bench(max_num_tokens=3)
    for i in range(5):
        bench.generation(str(i))
    batch = bench.schedule()
    assert len(batch.generation_requests) == 3
    assert ids(batch.generation_requests) == ["0", "1", "2"]


@pytest.mark.upstream(
    "TestTokenBudget::test_ctx_budget_exhausted",
    adaptation="kvlab's Scheduler.submit applies the LLM API's front-door check"
    " (a prompt over max_num_tokens without chunking is rejected "
    "before any pass), so the request is submitted under a budget it"
    " fits and the pass runs under the test's budget",
)
def test_ctx_budget_exhausted():
    bench = Bench(max_num_tokens=100)
    request = bench.submit_past_front_door("0", 200)
    batch = bench.schedule()
    assert len(batch.context_requests) == 0
    assert request.state == "waiting"


@pytest.mark.upstream("TestTokenBudget::test_gen_with_draft_tokens")
def test_gen_with_draft_tokens():
    bench = Bench(max_num_tokens=5)
    bench.generation("0", draft=3)  # 1 + 3 = 4
    bench.generation("1", draft=3)  # 1 + 3 = 4, total 8 > 5
    batch = bench.schedule()
    assert len(batch.generation_requests) == 1
    assert batch.generation_requests[0].request_id == "0"


@pytest.mark.upstream("TestTokenBudget::test_ctx_with_draft_no_chunk")
def test_ctx_with_draft_no_chunk():
    """Context(80) + draft(5) = 85, fits in budget=100."""
    bench = Bench(max_num_tokens=100)
    bench.context("0", 80, draft=5)
    batch = bench.schedule()
    assert len(batch.context_requests) == 1


@pytest.mark.upstream("TestTokenBudget::test_mixed_gen_ctx_budget")
def test_mixed_gen_ctx_budget():
    bench = Bench(max_num_tokens=110)
    bench.generation("0")  # 1
    bench.context("1", 100)  # 100
    batch = bench.schedule()
    assert len(batch.generation_requests) == 1
    assert len(batch.context_requests) == 1


@pytest.mark.upstream("TestTokenBudget::test_unlimited_budget")
def test_unlimited_budget():
    bench = Bench(max_num_tokens=None)
    for i in range(10):
        bench.generation(str(i))
    batch = bench.schedule()
    assert len(batch.generation_requests) == 10


@pytest.mark.upstream("TestTokenBudget::test_budget_exactly_full")
def test_budget_exactly_full():
    bench = Bench(max_num_tokens=3)
    for i in range(3):
        bench.generation(str(i))
    batch = bench.schedule()
    assert len(batch.generation_requests) == 3


@pytest.mark.upstream(
    "TestTokenBudget::test_batch_size_limit",
    adaptation="the manager gets 8 page-index slots, apart from the scheduler's"
    " max_batch_size, so every request can hold a cache (upstream's "
    "mock manager has no slot limit)",
)
def test_batch_size_limit():
    bench = Bench(max_batch_size=2, slots=8)
    for i in range(3):
        bench.generation(str(i))
    batch = bench.schedule()
    assert len(batch.generation_requests) == 2


@pytest.mark.upstream(
    "TestTokenBudget::test_combined_batch_and_budget",
    adaptation="the manager gets 8 page-index slots, apart from the scheduler's"
    " max_batch_size, so every request can hold a cache (upstream's "
    "mock manager has no slot limit)",
)
def test_combined_batch_and_budget():
    bench = Bench(max_batch_size=3, max_num_tokens=2, slots=8)
    for i in range(5):
        bench.generation(str(i))
    batch = bench.schedule()
    assert len(batch.generation_requests) == 2  # budget limit first


# -- TestDraftTokenBudget -------------------------------------------------------------------


@pytest.mark.upstream("TestDraftTokenBudget::test_ctx_fits_draft_exceeds_budget")
def test_ctx_fits_draft_exceeds_budget():
    """ctx(80) fits in budget=100, but 80 + 30 = 110 > 100: context and drafts are one unit."""
    bench = Bench(tokens_per_block=64, max_num_tokens=100)
    bench.context("0", 80, draft=30)
    batch = bench.schedule()
    assert len(batch.context_requests) == 0


@pytest.mark.upstream("TestDraftTokenBudget::test_ctx_fits_exactly_draft_pushes_over")
def test_ctx_fits_exactly_draft_pushes_over():
    """ctx(100) fits in budget=100, but 100 + 5 = 105 > 100."""
    bench = Bench(tokens_per_block=64, max_num_tokens=100)
    bench.context("0", 100, draft=5)
    batch = bench.schedule()
    assert len(batch.context_requests) == 0


@pytest.mark.upstream("TestDraftTokenBudget::test_ctx_plus_draft_fits_exactly")
def test_ctx_plus_draft_fits_exactly():
    """ctx(80) + draft(20) = 100 == budget: scheduled with all its drafts."""
    bench = Bench(tokens_per_block=64, max_num_tokens=100)
    bench.context("0", 80, draft=20)
    batch = bench.schedule()
    assert len(batch.context_requests) == 1
    assert batch.num_tokens == 100


@pytest.mark.upstream(
    "TestDraftTokenBudget::test_ctx_alone_exceeds_budget",
    adaptation="kvlab's Scheduler.submit applies the LLM API's front-door check"
    " (a prompt over max_num_tokens without chunking is rejected "
    "before any pass), so the request is submitted under a budget it"
    " fits and the pass runs under the test's budget",
)
def test_ctx_alone_exceeds_budget():
    """ctx(200) > budget=100."""
    bench = Bench(max_num_tokens=100)
    bench.submit_past_front_door("0", 200, draft=5)
    batch = bench.schedule()
    assert len(batch.context_requests) == 0


@pytest.mark.upstream("TestDraftTokenBudget::test_gen_with_draft_exceeds_budget")
def test_gen_with_draft_exceeds_budget():
    """gen(draft=5): 1 + 5 = 6 > budget=3."""
    bench = Bench(max_num_tokens=3)
    bench.generation("0", draft=5)
    batch = bench.schedule()
    assert len(batch.generation_requests) == 0
