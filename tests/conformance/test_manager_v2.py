"""TensorRT-LLM's own tests of KVCacheManagerV2, ported onto kvlab's public API.

Upstream: NVIDIA/TensorRT-LLM, ``tests/unittest/_torch/executor/kv_cache/test_kv_cache_manager_v2.py``
at commit 0046b12caeb6c565d87675ced31951b62b9abd25 (inventory: ``inventory/manager_v2.txt``).

Most of that file builds partial managers with ``object.__new__`` and mocks the native core to
test block reuse, sliding windows, the draft pool, tier-initialisation fallbacks and debug
diagnostics; those are listed in ``NOT_MODELLED`` with the reason. The tests that concern the
pool's capacity, the page-index table, resize and the tiers run here on kvlab's real pool, on
the CPU (upstream needs a CUDA device for the ones that build a real pool).

kvlab's tiers below the GPU hold suspended pages as CPU tensors: it writes nothing to disk, so
a disk tier is only its size (``disk_cache_size``).
"""

from __future__ import annotations

import warnings

import pytest

from kvlab import KVCacheManager, KVGeometry, MaxSeqLenClampWarning, Request
from kvlab.core.prefix_cache import chain_hashes

#: The upstream module's constants.
TOKENS_PER_BLOCK = 4
MAX_SEQ_LEN = 16


def _manager(
    geometry: KVGeometry, quota_bytes: int, max_seq_len: int, max_batch_size: int = 1, **kwargs
) -> KVCacheManager:
    with warnings.catch_warnings():
        warnings.simplefilter("error", MaxSeqLenClampWarning)  # none of these ports clamps
        return KVCacheManager(
            geometry,
            quota_bytes=quota_bytes,
            max_seq_len=max_seq_len,
            max_batch_size=max_batch_size,
            **kwargs,
        )


def _tiny(tokens_per_block: int) -> KVGeometry:
    """4 bytes a token (1 layer, 1 KV head, head_dim 1, fp16, K and V)."""
    return KVGeometry(
        num_layers=1, num_kv_heads=1, head_dim=1, dtype="float16", tokens_per_block=tokens_per_block
    )


# -- capacity and tiers --------------------------------------------------------------------


@pytest.mark.upstream(
    "test_kv_cache_manager_v2::test_live_storage_stats_use_the_manager_api",
    adaptation="upstream builds the native core on CUDA (8 MiB GPU + 8 MiB host tier, one "
    "4096-byte key buffer a block of 4 tokens) and reads get_kv_cache_stats; kvlab "
    "runs the same quotas on the CPU (K-only geometry of 4096 bytes a block) and "
    "reads the pool's used/free/total pages. The mock-call assertions on "
    "get_storage_statistics and the cold pool-group membership are native internals",
)
def test_live_storage_stats_use_the_manager_api():
    geometry = KVGeometry(
        num_layers=1,
        num_kv_heads=1,
        head_dim=256,
        dtype="float32",
        tokens_per_block=TOKENS_PER_BLOCK,
        kv_factor=1,
    )
    assert geometry.bytes_per_block == 4096
    manager = _manager(
        geometry, quota_bytes=8 << 20, max_seq_len=MAX_SEQ_LEN, host_cache_size=8 << 20
    )
    cache = manager.create_cache("0")

    def stats():
        return {
            "used": manager.pool.used_blocks,
            "free": manager.free_blocks,
            "max": manager.total_blocks,
        }

    before = stats()
    assert cache.resume()
    assert cache.resize(TOKENS_PER_BLOCK)
    after = stats()
    assert before["used"] == 0
    assert after["used"] == 1
    assert after["free"] == before["free"] - 1
    assert after["max"] == before["max"]
    manager.check_invariants()


@pytest.mark.upstream(
    "test_kv_cache_manager_v2::test_disk_secondary_tier_enables_eviction",
    adaptation="upstream mocks the native core and checks the tiers it is given (a disk tier at "
    "a temporary path); kvlab is asked for the same configuration, no host tier and "
    "a 16 MiB disk tier, which takes no path: kvlab writes nothing to disk, its lower "
    "tiers are a count of pages whose bytes it keeps in CPU tensors",
)
def test_disk_secondary_tier_enables_eviction():
    manager = _manager(
        _tiny(TOKENS_PER_BLOCK),
        quota_bytes=16 << 20,
        max_seq_len=MAX_SEQ_LEN,
        host_cache_size=0,
        disk_cache_size=16 << 20,
    )
    assert manager.can_evict


