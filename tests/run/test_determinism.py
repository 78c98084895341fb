"""Determinism: the same seed gives the same trace, byte for byte, in one process and across
processes (with different hash seeds, so no set or dict order can leak in); another seed gives
another trace.

A trace here is everything a run reports: every step record, every event, each request's
status and reason, and the error that stopped the engine. Its SHA-256 is compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

from kvlab import (
    KVCacheManager,
    KVGeometry,
    MaxSeqLenClampWarning,
    Scheduler,
    SglangScheduler,
    SglangServerArgs,
    VllmEngineArgs,
    VllmScheduler,
    simulate,
)
from kvlab.run.workload import LogNormal, poisson_workload

#: Engines that between them suspend, recompute-pause, retract, abort, reject, finish and stop:
#: name -> (page-index width policy, Scheduler arguments); every engine has the automatic host
#: tier but the one named "no lower tier".
CONFIGS = {
    "none/clamped": ("clamped", dict(admission="none")),
    "none/configured": ("configured", dict(admission="none", stall_limit=50)),
    "none/no lower tier": ("configured", dict(admission="none")),
    "capacity/chunked": ("clamped", dict(admission="capacity", chunked_prefill=True)),
    "vllm": (None, None),  # vLLM's own loop (kvlab.sched.vllm)
    "sglang": (None, None),  # SGLang's own loop (kvlab.sched.sglang)
}


def run(seed: int, config: str):
    """One seeded workload (64 requests, a few longer than the pool) through one engine with
    a 2,048-token pool."""
    width_policy, args = CONFIGS[config]
    geo = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, dtype="float16", tokens_per_block=16)
    if config == "vllm":
        scheduler = VllmScheduler(
            VllmEngineArgs(geo, 128, 2032, max_num_seqs=8, max_num_batched_tokens=4096)
        )
    elif config == "sglang":
        scheduler = SglangScheduler(
            SglangServerArgs(
                KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=1),
                2048,
                4096,
                max_running_requests=8,
                max_prefill_tokens=4096,
            )
        )
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MaxSeqLenClampWarning)
            manager = KVCacheManager(
                geo,
                quota_bytes=2048 * geo.bytes_per_token,
                max_seq_len=4096,
                max_batch_size=8,
                page_index_policy=width_policy,
                host_cache_size=0 if config == "none/no lower tier" else None,
            )
        scheduler = Scheduler(manager, **{"max_num_tokens": 4096, "max_batch_size": 8, **args})
    requests = poisson_workload(
        64,
        rate=0.6,
        seed=seed,
        prompt_len=LogNormal(median=160, sigma=1.1, low=8, high=3000),
        max_new_tokens=LogNormal(median=48, sigma=0.8, low=1, high=400),
    )
    return simulate(scheduler, requests, max_steps=4000)


def trace_bytes(result) -> bytes:
    return json.dumps(
        {
            "steps": [list(step) for step in result.trace.steps],
            "events": [list(event) for event in result.trace.events],
            "status": result.status,
            "reasons": result.reasons,
            "error": None
            if result.error is None
            else f"{type(result.error).__name__}: {result.error}",
        },
        sort_keys=True,
        default=repr,  # a reason: its cause and numbers
    ).encode()


def digests(seed: int) -> dict:
    """SHA-256 of each configuration's trace for ``seed``."""
    return {
        config: hashlib.sha256(trace_bytes(run(seed, config))).hexdigest() for config in CONFIGS
    }


def test_same_seed_same_trace_in_one_process():
    for config in CONFIGS:
        assert trace_bytes(run(7, config)) == trace_bytes(run(7, config)), config


def test_the_traces_cover_every_kind_of_outcome():
    """Determinism is only tested where the runs go: every preemption path and verdict."""
    kinds = Counter(event.kind for config in CONFIGS for event in run(7, config).trace.events)
    # every kind but "aborted": SGLang gives up a started request only when even one alone cannot
    # grow, which its clip of max_new_tokens prevents (kvlab.sched.sglang)
    for kind in ("rejected", "finished", "suspended", "recompute_paused", "engine_stopped"):
        assert kinds[kind] > 0, f"no {kind!r} event in {dict(kinds)}"


def test_same_seed_same_hash_across_processes():
    from bounds import HANG_S  # here: this file also runs as a script, outside pytest

    here = digests(7)
    for hash_seed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        proc = subprocess.run(
            [sys.executable, str(Path(__file__)), "7"],
            capture_output=True,
            text=True,
            env=env,
            timeout=HANG_S,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert json.loads(proc.stdout) == here, f"PYTHONHASHSEED={hash_seed}"


def test_another_seed_gives_another_trace():
    first, second = digests(7), digests(8)
    for config in CONFIGS:
        assert first[config] != second[config], config


if __name__ == "__main__":
    print(json.dumps(digests(int(sys.argv[1]))))
