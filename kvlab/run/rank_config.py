"""What every rank needs, checked before any starts (:class:`RunConfig`, :class:`Fault`), and how
a deployment scenario becomes one. kvlab simplifies: pages are stored at
:data:`STORAGE_BYTES_PER_TOKEN` (16 GB300 pools do not fit a laptop); every count is the model's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvlab.core.arith import div_ceil
from kvlab.core.checks import (
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_items,
    store_param,
)
from kvlab.core.geometry import KVGeometry
from kvlab.core.memory import GIB, MemoryBudget
from kvlab.core.page_index import max_blocks_per_seq, width_seq_len
from kvlab.core.pool import MAX_POOL_BLOCKS
from kvlab.core.request import Request
from kvlab.core.table_size import check_table_size
from kvlab.core.v2_storage import dense_pages
from kvlab.run.scenario_schema import Scenario, ScenarioDeployment
from kvlab.sched.policies import POLICIES, TRTLLM_POLICIES

MAX_RANKS = 128
FAULT_KINDS = ("die", "hang")
#: Bytes each page stores per token (module docstring).
STORAGE_BYTES_PER_TOKEN = 1


def storage_geometry(tokens_per_block: int) -> KVGeometry:
    """The geometry pages are stored in: :data:`STORAGE_BYTES_PER_TOKEN` a token, the model's
    pages (its counts) in real tensors a laptop holds (the ranks', kvlab replay's)."""
    return KVGeometry(
        num_layers=1,
        num_kv_heads=1,
        head_dim=STORAGE_BYTES_PER_TOKEN,
        dtype="fp8",
        tokens_per_block=tokens_per_block,
        kv_factor=1,
    )


#: The most page storage one rank allocates: 1 GiB.
MAX_RANK_STORAGE_BYTES = 1 << 30


def row_width(policy: str, max_seq_len: int, capacity_tokens: int, tokens_per_block: int) -> int:
    """The page-index row width a pool of ``capacity_tokens`` gets under a width ``policy``."""
    seq_len = width_seq_len(policy, max_seq_len, min(max_seq_len, capacity_tokens))
    return max_blocks_per_seq(seq_len, tokens_per_block)


@dataclass(frozen=True)
class Fault:
    """Make ``rank`` die (exit without a result) or hang (stop answering) at ``step``."""

    rank: int
    step: int
    kind: str

    def __post_init__(self) -> None:
        check_int("fault.rank", self.rank, low=0, high=MAX_RANKS - 1)
        check_int("fault.step", self.step, low=0, high=1 << 30)
        check_choice("fault.kind", self.kind, FAULT_KINDS)


@dataclass(frozen=True)
class RunConfig:
    """Everything every rank needs (picklable): the model's KV geometry, one memory budget per
    rank, the manager and scheduler settings, the policy, the workload and ``pins`` (request id
    -> rank)."""

    geometry: KVGeometry
    budgets: tuple[MemoryBudget, ...]
    policy: str
    max_seq_len: int
    max_batch_size: int
    max_num_tokens: int
    chunked_prefill: bool
    stall_limit: int
    max_steps: int
    requests: tuple[Request, ...]
    pins: Mapping[str, int] = field(default_factory=dict)
    fault: Fault | None = None

    def __post_init__(self) -> None:
        check_instance("geometry", self.geometry, KVGeometry)
        budgets = tuple(check_items("budgets", self.budgets, "MemoryBudgets (one per rank)"))
        check_int("len(budgets)", len(budgets), low=1, high=MAX_RANKS)
        for i, budget in enumerate(budgets):
            check_instance(f"budgets[{i}]", budget, MemoryBudget)
        requests = tuple(check_items("requests", self.requests, "Request objects"))
        for i, request in enumerate(requests):
            check_instance(f"requests[{i}]", request, Request)
        object.__setattr__(self, "budgets", budgets)
        object.__setattr__(self, "requests", requests)
        check_choice("policy", self.policy, TRTLLM_POLICIES)
        check_instance("chunked_prefill", self.chunked_prefill, bool)
        for name in ("max_steps", "max_seq_len", "max_num_tokens", "stall_limit", "max_batch_size"):
            store_param(self, name)
        ids = [r.request_id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("requests must have distinct request ids")
        for request_id, rank in check_instance("pins", self.pins, Mapping).items():
            if request_id not in ids:
                raise ValueError(f"pins names {request_id!r}, which is not among the requests")
            check_int(f"pins[{request_id!r}]", rank, low=0, high=self.world_size - 1)
        if self.fault is not None:
            fault = check_instance("fault", self.fault, Fault)
            check_int("fault.rank", fault.rank, high=self.world_size - 1)
        self._check_sizes()

    @property
    def world_size(self) -> int:
        return len(self.budgets)

    def pool_plan(self) -> tuple[tuple[int, ...], int, int]:
        """What the ranks will build: each rank's own blocks, the token capacity after
        allreduce(MIN), and the page-index width from it (0 when no page is left)."""
        geo = self.geometry
        blocks = tuple(dense_pages(b.kv_quota_bytes, geo) for b in self.budgets)
        tokens = min(blocks) * geo.tokens_per_block
        if tokens == 0:
            return blocks, 0, 0
        width = row_width(POLICIES[self.policy][1], self.max_seq_len, tokens, geo.tokens_per_block)
        return blocks, tokens, width

    def _check_sizes(self) -> None:
        """A pool after the MIN (at least one page, at most MAX_POOL_BLOCKS and
        MAX_RANK_STORAGE_BYTES) and its page-index table, checked before any rank starts."""
        geo = self.geometry
        blocks, tokens, width = self.pool_plan()
        if tokens == 0:
            rank = blocks.index(0)
            raise ValueError(
                f"rank {rank}'s KV quota of {self.budgets[rank].kv_quota_bytes} bytes "
                f"holds no page of {geo.bytes_per_block} bytes, so after the MIN "
                "all-reduce no rank has a pool: lower the workspace, activations or "
                "weights, or raise gpu_memory_gib"
            )
        if tokens * STORAGE_BYTES_PER_TOKEN > MAX_RANK_STORAGE_BYTES:
            raise ValueError(
                f"each rank's pool would hold {tokens} tokens, stored at "
                f"{STORAGE_BYTES_PER_TOKEN} byte per token: more than "
                f"MAX_RANK_STORAGE_BYTES={MAX_RANK_STORAGE_BYTES}; the KV geometry "
                f"({geo.bytes_per_token} bytes per token) is too small for the memory budget"
            )
        pages = tokens // geo.tokens_per_block
        if pages > MAX_POOL_BLOCKS:
            raise ValueError(
                f"each rank's pool would have {pages} pages of {geo.tokens_per_block} "
                f"token(s), more than MAX_POOL_BLOCKS={MAX_POOL_BLOCKS}: raise "
                "tokens_per_block or lower the memory budget"
            )
        check_table_size(self.max_batch_size, width)


# --- a deployment scenario -> a RunConfig ----------------------------------------------------------


def ramped_budget(
    rank: int,
    ranks: int,
    *,
    gpu_gib: float,
    weights_bytes: int,
    workspace_gib: float,
    workspace_skew_gib: float,
    activations_gib: float,
    non_torch_gib: float,
    free_gpu_memory_fraction: float,
    max_gpu_total_bytes: int | None = None,
) -> MemoryBudget:
    """Rank ``rank``'s budget of ``ranks`` as ``KvCacheCreator._cal_max_memory`` counts it, the
    MoE workspace growing linearly from ``workspace_gib`` on rank 0 by ``workspace_skew_gib``."""
    workspace = workspace_gib + (workspace_skew_gib * rank / (ranks - 1) if ranks > 1 else 0.0)
    return MemoryBudget(
        total_bytes=round(gpu_gib * GIB),
        weights_bytes=weights_bytes,
        workspace_bytes=round(workspace * GIB),
        activation_peak_bytes=round(activations_gib * GIB),
        non_torch_bytes=round(non_torch_gib * GIB),
        free_gpu_memory_fraction=free_gpu_memory_fraction,
        max_gpu_total_bytes=max_gpu_total_bytes,
    )


def _deployment(scenario: Scenario) -> ScenarioDeployment:
    dep: ScenarioDeployment | None = check_instance("scenario", scenario, Scenario).deployment
    if dep is None:
        raise ValueError(f"scenario {scenario.name!r} has no deployment block")
    return dep


def rank_budget(
    scenario: Scenario, rank: int, ranks: int, workspace_gib: float | None = None
) -> MemoryBudget:
    """Rank ``rank``'s :func:`ramped_budget` in a deployment scenario; ``workspace_gib``
    overrides the scenario's base workspace."""
    dep = _deployment(scenario)
    ranks = check_int("ranks", ranks, low=1, high=MAX_RANKS)
    rank = check_int("rank", rank, low=0, high=ranks - 1)
    if workspace_gib is None:
        workspace_gib = dep.workspace_gib
    return ramped_budget(
        rank,
        ranks,
        gpu_gib=dep.gpu_memory_gib,
        weights_bytes=scenario.parameters.model_weights_bytes,
        workspace_gib=check_float("workspace_gib", workspace_gib, low=0.0, high=1 << 20),
        workspace_skew_gib=dep.workspace_skew_gib,
        activations_gib=dep.activations_gib,
        non_torch_gib=dep.non_torch_gib,
        free_gpu_memory_fraction=dep.free_gpu_memory_fraction,
    )


