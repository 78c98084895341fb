"""Compare: one workload under several policies, and a table of what each engine did.

Notebooks 03 and 04 ask the same question many times: build the engine of the seed (or another
pool), run these requests under this policy, and say in one word what happened. This module
does that, so the notebooks only call it.

Policies (:data:`kvlab.sched.policies.POLICIES`): the admission policy and the page-index width policy
together.

- ``"none/clamped"``: the historical TensorRT-LLM V2 path (the #21470 crash);
- ``"none/configured"``: the one-line fix (a wider row; the request is refused every pass);
- ``"capacity"``: PR #21720's admission control (clamped row, reject what can never fit);
- ``"vllm"``: vLLM v1's own scheduling loop (:class:`kvlab.sched.vllm.VllmScheduler`, held to
  the real vLLM 0.34.0 request by request: docs/CONFORMANCE.md). With ``max_model_len`` at the
  configured max_seq_len vLLM refuses to *start* on a pool that cannot hold one such request; an
  operator then sets ``max_model_len`` to the estimate its error message prints (the pool's
  tokens less its null block), and that is the engine run here (:func:`vllm_startup_error` gives
  the refusal itself). vLLM has no stall detector: ``stall_limit`` does not apply;
- ``"sglang"``: SGLang's own scheduling loop (:class:`kvlab.sched.sglang.SglangScheduler`, held
  to the real SGLang 0.5.23 request by request): the same pool counted in tokens (page_size 1),
  ``context_length`` the configured max_seq_len, ``max_running_requests`` the max_batch_size,
  ``max_prefill_tokens`` the max_num_tokens, chunks of that size with chunked prefill; the
  requests' ``ignore_eos`` off. SGLang has no stall detector either.

The engine's outcome (:func:`kvlab.analysis.presets.engine_outcome`) is one of kvlab's outcome names (the
colours of ``kvlab.notebook.viz.OUTCOME_COLORS``): ``"crash"`` (a PageIndexTooShort stopped the engine), ``"stall"``
(the stall detector's SchedulerDeadlock, or requests still waiting or running when the run ran
out of steps: starvation or a preemption livelock), ``"reject"`` (some requests were rejected
and every other one finished), ``"ok"`` (every request finished).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kvlab.analysis.presets import engine_outcome, seed_geometry
from kvlab.core.checks import (
    MAX_COUNT,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_items,
    check_mapping,
    store_checked,
)
from kvlab.core.geometry import KVGeometry
from kvlab.core.manager import KVCacheManager
from kvlab.core.memory import MIB, readout_mib
from kvlab.core.request import Request
from kvlab.run.progress import progress
from kvlab.run.simulation import SimulationResult, refused_to_start, simulate
from kvlab.sched.base import SchedulerBase
from kvlab.sched.policies import POLICIES
from kvlab.sched.scheduler import DEFAULT_STALL_LIMIT, Scheduler
from kvlab.sched.sglang import SglangScheduler, SglangServerArgs
from kvlab.sched.sglang import startup_error as sglang_startup_error
from kvlab.sched.vllm import VllmEngineArgs, VllmScheduler, estimated_max_model_len, startup_error


@dataclass(frozen=True)
class EngineConfig:
    """Everything about the engine but the policy. Defaults: the seed's RTX 5080 experiment
    (4 MiB pool, max_seq_len 8192, 32 tokens per block), with room for 4 sequences at once
    and a token budget large enough that no prompt is refused for it (non-chunked context).
    ``host_cache_size``: None (the real default) provisions the automatic host tier; 0 leaves
    no tier below the GPU (kvlab.core.host_tier). ``chunked_prefill``: contexts go in chunks of at
    most ``max_num_tokens`` (issue #21470's deployment ran chunked). ``enable_block_reuse``: the
    TensorRT-LLM policies' managers reuse cached prefixes (the real default; prompts without
    ``prefix_hashes`` share nothing either way); vLLM's and SGLang's loops run without their
    prefix caches."""

    pool_mib: float = 4.0
    max_seq_len: int = 8192
    geometry: KVGeometry = field(default_factory=seed_geometry)
    max_batch_size: int = 4
    max_num_tokens: int = 1 << 20
    stall_limit: int = DEFAULT_STALL_LIMIT
    host_cache_size: int | None = None
    chunked_prefill: bool = False
    enable_block_reuse: bool = True

    def __post_init__(self):
        if not isinstance(self.geometry, KVGeometry):
            raise TypeError(f"geometry must be a KVGeometry, got {type(self.geometry).__name__}")
        store_checked(self, "pool_mib", check_float, low=0.0, high=1 << 20, low_open=True)
        store_checked(self, "max_seq_len", check_int, low=1, high=1 << 30)
        store_checked(self, "max_batch_size", check_int, low=1, high=1 << 16)
        store_checked(self, "max_num_tokens", check_int, low=1, high=1 << 30)
        store_checked(self, "stall_limit", check_int, low=1, high=1 << 30)
        if self.host_cache_size is not None:
            store_checked(self, "host_cache_size", check_int, low=0, high=1 << 50)
        for name in ("chunked_prefill", "enable_block_reuse"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.total_blocks < 1:
            raise ValueError(
                f"pool_mib={self.pool_mib:g} holds no page: one page of "
                f"{self.geometry.tokens_per_block} tokens takes "
                f"{self.geometry.bytes_per_block} B"
            )

    @property
    def quota_bytes(self) -> int:
        return int(self.pool_mib * MIB)

    @property
    def total_blocks(self) -> int:
        return self.geometry.blocks_in(self.quota_bytes)

    @property
    def pool_tokens(self) -> int:
        return self.total_blocks * self.geometry.tokens_per_block

    def manager(self, width_policy: str = "clamped") -> KVCacheManager:
        return KVCacheManager.expecting_clamp(
            self.geometry,
            self.quota_bytes,
            self.max_seq_len,
            max_batch_size=self.max_batch_size,
            page_index_policy=width_policy,
            host_cache_size=self.host_cache_size,
            enable_block_reuse=self.enable_block_reuse,
        )

    def describe(self) -> str:
        return (
            f"{readout_mib(self.pool_mib)} MiB pool = {self.total_blocks:,} pages of "
            f"{self.geometry.tokens_per_block} tokens ({self.pool_tokens:,} tokens); "
            f"max_seq_len {self.max_seq_len:,}; up to {self.max_batch_size} sequences; "
            f"{self.tier_name}"
        )

    @property
    def tier_name(self) -> str:
        """The tier configuration in words."""
        if self.host_cache_size is None:
            return "automatic host tier (host_cache_size=None, the default)"
        if self.host_cache_size == 0:
            return "no tier below the GPU (host_cache_size=0)"
        return f"host tier of {self.host_cache_size:,} B"


def build_scheduler(policy: str, engine: EngineConfig = EngineConfig()) -> SchedulerBase:
    """A fresh scheduler (and manager) for ``policy`` on ``engine`` (module docstring)."""
    admission, width = POLICIES[check_choice("policy", policy, POLICIES)]
    check_instance("engine", engine, EngineConfig)
    if admission == "vllm":
        return VllmScheduler(vllm_args_as_run(engine))
    if admission == "sglang":
        return SglangScheduler(sglang_args(engine))
    return Scheduler(
        engine.manager(width),
        admission=admission,
        max_num_tokens=engine.max_num_tokens,
        max_batch_size=engine.max_batch_size,
        stall_limit=engine.stall_limit,
        chunked_prefill=engine.chunked_prefill,
    )


def vllm_args(engine: EngineConfig) -> VllmEngineArgs:
    """``engine`` as vLLM's engine arguments: the same pool, ``max_model_len`` at the configured
    max_seq_len, ``max_num_seqs`` its max_batch_size, ``max_num_batched_tokens`` its
    max_num_tokens, chunked prefill as set."""
    check_instance("engine", engine, EngineConfig)
    return VllmEngineArgs(
        engine.geometry,
        engine.total_blocks,
        engine.max_seq_len,
        max_num_seqs=engine.max_batch_size,
        max_num_batched_tokens=engine.max_num_tokens,
        enable_chunked_prefill=engine.chunked_prefill,
    )


def vllm_args_as_run(engine: EngineConfig) -> VllmEngineArgs:
    """:func:`vllm_args` with ``max_model_len`` lowered to vLLM's estimate where the configured
    one does not fit (what an operator does after the start-up refusal)."""
    check_instance("engine", engine, EngineConfig)
    estimate = estimated_max_model_len(engine.geometry, engine.total_blocks)
    return vllm_args(engine).replace(
        max_model_len=min(engine.max_seq_len, estimate) or engine.max_seq_len
    )


def sglang_args(engine: EngineConfig) -> SglangServerArgs:
    """``engine`` as SGLang's server arguments (module docstring)."""
    check_instance("engine", engine, EngineConfig)
    geometry = dataclasses.replace(engine.geometry, tokens_per_block=1)
    return SglangServerArgs(
        geometry,
        engine.pool_tokens,
        engine.max_seq_len,
        max_running_requests=engine.max_batch_size,
        chunked_prefill_size=engine.max_num_tokens if engine.chunked_prefill else -1,
        max_prefill_tokens=engine.max_num_tokens,
    )


