"""TensorRT-LLM's tests of the V2 hybrid Mamba manager's capacity, state slots, quota error and
residency, ported onto kvlab's public API (``kvlab.core.mamba``; docs/REFERENCE.md §5).

Upstream: NVIDIA/TensorRT-LLM, tests/unittest/_torch/executor/kv_cache/test_mamba_cache_manager.py
at 70edebecc0b67fb163baf7386d2679abf4164dfa (inventory/mamba_manager_v2.txt lists every test
function of the file; those that are not about capacity, slots, the quota error or residency
are in ``NOT_MODELLED`` with the reason); the class under
test, ``MambaHybridCacheManagerV2``, read in
tensorrt_llm/_torch/pyexecutor/kv_cache/mamba_cache_manager/mamba_cache_manager_v2.py at
28295084972c5ab61ef010a050a18f53f5d72810.

Upstream either builds the manager with ``object.__new__`` and sets its fields by hand
(``ssm_bytes = 64``, ``conv_bytes = 32``, ``_attention_cache_bytes_per_token = lambda: 16``), or
builds a real one on CUDA. kvlab builds a real manager on the CPU, with geometries chosen so that
its bytes are upstream's: where upstream sets a field, the port picks the MambaGeometry and
KVGeometry whose slot and page come to the same numbers. These ports run kvlab's default,
merged residency (``residency="raw"``); neither proposal (PR #17261's clamp, PR #18985's
default) is involved.
"""

from __future__ import annotations

import pytest

from kvlab import KVGeometry, MambaGeometry, MambaHybridCacheManager, plan_residency
from kvlab.core.mamba import cache_size_per_token

