"""Eviction under MAX_UTILIZATION: victims from the tail, self-eviction, what is evictable.

Mirrors ``TestEviction`` of NVIDIA/TensorRT-LLM
tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py, read at commit
0046b12caeb6c565d87675ced31951b62b9abd25.

Upstream scripts ``try_allocate_generation``'s answers (fail, then succeed after an eviction);
here a generation request's step really needs one new page (``Bench.generations_at_page_end``) and an
outside tenant holds every free page. A retry that must succeed after an eviction needs the
victim's pages really freed, which kvlab's suspension does only into a tier below the GPU: those
tests give the bench a host tier (``can_evict``).
"""

import pytest
from support import Bench, ids

NOT_MODELLED = {
    "TestEviction::test_eviction_clears_request_runtime_state": "the request's per-batch runtime state (py_batch_idx) cleared when it is evicted: kvlab's "
    "Request keeps no batch index, so there is nothing to clear; the self-eviction it also "
    "checks is test_self_eviction_on_alloc_fail's port",
}


@pytest.mark.upstream(
    "TestEviction::test_evict_gen_from_tail",
    adaptation="kvlab's suspension frees device pages only into a tier below "
    "the GPU, so the bench has a host tier (can_evict) where "
    "upstream's mock scripts the retry's success",
)
def test_evict_gen_from_tail():
    bench = Bench(max_num_tokens=100, can_evict=True)
    bench.generations_at_page_end("0", "99")  # 99: in generation, at the tail: evictable
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert ids(batch.paused_requests) == ["99"]


@pytest.mark.upstream(
    "TestEviction::test_evict_nonfirst_ctx_chunk",
    adaptation="kvlab's suspension frees device pages only into a tier below "
    "the GPU, so the bench has a host tier (can_evict) where "
    "upstream's mock scripts the retry's success; a context past its"
    " first chunk needs a chunked scheduler in kvlab (its first "
    "64-token chunk really ran)",
)
def test_evict_nonfirst_ctx_chunk():
    bench = Bench(max_num_tokens=100, can_evict=True, chunked_prefill=True)
    gen0 = bench.generation("0", 63)  # stepped by the next set-up pass
    # a non-first context chunk is evictable: 100 tokens remain after its first chunk
    bench.started_context("99", 164, 64)
    assert bench.step_pages(gen0) == 1
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert ids(batch.paused_requests) == ["99"]


@pytest.mark.upstream("TestEviction::test_first_chunk_ctx_not_evictable")
def test_first_chunk_ctx_not_evictable():
    bench = Bench(max_num_tokens=100)
    bench.generations_at_page_end("0")
    bench.context("99", 100)  # first chunk: not evictable
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert len(batch.generation_requests) == 0
    # gen0 self-evicts; the break stops the loop before ctx99
    assert ids(batch.paused_requests) == ["0"]
    assert len(batch.context_requests) == 0


@pytest.mark.upstream(
    "TestEviction::test_evicted_in_paused_requests",
    adaptation="kvlab's suspension frees device pages only into a tier below "
    "the GPU, so the bench has a host tier (can_evict) where "
    "upstream's mock scripts the retry's success",
)
def test_evicted_in_paused_requests():
    bench = Bench(max_num_tokens=100, can_evict=True)
    _, victim = bench.generations_at_page_end("0", "99")
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert victim in batch.paused_requests


@pytest.mark.upstream(
    "TestEviction::test_suspend_called_on_victim",
    adaptation="kvlab's suspension frees device pages only into a tier below "
    "the GPU, so the bench has a host tier (can_evict) where "
    "upstream's mock scripts the retry's success; suspend_request's "
    "single call is the victim's state and suspension count",
)
def test_suspend_called_on_victim():
    bench = Bench(max_num_tokens=100, can_evict=True)
    _, victim = bench.generations_at_page_end("0", "99")
    bench.hold_all_but(0)
    bench.schedule()
    assert victim.state == "suspended" and victim.num_suspensions == 1
    assert not bench.manager.is_request_active(victim)


