"""A real model's cache geometry, from its Hugging Face ``config.json`` or a shipped preset.

What TensorRT-LLM's executor reads from a model's config to build its caches
(``tensorrt_llm/_torch/pyexecutor/_util.py``, ``KvCacheCreator._create_kv_cache_manager``, read
at commit d8ae02c, and its later branch for Qwen3-Next-style hybrids), in that order:

- MLA (a config with ``kv_lora_rank``): a K-only cache (``CacheType.SELFKONLY``, kv_factor 1) of
  one head of ``kv_lora_rank + qk_rope_head_dim`` per layer;
- hybrids: linear-attention layers (``layer_types``, or every layer but each
  ``full_attention_interval``-th) keep a fixed recurrent-state slot per sequence, mapped as
  ``d_state = linear_key_head_dim``, ``d_conv = linear_conv_kernel_dim``, ``mamba_num_heads =
  linear_num_value_heads``, ``n_groups = linear_num_key_heads``, ``mamba_head_dim =
  linear_value_head_dim``; Nemotron-H's ``hybrid_override_pattern`` ("M" Mamba, "*" attention);
- otherwise ``num_key_value_heads`` (default ``num_attention_heads``) heads of ``head_dim``
  (default ``hidden_size // num_attention_heads``) on every layer.

Sliding-window layers are counted and their window kept, but planned as full-attention layers:
TensorRT-LLM keeps only the window for them when ``max_attention_window`` is set, which a config
does not do by itself, so kvlab's pages for them are an upper bound (:attr:`ModelGeometry.notes`
says so for every such model). A config whose architecture is none of these is refused, naming
what is missing; nothing is guessed.

:func:`read_config` reads a local folder or file with transformers' configuration classes and no
network (the optional extra ``kvlab[models]``); :func:`load_model` reads a preset from
``data/models/``: the geometry facts and the published config fields they come from, with their
source (tests/analysis/test_models.py checks one against the other).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Optional, Tuple

from kvlab.core.checks import check_choice
from kvlab.core.geometry import STATE_DTYPES, KVGeometry, MambaGeometry
from kvlab.core.paths import DATA_DIR

MODELS_DIR = DATA_DIR / "models"
#: The config.json field a model's weights dtype is in (``torch_dtype``; ``dtype`` since
#: transformers 5), mapped to kvlab's dtype names.
_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
           "torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


class ConfigError(ValueError):
    """A config kvlab cannot plan for: the message names the file, the field and why."""


@dataclass(frozen=True)
class ModelGeometry:
    """What a model puts in the KV pool and the recurrent-state slots, per token and per
    sequence, before any parallelism."""

    name: str
    source: str
    architecture: str
    num_layers: int
    attention_layers: int  # layers with a KV cache (full and sliding)
    num_kv_heads: int
    head_dim: int
    kv_factor: int = 2  # 1: MLA, K only
    sliding_layers: int = 0
    sliding_window: Optional[int] = None
    linear_layers: int = 0  # recurrent-state (Mamba / linear-attention) layers
    mamba: Optional[Dict[str, int]] = None  # MambaGeometry's fields but layers, tp and dtypes
    mamba_ssm_dtype: Optional[str] = None
    max_position_embeddings: Optional[int] = None
    dtype: str = "bfloat16"  # the weights' dtype, the KV cache's default
    parameters: Optional[int] = None
    notes: Tuple[str, ...] = field(default_factory=tuple)

    def kv_geometry(self, kv_dtype: Optional[str] = None, tokens_per_block: int = 32,
                    tp_size: int = 1, pp_size: int = 1, attention_dp: bool = False) -> KVGeometry:
        """One rank's KV geometry: its share of the attention layers (the largest pipeline
        stage's, ``ceil(layers / pp_size)``) and of the heads (``ceil(heads / tp)``, not split
        under attention DP; MLA's one head is never split)."""
        layers = -(-self.attention_layers // pp_size)
        return KVGeometry(num_layers=layers, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                          dtype=kv_dtype or self.dtype, tokens_per_block=tokens_per_block,
                          tp_size=1 if self.kv_factor == 1 else tp_size, kv_factor=self.kv_factor,
                          attention_dp=attention_dp)

    def mamba_geometry(self, tp_size: int = 1, pp_size: int = 1,
                       ssm_dtype: Optional[str] = None) -> Optional[MambaGeometry]:
        """One rank's recurrent-state geometry (None for attention-only models): its pipeline
        stage's share of the linear layers; conv state in the weights' dtype, SSM state in
        ``ssm_dtype`` (default: the config's ``mamba_ssm_dtype``, else the weights' dtype)."""
        if not self.linear_layers:
            return None
        conv = self.dtype if self.dtype in STATE_DTYPES else "bfloat16"
        return MambaGeometry(num_mamba_layers=-(-self.linear_layers // pp_size), **self.mamba,
                             conv_dtype=conv, ssm_dtype=ssm_dtype or self.mamba_ssm_dtype or conv,
                             tp_size=tp_size)

    @property
    def bytes_per_token_bf16(self) -> int:
        """All attention layers, one token, one rank, bf16: the number a preset states."""
        return self.kv_geometry("bfloat16").bytes_per_token

    def facts(self) -> Dict[str, Any]:
        """The geometry as a preset's ``geometry`` block states it."""
        facts = dict(num_layers=self.num_layers, attention_layers=self.attention_layers,
                     sliding_layers=self.sliding_layers, sliding_window=self.sliding_window,
                     num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                     kv_factor=self.kv_factor, linear_layers=self.linear_layers,
                     max_position_embeddings=self.max_position_embeddings, dtype=self.dtype,
                     bytes_per_token_bf16=self.bytes_per_token_bf16)
        if self.mamba:
            facts.update(self.mamba, mamba_ssm_dtype=self.mamba_ssm_dtype)
        return facts


def _get(config, name: str, default=None):
    return getattr(config, name, default)


def _require(config, name: str, where: str, why: str) -> int:
    value = _get(config, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: {name} must be a positive int ({why}), got {value!r}")
    return value


def geometry_from_config(config, *, name: str, source: str, where: str = "config",
                         parameters: Optional[int] = None) -> ModelGeometry:
    """The geometry of ``config``: a transformers ``PretrainedConfig`` or any object with a
    config.json's fields as attributes (module docstring for the rules). ``where`` names the
    file in errors."""
    top = config
    if callable(_get(config, "get_text_config")):
        config = config.get_text_config()
    elif isinstance(_get(config, "text_config"), SimpleNamespace):
        config = config.text_config
    architecture = str(_get(config, "model_type") or _get(top, "model_type") or "unknown")
    layers = _require(config, "num_hidden_layers", where, "the decoder's layer count")
    dtype_field = _get(config, "dtype") or _get(config, "torch_dtype") or _get(top, "torch_dtype")
    dtype = _DTYPES.get(str(dtype_field), "bfloat16")
    notes = [] if str(dtype_field) in _DTYPES else [
        f"the config gives no float weights dtype ({dtype_field!r}); bfloat16 assumed for the KV cache"]
    common = dict(name=name, source=source, architecture=architecture, num_layers=layers,
                  max_position_embeddings=_get(config, "max_position_embeddings"), dtype=dtype,
                  parameters=parameters)

    if _get(config, "kv_lora_rank"):  # MLA
        rope = _require(config, "qk_rope_head_dim", where, "MLA caches kv_lora_rank + qk_rope_head_dim")
        return ModelGeometry(**common, attention_layers=layers, num_kv_heads=1,
                             head_dim=config.kv_lora_rank + rope, kv_factor=1, notes=tuple(notes))

    pattern = _get(config, "hybrid_override_pattern")
    layer_types = _get(config, "layer_types")
    interval = _get(config, "full_attention_interval")
    if layer_types is None and interval:
        layer_types = ["full_attention" if i % interval == interval - 1 else "linear_attention"
                       for i in range(layers)]
    fields = {}  # MambaGeometry field -> (config field, what it is)
    if pattern:  # Nemotron-H
        attention, linear, sliding = pattern.count("*"), pattern.count("M"), 0
        fields = dict(mamba_num_heads=("mamba_num_heads", "Mamba heads"),
                      mamba_head_dim=("mamba_head_dim", "Mamba head size"),
                      d_state=("ssm_state_size", "the SSM state size"),
                      n_groups=("n_groups", "Mamba groups"), d_conv=("conv_kernel", "the conv kernel"))
    elif layer_types is not None:
        known = {"full_attention", "sliding_attention", "linear_attention"}
        unknown = sorted(set(layer_types) - known)
        if unknown:
            raise ConfigError(f"{where}: layer_types holds {unknown}, which kvlab cannot plan "
                              f"(it knows {sorted(known)})")
        if len(layer_types) != layers:
            raise ConfigError(f"{where}: layer_types has {len(layer_types)} entries for "
                              f"num_hidden_layers={layers}")
        sliding = layer_types.count("sliding_attention")
        attention = layer_types.count("full_attention") + sliding
        linear = layer_types.count("linear_attention")
        fields = dict(mamba_num_heads=("linear_num_value_heads", "linear-attention value heads"),
                      mamba_head_dim=("linear_value_head_dim", "linear-attention value head size"),
                      d_state=("linear_key_head_dim", "linear-attention key head size"),
                      n_groups=("linear_num_key_heads", "linear-attention key heads"),
                      d_conv=("linear_conv_kernel_dim", "the conv kernel"))
    else:
        window = _get(config, "sliding_window")
        uses_window = window and _get(config, "use_sliding_window", True) is not False
        attention, linear, sliding = layers, 0, (layers if uses_window else 0)
    if attention < 1:
        raise ConfigError(f"{where}: {architecture} has no attention layer, so it has no KV pool "
                          "to plan (kvlab plans paged attention caches)")
    mamba = ({key: _require(config, name, where, what) for key, (name, what) in fields.items()}
             if linear else None)
    heads = _require(config, "num_attention_heads", where, "attention heads")
    kv_heads = _get(config, "num_key_value_heads") or heads
    head_dim = _get(config, "head_dim")
    if not isinstance(head_dim, int) or isinstance(head_dim, bool):
        hidden = _require(config, "hidden_size", where, "head_dim defaults to hidden_size // num_attention_heads")
        head_dim = hidden // heads
    window = _get(config, "sliding_window") if sliding else None
    if sliding:
        notes.append(f"{sliding} sliding-window layer(s) (window {window}) planned as full "
                     "attention: an upper bound (TensorRT-LLM keeps only the window when "
                     "kv_cache_config.max_attention_window is set)")
    ssm_dtype = _get(config, "mamba_ssm_dtype") if mamba else None
    if mamba and ssm_dtype not in STATE_DTYPES:
        notes.append(f"the config gives no SSM state dtype ({ssm_dtype!r}); the weights' dtype is used")
        ssm_dtype = None
    return ModelGeometry(**common, attention_layers=attention, num_kv_heads=kv_heads,
                         head_dim=head_dim, sliding_layers=sliding, sliding_window=window,
                         linear_layers=linear if mamba else 0, mamba=mamba,
                         mamba_ssm_dtype=ssm_dtype, notes=tuple(notes))


def _namespace(value):
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _namespace(v) for k, v in value.items()})
    return value


def read_config(path) -> ModelGeometry:
    """A model's geometry from a local Hugging Face ``config.json`` (a file, or a folder holding
    one), read by transformers' configuration classes with no network. ImportError names the
    extra to install; ConfigError says what transformers or kvlab could not read."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"config: no config.json at {path}")
    try:
        from transformers import AutoConfig
    except ImportError as exc:
        raise ImportError("reading a config.json needs transformers: pip install 'kvlab[models]'") from exc
    import transformers

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # its deprecation notes are not the user's concern
    try:
        config = AutoConfig.from_pretrained(str(file.parent if file.name == "config.json" else file),
                                            local_files_only=True)
        geometry = geometry_from_config(config, name=file.parent.name or file.stem,
                                        source=f"{file} (read by transformers)", where=str(file))
        counted = count_parameters(config)
    except ConfigError:
        raise
    except Exception as exc:  # any failure of a third-party parser on an untrusted file
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()][:2]
        raise ConfigError(f"{file}: transformers cannot read it: {type(exc).__name__}: "
                          f"{' '.join(lines)[:300]}") from None
    finally:
        transformers.logging.set_verbosity(verbosity)
    if isinstance(counted, str):
        return dataclasses.replace(geometry, notes=geometry.notes + (counted,))
    return dataclasses.replace(geometry, parameters=counted)


def count_parameters(config):
    """The model's parameter count, by transformers building it on the meta device (no memory,
    no weights); a note saying why when it cannot."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # an architecture transformers cannot build as a causal LM
        return (f"the parameter count could not be derived ({type(exc).__name__}): "
                "give the weights per rank")
    return sum(p.numel() for p in model.parameters())


def model_names() -> Tuple[str, ...]:
    """The presets in data/models/."""
    return tuple(sorted(p.stem for p in MODELS_DIR.glob("*.json")))


def load_preset(name: str) -> Dict[str, Any]:
    """A preset's file: name, title, source, parameters, geometry (facts), config (fields)."""
    check_choice("model", name, model_names())
    return json.loads((MODELS_DIR / f"{name}.json").read_text(encoding="utf-8"))


def load_model(name: str) -> ModelGeometry:
    """A preset's geometry, read from its published config fields by the same rules as
    :func:`read_config` (no transformers needed)."""
    preset = load_preset(name)
    return geometry_from_config(_namespace(preset["config"]), name=preset["name"],
                                source=preset["source"], where=f"data/models/{name}.json",
                                parameters=preset.get("parameters"))


__all__ = ["ConfigError", "MODELS_DIR", "ModelGeometry", "count_parameters", "geometry_from_config", "load_model",
           "load_preset", "model_names", "read_config"]
