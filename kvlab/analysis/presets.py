"""The names kvlab's analyses share: the seed's geometry, the outcomes a run or a resize can
have, the classifier of a run's outcome, and the check of a list of names.
"""

from __future__ import annotations

from kvlab.core.checks import check_choice, check_instance, check_items
from kvlab.core.geometry import KVGeometry
from kvlab.core.kv_cache import PageIndexTooShort
from kvlab.core.request import UNFINISHED_STATUSES, RequestState
from kvlab.run.simulation import SimulationResult
from kvlab.sched.deadlock import SchedulerDeadlock


def seed_geometry(tokens_per_block: int = 32) -> KVGeometry:
    """The seed's model shape (docs/SEEDS.md §1): 2 layers, 2 KV heads, head_dim 128, fp16;
    2048 bytes a token, so a 4 MiB pool holds 2048 tokens."""
    return KVGeometry(
        num_layers=2,
        num_kv_heads=2,
        head_dim=128,
        dtype="float16",
        tokens_per_block=tokens_per_block,
    )


#: Every outcome name, mildest first (kvlab.notebook.viz gives each its colour and label).
OUTCOMES = ("ok", "refused", "reject", "stall", "crash")
#: What a run can end in: every request finished; some rejected, the rest finished; no progress
#: (SchedulerDeadlock, or requests left waiting or running); a PageIndexTooShort. The phase
#: diagram's int8 codes index this tuple.
ENGINE_OUTCOMES = ("ok", "reject", "stall", "crash")
#: What one resize can do (kvlab.analysis.repro): allocate, return False, raise.
RESIZE_OUTCOMES = ("ok", "refused", "crash")


def engine_outcome(result) -> str:
    """One of :data:`ENGINE_OUTCOMES` for a ``kvlab.simulate`` result."""
    check_instance("result", result, SimulationResult)
    if isinstance(result.error, PageIndexTooShort):
        return "crash"
    statuses = set(result.status.values())
    if isinstance(result.error, SchedulerDeadlock) or statuses & set(UNFINISHED_STATUSES):
        return "stall"
    return "reject" if RequestState.REJECTED in statuses else "ok"


def check_names(name: str, values, choices, what: str) -> list[str]:
    """``values`` (a sequence of ``what``) as a list, each one of ``choices``."""
    items = check_items(name, values, what)
    return [check_choice(f"{name}[{i}]", value, choices) for i, value in enumerate(items)]
