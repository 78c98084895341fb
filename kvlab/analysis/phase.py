"""Closed-form verdicts for the phase diagram: pool size x context length, per policy.

The question each point answers: one request of ``context_len`` prompt tokens and
``max_new_tokens`` new tokens arrives alone at an engine whose pool has ``pool_blocks`` pages
(configured max_seq_len, width policy and admission policy fixed). What happens?

- "ok": it finishes;
- "reject": it is rejected at the door (admission, or the prompt exceeds max_num_tokens);
- "stall": a resize returns False every pass; alone, the stall detector raises
  SchedulerDeadlock (beside others it starves);
- "crash": a resize raises PageIndexTooShort and the engine stops.

The verdicts are exact for ``Scheduler(manager, admission, max_num_tokens, stall_limit=...)``
with its defaults (non-chunked context), under either tier configuration (the automatic host
tier, the manager's default, or none: a lone request has no started victim to preempt or
evict, so the tier below the GPU changes nothing): a lone request's cache grows to
``context_len + extra`` tokens, then by one token per generation step up to
``context_len + extra + max_new_tokens - 1``. Each resize checks the page-index width before
the pool (docs/REFERENCE.md §3), so the first block count past ``min(width, pool)`` decides: past
the width first (or both at once) is a crash, past the pool first is a stall. tests/analysis/test_phase.py
checks sampled points against full ``simulate`` runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kvlab.analysis.presets import ENGINE_OUTCOMES, seed_geometry
from kvlab.core.arith import div_ceil
from kvlab.core.checks import (
    check_choice,
    check_instance,
    check_int,
    check_items,
    check_sequence,
    store_checked,
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
        if not isinstance(self.geometry, KVGeometry):
            raise TypeError(f"geometry must be a KVGeometry, got {type(self.geometry).__name__}")
        store_checked(self, "max_seq_len", check_int, low=1, high=1 << 30)
        store_checked(self, "max_new_tokens", check_int, low=0, high=1 << 30)
        store_checked(self, "max_num_tokens", check_int, low=1, high=1 << 30)
        store_checked(self, "num_extra_kv_tokens", check_int, low=0, high=1 << 20)


def _blocks(tokens, tokens_per_block: int):
    return div_ceil(tokens, tokens_per_block)


def _counts(name: str, values) -> np.ndarray:
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


#: The most cells one diagram computes: 2^22, about 200 MB of temporaries at the peak.
MAX_PHASE_CELLS = 1 << 22


def phase_verdicts(
    pool_blocks: Sequence[int],
    context_lens: Sequence[int],
    regime: str,
    setup: PhaseSetup = PhaseSetup(),
) -> np.ndarray:
    """Verdict codes (indices into ENGINE_OUTCOMES), shape (len(pool_blocks), len(context_lens))."""
    admission, width_policy = POLICIES[check_choice("regime", regime, TRTLLM_POLICIES)]
    check_instance("setup", setup, PhaseSetup)
    pool = _counts("pool_blocks", pool_blocks)[:, None]
    context = _counts("context_lens", context_lens)[None, :]
    if pool.size * context.size > MAX_PHASE_CELLS:
        raise ValueError(
            f"pool_blocks x context_lens must be at most {MAX_PHASE_CELLS:,} cells "
            f"(each a few int64 temporaries), got {pool.size:,} x {context.size:,}"
        )
    tpb, extra, new = (
        setup.geometry.tokens_per_block,
        setup.num_extra_kv_tokens,
        setup.max_new_tokens,
    )

    clamped = np.minimum(setup.max_seq_len, pool * tpb)
    width_len = clamped if width_policy == "clamped" else np.full_like(pool, setup.max_seq_len)
    width = _blocks(_blocks(width_len + extra + 1, tpb), WIDTH_ALIGNMENT) * WIDTH_ALIGNMENT
    context_blocks = _blocks(context + extra, tpb)
    final_blocks = _blocks(context + extra + max(new - 1, 0), tpb)

    grows_past = np.where(width <= pool, CRASH, STALL)  # which limit the growth meets first
    verdict = np.where(final_blocks <= np.minimum(width, pool), OK, grows_past)
    verdict = np.where(context_blocks > pool, STALL, verdict)
    verdict = np.where(context_blocks > width, CRASH, verdict)
    if admission == "capacity":
        demand = _blocks(context + new + extra, tpb)
        verdict = np.where((demand > pool) | (demand > width), REJECT, verdict)
    verdict = np.where(context > setup.max_num_tokens, REJECT, verdict)
    return verdict.astype(np.int8)


def phase_diagram(
    pool_blocks: Sequence[int],
    context_lens: Sequence[int],
    regimes: Sequence[str] = TRTLLM_POLICIES,
    setup: PhaseSetup = PhaseSetup(),
) -> dict[str, np.ndarray]:
    """``phase_verdicts`` for each regime."""
    regimes = [
        check_choice(f"regimes[{i}]", regime, TRTLLM_POLICIES)
        for i, regime in enumerate(check_items("regimes", regimes, "regime names"))
    ]
    pool_blocks, context_lens = (
        _counts("pool_blocks", pool_blocks),
        _counts("context_lens", context_lens),
    )
    return {regime: phase_verdicts(pool_blocks, context_lens, regime, setup) for regime in regimes}


def phase_scenario(
    pool_blocks: int,
    context_len: int,
    regime: str,
    setup: PhaseSetup = PhaseSetup(),
    stall_limit: int = 8,
):
    """The engine and the lone request one point of the diagram stands for: (scheduler,
    [request]), ready for ``simulate``."""
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
