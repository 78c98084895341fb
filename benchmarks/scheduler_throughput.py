"""Scheduler speed, side by side with nano-vllm's, its scaling, and a real hour of traffic.

Prints one JSON line per measurement:

- ``peer_workload``: nano-vllm's own benchmark workload, drawn the way its script draws it
  (``random.Random(0)``; per request ``p = randint(64, 2048)``, ``o = randint(16, 256)``, then
  ``p`` draws of ``randrange(1, 50000)``, its token ids, so both see the same lengths), all
  arriving at step 0; 64 requests at most running, a pool of 65,536 tokens in 256-token blocks,
  16,384 tokens a pass, admission "capacity", chunked prefill. ``--peer-bench PATH`` runs
  nano-vllm's timing script (its sources in ``NANO_VLLM_SRC``) in the same shell on the same
  workload and prints the ratio of seconds (kvlab / nano-vllm). The same line times kvlab's vLLM
  peer (``VllmScheduler``, vLLM's own loop; nano-vllm follows vLLM's) on the same engine, with
  prefix caching and async scheduling off (``vllm_peer``, and ``vllm_peer_ratio_to_peer`` beside
  nano-vllm) and as vLLM ships, both on (``vllm_peer_as_shipped``).
- ``scaling``: the same distributions at each of ``--sizes`` requests: seconds per 1,000
  requests at each size, and the ratio largest / smallest (flat: the cost is linear).
- ``standard_mixed``: kvlab's own mixed workload (``kvlab.run.workload.standard_mixed_workload``).
- ``pass_cost``: what one pass costs on the teaching path with 1 and with 64 requests decoding
  and none arriving or ending, for TensorRT-LLM's loop and vLLM's (as shipped; and with caching
  and async off) and SGLang's peers on the Azure pool below (``--pass-cost-passes`` passes):
  the floor under every pass the fast path still steps.
- ``azure_hour`` (``--trace``): Azure's conversation hour (data/traces/, 19,366 requests), one
  scheduler iteration taken as ``--seconds-per-iteration`` seconds, replayed under each
  admission policy and vLLM's and SGLang's peers on one GPU's pool (``--pool-gib`` GiB of KV for a Llama-3.1-8B-shaped model in
  bf16, 128 KiB a token, 32-token pages; 64 requests active, 8,192 tokens a pass, chunked): wall
  time, requests per second, goodput, waits and rejections per policy.

The pools are real torch tensors and the page-index tables real int32 tensors; their pages are
stored at a few bytes each (a one-layer toy geometry with the same tokens per page): the
scheduler's cost does not depend on the bytes behind a page, and a 20 GiB pool would not fit this
machine's memory.

Each kvlab figure is given twice: fast-forwarded (``simulate``'s default,
kvlab.run.fast_forward: the passes between two events applied at once, and for the TensorRT-LLM
loop the passes it steps answering a step within a page and a certainly refused first chunk from
one comparison each) and stepped pass by pass on the teaching path (``fast_forward=False``),
with ``identical``: whether both gave every request the same status, steps, counts and reason
and the same per-step trace, and ``passes_stepped``: the fast path's passes not applied in a
stretch. Where the time goes now: the passes with an event (an admission, a
finish, a preemption) are stepped, each a walk over the running requests.

    python benchmarks/scheduler_throughput.py [--sizes 1000 4000 16000 64000] [--trace]
                                              [--peer-bench PATH] [--repeat N]
                                              [--pass-cost-passes N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from functools import partial

from kvlab import (
    KVCacheManager,
    KVGeometry,
    Request,
    Scheduler,
    SglangScheduler,
    SglangServerArgs,
    VllmEngineArgs,
    VllmScheduler,
)
from kvlab.analysis.peer_conformance import CACHING_AND_ASYNC_OFF
from kvlab.run.simulation import Engine
from kvlab.run.workload import STANDARD_MIXED, azure_trace, standard_mixed_workload
from kvlab.sched.admission import ADMISSION_POLICIES
from kvlab.sched.vllm import estimated_max_model_len

#: nano-vllm's benchmark engine.
PEER = dict(max_running=64, pool_tokens=65536, tokens_per_block=256, max_num_tokens=16384)
#: Llama-3.1-8B's KV geometry (32 layers, 8 KV heads, head_dim 128, bf16): 128 KiB a token.
LLAMA_8B = dict(num_layers=32, num_kv_heads=8, head_dim=128, dtype="bfloat16", tokens_per_block=32)


def peer_workload(num_requests: int, seed: int = 0) -> list[Request]:
    """nano-vllm's benchmark requests, drawn as its script draws them (module docstring)."""
    rng = random.Random(seed)
    requests = []
    for i in range(num_requests):
        prompt_len, max_new_tokens = rng.randint(64, 2048), rng.randint(16, 256)
        for _ in range(prompt_len):  # the peer's token ids, drawn so both see the same lengths
            rng.randrange(1, 50000)
        requests.append(Request(f"r{i}", prompt_len, max_new_tokens, 0))
    return requests


