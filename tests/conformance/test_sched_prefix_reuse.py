"""Block reuse in scheduling: prepare before the budget, chunks after a partial match, and the
prefix-aware skip.

Mirrors the upstream classes TestPrepareBeforeBudget, TestPartialReuse and TestPrefixAwareSkip
of NVIDIA/TensorRT-LLM ``tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py``
at commit 0046b12caeb6c565d87675ced31951b62b9abd25 (inventory: ``inventory/v2_scheduler_2.txt``);
the scheduler they test, ``scheduler_v2.py``, read at 00746ef9992943a9bb604dbf1ecf00c64af58c32.

Upstream scripts what ``prepare_context`` reuses and what ``probe_first_new_block_key`` answers.
Here both happen: a request that ran before (:meth:`Bench.cached`) left its prompt's pages
committed, the prompts below share tokens with it or with each other, and the manager matches
and probes them (one hash a token, so a match is exact to the token).
"""

import pytest
from support import Bench, ids

FRONT_DOOR = (
    "kvlab's Scheduler.submit applies the LLM API's front-door check (a prompt over "
    "max_num_tokens without chunking is rejected before any pass), so the request is "
    "submitted under a budget it fits and the pass runs under the test's budget"
)
NO_PER_CONVERSATION = (
    "run for BlockReusePolicy.PER_REQUEST only: kvlab's block_reuse_policy has no PER_CONVERSATION"
)
LENGTHS_DIFFER = (
    "upstream scripts one request's allocation to fail; physically the failing "
    "request is the longer one (same first new block, more pages than are free)"
)

NOT_MODELLED = {
    "TestPrefixAwareSkip::test_vswa_still_skips": "variable sliding-window attention: kvlab's manager has one window for every layer (no "
    "VSWA manager to check that the skip is not gated on it)",
    "TestPrefixAwareSkip::test_evicted_continuation_does_not_defer_duplicate": "not expressible on a real pool: for the duplicate's first new page to be the evicted "
    "continuation's next one, the duplicate must match every page the continuation "
    "committed, and then no page is left for it (moving the continuation down frees at most "
    "its one uncommitted page, which the generation step takes), while upstream's mock "
    "admits it",
}

IN_FLIGHT_CONTINUATION = (
    "the scheduler is chunked (kvlab makes a context continuation by running its first chunk); "
    "the pass is called with the continuation in flight, as the overlap executor would"
)

A = list(range(1000))  # a prompt; others share its leading tokens or not
B = list(range(5000, 6000))


def counting(bench, method):
    """Record the request ids the manager's ``method`` is called with (a spy on the real one)."""
    calls, real = [], getattr(bench.manager, method)

    def spy(request, *args, **kwargs):
        calls.append(request.request_id)
        return real(request, *args, **kwargs)

    setattr(bench.manager, method, spy)
    return calls


# -- TestPrepareBeforeBudget -----------------------------------------------------------------


@pytest.mark.upstream(
    "TestPrepareBeforeBudget::test_block_reuse_reduces_budget", adaptation=FRONT_DOOR
)
def test_block_reuse_reduces_budget():
    bench = Bench(max_num_tokens=600)
    bench.cached("earlier", A[:500])
    request = bench.submit_past_front_door("0", tokens=A)
    batch = bench.schedule()
    assert request.prepopulated_prompt_len == 500  # context_remaining_length 1000 -> 500
    assert ids(batch.context_requests) == ["0"]


@pytest.mark.upstream(
    "TestPrepareBeforeBudget::test_without_reuse_budget_would_fail", adaptation=FRONT_DOOR
)
def test_without_reuse_budget_would_fail():
    bench = Bench(max_num_tokens=800)
    bench.cached("earlier", A[:500])
    bench.submit_past_front_door("0", tokens=A)
    assert ids(bench.schedule().context_requests) == ["0"]


@pytest.mark.upstream(
    "TestPrepareBeforeBudget::test_prefix_aware_scheduling_disabled_charges_pre_reuse_tokens"
)
def test_prefix_aware_scheduling_disabled_charges_pre_reuse_tokens():
    bench = Bench(max_num_tokens=1000, enable_prefix_aware_scheduling=False)
    bench.cached("earlier", A[:500])
    request = bench.context("0", tokens=A)
    batch = bench.schedule()
    assert ids(batch.context_requests) == ["0"]
    assert bench.manager.get_cache(request).capacity == 1000  # resized by the 500 left, not 1000
    assert batch.num_tokens == 1000  # charged before reuse

    bench = Bench(max_num_tokens=1000, enable_prefix_aware_scheduling=False)
    bench.cached("earlier", A[:500])
    bench.generation("1")
    bench.context("2", tokens=A)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["1"]
    assert ids(batch.context_requests) == []