def vllm_startup_error(engine: EngineConfig = EngineConfig()) -> str | None:
    """The message vLLM refuses to start with when ``max_model_len`` is left at the configured
    max_seq_len (None when it starts)."""
    return startup_error(vllm_args(engine))


def run_policy(
    policy: str,
    requests: Sequence[Request],
    engine: EngineConfig = EngineConfig(),
    max_steps: int = 20_000,
) -> SimulationResult:
    """``simulate`` the requests under ``policy`` on a fresh engine; an engine that refuses to
    start (vLLM on a pool without room for one block) rejects every request with its message."""
    admission = POLICIES[check_choice("policy", policy, POLICIES)][0]
    refusal = (
        startup_error(vllm_args_as_run(engine))
        if admission == "vllm"
        else sglang_startup_error(sglang_args(engine))
        if admission == "sglang"
        else None
    )
    if refusal is not None:
        return refused_to_start(requests, refusal)
    return simulate(build_scheduler(policy, engine), requests, max_steps=max_steps)


def run_policies(
    requests: Sequence[Request],
    policies: Iterable[str] = tuple(POLICIES),
    engine: EngineConfig = EngineConfig(),
    max_steps: int = 20_000,
) -> dict[str, SimulationResult]:
    """:func:`run_policy` for each policy, the same requests each time."""
    requests = check_items("requests", requests, "Request objects")
    if not all(isinstance(r, Request) for r in requests):
        raise TypeError(
            "requests must be a sequence of Request, got "
            f"{next(type(r).__name__ for r in requests if not isinstance(r, Request))}"
        )
    policies = [
        check_choice(f"policies[{i}]", policy, POLICIES)
        for i, policy in enumerate(check_items("policies", policies, "policy names"))
    ]
    check_instance("engine", engine, EngineConfig)
    max_steps = check_int("max_steps", max_steps, low=1, high=1 << 40)
    return {
        policy: run_policy(policy, requests, engine, max_steps)
        for policy in progress(policies, desc="policies", unit="policy")
    }


