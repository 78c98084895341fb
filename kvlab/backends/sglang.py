"""The real SGLang 0.5.23 ``Scheduler`` event loop as a backend, in SGLang's own environment
(``bash scripts/setup.sh sglang``) through ``sglang_driver.py``, and its stored runs.

    from kvlab.backends.sglang import SGLANG
    SGLANG.run(args, requests)                     # args: a kvlab.sched.sglang.SglangServerArgs
"""

from __future__ import annotations

from pathlib import Path

from kvlab.backends.real_engine import RealEngine
from kvlab.sched.sglang import SGLANG_VERSION, SglangServerArgs


def engine_input(args: SglangServerArgs) -> dict:
    """``args`` as the driver reads them (its pool counts tokens: the geometry is for the
    stored runs)."""
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


SGLANG = RealEngine(
    name="sglang",
    title="SGLang",
    version=SGLANG_VERSION,
    driver=Path(__file__).with_name("sglang_driver.py"),
    args_type=SglangServerArgs,
    engine_input=engine_input,
    pool_key="max_total_tokens",  # page_size 1: a block is a token
    step_rows_kept=("nb04/", "front-door", "startup-refused", "tiny/"),
)

__all__ = ["SGLANG", "engine_input"]
