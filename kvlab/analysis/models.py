"""A real model's cache geometry from its Hugging Face ``config.json`` or a data/models preset,
as TensorRT-LLM's executor reads it (``KvCacheCreator._create_kv_cache_manager``, _util.py at
d8ae02c): MLA caches one K-only head of ``kv_lora_rank + qk_rope_head_dim``; hybrids keep a
recurrent-state slot per sequence; otherwise ``num_key_value_heads`` heads of ``head_dim``.
[kvlab] Sliding-window layers are planned as full attention (the notes say so).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kvlab.analysis.model_config_checks import (
    FIELD_BOUNDS,
    MAX_CONFIG_BYTES,
    MAX_LAYERS,
    ConfigError,
    check_bounded,
    check_kv_groups,
    check_pattern,
    check_quantization_block,
    check_raw_config,
    parse_config_json,
    require_field,
)
from kvlab.core.checks import check_choice, check_instance
from kvlab.core.files import FileFormatError, load_json, read_text
from kvlab.core.geometry import DTYPE_BYTES, STATE_DTYPES, KVGeometry, MambaGeometry
from kvlab.core.paths import DATA_DIR

MODELS_DIR = DATA_DIR / "models"
#: One character per decoder layer in :attr:`ModelGeometry.layout`.
ATTENTION, SLIDING, RECURRENT, NO_CACHE = "A", "S", "M", "-"
#: Model types whose model class declares the V2 KV cache manager
#: (``get_preferred_kv_cache_manager_version``, llm_args.py at 0004396720); the rest get V1.
V2_ARCHITECTURES = frozenset(
    {"nemotron_h", "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}
)
#: Rope types whose factor does not lengthen the inferred max_seq_len, and the length inferred
#: without max_position_embeddings (``_infer_max_seq_len_from_config``, model_engine.py at 001e670).
ROPE_TYPES_NOT_SCALED = ("su", "longrope", "llama3", "yarn")
DEFAULT_MAX_POSITION_EMBEDDINGS = 2048
#: Bytes per quantized weight, scales included: FP8 per tensor; FP8 with an fp32 scale per
#: 128 x 128 block; NVFP4, 4 bits with an fp8 scale per 16 weights.
QUANT_WEIGHT_BYTES = {
    "FP8": Fraction(1),
    "FP8_BLOCK_SCALES": 1 + Fraction(4, 128 * 128),
    "NVFP4": Fraction(1, 2) + Fraction(1, 16),
}
KV_QUANT_DTYPES = {"FP8": "fp8", "NVFP4": "nvfp4"}  # kv_cache_quant_algo -> kvlab's KV dtype
#: The weights' dtype as config.json names it (``torch_dtype``; ``dtype`` since transformers 5).
_DTYPES = {f"{p}{d}": d for d in ("float32", "float16", "bfloat16") for p in ("", "torch.")}
#: Each hybrid family's recurrent-state fields: MambaGeometry field -> (config field, what it is).
NEMOTRON_STATE_FIELDS = dict(
    mamba_num_heads=("mamba_num_heads", "Mamba heads"),
    mamba_head_dim=("mamba_head_dim", "Mamba head size"),
    d_state=("ssm_state_size", "the SSM state size"),
    n_groups=("n_groups", "Mamba groups"),
    d_conv=("conv_kernel", "the conv kernel"),
)
LINEAR_ATTENTION_STATE_FIELDS = dict(
    mamba_num_heads=("linear_num_value_heads", "linear-attention value heads"),
    mamba_head_dim=("linear_value_head_dim", "linear-attention value head size"),
    d_state=("linear_key_head_dim", "linear-attention key head size"),
    n_groups=("linear_num_key_heads", "linear-attention key heads"),
    d_conv=("linear_conv_kernel_dim", "the conv kernel"),
)
LAYER_KINDS = {
    "full_attention": ATTENTION,
    "sliding_attention": SLIDING,
    "linear_attention": RECURRENT,
}
#: The fields of a preset's ``geometry`` block (:meth:`ModelGeometry.facts`).
FACTS = (
    "num_layers",
    "attention_layers",
    "sliding_layers",
    "sliding_window",
    "num_kv_heads",
    "head_dim",
    "kv_factor",
    "linear_layers",
    "max_position_embeddings",
    "dtype",
    "bytes_per_token_bf16",
)


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's quantization (``load_hf_quant_config``, model_config.py at 008e0af): the
    weights' algorithm, the KV cache's, and the file they were read from."""

    weights_algo: str | None
    kv_algo: str | None
    source: str