def _error_text(result: SimulationResult) -> str:
    if result.error is None:
        return ""
    return f"{type(result.error).__name__}: {result.error}"


def outcome_row(policy: str, result: SimulationResult) -> dict:
    """One row of :func:`outcome_table`."""
    summary = result.summary()
    rejected = result.ids_with_status("rejected")
    return dict(
        policy=policy,
        outcome=engine_outcome(result),
        finished=summary["finished"],
        rejected=summary["rejected"],
        unfinished=summary["waiting"] + summary["running"],
        steps=result.end_step,
        iterations=summary["iterations"],
        goodput_tokens_per_step=round(summary["goodput_tokens_per_step"], 3),
        mean_wait_steps=(
            None if summary["mean_wait_steps"] is None else round(summary["mean_wait_steps"], 2)
        ),
        mean_queue_steps=(
            None if summary["mean_queue_steps"] is None else round(summary["mean_queue_steps"], 2)
        ),
        preemptions=summary["suspensions"] + summary["recomputes"],
        max_stalled_passes=max(result.trace.column("stalled_passes"), default=0),
        error=_error_text(result).split(" - ")[0],
        rejected_ids=", ".join(rejected),
        reasons=" | ".join(sorted({result.reasons[i] for i in rejected})),
    )


#: The two tier configurations of the real manager: name -> ``host_cache_size`` ("automatic":
#: None, the real default, an automatic host tier; "none": 0, the GPU alone).
TIERS: dict[str, int | None] = {"automatic": None, "none": 0}


def tier_runs(
    requests: Sequence[Request],
    engine: EngineConfig = EngineConfig(),
    policy: str = "none/configured",
    max_steps: int = 20_000,
) -> dict[str, SimulationResult]:
    """``simulate`` the same requests under ``policy`` with each of :data:`TIERS` (the rest of
    ``engine`` unchanged)."""
    requests = check_items("requests", requests, "Request objects")
    check_instance("engine", engine, EngineConfig)
    max_steps = check_int("max_steps", max_steps, low=1, high=1 << 40)
    return {
        tier: simulate(
            build_scheduler(policy, dataclasses.replace(engine, host_cache_size=size)),
            requests,
            max_steps=max_steps,
        )
        for tier, size in TIERS.items()
    }


