"""One workload under several policies (:data:`kvlab.sched.policies.POLICIES`), and a table of
what each engine did (notebooks 03, 04). Each engine runs from its own configuration
(``TrtllmSettings``, ``VllmEngineArgs``, ``SglangServerArgs``) derived from one
:class:`EngineConfig` (:func:`trtllm_settings`, :func:`vllm_args`, :func:`sglang_args`);
"vllm" lowers ``max_model_len`` to the estimate its start-up refusal prints. [kvlab] vLLM and
SGLang have no stall detector: ``stall_limit`` is TensorRT-LLM's alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvlab.analysis.presets import check_names, engine_outcome, seed_geometry
from kvlab.analysis.sentences import sentence
from kvlab.core.checks import (
    MAX_COUNT,
    check_bools,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_items,
    check_mapping,
    check_param,
    store_checked,
    store_param,
)
from kvlab.core.geometry import KVGeometry
from kvlab.core.manager import KVCacheManager
from kvlab.core.memory import MIB, readout_mib
from kvlab.core.request import Request, RequestState
from kvlab.run.progress import progress
from kvlab.run.simulation import SimulationResult, refused_to_start, simulate
from kvlab.sched.base import SchedulerBase
from kvlab.sched.deadlock import DEFAULT_STALL_LIMIT
from kvlab.sched.policies import POLICIES
from kvlab.sched.sglang import SglangScheduler, SglangServerArgs
from kvlab.sched.sglang import startup_error as sglang_startup_error
from kvlab.sched.trtllm_settings import TrtllmSettings
from kvlab.sched.vllm import VllmEngineArgs, VllmScheduler, estimated_max_model_len, startup_error


@dataclass(frozen=True)
class EngineConfig:
    """The deployment each engine's configuration is derived from (:func:`engine_args`);
    defaults: the seed's 4 MiB experiment, 4 sequences at once, a token budget no prompt
    exceeds. ``host_cache_size`` None is the automatic host tier, 0 none; it, ``stall_limit``
    and ``enable_block_reuse`` are TensorRT-LLM's (the peers run their own engines' caches as
    they ship: ``VllmEngineArgs``' and ``SglangServerArgs``' defaults)."""

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
        check_instance("geometry", self.geometry, KVGeometry)
        store_checked(self, "pool_mib", check_float, low=0.0, high=1 << 20, low_open=True)
        if self.host_cache_size is not None:
            store_param(self, "host_cache_size")
        for name in ("max_seq_len", "max_batch_size", "max_num_tokens", "stall_limit"):
            store_param(self, name)
        check_bools(
            chunked_prefill=self.chunked_prefill, enable_block_reuse=self.enable_block_reuse
        )
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
        return trtllm_settings(self, page_index_policy=width_policy).manager()

    def describe(self) -> str:
        """The pool, max_seq_len, batch and tier in one line."""
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


def trtllm_settings(
    engine: EngineConfig, admission: str = "none", page_index_policy: str = "clamped"
) -> TrtllmSettings:
    """``engine`` as TensorRT-LLM's settings: its pool in bytes, its limits, tier and block
    reuse (TensorRT-LLM alone reads stall_limit, host_cache_size and enable_block_reuse), with
    ``admission`` and the manager's row-width ``page_index_policy``."""
    return TrtllmSettings(
        engine.geometry,
        engine.quota_bytes,
        engine.max_seq_len,
        engine.max_batch_size,
        page_index_policy=page_index_policy,
        host_cache_size=engine.host_cache_size,
        enable_block_reuse=engine.enable_block_reuse,
        max_num_tokens=engine.max_num_tokens,
        stall_limit=engine.stall_limit,
        enable_chunked_prefill=engine.chunked_prefill,
        admission=admission,
    )


def vllm_args(engine: EngineConfig) -> VllmEngineArgs:
    """``engine`` as vLLM's arguments, ``max_model_len`` at the configured max_seq_len."""
    return VllmEngineArgs(
        engine.geometry,
        engine.total_blocks,
        engine.max_seq_len,
        max_num_seqs=engine.max_batch_size,
        max_num_batched_tokens=engine.max_num_tokens,
        enable_chunked_prefill=engine.chunked_prefill,
    )