@dataclass(frozen=True)
class ModelGeometry:
    """What a model puts in the KV pool and the recurrent-state slots, before parallelism.
    [kvlab] Built by :func:`geometry_from_config`, which checks every field."""

    name: str
    source: str
    architecture: str
    num_layers: int
    attention_layers: int  # layers with a KV cache (full and sliding)
    num_kv_heads: int
    head_dim: int
    kv_factor: int = 2  # 1: MLA, K only
    sliding_layers: int = 0
    sliding_window: int | None = None
    linear_layers: int = 0  # recurrent-state (Mamba / linear-attention) layers
    mamba: dict[str, int] | None = None  # MambaGeometry's fields but layers, tp and dtypes
    mamba_ssm_dtype: str | None = None
    max_position_embeddings: int | None = None
    dtype: str = "bfloat16"  # the weights' dtype, the KV cache's default
    parameters: int | None = None
    notes: tuple[str, ...] = ()
    layout: str = ""  # one of ATTENTION, SLIDING, RECURRENT, NO_CACHE per decoder layer
    num_attention_heads: int | None = None
    max_seq_len_limit: int | None = None  # inferred_max_seq_len of the config
    draft_layers: int = 0  # MTP layers (num_nextn_predict_layers)
    quantization: Quantization | None = None
    embedding_parameters: int = 0  # the input embeddings and lm_head: never quantized
    replicated_parameters: int = 0  # routers and norms: never quantized, whole on every tp rank

    def stage(self, pp_size: int = 1, pp_rank: int | None = None) -> tuple[int, int]:
        """(attention layers, recurrent layers) of stage ``pp_rank`` (None: the most of each),
        its contiguous share of every decoder layer (``Mapping.pp_layers``, mapping.py)."""
        layout = self.layout or ATTENTION * self.num_layers
        base, extra = divmod(len(layout), pp_size)
        counts = []
        for rank in range(pp_size):
            start = rank * base + min(rank, extra)
            part = layout[start : start + base + (rank < extra)]
            counts.append(
                (len(part) - part.count(RECURRENT) - part.count(NO_CACHE), part.count(RECURRENT))
            )
        if pp_rank is None:
            return max(c[0] for c in counts), max(c[1] for c in counts)
        return counts[pp_rank]

    def kv_geometry(
        self,
        kv_dtype: str | None = None,
        tokens_per_block: int = 32,
        tp_size: int = 1,
        pp_size: int = 1,
        attention_dp: bool = False,
        pp_rank: int | None = None,
        extra_layers: int = 0,
    ) -> KVGeometry:
        """One rank's KV geometry: its stage's attention layers plus ``extra_layers`` (at least
        one, as the V1 manager allocates), ``ceil(heads / tp)`` heads (MLA's is never split)."""
        return KVGeometry(
            num_layers=max(self.stage(pp_size, pp_rank)[0] + extra_layers, 1),
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            dtype=kv_dtype or self.kv_dtype,
            tokens_per_block=tokens_per_block,
            tp_size=1 if self.kv_factor == 1 else tp_size,
            kv_factor=self.kv_factor,
            attention_dp=attention_dp,
        )

    def mamba_geometry(
        self,
        tp_size: int = 1,
        pp_size: int = 1,
        ssm_dtype: str | None = None,
        pp_rank: int | None = None,
    ) -> MambaGeometry | None:
        """One rank's recurrent-state geometry (None without recurrent layers on its stage): conv
        state in the weights' dtype, SSM state in ``ssm_dtype`` (default: the config's)."""
        layers = self.stage(pp_size, pp_rank)[1] if self.linear_layers else 0
        if not layers:
            return None
        assert self.mamba is not None  # a config with recurrent layers has their geometry
        return MambaGeometry(
            num_mamba_layers=layers,
            **self.mamba,
            conv_dtype=self.dtype,
            ssm_dtype=ssm_dtype or self.mamba_ssm_dtype or self.dtype,
            tp_size=tp_size,
        )

    @property
    def kv_dtype(self) -> str:
        """The KV dtype by default (``kv_cache_config.dtype="auto"``): the checkpoint's KV
        quantization, else the weights' dtype."""
        kv_algo = self.quantization.kv_algo if self.quantization else None
        return KV_QUANT_DTYPES.get(kv_algo or "", self.dtype)

    @property
    def preferred_manager(self) -> str:
        return "v2" if self.architecture in V2_ARCHITECTURES else "v1"

    def weights_bytes(self, dtype: str | None = None) -> int | None:
        """All the weights' bytes: quantized ones at :data:`QUANT_WEIGHT_BYTES` (the checkpoint's
        algorithm, or ``dtype``'s when fp8 or nvfp4), the embeddings, lm_head, routers and norms
        (:meth:`replicated_bytes`) in the model's dtype; every parameter in a float ``dtype``.
        None without a parameter count or for a quantization kvlab does not model."""
        if not self.parameters:
            return None
        algo = self.quantization.weights_algo if self.quantization else None
        if dtype is not None:
            algo = {"fp8": "FP8", "nvfp4": "NVFP4"}.get(dtype)
            if algo is None:
                return int(DTYPE_BYTES[dtype] * self.parameters)
        if algo is None:
            return int(DTYPE_BYTES[self.dtype] * self.parameters)
        if algo not in QUANT_WEIGHT_BYTES:
            return None
        kept = min(self.embedding_parameters + self.replicated_parameters, self.parameters)
        return int(
            DTYPE_BYTES[self.dtype] * kept + QUANT_WEIGHT_BYTES[algo] * (self.parameters - kept)
        )

    def replicated_bytes(self, dtype: str | None = None) -> int:
        """The bytes of :func:`replicated_parameters`, which every tp rank holds whole: in a float
        ``dtype`` when given, else in the model's dtype (quantized checkpoints included)."""
        dtype = dtype if dtype in DTYPE_BYTES and dtype not in ("fp8", "nvfp4") else self.dtype
        return int(DTYPE_BYTES[dtype] * min(self.replicated_parameters, self.parameters or 0))

    @property
    def bytes_per_token_bf16(self) -> int:
        """All attention layers, one token, one rank, bf16: the number a preset states."""
        return self.kv_geometry("bfloat16").bytes_per_token

    def facts(self) -> dict[str, Any]:
        """The geometry as a preset's ``geometry`` block states it."""
        facts = {name: getattr(self, name) for name in FACTS}
        if self.mamba:
            facts.update(self.mamba, mamba_ssm_dtype=self.mamba_ssm_dtype)
        return facts


