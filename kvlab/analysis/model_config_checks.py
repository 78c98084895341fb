"""The checks on a model's config fields, and on a raw config.json before transformers reads it:
every field kvlab plans from is an int in its range, named with the file when it is not
(:class:`ConfigError`), and the fields beside them are what they say (``architectures`` a list of
class names, though kvlab finds the model by ``model_type``, a non-empty name; rope_scaling's
numbers and ``rope_theta`` finite and positive; dtypes by name); a raw file's size, nesting
and integer lengths are bounded, because a config class may build a list per layer from a huge
layer count and Python's JSON parser recurses. :mod:`kvlab.analysis.models` reads the configs
these checks pass.
"""

from __future__ import annotations

import json
import math

from kvlab.core.checks import check_float


class ConfigError(ValueError):
    """A config kvlab cannot plan for: the message names the file, the field and why."""


#: The most decoder layers kvlab plans (KVGeometry's bound), checked on the raw config before
#: transformers builds anything from it.
MAX_LAYERS = 4096
#: The largest config.json kvlab reads.
MAX_CONFIG_BYTES = 16 << 20


def check_field(name: str, value, where: str, why: str, high: int = 1 << 30, low: int = 1) -> int:
    """``value`` if it is an int in [low, high]; ConfigError naming ``where``, the field, the
    range and ``why`` (what the field is) otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(
            f"{where}: {name} must be an int in [{low}, {high}] ({why}), got {value!r:.80}"
        )
    return value


def require_field(config, name: str, where: str, why: str, high: int = 1 << 30) -> int:
    """The field ``name`` of ``config`` (an attribute), checked by :func:`check_field`."""
    return check_field(name, getattr(config, name, None), where, why, high)


def check_positive(name: str, value, where: str, why: str) -> float:
    """``value`` if it is a finite number > 0 (not a bool); ConfigError naming ``where``, the
    field and ``why`` otherwise (:func:`kvlab.core.checks.check_float` words it)."""
    try:
        return check_float(name, value, low=0.0, high=math.inf, low_open=True, high_open=True)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc} ({why})") from None


def check_name(name: str, value, where: str, why: str) -> None:
    """ConfigError naming ``where`` and the field unless ``value`` is a non-empty str."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {name} must be a non-empty string ({why}), got {value!r:.80}")


def check_bounded(name: str, value, where: str) -> int:
    """``value`` of the field ``name`` checked against its :data:`RAW_FIELD_BOUNDS`."""
    low, high, what = RAW_FIELD_BOUNDS[name]
    return check_field(name, value, where, what, high, low)


def check_kv_groups(heads: int, kv_heads: int, where: str, kv_name: str) -> None:
    """``kv_heads`` (the field ``kv_name``) divides ``heads``, as grouped-query attention needs."""
    if heads % kv_heads:
        raise ConfigError(
            f"{where}: {kv_name} must divide num_attention_heads ({heads}): each KV "
            f"head serves a whole group of query heads, got {kv_heads}"
        )


#: Bounds on a config.json's own fields, checked before transformers reads it (field: (low,
#: high, what it is)); a present field must be an int in [low, high].
RAW_FIELD_BOUNDS = {
    "hidden_size": (1, 1 << 20, "the hidden size"),
    "num_attention_heads": (1, 1 << 14, "attention heads"),
    "num_key_value_heads": (1, 1 << 14, "KV heads"),
    "head_dim": (1, 1 << 14, "the head size"),
    "intermediate_size": (1, 1 << 22, "the MLP's inner size"),
    "vocab_size": (1, 1 << 24, "the vocabulary"),
    "max_position_embeddings": (1, 1 << 30, "the longest position the model was trained for"),
    "kv_lora_rank": (1, 1 << 13, "MLA's compressed KV size"),
    "qk_rope_head_dim": (1, 1 << 13, "MLA's rotary key size"),
    "num_nextn_predict_layers": (0, MAX_LAYERS, "MTP draft layers"),
}
#: The deepest nesting a config.json may have (real ones nest three or four levels).
MAX_CONFIG_DEPTH = 32
#: The most digits an integer of a config.json may have.
MAX_INT_DIGITS = 30


class _LongInt:
    """An integer literal of more than MAX_INT_DIGITS digits, as the raw check parses it: no
    field accepts it, and its repr says what it was."""

    def __init__(self, digits: str):
        self.length = len(digits.lstrip("-"))

    def __repr__(self) -> str:
        return f"an integer of {self.length} digits"