# -- the page-index table -------------------------------------------------------------------

# (max_batch_size, pp_size, disable_overlap_scheduler, is_disagg, reserved, expected), upstream's
# _INDEX_MAPPER_CAPACITY_CASES:
#   capacity == max_batch_size * pp_size
#               * (2 if is_disagg or (overlap on and pp_size == 1) else 1) + reserved
_INDEX_MAPPER_CAPACITY_CASES = [
    pytest.param(2, 1, True, False, 1, 3, id="overlap_off"),
    pytest.param(2, 1, False, False, 1, 5, id="overlap_on"),
    pytest.param(8, 1, False, False, 1, 17, id="overlap_on_b8"),
    pytest.param(2, 1, False, True, 1, 5, id="disagg_does_not_compound"),
    pytest.param(2, 1, True, True, 1, 5, id="disagg_only"),
    pytest.param(2, 4, True, False, 1, 9, id="pp4_plain"),
    pytest.param(2, 4, False, False, 1, 9, id="pp4_overlap_excluded"),
    pytest.param(2, 4, True, True, 1, 17, id="pp4_disagg_unchanged"),
    pytest.param(2, 1, False, False, 5, 9, id="reserved_slots_still_added"),
]


@pytest.mark.upstream(
    "test_kv_cache_manager_v2::test_index_mapper_capacity_covers_the_overlapping_cohorts",
    adaptation="upstream patches IndexMapper and _prepare_page_table_tensor and reads their "
    "sizes; kvlab builds its real table and reads its slots, its rows (beam width 1) "
    "and the slots a cache may take. disable_overlap_scheduler is "
    "overlap_scheduler=not disable_overlap_scheduler, reserved is "
    "num_reserved_index_slots",
)
@pytest.mark.parametrize(
    "max_batch_size,pp_size,disable_overlap_scheduler,is_disagg,reserved,expected",
    _INDEX_MAPPER_CAPACITY_CASES,
)
def test_index_mapper_capacity_covers_the_overlapping_cohorts(
    max_batch_size, pp_size, disable_overlap_scheduler, is_disagg, reserved, expected
):
    manager = _manager(
        _tiny(TOKENS_PER_BLOCK),
        quota_bytes=16 << 20,
        max_seq_len=MAX_SEQ_LEN,
        max_batch_size=max_batch_size,
        pp_size=pp_size,
        disaggregated=is_disagg,
        overlap_scheduler=not disable_overlap_scheduler,
        num_reserved_index_slots=reserved,
    )
    table = manager.page_index
    capacity, page_table_capacity, max_admissible_sequences = (
        table.slots,
        table.table.shape[1],
        table.free_slots,
    )
    assert capacity == expected
    assert page_table_capacity == expected
    assert max_admissible_sequences == expected - reserved


# -- resize_context -------------------------------------------------------------------------


@pytest.mark.upstream(
    "test_kv_cache_manager_v2::test_extra_tokens_are_in_context_capacity",
    adaptation="upstream reads the capacity of the context entry in the allocator's warm-up "
    "BatchDesc (typical_step and constraints[1]: 258 for max_num_tokens 256 + "
    "num_extra_kv_tokens 2, max_draft_len 3 not included); kvlab has no warm-up "
    "BatchDesc, so the same 256-token first chunk is sized by resize_context on the "
    "real pool (tokens_per_block 128, max_seq_len 264) and its cache's capacity read",
)
def test_extra_tokens_are_in_context_capacity():
    manager = _manager(
        _tiny(128),
        quota_bytes=64 * _tiny(128).bytes_per_block,
        max_seq_len=264,
        num_extra_kv_tokens=2,
        reserved_draft_tokens=3,
    )
    request = Request("0", prompt_len=264, max_new_tokens=1)
    assert manager.prepare_context(request)
    cache = manager.get_cache(request)
    assert manager.resize_context(request, num_tokens=256)  # max_num_tokens
    assert cache.capacity == 258
    manager.check_invariants()


