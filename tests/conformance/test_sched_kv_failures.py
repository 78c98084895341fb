"""KV cache allocation failures: generation steps, whole contexts and context chunks.

Mirrors ``TestKVCacheFailuresGen``, ``TestKVCacheFailuresCtx`` and
``TestKVCacheFailuresCtxChunked`` of NVIDIA/TensorRT-LLM
tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py, read at commit
0046b12caeb6c565d87675ced31951b62b9abd25.

Upstream scripts each ``try_allocate_generation`` / ``resize_context`` answer by hand; here the
answers happen on a real pool. Every generation request is built so that its step in the
test's pass needs exactly one new page (``Bench.generations_at_page_end``), and an outside tenant holds all
free pages but those the requests that must succeed will take (``Bench.hold_all_but``).
Upstream's ``suspend_request`` frees nothing unless ``can_evict``; kvlab's suspension frees
device pages only where the tier below the GPU has room for them, so a test whose retry must
succeed after an eviction gives the bench a host tier, and one whose retry must fail after a
suspension fills that tier with outside tenants' pages (``Bench.fill_host_tier``) or has none.
"""

import pytest
from support import Bench, ids

NOT_MODELLED = {
    "TestKVCacheFailuresGen::test_recompute_pause_skips_multimodal_victim": "multimodal: kvlab requests carry no multimodal inputs to lose on a recompute pause",
    "TestKVCacheFailuresGen::test_recompute_pause_skips_generation_to_complete_victim": "kvlab has no GENERATION_TO_COMPLETE state: a request that produced its last token is "
    "finished and its cache freed in that same step, so a finalizing victim never exists",
    "TestKVCacheFailuresGen::test_recompute_frontier_falls_back_to_evicted_victim": "the test hands the private _try_recompute_pause_for_gen a pass state built by hand "
    "(_RecomputePauseState(frontier=1), a victim evicted beyond it); kvlab's Scheduler "
    "runs only whole passes, and no physical set-up found leaves an evicted victim past "
    "the frontier when that branch runs",
    "TestKVCacheFailuresGen::test_generation_admission_rolls_back_target_when_draft_fails": "draft KV cache manager: kvlab has no separate draft-model pool to fail and roll back",
    "TestKVCacheFailuresCtx::test_draft_reuse_uses_common_prefix_before_budgeting": "prefix reuse with a draft KV cache manager (separate draft pool): kvlab has neither",
    "TestKVCacheFailuresCtx::test_pools_are_paired_on_one_depth_before_either_claims": "prefix reuse with a draft KV cache manager (separate draft pool): kvlab has neither",
    "TestKVCacheFailuresCtx::test_paired_reuse_falls_back_to_zero_when_pools_disagree": "prefix reuse with a draft KV cache manager (separate draft pool): kvlab has neither",
    "TestKVCacheFailuresCtx::test_reentry_with_a_shallower_match_rewinds_the_shared_cursor": "prefix reuse / block reuse: kvlab never prepopulates a prompt from reused blocks",
    "TestKVCacheFailuresCtx::test_draft_context_failure_rolls_back_target": "draft KV cache manager: kvlab has no separate draft-model pool to fail and roll back",
}


# -- TestKVCacheFailuresGen -----------------------------------------------------------------


@pytest.mark.upstream("TestKVCacheFailuresGen::test_gen_alloc_succeeds")
def test_gen_alloc_succeeds():
    bench = Bench(max_num_tokens=100)
    for i in range(3):
        bench.generation(str(i))
    batch = bench.schedule()
    assert len(batch.generation_requests) == 3


@pytest.mark.upstream("TestKVCacheFailuresGen::test_gen_alloc_fails_no_victim")
def test_gen_alloc_fails_no_victim():
    bench = Bench(max_num_tokens=100)
    gen0, gen1 = bench.generations_at_page_end("0", "1")
    bench.context("2", 10)  # first chunk, not evictable
    assert bench.step_pages(gen0) == bench.step_pages(gen1) == 1
    bench.hold_all_but(1)  # gen0 ok, gen1 fails
    batch = bench.schedule()
    assert len(batch.generation_requests) == 1
    assert batch.generation_requests[0].request_id == "0"


