"""kvlab's peers against the real engines' schedulers, workload by workload; prints one JSON line
per workload and a summary, and with ``--record`` stores the real runs.

The workloads are ``kvlab.analysis.peer_conformance``'s (``vllm_workloads()``,
``sglang_workloads()``). Each line gives
the requests, what the real engine did with them (finished, rejected, unfinished, preemptions,
steps), the requests whose status, start step, finish step or preemptions differ in kvlab's
peer, and the seconds each side took (the real engine: one process that ran them all, its
start-up included). Needs the engine's environment (``bash scripts/setup.sh ENGINE``);
``--stored`` compares against data/measurements/ENGINE-VERSION.json instead.

    python benchmarks/peer_conformance.py [--engine vllm|sglang] [--only PREFIX ...] [--stored]
    python benchmarks/peer_conformance.py --engine vllm --record   # rewrites the stored runs
"""

from __future__ import annotations

import argparse
import json
import time

from kvlab.analysis.peer_conformance import differences
from kvlab.backends.engines import ENGINES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=sorted(ENGINES), default="vllm")
    parser.add_argument("--only", nargs="*", default=[], help="workloads whose name starts so")
    parser.add_argument("--stored", action="store_true", help="compare with the stored runs")
    parser.add_argument("--record", action="store_true", help="store the real runs")
    args = parser.parse_args()
    if args.record and args.only:
        parser.error("--record stores every workload of the engine: leave out --only")
    engine, listed = ENGINES[args.engine]
    workloads = [w for w in listed() if not args.only or w.name.startswith(tuple(args.only))]
    start = time.perf_counter()
    if args.record:
        engine.record(
            workloads,
            command=f"python benchmarks/peer_conformance.py --engine {args.engine} --record",
        )
    if args.stored or args.record:
        stored = engine.stored_results()
        real = [stored[w.name] for w in workloads]
    else:
        real = engine.run_workloads(workloads)
    real_seconds = time.perf_counter() - start
    total = dict(
        workloads=len(workloads),
        requests=0,
        differing_requests=0,
        real_iterations=0,
        peer_seconds=0.0,
    )
    for workload, result in zip(workloads, real):
        start = time.perf_counter()
        peer = workload.run_peer()
        seconds = time.perf_counter() - start
        rows = differences(peer, result)
        summary = result.summary()
        differing = sorted({row["request_id"] for row in rows})
        print(
            json.dumps(
                dict(
                    benchmark="peer_conformance",
                    engine=args.engine,
                    workload=workload.name,
                    requests=len(workload.requests),
                    finished=summary["finished"],
                    rejected=summary["rejected"],
                    unfinished=summary["waiting"] + summary["running"],
                    preemptions=summary["recomputes"],
                    steps=result.end_step,
                    iterations=result.iterations,
                    error=None if result.error is None else type(result.error).__name__,
                    differing_requests=len(differing),
                    first_differences=rows[:3],
                    peer_seconds=round(seconds, 3),
                )
            ),
            flush=True,
        )
        total["requests"] += len(workload.requests)
        total["differing_requests"] += len(differing)
        total["real_iterations"] += result.iterations
        total["peer_seconds"] += seconds
    source = "stored" if args.stored else "recorded now" if args.record else "live"
    total.update(
        peer_seconds=round(total["peer_seconds"], 2),
        source=source,
        engine=args.engine,
        version=engine.version,
    )
    if not args.stored:
        total.update(real_seconds=round(real_seconds, 2))
    print(
        json.dumps(dict(benchmark="peer_conformance", measurement="summary", **total)), flush=True
    )


if __name__ == "__main__":
    main()
