"""The real SGLang 0.5.23 ``Scheduler`` event loop (the overlap loop unless
``disable_overlap_schedule``) as a backend, in SGLang's own environment
(``bash scripts/setup.sh sglang``) through ``sglang_driver.py``, and its stored runs.

    from kvlab.backends.sglang import SGLANG
    SGLANG.run(args, requests)                     # args: a kvlab.sched.sglang.SglangServerArgs
"""

from __future__ import annotations

from pathlib import Path

from kvlab.backends.real_engine import RealEngine, args_input
from kvlab.sched.sglang import SGLANG_VERSION, SglangServerArgs


def engine_input(args: SglangServerArgs) -> dict:
    """``args`` as the driver reads them (its pool counts tokens: the geometry is for the
    stored runs)."""
    return args_input(args) | dict(enable_mixed_chunk=False)


SGLANG = RealEngine(
    name="sglang",
    title="SGLang",
    version=SGLANG_VERSION,
    driver=Path(__file__).with_name("sglang_driver.py"),
    args_type=SglangServerArgs,
    engine_input=engine_input,
    pool_key="max_total_tokens",  # page_size 1: a block is a token
    step_rows_kept=("nb04/", "front-door", "startup-refused", "tiny/"),
    prompt_tokens=True,
    processes_late=lambda args: not args.disable_overlap_schedule,  # event_loop_overlap
)

__all__ = ["SGLANG", "engine_input"]