def _get(config, name: str, default=None):
    return getattr(config, name, default)


def geometry_from_config(
    config, *, name: str, source: str, where: str = "config", parameters: int | None = None
) -> ModelGeometry:
    """The geometry of ``config`` (a transformers ``PretrainedConfig``, or any object with a
    config.json's fields as attributes) by the module's rules; errors name ``where``."""
    top = config
    if callable(_get(config, "get_text_config")):
        config = config.get_text_config()
    elif _get(config, "text_config") is not None:
        if not isinstance(config.text_config, SimpleNamespace):
            raise ConfigError(
                f"{where}: text_config must be an object (the language model's "
                f"fields), got {type(config.text_config).__name__}"
            )
        config = config.text_config
    layers = require_field(
        config, "num_hidden_layers", where, "the decoder's layer count", MAX_LAYERS
    )
    dtype_field = _get(config, "dtype") or _get(config, "torch_dtype") or _get(top, "torch_dtype")
    notes = []
    if str(dtype_field) not in _DTYPES:
        notes.append(
            f"the config gives no float weights dtype ({dtype_field!r}); bfloat16 assumed for "
            "the KV cache"
        )
    hidden = _get(config, "hidden_size")
    vocab = _get(top, "vocab_size") or _get(config, "vocab_size")
    draft = _get(config, "num_nextn_predict_layers")
    draft = 0 if draft is None else check_bounded("num_nextn_predict_layers", draft, where)
    heads = _get(config, "num_attention_heads")
    if heads is not None:
        check_bounded("num_attention_heads", heads, where)
    common = dict(
        name=name,
        source=source,
        architecture=str(_get(config, "model_type") or _get(top, "model_type") or "unknown"),
        num_layers=layers,
        max_position_embeddings=_get(config, "max_position_embeddings"),
        dtype=_DTYPES.get(str(dtype_field), "bfloat16"),
        parameters=parameters,
        max_seq_len_limit=inferred_max_seq_len(config),
        embedding_parameters=(
            hidden * vocab * (1 if _get(top, "tie_word_embeddings", False) else 2)
            if isinstance(hidden, int) and isinstance(vocab, int)
            else 0
        ),
        draft_layers=draft,
        num_attention_heads=heads,
        replicated_parameters=replicated_parameters(config),
        quantization=quantization_from_config(_get(top, "quantization_config"), where),
    )

    if hasattr(config, "kv_lora_rank"):  # MLA
        why = "MLA caches kv_lora_rank + qk_rope_head_dim"
        rank, rope = (
            require_field(config, field, where, why, FIELD_BOUNDS[field][1])
            for field in ("kv_lora_rank", "qk_rope_head_dim")
        )
        return ModelGeometry(
            **common,
            attention_layers=layers,
            num_kv_heads=1,
            head_dim=rank + rope,
            kv_factor=1,
            notes=tuple(notes),
            layout=ATTENTION * layers,
        )

    pattern = _get(config, "hybrid_override_pattern")
    layer_types = _get(config, "layer_types")
    interval = _get(config, "full_attention_interval")
    if interval is not None:
        why = "every interval-th layer is full attention"
        interval = require_field(config, "full_attention_interval", where, why, layers)
    if layer_types is None and interval:
        layer_types = [
            "full_attention" if i % interval == interval - 1 else "linear_attention"
            for i in range(layers)
        ]
    state_fields = {}
    if pattern:  # Nemotron-H
        check_pattern(pattern, layers, where)
        layout = pattern.replace("*", ATTENTION).replace("E", NO_CACHE)
        state_fields = NEMOTRON_STATE_FIELDS
    elif layer_types is not None:
        if not isinstance(layer_types, list | tuple) or not all(
            isinstance(k, str) for k in layer_types
        ):
            raise ConfigError(
                f"{where}: layer_types must be a list of layer kinds (one a layer), "
                f"got {layer_types!r:.80}"
            )
        unknown = sorted(set(layer_types) - set(LAYER_KINDS))
        if unknown:
            raise ConfigError(
                f"{where}: layer_types holds {unknown}, which kvlab cannot plan "
                f"(it knows {sorted(LAYER_KINDS)})"
            )
        if len(layer_types) != layers:
            raise ConfigError(
                f"{where}: layer_types has {len(layer_types)} entries for "
                f"num_hidden_layers={layers}"
            )
        layout = "".join(LAYER_KINDS[kind] for kind in layer_types)
        state_fields = LINEAR_ATTENTION_STATE_FIELDS
    else:
        window = _get(config, "sliding_window")
        uses_window = window and _get(config, "use_sliding_window", True) is not False
        layout = (SLIDING if uses_window else ATTENTION) * layers
    sliding, linear = layout.count(SLIDING), layout.count(RECURRENT)
    attention = layout.count(ATTENTION) + sliding
    if attention < 1:
        raise ConfigError(
            f"{where}: {common['architecture']} has no attention layer, so it has no KV pool "
            "to plan (kvlab plans paged attention caches)"
        )
    mamba = (
        {
            key: require_field(config, field, where, why)
            for key, (field, why) in state_fields.items()
        }
        if linear
        else None
    )
    heads = check_bounded("num_attention_heads", heads, where)  # None is refused here
    kv_heads = _get(config, "num_key_value_heads")
    kv_heads = heads if kv_heads is None else check_bounded("num_key_value_heads", kv_heads, where)
    check_kv_groups(heads, kv_heads, where, "num_key_value_heads")
    head_dim = _get(config, "head_dim")
    if not isinstance(head_dim, int) or isinstance(head_dim, bool):
        why = "head_dim defaults to hidden_size // num_attention_heads"
        head_dim = require_field(config, "hidden_size", where, why) // heads
    check_bounded("head_dim", head_dim, where)
    window = _get(config, "sliding_window") if sliding else None
    if sliding:
        notes.append(
            f"{sliding} sliding-window layer(s) (window {window}) planned as full "
            "attention, as the executor sizes them unless kv_cache_config."
            "max_attention_window is set (then only the window is kept: an upper bound)"
        )
    ssm_dtype = _get(config, "mamba_ssm_dtype") if mamba else None
    if mamba and ssm_dtype not in STATE_DTYPES:
        notes.append(
            f"the config gives no SSM state dtype ({ssm_dtype!r}); the weights' dtype is used"
        )
        ssm_dtype = None
    return ModelGeometry(
        **common,
        attention_layers=attention,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        sliding_layers=sliding,
        sliding_window=window,
        linear_layers=linear if mamba else 0,
        mamba=mamba,
        mamba_ssm_dtype=ssm_dtype,
        notes=tuple(notes),
        layout=layout,
    )


