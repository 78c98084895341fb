"""kvlab.analysis.models: each preset's stated geometry is what its published config fields give,
read by kvlab's rules and by transformers' configuration classes; configs kvlab cannot plan are
refused by name."""

from __future__ import annotations

import json
import math
import re

import pytest

from kvlab.analysis.models import (
    ConfigError,
    ModelGeometry,
    geometry_from_config,
    load_model,
    load_preset,
    model_names,
    read_config,
)
from kvlab.core.geometry import qwen3_5_27b_mamba

PRESETS = model_names()


def test_the_presets_the_issue_names_are_shipped():
    assert {
        "llama-3.1-8b",
        "llama-3.1-70b",
        "qwen3.5-27b",
        "deepseek-v3",
        "mistral-7b-v0.1",
        "qwen3-235b-a22b",
    } <= set(PRESETS)
    for name in PRESETS:
        preset = load_preset(name)
        assert preset["source"] and preset["parameters"] > 0


@pytest.mark.parametrize("name", PRESETS)
def test_a_preset_states_what_its_config_gives(name):
    preset = load_preset(name)
    assert load_model(name).facts() == preset["geometry"]


@pytest.mark.parametrize("name", PRESETS)
def test_transformers_reads_the_same_geometry_from_the_config(name, tmp_path):
    preset = load_preset(name)
    (tmp_path / "config.json").write_text(json.dumps(preset["config"]))
    assert read_config(tmp_path).facts() == preset["geometry"]  # a folder
    assert read_config(tmp_path / "config.json").facts() == preset["geometry"]  # the file


def test_the_stated_bytes_per_token_are_the_hand_arithmetic():
    """bf16, all attention layers, one rank: layers x kv_factor x kv heads x head_dim x 2 B."""
    assert load_model("llama-3.1-8b").bytes_per_token_bf16 == 32 * 2 * 8 * 128 * 2 == 131072
    assert load_model("llama-3.1-70b").bytes_per_token_bf16 == 80 * 2 * 8 * 128 * 2
    assert load_model("deepseek-v3").bytes_per_token_bf16 == 61 * 1 * 1 * (512 + 64) * 2 == 70272
    assert load_model("qwen3.5-27b").bytes_per_token_bf16 == 16 * 2 * 4 * 256 * 2
    assert load_model("qwen3-235b-a22b").bytes_per_token_bf16 == 94 * 2 * 4 * 128 * 2 == 192512


def test_mla_is_one_unsplit_k_only_head():
    geo = load_model("deepseek-v3").kv_geometry(tp_size=8)
    assert (geo.kv_factor, geo.num_kv_heads, geo.head_dim, geo.kv_heads_per_rank) == (1, 1, 576, 1)


def test_the_hybrid_state_is_notebook_05s():
    model = load_model("qwen3.5-27b")
    assert (model.attention_layers, model.linear_layers, model.mamba_ssm_dtype) == (
        16,
        48,
        "float32",
    )
    for dtype in ("bfloat16", "float32"):
        assert model.mamba_geometry(ssm_dtype=dtype) == qwen3_5_27b_mamba(ssm_dtype=dtype)
    assert model.mamba_geometry() == qwen3_5_27b_mamba("float32")  # the config's dtype


def test_sliding_window_layers_are_counted_and_the_simplification_said():
    model = load_model("mistral-7b-v0.1")
    assert (model.sliding_layers, model.sliding_window) == (32, 4096)
    assert any("upper bound" in note for note in model.notes)
    assert not load_model("llama-3.1-8b").notes


def test_pipeline_stages_and_tensor_parallelism_split_the_cache():
    model = load_model("llama-3.1-70b")
    geo = model.kv_geometry(tp_size=16, pp_size=3)
    assert geo.num_layers == 27  # ceil(80 / 3): the largest stage
    assert geo.kv_heads_per_rank == 1  # ceil(8 / 16)
    assert model.kv_geometry(tp_size=16, attention_dp=True).kv_heads_per_rank == 8


def _config(**fields):
    from types import SimpleNamespace

    return SimpleNamespace(**fields)