def outcome_rows(results: Mapping[str, SimulationResult]) -> list[dict]:
    check_mapping("results", results, SimulationResult, "policy -> SimulationResult")
    return [outcome_row(policy, result) for policy, result in results.items()]


def outcome_table(results: Mapping[str, SimulationResult]):
    """A pandas DataFrame, one row per policy: outcome, counts, goodput (finished requests'
    generated tokens per scheduler iteration), mean waiting time (arrival to first scheduled
    step, over started requests), mean queueing time (arrival to leaving the executor's
    queue, over activated requests), preemptions (suspensions + recompute pauses), the largest
    stalled-pass count, the error that stopped the engine, rejected requests and why."""
    import pandas as pd

    return pd.DataFrame(outcome_rows(results)).set_index("policy")


# --- the workloads of notebooks 03 and 04 ----------------------------------------------------------


def long_and_small(
    context: int = 8192,
    max_new_tokens: int = 16,
    num_small: int = 6,
    small_prompt: int = 256,
    small_new_tokens: int = 32,
    every: int = 4,
    long_arrival: int = 0,
) -> list[Request]:
    """One long request ("long", ``context`` prompt tokens) and ``num_small`` small ones
    ("s0", "s1", ...) arriving every ``every`` steps from step 0."""
    context = check_int("context", context, low=1, high=MAX_COUNT)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=0, high=MAX_COUNT)
    num_small = check_int("num_small", num_small, low=0, high=100_000)
    small_prompt = check_int("small_prompt", small_prompt, low=1, high=MAX_COUNT)
    small_new_tokens = check_int("small_new_tokens", small_new_tokens, low=0, high=MAX_COUNT)
    every = check_int("every", every, low=0, high=1 << 20)
    long_arrival = check_int("long_arrival", long_arrival, low=0, high=MAX_COUNT)
    return [Request("long", context, max_new_tokens, long_arrival)] + [
        Request(f"s{i}", small_prompt, small_new_tokens, i * every) for i in range(num_small)
    ]


def not_yet_and_never(
    engine: EngineConfig = EngineConfig(), max_new_tokens: int = 16
) -> list[Request]:
    """The smallest example of the distinction, on ``engine``'s pool: "hog" holds three
    quarters of the pool for a while; "later" (half the pool) fits on its own but not beside
    "hog" (not yet: it waits for pages); "never" asks for the configured max_seq_len, more
    pages than the pool has (never: waiting cannot help), or one page more than the pool when
    max_seq_len fits it."""
    check_instance("engine", engine, EngineConfig)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, low=0, high=1 << 30)
    tpb, blocks = engine.geometry.tokens_per_block, engine.total_blocks
    if blocks < 4:
        raise ValueError(f"the example needs a pool of at least 4 pages, got {blocks}")
    hog = max(1, (blocks * 3 // 4) * tpb - max_new_tokens * 4)  # three quarters of the pool
    later = max(1, (blocks // 2) * tpb - max_new_tokens)  # half of the pool
    never = max(engine.max_seq_len, (blocks + 1) * tpb)
    return [
        Request("hog", hog, max_new_tokens * 4, 0),
        Request("later", later, max_new_tokens, 1),
        Request("never", never, max_new_tokens, 2),
    ]


def request_timeline(result: SimulationResult) -> list[dict]:
    """Per request: arrival, first scheduled step, end step and status (for a Gantt-like
    table)."""
    check_instance("result", result, SimulationResult)
    return [
        dict(
            request_id=r.request_id,
            prompt_len=r.prompt_len,
            arrival=r.arrival_step,
            started=r.first_scheduled_step,
            ended=r.end_step,
            status=result.status[r.request_id],
            refusals=r.num_refusals,
        )
        for r in result.requests.values()
    ]


__all__ = [
    "EngineConfig",
    "build_scheduler",
    "long_and_small",
    "not_yet_and_never",
    "outcome_row",
    "outcome_rows",
    "outcome_table",
    "request_timeline",
    "run_policies",
    "run_policy",
    "sglang_args",
    "vllm_args",
    "vllm_startup_error",
]
