"""Request generators: fixed lists, seeded Poisson arrivals and length distributions, and real
production traffic (:func:`azure_trace`, :func:`mooncake_trace`).

Every random choice goes through ``numpy.random.default_rng(seed)``: the same arguments and
seed give the same requests, on every platform numpy supports.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Union

import numpy as np

from kvlab.core.checks import MAX_COUNT, check_choice, check_float, check_int, store_checked
from kvlab.core.paths import DATA_DIR
from kvlab.core.request import Request


class LengthDistribution:
    """A distribution of token counts; ``sample(rng, n)`` returns n ints >= 0."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True)
class Constant(LengthDistribution):
    """Always ``value`` tokens."""

    value: int

    def __post_init__(self):
        store_checked(self, "value", check_int, low=0, high=MAX_COUNT)

    def sample(self, rng, n):
        return np.full(n, self.value, dtype=np.int64)


@dataclass(frozen=True)
class Uniform(LengthDistribution):
    """Integers uniform in [low, high], both included."""

    low: int
    high: int

    def __post_init__(self):
        store_checked(self, "low", check_int, low=0, high=MAX_COUNT)
        store_checked(self, "high", check_int, low=self.low, high=MAX_COUNT)

    def sample(self, rng, n):
        return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)


@dataclass(frozen=True)
class LogNormal(LengthDistribution):
    """exp(Normal(ln median, sigma)), rounded and clipped to [low, high]: the long-tailed
    shape real prompt and output lengths have."""

    median: float
    sigma: float
    low: int = 1
    high: int = 1 << 20

    def __post_init__(self):
        store_checked(self, "median", check_float, low=0.0, high=float(MAX_COUNT), low_open=True)
        store_checked(self, "sigma", check_float, low=0.0, high=10.0)
        store_checked(self, "low", check_int, low=0, high=MAX_COUNT)
        store_checked(self, "high", check_int, low=self.low, high=MAX_COUNT)

    def sample(self, rng, n):
        values = rng.lognormal(math.log(self.median), self.sigma, size=n)
        return np.clip(np.rint(values), self.low, self.high).astype(np.int64)


Lengths = Union[int, LengthDistribution]


def _distribution(name: str, lengths: Lengths) -> LengthDistribution:
    if isinstance(lengths, LengthDistribution):
        return lengths
    if isinstance(lengths, bool) or not isinstance(lengths, int):
        raise TypeError(f"{name} must be an int or a LengthDistribution (Constant, Uniform, "
                        f"LogNormal), got {lengths!r}")
    return Constant(lengths)


def fixed(specs: Iterable[Sequence[int]], id_prefix: str = "r") -> List[Request]:
    """Requests from (prompt_len, max_new_tokens[, arrival_step]) tuples, named
    ``{id_prefix}0``, ``{id_prefix}1``, ..."""
    if isinstance(specs, (str, bytes)) or not hasattr(specs, "__iter__"):
        raise TypeError(f"specs must be an iterable of (prompt_len, max_new_tokens[, arrival_step]) "
                        f"tuples, got {specs!r:.60}")
    requests = []
    for i, spec in enumerate(specs):
        if not hasattr(spec, "__len__") or not 2 <= len(spec) <= 3:
            raise ValueError(f"specs[{i}] must be (prompt_len, max_new_tokens[, arrival_step]), "
                             f"got {spec!r}")
        requests.append(Request(f"{id_prefix}{i}", *spec))
    return requests


def poisson_arrivals(num_requests: int, rate: float, seed: int) -> np.ndarray:
    """Arrival steps of a Poisson process of ``rate`` requests per step, starting at step 0."""
    num_requests = check_int("num_requests", num_requests, low=0, high=10_000_000)
    rate = check_float("rate", rate, low=0.0, high=1e6, low_open=True)
    rng = np.random.default_rng(check_int("seed", seed, low=0, high=2**63 - 1))
    times = np.cumsum(rng.exponential(1.0 / rate, size=num_requests))
    if num_requests:
        times -= times[0]
        if not times[-1] <= MAX_COUNT:  # also inf: the steps would not fit an int64
            raise ValueError(f"rate={rate:g} spreads {num_requests} arrivals over {times[-1]:.3g} "
                             f"steps, beyond the last step kvlab counts ({MAX_COUNT}); raise rate")
    return np.floor(times).astype(np.int64)


def poisson_workload(num_requests: int, rate: float, prompt_len: Lengths,
                     max_new_tokens: Lengths, seed: int = 0, id_prefix: str = "r") -> List[Request]:
    """``num_requests`` requests arriving as a Poisson process of ``rate`` per step, with
    lengths drawn from the given distributions (an int means a constant). Prompt lengths are
    at least 1."""
    prompts_dist = _distribution("prompt_len", prompt_len)
    outputs_dist = _distribution("max_new_tokens", max_new_tokens)
    arrivals = poisson_arrivals(num_requests, rate, seed)
    rng = np.random.default_rng([seed, 1])  # independent of the arrival stream
    prompts = np.maximum(prompts_dist.sample(rng, num_requests), 1)
    outputs = outputs_dist.sample(rng, num_requests)
    return [Request(f"{id_prefix}{i}", int(p), int(g), int(a))
            for i, (p, g, a) in enumerate(zip(prompts, outputs, arrivals))]