# -- TestPartialReuse (chunked, tokens_per_block 64, chunk unit 64) ---------------------------


def chunked(max_num_tokens):
    return Bench(max_num_tokens=max_num_tokens, chunked_prefill=True, chunk_unit_size=64)


@pytest.mark.upstream("TestPartialReuse::test_partial_reuse_no_block_alignment")
def test_partial_reuse_no_block_alignment():
    bench = chunked(128)
    bench.cached("earlier", A[:50])  # a partial page of 50 tokens
    request = bench.context("0", tokens=A)
    batch = bench.schedule()
    assert ids(batch.context_requests) == ["0"]
    assert request.prepopulated_prompt_len == 50
    assert request.context_chunk_size == 128


@pytest.mark.upstream("TestPartialReuse::test_block_aligned_position_no_change")
def test_block_aligned_position_no_change():
    bench = chunked(300)
    bench.cached("earlier", A[:128])  # two whole pages
    request = bench.context("0", tokens=A)
    batch = bench.schedule()
    assert ids(batch.context_requests) == ["0"]
    assert request.prepopulated_prompt_len == 128
    assert request.context_chunk_size == 256


@pytest.mark.upstream("TestPartialReuse::test_partial_reuse_last_chunk_no_alignment")
def test_partial_reuse_last_chunk_no_alignment():
    bench = chunked(500)
    bench.cached("earlier", A[:50])
    request = bench.context("0", tokens=A[:130])
    batch = bench.schedule()
    assert ids(batch.context_requests) == ["0"]
    assert request.prepopulated_prompt_len == 50
    assert request.context_chunk_size == 80


@pytest.mark.upstream("TestPartialReuse::test_partial_reuse_resize_uses_chunk_size")
def test_partial_reuse_resize_uses_chunk_size():
    bench = chunked(128)
    bench.cached("earlier", A[:50])
    request = bench.context("0", tokens=A)
    bench.schedule()
    assert bench.manager.get_cache(request).capacity == 50 + 128  # resized by the chunk, 128


@pytest.mark.upstream("TestPartialReuse::test_partial_reuse_budget_accounting")
def test_partial_reuse_budget_accounting():
    bench = chunked(80)
    gen = bench.generation("1")
    bench.cached("earlier", A[:50])
    ctx = bench.context("0", tokens=A)
    batch = bench.schedule()
    assert ids(batch.context_requests) == ["0"]
    assert ctx.context_chunk_size == 64
    assert ids(batch.generation_requests) == [gen.request_id]


# -- TestPrefixAwareSkip ---------------------------------------------------------------------


@pytest.mark.upstream("TestPrefixAwareSkip::test_duplicate_prefix_deferred")
def test_duplicate_prefix_deferred():
    bench = Bench(max_num_tokens=10000)
    bench.context("0", tokens=A[:500])
    bench.context("1", tokens=A[:500])
    assert ids(bench.schedule().context_requests) == ["0"]


@pytest.mark.upstream(
    "TestPrefixAwareSkip::test_deferred_request_admitted_next_iteration",
    adaptation="non-chunked, request 0's whole context runs in the first pass, "
    "so in the second it is generating, not a continuation in flight; "
    "request 1 then reuses what it committed",
)
def test_deferred_request_admitted_next_iteration():
    bench = Bench(max_num_tokens=10000)
    bench.context("0", tokens=A[:500])
    late = bench.context("1", tokens=A[:500])
    assert ids(bench.schedule().context_requests) == ["0"]
    assert ids(bench.schedule().context_requests) == ["1"]
    assert late.prepopulated_prompt_len == 499  # everything but its last token


@pytest.mark.upstream("TestPrefixAwareSkip::test_distinct_prefixes_not_deferred")
def test_distinct_prefixes_not_deferred():
    bench = Bench(max_num_tokens=10000)
    bench.context("0", tokens=A[:500])
    bench.context("1", tokens=B[:500])
    assert ids(bench.schedule().context_requests) == ["0", "1"]


@pytest.mark.upstream("TestPrefixAwareSkip::test_three_duplicates_admit_one")
def test_three_duplicates_admit_one():
    bench = Bench(max_num_tokens=10000)
    for i in range(3):
        bench.context(str(i), tokens=A[:100])
    assert ids(bench.schedule().context_requests) == ["0"]


@pytest.mark.upstream("TestPrefixAwareSkip::test_no_full_block_never_deferred")
def test_no_full_block_never_deferred():
    bench = Bench(max_num_tokens=10000)
    bench.cached("earlier", A[:448])  # every whole page of the two prompts is committed
    first, _ = [bench.context(str(i), tokens=A[:500]) for i in range(2)]
    assert bench.manager.probe_first_new_block_key(first) is None
    assert ids(bench.schedule().context_requests) == ["0", "1"]


