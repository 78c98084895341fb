"""Request generators: fixed lists, seeded Poisson arrivals and length distributions, and real
production traffic (:func:`azure_trace`, :func:`mooncake_trace`). Every random choice goes
through ``numpy.random.default_rng(seed)``: the same arguments give the same requests."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvlab.core.checks import (
    MAX_COUNT,
    MAX_ITEMS,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_items,
    store_checked,
)
from kvlab.core.paths import DATA_DIR
from kvlab.core.request import Request
from kvlab.run.trace_files import TraceFormatError, trace_requests, trace_rows


class LengthDistribution:
    """A distribution of token counts; ``sample(rng, n)`` returns n ints >= ``low``."""

    low: int

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray[Any, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class Constant(LengthDistribution):
    """Always ``value`` tokens."""

    value: int

    def __post_init__(self) -> None:
        store_checked(self, "value", check_int, low=0, high=MAX_COUNT)

    @property
    def low(self) -> int:  # type: ignore[override]
        return self.value

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray[Any, Any]:
        return np.full(n, self.value, dtype=np.int64)


@dataclass(frozen=True)
class Uniform(LengthDistribution):
    """Integers uniform in [low, high], both included."""

    low: int
    high: int

    def __post_init__(self) -> None:
        store_checked(self, "low", check_int, low=0, high=MAX_COUNT)
        store_checked(self, "high", check_int, low=self.low, high=MAX_COUNT)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray[Any, Any]:
        return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)


@dataclass(frozen=True)
class LogNormal(LengthDistribution):
    """exp(Normal(ln median, sigma)), rounded and clipped to [low, high]: the long-tailed shape
    real prompt and output lengths have."""

    median: float
    sigma: float
    low: int = 1
    high: int = 1 << 20

    def __post_init__(self) -> None:
        store_checked(self, "median", check_float, low=0.0, high=float(MAX_COUNT), low_open=True)
        store_checked(self, "sigma", check_float, low=0.0, high=10.0)
        store_checked(self, "low", check_int, low=0, high=MAX_COUNT)
        store_checked(self, "high", check_int, low=self.low, high=MAX_COUNT)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray[Any, Any]:
        values = rng.lognormal(math.log(self.median), self.sigma, size=n)
        return np.clip(np.rint(values), self.low, self.high).astype(np.int64)


Lengths = int | LengthDistribution


def _distribution(name: str, lengths: Lengths, low: int) -> LengthDistribution:
    """``lengths`` (an int means a constant) as a distribution none of whose draws is below ``low``."""
    if isinstance(lengths, bool) or not isinstance(lengths, (int, LengthDistribution)):
        raise TypeError(
            f"{name} must be an int or a LengthDistribution (Constant, Uniform, "
            f"LogNormal), got {lengths!r:.60}"
        )
    if isinstance(lengths, int):
        lengths = Constant(check_int(name, lengths, low=0, high=MAX_COUNT))
    if lengths.low < low:
        raise ValueError(
            f"{name} must draw lengths of at least {low}, got {lengths!r:.80} (lowest {lengths.low})"
        )
    return lengths


def fixed(specs: Iterable[Sequence[int]], id_prefix: str = "r") -> list[Request]:
    """Requests from (prompt_len, max_new_tokens[, arrival_step]) tuples, named
    ``{id_prefix}0``, ``{id_prefix}1``, ..."""
    items = check_items("specs", specs, "(prompt_len, max_new_tokens[, arrival_step]) tuples")
    check_instance("id_prefix", id_prefix, str)
    for i, spec in enumerate(items):
        if not hasattr(spec, "__len__") or not 2 <= len(spec) <= 3:
            raise ValueError(
                f"specs[{i}] must be (prompt_len, max_new_tokens[, arrival_step]), got {spec!r}"
            )
    return [Request(f"{id_prefix}{i}", *spec) for i, spec in enumerate(items)]


def poisson_arrivals(num_requests: int, rate: float, seed: int) -> np.ndarray[Any, Any]:
    """Arrival steps of a Poisson process of ``rate`` requests per step, starting at step 0."""
    num_requests = check_int("num_requests", num_requests, low=0, high=MAX_ITEMS)
    rate = check_float("rate", rate, low=0.0, high=1e6, low_open=True)
    rng = np.random.default_rng(check_int("seed", seed, low=0, high=2**63 - 1))
    times = np.cumsum(rng.exponential(1.0 / rate, size=num_requests))
    if num_requests:
        times -= times[0]
        if not times[-1] <= MAX_COUNT:  # also inf: the steps would not fit an int64
            raise ValueError(
                f"rate={rate:g} spreads {num_requests} arrivals over {times[-1]:.3g} "
                f"steps, beyond the last step kvlab counts ({MAX_COUNT}); raise rate"
            )
    return np.floor(times).astype(np.int64)


def poisson_workload(
    num_requests: int,
    rate: float,
    prompt_len: Lengths,
    max_new_tokens: Lengths,
    seed: int = 0,
    id_prefix: str = "r",
) -> list[Request]:
    """``num_requests`` requests arriving as a Poisson process of ``rate`` per step, with
    lengths drawn from the given distributions: prompts of at least one token."""
    check_instance("id_prefix", id_prefix, str)
    prompts_dist = _distribution("prompt_len", prompt_len, low=1)
    outputs_dist = _distribution("max_new_tokens", max_new_tokens, low=0)
    arrivals = poisson_arrivals(num_requests, rate, seed)
    rng = np.random.default_rng([seed, 1])  # independent of the arrival stream
    prompts = prompts_dist.sample(rng, num_requests)
    outputs = outputs_dist.sample(rng, num_requests)
    return [
        Request(f"{id_prefix}{i}", int(p), int(g), int(a))
        for i, (p, g, a) in enumerate(zip(prompts, outputs, arrivals, strict=True))
    ]


#: The benchmark's standard mixed workload (benchmarks/scheduler_throughput.py).
STANDARD_MIXED: dict[str, Any] = dict(
    num_requests=2000,
    rate=0.3,
    prompt_len=LogNormal(median=512, sigma=1.0, low=16, high=8192),
    max_new_tokens=LogNormal(median=128, sigma=0.8, low=1, high=2048),
)


def standard_mixed_workload(seed: int = 0) -> list[Request]:
    """2,000 requests, Poisson arrivals at 0.3 per step (near saturation for 64 running requests
    on a 64k-token pool), log-normal prompts (median 512, 16..8192 tokens) and outputs (median
    128, 1..2048 tokens)."""
    return poisson_workload(seed=seed, **STANDARD_MIXED)


# --- real traffic: Azure's (CC-BY 4.0) and Mooncake's (Apache-2.0) public traces ------------------

#: The trace files under data/traces/ (their READMEs give the attribution).
TRACE_DIR = DATA_DIR / "traces"
AZURE_TRACES = {
    "conv": "AzureLLMInferenceTrace_conv.csv",
    "code": "AzureLLMInferenceTrace_code.csv",
}
MOONCAKE_TRACES = {"conversation": "conversation_trace.jsonl", "synthetic": "synthetic_trace.jsonl"}
MOONCAKE_FOLDER = "mooncake-fast25"  # under TRACE_DIR


def _replay_arguments(
    seconds_per_iteration: float, limit: int | None, minutes: float | None
) -> tuple[float, int | None, float | None]:
    seconds = check_float(
        "seconds_per_iteration", seconds_per_iteration, low=0.0, high=3600.0, low_open=True
    )
    if limit is not None:
        limit = check_int("limit", limit, low=1, high=10_000_000)
    if minutes is not None:
        minutes = check_float("minutes", minutes, low=0.0, high=24 * 60.0, low_open=True)
    return seconds, limit, minutes


def azure_trace(
    service: str = "conv",
    seconds_per_iteration: float = 0.05,
    limit: int | None = None,
    minutes: float | None = None,
) -> list[Request]:
    """One service of Azure's LLM inference trace (Patel et al., "Splitwise", ISCA 2024) as
    recorded, arriving at step ``floor((t - t_first) / seconds_per_iteration)`` (an assumption:
    state it with the results). ``limit`` keeps the first N requests, ``minutes`` those of the
    first that many minutes. Ids are ``{service}-{row}``. A timestamp keeps its date (an hour
    across midnight stays in order) and its UTC offset (else UTC). The trace records lengths,
    not prompts: its requests carry no prefix hashes and share nothing, so prefix caching and
    block reuse find no hit on it (Mooncake's traces carry hashes: :func:`mooncake_trace`)."""
    path = TRACE_DIR / AZURE_TRACES[check_choice("service", service, AZURE_TRACES)]
    requests = _trace_file(path, "azure", seconds_per_iteration, limit, minutes, service)
    if not requests:
        raise TraceFormatError(f"{path.name}: no requests (a header and no rows)")
    return requests


def mooncake_trace(
    trace: str = "conversation",
    seconds_per_iteration: float = 0.05,
    limit: int | None = None,
    minutes: float | None = None,
) -> list[Request]:
    """One of Mooncake's traces (Qin et al., FAST 2025) as recorded, arriving at step
    ``floor(t / seconds_per_iteration)``, ``limit`` and ``minutes`` as in :func:`azure_trace`,
    each prompt's 512-token block hashes in ``Request.prefix_hashes``. Ids are
    ``mooncake-{trace}-{line}``."""
    name = MOONCAKE_TRACES[check_choice("trace", trace, MOONCAKE_TRACES)]
    path = TRACE_DIR / MOONCAKE_FOLDER / name
    requests = _trace_file(
        path, "mooncake", seconds_per_iteration, limit, minutes, f"mooncake-{trace}"
    )
    if limit is None and minutes is None and not requests:
        raise TraceFormatError(f"{path.name}: no requests")
    return requests


def _trace_file(
    path: Path,
    kind: str,
    seconds_per_iteration: float,
    limit: int | None,
    minutes: float | None,
    prefix: str,
) -> list[Request]:
    """The requests of one of data/traces' files (:mod:`kvlab.run.trace_files`), ids
    ``{prefix}-{row index}``, those of the first ``minutes`` only."""
    seconds, limit, minutes = _replay_arguments(seconds_per_iteration, limit, minutes)
    rows = trace_rows(path, limit, kind)
    if minutes is not None:
        rows = itertools.takewhile(lambda row: row.seconds < minutes * 60, rows)
    index = itertools.count()
    return list(trace_requests(rows, seconds, lambda row: f"{prefix}-{next(index)}"))
