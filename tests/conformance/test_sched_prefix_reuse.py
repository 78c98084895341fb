"""TensorRT-LLM's KVCacheV2Scheduler tests of prefix reuse in scheduling: none is expressible
in kvlab, each is listed with the reason.

Mirrors the upstream classes TestPrepareBeforeBudget, TestPartialReuse and TestPrefixAwareSkip
of NVIDIA/TensorRT-LLM ``tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py``
at commit 0046b12caeb6c565d87675ced31951b62b9abd25 (inventory: ``inventory/v2_scheduler_2.txt``).

The three classes test what block reuse does to scheduling: ``prepare_context`` shortening the
remaining context before the budget is charged, the chunk planned in that same pass from the
position a partial reuse match moved (TestPartialReuse), and the prefix-aware skip (v1's
``beneficialToSkip``) that admits one of several requests sharing a not-yet-cached block per
iteration. kvlab has no prefix reuse (no block keys, no radix tree, no reuse probe) and plans
a chunk before ``prepare_context``, so none of them can arise. A chunk planned from a position
an earlier chunk reached is another scenario, not a port of TestPartialReuse.
"""

NOT_MODELLED = {
    "TestPartialReuse::test_partial_reuse_no_block_alignment":
        "prefix reuse / block reuse: prepare_context moves a first chunk's position by a "
        "partial reuse match in the pass that plans the chunk from it; kvlab has no prefix "
        "reuse, so no pass plans a first chunk from a position past 0",
    "TestPartialReuse::test_block_aligned_position_no_change":
        "prefix reuse / block reuse: prepare_context moves a first chunk's position by a "
        "partial reuse match in the pass that plans the chunk from it; kvlab has no prefix "
        "reuse, so no pass plans a first chunk from a position past 0",
    "TestPartialReuse::test_partial_reuse_last_chunk_no_alignment":
        "prefix reuse / block reuse: prepare_context moves a first chunk's position by a "
        "partial reuse match in the pass that plans the chunk from it; kvlab has no prefix "
        "reuse, so no pass plans a first chunk from a position past 0",
    "TestPartialReuse::test_partial_reuse_resize_uses_chunk_size":
        "prefix reuse / block reuse: prepare_context moves a first chunk's position by a "
        "partial reuse match in the pass that plans the chunk from it; kvlab has no prefix "
        "reuse, so no pass plans a first chunk from a position past 0",
    "TestPartialReuse::test_partial_reuse_budget_accounting":
        "prefix reuse / block reuse: prepare_context moves a first chunk's position by a "
        "partial reuse match in the pass that plans the chunk from it; kvlab has no prefix "
        "reuse, so no pass plans a first chunk from a position past 0",
    "TestPrepareBeforeBudget::test_block_reuse_reduces_budget":
        "prefix reuse / block reuse: prepare_context shortens the remaining context by a "
        "reuse match before the budget is charged; kvlab has no prefix reuse",
    "TestPrepareBeforeBudget::test_without_reuse_budget_would_fail":
        "prefix reuse / block reuse: prepare_context shortens the remaining context by a "
        "reuse match before the budget is charged; kvlab has no prefix reuse",
    "TestPrepareBeforeBudget::test_prefix_aware_scheduling_disabled_charges_pre_reuse_tokens":
        "prefix reuse / block reuse: prepare_context shortens the remaining context by a "
        "reuse match before the budget is charged; kvlab has no prefix reuse",
    "TestPrefixAwareSkip::test_duplicate_prefix_deferred":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_deferred_request_admitted_next_iteration":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_distinct_prefixes_not_deferred":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_three_duplicates_admit_one":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_no_full_block_never_deferred":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_non_all_reusable_policy_never_defers":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_non_all_reusable_policy_issues_no_probe":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_all_reusable_policy_still_defers":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_disabled_by_prefix_aware_flag":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_disabled_without_block_reuse":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_vswa_still_skips":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_in_flight_chunked_context_seeds_the_set":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_contributor_failure_does_not_defer_duplicate":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_skip_happens_before_prepare_context":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_single_candidate_is_not_probed":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_generation_requests_are_not_probed":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_chunked_context_duplicate_deferred":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_scheduled_chunk_continuation_defers_later_duplicate":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_failing_chunk_continuation_does_not_defer_duplicate":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_deferral_never_empties_the_batch_alone":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_registered_contributor_cannot_be_evicted":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_evicted_continuation_does_not_defer_duplicate":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
    "TestPrefixAwareSkip::test_recompute_paused_request_does_not_defer_duplicate":
        "prefix reuse / block reuse and the prefix-aware skip: requests sharing a not-yet- "
        "cached block are admitted one per iteration; kvlab has no block keys or reuse probe",
}