@pytest.mark.upstream(
    "TestKVCacheFailuresGen::test_gen_alloc_fails_evict_succeeds",
    adaptation="kvlab's suspension frees device pages only into a tier below "
    "the GPU, so the bench has a host tier (can_evict) where "
    "upstream's mock scripts the retry's success",
)
def test_gen_alloc_fails_evict_succeeds():
    """gen1 fails, the started request at the tail is evicted, the retry succeeds."""
    bench = Bench(max_num_tokens=100, can_evict=True)
    _, _, victim = bench.generations_at_page_end("0", "1", "99")
    bench.hold_all_but(1)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0", "1"]
    assert ids(batch.paused_requests) == ["99"]
    assert victim.state == "suspended" and victim.num_suspensions == 1  # suspended once


@pytest.mark.upstream("TestKVCacheFailuresGen::test_gen_alloc_fails_evict_insufficient")
def test_gen_alloc_fails_evict_insufficient():
    """gen1 fails, the victim is evicted, the retry still fails: gen1 suspends itself."""
    bench = Bench(max_num_tokens=100)  # no host tier: the suspension frees nothing
    bench.generations_at_page_end("0", "1", "99")
    bench.hold_all_but(1)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    # gen99 evicted as victim for gen1; gen1 self-evicts after
    assert set(ids(batch.paused_requests)) == {"1", "99"}


@pytest.mark.upstream(
    "TestKVCacheFailuresGen::test_secondary_tier_recompute_pause_retries_immediately",
    adaptation="can_evict as upstream; an outside tenant fills the host tier, "
    "so suspending the victim frees no device page and the retry "
    "really fails; try_allocate_generation calls are counted as page"
    " allocations tried on the pool",
)
def test_secondary_tier_recompute_pause_retries_immediately():
    """Full teardown is retried without conservatively waiting one pass."""
    bench = Bench(max_num_tokens=100, can_evict=True)
    _, _, victim = bench.generations_at_page_end("0", "1", "99")
    bench.fill_host_tier()
    bench.hold_all_but(1)
    before = bench.allocation_attempts()
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0", "1"]
    assert ids(batch.paused_requests) == []
    assert ids(batch.recompute_paused_requests) == ["99"]
    # gen0 ok, gen1 fails, fails again after the suspension, succeeds after the teardown
    assert bench.allocation_attempts() - before == 4
    assert "99" not in bench.manager.caches and victim.num_recomputes == 1  # freed once


@pytest.mark.upstream(
    "TestKVCacheFailuresGen::test_recompute_pause_gate_stops_destructive_fallback",
    adaptation="can_evict as upstream; an outside tenant fills the host tier, "
    "so suspending the victim frees no device page and the retry "
    "really fails; try_allocate_generation calls are counted as page"
    " allocations tried on the pool",
)
def test_recompute_pause_gate_stops_destructive_fallback():
    """Disabling recompute pause keeps ordinary suspension as the last fallback."""
    bench = Bench(max_num_tokens=100, can_evict=True, enable_recompute_pause=False)
    _, _, victim = bench.generations_at_page_end("0", "1", "99")
    bench.fill_host_tier()
    bench.hold_all_but(1)
    before = bench.allocation_attempts()
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert set(ids(batch.paused_requests)) == {"1", "99"}
    assert batch.recompute_paused_requests == []
    assert bench.allocation_attempts() - before == 3
    assert "99" in bench.manager.caches and victim.num_recomputes == 0  # never freed


@pytest.mark.upstream(
    "TestKVCacheFailuresGen::test_recompute_frontier_survives_ordinary_frontier_shrink",
    adaptation="the suspended tail is built physically: a set-up pass in which "
    "it suspends itself; it holds two pages and the tier below the "
    "GPU has room for one (host_blocks=1), so the active victim's "
    "one page can move down and the tail's cannot",
)
def test_recompute_frontier_survives_ordinary_frontier_shrink():
    """Recompute still sees a suspended tail after ordinary eviction skips it."""
    bench = Bench(max_num_tokens=100, host_blocks=1)
    # 0, 1, 2 are stepped by the later builds and by the set-up pass; 3 fails in that pass
    current, next_request, active_victim, suspended_tail = (
        bench.generation("0", 60),
        bench.generation("1", 61),
        bench.generation("2", 62),
        bench.generation("3", 128),
    )
    bench.hold_all_but(0)
    setup = bench.schedule()
    assert ids(setup.generation_requests) == ["0", "1", "2"]
    assert ids(setup.paused_requests) == ["3"] and suspended_tail.state == "suspended"
    assert bench.manager.get_cache(suspended_tail).num_blocks == 2  # still on the GPU
    bench.release_held()
    assert [bench.step_pages(r) for r in (current, next_request)] == [1, 1]

    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0", "1"]
    assert ids(batch.paused_requests) == ["2"]
    assert ids(batch.recompute_paused_requests) == ["3"]
    assert active_victim.state == "suspended" and active_victim.num_suspensions == 1
    assert bench.manager.get_cache(active_victim).suspended_blocks == 1  # moved down
    assert "3" not in bench.manager.caches and suspended_tail.num_recomputes == 1