def small(tokens_per_block: int) -> KVGeometry:
    """A geometry of ``tokens_per_block`` tokens per page, stored at a few bytes a page."""
    return KVGeometry(
        num_layers=1, num_kv_heads=1, head_dim=1, dtype="float16", tokens_per_block=tokens_per_block
    )


def pool(
    geometry: KVGeometry, num_blocks: int, max_seq_len: int, max_batch_size: int
) -> KVCacheManager:
    """A manager of ``num_blocks`` pages of ``geometry``'s tokens per page, stored small."""
    storage = small(geometry.tokens_per_block)
    return KVCacheManager(
        storage,
        quota_bytes=num_blocks * storage.bytes_per_block,
        max_seq_len=max_seq_len,
        max_batch_size=max_batch_size,
    )


def vllm_engine(
    tokens_per_block: int,
    num_blocks: int,
    max_seq_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    **switches: bool,
) -> VllmScheduler:
    """kvlab's vLLM peer on such a pool, chunked, max_model_len at most vLLM's estimate; as vLLM
    ships (prefix caching and async scheduling on) unless ``switches`` say otherwise."""
    storage = small(tokens_per_block)
    return VllmScheduler(
        VllmEngineArgs(
            storage,
            num_blocks,
            min(max_seq_len, estimated_max_model_len(storage, num_blocks)),
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            **switches,
        )
    )


def peer_engine() -> Scheduler:
    tpb = PEER["tokens_per_block"]
    manager = pool(
        KVGeometry(1, 1, 1, tokens_per_block=tpb),
        PEER["pool_tokens"] // tpb,
        PEER["pool_tokens"],
        PEER["max_running"],
    )
    return Scheduler(
        manager,
        admission="capacity",
        max_num_tokens=PEER["max_num_tokens"],
        max_batch_size=PEER["max_running"],
        chunked_prefill=True,
    )


def vllm_peer_engine(**switches: bool) -> VllmScheduler:
    """kvlab's vLLM peer on nano-vllm's engine (nano-vllm's scheduler follows vLLM's)."""
    return vllm_engine(
        PEER["tokens_per_block"],
        PEER["pool_tokens"] // PEER["tokens_per_block"],
        PEER["pool_tokens"],
        PEER["max_running"],
        PEER["max_num_tokens"],
        **switches,
    )


def timed(requests: list[Request], build, repeat: int, fast_forward: bool = True):
    """The fastest of ``repeat`` runs: (seconds, result, passes stepped)."""
    best = None
    for _ in range(repeat):
        scheduler = build()
        start = time.perf_counter()  # timed as simulate() is: the engine made, run, read
        engine = Engine(scheduler, requests, fast_forward=fast_forward)
        engine.execute_until(1 << 40)
        result = engine.result(1 << 40)
        elapsed = time.perf_counter() - start
        skipped = 0 if engine.fast_forward is None else engine.fast_forward.skipped
        if best is None or elapsed < best[0]:
            best = (elapsed, result, result.iterations - skipped)
    return best