@pytest.mark.upstream(
    "TestPrefixAwareSkip::test_non_all_reusable_policy_never_defers", adaptation=NO_PER_CONVERSATION
)
def test_non_all_reusable_policy_never_defers():
    bench = Bench(max_num_tokens=10000, block_reuse_policy="per_request")
    bench.context("0", tokens=A[:500])
    bench.context("1", tokens=A[:500])
    assert ids(bench.schedule().context_requests) == ["0", "1"]


@pytest.mark.upstream(
    "TestPrefixAwareSkip::test_non_all_reusable_policy_issues_no_probe",
    adaptation=NO_PER_CONVERSATION,
)
def test_non_all_reusable_policy_issues_no_probe():
    bench = Bench(max_num_tokens=10000, block_reuse_policy="per_request")
    probed = counting(bench, "probe_first_new_block_key")
    bench.context("0", tokens=A[:500])
    bench.context("1", tokens=A[:500])
    bench.schedule()
    assert probed == []


@pytest.mark.upstream("TestPrefixAwareSkip::test_all_reusable_policy_still_defers")
def test_all_reusable_policy_still_defers():
    bench = Bench(max_num_tokens=10000, block_reuse_policy="all_reusable")
    bench.context("0", tokens=A[:500])
    bench.context("1", tokens=A[:500])
    assert ids(bench.schedule().context_requests) == ["0"]


@pytest.mark.upstream("TestPrefixAwareSkip::test_disabled_by_prefix_aware_flag")
def test_disabled_by_prefix_aware_flag():
    bench = Bench(max_num_tokens=10000, enable_prefix_aware_scheduling=False)
    probed = counting(bench, "probe_first_new_block_key")
    bench.context("0", tokens=A[:500])
    bench.context("1", tokens=A[:500])
    assert ids(bench.schedule().context_requests) == ["0", "1"]
    assert probed == []


@pytest.mark.upstream("TestPrefixAwareSkip::test_disabled_without_block_reuse")
def test_disabled_without_block_reuse():
    bench = Bench(max_num_tokens=10000, enable_block_reuse=False)
    probed = counting(bench, "probe_first_new_block_key")
    bench.context("0", tokens=A[:500])
    bench.context("1", tokens=A[:500])
    assert ids(bench.schedule().context_requests) == ["0", "1"]
    assert probed == []


@pytest.mark.upstream(
    "TestPrefixAwareSkip::test_in_flight_chunked_context_seeds_the_set",
    adaptation=IN_FLIGHT_CONTINUATION,
)
def test_in_flight_chunked_context_seeds_the_set():
    bench = Bench(max_num_tokens=10000, chunked_prefill=True)
    bench.started_context("0", None, 128, tokens=A[:500])
    bench.submit_past_front_door("1", tokens=A[:500])  # straight into the active list
    batch = bench.scheduler.schedule(inflight_request_ids=frozenset({"0"}))
    assert ids(batch.context_requests) == []
    assert batch.made_progress  # the deferral behind a running contributor is progress


@pytest.mark.upstream(
    "TestPrefixAwareSkip::test_contributor_failure_does_not_defer_duplicate",
    adaptation=LENGTHS_DIFFER,
)
def test_contributor_failure_does_not_defer_duplicate():
    bench = Bench(max_num_tokens=10000, num_blocks=64)
    bench.context("0", tokens=A[: 64 * 40])  # 40 pages
    bench.context("1", tokens=A[:100])  # the same first page; 2 pages
    bench.hold_all_but(5)
    assert ids(bench.schedule().context_requests) == ["1"]


@pytest.mark.upstream("TestPrefixAwareSkip::test_skip_happens_before_prepare_context")
def test_skip_happens_before_prepare_context():
    bench = Bench(max_num_tokens=10000)
    prepared = counting(bench, "prepare_context")
    resized = counting(bench, "resize_context")
    bench.context("0", tokens=A[:500])
    bench.context("1", tokens=A[:500])
    assert ids(bench.schedule().context_requests) == ["0"]
    assert prepared == ["0"]
    assert resized == ["0"]


@pytest.mark.upstream("TestPrefixAwareSkip::test_single_candidate_is_not_probed")
def test_single_candidate_is_not_probed():
    bench = Bench(max_num_tokens=10000)
    probed = counting(bench, "probe_first_new_block_key")
    bench.context("0", tokens=A[:500])
    assert ids(bench.schedule().context_requests) == ["0"]
    assert probed == []


@pytest.mark.upstream("TestPrefixAwareSkip::test_generation_requests_are_not_probed")
def test_generation_requests_are_not_probed():
    bench = Bench(max_num_tokens=10000)
    bench.generations("0", "1")
    probed = counting(bench, "probe_first_new_block_key")
    assert len(bench.schedule().generation_requests) == 2
    assert probed == []


