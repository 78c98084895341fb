"""kvlab plan against TensorRT-LLM's own sizing code, one upstream formula a test, each computed
here by hand from the function it mirrors (docs/REFERENCE.md §8 names the commits read)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from kvlab.analysis.deployment import Deployment, example_deployments, plan_deployment
from kvlab.analysis.gpus import GPUS, MEASURED, NVIDIA_SMI
from kvlab.analysis.models import (
    ConfigError,
    inferred_max_seq_len,
    load_model,
    quantization_from_config,
    read_config,
)
from kvlab.analysis.v1_capacity import estimated_bytes_per_token, v1_tokens
from kvlab.cli import main
from kvlab.core.memory import GIB
from kvlab.core.page_index import max_blocks_per_seq

H200 = GPUS["h200"].gib


def _config(**fields):
    from types import SimpleNamespace

    return SimpleNamespace(**fields)


# -- which manager (llm_args.py KvCacheConfig.use_kv_cache_manager_v2, py_executor_creator.py) --


@pytest.mark.parametrize(
    "name, manager",
    [
        ("llama-3.1-8b", "v1"),
        ("llama-3.1-70b", "v1"),
        ("deepseek-v3", "v1"),
        ("mistral-7b-v0.1", "v1"),
        ("qwen3-235b-a22b", "v1"),
        ("qwen3.5-27b", "v2"),
        ("nemotron-nano-9b-v2", "v2"),
    ],
)
def test_auto_gives_v2_only_to_the_architectures_that_declare_it(name, manager):
    d = Deployment(model=load_model(name), gpu_gib=H200, max_batch_size=8)
    assert d.resolved_manager == manager == plan_deployment(d).manager


def test_an_explicit_manager_wins_and_beam_search_falls_back_to_v1():
    model = load_model("llama-3.1-8b")
    assert Deployment(model=model, gpu_gib=H200, manager="v2").resolved_manager == "v2"
    beam = Deployment(model=model, gpu_gib=H200, manager="v2", max_beam_width=4)
    assert beam.resolved_manager == "v1"
    assert any("Falling back to KVCacheManager" in n for n in plan_deployment(beam).notes)
    with pytest.raises(ValueError, match="MambaHybridCacheManager"):
        Deployment(model=load_model("qwen3.5-27b"), gpu_gib=H200, max_beam_width=2)


# -- KVCacheManager.get_cache_size_per_token (resource_manager.py at 001541bad) --


def test_the_creators_estimate_floors_over_all_heads():
    """head_dim * num_key_value_heads // tp, 2 bytes, K and V, the stage's attention layers."""
    d = Deployment(model=load_model("llama-3.1-70b"), gpu_gib=H200, tp_size=16)
    assert estimated_bytes_per_token(d, 0) == 2 * 80 * (128 * 8 // 16) * 2 == 20480
    assert d.kv_geometry(0).bytes_per_token == 2 * 80 * math.ceil(8 / 16) * 128 * 2 == 40960
    qwen = Deployment(model=load_model("qwen3-235b-a22b"), gpu_gib=GPUS["gb300"].gib, tp_size=16)
    assert qwen.kv_geometry(0).bytes_per_token == 4 * estimated_bytes_per_token(qwen, 0)  # 4x over
    fp8 = dataclasses.replace(d, kv_dtype="fp8")
    assert estimated_bytes_per_token(fp8, 0) == 1 * 80 * 64 * 2
    nvfp4 = dataclasses.replace(d, kv_dtype="nvfp4")
    values = 80 * 64 * 2
    assert estimated_bytes_per_token(nvfp4, 0) == math.ceil(values / 2) + math.ceil(values / 16)
    mla = Deployment(model=load_model("deepseek-v3"), gpu_gib=H200, tp_size=8)
    assert estimated_bytes_per_token(mla, 0) == 2 * 61 * 576 * 1  # MLA: one head, never split
    pp = Deployment(model=load_model("llama-3.1-70b"), gpu_gib=H200, tp_size=8, pp_size=3)
    assert [estimated_bytes_per_token(pp, s) // (2 * 128 * 2) for s in range(3)] == [27, 27, 26]


# -- KVCacheManager.calculate_max_num_blocks (resource_manager.py at 001541bad) --


def test_v1_takes_the_smaller_of_the_creators_tokens_and_the_free_memory_at_construction():
    d = Deployment(
        model=load_model("llama-3.1-70b"),
        gpu_gib=H200,
        tp_size=16,
        activations_gib=3.0,
        workspace_gib=1.0,
        non_torch_gib=0.5,
    )
    plan = plan_deployment(d)
    b = d.budgets()[0]
    total, weights = round(H200 * GIB), d.weights_bytes
    budget = int((total - weights - round(1.0 * GIB) - round(3.0 * GIB) - round(0.5 * GIB)) * 0.9)
    free = total - weights - round(1.0 * GIB) - round(0.5 * GIB)  # activations freed by then
    tokens = min(budget // 20480, 0.9 * free / 40960)
    assert b.available_bytes == budget and v1_tokens(d, b, 0) == tokens
    assert tokens == 0.9 * free / 40960  # the 2x estimate makes the free memory the bound
    assert plan.blocks == int(tokens // 32) and plan.quotas[0] == free
    assert "2.00x below the real bytes" in " ".join(plan.explain().split())


def test_v1_ignores_max_gpu_total_bytes_and_v2_obeys_it():
    model = load_model("llama-3.1-8b")
    v1 = plan_deployment(Deployment(model=model, gpu_gib=H200, kv_quota_gib=4.0))
    v2 = plan_deployment(Deployment(model=model, gpu_gib=H200, kv_quota_gib=4.0, manager="v2"))
    assert v2.blocks == round(4.0 * GIB) // (131072 * 32)
    assert v1.blocks > 10 * v2.blocks and any("does not read it" in n for n in v1.notes)


def test_v1_clamps_to_the_blocks_and_its_worker_rejects_from_the_clamped_length():
    """get_max_atten_window_upper_bound: floor(blocks / beam) * tpb (a block less when beam
    search clamps); the worker's _deduce_max_tokens refuses a prompt of the clamped max_seq_len
    or more. The KV manager's max_seq_len is the configured one + 1 (the overlap scheduler)."""
    d = Deployment(
        model=load_model("llama-3.1-8b"), gpu_gib=17.0, chunked_prefill=True, max_seq_len=131072
    )
    plan = plan_deployment(d)
    assert plan.clamped and plan.clamped_max_seq_len == plan.blocks * 32
    assert [(s.low, s.high, s.verdict) for s in plan.ranges["v1"]] == [
        (1, plan.blocks * 32 - 1, "ok"),
        (plan.blocks * 32, 131072, "reject"),
    ]
    assert plan.worst() == "reject" and plan.exit_code == 0 and plan.width_fix is None
    beam = plan_deployment(dataclasses.replace(d, max_beam_width=2))
    assert beam.clamped_max_seq_len == (beam.blocks // 2) * 32 - 32
    assert beam.width_current == beam.clamped_max_seq_len // 32 + 1  # useOneMoreBlock
    roomy = plan_deployment(dataclasses.replace(d, gpu_gib=H200, max_seq_len=32768))
    assert d.kv_max_seq_len == 131073 and not roomy.clamped and roomy.worst() == "ok"
    assert roomy.longest() == 32768  # a prompt of max_seq_len still gets its one token


# -- Mapping.pp_layers: torch.tensor_split over every decoder layer --


def test_pipeline_stages_split_the_whole_layer_list():
    nemotron = load_model("nemotron-nano-9b-v2")
    assert [nemotron.stage(4, s) for s in range(4)] == [(0, 8), (2, 6), (2, 6), (0, 7)]
    qwen = load_model("qwen3.5-27b")
    assert [qwen.stage(3, s) for s in range(3)] == [(5, 17), (5, 16), (6, 15)]
    assert [load_model("llama-3.1-70b").stage(3, s)[0] for s in range(3)] == [27, 27, 26]


def test_a_hybrid_raises_on_the_stage_with_the_most_recurrent_layers():
    """Nemotron-Nano-9B-v2 at pp 4: stage 0 holds 8 Mamba layers, not ceil(27 / 4) = 7."""
    d = Deployment(
        model=load_model("nemotron-nano-9b-v2"), gpu_gib=80.0, pp_size=4, max_batch_size=256
    )
    slot8 = d.mamba_geometry(0).bytes_per_slot
    slot7 = d.mamba_geometry(3).bytes_per_slot
    assert slot8 * 7 == slot7 * 8
    slots = 256 * 4 + 1  # max_batch_size x pp + the CUDA-graph dummy
    quota = (slots * slot7 + slots * slot8) // 2  # stage 3 fits, stage 0 does not
    plan = plan_deployment(dataclasses.replace(d, kv_quota_gib=quota / GIB))
    h = plan.hybrid
    assert not h["merged_builds"] and h["stage"] == 0 and h["need_bytes"] == slots * slot8
    assert [st["builds"] for st in h["stages"]] == [False, True, True, True]
    assert [st["num_pools"] for st in h["stages"]] == [1, 2, 2, 1]  # SSM only where no attention
    assert plan.worst() == "crash" and not plan.starts and "none/clamped" not in plan.ranges
    data = plan.to_dict()
    assert data["blocks"] is None and data["proposals"]["pr-17261"]["blocks"] == plan.blocks


def test_a_hybrid_table_has_a_row_set_per_pool_and_the_reserved_rows():
    """V2: [num_pools, max_batch_size * pp + reserved, 2, width] int32; reserved = the dummy
    slots (one more under attention DP)."""
    d = Deployment(
        model=load_model("qwen3.5-27b"),
        gpu_gib=H200,
        max_batch_size=64,
        max_seq_len=32768,
        attention_dp=True,
        tp_size=2,
    )
    plan = plan_deployment(d)
    assert plan.starts and plan.hybrid["dummies"] == 2
    width = max_blocks_per_seq(plan.clamped_max_seq_len, 32)
    assert plan.table_bytes_current == 2 * (64 * 1 + 2) * 2 * width * 4


# -- PyTorchModelEngine._infer_max_seq_len_from_config (model_engine.py at 001e670) --


@pytest.mark.parametrize(
    "rope, expected",
    [
        (None, 4096),
        ({"type": "linear", "factor": 4.0}, 16384),
        ({"rope_type": "dynamic", "factor": 1.5}, 6144),
        ({"rope_type": "llama3", "factor": 8.0}, 4096),
        ({"type": "yarn", "factor": 40}, 4096),
        ({"type": "su", "factor": 2}, 4096),
        ({"type": "longrope", "factor": 2}, 4096),
    ],
)
def test_max_seq_len_is_inferred_from_the_positions_and_the_rope_factor(rope, expected):
    assert (
        inferred_max_seq_len(_config(max_position_embeddings=4096, rope_scaling=rope)) == expected
    )
    assert inferred_max_seq_len(_config()) == 2048


def test_a_longer_max_seq_len_is_lowered_unless_allowed():
    model = load_model("llama-3.1-8b")
    d = Deployment(model=model, gpu_gib=H200, max_seq_len=1_000_000, chunked_prefill=True)
    plan = plan_deployment(d)
    assert d.configured_max_seq_len == 131072
    assert (
        "Specified self.max_seq_len=1000000 is larger than what the model can support (131072). "
        "Setting max_seq_len to 131072."
    ) in plan.notes
    assert dataclasses.replace(d, allow_long_max_model_len=True).configured_max_seq_len == 1_000_000


# -- ModelConfig's quantization reading (model_config.py at 008e0af) --


def test_the_checkpoints_quantization_sets_the_weights_and_the_kv_dtype():
    assert (
        quantization_from_config(
            {"quant_method": "fp8", "weight_block_size": [128, 128]}
        ).weights_algo
        == "FP8_BLOCK_SCALES"
    )
    assert (
        quantization_from_config(
            {"quant_method": "fp8", "activation_scheme": "static"}
        ).weights_algo
        == "FP8_BLOCK_SCALES"
    )
    dynamic = load_model("llama-3.1-8b")
    dynamic = dataclasses.replace(
        dynamic,
        quantization=quantization_from_config(
            {"quant_method": "fp8", "activation_scheme": "dynamic"}
        ),
    )
    assert dynamic.weights_bytes() is None  # the executor maps no algorithm: not derived
    with pytest.raises(ValueError, match="weights_gib is needed"):
        Deployment(model=dynamic, gpu_gib=H200)
    q = quantization_from_config({"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"})
    assert (q.weights_algo, q.kv_algo) == ("NVFP4", "FP8")
    with pytest.raises(ConfigError, match="kv_cache_quant_algo 'INT8'"):
        quantization_from_config({"quant_algo": "FP8", "kv_cache_quant_algo": "INT8"})
    deepseek = load_model("deepseek-v3")
    embed = 2 * 129280 * 7168
    # routers (58 MoE layers from first_k_dense_replace 3: 256 x 7168 + a bias of 256) and norms
    # (input, post-attention, q_a 1536, kv_a 512 a layer; the final norm) stay in bf16
    kept = embed + 61 * (2 * 7168 + 1536 + 512) + 7168 + 58 * (256 * 7168 + 256)
    assert deepseek.weights_bytes() == int(
        2 * kept + (1 + 4 / 16384) * (deepseek.parameters - kept)
    )
    assert deepseek.weights_bytes("bfloat16") == 2 * deepseek.parameters
    plan = plan_deployment(
        Deployment(model=deepseek, gpu_gib=H200, tp_size=8, chunked_prefill=True)
    )
    assert plan.starts and plan.blocks > 0  # bf16 weights would not fit: 156 GiB a rank


def test_read_config_takes_modelopts_file_first(tmp_path):
    config = dict(
        model_type="llama",
        num_hidden_layers=2,
        num_attention_heads=4,
        hidden_size=64,
        intermediate_size=128,
        vocab_size=100,
        max_position_embeddings=512,
        quantization_config={"quant_method": "fp8"},
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "hf_quant_config.json").write_text(
        json.dumps({"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}})
    )
    model = read_config(tmp_path)
    assert model.quantization.weights_algo == "NVFP4" and model.kv_dtype == "fp8"
    assert Deployment(model=model, gpu_gib=1.0).kv_geometry().dtype == "fp8"
    # a ModelOpt file without a global quant_algo leaves config.json's quantization in force
    (tmp_path / "hf_quant_config.json").write_text(
        json.dumps({"quantization": {"exclude_modules": []}})
    )
    assert read_config(tmp_path).quantization.weights_algo == "fp8 (dynamic, no weight_block_size)"


# -- the front door: _check_arguments' max_num_tokens (chunked prefill off) --


def test_max_num_tokens_refusing_most_contexts_warns_and_exits_5(capsys):
    code = main(["plan", "--model", "llama-3.1-70b", "--gpu", "h200", "--tp-size", "8"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 5 and "WARNING: max_num_tokens (8,192) refuses every prompt over 8,192" in out
    assert "Verdict: most contexts refused" in out
    assert (
        main(
            [
                "plan",
                "--model",
                "llama-3.1-70b",
                "--gpu",
                "h200",
                "--tp-size",
                "8",
                "--chunked-prefill",
            ]
        )
        == 0
    )


# -- speculative decoding: get_num_extra_kv_tokens and the draft layers on the last stage --


def test_speculative_decoding_adds_extra_tokens_and_draft_layers():
    base = Deployment(
        model=load_model("deepseek-v3"),
        gpu_gib=H200,
        tp_size=8,
        max_seq_len=32768,
        chunked_prefill=True,
        manager="v2",
        pp_size=1,
    )
    mtp = dataclasses.replace(base, spec_mode="mtp", max_draft_len=3)
    assert mtp.num_extra_kv_tokens == 2 and mtp.draft_layers == 1
    assert mtp.kv_max_seq_len == 32768 + (1 + 3) + (2 + 3)  # overlap, then speculative
    assert mtp.kv_geometry(0).num_layers == 62 and base.kv_geometry(0).num_layers == 61
    plan = plan_deployment(mtp)
    assert plan.width_fix == max_blocks_per_seq(32768 + 9, 32, 2, 3)  # the extras counted twice
    staged = dataclasses.replace(mtp, pp_size=2, tp_size=4)
    assert [staged.kv_geometry(s).num_layers for s in range(2)] == [31, 31]  # 31 + 30 + 1 draft
    with pytest.raises(ValueError, match="num_nextn_predict_layers"):
        Deployment(model=load_model("llama-3.1-8b"), gpu_gib=H200, spec_mode="mtp", max_draft_len=1)
    with pytest.raises(ValueError, match="max_draft_len"):
        Deployment(model=load_model("llama-3.1-8b"), gpu_gib=H200, max_draft_len=2)


# -- input checks --


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(ranks=3, tp_size=2), "ranks must be tp_size x pp_size = 2"),
        (dict(tp_size=3), r"tp_size must divide num_attention_heads \(64\)"),
        (dict(manager="v3"), "manager"),
        (dict(max_beam_width=0), "max_beam_width"),
        (dict(spec_mode="medusa", max_draft_len=1), "spec_mode"),
        (dict(free_gpu_memory_fraction=1.0), "below 1.0"),
    ],
)
def test_inconsistent_parallelism_and_settings_are_refused(kwargs, named):
    with pytest.raises(ValueError, match=named):
        Deployment(model=load_model("llama-3.1-70b"), gpu_gib=H200, **kwargs)
    assert (
        Deployment(
            model=load_model("llama-3.1-70b"), gpu_gib=H200, tp_size=3, attention_dp=True
        ).tp_size
        == 3
    )


def test_gpu_presets_say_where_their_totals_come_from():
    assert GPUS["h200"].source == MEASURED and GPUS["h200"].total_bytes == 150_109_880_320
    assert {GPUS[n].source for n in ("a100-80gb", "h100-80gb", "b200")} == {NVIDIA_SMI}
    assert "192 GB" in GPUS["b200"].title


def test_the_walks_examples_keep_their_figures_on_v2():
    examples = example_deployments()
    assert {n: d.resolved_manager for n, d in examples.items()} == dict.fromkeys(examples, "v2")


# -- MambaHybridCacheManagerV2's split of the quota (mamba_cache_manager_v2.py at 28295084) --


@pytest.mark.parametrize("max_batch_size, pages, slots", [(339, 16, 340), (256, 3104, 257)])
def test_a_hybrid_quota_is_split_in_granules_with_the_state_floor_first(
    max_batch_size, pages, slots
):
    """PR #17261's Qwen3.5-27B quota (24.86 GiB, bf16 state): 32 MiB granules (the quota is over
    16 GiB), 796 of them; the state pools (SSM, conv) take the granules of max_batch_size + 1
    slots, each pool rounded up on its own, and the attention pool the rest."""
    from kvlab.analysis.mamba_residency import PR_QUOTA_BYTES

    d = dataclasses.replace(example_deployments()["pr-17261"], max_batch_size=max_batch_size)
    plan = plan_deployment(d)
    mamba, granule = d.mamba_geometry(0), 32 << 20
    assert -(-PR_QUOTA_BYTES // granule) == 796
    state = sum(
        -(-(max_batch_size + 1) * mamba.num_mamba_layers * b // granule)
        for b in (mamba.ssm_bytes, mamba.conv_bytes)
    )
    assert (796 - state) * granule // (2 << 20) == pages
    stage = plan.hybrid["stages"][0]
    assert plan.starts and (stage["pages"], stage["state_slots"]) == (pages, slots)
    assert plan.blocks == pages and plan.clamped_max_seq_len == min(pages * 32, d.kv_max_seq_len)


def test_the_explanation_is_of_the_stage_it_sizes_and_counts_paged_ranks_only():
    """With MTP the last stage holds the draft layer: the per-token line and the page size are
    that stage's; a Mamba-only stage holds no pages and is no 'rank alone'."""
    mtp = plan_deployment(
        Deployment(
            model=load_model("deepseek-v3"),
            gpu_gib=H200,
            pp_size=61,
            spec_mode="mtp",
            max_draft_len=1,
            chunked_prefill=True,
        )
    )
    text = " ".join(mtp.explain().split())
    assert mtp.stage == 60 and "2 layers x 1 (K only, MLA)" in text
    assert mtp.bytes_per_block == 32 * mtp.bytes_per_token
    nemotron = plan_deployment(
        Deployment(
            model=load_model("nemotron-nano-9b-v2"),
            gpu_gib=GPUS["h100-80gb"].gib,
            pp_size=4,
            max_batch_size=64,
        )
    )
    assert nemotron.paged == (False, True, True, False)
    assert "ranks alone" not in nemotron.explain()  # stages 1 and 2 hold the same pool


def test_a_plan_where_nothing_fits_says_so_and_exits_5():
    plan = plan_deployment(
        Deployment(
            model=load_model("llama-3.1-8b"), gpu_gib=17.0, max_beam_width=256, chunked_prefill=True
        )
    )
    assert plan.starts and plan.longest() == 0 and plan.exit_code == 5
    assert plan.verdict.startswith("every context refused")
    low = plan_deployment(
        Deployment(model=load_model("llama-3.1-8b"), gpu_gib=1.0)
    )  # 15 GiB weights
    assert (
        low.quotas == (0,)
        and low.blocks == 0
        and low.to_dict()["kv_free_bytes_at_construction"] == [0]
    )