#: The benchmark's standard mixed workload (benchmarks/scheduler_throughput.py).
STANDARD_MIXED = dict(num_requests=2000, rate=0.3,
                      prompt_len=LogNormal(median=512, sigma=1.0, low=16, high=8192),
                      max_new_tokens=LogNormal(median=128, sigma=0.8, low=1, high=2048))


def standard_mixed_workload(seed: int = 0) -> List[Request]:
    """2,000 requests, Poisson arrivals at 0.3 per step (near saturation for 64 running requests
    on a 64k-token pool: a few recompute pauses), log-normal prompts (median 512,
    16..8192 tokens) and outputs (median 128, 1..2048 tokens)."""
    return poisson_workload(seed=seed, **STANDARD_MIXED)


# --- a real hour: Azure's public LLM inference trace (data/traces/, CC-BY 4.0) --------------------

#: The trace files under data/traces/ (Azure Public Dataset, 2023; attribution in its README).
TRACE_DIR = DATA_DIR / "traces"
AZURE_TRACES = {"conv": "AzureLLMInferenceTrace_conv.csv", "code": "AzureLLMInferenceTrace_code.csv"}


def _seconds_since_midnight(timestamp: str) -> float:
    """``2023-11-16 18:15:46.6805900`` -> seconds since that day's midnight (7 fractional
    digits, more than ``datetime.fromisoformat`` of Python 3.10 reads)."""
    clock = timestamp.split(" ")[1]
    hours, minutes, seconds = clock.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _check_replay(seconds_per_iteration: float, limit: Optional[int], minutes: Optional[float]):
    """A trace replay's arguments, checked: (seconds_per_iteration, limit, minutes)."""
    seconds_per_iteration = check_float("seconds_per_iteration", seconds_per_iteration, low=0.0,
                                        high=3600.0, low_open=True)
    if limit is not None:
        limit = check_int("limit", limit, low=1, high=10_000_000)
    if minutes is not None:
        minutes = check_float("minutes", minutes, low=0.0, high=24 * 60.0, low_open=True)
    return seconds_per_iteration, limit, minutes


def azure_trace(service: str = "conv", seconds_per_iteration: float = 0.05,
                limit: Optional[int] = None, minutes: Optional[float] = None) -> List[Request]:
    """The requests of one service of Azure's LLM inference trace (Patel et al., "Splitwise",
    ISCA 2024; data/traces/README.md), as recorded: prompt and output lengths unchanged, and
    arrival steps ``floor((t - t_first) / seconds_per_iteration)``, one scheduler iteration
    taking ``seconds_per_iteration`` seconds (an assumption: state it with the results). Nothing
    is drawn, so there is no seed. ``limit`` keeps the first N requests, ``minutes`` those
    arriving in the first that many minutes. Ids are ``{service}-{row}``."""
    path = TRACE_DIR / AZURE_TRACES[check_choice("service", service, AZURE_TRACES)]
    seconds_per_iteration, limit, minutes = _check_replay(seconds_per_iteration, limit, minutes)
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(itertools.islice(csv.DictReader(handle), limit))
    start = _seconds_since_midnight(rows[0]["TIMESTAMP"])
    seconds = [_seconds_since_midnight(row["TIMESTAMP"]) - start for row in rows]
    return [Request(f"{service}-{i}", int(row["ContextTokens"]), int(row["GeneratedTokens"]),
                    int(t // seconds_per_iteration))
            for i, (row, t) in enumerate(zip(rows, seconds))
            if minutes is None or t < minutes * 60]


# --- Mooncake's FAST'25 traces (data/traces/mooncake-fast25/, Apache-2.0) ------------------------

MOONCAKE_TRACES = {"conversation": "conversation_trace.jsonl", "synthetic": "synthetic_trace.jsonl"}


def mooncake_trace(trace: str = "conversation", seconds_per_iteration: float = 0.05,
                   limit: Optional[int] = None, minutes: Optional[float] = None) -> List[Request]:
    """The requests of one of Mooncake's traces (Qin et al., FAST 2025;
    data/traces/mooncake-fast25/README.md): prompt and output lengths as recorded, arrival steps
    ``floor(t / seconds_per_iteration)`` (``t``: the recorded millisecond timestamp, in seconds),
    ``limit`` and ``minutes`` as in :func:`azure_trace`, each prompt's 512-token block hashes in
    ``Request.prefix_hashes``. Ids are ``mooncake-{trace}-{line}``."""
    path = TRACE_DIR / "mooncake-fast25" / MOONCAKE_TRACES[check_choice("trace", trace, MOONCAKE_TRACES)]
    seconds_per_iteration, limit, minutes = _check_replay(seconds_per_iteration, limit, minutes)
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in itertools.islice(handle, limit)]
    return [Request(f"mooncake-{trace}-{i}", row["input_length"], row["output_length"],
                    int(row["timestamp"] / 1000 // seconds_per_iteration),
                    prefix_hashes=tuple(row["hash_ids"]))
            for i, row in enumerate(rows)
            if minutes is None or row["timestamp"] < minutes * 60_000]