NOT_MODELLED = {
    "test_kv_cache_manager_v2::test_context_revert_shrinks_in_place_when_history_fits": (
        "revert_allocate_context is the overlap executor's undo of an iteration's context "
        "allocation; kvlab's executor has no overlap (each batch runs before the next pass is "
        "scheduled), so its manager has no revert to shrink a cache back in place"
    ),
    "test_kv_cache_manager_v2::test_base_config_uses_local_attention_window_order": (
        "sliding-window attention (per-layer windows, VSWA pool groups, reuse-widened windows): kvlab models full attention only, one window for every layer"
    ),
    "test_kv_cache_manager_v2::test_base_config_scale_buffers_follow_resolved_dtype": (
        "per-layer buffer configuration (heterogeneous heads and head_dim, layer masks, zero-size layers, K/V/block-scale buffer roles, SSM layers): kvlab has one uniform KVGeometry and one pool"
    ),
    "test_kv_cache_manager_v2::test_zero_size_layers_are_removed_before_pool_allocation": (
        "per-layer buffer configuration (heterogeneous heads and head_dim, layer masks, zero-size layers, K/V/block-scale buffer roles, SSM layers): kvlab has one uniform KVGeometry and one pool"
    ),
    "test_kv_cache_manager_v2::test_zero_size_filter_preserves_ssm_and_nonempty_extra_buffers": (
        "per-layer buffer configuration (heterogeneous heads and head_dim, layer masks, zero-size layers, K/V/block-scale buffer roles, SSM layers): kvlab has one uniform KVGeometry and one pool"
    ),
    "test_kv_cache_manager_v2::test_zero_size_filter_rejects_empty_local_cache": (
        "per-layer buffer configuration (heterogeneous heads and head_dim, layer masks, zero-size layers, K/V/block-scale buffer roles, SSM layers): kvlab has one uniform KVGeometry and one pool"
    ),
    "test_kv_cache_manager_v2::test_draft_token_relocation_uses_local_cache_layout": (
        "the update_kv_cache_draft_token_location CUDA op and the arguments the manager passes it: kvlab runs no attention kernels"
    ),
    "test_kv_cache_manager_v2::test_commit_min_snapshot_follows_block_reuse_policy": (
        "a flag of the native core's config derived from the reuse policy (commit_min_snapshot, for SSM snapshots): kvlab has no separate core config, and no SSM reuse"
    ),
    "test_kv_cache_manager_v2::test_propagates_partial_reuse_config": (
        "propagation of enable_partial_reuse into the native core's config object: kvlab has no separate core config (the switch is KVCacheManager's own argument, tested in tests/core/test_prefix_cache.py)"
    ),
    "test_kv_cache_manager_v2::test_one_model_prompt_lookahead_configures_reuse_backoff": (
        "the one-model speculative lookahead's reuse backoff and SWA window extension: kvlab has no speculative draft model or sliding windows"
    ),
    "test_kv_cache_manager_v2::test_prepare_context_cache_records_lookup_without_mutating_cursor": (
        "the cursor-free prepare_context_cache split and the SSM branch-snapshot bookkeeping: kvlab's prepare_context moves the cursor itself and has no SSM reuse"
    ),
    "test_kv_cache_manager_v2::test_extend_swa_windows_for_reuse_preserves_non_attention_windows": (
        "sliding-window attention (per-layer windows, VSWA pool groups, reuse-widened windows): kvlab models full attention only, one window for every layer"
    ),
    "test_kv_cache_manager_v2::test_pool_ratio_overrides_constraints": (
        "the native allocator's sizing hints (pool_ratio, avg_seq_len, typical_step and BatchDesc constraints): kvlab sizes one pool from quota_bytes and has no allocator warm-up"
    ),
    "test_kv_cache_manager_v2::test_default_uses_allocator_fallback": (
        "the native allocator's sizing hints (pool_ratio, avg_seq_len, typical_step and BatchDesc constraints): kvlab sizes one pool from quota_bytes and has no allocator warm-up"
    ),
    "test_kv_cache_manager_v2::test_avg_seq_len_builds_warmup_constraints": (
        "the native allocator's sizing hints (pool_ratio, avg_seq_len, typical_step and BatchDesc constraints): kvlab sizes one pool from quota_bytes and has no allocator warm-up"
    ),
    "test_kv_cache_manager_v2::test_avg_seq_len_updates_typical_step": (
        "the native allocator's sizing hints (pool_ratio, avg_seq_len, typical_step and BatchDesc constraints): kvlab sizes one pool from quota_bytes and has no allocator warm-up"
    ),
    "test_kv_cache_manager_v2::test_avg_seq_len_must_not_exceed_max_seq_len": (
        "the native allocator's sizing hints (pool_ratio, avg_seq_len, typical_step and BatchDesc constraints): kvlab sizes one pool from quota_bytes and has no allocator warm-up"
    ),
    "test_kv_cache_manager_v2::test_disk_init_failure_does_not_use_host_fallback": (
        "native cache-tier initialisation failures and the cross-rank init-status fallback (CuError, USE_NO_HOST / ABORT consensus over MPI): kvlab's tiers are counters and cannot fail to initialise"
    ),
    "test_kv_cache_manager_v2::test_kv_cache_manager_init_status_sync_uses_world_max": (
        "native cache-tier initialisation failures and the cross-rank init-status fallback (CuError, USE_NO_HOST / ABORT consensus over MPI): kvlab's tiers are counters and cannot fail to initialise"
    ),
    "test_kv_cache_manager_v2::test_world_ranks_converge_on_hostless_fallback": (
        "native cache-tier initialisation failures and the cross-rank init-status fallback (CuError, USE_NO_HOST / ABORT consensus over MPI): kvlab's tiers are counters and cannot fail to initialise"
    ),
    "test_kv_cache_manager_v2::test_local_fallback_failure_is_shared_before_raising": (
        "native cache-tier initialisation failures and the cross-rank init-status fallback (CuError, USE_NO_HOST / ABORT consensus over MPI): kvlab's tiers are counters and cannot fail to initialise"
    ),
    "test_kv_cache_manager_v2::test_peer_fallback_failure_discards_local_candidate": (
        "native cache-tier initialisation failures and the cross-rank init-status fallback (CuError, USE_NO_HOST / ABORT consensus over MPI): kvlab's tiers are counters and cannot fail to initialise"
    ),
    "test_kv_cache_manager_v2::test_host_init_fallback_recomputes_eviction_capability": (
        "native cache-tier initialisation failures and the cross-rank init-status fallback (CuError, USE_NO_HOST / ABORT consensus over MPI): kvlab's tiers are counters and cannot fail to initialise"
    ),
    "test_kv_cache_manager_v2::test_host_init_fallback_drops_only_host_tier": (
        "native cache-tier initialisation failures and the cross-rank init-status fallback (CuError, USE_NO_HOST / ABORT consensus over MPI): kvlab's tiers are counters and cannot fail to initialise"
    ),
    "test_kv_cache_manager_v2::test_host_init_fallback_recreates_cold_codec_and_keeps_disk": (
        "cold-page codecs for the tiers below the GPU (cold_page_codec_provider): kvlab copies a suspended cache's page bytes verbatim"
    ),
    "test_kv_cache_manager_v2::test_cold_codec_provider_receives_draft_role": (
        "cold-page codecs for the tiers below the GPU (cold_page_codec_provider): kvlab copies a suspended cache's page bytes verbatim"
    ),
    "test_kv_cache_manager_v2::test_prepare_draft_disagg_gen_init_reserves_full_context": (
        "a separate draft-model KV cache manager (is_draft, KVCacheManagerV2Pair, draft disagg admission, shared draft progress): kvlab has one manager per rank and draft tokens only as a reserve in its rows"
    ),
    "test_kv_cache_manager_v2::test_prepare_draft_disagg_gen_init_resize_failure_is_retryable": (
        "a separate draft-model KV cache manager (is_draft, KVCacheManagerV2Pair, draft disagg admission, shared draft progress): kvlab has one manager per rank and draft tokens only as a reserve in its rows"
    ),
    "test_kv_cache_manager_v2::test_prepare_draft_disagg_gen_init_index_pressure_is_retryable": (
        "a separate draft-model KV cache manager (is_draft, KVCacheManagerV2Pair, draft disagg admission, shared draft progress): kvlab has one manager per rank and draft tokens only as a reserve in its rows"
    ),
    "test_kv_cache_manager_v2::test_kv_cache_manager_v2_pair_coordinates_all_lifecycle_operations": (
        "a separate draft-model KV cache manager (is_draft, KVCacheManagerV2Pair, draft disagg admission, shared draft progress): kvlab has one manager per rank and draft tokens only as a reserve in its rows"
    ),
    "test_kv_cache_manager_v2::test_kv_cache_manager_v2_pair_rolls_back_both_pools_on_draft_failure": (
        "a separate draft-model KV cache manager (is_draft, KVCacheManagerV2Pair, draft disagg admission, shared draft progress): kvlab has one manager per rank and draft tokens only as a reserve in its rows"
    ),
    "test_kv_cache_manager_v2::test_resource_manager_builds_one_shared_v2_pair": (
        "ResourceManager registration of target and draft KV cache managers: kvlab has no ResourceManager and no draft manager"
    ),
    "test_kv_cache_manager_v2::test_resource_manager_refreshes_v2_pair_when_draft_is_registered": (
        "ResourceManager registration of target and draft KV cache managers: kvlab has no ResourceManager and no draft manager"
    ),
    "test_kv_cache_manager_v2::test_generation_allocation_reserves_dynamic_width": (
        "the draft manager's dynamic-tree reserve (_kv_reserve_draft_tokens, _allocated_draft_lens, _effective_draft_len) and its update_resources rewind: kvlab has no draft manager nor a manager-level generation allocation"
    ),
    "test_kv_cache_manager_v2::test_context_revert_drops_unshrinkable_cache_and_rewinds_progress": (
        "revert_allocate_context is the overlap executor's undo of an iteration's context allocation, and kvlab's executor has no overlap; this case (history past the pre-resize capacity, a sliding window's) also rewinds reuse bookkeeping (set_prepopulated_prompt_len, estimated_reusable_tokens) kvlab does not have"
    ),
    "test_kv_cache_manager_v2::test_draft_manager_keeps_shared_progress_across_context_and_generation": (
        "a separate draft-model KV cache manager (is_draft, KVCacheManagerV2Pair, draft disagg admission, shared draft progress): kvlab has one manager per rank and draft tokens only as a reserve in its rows"
    ),
    "test_kv_cache_manager_v2::test_draft_pool_commits_every_chunk_it_computes": (
        "the draft pool's unconditional per-chunk commit: kvlab has no draft pool"
    ),
    "test_kv_cache_manager_v2::test_external_draft_estimated_quota_supports_allocation_and_resume": (
        "external-draft (DFlash / PARD) quota estimation, get_cache_size_per_token and a sliding window on a real CUDA pool: kvlab has neither the draft pool nor windows"
    ),
    "test_kv_cache_manager_v2::test_per_conversation_policy_delays_commit_until_last_context_chunk": (
        "the per_conversation reuse policy (conversation parameters, turns): kvlab's block_reuse_policy has all_reusable and per_request only, and its context caches' history_length does not advance by chunk"
    ),
    "test_kv_cache_manager_v2::test_per_conversation_policy_without_params_uses_per_request_commit": (
        "the per_conversation reuse policy: kvlab's block_reuse_policy has all_reusable and per_request only (its per_request commit matches the count), and its context caches' history_length does not advance by chunk"
    ),
    "test_kv_cache_manager_v2::test_per_conversation_policy_releases_cancelled_request": (
        "the per_conversation reuse policy's bookkeeping of a cancelled request: kvlab has no conversations"
    ),
    "test_kv_cache_manager_v2::test_per_conversation_policy_drops_previous_divergent_blocks": (
        "the per_conversation reuse policy drops an earlier turn's divergent blocks: kvlab has no conversations, and would reuse them"
    ),
    "test_kv_cache_manager_v2::test_per_conversation_policy_retains_configured_number_of_turns": (
        "the per_conversation reuse policy's retained turns: kvlab has no conversations"
    ),
    "test_kv_cache_manager_v2::test_per_conversation_policy_ignores_overlapping_request": (
        "the per_conversation reuse policy's warning for an overlapping request: kvlab has no conversations"
    ),
    "test_kv_cache_manager_v2::test_iteration_stats_reports_physical_pool_groups_without_window_metadata": (
        "native per-iteration and per-pool-group statistics (cold pool groups, life-cycle metadata, snapshot hit rates, disk prefetch): kvlab keeps only PoolCounters"
    ),
    "test_kv_cache_manager_v2::test_prepare_context_keeps_cached_token_attribution_staged_by_the_core": (
        "cached-token attribution (statistics the native core stages): kvlab keeps no cached-token statistics"
    ),
    "test_kv_cache_manager_v2::test_prepare_context_drops_cached_token_attribution_while_estimating": (
        "cached-token attribution dropped during the capacity estimation run: kvlab keeps no cached-token statistics and has no estimation run"
    ),
    "test_kv_cache_manager_v2::test_disagg_gen_init_drops_only_the_partial_block": (
        "cached-token attribution of a DISAGG_GENERATION_INIT cache (prepare_context_cache, partial-block drop): kvlab keeps no cached-token statistics"
    ),
    "test_kv_cache_manager_v2::test_disagg_partial_attribution_survives_admission_retry": (
        "cached-token attribution across a disaggregated admission retry: kvlab keeps no cached-token statistics"
    ),
    "test_kv_cache_manager_v2::test_disagg_gen_init_drops_everything_when_the_transfer_overwrites_the_prefix": (
        "cached-token attribution when a KV transfer overwrites a reused prefix: kvlab keeps no cached-token statistics and models no transfer"
    ),
    "test_kv_cache_manager_v2::test_disagg_gen_init_drops_everything_in_gen_only_benchmark_mode": (
        "cached-token attribution in the generation-only benchmark mode: kvlab keeps no cached-token statistics"
    ),
    "test_kv_cache_manager_v2::test_cold_pool_group_iteration_stats_sum_all_cold_levels": (
        "native per-iteration and per-pool-group statistics (cold pool groups, life-cycle metadata, snapshot hit rates, disk prefetch): kvlab keeps only PoolCounters"
    ),
    "test_kv_cache_manager_v2::test_disagg_role_mapper_kinds_default_to_indexed": (
        "disaggregated KV transfer mapper kinds (MapperKind INDEXED / REPLICATED per role): kvlab does not transfer KV between servers"
    ),
    "test_kv_cache_manager_v2::test_kv_fill_value_parsing": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_kv_fill_value_parsing_nan": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fill_kv_pages_float_buffer": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fill_kv_pages_packed_buffer": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fill_kv_pages_empty_is_a_noop": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fill_kv_pages_reports_applied": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fill_kv_pages_skips_dtype_without_index_fill": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_guard_page_accessors_report_no_guard_by_default": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_guard_page_accessors_report_reserved_pages": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fresh_fill_covers_pages_on_allocation": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fresh_fill_skips_committed_prefix": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fresh_fill_disabled_or_unknown_request_is_a_noop": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fresh_fill_refills_page_reassigned_after_release": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fresh_fill_preserves_generated_kv_across_slot_change": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_fresh_fill_preserves_kv_across_block_onboard": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_reserve_guard_page_fills_and_publishes_the_page": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_reserve_guard_page_failure_releases_the_reservation": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_guard_page_request_id_clears_cuda_graph_draft_window": (
        "the guard-page request id against the CUDA-graph dummy request range: kvlab has no guard page and no CUDA graphs"
    ),
    "test_kv_cache_manager_v2::test_warmup_zeroing_preserves_guard_page": (
        "debug poisoning diagnostics (TRTLLM_KV_FRESH_PAGE_FILL, TRTLLM_KV_GUARD_PAGE, _fill_kv_pages, warm-up zeroing): kvlab has no page-fill or guard-page diagnostics"
    ),
    "test_kv_cache_manager_v2::test_window_crossing_logs_once_with_capacity_and_blocks": (
        "window-crossing debug logging for sliding-window layer groups and the logger's per-module levels: kvlab has no sliding windows and no logger"
    ),
    "test_kv_cache_manager_v2::test_window_crossing_is_silent_without_a_crossing": (
        "window-crossing debug logging for sliding-window layer groups and the logger's per-module levels: kvlab has no sliding windows and no logger"
    ),
    "test_kv_cache_manager_v2::test_window_crossing_follows_the_logger_severity_order": (
        "window-crossing debug logging for sliding-window layer groups and the logger's per-module levels: kvlab has no sliding windows and no logger"
    ),
    "test_kv_cache_manager_v2::test_window_crossing_honours_per_module_log_levels": (
        "window-crossing debug logging for sliding-window layer groups and the logger's per-module levels: kvlab has no sliding windows and no logger"
    ),
    "test_kv_cache_manager_v2::test_window_crossing_survives_unreadable_page_indices": (
        "window-crossing debug logging for sliding-window layer groups and the logger's per-module levels: kvlab has no sliding windows and no logger"
    ),
}


