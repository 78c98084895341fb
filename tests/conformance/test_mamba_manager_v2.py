"""TensorRT-LLM's tests of the V2 hybrid Mamba manager's capacity, state slots, quota error and
residency, ported onto kvlab's public API (``kvlab.mamba``; docs/REFERENCE.md §5).

Upstream: NVIDIA/TensorRT-LLM, tests/unittest/_torch/executor/kv_cache/test_mamba_cache_manager.py
at 70edebecc0b67fb163baf7386d2679abf4164dfa (inventory/mamba_manager_v2.txt); the class under
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
from kvlab.mamba import cache_size_per_token

#: What kvlab cannot express, with the reason.
NOT_MODELLED = {
    "test_mamba_cache_manager::test_cuda_graph_padding_dummy_slot_count_tracks_reachable_draft_lengths":
        "kvlab has no speculative decoding (MTP configs, draft_len_schedule, the acceptance-rate "
        "fallback): its CUDA-graph padding is always one dummy slot, plus one under attention DP",
    "test_mamba_cache_manager::test_v2_hybrid_snapshot_sizing_scales_with_pp_and_explicit_rules":
        "kvlab has no prefix reuse, hence no recurrent-state snapshots (periodic or at explicit "
        "offsets) to size per request lineage",
    "test_mamba_cache_manager::test_v2_hybrid_typical_batch_splits_capacity_across_ssm_states_and_dummies":
        "kvlab sizes its pools from the quota directly; it has no runtime KVCacheManagerConfig, "
        "typical_step BatchDesc or constraints whose capacity _build_cache_config splits",
    "test_mamba_cache_manager::test_v2_hybrid_pure_mamba_rank_does_not_reserve_attention_page":
        "kvlab's hybrid manager always has an attention geometry (a KVGeometry has at least one "
        "layer), so its floor always includes one attention page: a pure-Mamba rank cannot be built",
    "test_mamba_cache_manager::test_v2_hybrid_pool_ratio_controls_allocated_memory":
        "kvlab has no pool_ratio: the state slots take what the residency needs and the attention "
        "pages the rest of the quota",
    "test_mamba_cache_manager::test_v2_hybrid_supports_pure_mamba_pp_rank":
        "kvlab's hybrid manager always has an attention geometry, so a pipeline rank with Mamba "
        "layers and no attention layer (no attention pool) cannot be built",
    "test_mamba_cache_manager::test_v2_hybrid_dummy_indices_keep_cuda_buffer_address":
        "kvlab's dummy slots are reserved and never handed to a request (there is no "
        "add_dummy_requests), and it keeps no device-side state-index buffer whose address could move",
    "test_mamba_cache_manager::test_v2_hybrid_reserves_every_persistent_dummy_slot":
        "kvlab has no speculative decoding, so no CUDA-graph dummy slot per reachable draft length, "
        "and no add_dummy_requests to hand the dummies to requests",
    "test_mamba_cache_manager::test_v2_hybrid_mamba_state_views_use_logical_slots":
        "kvlab stores a slot as one uint8 row for all local layers; upstream's per-layer strided "
        "views over V2's coalesced pages (page_index_scale) have no counterpart",
}


def builder_geometries(num_mamba_layers: int = 1):
    """``_build_v2_hybrid_with_mamba_layer``'s model: d_state 8, d_conv 4, 4 heads of 8, one
    group, fp16 states; attention 4 KV heads of 64 in fp16, 32-token pages."""
    mamba = MambaGeometry(num_mamba_layers=num_mamba_layers, mamba_num_heads=4, mamba_head_dim=8,
                          d_state=8, n_groups=1, d_conv=4, conv_dtype="float16",
                          ssm_dtype="float16")
    attention = KVGeometry(num_layers=1, num_kv_heads=4, head_dim=64, dtype="float16",
                           tokens_per_block=32)
    return mamba, attention


def build_v2_hybrid(max_batch_size: int = 4, *, mamba: bool = True, max_tokens: int = 512,
                    **kwargs) -> MambaHybridCacheManager:
    """A real manager like upstream's builder: ``max_tokens=512`` of attention pages on top of
    the live and dummy state slots; ``mamba=False``: the attention-only pipeline rank."""
    m, attention = builder_geometries()
    plan = plan_residency(m if mamba else None, attention, 1, max_batch_size)
    quota = ((plan.requested + plan.dummies) * plan.slot_bytes
             + attention.blocks_for_tokens(max_tokens) * attention.bytes_per_block)
    return MambaHybridCacheManager(attention, m if mamba else None, quota, max_seq_len=128,
                                   max_batch_size=max_batch_size, **kwargs)


@pytest.mark.upstream("test_mamba_cache_manager::test_v2_hybrid_estimator_counts_dummy_states_without_attention_capacity",
                      adaptation="upstream mocks 11 attention bytes a token and a 64-byte slot; kvlab "
                                 "gets them from an MLA fp8 KVGeometry (1 head of 11) and a 64-byte "
                                 "MambaGeometry. Cases: no spec config (1 dummy: 320) and a static MTP "
                                 "config under attention DP (2 dummies: 384); the draft_len_schedule "
                                 "case (4 CUDA-graph dummies: 576) needs speculative decoding, which "
                                 "kvlab lacks")
@pytest.mark.parametrize(("attention_dp", "expected_intercept"), [(False, 320), (True, 384)])
def test_estimator_counts_dummy_states(attention_dp, expected_intercept):
    mamba = MambaGeometry(num_mamba_layers=1, mamba_num_heads=1, mamba_head_dim=4, d_state=2,
                          n_groups=1, d_conv=2, conv_dtype="float32", ssm_dtype="float32")
    attention = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=11, dtype="fp8", kv_factor=1)
    assert mamba.bytes_per_slot == 64 and attention.bytes_per_token == 11
    assert cache_size_per_token(mamba, attention, max_batch_size=4,
                                attention_dp=attention_dp) == (11, expected_intercept)


@pytest.mark.upstream("test_mamba_cache_manager::test_v2_hybrid_rejects_quota_below_live_state_floor",
                      adaptation="upstream's hand-set fields (2 sequences, one 64 + 32 byte Mamba layer, "
                                 "1 dummy, 16 attention bytes a token in 32-token pages) become a "
                                 "MambaGeometry and a KVGeometry with those bytes; "
                                 "_minimum_live_gpu_quota() is ResidencyPlan.minimum_live_quota, and "
                                 "_build_cache_config's check runs in the constructor")
def test_rejects_quota_below_live_state_floor():
    mamba = MambaGeometry(num_mamba_layers=1, mamba_num_heads=1, mamba_head_dim=8, d_state=4,
                          n_groups=1, d_conv=2, conv_dtype="float16", ssm_dtype="float16")
    attention = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=4, dtype="float16",
                           tokens_per_block=32)
    assert (mamba.ssm_bytes, mamba.conv_bytes, attention.bytes_per_token) == (64, 32, 16)
    minimum_quota = plan_residency(mamba, attention, 1, max_batch_size=2).minimum_live_quota

    with pytest.raises(ValueError, match="too small for live recurrent states"):
        MambaHybridCacheManager(attention, mamba, minimum_quota - 1, max_seq_len=128,
                                max_batch_size=2)


@pytest.mark.upstream("test_mamba_cache_manager::test_v2_hybrid_allocates_mamba_state_and_dummy_indices",
                      adaptation="built on the CPU; the SSM and conv state shapes are checked as "
                                 "MambaGeometry's byte counts ([4, 8, 8] and [48, 3] fp16 elements a "
                                 "slot), get_max_resource_count() as the slots that are not dummies, "
                                 "blocks_in_primary_pool as total_blocks, add_dummy_requests as "
                                 "create_cache; the NaN check, the is_dummy map, the device index "
                                 "buffer and the state tensors' data_ptr have no counterpart")
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


@pytest.mark.upstream("test_mamba_cache_manager::test_v2_hybrid_metadata_supports_attention_only_pp_rank",
                      adaptation="the attention-only pipeline rank (pp 2, rank 1) is a manager with "
                                 "mamba=None; add_dummy_requests is create_cache; Mamba2Metadata's "
                                 "state_indices are read through get_state_indices")
def test_metadata_supports_attention_only_pp_rank():
    mgr = build_v2_hybrid(max_batch_size=1, mamba=False)
    assert mgr.local_num_mamba_layers == 0
    mgr.create_cache("123").resize(8)

    assert mgr.get_state_indices(["123"])[0] == 0


@pytest.mark.upstream("test_mamba_cache_manager::test_v2_hybrid_free_resources_drops_stale_state_index_mapping",
                      adaptation="add_dummy_requests is create_cache; the request-id to state-index "
                                 "map is read through state_slot (None: not mapped); the is_dummy map "
                                 "has no counterpart")
def test_free_resources_drops_stale_state_index_mapping():
    mgr = build_v2_hybrid()
    mgr.create_cache("123").resize(8)
    assert mgr.state_slot("123") is not None

    mgr.create_cache("456").resize(8)
    mgr.free("123")

    assert mgr.state_slot("123") is None
