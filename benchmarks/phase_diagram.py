"""Speed of the closed-form phase diagram; prints one JSON line.

A 64 x 64 grid (pool sizes 1..256 blocks of 32 tokens, context lengths 32..16384 tokens)
for the three regimes of kvlab.analysis.phase (none/clamped, none/configured, capacity), seed
geometry, configured max_seq_len 8192, 16 new tokens.

    python benchmarks/phase_diagram.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from kvlab.analysis.phase import phase_diagram
from kvlab.analysis.presets import ENGINE_OUTCOMES
from kvlab.sched.policies import TRTLLM_POLICIES

GRID = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="runs; the fastest is reported")
    args = parser.parse_args()
    pools = np.linspace(1, 256, GRID).round().astype(np.int64)
    contexts = np.geomspace(32, 16384, GRID).round().astype(np.int64)
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        diagram = phase_diagram(pools, contexts)
        best = min(best, time.perf_counter() - start)
    counts = {
        regime: {
            ENGINE_OUTCOMES[code]: int(n)
            for code, n in enumerate(np.bincount(grid.ravel(), minlength=len(ENGINE_OUTCOMES)))
        }
        for regime, grid in diagram.items()
    }
    print(
        json.dumps(
            {
                "benchmark": "phase_diagram",
                "grid": [GRID, GRID],
                "regimes": list(TRTLLM_POLICIES),
                "seconds": round(best, 6),
                "points_per_s": round(GRID * GRID * len(TRTLLM_POLICIES) / best),
                "verdict_counts": counts,
            }
        )
    )


if __name__ == "__main__":
    main()
