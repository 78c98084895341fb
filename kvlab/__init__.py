"""kvlab: GPU KV-cache pool and scheduler primitives that behave like TensorRT-LLM's, for
learning how serving engines run out of KV-cache memory and how they should fail."""

from kvlab.core.cause import Cause, Reason
from kvlab.core.geometry import KVGeometry, MambaGeometry, qwen3_5_27b_attention, qwen3_5_27b_mamba
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

__all__ = [
    "Cause",
    "Reason",
    "MambaGeometry",
    "MambaHybridCacheManager",
    "ResidencyPlan",
    "StateSlotsExhausted",
    "plan_residency",
    "qwen3_5_27b_attention",
    "qwen3_5_27b_mamba",
    "KVGeometry",
    "KVCache",
    "KVCacheManager",
    "MaxSeqLenClampWarning",
    "MemoryBudget",
    "PAGE_INDEX_TOO_SHORT_MESSAGE",
    "PageIndexTable",
    "PageIndexTooShort",
    "PagePool",
    "Request",
    "max_blocks_per_seq",
    "ADMISSION_POLICIES",
    "AdmissionPolicy",
    "ScheduledBatch",
    "Scheduler",
    "SchedulerDeadlock",
    "SglangScheduler",
    "SglangServerArgs",
    "SimulationResult",
    "Trace",
    "TrtllmSettings",
    "Verdict",
    "VllmEngineArgs",
    "VllmScheduler",
    "make_admission",
    "simulate",
    "Engine",
    "DistributedResult",
    "Fault",
    "RankResult",
    "RunConfig",
    "run_ranks",
]
