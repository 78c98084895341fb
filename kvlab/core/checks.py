"""Argument checks for the public boundary: every error names the parameter,
its value and the accepted range (docs/DESIGN.md, "Conventions")."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar, cast

T = TypeVar("T")

#: Upper bound for counts and byte sizes: far beyond any GPU (1 PiB), exact in torch int64.
MAX_COUNT = 1 << 50
#: The most items a list argument may hold: more is a mistake (an endless iterator).
MAX_ITEMS = 1 << 20

#: Each integer parameter's accepted range [low, high], stated once for every door.
BOUNDS: dict[str, tuple[int, int]] = {
    "max_batch_size": (1, 1 << 20),
    "scheduler_capacity": (1, 1 << 20),
    "pp_size": (1, 1024),
    "beam_width": (1, 1024),
    "num_pools": (1, 64),
    "num_reserved_index_slots": (1, 1 << 10),
    "max_blocks_per_seq": (1, 1 << 26),
    "tokens_per_block": (1, 1 << 16),
    "max_seq_len": (1, 1 << 30),
    "max_num_tokens": (1, 1 << 30),
    "max_context_length": (1, 1 << 30),
    "chunk_unit_size": (1, 1 << 30),
    "stall_limit": (1, 1 << 30),
    "max_num_active_requests": (1, 1 << 30),
    "max_steps": (1, 1 << 40),
    "num_extra_kv_tokens": (0, 1 << 20),
    "reserved_draft_tokens": (0, 1 << 20),
    "num_draft_tokens": (0, 1 << 16),
    "tokens_per_hash": (1, 1 << 20),
    "quota_bytes": (1, MAX_COUNT),
    "prompt_len": (1, MAX_COUNT),
    "max_new_tokens": (0, MAX_COUNT),
    "arrival_step": (0, MAX_COUNT),
    "context_current_position": (0, MAX_COUNT),
    "num_generated": (0, MAX_COUNT),
    "host_cache_size": (0, MAX_COUNT),
}


def check_int(name: str, value: object, *, low: int = 0, high: int = MAX_COUNT) -> int:
    """Return ``value`` if it is an int in [low, high]; raise TypeError/ValueError otherwise."""
    if type(value) is int and low <= value <= high:  # the common case, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be an int in [{low}, {high}], got {value!r} ({type(value).__name__})"
        )
    number = int(value)
    if not low <= number <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return number


def check_param(name: str, value: object, label: str | None = None) -> int:
    """Return ``value`` if it is an int in ``BOUNDS[name]``; errors name it ``label or name``."""
    low, high = BOUNDS[name]
    return check_int(label or name, value, low=low, high=high)


def check_param_or(name: str, value: object, default: T) -> int | T:
    """``default`` when ``value`` is None, else :func:`check_param`."""
    return default if value is None else check_param(name, value)


def check_bools(**flags: object) -> None:
    """TypeError naming the first of ``flags`` that is not a bool."""
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {flag!r}")


def store_param(obj: object, name: str) -> None:
    """:func:`store_checked` of the field ``name`` against ``BOUNDS[name]``."""
    low, high = BOUNDS[name]
    store_checked(obj, name, check_int, low=low, high=high)


def check_float(
    name: str,
    value: object,
    *,
    low: float,
    high: float,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as float if it is a real number in the range; raise otherwise."""
    interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a number in {interval}, got {value!r} ({type(value).__name__})"
        )
    number = float(value)
    bad_low = number <= low if low_open else number < low
    bad_high = number >= high if high_open else number > high
    if bad_low or bad_high or number != number:
        raise ValueError(f"{name} must be in {interval}, got {number}")
    return number


def check_items(
    name: str, values: object, what: str = "items", max_items: int = MAX_ITEMS
) -> list[Any]:
    """``values`` (an iterable, not a str or a mapping) as a list of at most ``max_items``,
    taken without reading past that (an endless iterator is refused, not followed)."""
    if (
        isinstance(values, (str, bytes))
        or not hasattr(values, "__iter__")
        or hasattr(values, "keys")
    ):
        raise TypeError(
            f"{name} must be a sequence of {what}, got {values!r:.80} ({type(values).__name__})"
        )
    items = list(itertools.islice(cast(Iterable[Any], values), max_items + 1))
    if len(items) > max_items:
        raise ValueError(f"{name} must hold at most {max_items:,} {what}, got more")
    return items


def check_sequence(name: str, values: object, check: Callable[..., T], **limits: float) -> list[T]:
    """Return ``values`` (a list, tuple, range or 1-D array, not a str) as a list, each item
    checked by ``check`` (:func:`check_int` or :func:`check_float`) under ``name``."""
    items = check_items(name, values, "numbers")
    return [check(f"{name}[{i}]", value, **limits) for i, value in enumerate(items)]


def store_checked(obj: object, name: str, check: Callable[..., object], **limits: float) -> None:
    """Check the field ``name`` of ``obj`` (a dataclass, frozen or not) with ``check`` and store
    what it returns: a plain int or float, never a numpy scalar whose arithmetic would wrap."""
    object.__setattr__(obj, name, check(name, getattr(obj, name), **limits))


def check_instance(name: str, value: T, kind: type | tuple[type, ...]) -> T:
    """Return ``value`` if it is a ``kind`` (a class or a tuple of classes); else TypeError."""
    if not isinstance(value, kind):
        wanted = " or ".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
        article = "an" if wanted[0] in "AEIOU" else "a"
        raise TypeError(
            f"{name} must be {article} {wanted}, got {value!r:.60} ({type(value).__name__})"
        )
    return value


def check_mapping(name: str, value: T, kind: type | tuple[type, ...], what: str) -> T:
    """Return ``value`` if it is a non-empty mapping whose values are ``kind``s."""
    mapping = cast(Mapping[Any, Any], check_instance(name, value, Mapping))
    if not mapping:
        raise ValueError(f"{name} must be a non-empty mapping ({what}), got an empty one")
    for key, item in mapping.items():
        check_instance(f"{name}[{key!r:.40}]", item, kind)
    return value


def check_choice(name: str, value: object, choices: Collection[str]) -> str:
    """Return ``value`` if it is one of ``choices``; raise ValueError listing them otherwise."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value