# -- block reuse -------------------------------------------------------------------------


def _publishing_manager(policy: str) -> KVCacheManager:
    """Reuse on, ``policy``, tokens_per_block 4 (the module's), room for a 12-token prompt."""
    return _manager(
        _tiny(TOKENS_PER_BLOCK),
        quota_bytes=64 * _tiny(TOKENS_PER_BLOCK).bytes_per_block,
        max_seq_len=MAX_SEQ_LEN,
        block_reuse_policy=policy,
    )


def _run_chunks(manager: KVCacheManager, prompt, chunk_ends):
    request = Request("1", len(prompt), 1, prefix_hashes=chain_hashes(prompt), tokens_per_hash=1)
    assert manager.prepare_context(request)
    for end in chunk_ends:
        assert manager.resize_context(request, end - request.context_current_position)
        request.context_current_position = end
        manager.update_context(request)
    return request, manager.get_cache(request)


@pytest.mark.upstream(
    "test_kv_cache_manager_v2::test_chunking_does_not_change_what_a_prefill_publishes",
    adaptation="upstream compares the token lists its fake core cache is asked to commit; kvlab's "
    "unit of publication is a committed page, so the keys its pages are stored under "
    "are compared (tokens_per_block 4, one hash a token)",
)
@pytest.mark.parametrize("boundaries", [[12], [4, 12], [4, 9, 12], [7, 12], [11, 12]])
def test_chunking_does_not_change_what_a_prefill_publishes(boundaries):
    prompt = list(range(12))

    def published(chunk_ends):
        manager = _publishing_manager("all_reusable")
        _, cache = _run_chunks(manager, prompt, chunk_ends)
        return [manager.prefix_cache.key_of(page) for page in cache.pages]

    chunked, unchunked = published(boundaries), published([len(prompt)])
    assert chunked == unchunked and None not in unchunked and len(unchunked) == 3