@pytest.mark.parametrize(
    "fields, words",
    [
        (
            dict(model_type="x", num_hidden_layers=0),
            "num_hidden_layers must be an int in [1, 4096]",
        ),
        (
            dict(
                model_type="x",
                num_hidden_layers=2,
                layer_types=["full_attention", "chunked_attention"],
                num_attention_heads=2,
            ),
            "chunked_attention",
        ),
        (
            dict(
                model_type="x",
                num_hidden_layers=3,
                layer_types=["full_attention"],
                num_attention_heads=2,
            ),
            "layer_types has 1 entries for num_hidden_layers=3",
        ),
        (
            dict(model_type="mamba2", num_hidden_layers=4, layer_types=["linear_attention"] * 4),
            "mamba2 has no attention layer",
        ),
        (
            dict(
                model_type="x",
                num_hidden_layers=4,
                full_attention_interval=2,
                num_attention_heads=2,
                head_dim=8,
            ),
            "linear_num_value_heads must be an int in",
        ),
        (
            dict(model_type="x", num_hidden_layers=2, num_attention_heads=2),
            "head_dim defaults to hidden_size // num_attention_heads",
        ),
        (
            dict(model_type="dsv", num_hidden_layers=2, kv_lora_rank=512),
            "qk_rope_head_dim must be an int in",
        ),
        (
            dict(
                model_type="x",
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=0,
                head_dim=8,
            ),
            "num_key_value_heads must be an int in",
        ),
        (
            dict(model_type="x", num_hidden_layers=10**9),
            "num_hidden_layers must be an int in [1, 4096]",
        ),
        (
            dict(
                model_type="x",
                num_hidden_layers=2,
                layer_types=5,
                num_attention_heads=2,
                head_dim=8,
            ),
            "layer_types must be a list of layer kinds",
        ),
        (
            dict(
                model_type="x",
                num_hidden_layers=8,
                full_attention_interval=-4,
                num_attention_heads=2,
                head_dim=8,
            ),
            "full_attention_interval must be an int in [1, 8]",
        ),
        (
            dict(model_type="nemotron_h", num_hidden_layers=4, hybrid_override_pattern="M*"),
            "hybrid_override_pattern must be num_hidden_layers (4) characters",
        ),
        (
            dict(model_type="nemotron_h", num_hidden_layers=2, hybrid_override_pattern="MX"),
            "of M, *, - and E",
        ),
        # MLA's fields, and the MTP layers: stated but bad is named, not taken as "no MLA" or 0
        (
            dict(model_type="dsv", num_hidden_layers=2, kv_lora_rank=None, qk_rope_head_dim=64),
            "kv_lora_rank must be an int in [1, 8192] (MLA caches kv_lora_rank + qk_rope_head_dim), got None",
        ),
        (
            dict(model_type="dsv", num_hidden_layers=2, kv_lora_rank="512", qk_rope_head_dim=64),
            "kv_lora_rank must be an int in [1, 8192]",
        ),
        (
            dict(model_type="dsv", num_hidden_layers=2, kv_lora_rank=0, qk_rope_head_dim=64),
            "kv_lora_rank must be an int in [1, 8192]",
        ),
        (
            dict(model_type="dsv", num_hidden_layers=2, kv_lora_rank=1 << 20, qk_rope_head_dim=64),
            "kv_lora_rank must be an int in [1, 8192]",
        ),
        (
            dict(
                model_type="dsv",
                num_hidden_layers=2,
                kv_lora_rank=512,
                qk_rope_head_dim=64,
                num_nextn_predict_layers=-1,
            ),
            "num_nextn_predict_layers must be an int in [0, 4096]",
        ),
        (
            dict(
                model_type="dsv",
                num_hidden_layers=2,
                kv_lora_rank=512,
                qk_rope_head_dim=64,
                num_nextn_predict_layers="1",
            ),
            "num_nextn_predict_layers must be an int in [0, 4096]",
        ),
        (
            dict(
                model_type="x",
                num_hidden_layers=2,
                num_attention_heads=4,
                head_dim=8,
                num_nextn_predict_layers=True,
            ),
            "num_nextn_predict_layers must be an int in [0, 4096]",
        ),
        (
            dict(model_type="gemma3", text_config=[{"num_hidden_layers": 2}]),
            "text_config must be an object (the language model's fields), got list",
        ),
        (
            dict(model_type="x", num_hidden_layers=2, num_attention_heads=4, head_dim=0),
            "head_dim must be an int in [1, 16384]",
        ),
        (
            dict(
                model_type="x",
                num_hidden_layers=2,
                num_attention_heads=32,
                num_key_value_heads=7,
                head_dim=8,
            ),
            "num_key_value_heads must divide num_attention_heads (32)",
        ),
    ],
)
def test_a_config_kvlab_cannot_plan_is_refused_naming_the_field(fields, words):
    with pytest.raises(ConfigError, match="cfg.json") as exc:
        geometry_from_config(_config(**fields), name="m", source="s", where="cfg.json")
    assert words in str(exc.value)