def scenario_geometry(scenario: Scenario) -> KVGeometry:
    """The KV geometry of a scenario's parameters (attention DP: heads are not split)."""
    p = scenario.parameters
    return KVGeometry(
        num_layers=p.num_layers,
        num_kv_heads=p.num_kv_heads,
        head_dim=p.head_dim,
        dtype=p.kv_dtype,
        tokens_per_block=p.tokens_per_block,
        attention_dp=bool(scenario.deployment and scenario.deployment.attention_dp),
    )


def scenario_numbers(scenario: Scenario) -> dict[str, int]:
    """kvlab's value of each quantity a scenario's ``expected`` block may state: one rank's pool
    (``pool_mib``, or the deployment's after the MIN), widths under both policies."""
    p, geo = scenario.parameters, scenario_geometry(scenario)
    if scenario.deployment is None:
        blocks = geo.blocks_in(p.pool_bytes)
    else:
        blocks = min(scenario_config(scenario).pool_plan()[0])
    capacity, seq_len = blocks * geo.tokens_per_block, p.configured_max_seq_len
    return {
        "bytes_per_token": geo.bytes_per_token,
        "capacity_tokens": capacity,
        "total_blocks": blocks,
        "width_clamped": row_width("clamped", seq_len, capacity, geo.tokens_per_block),
        "width_configured": row_width("configured", seq_len, capacity, geo.tokens_per_block),
        "entries_needed": div_ceil(p.context_length, geo.tokens_per_block),
    }