#: The routed-expert count as config.json names it: Qwen3-MoE, DeepSeek, Mixtral.
EXPERT_FIELDS = ("num_experts", "n_routed_experts", "num_local_experts")


def replicated_parameters(config) -> int:
    """The parameters TensorRT-LLM builds whole on every tp rank in ``config.torch_dtype``, with no
    ``Mapping`` and no ``quant_config`` (so a checkpoint's ignore / exclude_modules list never
    reaches them): each MoE layer's router ``gate`` (experts x hidden; DeepSeek's adds an
    ``e_score_correction_bias`` per expert) and every RMSNorm: input and post-attention per layer,
    the final norm, Qwen3's per-head ``q_norm`` / ``k_norm``, MLA's ``q_a_layernorm`` /
    ``kv_a_layernorm`` (``Qwen3Gate``, ``Qwen3MoEDecoderLayer``: modeling_qwen3_moe.py at 03441af;
    ``DeepseekV3Gate``, MoE layers from ``first_k_dense_replace`` every ``moe_layer_freq``:
    modeling_deepseekv3.py at 000561d). [kvlab] The bias counts in the model's dtype (upstream:
    fp32, bf16 with the TRTLLM MoE backend); hybrids (recurrent layers) and configs without
    ``hidden_size`` count none."""
    layers, hidden = _count(config, "num_hidden_layers"), _count(config, "hidden_size")
    layer_types = _get(config, "layer_types")
    if (
        not layers * hidden
        or _get(config, "hybrid_override_pattern")
        or _get(config, "full_attention_interval")
        or (isinstance(layer_types, list | tuple) and "linear_attention" in layer_types)
    ):
        return 0
    norms = 2 * hidden
    if str(_get(config, "model_type", "")).startswith("qwen3"):
        norms += 2 * (
            _count(config, "head_dim") or hidden // (_count(config, "num_attention_heads") or 1)
        )
    if hasattr(config, "kv_lora_rank"):
        norms += _count(config, "q_lora_rank") + _count(config, "kv_lora_rank")
    experts = next((e for f in EXPERT_FIELDS if (e := _count(config, f))), 0)
    first, freq = _count(config, "first_k_dense_replace"), _count(config, "moe_layer_freq") or 1
    moe_layers = sum(i >= first and i % freq == 0 for i in range(layers)) if experts else 0
    bias = experts if _count(config, "n_routed_experts") else 0
    return layers * norms + hidden + moe_layers * (experts * hidden + bias)


