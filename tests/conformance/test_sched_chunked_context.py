"""TensorRT-LLM's KVCacheV2Scheduler tests of chunked context, ported onto kvlab.

Mirrors the upstream classes TestChunkedContext and TestMultimodalAwareChunkingV2 of
NVIDIA/TensorRT-LLM ``tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py``
at commit 0046b12caeb6c565d87675ced31951b62b9abd25 (inventory: ``inventory/v2_scheduler_2.txt``).

Upstream's ``ctx_chunk_config=(None, unit)`` is ``Bench(chunked_prefill=True,
chunk_unit_size=unit)``; its max_context_length is max_num_tokens, as kvlab's default. An
allocation that upstream's mock refuses is refused here because an outside tenant holds the
pages.
"""

from __future__ import annotations

import pytest
from support import Bench, ids

# == TestChunkedContext ======================================================================


@pytest.mark.upstream("TestChunkedContext::test_budget_enough_for_all")
def test_budget_enough_for_all():
    bench = Bench(chunked_prefill=True, max_num_tokens=200, chunk_unit_size=64)
    req = bench.context("0", 100)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert req.context_chunk_size == 100  # last chunk, no rounding


@pytest.mark.upstream(
    "TestChunkedContext::test_min_budget_check",
    adaptation="kvlab's Scheduler refuses chunk_unit_size > max_context_length (= "
    "max_num_tokens) at construction; upstream accepts it. The scheduler is built "
    "with max_num_tokens=1024, then given upstream's 50 (budget and "
    "max_context_length)",
)
def test_min_budget_check():
    bench = Bench(chunked_prefill=True, max_num_tokens=1024, chunk_unit_size=64)
    bench.scheduler.max_num_tokens = bench.scheduler.max_context_length = 50
    bench.context("0", 1000)
    out = bench.schedule()
    assert len(out.context_requests) == 0  # 50 < 64 min budget


@pytest.mark.upstream("TestChunkedContext::test_last_chunk_no_rounding")
def test_last_chunk_no_rounding():
    bench = Bench(chunked_prefill=True, max_num_tokens=200, chunk_unit_size=128)
    req = bench.context("0", 100)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert req.context_chunk_size == 100


@pytest.mark.upstream("TestChunkedContext::test_has_chunking_flag_set")
def test_has_chunking_flag_set():
    bench = Bench(chunked_prefill=True, max_num_tokens=100, chunk_unit_size=64)
    req = bench.context("0", 1000)
    out = bench.schedule()
    assert len(out.context_requests) == 1
    assert req.context_chunk_size == 64  # 64 < 1000: not the last chunk


@pytest.mark.upstream("TestChunkedContext::test_multiple_ctx_share_budget")
def test_multiple_ctx_share_budget():
    bench = Bench(chunked_prefill=True, max_num_tokens=500, chunk_unit_size=64)
    req1, req2 = bench.context("0", 200), bench.context("1", 200)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0", "1"]
    assert req1.context_chunk_size == 200
    assert req2.context_chunk_size == 200


@pytest.mark.upstream(
    "TestChunkedContext::test_chunk_fail_flows_budget",
    adaptation="upstream's mock refuses the first resize of two equal 200-token contexts; "
    "here an outside tenant leaves 4 pages free and the first context is 1000 "
    "tokens, so its 448-token chunk (7 pages) really fails while the second's 200 "
    "tokens (4 pages) fit. Had the failed chunk kept its 448 tokens of budget, the "
    "second could not have been scheduled",
)
def test_chunk_fail_flows_budget():
    bench = Bench(chunked_prefill=True, max_num_tokens=500, chunk_unit_size=64)
    bench.hold_all_but(4)
    bench.context("0", 1000)
    bench.context("1", 200)
    out = bench.schedule()
    assert ids(out.context_requests) == ["1"]


@pytest.mark.upstream("TestChunkedContext::test_chunk_rounding_non_last")
def test_chunk_rounding_non_last():
    bench = Bench(chunked_prefill=True, max_num_tokens=200, chunk_unit_size=128)
    req = bench.context("0", 1000)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert req.context_chunk_size == 128  # 200 // 128 * 128


@pytest.mark.upstream("TestChunkedContext::test_has_chunking_flag_not_set")
def test_has_chunking_flag_not_set():
    bench = Bench(chunked_prefill=True, max_num_tokens=500, chunk_unit_size=64)
    req = bench.context("0", 100)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert req.context_chunk_size == 100


@pytest.mark.upstream("TestChunkedContext::test_max_context_length_caps_chunk")
def test_max_context_length_caps_chunk():
    bench = Bench(chunked_prefill=True, max_num_tokens=500, chunk_unit_size=64)
    req = bench.context("0", 2000)
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]
    assert req.context_chunk_size == 448  # min(500, 2000) // 64 * 64