@pytest.mark.upstream(
    "test_kv_cache_manager_v2::test_try_commit_blocks_commits_partial_block_at_context_end",
    adaptation="the four tokens upstream's fake cache starts with committed are committed by a real "
    "first chunk; kvlab commits pages, so the tokens of this commit are read as the keys "
    "of the pages it added (prefixes ending at 8 and 10: tokens 4..9, the partial last "
    "page included); stop_committing has no counterpart, so 'stopped' is read as a "
    "further update committing nothing",
)
def test_try_commit_blocks_commits_partial_block_at_context_end():
    manager = _publishing_manager("all_reusable")
    request, cache = _run_chunks(manager, list(range(10)), [4])
    assert cache.committed == 1
    assert manager.resize_context(request, 6)  # the last chunk: tokens 4..9
    request.context_current_position = 10
    manager.update_context(request)
    keys = [manager.prefix_cache.key_of(page) for page in cache.pages[1 : cache.committed]]
    assert [key[1] for key in keys] == [8, 10]  # the committed tokens: 4..9
    assert cache.committed == 3  # num_committed_tokens == 10: two whole pages and the partial one
    manager.update_context(request)
    assert cache.committed == 3


@pytest.mark.upstream(
    "test_kv_cache_manager_v2::test_context_publishes_the_whole_prompt_at_history_length",
    adaptation="kvlab counts committed pages (three of four tokens: the 12 tokens); "
    "stop_committing has no counterpart, so 'stopped' is read as a further update "
    "committing nothing",
)
def test_context_publishes_the_whole_prompt_at_history_length():
    manager = _publishing_manager("per_request")
    request, cache = _run_chunks(manager, list(range(12)), [4, 12])
    assert cache.history_length == 12
    assert cache.committed * TOKENS_PER_BLOCK == 12
    manager.update_context(request)
    assert cache.committed == 3
