"""Disaggregated serving: DISAGG_GENERATION_INIT requests and prepare_disagg_gen_init.

Mirrors ``TestDisagg`` of NVIDIA/TensorRT-LLM
tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py, read at commit
0046b12caeb6c565d87675ced31951b62b9abd25.

A kvlab request with ``disagg_generation_init=True`` is in DISAGG_GENERATION_INIT until its
cache is fitted; the executor loop then receives its context and first token in that same step
(kvlab has no DISAGG_GENERATION_TRANS_IN_PROGRESS state), so from the next pass on it is a
generation request. Upstream's ``prepare_disagg_gen_init`` answers are made physically: a
cache the pool cannot hold is refused.
"""

import pytest
from support import Bench, ids

NOT_MODELLED = {
    "TestDisagg::test_disagg_checks_peft_budget": "PEFT/LoRA pages: kvlab has no PEFT cache manager nor LoRA task ids",
    "TestDisagg::test_disagg_peft_shared_task_id": "PEFT/LoRA pages: kvlab has no PEFT cache manager nor LoRA task ids",
    "TestDisagg::test_disagg_joint_target_draft_admission_succeeds": "draft KV cache manager: kvlab has no separate draft-model pool to admit jointly",
    "TestDisagg::test_disagg_draft_admission_failure_rolls_back_both_pools": "draft KV cache manager: kvlab has no separate draft-model pool to roll back",
    "TestDisagg::test_disagg_target_admission_failure_does_not_touch_draft": "draft KV cache manager: kvlab has no separate draft-model pool left untouched",
    "TestDisagg::test_disagg_peft_does_not_reduce_batch_capacity": "PEFT/LoRA pages: kvlab has no PEFT cache manager nor LoRA task ids",
    "TestDisagg::test_disagg_peft_reduces_peft_budget_for_later_requests": "PEFT/LoRA pages: kvlab has no PEFT cache manager nor LoRA task ids",
}


@pytest.mark.upstream("TestDisagg::test_disagg_bypasses_state_gate")
def test_disagg_bypasses_state_gate():
    bench = Bench(max_num_tokens=100)
    bench.disagg("0")
    batch = bench.schedule()
    assert ids(batch.fitting_disagg_gen_init_requests) == ["0"]


@pytest.mark.upstream(
    "TestDisagg::test_disagg_does_not_count_toward_batch",
    adaptation="the generation request arrives after the DISAGG_GENERATION_INIT"
    " one, as upstream orders them: while it is built, the pool "
    "holds only the pages of its own context, so the earlier disagg "
    "request cannot fit and stays DISAGG_GENERATION_INIT; the "
    "manager gets its own page-index slots (upstream's mock "
    "IndexMapper never runs out), so the generation request's cache "
    "does not take the disagg request's slot",
)
def test_disagg_does_not_count_toward_batch():
    """Disagg does not consume the forward batch's request budget."""
    bench = Bench(max_batch_size=1, max_num_tokens=100, slots=4)
    bench.disagg("0")
    bench.generation_behind("1")
    batch = bench.schedule()
    assert ids(batch.fitting_disagg_gen_init_requests) == ["0"]
    assert ids(batch.generation_requests) == ["1"]


@pytest.mark.upstream(
    "TestDisagg::test_disagg_does_not_consume_token_budget",
    adaptation="the generation request arrives after the DISAGG_GENERATION_INIT"
    " one, as upstream orders them: while it is built, the pool "
    "holds only the pages of its own context, so the earlier disagg "
    "request cannot fit and stays DISAGG_GENERATION_INIT",
)
def test_disagg_does_not_consume_token_budget():
    """Disagg uses 0 tokens, so a tight token budget still allows the generation step."""
    bench = Bench(max_num_tokens=1)
    bench.disagg("0")
    bench.generation_behind("1")
    batch = bench.schedule()
    assert ids(batch.fitting_disagg_gen_init_requests) == ["0"]
    assert ids(batch.generation_requests) == ["1"]


@pytest.mark.upstream("TestDisagg::test_multiple_disagg")
def test_multiple_disagg():
    bench = Bench(max_num_tokens=100)
    for i in range(3):
        bench.disagg(str(i))
    batch = bench.schedule()
    assert ids(batch.fitting_disagg_gen_init_requests) == ["0", "1", "2"]


@pytest.mark.upstream(
    "TestDisagg::test_disagg_mixed_with_gen_ctx",
    adaptation="the generation request arrives after the DISAGG_GENERATION_INIT"
    " one, as upstream orders them: while it is built, the pool "
    "holds only the pages of its own context, so the earlier disagg "
    "request cannot fit and stays DISAGG_GENERATION_INIT",
)
def test_disagg_mixed_with_gen_ctx():
    bench = Bench(max_num_tokens=200)
    bench.disagg("0")
    bench.generation_behind("1")
    bench.context("2", 100)
    bench.disagg("3")
    batch = bench.schedule()
    assert ids(batch.fitting_disagg_gen_init_requests) == ["0", "3"]
    assert ids(batch.generation_requests) == ["1"]
    assert ids(batch.context_requests) == ["2"]


@pytest.mark.upstream("TestDisagg::test_disagg_not_blocked_when_batch_full")
def test_disagg_not_blocked_when_batch_full():
    """A full generation batch does not block disagg: disagg bypasses the budget."""
    bench = Bench(max_num_tokens=200, scheduler_capacity=2)
    bench.generation("0")
    bench.generation("1")
    bench.disagg("2")
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0", "1"]
    assert ids(batch.fitting_disagg_gen_init_requests) == ["2"]


