"""The real vLLM 0.34.0 scheduler as a backend (:data:`VLLM`, a
:class:`~kvlab.backends.real_engine.RealEngine`): kvlab workloads run by vLLM's own v1
``Scheduler`` in vLLM's own environment (``bash scripts/setup.sh vllm``), through
``vllm_driver.py``, and its stored runs (data/measurements/vllm-0.34.0.json).

    from kvlab.backends.vllm import VLLM
    VLLM.run(args, requests)                       # args: a kvlab.VllmEngineArgs
    VLLM.stored_results()["nb04/long-and-small"]   # no environment needed
"""

from __future__ import annotations

from pathlib import Path

from kvlab.backends.real_engine import RealEngine
from kvlab.core.geometry import KVGeometry
from kvlab.sched.vllm import VLLM_VERSION, VllmEngineArgs

#: KV dtypes the driver gives vLLM (torch dtypes of vLLM's FullAttentionSpec).
DRIVER_DTYPES = ("float32", "float16", "bfloat16", "fp8")


def engine_input(args: VllmEngineArgs) -> dict:
    """``args`` as the driver reads them; ValueError for what the driver cannot give vLLM."""
    geometry = args.geometry
    if geometry.kv_factor != 2 or geometry.dtype not in DRIVER_DTYPES:
        raise ValueError(
            f"the vLLM backend runs K-and-V attention caches of {list(DRIVER_DTYPES)} "
            f"(kv_factor 2), got kv_factor={geometry.kv_factor}, "
            f"dtype={geometry.dtype!r}"
        )
    return dict(
        num_layers=geometry.num_layers,
        num_kv_heads=geometry.kv_heads_per_rank,
        head_dim=geometry.head_dim,
        dtype=geometry.dtype,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        startup_num_gpu_blocks=args.startup_blocks,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enable_chunked_prefill=args.enable_chunked_prefill,
        enable_prefix_caching=False,
        scheduler_reserve_full_isl=args.scheduler_reserve_full_isl,
        watermark=args.watermark,
    )


def args_from_input(engine: dict) -> VllmEngineArgs:
    """The arguments :func:`engine_input` wrote."""
    geometry = KVGeometry(
        engine["num_layers"],
        engine["num_kv_heads"],
        engine["head_dim"],
        engine["dtype"],
        engine["block_size"],
    )
    return VllmEngineArgs(
        geometry,
        engine["num_gpu_blocks"],
        engine["max_model_len"],
        engine["max_num_seqs"],
        engine["max_num_batched_tokens"],
        engine["enable_chunked_prefill"],
        engine["scheduler_reserve_full_isl"],
        engine["watermark"],
        engine["startup_num_gpu_blocks"],
    )


def pool_blocks(args: VllmEngineArgs) -> int:
    return args.num_gpu_blocks


VLLM = RealEngine(
    name="vllm",
    title="vLLM",
    version=VLLM_VERSION,
    driver=Path(__file__).with_name("vllm_driver.py"),
    engine_input=engine_input,
    args_from_input=args_from_input,
    pool_blocks=pool_blocks,
    # notebook 04 draws these; the long traces keep their requests only, so the file stays small
    step_rows_kept=("nb04/", "shrunk/", "front-door", "startup-refused", "tiny/"),
)

__all__ = ["DRIVER_DTYPES", "VLLM", "args_from_input", "engine_input", "pool_blocks"]