#: What kvlab cannot express, with the reason.
NOT_MODELLED = {
    "test_mamba_cache_manager::test_advance_replay_state_uses_checkpoint_predicate_and_skips_dummies": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_cuda_graph_padding_dummy_slot_count_tracks_reachable_draft_lengths": "kvlab has no speculative decoding (MTP configs, draft_len_schedule, the acceptance-rate "
    "fallback): its CUDA-graph padding is always one dummy slot, plus one under attention DP",
    "test_mamba_cache_manager::test_mamba_kv_cache_params_separate_target_and_draft_masks": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_kimi_kda_cache_params_preserve_qkv_and_fp32_state_geometry": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_kimi_explicit_v2_manager_geometry": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_kimi_explicit_v2_manager_uses_qkv_convolution_layout": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_kimi_v1_manager_still_selects_qwen3_next_model_type": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_v2_manager_rejects_model_type_kwarg": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_hybrid_cache_manager_factory_honors_v2_setting": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_qwen3_gdn_replay_supports_cpp_and_v2_managers": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_hybrid_cache_manager_factory_rejects_cpp_preference_with_explicit_v2": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_hybrid_cache_manager_factory_v2_preference_does_not_select_v2": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_hybrid_cache_manager_factory_requires_v2_for_explicit_snapshots": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_hybrid_cache_manager_factory_routes_explicit_v2_disagg": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_hybrid_cache_manager_factory_rejects_python_v1_disagg_reuse": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_hybrid_cache_manager_factory_rejects_unsupported_v2_disagg_route": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_hybrid_cache_manager_factory_rejects_mixed_override_with_reuse": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_hybrid_cache_manager_factory_keeps_v1_disagg_route": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_hybrid_models_prefer_v2_and_python_transceiver": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_qwen3_gdn_replay_uses_v2_preference": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_kimi_without_v2_preference_uses_mixed_manager": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_kimi_preferred_transceiver_runtime": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_kimi_disagg_rejects_non_python_transceiver_route": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_kimi_disagg_python_nixl_routes_to_mixed_manager": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_v2_disagg_slice_skips_state_index_on_mamba_free_pp_rank": "disaggregated KV transfer (KvCacheTransceiverV2 slices, transfer page tables, conv-state "
    "sections): kvlab transfers no KV or recurrent state between servers",
    "test_mamba_cache_manager::test_v2_disagg_slice_reads_state_index_without_refreshing_batch_mask": "disaggregated KV transfer (KvCacheTransceiverV2 slices, transfer page tables, conv-state "
    "sections): kvlab transfers no KV or recurrent state between servers",
    "test_mamba_cache_manager::test_v2_hybrid_incompatibility_fails_without_cpp_fallback": "manager-class routing and model-config extraction (get_kv_cache_manager_cls, "
    "_create_kv_cache_manager, extract_mamba_kv_cache_params, TLLM_MAMBA_MANAGER_PREFERENCE, "
    "transceiver runtimes): kvlab has one hybrid manager class, built directly from a "
    "MambaGeometry and a KVGeometry, with no factory or model config to route",
    "test_mamba_cache_manager::test_replay_inactive_without_spec_config": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_padding_slot_not_held_by_parked_real": "the V1 PythonMambaCacheManager's CUDA-graph padding requests (add_dummy_requests "
    "sentinels, get_state_indices with padding flags): kvlab's dummy slots are reserved at "
    "construction and never handed to a request, and it has no add_dummy_requests",
    "test_mamba_cache_manager::test_padding_survives_overlap_scheduler_pressure": "the V1 PythonMambaCacheManager's CUDA-graph padding requests (add_dummy_requests "
    "sentinels, get_state_indices with padding flags): kvlab's dummy slots are reserved at "
    "construction and never handed to a request, and it has no add_dummy_requests",
    "test_mamba_cache_manager::test_all_draft_len_sentinels_share_one_slot": "the V1 PythonMambaCacheManager's CUDA-graph padding requests (add_dummy_requests "
    "sentinels, get_state_indices with padding flags): kvlab's dummy slots are reserved at "
    "construction and never handed to a request, and it has no add_dummy_requests",
    "test_mamba_cache_manager::test_padding_slot_is_permanent": "the V1 PythonMambaCacheManager's CUDA-graph padding requests (add_dummy_requests "
    "sentinels, get_state_indices with padding flags): kvlab's dummy slots are reserved at "
    "construction and never handed to a request, and it has no add_dummy_requests",
    "test_mamba_cache_manager::test_replay_update_mamba_states_uses_history_window": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_replay_update_mamba_states_skips_dummy_slots": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_promote_mamba_state_fuses_replay_bookkeeping": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_cpp_hybrid_replay_bookkeeping_is_fused_into_conv_promotion": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_update_mamba_states_mtp_path": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_update_mamba_states_autodeploy_path": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_non_mtp_pytorch_prepare_and_get_state_indices_flow": "the V1 PythonMambaCacheManager's CUDA-graph padding requests (add_dummy_requests "
    "sentinels, get_state_indices with padding flags): kvlab's dummy slots are reserved at "
    "construction and never handed to a request, and it has no add_dummy_requests",
    "test_mamba_cache_manager::test_v2_hybrid_prepare_expect_snapshot_points": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_v2_hybrid_prepare_expect_snapshot_points_without_periodic_snapshots": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_mamba_snapshot_rule_count_deduplicates_and_filters_unreachable_points": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_v2_hybrid_snapshot_sizing_scales_with_pp_and_explicit_rules": "kvlab runs its hybrid manager with block reuse off, hence no recurrent-state snapshots (periodic or at explicit "
    "offsets) to size per request lineage",
    "test_mamba_cache_manager::test_cpp_mamba_estimator_handles_disabled_snapshots_without_attention": "the V1 (Cpp) manager's linear-attention block sizing with snapshots disabled "
    "(_calculate_max_num_blocks_for_linear_attention): kvlab models the V2 hybrid manager "
    "only, which sizes its slots from the residency plan",
    "test_mamba_cache_manager::test_hybrid_mtp_layout_honors_explicit_base_partition": "MTP draft layers added to the pipeline partition (get_pp_layers with spec_config, the "
    "per-rank cache cost of the draft layer): kvlab has no speculative decoding nor layer "
    "partitioning, only per-rank geometries",
    "test_mamba_cache_manager::test_hybrid_separate_mtp_draft_estimator_has_no_mamba_state": "a separate MTP draft KV cache (use_separate_draft_kv_cache, is_draft estimators): kvlab "
    "has no speculative decoding and no draft manager",
    "test_mamba_cache_manager::test_v2_hybrid_attention_bound_is_snapshot_alignment_agnostic": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_v2_hybrid_typical_batch_splits_capacity_across_ssm_states_and_dummies": "kvlab sizes its pools from the quota directly; it has no runtime KVCacheManagerConfig, "
    "typical_step BatchDesc or constraints whose capacity _build_cache_config splits",
    "test_mamba_cache_manager::test_v2_hybrid_warns_when_avg_seq_len_is_missing": "the warning when avg_seq_len is missing from the typical-step sizing: kvlab has no "
    "allocator warm-up sizing (typical_step) and no logger",
    "test_mamba_cache_manager::test_v2_hybrid_pure_mamba_rank_does_not_reserve_attention_page": "kvlab's hybrid manager always has an attention geometry (a KVGeometry has at least one "
    "layer), so its floor always includes one attention page: a pure-Mamba rank cannot be "
    "built",
    "test_mamba_cache_manager::test_cpp_hybrid_prepare_expect_snapshot_points": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_cpp_hybrid_state_indices_skip_context_placeholders": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_v2_block_reuse_commit_saves_ssm_snapshot_at_snapshot_point": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_v2_hybrid_add_dummy_requests_forwards_encoder_output_lens": "add_dummy_requests forwarding encoder_output_lens: kvlab has no encoder-decoder models "
    "and no add_dummy_requests",
    "test_mamba_cache_manager::test_hybrid_prepare_expect_snapshot_points_clears_when_reuse_disabled": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_cpp_hybrid_prepare_expect_snapshot_points_clears_for_disabled_interval": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_expect_snapshot_points_binding_round_trip": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_v2_hybrid_pool_ratio_controls_allocated_memory": "kvlab has no pool_ratio: the state slots take what the residency needs and the attention "
    "pages the rest of the quota",
    "test_mamba_cache_manager::test_v2_hybrid_nvfp4_page_table_omits_ssm_block_scales": "the native pools' per-pool dtypes, block-scale pointers, NaN scans and SWA scratch rows: "
    "kvlab's pools are untyped byte tensors with one page-index table, no pool-pointer tables "
    "or scale buffers",
    "test_mamba_cache_manager::test_v2_hybrid_supports_pure_mamba_pp_rank": "kvlab's hybrid manager always has an attention geometry, so a pipeline rank with Mamba "
    "layers and no attention layer (no attention pool) cannot be built",
    "test_mamba_cache_manager::test_v2_hybrid_invalid_check_scans_distinct_attention_pools": "the native pools' per-pool dtypes, block-scale pointers, NaN scans and SWA scratch rows: "
    "kvlab's pools are untyped byte tensors with one page-index table, no pool-pointer tables "
    "or scale buffers",
    "test_mamba_cache_manager::test_v2_hybrid_dummy_indices_keep_cuda_buffer_address": "kvlab's dummy slots are reserved and never handed to a request (there is no "
    "add_dummy_requests), and it keeps no device-side state-index buffer whose address could "
    "move",
    "test_mamba_cache_manager::test_v2_hybrid_reserves_every_persistent_dummy_slot": "kvlab has no speculative decoding, so no CUDA-graph dummy slot per reachable draft "
    "length, and no add_dummy_requests to hand the dummies to requests",
    "test_mamba_cache_manager::test_v2_hybrid_uses_upstream_min_snapshot_policy": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_v2_hybrid_debug_logs_prefix_reuse_only_on_rank_zero": "recurrent-cache iteration statistics and rank-0 debug/status logging: kvlab keeps only "
    "PoolCounters and has no logger",
    "test_mamba_cache_manager::test_v2_hybrid_logs_aggregated_recurrent_cache_status_only_on_rank_zero": "recurrent-cache iteration statistics and rank-0 debug/status logging: kvlab keeps only "
    "PoolCounters and has no logger",
    "test_mamba_cache_manager::test_v2_hybrid_preserves_per_conversation_and_disables_periodic_snapshots": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_v2_hybrid_retains_configured_number_of_conversation_turns": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_v2_hybrid_saves_conversation_plan_only_after_final_context_chunk": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_v2_hybrid_mamba_state_views_use_logical_slots": "kvlab stores a slot as one uint8 row for all local layers; upstream's per-layer strided "
    "views over V2's coalesced pages (page_index_scale) have no counterpart",
    "test_mamba_cache_manager::test_v2_hybrid_swa_scratch_keeps_ssm_placeholder_rows": "the native pools' per-pool dtypes, block-scale pointers, NaN scans and SWA scratch rows: "
    "kvlab's pools are untyped byte tensors with one page-index table, no pool-pointer tables "
    "or scale buffers",
    "test_mamba_cache_manager::test_v2_hybrid_disagg_page_table_preserves_lifecycle_indices": "disaggregated KV transfer (KvCacheTransceiverV2 slices, transfer page tables, conv-state "
    "sections): kvlab transfers no KV or recurrent state between servers",
    "test_mamba_cache_manager::test_v2_hybrid_disagg_page_table_uses_qwen3_next_conv_sections": "disaggregated KV transfer (KvCacheTransceiverV2 slices, transfer page tables, conv-state "
    "sections): kvlab transfers no KV or recurrent state between servers",
    "test_mamba_cache_manager::test_v2_hybrid_intermediate_states_size_by_tokens_per_gen_step": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_v2_hybrid_static_dynamic_tree_capacity": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_hybrid_replay_buffers_size_by_tokens_per_gen_step": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_v2_gdn_replay_builds_affine_state_layout": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_v2_gdn_replay_all_layer_commit_matches_contiguous_layout": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_v2_gdn_replay_commits_before_advancing_bookkeeping": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_v2_hybrid_replay_update_skips_dummy_and_padding_rows": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_v2_hybrid_dynamic_tree_promotes_accepted_leaf_state": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_cpp_hybrid_passes_per_window_pool_dtypes_for_nvfp4_kv_cache": "the native pools' per-pool dtypes, block-scale pointers, NaN scans and SWA scratch rows: "
    "kvlab's pools are untyped byte tensors with one page-index table, no pool-pointer tables "
    "or scale buffers",
    "test_mamba_cache_manager::test_cpp_hybrid_merges_compact_scale_rows_with_unmanaged_layers": "the native pools' per-pool dtypes, block-scale pointers, NaN scans and SWA scratch rows: "
    "kvlab's pools are untyped byte tensors with one page-index table, no pool-pointer tables "
    "or scale buffers",
    "test_mamba_cache_manager::test_cpp_hybrid_recurrent_pool_reserves_draft_len_sentinel_slots": "speculative-decoding state updates (replay / GDN bookkeeping, intermediate states per "
    "draft step, promotion of accepted draft states, update_mamba_states): kvlab has no "
    "speculative decoding, and its state slots are bytes no kernel computes on",
    "test_mamba_cache_manager::test_cpp_hybrid_recurrent_pool_floor_with_block_reuse": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_cpp_hybrid_dry_run_recurrent_pool_additive_with_block_reuse": "recurrent-state snapshots for prefix reuse (expect_snapshot_points, snapshot rules, "
    "commits, conversation turns, reuse policies): kvlab runs its hybrid manager with block reuse off, hence no "
    "snapshots",
    "test_mamba_cache_manager::test_cpp_hybrid_zero_local_mamba_layers": "the V1 (Cpp) manager's early-exit constructor on a rank without Mamba layers (impl, "
    "blocks_per_window, linear_attention_metadata, Mamba2Metadata on it): kvlab models the V2 "
    "hybrid manager only; its attention-only rank is ported from "
    "test_v2_hybrid_metadata_supports_attention_only_pp_rank",
}


def builder_geometries(num_mamba_layers: int = 1):
    """``_build_v2_hybrid_with_mamba_layer``'s model: d_state 8, d_conv 4, 4 heads of 8, one
    group, fp16 states; attention 4 KV heads of 64 in fp16, 32-token pages."""
    mamba = MambaGeometry(
        num_mamba_layers=num_mamba_layers,
        mamba_num_heads=4,
        mamba_head_dim=8,
        d_state=8,
        n_groups=1,
        d_conv=4,
        conv_dtype="float16",
        ssm_dtype="float16",
    )
    attention = KVGeometry(
        num_layers=1, num_kv_heads=4, head_dim=64, dtype="float16", tokens_per_block=32
    )
    return mamba, attention


def build_v2_hybrid(
    max_batch_size: int = 4,
    *,
    mamba: bool = True,
    max_tokens: int = 512,
    pp_size: int = 1,
    attention_dp: bool = False,
) -> MambaHybridCacheManager:
    """A real manager like upstream's builder: ``max_tokens=512`` of attention pages on top of
    the live and dummy state slots; ``mamba=False``: the attention-only pipeline rank."""
    m, attention = builder_geometries()
    plan = plan_residency(
        m if mamba else None, attention, 1, max_batch_size, pp_size, attention_dp=attention_dp
    )
    quota = (plan.requested + plan.dummies) * plan.slot_bytes + attention.blocks_for_tokens(
        max_tokens
    ) * attention.bytes_per_block
    return MambaHybridCacheManager(
        attention,
        m if mamba else None,
        quota,
        max_seq_len=128,
        max_batch_size=max_batch_size,
        pp_size=pp_size,
        attention_dp=attention_dp,
    )


@pytest.mark.upstream(
    "test_mamba_cache_manager::test_v2_hybrid_estimator_counts_dummy_states_without_attention_capacity",
    adaptation="upstream mocks 11 attention bytes a token and a 64-byte slot; kvlab "
    "gets them from an MLA fp8 KVGeometry (1 head of 11) and a 64-byte "
    "MambaGeometry. Cases: no spec config (1 dummy: 320) and a static MTP "
    "config under attention DP (2 dummies: 384); the draft_len_schedule "
    "case (4 CUDA-graph dummies: 576) needs speculative decoding, which "
    "kvlab lacks",
)
@pytest.mark.parametrize(("attention_dp", "expected_intercept"), [(False, 320), (True, 384)])
def test_estimator_counts_dummy_states(attention_dp, expected_intercept):
    mamba = MambaGeometry(
        num_mamba_layers=1,
        mamba_num_heads=1,
        mamba_head_dim=4,
        d_state=2,
        n_groups=1,
        d_conv=2,
        conv_dtype="float32",
        ssm_dtype="float32",
    )
    attention = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=11, dtype="fp8", kv_factor=1)
    assert mamba.bytes_per_slot == 64 and attention.bytes_per_token == 11
    assert cache_size_per_token(mamba, attention, max_batch_size=4, attention_dp=attention_dp) == (
        11,
        expected_intercept,
    )


@pytest.mark.upstream(
    "test_mamba_cache_manager::test_v2_hybrid_rejects_quota_below_live_state_floor",
    adaptation="upstream's hand-set fields (2 sequences, one 64 + 32 byte Mamba layer, "
    "1 dummy, 16 attention bytes a token in 32-token pages) become a "
    "MambaGeometry and a KVGeometry with those bytes; "
    "_minimum_live_gpu_quota() is ResidencyPlan.minimum_live_quota, and "
    "_build_cache_config's check runs in the constructor",
)
def test_rejects_quota_below_live_state_floor():
    mamba = MambaGeometry(
        num_mamba_layers=1,
        mamba_num_heads=1,
        mamba_head_dim=8,
        d_state=4,
        n_groups=1,
        d_conv=2,
        conv_dtype="float16",
        ssm_dtype="float16",
    )
    attention = KVGeometry(
        num_layers=1, num_kv_heads=1, head_dim=4, dtype="float16", tokens_per_block=32
    )
    assert (mamba.ssm_bytes, mamba.conv_bytes, attention.bytes_per_token) == (64, 32, 16)
    minimum_quota = plan_residency(mamba, attention, 1, max_batch_size=2).minimum_live_quota

    with pytest.raises(ValueError, match="too small for live recurrent states"):
        MambaHybridCacheManager(
            attention, mamba, minimum_quota - 1, max_seq_len=128, max_batch_size=2
        )


@pytest.mark.upstream(
    "test_mamba_cache_manager::test_v2_hybrid_allocates_mamba_state_and_dummy_indices",
    adaptation="built on the CPU; the SSM and conv state shapes are checked as "
    "MambaGeometry's byte counts ([4, 8, 8] and [48, 3] fp16 elements a "
    "slot), get_max_resource_count() as the slots that are not dummies, "
    "blocks_in_primary_pool as total_blocks, add_dummy_requests as "
    "create_cache; the NaN check, the is_dummy map, the device index "
    "buffer and the state tensors' data_ptr have no counterpart",
)
def test_allocates_mamba_state_and_dummy_indices():
    mgr = build_v2_hybrid(max_batch_size=4)
    mamba = mgr.mamba
    assert mgr.local_num_mamba_layers == 1
    assert mamba.ssm_bytes == 4 * 8 * 8 * 2  # [4, 8, 8] fp16
    assert mamba.conv_dim == 48 and mamba.conv_bytes == 48 * 3 * 2  # [48, 3] fp16
    assert mgr.state_slots.num_slots - mgr.state_slots.num_dummies == 4
    assert mgr.total_blocks > 0

    cache = mgr.create_cache("123")
    cache.resize(8)
    indices = mgr.get_state_indices(["123"])
    assert len(indices) == 1
    assert indices[0] >= 0


@pytest.mark.upstream(
    "test_mamba_cache_manager::test_v2_hybrid_metadata_supports_attention_only_pp_rank",
    adaptation="the attention-only pipeline rank (pp 2, rank 1) is a manager with "
    "mamba=None; add_dummy_requests is create_cache; Mamba2Metadata's "
    "state_indices are read through get_state_indices",
)
def test_metadata_supports_attention_only_pp_rank():
    mgr = build_v2_hybrid(max_batch_size=1, mamba=False)
    assert mgr.local_num_mamba_layers == 0
    mgr.create_cache("123").resize(8)

    assert mgr.get_state_indices(["123"])[0] == 0


@pytest.mark.upstream(
    "test_mamba_cache_manager::test_v2_hybrid_free_resources_drops_stale_state_index_mapping",
    adaptation="add_dummy_requests is create_cache; the request-id to state-index "
    "map is read through state_slot (None: not mapped); the is_dummy map "
    "has no counterpart",
)
def test_free_resources_drops_stale_state_index_mapping():
    mgr = build_v2_hybrid()
    mgr.create_cache("123").resize(8)
    assert mgr.state_slot("123") is not None

    mgr.create_cache("456").resize(8)
    mgr.free("123")

    assert mgr.state_slot("123") is None


#: The adaptation of the tests upstream runs on its V1 managers (Python or Cpp): kvlab models
#: one hybrid manager, the V2 one, so the same slot invariant is checked on it, on the CPU.
V1_PYTHON = (
    "upstream builds the V1 PythonMambaCacheManager on CUDA; kvlab models one hybrid "
    "manager, the V2 one, so the same slot invariant is checked on it, on the CPU"
)
V1_CPP = (
    "upstream builds the V1 CppMambaHybridCacheManager on CUDA; kvlab models one hybrid "
    "manager, the V2 one, so the same slot invariant is checked on it, on the CPU"
)


@pytest.mark.upstream(
    "test_mamba_cache_manager::test_python_mamba_resource_count_excludes_reserved_dummy_slots",
    adaptation=V1_PYTHON + "; "
    "get_max_resource_count() is the slots that are not dummies, "
    "mamba_cache_free_blocks the free slots; the draft length (2) "
    "has no counterpart, kvlab has no speculative decoding",
)
@pytest.mark.parametrize("attention_dp", [False, True])
def test_resource_count_excludes_reserved_dummy_slots(attention_dp):
    mgr = build_v2_hybrid(max_batch_size=4, attention_dp=attention_dp)
    slots = mgr.state_slots
    assert slots.num_dummies == (2 if attention_dp else 1)
    assert slots.num_slots - slots.num_dummies == 4
    assert slots.free_slots == 4


@pytest.mark.upstream(
    "test_mamba_cache_manager::test_attention_dp_dummy_has_reserved_slot_with_batch_size_one",
    adaptation=V1_PYTHON + "; the attention-DP "
    "dummy's slot is reserved at construction (kvlab has no "
    "add_dummy_requests), and a second real sequence finds no slot",
)
def test_attention_dp_dummy_has_reserved_slot_with_batch_size_one():
    mgr = build_v2_hybrid(max_batch_size=1, attention_dp=True)
    slots = mgr.state_slots
    mgr.create_cache("100").resize(8)

    assert slots.free_slots == 0
    assert mgr.state_slot("100") >= slots.num_dummies  # not one of the reserved dummy slots
    mgr.free("100")
    assert slots.free_slots == slots.num_slots - slots.num_dummies == 1  # dummies stay reserved


@pytest.mark.upstream(
    "test_mamba_cache_manager::test_cpp_hybrid_recurrent_pool_reserves_cuda_graph_padding_slot",
    adaptation=V1_CPP + "; the recurrent-state pool's primary blocks are kvlab's state slots",
)
def test_recurrent_pool_reserves_cuda_graph_padding_slot():
    max_batch_size = 4
    mgr = build_v2_hybrid(max_batch_size=max_batch_size)
    assert mgr.state_slots.num_slots >= max_batch_size + 1


@pytest.mark.upstream(
    "test_mamba_cache_manager::test_cpp_hybrid_recurrent_pool_scales_with_pp_size",
    adaptation=V1_CPP + "; the "
    "recurrent-state pool's primary blocks are kvlab's state slots, "
    "and the rank's pp_size is a constructor argument (upstream "
    "builds a Mapping of pp_size ranks on rank 0)",
)
@pytest.mark.parametrize("pp_size", [2, 4])
def test_recurrent_pool_scales_with_pp_size(pp_size):
    max_batch_size = 4
    mgr = build_v2_hybrid(max_batch_size=max_batch_size, pp_size=pp_size)
    assert mgr.state_slots.num_slots >= max_batch_size * pp_size + 1