def parse_config_json(text: str, where: str):
    """A config file's JSON, with integers of more than MAX_INT_DIGITS digits kept as _LongInt
    (Python refuses to convert past 4,300) and nesting bounded (its parser recurses)."""
    try:
        raw = json.loads(
            text, parse_int=lambda s: int(s) if len(s) <= MAX_INT_DIGITS else _LongInt(s)
        )
    except RecursionError:
        raise ConfigError(
            f"{where}: nested deeper than MAX_CONFIG_DEPTH={MAX_CONFIG_DEPTH} levels"
        ) from None
    stack = [(raw, 1, "")]
    while stack:
        value, depth, key = stack.pop()
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigError(
                f"{where}: nested deeper than MAX_CONFIG_DEPTH={MAX_CONFIG_DEPTH} "
                f"levels (at {key[:80]})"
            )
        if isinstance(value, _LongInt):
            raise ConfigError(
                f"{where}: {key or 'the document'} is {value!r}; an integer of a "
                f"config has at most {MAX_INT_DIGITS}"
            )
        if isinstance(value, dict):
            stack.extend((v, depth + 1, f"{key}.{k}" if key else str(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, depth + 1, f"{key}[{i}]") for i, v in enumerate(value))
    return raw


def check_raw_config(text: str, where: str) -> None:
    """Bounds on the raw config.json, before transformers builds anything from it: a config
    class may build a list per layer (``layer_types``) or more from a huge layer count, and a
    field out of range would reach the arithmetic as nonsense."""
    try:
        raw = parse_config_json(text, where)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        return  # transformers names what it cannot parse
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a config.json holds one JSON object, got {type(raw).__name__}")
    check_quantization_block(raw.get("quantization_config"), where)
    text_config = raw.get("text_config")
    if text_config is not None and not isinstance(text_config, dict):
        raise ConfigError(
            f"{where}: text_config must be an object (the language model's fields), "
            f"got {type(text_config).__name__}"
        )
    for part in (raw, text_config):
        if part is None:
            continue
        layers = part.get("num_hidden_layers")
        if layers is not None:
            check_field("num_hidden_layers", layers, where, "the decoder's layer count", MAX_LAYERS)
        for field_name in RAW_FIELD_BOUNDS:
            if part.get(field_name) is not None:
                check_bounded(field_name, part[field_name], where)
        heads, kv_heads = part.get("num_attention_heads"), part.get("num_key_value_heads")
        if heads is not None and kv_heads is not None:
            check_kv_groups(heads, kv_heads, where, "num_key_value_heads")
        for field_name in ("torch_dtype", "dtype", "mamba_ssm_dtype"):
            if part.get(field_name) is not None and not isinstance(part[field_name], str):
                raise ConfigError(
                    f"{where}: {field_name} must be a dtype's name, got {part[field_name]!r:.80}"
                )
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
            if not isinstance(rope, dict) or (
                factor is not None
                and (
                    isinstance(factor, bool)
                    or not isinstance(factor, (int, float))
                    or not math.isfinite(factor)
                    or factor <= 0
                )
            ):
                raise ConfigError(
                    f"{where}: rope_scaling must be an object whose factor is a "
                    f"finite number > 0, got {rope!r:.80}"
                )
            check_rope_fields(rope, where)
        interval = part.get("full_attention_interval")
        if interval is not None:
            check_field(
                "full_attention_interval",
                interval,
                where,
                "every interval-th layer is full attention",
                MAX_LAYERS,
            )
        pattern = part.get("hybrid_override_pattern")
        if (
            isinstance(pattern, str)
            and len(pattern) <= MAX_LAYERS
            and (set(pattern) - set("M*-E") or (isinstance(layers, int) and len(pattern) != layers))
        ):
            raise ConfigError(
                f"{where}: hybrid_override_pattern must be num_hidden_layers "
                f"({layers}) characters of M, *, - and E, got {pattern[:80]!r} "
                f"({len(pattern)} characters)"
            )
        for field_name, kind in (("hybrid_override_pattern", str), ("layer_types", list)):
            value = part.get(field_name)
            if value is not None and not isinstance(value, kind):
                raise ConfigError(
                    f"{where}: {field_name} must be a {kind.__name__} (one entry per "
                    f"layer), got {type(value).__name__}"
                )
            if value is not None and len(value) > MAX_LAYERS:
                raise ConfigError(
                    f"{where}: {field_name} must have at most {MAX_LAYERS} entries "
                    f"(one per layer), got {len(value)}"
                )


#: rope_scaling's numeric fields besides ``factor``: (what each is, int or any number).
ROPE_FIELDS = {
    "original_max_position_embeddings": (
        "the context the model was trained at before scaling",
        int,
    ),
    "low_freq_factor": ("Llama 3's low-frequency wavelength factor", float),
    "high_freq_factor": ("Llama 3's high-frequency wavelength factor", float),
    "rope_theta": ("the rotary base", float),
}


def check_rope_fields(rope: dict, where: str) -> None:
    """rope_scaling's fields of :data:`ROPE_FIELDS`, where present: each an int in range or a
    finite number > 0, named ``rope_scaling.FIELD``."""
    for field_name, (why, kind) in ROPE_FIELDS.items():
        value, name = rope.get(field_name), f"rope_scaling.{field_name}"
        if value is None:
            continue
        if kind is int:
            check_field(name, value, where, why, RAW_FIELD_BOUNDS["max_position_embeddings"][1])
        else:
            check_positive(name, value, where, why)


def check_quantization_block(block, where: str) -> None:
    """A quantization block's algorithm names are strings (or absent)."""
    if block is None:
        return
    if not isinstance(block, dict):
        raise ConfigError(f"{where}: a quantization block must be an object, got {block!r:.80}")
    for field_name in ("quant_method", "quant_algo", "kv_cache_quant_algo"):
        if block.get(field_name) is not None and not isinstance(block[field_name], str):
            raise ConfigError(
                f"{where}: {field_name} must be an algorithm's name, got {block[field_name]!r:.80}"
            )


__all__ = [
    "ConfigError",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_LAYERS",
    "RAW_FIELD_BOUNDS",
    "ROPE_FIELDS",
    "check_bounded",
    "check_field",
    "check_kv_groups",
    "check_name",
    "check_positive",
    "check_quantization_block",
    "check_raw_config",
    "check_rope_fields",
    "parse_config_json",
    "require_field",
]