def scenario_config(
    scenario: Scenario,
    ranks: int | None = None,
    policy: str = "none/clamped",
    *,
    workspace_gib: float | None = None,
    context_length: int | None = None,
    stall_limit: int | None = None,
    fault: Fault | None = None,
) -> RunConfig:
    """A RunConfig from a deployment scenario for ``ranks`` ranks (default: the deployment's).
    ``context_length`` replaces the prompt of the request of ``parameters.context_length``;
    the other overrides serve the widget and fast tests. Background requests are made
    deterministically: prompts spread evenly, ``per_step`` arriving a step."""
    dep, p = _deployment(scenario), scenario.parameters
    ranks = dep.ranks if ranks is None else check_int("ranks", ranks, low=1, high=MAX_RANKS)
    if context_length is not None:
        context_length = check_int("context_length", context_length, low=1, high=1 << 30)
    requests, pins = [], {}
    if (bg := dep.background) is not None:
        for i in range(bg.count):
            span = bg.prompt_len_max - bg.prompt_len_min
            prompt = bg.prompt_len_min + (span * i // (bg.count - 1) if bg.count > 1 else 0)
            requests.append(Request(f"bg-{i:03d}", prompt, bg.max_new_tokens, i // bg.per_step))
    for spec in dep.requests:
        prompt = spec.prompt_len
        if context_length is not None and prompt == p.context_length:
            prompt = context_length
        requests.append(Request(spec.id, prompt, spec.max_new_tokens, spec.arrival_step))
        if spec.rank is not None:
            if spec.rank >= ranks:
                raise ValueError(
                    f"request {spec.id!r} is pinned to rank {spec.rank}, which a world of "
                    f"ranks={ranks} lacks"
                )
            pins[spec.id] = spec.rank
    return RunConfig(
        geometry=scenario_geometry(scenario),
        budgets=tuple(rank_budget(scenario, r, ranks, workspace_gib) for r in range(ranks)),
        policy=policy,
        max_seq_len=p.configured_max_seq_len,
        max_batch_size=p.max_batch_size,
        max_num_tokens=dep.max_num_tokens,
        chunked_prefill=dep.chunked_prefill,
        stall_limit=dep.stall_limit if stall_limit is None else stall_limit,
        max_steps=dep.max_steps,
        requests=tuple(requests),
        pins=pins,
        fault=fault,
    )
