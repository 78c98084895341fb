"""The real vLLM 0.34.0 v1 ``Scheduler`` as a backend, in vLLM's own environment
(``bash scripts/setup.sh vllm``) through ``vllm_driver.py``, and its stored runs.

    from kvlab.backends.vllm import VLLM
    VLLM.run(args, requests)                       # args: a kvlab.VllmEngineArgs
    VLLM.stored_results()["nb04/long-and-small"]   # no environment needed
"""

from __future__ import annotations

from pathlib import Path

from kvlab.backends.real_engine import RealEngine, args_input
from kvlab.sched.vllm import VLLM_VERSION, VllmEngineArgs

#: KV dtypes the driver gives vLLM (torch dtypes of vLLM's FullAttentionSpec).
DRIVER_DTYPES = ("float32", "float16", "bfloat16", "fp8")


def engine_input(args: VllmEngineArgs) -> dict:
    """``args`` as the driver reads them; ValueError for what the driver cannot give vLLM."""
    geometry = args.geometry
    if geometry.kv_factor != 2 or geometry.dtype not in DRIVER_DTYPES:
        raise ValueError(
            f"the vLLM backend runs K-and-V attention caches of {list(DRIVER_DTYPES)} "
            f"(kv_factor 2), got kv_factor={geometry.kv_factor}, dtype={geometry.dtype!r}"
        )
    return args_input(args) | dict(
        num_kv_heads=geometry.kv_heads_per_rank,
        block_size=args.block_size,
        startup_num_gpu_blocks=args.startup_blocks,
    )


VLLM = RealEngine(
    name="vllm",
    title="vLLM",
    version=VLLM_VERSION,
    driver=Path(__file__).with_name("vllm_driver.py"),
    args_type=VllmEngineArgs,
    engine_input=engine_input,
    pool_key="num_gpu_blocks",
    # notebook 04 draws these; the long traces keep their requests only, so the file stays small
    step_rows_kept=("nb04/", "shrunk/", "front-door", "startup-refused", "tiny/"),
    prompt_tokens=True,
    processes_late=lambda args: args.async_scheduling,  # the AsyncScheduler's batch queue
)

__all__ = ["DRIVER_DTYPES", "VLLM", "engine_input"]
