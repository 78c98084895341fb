"""Mooncake's conversation hour replayed with block reuse on and off; prints one JSON line.

The 12,031 requests of Mooncake's FAST'25 conversation trace (data/traces/mooncake-fast25,
Apache-2.0; one hour, mean prompt 12,035 tokens, 512-token prefix-block hashes) on
``kvlab.analysis.reuse.MOONCAKE_ENGINE`` (1.37 M tokens of KV: Llama-3.1-70B on eight 80 GB GPUs),
under TensorRT-LLM's three regimes with block reuse on (the real default) and off, and vLLM's
peer as it ships (prefix caching and async scheduling on). Each run's wall time, outcome, and
the prompt tokens a cache served against the unbounded-cache ceiling.

    python benchmarks/mooncake_replay.py [--trace conversation|synthetic] [--minutes M]
"""

from __future__ import annotations

import argparse
import json
import time

from kvlab.analysis.compare import run_policy
from kvlab.analysis.reuse import MOONCAKE_ENGINE, replay_with_reuse, reuse_ceiling, reuse_table
from kvlab.run.workload import mooncake_trace
from kvlab.sched.policies import TRTLLM_POLICIES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", choices=("conversation", "synthetic"), default="conversation")
    parser.add_argument(
        "--minutes", type=float, default=None, help="the trace's first minutes only"
    )
    args = parser.parse_args()
    requests = mooncake_trace(args.trace, minutes=args.minutes)
    ceiling = reuse_ceiling(requests)
    runs, seconds = [], {}
    for policy, reuse in [(p, on) for p in TRTLLM_POLICIES for on in (True, False)] + [
        ("vllm", True)
    ]:
        start = time.perf_counter()
        if policy == "vllm":  # the peer's own cache, on as vLLM ships it
            results = {(policy, reuse): run_policy(policy, requests, MOONCAKE_ENGINE, 1_000_000)}
        else:
            results = replay_with_reuse(requests, (policy,), reuse=(reuse,))
        seconds[(policy, reuse)] = time.perf_counter() - start
        (row,) = reuse_table(results, ceiling)
        runs.append(dict(row, seconds=round(seconds[(policy, reuse)], 2)))
    default_four = [seconds[(p, True)] for p in TRTLLM_POLICIES] + [seconds[("vllm", True)]]
    print(
        json.dumps(
            {
                "benchmark": "mooncake_replay",
                "trace": args.trace,
                "requests": len(requests),
                "engine": MOONCAKE_ENGINE.describe(),
                "ceiling": {
                    "blocks": ceiling.blocks,
                    "cached_blocks": ceiling.cached,
                    "prompt_tokens": ceiling.tokens,
                    "cached_tokens": ceiling.cached_tokens,
                    "cached_share": round(ceiling.cached_tokens / ceiling.tokens, 4),
                },
                "four_policies_seconds": round(sum(default_four), 2),
                "runs": [
                    {k: (round(v, 4) if isinstance(v, float) else v) for k, v in run.items()}
                    for run in runs
                ],
            }
        )
    )


if __name__ == "__main__":
    main()