@pytest.mark.upstream(
    "TestEviction::test_multiple_evictions_order",
    adaptation="kvlab's suspension frees device pages only into a tier below "
    "the GPU, so the bench has a host tier (can_evict) where "
    "upstream's mock scripts the retry's success; gen0 carries 64 "
    "draft tokens, so its step needs two pages and each one-page "
    "victim frees one",
)
def test_multiple_evictions_order():
    """v2 (the tail) is evicted first, the retry fails, v1 is evicted, the retry succeeds."""
    bench = Bench(max_num_tokens=100, can_evict=True)
    gen0, v1, v2 = bench.generations_at_page_end("0", "98", "99", drafts={"0": 64})
    assert bench.step_pages(gen0) == 2
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert len(batch.paused_requests) == 2
    # v2 evicted first (higher index), then v1
    assert v2 in batch.paused_requests
    assert v1 in batch.paused_requests
    assert ids(batch.paused_requests) == ["99", "98"]


@pytest.mark.upstream(
    "TestEviction::test_req_it_end_shrinks_after_eviction",
    adaptation="kvlab's suspension frees device pages only into a tier below "
    "the GPU, so the bench has a host tier (can_evict) where "
    "upstream's mock scripts the retry's success",
)
def test_req_it_end_shrinks_after_eviction():
    """After an eviction, requests beyond the victim's index are not visited."""
    bench = Bench(max_num_tokens=100, can_evict=True)
    bench.generations_at_page_end("0", "5")  # 5: at index 1, evictable
    # index 2: a first-chunk context is not evictable, so the search finds 5 instead
    bench.context("6", 100)
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert ids(batch.paused_requests) == ["5"]
    assert batch.context_requests == []  # 6 was beyond the new end


@pytest.mark.upstream("TestEviction::test_self_eviction_on_alloc_fail")
def test_self_eviction_on_alloc_fail():
    """A generation request suspends itself when its step fails and no victim exists."""
    bench = Bench(max_num_tokens=100)
    bench.generations_at_page_end("0")
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert len(batch.generation_requests) == 0
    assert ids(batch.paused_requests) == ["0"]


@pytest.mark.upstream("TestEviction::test_self_eviction_no_started_in_range")
def test_self_eviction_no_started_in_range():
    """It suspends itself when everything behind it is a first-chunk context."""
    bench = Bench(max_num_tokens=200)
    bench.generations_at_page_end("0")
    bench.context("1", 50)
    bench.context("2", 50)
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert len(batch.generation_requests) == 0
    # gen0 self-evicts; the break stops the loop before ctx1 and ctx2
    assert ids(batch.paused_requests) == ["0"]
    assert len(batch.context_requests) == 0


#: kvlab requests have no LlmRequestState value; what stands for an UNKNOWN-state request.
RETIRED = (
    "upstream's UNKNOWN-state request at the tail, outside the scheduler's state window, "
    "is one that generated its only token in the set-up pass (kvlab has no state before "
    "the window; a finished request is its one state outside it), still in the "
    "scheduler's active list. Its context is started, so only the filter keeps it from "
    "being a victim: the port checks it is neither suspended nor recompute-paused"
)


@pytest.mark.upstream("TestEviction::test_unknown_state_not_evictable", adaptation=RETIRED)
def test_unknown_state_not_evictable():
    bench = Bench(max_num_tokens=100)
    gen0 = bench.generation("0", 63)
    with bench.set_up_budget():
        retired = bench.context("99", 64, max_new_tokens=1)
        bench.schedule()  # also steps request 0 by one token, within its page
    assert retired.state == "finished"
    assert any(r is retired for r in bench.scheduler._active)  # handed to the next pass
    assert bench.step_pages(gen0) == 1
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert len(batch.generation_requests) == 0
    # gen0 self-evicts; the filtered tail is neither evicted nor scheduled
    assert ids(batch.paused_requests) == ["0"]
    assert batch.recompute_paused_requests == [] and retired.num_recomputes == 0