def _count(config, name: str) -> int:
    """The field ``name`` if it is an int > 0, else 0."""
    value = _get(config, name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def inferred_max_seq_len(config) -> int:
    """The longest sequence the executor lets a model run (``_infer_max_seq_len_from_config``,
    model_engine.py at 001e670): ``max_position_embeddings`` (2048 when absent) times the rope
    factor unless its type is one of :data:`ROPE_TYPES_NOT_SCALED`, rounded up."""
    base = _get(config, "max_position_embeddings")
    if not isinstance(base, int) or isinstance(base, bool) or base <= 0:
        base = DEFAULT_MAX_POSITION_EMBEDDINGS
    rope = _get(config, "rope_scaling")
    rope = vars(rope) if isinstance(rope, SimpleNamespace) else rope
    if isinstance(rope, dict):
        kind = rope.get("type", rope.get("rope_type"))
        factor = rope.get("factor", 1.0)
        if kind not in ROPE_TYPES_NOT_SCALED and isinstance(factor, int | float) and factor > 0:
            if not math.isfinite(factor) or base * factor > 1 << 40:
                raise ConfigError(
                    f"config: rope_scaling's factor must be a finite number that keeps "
                    f"max_position_embeddings x factor within {1 << 40:,}, got {factor!r}"
                )
            return math.ceil(base * factor)
    return base


def quantization_from_config(fields, where: str = "config") -> Quantization | None:
    """The quantization a ``quantization_config`` (config.json) or ModelOpt's ``quantization``
    block states, as the executor maps it: ModelOpt's algorithms as written; Hugging Face's
    "fp8" with a ``weight_block_size`` or static activations is FP8_BLOCK_SCALES; any other
    method is named, its weights not derived. None when there is none."""
    if fields is None:
        return None
    if isinstance(fields, SimpleNamespace):
        fields = vars(fields)
    if not isinstance(fields, dict):
        fields = getattr(fields, "to_dict", lambda: {})()
    method = str(fields.get("quant_method", "")).lower()
    weights, kv = fields.get("quant_algo"), fields.get("kv_cache_quant_algo")
    if weights is None and kv is None and method != "modelopt":
        if method == "fp8":  # dynamic activations without blocks: the executor maps nothing
            blocks = fields.get("weight_block_size") or fields.get("activation_scheme") == "static"
            weights = "FP8_BLOCK_SCALES" if blocks else "fp8 (dynamic, no weight_block_size)"
        else:  # AWQ, GPTQ, compressed-tensors, ...
            weights = method or "unknown"
    if kv is not None and kv not in KV_QUANT_DTYPES:
        raise ConfigError(
            f"{where}: kv_cache_quant_algo {kv!r} is not one kvlab models "
            f"({', '.join(KV_QUANT_DTYPES)})"
        )
    return Quantization(weights_algo=weights, kv_algo=kv, source=where)


def _namespace(value):
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _namespace(v) for k, v in value.items()})
    return value