def vllm_args_as_run(engine: EngineConfig) -> VllmEngineArgs:
    """:func:`vllm_args`, ``max_model_len`` lowered to vLLM's estimate where the configured one
    does not fit (what an operator does after the start-up refusal)."""
    estimate = estimated_max_model_len(engine.geometry, engine.total_blocks)
    return vllm_args(engine).replace(
        max_model_len=min(engine.max_seq_len, estimate) or engine.max_seq_len
    )


def sglang_args(engine: EngineConfig) -> SglangServerArgs:
    """``engine`` as SGLang's arguments: the pool in one-token pages, ``max_running_requests``
    its max_batch_size, chunks of max_num_tokens with chunked prefill."""
    return SglangServerArgs(
        dataclasses.replace(engine.geometry, tokens_per_block=1),
        engine.pool_tokens,
        engine.max_seq_len,
        max_running_requests=engine.max_batch_size,
        chunked_prefill_size=engine.max_num_tokens if engine.chunked_prefill else -1,
        max_prefill_tokens=engine.max_num_tokens,
    )


#: What ENGINES holds per engine; each function takes the configuration type it is keyed by.
EngineEntry = tuple[Callable[[Any], SchedulerBase], Callable[[Any], str | None], str]
#: Each engine's own configuration type -> (its scheduler, its start-up check, its name).
ENGINES: dict[type, EngineEntry] = {
    TrtllmSettings: (TrtllmSettings.scheduler, lambda settings: None, "TensorRT-LLM"),
    VllmEngineArgs: (VllmScheduler, startup_error, "vLLM"),
    SglangServerArgs: (SglangScheduler, sglang_startup_error, "SGLang"),
}
#: The peers kvlab holds to their real engines: their types among :data:`ENGINES`.
PEERS = {kind: ENGINES[kind] for kind in (VllmEngineArgs, SglangServerArgs)}


def engine_args(
    policy: str, engine: EngineConfig
) -> TrtllmSettings | VllmEngineArgs | SglangServerArgs:
    """The configuration of the engine that runs ``policy`` on ``engine``."""
    admission, width = POLICIES[check_choice("policy", policy, POLICIES)]
    check_instance("engine", engine, EngineConfig)
    if admission == "vllm":
        return vllm_args_as_run(engine)
    if admission == "sglang":
        return sglang_args(engine)
    return trtllm_settings(engine, admission=admission, page_index_policy=width)


def run_engine(args, requests: Sequence[Request], max_steps: int) -> SimulationResult:
    """``requests`` on a fresh engine of configuration ``args`` (one of :data:`ENGINES`' types);
    a start-up refusal rejects every request with the engine's message."""
    build, startup_check, _ = ENGINES[type(args)]
    refusal = startup_check(args)
    if refusal is not None:
        return refused_to_start(requests, refusal)
    return simulate(build(args), requests, max_steps=max_steps)


def build_scheduler(policy: str, engine: EngineConfig = EngineConfig()) -> SchedulerBase:
    """A fresh scheduler (and manager) for ``policy`` on ``engine``."""
    args = engine_args(policy, engine)
    return ENGINES[type(args)][0](args)


def vllm_startup_error(engine: EngineConfig = EngineConfig()) -> str | None:
    """The message vLLM refuses to start with at ``max_model_len`` = the configured
    max_seq_len (None when it starts)."""
    return startup_error(vllm_args(check_instance("engine", engine, EngineConfig)))


def run_policy(
    policy: str,
    requests: Sequence[Request],
    engine: EngineConfig = EngineConfig(),
    max_steps: int = 20_000,
) -> SimulationResult:
    """``simulate`` the requests under ``policy`` on a fresh engine (a peer that refuses to
    start rejects every request with its message)."""
    return run_engine(engine_args(policy, engine), requests, max_steps)


def _checked_run(requests, engine, max_steps) -> tuple[list[Request], int]:
    requests = check_items("requests", requests, "Request objects")
    bad = next((r for r in requests if not isinstance(r, Request)), None)
    if bad is not None:
        raise TypeError(f"requests must be a sequence of Request, got {type(bad).__name__}")
    check_instance("engine", engine, EngineConfig)
    return requests, check_param("max_steps", max_steps)