@pytest.mark.upstream(
    "TestKVCacheFailuresGen::test_recompute_pause_does_not_shrink_scheduling_range",
    adaptation="the suspended victim is built physically (a set-up pass in "
    "which it suspends itself in place) and holds two pages, so "
    "freeing it serves both gen0 and the trailing context; "
    "try_allocate_generation calls are counted on the pool",
)
def test_recompute_pause_does_not_shrink_scheduling_range():
    """Only the recompute victim is skipped; later work stays eligible."""
    bench = Bench(max_num_tokens=100)  # no host tier: suspension in place
    current = bench.generation("0", 62)  # stepped by the next build and the set-up pass
    suspended_victim = bench.generation("1", 128)  # two full pages: fails in the set-up pass
    bench.hold_all_but(bench.step_pages(current))
    setup = bench.schedule()
    assert ids(setup.generation_requests) == ["0"] and ids(setup.paused_requests) == ["1"]
    bench.release_held()

    bench.context("2", 10)  # the trailing context: one page
    assert bench.step_pages(current) == 1
    bench.hold_all_but(0)
    counters = bench.manager.pool.counters
    granted, refused = counters.allocations, counters.failed_allocations
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert ids(batch.paused_requests) == []
    assert ids(batch.recompute_paused_requests) == ["1"]
    assert ids(batch.context_requests) == ["2"]
    # gen0 refused once, then granted; the context granted; the victim never retried
    assert (counters.failed_allocations - refused, counters.allocations - granted) == (1, 2)
    assert "1" not in bench.manager.caches and suspended_victim.num_recomputes == 1


@pytest.mark.upstream(
    "TestKVCacheFailuresGen::test_multiple_evictions_needed",
    adaptation="kvlab's suspension frees device pages only into a tier below "
    "the GPU, so the bench has a host tier (can_evict) where "
    "upstream's mock scripts the retry's success; gen1 carries 64 "
    "draft tokens, so its step needs two pages and each one-page "
    "victim frees one",
)
def test_multiple_evictions_needed():
    """gen1 fails, two victims are needed to free enough space."""
    bench = Bench(max_num_tokens=100, can_evict=True)
    _, gen1, _, _ = bench.generations_at_page_end("0", "1", "98", "99", drafts={"1": 64})
    assert bench.step_pages(gen1) == 2
    bench.hold_all_but(1)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0", "1"]
    assert len(batch.paused_requests) == 2


@pytest.mark.upstream("TestKVCacheFailuresGen::test_gen_fail_does_not_break_immediately")
def test_gen_fail_does_not_break_immediately():
    """[gen0 ok, gen1 fails with no victim]: gen0 scheduled, gen1 stops the loop."""
    bench = Bench(max_num_tokens=100)
    bench.generations_at_page_end("0", "1")
    bench.hold_all_but(1)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]


@pytest.mark.upstream(
    "TestKVCacheFailuresGen::test_suspended_request_not_evictable",
    adaptation="the suspended victim is built physically (a set-up pass in "
    "which it suspends itself in place); gen1 carries 64 draft "
    "tokens so that recompute-pausing the one-page victim still "
    "leaves its retry short, as upstream's mock scripts it",
)
def test_suspended_request_not_evictable():
    """A started request with a suspended (inactive) KV cache is not a valid victim."""
    bench = Bench(max_num_tokens=100)  # no host tier
    gen0 = bench.generation("0", 61)  # stepped by two builds and the set-up pass
    gen1 = bench.generation("1", 62, draft=64)  # stepped by one build and the set-up pass
    victim = bench.generation("99", 64)  # fails in the set-up pass
    bench.hold_all_but(bench.step_pages(gen0) + bench.step_pages(gen1))
    setup = bench.schedule()
    assert ids(setup.paused_requests) == ["99"] and victim.state == "suspended"
    bench.release_held()

    assert (bench.step_pages(gen0), bench.step_pages(gen1)) == (1, 2)
    bench.hold_all_but(1)
    batch = bench.schedule()
    # gen0 succeeds, gen1 fails, the victim is not evictable (suspended): gen1 self-evicts
    assert ids(batch.generation_requests) == ["0"]
    assert "99" not in ids(batch.paused_requests)


# -- TestKVCacheFailuresCtx -----------------------------------------------------------------


