"""The checks on a raw config.json before transformers reads it (a config class may build a list
per layer from a huge layer count; Python's JSON parser recurses) and on the fields kvlab plans
from: :class:`ConfigError` names the file, the field and its range.
"""

from __future__ import annotations

import math

from kvlab.core.checks import check_float
from kvlab.core.files import FileFormatError, parse_json


class ConfigError(ValueError):
    """A config kvlab cannot plan for: the message names the file, the field and why."""


MAX_LAYERS = 4096  # KVGeometry's bound on the decoder's layers
MAX_CONFIG_BYTES = 16 << 20
MAX_POSITIONS = 1 << 30
#: The int fields of a config.json kvlab reads: (low, high, what it is); present, each must be
#: an int in [low, high].
FIELD_BOUNDS = {
    "num_hidden_layers": (1, MAX_LAYERS, "the decoder's layer count"),
    "hidden_size": (1, 1 << 20, "the hidden size"),
    "num_attention_heads": (1, 1 << 14, "attention heads"),
    "num_key_value_heads": (1, 1 << 14, "KV heads"),
    "head_dim": (1, 1 << 14, "the head size"),
    "intermediate_size": (1, 1 << 22, "the MLP's inner size"),
    "vocab_size": (1, 1 << 24, "the vocabulary"),
    "max_position_embeddings": (1, MAX_POSITIONS, "the longest position the model was trained for"),
    "kv_lora_rank": (1, 1 << 13, "MLA's compressed KV size"),
    "qk_rope_head_dim": (1, 1 << 13, "MLA's rotary key size"),
    "num_nextn_predict_layers": (0, MAX_LAYERS, "MTP draft layers"),
    "full_attention_interval": (1, MAX_LAYERS, "every interval-th layer is full attention"),
}
#: rope_scaling's numbers besides ``factor``: (what each is, int or any number > 0).
ROPE_FIELDS = {
    "original_max_position_embeddings": (
        "the context the model was trained at before scaling",
        int,
    ),
    "low_freq_factor": ("Llama 3's low-frequency wavelength factor", float),
    "high_freq_factor": ("Llama 3's high-frequency wavelength factor", float),
    "rope_theta": ("the rotary base", float),
}