@pytest.mark.upstream("TestPrefixAwareSkip::test_chunked_context_duplicate_deferred")
def test_chunked_context_duplicate_deferred():
    bench = Bench(tokens_per_block=8, max_num_tokens=64, chunked_prefill=True, chunk_unit_size=8)
    bench.context("0", tokens=A[:128])
    bench.context("1", tokens=A[:128])
    assert ids(bench.schedule().context_requests) == ["0"]


@pytest.mark.upstream(
    "TestPrefixAwareSkip::test_scheduled_chunk_continuation_defers_later_duplicate"
)
def test_scheduled_chunk_continuation_defers_later_duplicate():
    bench = Bench(tokens_per_block=8, max_num_tokens=10000, chunked_prefill=True, chunk_unit_size=8)
    bench.started_context("0", None, 64, tokens=A[:500])
    bench.context("1", tokens=A[:500])
    assert ids(bench.schedule().context_requests) == ["0"]


@pytest.mark.upstream(
    "TestPrefixAwareSkip::test_failing_chunk_continuation_does_not_defer_duplicate",
    adaptation=LENGTHS_DIFFER,
)
def test_failing_chunk_continuation_does_not_defer_duplicate():
    bench = Bench(
        tokens_per_block=8,
        max_num_tokens=10000,
        chunked_prefill=True,
        chunk_unit_size=8,
        num_blocks=256,
    )
    bench.started_context("0", None, 64, tokens=A[: 8 * 200])  # 192 more pages to go
    bench.context("1", tokens=A[:80])  # its first new page is 0's next one; 2 more pages
    bench.hold_all_but(4)
    assert ids(bench.schedule().context_requests) == ["1"]


@pytest.mark.upstream("TestPrefixAwareSkip::test_deferral_never_empties_the_batch_alone")
def test_deferral_never_empties_the_batch_alone():
    bench = Bench(max_num_tokens=10000, num_blocks=64)
    resized = counting(bench, "resize_context")
    bench.context("0", tokens=A[:500])
    bench.context("1", tokens=A[:500])
    bench.hold_all_but(0)
    assert ids(bench.schedule().context_requests) == []
    assert resized == ["0", "1"]  # both attempted, neither deferred behind a failed contributor


@pytest.mark.upstream(
    "TestPrefixAwareSkip::test_registered_contributor_cannot_be_evicted",
    adaptation=IN_FLIGHT_CONTINUATION + "; generation 0's first allocation "
    "fails because an outside tenant holds every free page, and the retry "
    "succeeds because request 99's pages really move down (a host tier)",
)
def test_registered_contributor_cannot_be_evicted():
    bench = Bench(max_num_tokens=1000, can_evict=True, chunked_prefill=True)
    gen0 = bench.generation("0", 62)  # stepped by the next two set-up passes: at a page's end
    bench.generation("99", 640)  # 11 pages, which moving it down frees
    bench.started_context("5", None, 64, tokens=A[:164])  # its next page is A's second
    duplicate = bench.submit_past_front_door("1", tokens=A[:500])  # the same first new page
    bench.arrange("0", "1", "5", "99")
    assert bench.step_pages(gen0) == 1
    bench.hold_all_but(0)
    batch = bench.scheduler.schedule(inflight_request_ids=frozenset({"5"}))
    assert ids(batch.paused_requests) == ["99"]  # set-up: the eviction freed room for 1 too
    assert bench.manager.free_blocks >= bench.manager.geometry.blocks_for_tokens(500) - 1
    assert ids(batch.context_requests) == []  # duplicate deferred behind the contributor
    assert "5" not in ids(batch.paused_requests)  # ... which could not be evicted
    assert duplicate.state == "waiting"


@pytest.mark.upstream(
    "TestPrefixAwareSkip::test_recompute_paused_request_does_not_defer_duplicate",
    adaptation="a continuation needs a chunked scheduler (its first chunk "
    "really ran); upstream scripts every generation allocation to "
    "fail, here a host tier of one page cannot take the "
    "continuation's two, so suspending it frees nothing, the "
    "recompute pause frees them and generation 0's retry succeeds",
)
def test_recompute_paused_request_does_not_defer_duplicate():
    bench = Bench(max_num_tokens=1000, chunked_prefill=True, host_blocks=1)
    gen0 = bench.generation("0", 63)  # stepped by the next set-up pass: at a page's end
    bench.started_context("5", None, 100, tokens=A[:200])  # 2 pages, its next page A's third
    bench.submit_past_front_door("1", tokens=A[:500])
    bench.arrange("0", "1", "5")
    assert bench.step_pages(gen0) == 1
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.recompute_paused_requests) == ["5"]  # set-up: 5 was the victim
    assert "1" not in ids(batch.paused_requests)
    assert ids(batch.context_requests) in (["1"], [])
