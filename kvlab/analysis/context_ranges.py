"""What a lone request of each context length meets, as ranges of lengths: V2's under each
policy (:func:`kvlab.analysis.phase.phase_verdicts` evaluated where a verdict can change) and
V1's (a door at max_num_tokens, the worker's at the clamped max_seq_len).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvlab.analysis.deployment_spec import Deployment
from kvlab.analysis.phase import PhaseSetup, phase_verdicts
from kvlab.analysis.presets import ENGINE_OUTCOMES


@dataclass(frozen=True)
class Segment:
    """Context lengths ``low..high`` (prompt tokens) and what each meets alone."""

    low: int
    high: int
    verdict: str


def change_points(setup: PhaseSetup, max_len: int) -> np.ndarray:
    """The context lengths in 1..max_len where a lone request's verdict can change: where one of
    its block counts does, and past max_num_tokens (:func:`phase_verdicts` counts blocks)."""
    tpb = setup.geometry.tokens_per_block
    extra, new = setup.num_extra_kv_tokens, setup.max_new_tokens
    ks = np.arange(0, (max_len + extra + new) // tpb + 2, dtype=np.int64) * tpb
    points = np.sort(
        np.concatenate(
            [
                [1, setup.max_num_tokens + 1],
                ks - extra + 1,
                ks - extra - max(new - 1, 0) + 1,
                ks - extra - new + 1,
            ]
        )
    )
    points = points[(points >= 1) & (points <= max_len)]
    return points[np.concatenate([[True], np.diff(points) != 0])]


def v2_segments(
    pool_blocks: int, regime: str, setup: PhaseSetup, points: np.ndarray, max_len: int
) -> tuple[Segment, ...]:
    """The verdicts of context lengths 1..max_len as ranges (``points``: :func:`change_points`)."""
    codes = phase_verdicts([pool_blocks], points, regime, setup)[0]
    starts = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
    ends = np.concatenate([points[starts[1:]] - 1, [max_len]])
    return tuple(
        Segment(int(points[s]), int(e), ENGINE_OUTCOMES[codes[s]]) for s, e in zip(starts, ends)
    )


def v1_segments(deployment: Deployment, clamped_max_seq_len: int) -> tuple[Segment, ...]:
    """A lone request under V1: rejected over ``max_num_tokens`` (chunked prefill off) and from
    the clamped max_seq_len on (``_deduce_max_tokens``); the rest run, their output trimmed."""
    d = deployment
    limit = clamped_max_seq_len - 1
    if not d.chunked_prefill:
        limit = min(limit, d.max_num_tokens)
    end = d.configured_max_seq_len
    if limit >= end:
        return (Segment(1, end, "ok"),)
    if limit < 1:
        return (Segment(1, end, "reject"),)
    return Segment(1, limit, "ok"), Segment(limit + 1, end, "reject")
