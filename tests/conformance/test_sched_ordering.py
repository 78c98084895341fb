"""TensorRT-LLM's KVCacheV2Scheduler tests of ordering and of the scheduler's output, ported
onto kvlab.

Mirrors the upstream classes TestSorting, TestSchedulerOutput and TestMixedOrdering of
NVIDIA/TensorRT-LLM ``tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py``
at commit 0046b12caeb6c565d87675ced31951b62b9abd25 (inventory: ``inventory/v2_scheduler_2.txt``).

A generation request is physical (its context ran in a set-up pass and holds its pages), so
generation requests are built before the contexts a test schedules; the scheduler's phases
(generation first, contexts after) make that order no different from upstream's lists. An
allocation upstream's mock refuses is refused here because an outside tenant holds the pages.
kvlab's ScheduledBatch has no ``num_fitting_requests``; it is counted as upstream's
SchedulerOutput counts it, context plus generation requests (disagg gen-init not included).
"""

from __future__ import annotations

import pytest
from support import Bench, ids, num_fitting

# == TestSorting =============================================================================


@pytest.mark.upstream("TestSorting::test_no_lora_stable_order")
def test_no_lora_stable_order():
    bench = Bench(max_num_tokens=100)
    bench.generations("0", "1", "2")
    out = bench.schedule()
    assert ids(out.generation_requests) == ["0", "1", "2"]


@pytest.mark.upstream(
    "TestSorting::test_ctx_with_chunks_nonlast_before_last",
    adaptation="no LoRA task ids (upstream's 2 and 1 would sort the same way). Upstream's mock "
    "declares request 1's chunk non-last with 1000 tokens in a 2000 budget; here "
    "request 1 is 2000 tokens, so with 1900 of budget left its chunk (1856) really "
    "is not the last",
)
def test_ctx_with_chunks_nonlast_before_last():
    bench = Bench(chunked_prefill=True, chunk_unit_size=64, max_num_tokens=2000)
    req0 = bench.context("0", 100)
    req1 = bench.context("1", 2000)
    out = bench.schedule()
    assert len(out.context_requests) == 2
    assert req0.context_chunk_size == 100 and req1.context_chunk_size == 1856
    # non-last before last in the sorted output
    assert out.context_requests[0].request_id == "1"
    assert out.context_requests[1].request_id == "0"


# == TestSchedulerOutput =====================================================================


@pytest.mark.upstream(
    "TestSchedulerOutput::test_output_fields_correct",
    adaptation="kvlab's ScheduledBatch has no encoder_requests (encoder-decoder is not "
    "modelled) and no num_fitting_requests (counted here as context + generation)",
)
def test_output_fields_correct():
    bench = Bench(max_num_tokens=1000)
    bench.generations("0")
    bench.context("1", 100)
    bench.disagg("2")
    out = bench.schedule()
    assert len(out.context_requests) == 1
    assert len(out.generation_requests) == 1
    assert len(out.fitting_disagg_gen_init_requests) == 1
    assert out.recompute_paused_requests == []
    assert num_fitting(out) == 2


@pytest.mark.upstream("TestSchedulerOutput::test_num_fitting_requests")
def test_num_fitting_requests():
    bench = Bench(max_num_tokens=1000)
    bench.generations("2", "3", "4")
    bench.context("0", 100)
    bench.context("1", 100)
    out = bench.schedule()
    assert num_fitting(out) == 5


@pytest.mark.upstream("TestSchedulerOutput::test_empty_output")
def test_empty_output():
    bench = Bench(max_num_tokens=100)
    out = bench.schedule()
    assert num_fitting(out) == 0
    assert len(out.context_requests) == 0
    assert len(out.generation_requests) == 0


# == TestMixedOrdering =======================================================================


@pytest.mark.upstream("TestMixedOrdering::test_mixed_gen_ctx_order")
def test_mixed_gen_ctx_order():
    bench = Bench(max_num_tokens=300)
    bench.generations("0", "2")
    bench.context("1", 100)
    bench.context("3", 100)
    out = bench.schedule()
    assert len(out.generation_requests) == 2
    assert len(out.context_requests) == 2


