"""The real SGLang 0.5.23 scheduler as a backend (:data:`SGLANG`, a
:class:`~kvlab.backends.real_engine.RealEngine`): kvlab workloads run by SGLang's own
``Scheduler`` event loop in SGLang's own environment (``bash scripts/setup.sh sglang``), through
``sglang_driver.py``, and its stored runs (data/measurements/sglang-0.5.23.json).

    from kvlab.backends.sglang import SGLANG
    SGLANG.run(args, requests)                     # args: a kvlab.sched.sglang.SglangServerArgs
"""

from __future__ import annotations

from pathlib import Path

from kvlab.backends.real_engine import RealEngine
from kvlab.core.geometry import KVGeometry
from kvlab.sched.sglang import SGLANG_VERSION, SglangServerArgs


def engine_input(args: SglangServerArgs) -> dict:
    """``args`` as the driver reads them (the geometry rides along for the stored runs; the
    driver's pool counts tokens)."""
    geometry = args.geometry
    return dict(
        num_layers=geometry.num_layers,
        num_kv_heads=geometry.num_kv_heads,
        head_dim=geometry.head_dim,
        dtype=geometry.dtype,
        max_total_tokens=args.max_total_tokens,
        context_length=args.context_length,
        max_running_requests=args.max_running_requests,
        chunked_prefill_size=args.chunked_prefill_size,
        max_prefill_tokens=args.max_prefill_tokens,
        schedule_conservativeness=args.schedule_conservativeness,
        enable_mixed_chunk=False,
        ignore_eos=args.ignore_eos,
    )


def args_from_input(engine: dict) -> SglangServerArgs:
    """The arguments :func:`engine_input` wrote."""
    geometry = KVGeometry(
        engine["num_layers"],
        engine["num_kv_heads"],
        engine["head_dim"],
        engine["dtype"],
        tokens_per_block=1,
    )
    return SglangServerArgs(
        geometry,
        engine["max_total_tokens"],
        engine["context_length"],
        engine["max_running_requests"],
        engine["chunked_prefill_size"],
        engine["max_prefill_tokens"],
        engine["schedule_conservativeness"],
        engine["ignore_eos"],
    )


def pool_blocks(args: SglangServerArgs) -> int:
    return args.max_total_tokens  # one token a block (page_size 1)


SGLANG = RealEngine(
    name="sglang",
    title="SGLang",
    version=SGLANG_VERSION,
    driver=Path(__file__).with_name("sglang_driver.py"),
    engine_input=engine_input,
    args_from_input=args_from_input,
    pool_blocks=pool_blocks,
    step_rows_kept=("nb04/", "front-door", "startup-refused", "tiny/"),
)

__all__ = ["SGLANG", "args_from_input", "engine_input", "pool_blocks"]