@pytest.mark.parametrize(
    "config, words",
    [
        (
            {"model_type": "llama", "num_hidden_layers": 10**9},
            "num_hidden_layers must be an int in [1, 4096]",
        ),
        (
            {"model_type": "gemma3", "text_config": {"num_hidden_layers": 10**12}},
            "num_hidden_layers",
        ),
        (
            {
                "model_type": "nemotron_h",
                "num_hidden_layers": 8,
                "hybrid_override_pattern": "M" * 5000,
            },
            "hybrid_override_pattern must have at most 4096 entries",
        ),
        (
            {"model_type": "gemma3", "text_config": [{"num_hidden_layers": 2}]},
            "text_config must be an object (the language model's fields), got list",
        ),
        (
            {"model_type": "deepseek_v3", "num_hidden_layers": 2, "kv_lora_rank": -512},
            "kv_lora_rank must be an int in [1, 8192]",
        ),
        (
            {"model_type": "deepseek_v3", "num_hidden_layers": 2, "num_nextn_predict_layers": -1},
            "num_nextn_predict_layers must be an int in [0, 4096]",
        ),
    ],
)
def test_a_huge_config_is_refused_before_transformers_builds_it(config, words, tmp_path):
    """Bounds from the raw fields, at once: transformers' config classes would otherwise build a
    list per layer, and the parameter count a model on the meta device."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=re.escape(words)):
        read_config(tmp_path)


def test_an_mla_config_reads_its_rank_and_draft_layers():
    """kv_lora_rank + qk_rope_head_dim is MLA's one head; num_nextn_predict_layers 0 is no MTP."""
    geo = geometry_from_config(
        _config(
            model_type="dsv",
            num_hidden_layers=2,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            num_nextn_predict_layers=0,
        ),
        name="m",
        source="s",
    )
    assert (geo.head_dim, geo.num_kv_heads, geo.kv_factor, geo.draft_layers) == (576, 1, 1, 0)


def _geometry(**fields):
    """A geometry built by hand: Llama-3.1-8B's fields, ``fields`` changed."""
    base = dict(
        name="m",
        source="s",
        architecture="llama",
        num_layers=32,
        attention_layers=32,
        num_kv_heads=8,
        head_dim=128,
        num_attention_heads=32,
    )
    return ModelGeometry(**{**base, **fields})


def test_a_geometry_built_by_hand_with_good_fields_plans():
    """MLA's one KV head need not divide the query heads' count: kv heads are checked against
    the heads for K and V caches only."""
    geo = _geometry()
    assert geo.kv_geometry().bytes_per_token == 32 * 2 * 8 * 128 * 2
    assert (
        _geometry(num_kv_heads=1, head_dim=576, kv_factor=1, num_attention_heads=128).kv_factor == 1
    )


def test_upstream_defaults_fill_what_a_config_leaves_out():
    """num_key_value_heads defaults to num_attention_heads, head_dim to hidden // heads, and a
    full_attention_interval makes every interval-th layer full attention (TensorRT-LLM's rules)."""
    geo = geometry_from_config(
        _config(
            model_type="x",
            num_hidden_layers=8,
            num_attention_heads=4,
            hidden_size=256,
            full_attention_interval=4,
            linear_num_value_heads=4,
            linear_value_head_dim=8,
            linear_key_head_dim=8,
            linear_num_key_heads=2,
            linear_conv_kernel_dim=4,
            torch_dtype="float16",
        ),
        name="m",
        source="s",
    )
    assert (geo.num_kv_heads, geo.head_dim, geo.attention_layers, geo.linear_layers) == (
        4,
        64,
        2,
        6,
    )
    assert geo.dtype == "float16" and geo.mamba["d_conv"] == 4


def test_read_config_counts_the_parameters_of_a_config_without_them(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            dict(
                model_type="llama",
                num_hidden_layers=2,
                num_attention_heads=4,
                hidden_size=64,
                intermediate_size=128,
                vocab_size=100,
                max_position_embeddings=512,
            )
        )
    )
    model = read_config(tmp_path)
    # embeddings + lm_head (100 x 64 each), 2 layers of attention (4 x 64 x 64) and MLP
    # (3 x 64 x 128) and two norms, the final norm
    assert model.parameters == 2 * 100 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64


def test_read_config_refuses_what_is_not_a_config(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"config.json: not JSON \(Expecting property name"):
        read_config(tmp_path)


#: Small configs of the families the presets do not cover: Nemotron-H's pattern, Gemma 3's and
#: gpt-oss's interleaved sliding-window layers.
OTHER_FAMILIES = {
    "nemotron_h": (
        dict(
            model_type="nemotron_h",
            num_hidden_layers=8,
            hybrid_override_pattern="M-M*-M-*",
            num_attention_heads=8,
            num_key_value_heads=2,
            head_dim=128,
            hidden_size=1024,
            mamba_num_heads=16,
            mamba_head_dim=64,
            ssm_state_size=128,
            n_groups=8,
            conv_kernel=4,
            vocab_size=1000,
        ),
        (2, 3, 0),
    ),
    "gemma3_text": (
        dict(
            model_type="gemma3_text",
            num_hidden_layers=6,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=256,
            hidden_size=1024,
            sliding_window=1024,
            vocab_size=1000,
            intermediate_size=2048,
        ),
        (6, 0, 5),
    ),
    "gpt_oss": (
        dict(
            model_type="gpt_oss",
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=2,
            head_dim=64,
            hidden_size=512,
            sliding_window=128,
            vocab_size=1000,
            num_local_experts=4,
            intermediate_size=512,
        ),
        (4, 0, 2),
    ),
}