@pytest.mark.upstream(
    "TestDisagg::test_disagg_gated_by_prepare_disagg_gen_init",
    adaptation="prepare_disagg_gen_init fails physically: the pool has free "
    "pages for two of the four 100-token caches",
)
def test_disagg_gated_by_prepare_disagg_gen_init():
    """Disagg is limited by the KV cache, not by the batch budget."""
    bench = Bench(max_num_tokens=100)
    for i in range(4):
        bench.disagg(str(i))  # 2 pages each
    bench.hold_all_but(4)
    batch = bench.schedule()
    assert ids(batch.fitting_disagg_gen_init_requests) == ["0", "1"]


@pytest.mark.upstream(
    "TestDisagg::test_disagg_prepare_disagg_gen_init_fails_skips",
    adaptation="prepare_disagg_gen_init fails physically: the first request's "
    "context is 200 tokens (4 pages), the second's 100 (2 pages), "
    "and 2 pages are free",
)
def test_disagg_prepare_disagg_gen_init_fails_skips():
    """A prepare_disagg_gen_init failure skips the request; the loop continues."""
    bench = Bench(max_num_tokens=100)
    bench.disagg("0", 200)
    bench.disagg("1", 100)
    bench.hold_all_but(2)
    batch = bench.schedule()
    assert ids(batch.fitting_disagg_gen_init_requests) == ["1"]


@pytest.mark.upstream(
    "TestDisagg::test_disagg_uses_prepare_disagg_gen_init_api",
    adaptation="the mock's call log becomes the caches' state: each fitted "
    "cache declares the transferred prompt as its history, which "
    "prepare_disagg_gen_init does and prepare_context/resize_context "
    "would not",
)
def test_disagg_uses_prepare_disagg_gen_init_api():
    bench = Bench(max_num_tokens=100)
    requests = [bench.disagg("0"), bench.disagg("1")]
    batch = bench.schedule()
    assert ids(batch.fitting_disagg_gen_init_requests) == ["0", "1"]
    for request in requests:
        cache = bench.manager.get_cache(request)
        assert cache.history_length == request.prompt_len == 100
        assert cache.capacity >= request.prompt_len


@pytest.mark.upstream(
    "TestDisagg::test_disagg_exceeds_max_batch_size",
    adaptation="the manager gets 8 page-index slots, apart from the "
    "scheduler's max_batch_size=2 (upstream's mock IndexMapper never "
    "runs out)",
)
def test_disagg_exceeds_max_batch_size():
    """The disagg count can exceed max_batch_size, since disagg bypasses the budget."""
    bench = Bench(max_batch_size=2, max_num_tokens=100, slots=8)
    for i in range(5):
        bench.disagg(str(i))
    batch = bench.schedule()
    # all 5 fitted despite max_batch_size=2
    assert ids(batch.fitting_disagg_gen_init_requests) == ["0", "1", "2", "3", "4"]


@pytest.mark.upstream(
    "TestDisagg::test_disagg_interleaved_gen_full_batch_continues",
    adaptation="the manager gets its own page-index slots (upstream's mock "
    "IndexMapper never runs out), so the generation request's cache "
    "does not take the disagg request's slot",
)
def test_disagg_interleaved_gen_full_batch_continues():
    """Disagg after a generation that fills the batch is still fitted; the context after it
    is blocked."""
    bench = Bench(max_batch_size=1, max_num_tokens=200, slots=4)
    bench.generation("0")  # fills the batch (1/1)
    bench.disagg("1")  # bypasses the batch budget: fitted
    bench.context("2", 50)  # batch full: blocked
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert ids(batch.fitting_disagg_gen_init_requests) == ["1"]
    assert ids(batch.context_requests) == []


@pytest.mark.upstream(
    "TestDisagg::test_disagg_prepare_fail_continues_to_next_disagg",
    adaptation="prepare_disagg_gen_init fails physically for 0 and 2: their "
    "contexts are 300 tokens (5 pages), 1's and 3's 100 (2 pages), "
    "and 4 pages are free",
)
def test_disagg_prepare_fail_continues_to_next_disagg():
    """A failure for one disagg request does not stop the others."""
    bench = Bench(max_num_tokens=200)
    for i, length in enumerate((300, 100, 300, 100)):
        bench.disagg(str(i), length)
    bench.hold_all_but(4)
    batch = bench.schedule()
    assert ids(batch.fitting_disagg_gen_init_requests) == ["1", "3"]


@pytest.mark.upstream(
    "TestDisagg::test_disagg_cross_iteration_slot_overflow",
    adaptation="kvlab has no DISAGG_GENERATION_TRANS_IN_PROGRESS state: the "
    "transfer completes in the fitting step, so iteration 2 sees "
    "0 and 1 as generation requests; prepare_disagg_gen_init calls "
    "are counted as caches held",
)
def test_disagg_cross_iteration_slot_overflow():
    """Fitted disagg requests keep their caches (slots) while later disagg requests are fitted
    too: scheduler_capacity=2 does not cap them (upstream's test documents the overflow)."""
    bench = Bench(max_num_tokens=200, scheduler_capacity=2)
    bench.disagg("0")
    bench.disagg("1")
    out1 = bench.schedule()
    assert ids(out1.fitting_disagg_gen_init_requests) == ["0", "1"]
    assert len(bench.manager.caches) == 2  # 2 slots consumed

    bench.disagg("2")
    bench.disagg("3")
    out2 = bench.schedule()
    assert ids(out2.fitting_disagg_gen_init_requests) == ["2", "3"]
    assert len(bench.manager.caches) == 4  # the overflow: 4 caches, capacity 2
    assert ids(out2.generation_requests) == ["0", "1"]