@pytest.mark.upstream(
    "TestKVCacheFailuresCtx::test_ctx_prepare_fails",
    adaptation="prepare_context fails physically: an outside tenant holds the "
    "manager's only free page-index slot",
)
def test_ctx_prepare_fails():
    bench = Bench(max_num_tokens=1000, slots=1)
    bench.hold_slots()
    bench.context("0", 100)
    batch = bench.schedule()
    assert len(batch.context_requests) == 0


@pytest.mark.upstream(
    "TestKVCacheFailuresCtx::test_ctx_resize_fails_continue",
    adaptation="the generation request is built (and arrives) before the "
    "context: kvlab's active list is arrival order, and phase 1 "
    "defers the context to phase 2 in both",
)
def test_ctx_resize_fails_continue():
    """resize fails: the context is skipped (continue), not break."""
    bench = Bench(max_num_tokens=1000)
    gen = bench.generation("1")
    bench.context("0", 1000)
    bench.hold_all_but(bench.step_pages(gen))
    batch = bench.schedule()
    assert len(batch.context_requests) == 0
    # the generation after the failed context is still scheduled
    assert len(batch.generation_requests) == 1


@pytest.mark.upstream(
    "TestKVCacheFailuresCtx::test_ctx_resize_fail_then_gen_succeeds",
    adaptation="the generation request is built (and arrives) before the "
    "context: kvlab's active list is arrival order, and phase 1 "
    "defers the context to phase 2 in both",
)
def test_ctx_resize_fail_then_gen_succeeds():
    bench = Bench(max_num_tokens=1000)
    gen = bench.generation("1")
    bench.context("0", 500)
    bench.hold_all_but(bench.step_pages(gen))
    batch = bench.schedule()
    assert len(batch.context_requests) == 0
    assert ids(batch.generation_requests) == ["1"]


@pytest.mark.upstream("TestKVCacheFailuresCtx::test_ctx_resize_fail_then_smaller_ctx")
def test_ctx_resize_fail_then_smaller_ctx():
    bench = Bench(max_num_tokens=1000)
    bench.context("0", 1000)  # 16 pages
    bench.context("1", 100)  # 2 pages
    bench.hold_all_but(2)
    batch = bench.schedule()
    assert ids(batch.context_requests) == ["1"]


@pytest.mark.upstream(
    "TestKVCacheFailuresCtx::test_zero_waste_failed_ctx_budget",
    adaptation="lengths swapped (ctx0 500, ctx1 400): on a real pool a longer "
    "context needs at least as many pages, so the one that fails "
    "must be the longer; ctx1 fits only if ctx0's failed 500 tokens "
    "were not charged to the 500-token budget",
)
def test_zero_waste_failed_ctx_budget():
    """A failed context consumes no budget: the next context gets the full budget."""
    bench = Bench(max_num_tokens=500)
    bench.context("0", 500)  # 8 pages
    bench.context("1", 400)  # 7 pages
    bench.hold_all_but(7)
    batch = bench.schedule()
    assert ids(batch.context_requests) == ["1"]


# -- TestKVCacheFailuresCtxChunked ----------------------------------------------------------

CHUNKED = dict(tokens_per_block=64, max_num_tokens=1000, chunked_prefill=True, chunk_unit_size=64)


@pytest.mark.upstream(
    "TestKVCacheFailuresCtxChunked::test_chunked_prepare_fails",
    adaptation="prepare_context fails physically: an outside tenant holds the "
    "manager's only free page-index slot",
)
def test_chunked_prepare_fails():
    bench = Bench(slots=1, **CHUNKED)
    bench.hold_slots()
    bench.context("0", 500)
    batch = bench.schedule()
    assert len(batch.context_requests) == 0


@pytest.mark.upstream("TestKVCacheFailuresCtxChunked::test_chunked_resize_fails")
def test_chunked_resize_fails():
    bench = Bench(**CHUNKED)
    bench.context("0", 500)
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert len(batch.context_requests) == 0


@pytest.mark.upstream(
    "TestKVCacheFailuresCtxChunked::test_chunked_fail_then_gen",
    adaptation="the generation request is built (and arrives) before the "
    "context: kvlab's active list is arrival order, and phase 1 "
    "defers the context to phase 2 in both",
)
def test_chunked_fail_then_gen():
    bench = Bench(**CHUNKED)
    gen = bench.generation("1")
    bench.context("0", 500)
    bench.hold_all_but(bench.step_pages(gen))
    batch = bench.schedule()
    assert len(batch.context_requests) == 0
    assert ids(batch.generation_requests) == ["1"]