@pytest.mark.upstream(
    "TestMixedOrdering::test_ctx_fail_gen_after_succeeds",
    adaptation="an outside tenant leaves 1 free page: the generation step takes it, the "
    "500-token context (8 pages) fails. With no tier below the GPU kvlab's phase 2 "
    "looks for a request to preempt for pages, and finds none (the only started "
    "request is scheduled this pass)",
)
def test_ctx_fail_gen_after_succeeds():
    bench = Bench(max_num_tokens=1000)
    bench.generations("1")
    bench.context("0", 500)
    bench.hold_all_but(1)
    out = bench.schedule()
    assert len(out.context_requests) == 0
    assert ids(out.generation_requests) == ["1"]


@pytest.mark.upstream(
    "TestMixedOrdering::test_gen_fail_self_evicts_then_breaks",
    adaptation="no free page (an outside tenant holds them), so the generation step really "
    "fails; with no tier below the GPU the self-suspension frees nothing",
)
def test_gen_fail_self_evicts_then_breaks():
    bench = Bench(max_num_tokens=1000)
    bench.generations("0")
    bench.context("1", 100)
    bench.hold_all_but(0)
    out = bench.schedule()
    assert len(out.generation_requests) == 0
    assert len(out.context_requests) == 0
    assert ids(out.paused_requests) == ["0"]


@pytest.mark.upstream("TestMixedOrdering::test_budget_builds_across_types")
def test_budget_builds_across_types():
    bench = Bench(max_num_tokens=102)
    bench.generations("0", "2")
    bench.context("1", 100)
    out = bench.schedule()
    assert len(out.generation_requests) == 2
    assert len(out.context_requests) == 1


@pytest.mark.upstream(
    "TestMixedOrdering::test_ctx_fail_budget_preserved",
    adaptation="an outside tenant leaves 1 free page: the generation step takes it and the "
    "50-token context's page cannot be had",
)
def test_ctx_fail_budget_preserved():
    bench = Bench(max_num_tokens=100)
    bench.generations("1")
    bench.context("0", 50)
    bench.hold_all_but(1)
    out = bench.schedule()
    assert ids(out.generation_requests) == ["1"]


@pytest.mark.upstream(
    "TestMixedOrdering::test_multiple_gen_after_gen_fail",
    adaptation="no free page (an outside tenant holds them): request 0's step fails; with no "
    "tier below the GPU, suspending requests 2 and 1 frees nothing (suspended in "
    "place), so request 0 then suspends itself",
)
def test_multiple_gen_after_gen_fail():
    bench = Bench(max_num_tokens=1000)
    bench.generations("0", "1", "2")
    bench.hold_all_but(0)
    out = bench.schedule()
    assert len(out.generation_requests) == 0
    assert set(ids(out.paused_requests)) == {"0", "1", "2"}


@pytest.mark.upstream(
    "TestMixedOrdering::test_secondary_tier_recompute_pause_multiple_victims",
    adaptation="upstream's mock refuses request 0 whatever is freed; here request 0 carries "
    "640 draft tokens, so its step needs 10 more pages than it holds, more than "
    "suspending or recompute-pausing requests 1 and 2 (a page each) can free, with "
    "no free page (an outside tenant holds them) and the automatic host tier",
)
def test_secondary_tier_recompute_pause_multiple_victims():
    bench = Bench(max_num_tokens=1000, can_evict=True)
    assert bench.manager.can_evict
    bench.generations("0", draft=640)
    bench.generations("1", "2")
    bench.hold_all_but(0)
    out = bench.schedule()
    assert len(out.generation_requests) == 0
    assert ids(out.paused_requests) == ["0"]
    assert set(ids(out.recompute_paused_requests)) == {"1", "2"}


NOT_MODELLED = {
    "TestSorting::test_lora_sorted_ascending": "PEFT/LoRA pages: the sort key is the LoRA task id, and kvlab requests carry none",
    "TestSorting::test_none_before_lora": "PEFT/LoRA pages: the sort key is the LoRA task id, and kvlab requests carry none",
    "TestSorting::test_ctx_without_chunks_plain_sort": "PEFT/LoRA pages: contexts sorted by LoRA task id, which kvlab requests do not carry",
    "TestMixedOrdering::test_peft_across_types": "PEFT/LoRA pages: the PEFT cache manager's page budget; kvlab has no PEFT cache",
    "TestMixedOrdering::test_encoder_then_gen": "encoder-decoder / cross-attention: ENCODER_INIT requests and encoder_requests; "
    "kvlab has no encoder",
}