@pytest.mark.parametrize("family", [*PRESETS, *OTHER_FAMILIES])
def test_kvlab_plan_runs_on_a_config_of_each_supported_family(family, tmp_path, capsys):
    """transformers reads the config (the layer kinds as the family defines them), kvlab plans it."""
    from kvlab.cli import main

    config, layers = (
        (load_preset(family)["config"], None) if family in PRESETS else OTHER_FAMILIES[family]
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    if layers is not None:
        model = read_config(tmp_path)
        assert (model.attention_layers, model.linear_layers, model.sliding_layers) == layers
        assert model.parameters > 0  # counted on the meta device
    code = main(
        [
            "plan",
            "--config",
            str(tmp_path),
            "--gpu",
            "b200",
            "--tp-size",
            "8",
            "--max-seq-len",
            "32768",
            "--max-batch-size",
            "64",
            "--json",
        ]
    )
    plan = json.loads(capsys.readouterr().out)
    assert code == plan["exit_code"] in (0, 3, 4, 5) and plan["bytes_per_token"] > 0
    assert plan["manager"] == load_model_or_read(family, tmp_path).preferred_manager


def load_model_or_read(family, tmp_path):
    return load_model(family) if family in PRESETS else read_config(tmp_path)


def _mutated(preset, path, value):
    config = json.loads(json.dumps(load_preset(preset)["config"]))
    part = config
    for key in path[:-1]:
        part = part[key]
    part[path[-1]] = value
    return config


@pytest.mark.parametrize(
    "preset, path, value, named",
    [
        ("llama-3.1-8b", ("architectures",), 0, "architectures must be a non-empty list"),
        ("llama-3.1-8b", ("architectures",), "x", "architectures must be a non-empty list"),
        ("llama-3.1-8b", ("architectures",), [], "architectures must be a non-empty list"),
        ("llama-3.1-8b", ("architectures", 0), 7, "architectures[0] must be a non-empty string"),
        (
            "llama-3.1-8b",
            ("rope_scaling", "original_max_position_embeddings"),
            -1,
            "rope_scaling.original_max_position_embeddings must be an int in [1, 1073741824]",
        ),
        (
            "llama-3.1-8b",
            ("rope_scaling", "original_max_position_embeddings"),
            math.nan,
            "rope_scaling.original_max_position_embeddings must be an int",
        ),
        (
            "llama-3.1-8b",
            ("rope_scaling", "original_max_position_embeddings"),
            True,
            "rope_scaling.original_max_position_embeddings must be an int",
        ),
        (
            "llama-3.1-8b",
            ("rope_scaling", "low_freq_factor"),
            math.inf,
            "rope_scaling.low_freq_factor must be in (0.0, inf)",
        ),
        (
            "llama-3.1-8b",
            ("rope_scaling", "high_freq_factor"),
            math.nan,
            "rope_scaling.high_freq_factor must be in (0.0, inf)",
        ),
        ("llama-3.1-8b", ("rope_theta",), True, "rope_theta must be a number in (0.0, inf)"),
        (
            "qwen3.5-27b",
            ("text_config", "mamba_ssm_dtype"),
            math.inf,
            "mamba_ssm_dtype must be a dtype's name",
        ),
        (
            "qwen3.5-27b",
            ("text_config", "mamba_ssm_dtype"),
            [],
            "mamba_ssm_dtype must be a dtype's name",
        ),
        ("qwen3.5-27b", ("text_config", "model_type"), "", "model_type must be a non-empty string"),
        ("qwen3.5-27b", ("text_config", "model_type"), [], "model_type must be a non-empty string"),
    ],
)
def test_a_malformed_field_of_a_real_config_is_refused_naming_it(
    preset, path, value, named, tmp_path
):
    """kvlab finds the model by model_type; the fields around it are checked for what they are."""
    (tmp_path / "config.json").write_text(json.dumps(_mutated(preset, path, value)))
    with pytest.raises(ConfigError, match=re.escape(named)):
        read_config(tmp_path)


def test_read_config_takes_a_path():
    for bad in (math.inf, None, 3):
        with pytest.raises(TypeError, match="^path must be a str or PathLike"):
            read_config(bad)
    with pytest.raises(ConfigError, match=r"^config: no config.json at x \(path must be"):
        read_config("x")
