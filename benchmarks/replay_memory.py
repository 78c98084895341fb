"""kvlab replay on synthetic traces of growing length, each in its own process; prints one
JSON line: per length, the wall time and the process's peak resident memory.

Each trace is a file of kvlab's own format (docs/TRACES.md): Poisson arrivals at 20 a second,
prompts of 50-4,000 tokens, outputs of 5-300 (seeded), replayed by ``kvlab replay`` on
Llama-3.1-8B on one H100 (plan's pool) under one policy. Streaming keeps the peak flat: a run
holds the requests in flight and at most FEED read ahead, not the file.

    python benchmarks/replay_memory.py [--rows 10000 100000 1000000] [--policy capacity]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: ``python -m kvlab ARGS`` that prints its peak resident memory (KiB, Linux) as it exits.
PEAK_REPORTING_KVLAB = (
    "import atexit, resource, runpy, sys; "
    "atexit.register(lambda: print('PEAK_RSS_KIB', "
    "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)); "
    "sys.argv[0] = 'kvlab'; runpy.run_module('kvlab', run_name='__main__')"
)


def write_trace(path: Path, rows: int, seed: int = 1) -> None:
    rng, t = random.Random(seed), 0.0
    with path.open("w") as handle:
        handle.write("arrival_s,prompt_tokens,output_tokens\n")
        for _ in range(rows):
            t += rng.expovariate(20.0)
            handle.write(f"{t:.3f},{rng.randint(50, 4000)},{rng.randint(5, 300)}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--policy", default="capacity")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for rows in args.rows:
            path = Path(folder) / f"trace-{rows}.csv"
            write_trace(path, rows)
            command = [sys.executable, "-c", PEAK_REPORTING_KVLAB, "replay", "--trace", str(path)]
            command += ["--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--engine", "trtllm"]
            command += ["--policy", args.policy, "--json"]
            start = time.perf_counter()
            env = {**os.environ, "TQDM_DISABLE": "1"}
            proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            wall = time.perf_counter() - start
            if proc.returncode not in (0, 3):
                sys.exit(f"kvlab replay exited {proc.returncode}: {proc.stderr[-400:]}")
            run = json.loads(proc.stdout)["runs"][0]
            peak_kib = int(proc.stderr.rsplit("PEAK_RSS_KIB ", 1)[1].split()[0])
            runs.append(
                dict(
                    rows=rows,
                    wall_s=round(wall, 2),
                    finished=run["finished"],
                    peak_rss_mib=round(peak_kib / 1024, 1),
                )
            )
    print(json.dumps(dict(benchmark="replay_memory", policy=args.policy, runs=runs)))


if __name__ == "__main__":
    main()