@pytest.mark.upstream(
    "TestChunkedContext::test_chunk_rounds_to_zero",
    adaptation="kvlab's Scheduler refuses chunk_unit_size > max_context_length (= "
    "max_num_tokens) at construction; upstream accepts it. The scheduler is built "
    "with max_num_tokens=1024, then given upstream's 100 (budget and "
    "max_context_length)",
)
def test_chunk_rounds_to_zero():
    bench = Bench(chunked_prefill=True, max_num_tokens=1024, chunk_unit_size=128)
    bench.scheduler.max_num_tokens = bench.scheduler.max_context_length = 100
    bench.context("0", 1000)
    out = bench.schedule()
    assert len(out.context_requests) == 0  # 100 // 128 * 128 = 0


@pytest.mark.upstream(
    "TestChunkedContext::test_subsequent_chunk_non_first",
    adaptation="the non-first chunk is physical: a 264-token context whose first 64 tokens "
    "ran in an earlier pass, 200 remaining",
)
def test_subsequent_chunk_non_first():
    bench = Bench(chunked_prefill=True, max_num_tokens=500, chunk_unit_size=64)
    req = bench.started_context("0", 264, 64)
    assert not req.is_first_context_chunk and req.context_remaining_length == 200
    out = bench.schedule()
    assert ids(out.context_requests) == ["0"]


NOT_MODELLED = {
    "TestChunkedContext::test_budget_limits_chunk": "upstream builds the scheduler with a draft KV cache manager (joint target/draft reuse) "
    "and checks that the draft pool is given the same 256-token chunk "
    "(try_allocate_draft_context); kvlab has one pool and no draft KV cache manager. The "
    "budget-limited, unit-rounded chunk is test_chunk_rounding_non_last's and "
    "test_max_context_length_caps_chunk's port",
    "TestChunkedContext::test_force_chunk_defaults_to_remaining_context_without_snapshot_points": "FORCE_CHUNK's fallback without snapshot points (the whole remaining context): kvlab has "
    "no ContextChunkingPolicy, and its one chunking rule taking a whole context that fits "
    "the budget is test_budget_enough_for_all's port",
    "TestChunkedContext::test_force_chunk_uses_expected_snapshot_points": "FORCE_CHUNK with expect_snapshot_points ends chunks at the recurrent-state snapshot "
    "points kept for block reuse (prefix reuse of SSM states); kvlab has no chunking "
    "policy and no snapshot points",
    "TestChunkedContext::test_force_chunk_uses_next_expected_snapshot_point": "FORCE_CHUNK with expect_snapshot_points ends chunks at the recurrent-state snapshot "
    "points kept for block reuse (prefix reuse of SSM states); kvlab has no chunking "
    "policy and no snapshot points",
    "TestChunkedContext::test_force_chunk_allows_prompt_end_shorter_than_unit_size": "FORCE_CHUNK with expect_snapshot_points ends chunks at the recurrent-state snapshot "
    "points kept for block reuse (prefix reuse of SSM states); kvlab has no chunking "
    "policy and no snapshot points",
    "TestChunkedContext::test_force_chunk_allows_snapshot_point_shorter_than_unit_size": "FORCE_CHUNK with expect_snapshot_points ends chunks at the recurrent-state snapshot "
    "points kept for block reuse (prefix reuse of SSM states); kvlab has no chunking "
    "policy and no snapshot points",
    "TestChunkedContext::test_force_chunk_makes_progress_before_budget_limited_snapshot": "FORCE_CHUNK with expect_snapshot_points ends chunks at the recurrent-state snapshot "
    "points kept for block reuse (prefix reuse of SSM states); kvlab has no chunking "
    "policy and no snapshot points",
    "TestMultimodalAwareChunkingV2::test_snap_up_extends_chunk_to_block_end": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_snap_up_rounds_up_past_unaligned_block_end": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_snap_up_two_adjacent_blocks_only_swallows_first": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_snap_down_when_budget_exceeded": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_snap_down_floors_to_chunk_unit_size": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_snap_down_when_max_context_length_exceeded": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_up_block_end_clamps_to_prompt_end": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_raises_when_block_exceeds_max_context_length": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_last_resort_defers_when_snap_down_would_starve": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_no_op_when_bidirectional_flag_false": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_no_op_when_no_multimodal_data": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_no_op_when_cumsum_missing": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_no_op_when_boundary_not_in_block": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_no_op_when_chunk_reaches_prompt_end": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_aligns_relative_to_context_current_position": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
    "TestMultimodalAwareChunkingV2::test_defer_skips_request_in_schedule_request": "multimodal: _align_chunk_to_mm_block keeps bidirectional multimodal embedding blocks "
    "whole across chunk ends; kvlab requests carry no multimodal data",
}