def check_field(name: str, value, where: str, why: str, high: int = 1 << 30, low: int = 1) -> int:
    """``value`` if it is an int in [low, high], else ConfigError naming the field and ``why``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(
            f"{where}: {name} must be an int in [{low}, {high}] ({why}), got {value!r:.80}"
        )
    return value


def require_field(config, name: str, where: str, why: str, high: int = 1 << 30) -> int:
    """The attribute ``name`` of ``config``, checked by :func:`check_field`."""
    return check_field(name, getattr(config, name, None), where, why, high)


def check_bounded(name: str, value, where: str) -> int:
    """``value`` of the field ``name`` checked against :data:`FIELD_BOUNDS`."""
    low, high, why = FIELD_BOUNDS[name]
    return check_field(name, value, where, why, high, low)


def check_positive(name: str, value, where: str, why: str) -> float:
    """``value`` if it is a finite number > 0, else ConfigError (worded by ``check_float``)."""
    try:
        return check_float(name, value, low=0.0, high=math.inf, low_open=True, high_open=True)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc} ({why})") from None


def check_name(name: str, value, where: str, why: str) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {name} must be a non-empty string ({why}), got {value!r:.80}")


def check_kv_groups(heads: int, kv_heads: int, where: str, kv_name: str) -> None:
    """``kv_heads`` (the field ``kv_name``) divides ``heads``, as grouped-query attention needs."""
    if heads % kv_heads:
        raise ConfigError(
            f"{where}: {kv_name} must divide num_attention_heads ({heads}): each KV "
            f"head serves a whole group of query heads, got {kv_heads}"
        )


def parse_config_json(text: str, where: str):
    """A config file's JSON (kvlab.core.files.parse_json's bounds), else ConfigError."""
    try:
        return parse_json(text, where)
    except FileFormatError as exc:
        raise ConfigError(str(exc)) from None


def check_raw_config(text: str, where: str) -> None:
    """Bounds on the raw config.json (and its ``text_config``), before transformers reads it."""
    raw = parse_config_json(text, where)
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a config.json holds one JSON object, got {type(raw).__name__}")
    check_quantization_block(raw.get("quantization_config"), where)
    text_config = raw.get("text_config")
    if text_config is not None and not isinstance(text_config, dict):
        raise ConfigError(
            f"{where}: text_config must be an object (the language model's fields), "
            f"got {type(text_config).__name__}"
        )
    for part in (raw, text_config or {}):
        _check_part(part, where)


def _check_part(part: dict, where: str) -> None:
    for name in FIELD_BOUNDS:
        if part.get(name) is not None:
            check_bounded(name, part[name], where)
    if part.get("num_attention_heads") is not None and part.get("num_key_value_heads"):
        check_kv_groups(
            part["num_attention_heads"], part["num_key_value_heads"], where, "num_key_value_heads"
        )
    for name in ("torch_dtype", "dtype", "mamba_ssm_dtype"):
        if part.get(name) is not None and not isinstance(part[name], str):
            raise ConfigError(f"{where}: {name} must be a dtype's name, got {part[name]!r:.80}")
    if part.get("model_type") is not None:
        check_name("model_type", part["model_type"], where, "how transformers finds the model")
    architectures = part.get("architectures")
    if architectures is not None and (not isinstance(architectures, list) or not architectures):
        raise ConfigError(
            f"{where}: architectures must be a non-empty list of class names "
            f"(kvlab finds the model by model_type), got {architectures!r:.80}"
        )
    for i, name in enumerate(architectures or ()):
        check_name(f"architectures[{i}]", name, where, "a model class's name")
    if part.get("rope_theta") is not None:
        check_positive("rope_theta", part["rope_theta"], where, "the rotary base")
    rope = part.get("rope_scaling")
    if rope is not None:
        factor = rope.get("factor") if isinstance(rope, dict) else None
        if not isinstance(rope, dict) or not (
            factor is None
            or isinstance(factor, int | float)
            and not isinstance(factor, bool)
            and math.isfinite(factor)
            and factor > 0
        ):
            raise ConfigError(
                f"{where}: rope_scaling must be an object whose factor is a "
                f"finite number > 0, got {rope!r:.80}"
            )
        for name, (why, kind) in ROPE_FIELDS.items():
            value, label = rope.get(name), f"rope_scaling.{name}"
            if value is not None and kind is int:
                check_field(label, value, where, why, MAX_POSITIONS)
            elif value is not None:
                check_positive(label, value, where, why)
    pattern = part.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) <= MAX_LAYERS:
        check_pattern(pattern, part.get("num_hidden_layers"), where)
    for name, kind in (("hybrid_override_pattern", str), ("layer_types", list)):
        value = part.get(name)
        if value is not None and not isinstance(value, kind):
            raise ConfigError(
                f"{where}: {name} must be a {kind.__name__} (one entry per layer), "
                f"got {type(value).__name__}"
            )
        if value is not None and len(value) > MAX_LAYERS:
            raise ConfigError(
                f"{where}: {name} must have at most {MAX_LAYERS} entries (one per layer), "
                f"got {len(value)}"
            )


def check_pattern(pattern, layers, where: str) -> None:
    """Nemotron-H's ``hybrid_override_pattern``: a character a layer of M (Mamba), * (attention),
    - (MLP) and E (MoE)."""
    if (
        not isinstance(pattern, str)
        or set(pattern) - set("M*-E")
        or (isinstance(layers, int) and len(pattern) != layers)
    ):
        raise ConfigError(
            f"{where}: hybrid_override_pattern must be num_hidden_layers ({layers}) characters "
            f"of M, *, - and E, got {str(pattern)[:80]!r} ({len(str(pattern))} characters)"
        )


def check_quantization_block(block, where: str) -> None:
    """A quantization block is an object whose algorithm names are strings (or absent)."""
    if block is None:
        return
    if not isinstance(block, dict):
        raise ConfigError(f"{where}: a quantization block must be an object, got {block!r:.80}")
    for name in ("quant_method", "quant_algo", "kv_cache_quant_algo"):
        if block.get(name) is not None and not isinstance(block[name], str):
            raise ConfigError(
                f"{where}: {name} must be an algorithm's name, got {block[name]!r:.80}"
            )
