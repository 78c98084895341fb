"""kvlab: GPU KV-cache pool and scheduler primitives that behave like TensorRT-LLM's, for
learning how serving engines run out of KV-cache memory and how they should fail."""

from .geometry import KVGeometry, MambaGeometry, qwen3_5_27b_attention, qwen3_5_27b_mamba
from .kv_cache import PAGE_INDEX_TOO_SHORT_MESSAGE, KVCache, PageIndexTooShort
from .manager import KVCacheManager, MaxSeqLenClampWarning
from .memory import MemoryBudget
from .page_index import PageIndexTable, max_blocks_per_seq
from .pool import PagePool
from .request import Request
from .admission import ADMISSION_POLICIES, AdmissionPolicy, Verdict, make_admission
from .scheduler import ScheduledBatch, Scheduler, SchedulerDeadlock
from .simulation import Engine, SimulationResult, simulate
from .distributed import DistributedResult, Fault, RankResult, RunConfig, run_ranks
from .trace import Trace
from .mamba import MambaHybridCacheManager, ResidencyPlan, StateSlotsExhausted, plan_residency

__all__ = [
    "MambaGeometry", "MambaHybridCacheManager", "ResidencyPlan", "StateSlotsExhausted",
    "plan_residency", "qwen3_5_27b_attention", "qwen3_5_27b_mamba",
    "KVGeometry", "KVCache", "KVCacheManager", "MaxSeqLenClampWarning", "MemoryBudget",
    "PAGE_INDEX_TOO_SHORT_MESSAGE", "PageIndexTable", "PageIndexTooShort", "PagePool",
    "Request", "max_blocks_per_seq",
    "ADMISSION_POLICIES", "AdmissionPolicy", "ScheduledBatch", "Scheduler", "SchedulerDeadlock",
    "SimulationResult", "Trace", "Verdict", "make_admission", "simulate",
    "Engine", "DistributedResult", "Fault", "RankResult", "RunConfig", "run_ranks",
]
