"""Where the wall time of a 16-rank run goes: process start + init_process_group versus work.

Runs the issue-21470 scenario (policy "none/clamped": rank 0 raises, every rank shuts down) as gloo
rank processes ``--repeat`` times, and once in-process for comparison; prints JSON. Usage:
``python benchmarks/distributed_startup.py [--ranks 16] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from kvlab.run.distributed import run_ranks
from kvlab.run.rank_config import scenario_config
from kvlab.run.scenarios import load_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policy", default="none/clamped")
    args = parser.parse_args()
    config = scenario_config(load_scenario("issue-21470"), args.ranks, args.policy)
    runs = [run_ranks(config, progress=False) for _ in range(args.repeat)]
    threads = run_ranks(config, in_process=True, progress=False)
    iterations = max(r.end_step for r in runs[0].ranks)

    def median(attr):
        return round(statistics.median(getattr(r, attr) for r in runs), 3)

    print(
        json.dumps(
            {
                "benchmark": "distributed_startup",
                "ranks": args.ranks,
                "policy": args.policy,
                "backend": "gloo",
                "start_method": "fork",
                "cpus": os.cpu_count(),
                "repeat": args.repeat,
                "ended": runs[0].ended,
                "lockstep_iterations": iterations,
                "process": {
                    "wall_s": median("wall_s"),
                    "startup_s": median("startup_s"),  # process start + init_process_group
                    "work_s": median("work_s"),  # MIN all-reduce + lockstep iterations + results
                    "work_ms_per_iteration": round(
                        1000 * statistics.median(r.work_s for r in runs) / iterations, 2
                    ),
                },
                "in_process": {"wall_s": round(threads.wall_s, 3)},
            }
        )
    )


if __name__ == "__main__":
    main()
