"""kvlab: GPU KV-cache pool and scheduler primitives that behave like TensorRT-LLM's, for
learning how serving engines run out of KV-cache memory and how they should fail.

Its public names are imported on first use (SPEC 1's lazy loading, as scikit-image and SciPy
do): ``import kvlab`` costs milliseconds, not torch's import, so that the ``kvlab`` command has
its signal handlers in place before anything slow runs. The ``TYPE_CHECKING`` block below is
the one list of those names: type checkers read it, and :func:`__getattr__` reads it too."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvlab.core.cause import Cause, Reason
    from kvlab.core.geometry import (
        KVGeometry,
        MambaGeometry,
        qwen3_5_27b_attention,
        qwen3_5_27b_mamba,
    )
    from kvlab.core.kv_cache import PAGE_INDEX_TOO_SHORT_MESSAGE, KVCache, PageIndexTooShort
    from kvlab.core.mamba import (
        MambaHybridCacheManager,
        ResidencyPlan,
        StateSlotsExhausted,
        plan_residency,
    )
    from kvlab.core.manager import KVCacheManager, MaxSeqLenClampWarning
    from kvlab.core.memory import MemoryBudget
    from kvlab.core.page_index import PageIndexTable, max_blocks_per_seq
    from kvlab.core.pool import PagePool
    from kvlab.core.request import Request
    from kvlab.run.distributed import run_ranks
    from kvlab.run.rank import RankResult
    from kvlab.run.rank_config import Fault, RunConfig
    from kvlab.run.run_result import DistributedResult
    from kvlab.run.simulation import Engine, SimulationResult, simulate
    from kvlab.run.trace import Trace
    from kvlab.sched.admission import ADMISSION_POLICIES, AdmissionPolicy, Verdict, make_admission
    from kvlab.sched.base import ScheduledBatch
    from kvlab.sched.deadlock import SchedulerDeadlock
    from kvlab.sched.scheduler import Scheduler
    from kvlab.sched.sglang import SglangScheduler, SglangServerArgs
    from kvlab.sched.trtllm_settings import TrtllmSettings
    from kvlab.sched.vllm import VllmEngineArgs, VllmScheduler


def _homes() -> dict[str, str]:
    """Each public name -> its module, read from the ``TYPE_CHECKING`` block above."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If))
    return {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


_HOMES = _homes()
__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'kvlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
