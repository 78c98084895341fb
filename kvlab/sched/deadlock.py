"""The V2 scheduler's stall detector's error: the real ``KVCacheV2Scheduler._detect_deadlock``
(tensorrt_llm/_torch/pyexecutor/scheduler/scheduler_v2.py) raises it after
``_DEADLOCK_STALL_ITERS`` passes without progress."""

from __future__ import annotations

#: The real ``KVCacheV2Scheduler._DEADLOCK_STALL_ITERS``.
DEFAULT_STALL_LIMIT = 1000
#: The remedy the real deadlock message ends with (no KV connector attached).
DEADLOCK_REMEDY = (
    "Configure kv_cache_config.host_cache_size, increase kv_cache_config.max_tokens, "
    "or lower max_batch_size."
)


class SchedulerDeadlock(RuntimeError):
    """The real RuntimeError and message; ``stalled_passes`` is the K of the message."""

    def __init__(self, num_generation: int, num_context: int, stalled_passes: int):
        super().__init__(
            f"V2 scheduler deadlock: {num_generation} generation and {num_context} context "
            "request(s) active but none could be scheduled, suspended or preempted in "
            f"{stalled_passes} consecutive attempts. The KV cache pool is likely exhausted. "
            f"{DEADLOCK_REMEDY}"
        )
        self.num_generation = num_generation
        self.num_context = num_context
        self.stalled_passes = stalled_passes