def run_policies(
    requests: Sequence[Request],
    policies: Iterable[str] = tuple(POLICIES),
    engine: EngineConfig = EngineConfig(),
    max_steps: int = 20_000,
) -> dict[str, SimulationResult]:
    """:func:`run_policy` for each policy, the same requests each time."""
    requests, max_steps = _checked_run(requests, engine, max_steps)
    policies = check_names("policies", policies, POLICIES, "policy names")
    return {
        policy: run_policy(policy, requests, engine, max_steps)
        for policy in progress(policies, desc="policies", unit="policy")
    }


#: The tier configurations of the real manager: name -> ``host_cache_size`` (None: the
#: automatic host tier, the default; 0: the GPU alone).
TIERS: dict[str, int | None] = {"automatic": None, "none": 0}


def tier_runs(
    requests: Sequence[Request],
    engine: EngineConfig = EngineConfig(),
    policy: str = "none/configured",
    max_steps: int = 20_000,
) -> dict[str, SimulationResult]:
    """``simulate`` the requests under ``policy`` with each of :data:`TIERS`."""
    requests, max_steps = _checked_run(requests, engine, max_steps)
    return {
        tier: run_policy(
            policy, requests, dataclasses.replace(engine, host_cache_size=size), max_steps
        )
        for tier, size in TIERS.items()
    }


def outcome_rows(results: Mapping[str, SimulationResult]) -> list[dict]:
    """The rows of :func:`outcome_table`, one a policy."""
    check_mapping("results", results, SimulationResult, "policy -> SimulationResult")
    return [_outcome_row(policy, result) for policy, result in results.items()]


def _outcome_row(policy: str, result: SimulationResult) -> dict:
    summary = result.summary()
    rejected = result.ids_with_status(RequestState.REJECTED)
    mean = {
        k: None if summary[k] is None else round(summary[k], 2)
        for k in ("mean_wait_steps", "mean_queue_steps")
    }
    error = "" if result.error is None else f"{type(result.error).__name__}: {result.error}"
    return dict(
        policy=policy,
        outcome=engine_outcome(result),
        finished=summary["finished"],
        rejected=summary["rejected"],
        unfinished=summary["waiting"] + summary["running"],
        steps=result.end_step,
        iterations=summary["iterations"],
        goodput_tokens_per_step=round(summary["goodput_tokens_per_step"], 3),
        **mean,
        preemptions=summary["suspensions"] + summary["recomputes"],
        max_stalled_passes=max(result.trace.column("stalled_passes"), default=0),
        error=error.split(" - ")[0],
        rejected_ids=", ".join(rejected),
        reasons=" | ".join(sorted({sentence(result.reasons[i]) for i in rejected})),
    )


def outcome_table(results: Mapping[str, SimulationResult]):
    """A pandas DataFrame, one row per policy: outcome, counts, goodput (finished requests'
    tokens per iteration), mean wait and queueing steps, preemptions, the longest stall, the
    error that stopped the engine, rejected requests and why."""
    import pandas as pd

    return pd.DataFrame(outcome_rows(results)).set_index("policy")


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
    max_new_tokens = check_param("max_new_tokens", max_new_tokens)
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
    """ "Not yet" and "never" on ``engine``'s pool: "hog" holds three quarters of it a while;
    "later" (half) fits alone but not beside it; "never" asks for the configured max_seq_len
    or one page more than the pool, whichever is more."""
    check_instance("engine", engine, EngineConfig)
    max_new_tokens = check_param("max_new_tokens", max_new_tokens)
    tpb, blocks = engine.geometry.tokens_per_block, engine.total_blocks
    if blocks < 4:
        raise ValueError(f"the example needs a pool of at least 4 pages, got {blocks}")
    hog = max(1, (blocks * 3 // 4) * tpb - max_new_tokens * 4)
    later = max(1, (blocks // 2) * tpb - max_new_tokens)
    never = max(engine.max_seq_len, (blocks + 1) * tpb)
    return [
        Request("hog", hog, max_new_tokens * 4, 0),
        Request("later", later, max_new_tokens, 1),
        Request("never", never, max_new_tokens, 2),
    ]


def request_timeline(result: SimulationResult) -> list[dict]:
    """Per request: arrival, first scheduled step, end step and status."""
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