def pass_cost(build, decoders: int, passes: int) -> float:
    """Microseconds a stepped pass takes on the teaching path with ``decoders`` requests
    decoding and none arriving or ending (prompts of 64 tokens; a cache takes a page as it
    fills one)."""
    requests = [Request(f"d{i}", 64, passes + 10, 0) for i in range(decoders)]
    engine = Engine(build(), requests, fast_forward=False)
    engine.execute_until(2)  # the prefill passes
    start, first = time.perf_counter(), engine.iterations
    engine.execute_until(passes + 2)
    return (time.perf_counter() - start) / (engine.iterations - first) * 1e6


def run_peer(peer_bench: str, num_requests: int, repeat: int) -> dict:
    """nano-vllm's own timing script, in a subprocess of this shell: the fastest of ``repeat``
    runs, as kvlab's own figure is."""
    runs = []
    for _ in range(repeat):
        proc = subprocess.run(
            [sys.executable, peer_bench, str(num_requests)],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ),
        )
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return min(runs, key=lambda run: run["seconds"])


def azure_engine(policy: str, pool_gib: float, **switches: bool):
    geometry = KVGeometry(**LLAMA_8B)
    max_seq_len, blocks = 131072, int(pool_gib * (1 << 30)) // geometry.bytes_per_block
    if policy == "vllm":  # as vLLM ships unless ``switches`` say otherwise
        return vllm_engine(geometry.tokens_per_block, blocks, max_seq_len, 64, 8192, **switches)
    if policy == "sglang":  # the same pool in one-token pages; SGLang's default chunk, 8,192 a pass
        return SglangScheduler(
            SglangServerArgs(
                small(1),
                blocks * geometry.tokens_per_block,
                max_seq_len,
                max_running_requests=64,
                max_prefill_tokens=8192,
            )
        )
    return Scheduler(
        pool(geometry, blocks, max_seq_len, 64),
        admission=policy,
        max_num_tokens=8192,
        max_batch_size=64,
        chunked_prefill=True,
    )


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="peer workload size")
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 4000, 16000, 64000])
    parser.add_argument("--repeat", type=int, default=3, help="runs; the fastest is reported")
    parser.add_argument("--peer-bench", help="nano-vllm's timing script (NANO_VLLM_SRC set)")
    parser.add_argument("--trace", action="store_true", help="replay Azure's conversation hour")
    parser.add_argument("--trace-limit", type=int, default=None, help="first N trace requests")
    parser.add_argument("--pool-gib", type=float, default=16.0)
    parser.add_argument("--seconds-per-iteration", type=float, default=0.05)
    parser.add_argument(
        "--pass-cost-passes", type=int, default=3000, help="passes timed for pass_cost"
    )
    args = parser.parse_args()

    requests = peer_workload(args.requests)
    seconds, result, passes_stepped = timed(requests, peer_engine, args.repeat)
    seconds_stepped, stepped, _ = timed(requests, peer_engine, args.repeat, fast_forward=False)
    line = {
        "benchmark": "scheduler_throughput",
        "measurement": "peer_workload",
        "requests": args.requests,
        "engine": PEER,
        "iterations": result.iterations,
        "passes_stepped": passes_stepped,
        "finished": result.summary()["finished"],
        "seconds": round(seconds, 3),
        "seconds_stepped": round(seconds_stepped, 3),
        "identical": result.outcome() == stepped.outcome(),
        "requests_per_s": round(args.requests / seconds, 1),
        "iterations_per_s": round(result.iterations / seconds, 1),
        **machine(),
    }
    # caching and async off, the loop nano-vllm's follows; then as vLLM ships
    seconds_vllm, result_vllm, _ = timed(
        requests, partial(vllm_peer_engine, **CACHING_AND_ASYNC_OFF), args.repeat
    )
    seconds_shipped, result_shipped, _ = timed(requests, vllm_peer_engine, args.repeat)
    line.update(
        vllm_peer=dict(
            seconds=round(seconds_vllm, 3),
            iterations=result_vllm.iterations,
            finished=result_vllm.summary()["finished"],
        ),
        vllm_peer_as_shipped=dict(
            seconds=round(seconds_shipped, 3),
            iterations=result_shipped.iterations,
            finished=result_shipped.summary()["finished"],
        ),
    )
    if args.peer_bench:
        peer = run_peer(args.peer_bench, args.requests, args.repeat)
        line.update(
            peer=peer,
            ratio_to_peer=round(seconds / peer["seconds"], 2),
            stepped_ratio_to_peer=round(seconds_stepped / peer["seconds"], 2),
            vllm_peer_ratio_to_peer=round(seconds_vllm / peer["seconds"], 2),
        )
    print(json.dumps(line), flush=True)

    per_1000 = {}
    for size in args.sizes:
        seconds = timed(peer_workload(size), peer_engine, 1)[0]
        per_1000[size] = round(seconds / size * 1000, 3)
    print(
        json.dumps(
            {
                "benchmark": "scheduler_throughput",
                "measurement": "scaling",
                "seconds_per_1000_requests": per_1000,
                "largest_over_smallest": round(
                    per_1000[max(per_1000)] / per_1000[min(per_1000)], 2
                ),
                **machine(),
            }
        ),
        flush=True,
    )

    mixed = standard_mixed_workload()
    seconds, result, _ = timed(mixed, peer_engine, 1)
    print(
        json.dumps(
            {
                "benchmark": "scheduler_throughput",
                "measurement": "standard_mixed",
                "requests": STANDARD_MIXED["num_requests"],
                "iterations": result.iterations,
                "seconds": round(seconds, 3),
                "requests_per_s": round(len(mixed) / seconds, 1),
            }
        ),
        flush=True,
    )

    loops = {
        "trtllm": partial(azure_engine, "capacity", args.pool_gib),
        "vllm": partial(azure_engine, "vllm", args.pool_gib),
        "vllm_caching_and_async_off": partial(
            azure_engine, "vllm", args.pool_gib, **CACHING_AND_ASYNC_OFF
        ),
        "sglang": partial(azure_engine, "sglang", args.pool_gib),
    }
    costs = {
        name: {n: round(pass_cost(build, n, args.pass_cost_passes), 1) for n in (1, 64)}
        for name, build in loops.items()
    }
    print(
        json.dumps(
            {
                "benchmark": "scheduler_throughput",
                "measurement": "pass_cost",
                "passes": args.pass_cost_passes,
                "us_per_stepped_pass_by_decoders": costs,
                **machine(),
            }
        ),
        flush=True,
    )

    if args.trace:
        trace = azure_trace("conv", args.seconds_per_iteration, args.trace_limit)
        policies, total = {}, 0.0
        for policy in [*ADMISSION_POLICIES, "vllm", "sglang"]:
            build = partial(azure_engine, policy, args.pool_gib)
            seconds, result, passes_stepped = timed(trace, build, 1)
            total += seconds
            summary = result.summary()
            seconds_stepped, by_step, _ = timed(trace, build, 1, fast_forward=False)
            policies[policy] = {
                "seconds": round(seconds, 2),
                "seconds_stepped": round(seconds_stepped, 2),
                "identical": result.outcome() == by_step.outcome(),
                "iterations": result.iterations,
                "passes_stepped": passes_stepped,
                "requests_per_s": round(len(trace) / seconds, 1),
                "finished": summary["finished"],
                "rejected": summary["rejected"],
                "unfinished": summary["waiting"] + summary["running"],
                "goodput_tokens_per_step": round(summary["goodput_tokens_per_step"], 2),
                "mean_wait_steps": summary["mean_wait_steps"]
                and round(summary["mean_wait_steps"], 1),
                "mean_queue_steps": summary["mean_queue_steps"]
                and round(summary["mean_queue_steps"], 1),
                "error": None if result.error is None else type(result.error).__name__,
            }
        print(
            json.dumps(
                {
                    "benchmark": "scheduler_throughput",
                    "measurement": "azure_hour",
                    "requests": len(trace),
                    "seconds_per_iteration": args.seconds_per_iteration,
                    "model": "Llama-3.1-8B KV geometry, bf16",
                    "pool_gib": args.pool_gib,
                    "seconds_all_policies": round(total, 1),
                    "policies": policies,
                    **machine(),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