def read_config(path) -> ModelGeometry:
    """A model's geometry from a local ``config.json`` (a file, or a folder holding one), read by
    transformers' configuration classes with no network, after its raw fields are checked."""
    path = Path(check_instance("path", path, (str, os.PathLike)))
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(
            f"config: no config.json at {path} (path must be a config.json file "
            "or a folder holding one)"
        )
    check_raw_config(_bounded_text(file, "a config.json"), str(file))
    try:
        import transformers
        from transformers import AutoConfig
    except ImportError as exc:
        raise ImportError(
            "reading a config.json needs transformers: pip install 'kvlab[models]'"
        ) from exc

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # its deprecation notes are not the user's concern
    try:
        config = AutoConfig.from_pretrained(
            str(file.parent if file.name == "config.json" else file), local_files_only=True
        )
        geometry = geometry_from_config(
            config,
            name=file.parent.name or file.stem,
            source=f"{file} (read by transformers)",
            where=str(file),
        )
        counted = count_parameters(config)
    except ConfigError:
        raise
    except Exception as exc:  # any failure of a third-party parser on an untrusted file
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()][:2]
        raise ConfigError(
            f"{file}: transformers cannot read it: {type(exc).__name__}: {' '.join(lines)[:300]}"
        ) from None
    finally:
        transformers.logging.set_verbosity(verbosity)
    modelopt = file.parent / "hf_quant_config.json"
    if modelopt.is_file():  # ModelOpt's file comes first, as the executor reads it
        try:
            text = _bounded_text(modelopt, "a quantization file")
            block = parse_config_json(text, str(modelopt)).get("quantization")
        except ConfigError:
            raise
        except (ValueError, AttributeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{modelopt}: not a ModelOpt quantization file ({exc})") from None
        check_quantization_block(block, str(modelopt))
        if isinstance(block, dict) and block.get("quant_algo") is not None:  # else config.json's
            quantization = quantization_from_config(block, str(modelopt))
            geometry = dataclasses.replace(geometry, quantization=quantization)
    if isinstance(counted, str):
        return dataclasses.replace(geometry, notes=geometry.notes + (counted,))
    return dataclasses.replace(geometry, parameters=counted)


def _bounded_text(file: Path, what: str) -> str:
    try:
        return read_text(file, what, MAX_CONFIG_BYTES)
    except FileFormatError as exc:
        raise ConfigError(str(exc)) from None


def count_parameters(config):
    """The parameter count, from transformers building the model on the meta device (no
    memory); a note saying why when it cannot."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # an architecture transformers cannot build as a causal LM
        return (
            f"the parameter count could not be derived ({type(exc).__name__}): "
            "give the weights per rank"
        )
    return sum(p.numel() for p in model.parameters())


def model_names() -> tuple[str, ...]:
    """The presets in data/models/."""
    return tuple(sorted(p.stem for p in MODELS_DIR.glob("*.json")))


def load_preset(model: str) -> dict[str, Any]:
    """A preset's file: name, title, source, parameters, geometry (facts), config (fields)."""
    check_choice("model", model, model_names())
    return load_json(MODELS_DIR / f"{model}.json", "a model preset", MAX_CONFIG_BYTES)


def load_model(model: str) -> ModelGeometry:
    """A preset's geometry, read from its published config fields as :func:`read_config` reads
    a file (no transformers needed)."""
    preset = load_preset(model)
    return geometry_from_config(
        _namespace(preset["config"]),
        name=preset["name"],
        source=preset["source"],
        where=f"data/models/{model}.json",
        parameters=preset.get("parameters"),
    )
