"""Closed-form verdicts for the phase diagram: what a lone request of ``context_len`` prompt
tokens meets on a pool of ``pool_blocks`` pages, per policy. Each resize checks the row width
before the pool (docs/REFERENCE.md §3), so whichever the growth passes first decides. Exact for
``Scheduler`` with non-chunked context under either tier (a lone request evicts nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kvlab.analysis.presets import ENGINE_OUTCOMES, check_names, seed_geometry
from kvlab.core.arith import div_ceil
from kvlab.core.checks import (
    check_choice,
    check_instance,
    check_int,
    check_sequence,
    store_param,
)
from kvlab.core.geometry import KVGeometry
from kvlab.core.manager import KVCacheManager
from kvlab.core.page_index import WIDTH_ALIGNMENT
from kvlab.core.request import Request
from kvlab.sched.policies import POLICIES, TRTLLM_POLICIES
from kvlab.sched.scheduler import Scheduler

OK, REJECT, STALL, CRASH = range(len(ENGINE_OUTCOMES))  # the codes: indices into ENGINE_OUTCOMES


@dataclass(frozen=True)
class PhaseSetup:
    """Everything but the two axes; defaults are the seed's RTX 5080 experiment."""

    geometry: KVGeometry = field(default_factory=seed_geometry)
    max_seq_len: int = 8192  # configured
    max_new_tokens: int = 16
    max_num_tokens: int = 1 << 20  # the token budget (non-chunked: also the prompt limit)
    num_extra_kv_tokens: int = 0

    def __post_init__(self):
        check_instance("geometry", self.geometry, KVGeometry)
        for name in ("max_seq_len", "max_new_tokens", "max_num_tokens", "num_extra_kv_tokens"):
            store_param(self, name)


#: Pool sizes or context lengths: a sequence of ints, or a one-dimensional int array.
Counts = Sequence[int] | np.ndarray


def _counts(name: str, values: Counts) -> np.ndarray:
    """``values`` as int64, each an int in [1, 2^30] (an int array passes whole, fast)."""
    if isinstance(values, np.ndarray) and values.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got an array of shape {values.shape}")
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        if values.size and (values.min() < 1 or values.max() > 1 << 30):
            raise ValueError(
                f"{name} must hold ints in [1, {1 << 30}], got {values.min()}..{values.max()}"
            )
        return values.astype(np.int64, copy=False)
    return np.asarray(check_sequence(name, values, check_int, low=1, high=1 << 30), dtype=np.int64)


#: The most cells one diagram computes (about 200 MB of temporaries at the peak).
MAX_PHASE_CELLS = 1 << 22


def phase_verdicts(
    pool_blocks: Counts,
    context_lens: Counts,
    regime: str,
    setup: PhaseSetup = PhaseSetup(),
) -> np.ndarray:
    """Verdict codes (indices into ENGINE_OUTCOMES), one row per pool size."""
    admission, width_policy = POLICIES[check_choice("regime", regime, TRTLLM_POLICIES)]
    check_instance("setup", setup, PhaseSetup)
    pool = _counts("pool_blocks", pool_blocks)[:, None]
    context = _counts("context_lens", context_lens)[None, :]
    if pool.size * context.size > MAX_PHASE_CELLS:
        raise ValueError(
            f"pool_blocks x context_lens must be at most {MAX_PHASE_CELLS:,} cells "
            f"(each a few int64 temporaries), got {pool.size:,} x {context.size:,}"
        )
    tpb = setup.geometry.tokens_per_block
    extra, new = setup.num_extra_kv_tokens, setup.max_new_tokens

    clamped = np.minimum(setup.max_seq_len, pool * tpb)
    width_len = clamped if width_policy == "clamped" else np.full_like(pool, setup.max_seq_len)
    width = div_ceil(div_ceil(width_len + extra + 1, tpb), WIDTH_ALIGNMENT) * WIDTH_ALIGNMENT
    context_blocks = div_ceil(context + extra, tpb)
    final_blocks = div_ceil(context + extra + max(new - 1, 0), tpb)

    grows_past = np.where(width <= pool, CRASH, STALL)  # which limit the growth meets first
    verdict = np.where(final_blocks <= np.minimum(width, pool), OK, grows_past)
    verdict = np.where(context_blocks > pool, STALL, verdict)
    verdict = np.where(context_blocks > width, CRASH, verdict)
    if admission == "capacity":
        demand = div_ceil(context + new + extra, tpb)
        verdict = np.where((demand > pool) | (demand > width), REJECT, verdict)
    verdict = np.where(context > setup.max_num_tokens, REJECT, verdict)
    return verdict.astype(np.int8)


def phase_diagram(
    pool_blocks: Counts,
    context_lens: Counts,
    regimes: Sequence[str] = TRTLLM_POLICIES,
    setup: PhaseSetup = PhaseSetup(),
) -> dict[str, np.ndarray]:
    """``phase_verdicts`` for each regime."""
    regimes = check_names("regimes", regimes, TRTLLM_POLICIES, "regime names")
    pools, contexts = _counts("pool_blocks", pool_blocks), _counts("context_lens", context_lens)
    return {regime: phase_verdicts(pools, contexts, regime, setup) for regime in regimes}


def phase_scenario(
    pool_blocks: int,
    context_len: int,
    regime: str,
    setup: PhaseSetup = PhaseSetup(),
    stall_limit: int = 8,
):
    """(scheduler, [request]): one point of the diagram, ready for ``simulate``."""
    admission, width_policy = POLICIES[check_choice("regime", regime, TRTLLM_POLICIES)]
    pool_blocks = check_int("pool_blocks", pool_blocks, low=1, high=1 << 30)
    context_len = check_int("context_len", context_len, low=1, high=1 << 30)
    check_instance("setup", setup, PhaseSetup)
    manager = KVCacheManager.expecting_clamp(
        setup.geometry,
        pool_blocks * setup.geometry.bytes_per_block,
        setup.max_seq_len,
        max_batch_size=1,
        page_index_policy=width_policy,
        num_extra_kv_tokens=setup.num_extra_kv_tokens,
    )
    scheduler = Scheduler(
        manager,
        admission=admission,
        max_num_tokens=setup.max_num_tokens,
        max_batch_size=1,
        stall_limit=stall_limit,
    )
    return scheduler, [Request("probe", context_len, setup.max_new_tokens)]
