"""Preflight: will a deployment hit issue #21470? ``kvlab plan`` and notebook 06.

A :class:`Deployment` is a model (:mod:`kvlab.analysis.models`), a GPU's memory, what else each
rank holds (weights, workspace, activations, memory torch does not see), the parallelism and
the executor's settings. :func:`plan_deployment` answers, in closed form and in the order the
real start-up goes (docs/REFERENCE.md §1-§5):

1. each rank's KV quota (``KvCacheCreator._cal_max_memory``, :class:`kvlab.core.memory.MemoryBudget`);
   for a hybrid model, the recurrent-state slots come out of it first
   (``MambaHybridCacheManagerV2``, :func:`kvlab.core.mamba.plan_residency`): merged code raises
   at construction when they do not fit;
2. each rank's pool blocks, then ``allreduce(MIN)`` of the token capacity;
3. the max_seq_len clamp and the page-index row width, under the current code (the clamped
   max_seq_len) and under the one-line fix (the configured one), and the table's bytes;
4. what a lone request of each context (prompt) length from 1 to the configured max_seq_len
   meets under each TensorRT-LLM policy (:func:`kvlab.analysis.phase.phase_verdicts`: "ok",
   "reject", "stall", "crash"), as ranges.

What it simplifies, and says in :attr:`DeploymentPlan.notes`: weights derived from a parameter
count are split evenly over tp x pp (experts under expert parallelism and attention replicated
under attention DP are not: give ``weights_gib``); a pipeline stage holds ``ceil(layers / pp)``
attention layers; sliding-window layers count as full attention; other requests' pages are not
counted (they only delay a request that fits). The host tier (``host_cache_gib``) holds pages
evicted from the GPU; the clamp and the row width count GPU pages only, so it changes no verdict
here, and the plan says so.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Dict, Optional, Tuple

import numpy as np

from kvlab.analysis.gpus import GPUS
from kvlab.analysis.models import ModelGeometry, load_model
from kvlab.analysis.phase import PhaseSetup, phase_verdicts
from kvlab.analysis.presets import ENGINE_OUTCOMES
from kvlab.analysis.rank_plan import RankPlan
from kvlab.core.checks import check_choice, check_float, check_int, store_checked
from kvlab.core.geometry import DTYPE_BYTES, STATE_DTYPES
from kvlab.core.mamba import QUOTA_TOO_SMALL, plan_residency
from kvlab.core.memory import GIB, MIB, MemoryBudget
from kvlab.core.page_index import max_blocks_per_seq, table_nbytes
from kvlab.run.distributed import ramped_workspace_gib
from kvlab.sched.policies import TRTLLM_POLICIES

#: What each policy is, in the plan's words.
POLICY_LABELS = {"none/clamped": "current TensorRT-LLM (row sized from the clamped max_seq_len)",
                 "none/configured": "the one-line fix (row sized from the configured max_seq_len)",
                 "capacity": "admission control (PR #21720, a proposal)"}
#: ``kvlab plan``'s exit code for the current code's worst verdict.
PLAN_EXIT_CODES = {"ok": 0, "reject": 0, "stall": 3, "crash": 4}
MAX_RANKS = 4096
#: Characters per line of :meth:`DeploymentPlan.explain`.
EXPLAIN_WIDTH = 100
MAX_GIB = 1 << 20  # a bound on every memory figure, in GiB


def _gib(name: str, value, low: float = 0.0) -> float:
    return check_float(name, value, low=low, high=MAX_GIB)


@dataclass(frozen=True)
class Deployment:
    """One deployment, per rank. Memory figures in GiB; ``weights_gib=None`` derives the weights
    from the model's parameter count in ``weights_dtype``; ``max_seq_len=None`` is the model's
    ``max_position_embeddings`` (TensorRT-LLM's default); ``workspace_skew_gib`` is extra
    workspace growing linearly to the last rank (issue #21470's scenario); ``kv_quota_gib`` is
    ``kv_cache_config.max_gpu_total_bytes``; ``max_num_tokens`` 8192 and chunked prefill off are
    TensorRT-LLM's defaults."""

    model: ModelGeometry
    gpu_gib: float
    weights_gib: Optional[float] = None
    weights_dtype: str = "bfloat16"
    workspace_gib: float = 0.0
    workspace_skew_gib: float = 0.0
    activations_gib: float = 0.0
    non_torch_gib: float = 0.0
    free_gpu_memory_fraction: float = 0.9
    kv_quota_gib: Optional[float] = None
    tp_size: int = 1
    pp_size: int = 1
    attention_dp: bool = False
    ranks: Optional[int] = None
    max_seq_len: Optional[int] = None
    max_batch_size: int = 2048
    max_new_tokens: int = 64
    max_num_tokens: int = 8192
    chunked_prefill: bool = False
    tokens_per_block: int = 32
    kv_dtype: Optional[str] = None
    mamba_ssm_dtype: Optional[str] = None
    host_cache_gib: float = 0.0

    def __post_init__(self):
        if not isinstance(self.model, ModelGeometry):
            raise TypeError(f"model must be a ModelGeometry, got {type(self.model).__name__}")
        store_checked(self, "gpu_gib", _gib, low=0.001)
        if self.weights_gib is None:
            if not self.model.parameters:
                raise ValueError(f"weights_gib is needed: model {self.model.name!r} states no "
                                 "parameter count to derive the weights from")
        else:
            store_checked(self, "weights_gib", _gib)
        check_choice("weights_dtype", self.weights_dtype, DTYPE_BYTES)
        for name in ("workspace_gib", "workspace_skew_gib", "activations_gib", "non_torch_gib",
                     "host_cache_gib"):
            store_checked(self, name, _gib)
        store_checked(self, "free_gpu_memory_fraction", check_float, low=0.0, high=1.0, low_open=True)
        if self.kv_quota_gib is not None:
            store_checked(self, "kv_quota_gib", _gib, low=1e-6)
        store_checked(self, "tp_size", check_int, low=1, high=MAX_RANKS)
        store_checked(self, "pp_size", check_int, low=1, high=self.model.num_layers)
        if not isinstance(self.attention_dp, bool) or not isinstance(self.chunked_prefill, bool):
            raise TypeError("attention_dp and chunked_prefill must be bools")
        if self.ranks is not None:
            store_checked(self, "ranks", check_int, low=1, high=MAX_RANKS)
        if self.max_seq_len is not None:
            store_checked(self, "max_seq_len", check_int, low=1, high=1 << 30)
        elif not self.model.max_position_embeddings:
            raise ValueError(f"max_seq_len is needed: model {self.model.name!r} states no "
                             "max_position_embeddings")
        store_checked(self, "max_batch_size", check_int, low=1, high=1 << 20)
        store_checked(self, "max_new_tokens", check_int, low=0, high=1 << 30)
        store_checked(self, "max_num_tokens", check_int, low=1, high=1 << 30)
        store_checked(self, "tokens_per_block", check_int, low=1, high=65536)
        if self.kv_dtype is not None:
            check_choice("kv_dtype", self.kv_dtype, DTYPE_BYTES)
        if self.mamba_ssm_dtype is not None:
            check_choice("mamba_ssm_dtype", self.mamba_ssm_dtype, STATE_DTYPES)
        self.kv_geometry()  # head and dtype constraints, named
        if self.model.linear_layers:
            self.mamba_geometry()

    @property
    def world_size(self) -> int:
        """Ranks that each build a KV pool: ``ranks``, else tp x pp."""
        return self.ranks if self.ranks is not None else self.tp_size * self.pp_size

    @property
    def configured_max_seq_len(self) -> int:
        return self.max_seq_len if self.max_seq_len is not None else self.model.max_position_embeddings

    def kv_geometry(self):
        return self.model.kv_geometry(self.kv_dtype, self.tokens_per_block, self.tp_size,
                                      self.pp_size, self.attention_dp)

    def mamba_geometry(self):
        return self.model.mamba_geometry(1 if self.attention_dp else self.tp_size, self.pp_size,
                                         self.mamba_ssm_dtype)

    @property
    def weights_bytes(self) -> int:
        """Per rank: ``weights_gib``, else parameters x dtype bytes / (tp x pp)."""
        if self.weights_gib is not None:
            return round(self.weights_gib * GIB)
        return int(DTYPE_BYTES[self.weights_dtype] * self.model.parameters) // (
            self.tp_size * self.pp_size)

    def budgets(self) -> Tuple[MemoryBudget, ...]:
        """Every rank's budget, its workspace ramped as the scenarios' ranks have it
        (:func:`kvlab.run.distributed.ramped_workspace_gib`)."""
        ranks = self.world_size
        return tuple(MemoryBudget(
            total_bytes=round(self.gpu_gib * GIB), weights_bytes=self.weights_bytes,
            workspace_bytes=round(ramped_workspace_gib(self.workspace_gib, self.workspace_skew_gib,
                                                       r, ranks) * GIB),
            activation_peak_bytes=round(self.activations_gib * GIB),
            non_torch_bytes=round(self.non_torch_gib * GIB),
            free_gpu_memory_fraction=self.free_gpu_memory_fraction,
            max_gpu_total_bytes=None if self.kv_quota_gib is None else round(self.kv_quota_gib * GIB))
            for r in range(ranks))


@dataclass(frozen=True)
class Segment:
    """Context lengths ``low..high`` (prompt tokens) and what each meets alone."""

    low: int
    high: int
    verdict: str


@dataclass(frozen=True)
class DeploymentPlan:
    """The answers of :func:`plan_deployment` (module docstring); :meth:`to_dict` for JSON,
    :meth:`explain` for people."""

    deployment: Deployment
    budgets: Tuple[MemoryBudget, ...]  # each rank's memory budget
    local_blocks: Tuple[int, ...]  # each rank's own pool (after any state slots), blocks
    blocks: int  # every rank's pool after the MIN
    bytes_per_token: int
    bytes_per_block: int
    capacity_tokens: int
    clamped_max_seq_len: int
    width_current: int
    width_fix: int
    table_bytes_current: int
    table_bytes_fix: int
    ranges: Dict[str, Tuple[Segment, ...]]
    hybrid: Optional[Dict[str, Any]] = None
    notes: Tuple[str, ...] = field(default_factory=tuple)
    state_bytes: Tuple[int, ...] = ()  # each rank's recurrent-state slots (merged, else the clamp's)

    @property
    def quotas(self) -> Tuple[int, ...]:
        """Each rank's KV quota, bytes."""
        return tuple(b.kv_quota_bytes for b in self.budgets)

    @property
    def clamped(self) -> bool:
        return self.clamped_max_seq_len < self.deployment.configured_max_seq_len

    def worst(self, policy: str = "none/clamped") -> str:
        """The worst verdict any context length meets under ``policy`` (construction raising
        counts as "crash" for the current code and the fix, which both keep merged slots)."""
        if self.hybrid is not None and not self.hybrid["merged_builds"] and policy != "capacity":
            return "crash"
        order = {v: i for i, v in enumerate(("ok", "reject", "stall", "crash"))}
        return max((s.verdict for s in self.ranges[policy]), key=order.__getitem__, default="ok")

    def longest(self, policy: str = "none/clamped") -> int:
        """The longest context length that finishes under ``policy`` (0: none)."""
        return max((s.high for s in self.ranges[policy] if s.verdict == "ok"), default=0)

    def first(self, verdict: str, policy: str = "none/clamped") -> Optional[int]:
        """The shortest context length meeting ``verdict`` under ``policy``, or None."""
        return min((s.low for s in self.ranges[policy] if s.verdict == verdict), default=None)

    @property
    def exit_code(self) -> int:
        return PLAN_EXIT_CODES[self.worst()]

    def rank_plans(self) -> Tuple[RankPlan, ...]:
        """Each rank as :class:`kvlab.analysis.rank_plan.RankPlan` (what the per-rank memory
        figure reads): its budget, own quota and blocks, and the pool after the MIN."""
        return tuple(RankPlan(rank, budget, quota, own, self.blocks, self.capacity_tokens,
                              self.blocks * self.bytes_per_block, self.clamped_max_seq_len,
                              self.width_current)
                     for rank, (budget, quota, own) in enumerate(zip(
                         self.budgets, self.quotas, self.local_blocks)))

    def to_dict(self) -> Dict[str, Any]:
        d = self.deployment
        return {
            "model": d.model.name, "architecture": d.model.architecture,
            "ranks": d.world_size, "tp_size": d.tp_size, "pp_size": d.pp_size,
            "attention_dp": d.attention_dp, "gpu_bytes": round(d.gpu_gib * GIB),
            "weights_bytes_per_rank": d.weights_bytes,
            "kv_quota_bytes": list(self.quotas), "local_blocks": list(self.local_blocks),
            "blocks": self.blocks, "bytes_per_token": self.bytes_per_token,
            "bytes_per_block": self.bytes_per_block, "capacity_tokens": self.capacity_tokens,
            "configured_max_seq_len": d.configured_max_seq_len,
            "clamped_max_seq_len": self.clamped_max_seq_len, "clamped": self.clamped,
            "width": {"current": self.width_current, "one_line_fix": self.width_fix},
            "table_bytes": {"current": self.table_bytes_current, "one_line_fix": self.table_bytes_fix},
            "policies": {p: {"label": POLICY_LABELS[p], "worst": self.worst(p),
                             "longest_ok": self.longest(p),
                             "ranges": [[s.low, s.high, s.verdict] for s in self.ranges[p]]}
                         for p in self.ranges},
            "hybrid": self.hybrid, "host_cache_bytes": round(d.host_cache_gib * GIB),
            "verdict": self.worst(), "exit_code": self.exit_code, "notes": list(self.notes)}

    def explain(self) -> str:
        """The plan in words, one fact a line."""
        d, geo = self.deployment, self.deployment.kv_geometry()
        lines = [f"{d.model.name} ({d.model.architecture}) on {d.world_size} rank(s) of "
                 f"{d.gpu_gib:,.1f} GiB: tp {d.tp_size}, pp {d.pp_size}"
                 f"{', attention DP' if d.attention_dp else ''}",
                 f"KV per token per rank: {geo.bytes_per_token_formula()}; one page of "
                 f"{d.tokens_per_block} tokens = {self.bytes_per_block:,} B"]
        q = sorted(set(self.quotas))
        lines.append("KV quota per rank: " + (_size(q[0]) if len(q) == 1 else
                     f"{_size(q[0])} to {_size(q[-1])}") +
                     f" ({_size(d.weights_bytes)} weights per rank)")
        if self.hybrid is not None:
            h = self.hybrid
            lines.append(f"Recurrent state: {h['slots']:,} slots ({h['requested']:,} sequences + "
                         f"{h['dummies']} reserved) x {h['slot_bytes'] / MIB:,.1f} MiB = "
                         f"{h['need_bytes'] / GIB:,.2f} GiB with one page, against "
                         f"{h['quota_bytes'] / GIB:,.2f} GiB: "
                         + ("merged TensorRT-LLM builds" if h["merged_builds"] else
                            "merged TensorRT-LLM raises at construction: " + h["error"]))
            if not h["merged_builds"]:
                lines.append(f"  PR #17261's clamp (a proposal, closed without merging) keeps "
                             f"{h['clamp_resident']:,} resident; PR #18985 (a proposal, open) "
                             f"would default max_batch_size to {h['feasible_max_batch_size']:,}")
        blocks = sorted(set(self.local_blocks))
        lines.append(f"Pool: {self.blocks:,} blocks = {self.capacity_tokens:,} tokens per rank after "
                     "the MIN all-reduce" + (f" (ranks alone: {blocks[0]:,} to {blocks[-1]:,})"
                                              if len(blocks) > 1 else ""))
        lines.append(f"max_seq_len {d.configured_max_seq_len:,}: " +
                     (f"clamped to {self.clamped_max_seq_len:,}" if self.clamped else "not clamped"))
        lines.append(f"Page-index row: {self.width_current:,} entries now, {self.width_fix:,} "
                     f"under the one-line fix; table {self.table_bytes_current:,} B now, "
                     f"{self.table_bytes_fix:,} B under the fix")
        if d.host_cache_gib:
            lines.append(f"Host tier: {d.host_cache_gib:,.1f} GiB; it holds evicted pages, and the "
                         "clamp and the row count GPU pages only, so no verdict below changes")
        lines.append(f"A lone request of 1..{d.configured_max_seq_len:,} prompt tokens "
                     f"(+{d.max_new_tokens:,} new):")
        for policy, segments in self.ranges.items():
            lines.append(f"  {POLICY_LABELS[policy]}:")
            lines += [f"    {s.low:,}-{s.high:,} {s.verdict}" for s in segments]
        lines.append(f"Longest context that finishes now: {self.longest():,} tokens"
                     + (" (no rank can build a pool)" if not self.blocks else ""))
        verdict = self.worst()
        if not self.blocks:
            lines.append("Verdict: cannot start, no rank can build a KV pool")
        elif self.hybrid is not None and not self.hybrid["merged_builds"]:
            lines.append("Verdict: merged TensorRT-LLM raises ValueError at construction (the state "
                         "slots do not fit); lower max_batch_size or give the caches more memory")
        else:
                lines.append({"ok": "Verdict: safe, every context up to max_seq_len finishes",
                          "reject": "Verdict: safe, contexts that cannot run are rejected with a reason",
                          "stall": "Verdict: at risk, a long context stalls the engine (SchedulerDeadlock)",
                          "crash": "Verdict: at risk of issue #21470, a long context raises ValueError "
                                   "and takes every rank down"}[verdict])
        lines += [f"Note: {n}" for n in self.notes]
        # whole words on every line, in a terminal as in a notebook's narrow output
        return "\n".join(textwrap.fill(line, EXPLAIN_WIDTH, subsequent_indent="    ",
                                        break_long_words=False, break_on_hyphens=False)
                          for line in lines)


def _size(nbytes: int) -> str:
    """Bytes in GiB, or MiB below one GiB."""
    return f"{nbytes / GIB:,.2f} GiB" if nbytes >= GIB else f"{nbytes / MIB:,.2f} MiB"


def _change_points(setup: PhaseSetup, max_len: int) -> np.ndarray:
    """The context lengths in 1..max_len where a lone request's verdict can change: where a block
    count does (context, context + new - 1, context + new, each with the extra tokens) and past
    max_num_tokens. Evaluating these is exact (:func:`phase_verdicts` counts blocks)."""
    tpb, extra, new = setup.geometry.tokens_per_block, setup.num_extra_kv_tokens, setup.max_new_tokens
    ks = np.arange(0, (max_len + extra + new) // tpb + 2, dtype=np.int64) * tpb
    points = np.sort(np.concatenate([[1, setup.max_num_tokens + 1], ks - extra + 1,
                                     ks - extra - max(new - 1, 0) + 1, ks - extra - new + 1]))
    points = points[(points >= 1) & (points <= max_len)]
    return points[np.concatenate([[True], np.diff(points) != 0])]


def _segments(pool_blocks: int, regime: str, setup: PhaseSetup, points: np.ndarray,
              max_len: int) -> Tuple[Segment, ...]:
    """The verdicts of context lengths 1..max_len as ranges (``points``: :func:`_change_points`)."""
    codes = phase_verdicts([pool_blocks], points, regime, setup)[0]
    starts = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
    ends = np.concatenate([points[starts[1:]] - 1, [max_len]])
    return tuple(Segment(int(points[s]), int(e), ENGINE_OUTCOMES[codes[s]])
                 for s, e in zip(starts, ends))


def plan_deployment(deployment: Deployment) -> DeploymentPlan:
    """The plan of ``deployment`` (module docstring): nothing allocated, nothing run."""
    if not isinstance(deployment, Deployment):
        raise TypeError(f"deployment must be a Deployment, got {type(deployment).__name__}")
    d = deployment
    geo = d.kv_geometry()
    budgets = d.budgets()
    quotas = tuple(b.kv_quota_bytes for b in budgets)
    notes = list(d.model.notes)
    if d.weights_gib is None:
        notes.append(f"weights: {d.model.parameters:,} parameters in {d.weights_dtype} split evenly "
                     f"over tp {d.tp_size} x pp {d.pp_size} (experts and replicated attention are "
                     "not modelled; give weights_gib for them)")
    if d.pp_size > 1:
        notes.append(f"pipeline: each stage planned with the largest stage's "
                     f"{geo.num_layers} attention layer(s)")
    hybrid = None
    mamba = d.mamba_geometry() if d.model.linear_layers else None
    slot_bytes = [0] * len(quotas)
    if mamba is not None:
        smallest = min(quotas)
        plan = plan_residency(mamba, geo, max(smallest, 1), d.max_batch_size, d.pp_size,
                              attention_dp=d.attention_dp)
        slots = plan.requested + plan.dummies
        builds = plan.raw_fits
        hybrid = dict(slot_bytes=plan.slot_bytes, requested=plan.requested, dummies=plan.dummies,
                      slots=slots, need_bytes=plan.raw_need_bytes, quota_bytes=smallest,
                      merged_builds=builds, clamp_resident=max(plan.local_cap, 0),
                      feasible_max_batch_size=plan.feasible_max_batch_size(),
                      ssm_dtype=mamba.ssm_dtype,
                      error="" if builds else "ValueError: " + QUOTA_TOO_SMALL.format(
                          got=plan.quota_bytes, need=plan.raw_need_bytes))
        resident = plan.requested if builds else max(plan.local_cap, 0)
        slot_bytes = [(resident + plan.dummies) * plan.slot_bytes if resident else 0] * len(quotas)
        if not builds:
            notes.append("merged code raises at construction, so nothing runs; the context "
                         "verdicts are for the pool PR #17261's clamp (a proposal) would leave")
    local = tuple(max(q - s, 0) // geo.bytes_per_block for q, s in zip(quotas, slot_bytes))
    blocks = min(local)
    capacity = blocks * geo.tokens_per_block
    configured = d.configured_max_seq_len
    clamped = min(configured, capacity) if capacity else configured
    width_now = max_blocks_per_seq(clamped, geo.tokens_per_block)
    width_fix = max_blocks_per_seq(configured, geo.tokens_per_block)
    if blocks:
        setup = PhaseSetup(geometry=geo, max_seq_len=configured, max_new_tokens=d.max_new_tokens,
                           max_num_tokens=(1 << 30) if d.chunked_prefill else d.max_num_tokens)
        points = _change_points(setup, configured)
        ranges = {p: _segments(blocks, p, setup, points, configured) for p in TRTLLM_POLICIES}
    else:  # a rank's weights, workspace and the rest leave no page: nothing can start
        rank = local.index(0)
        notes.append(f"rank {rank}'s KV quota ({_size(quotas[rank])}) holds no "
                     f"{_size(geo.bytes_per_block)} page after what else it holds "
                     f"({_size(budgets[rank].peak_memory_bytes)} of {_size(budgets[rank].total_bytes)}): "
                     "the executor cannot start under any policy (kvlab does not model the exact "
                     "start-up error); give more ranks, a larger GPU or less memory to the rest")
        ranges = {p: (Segment(1, configured, "crash"),) for p in TRTLLM_POLICIES}
    if d.chunked_prefill and any(s.verdict == "stall" for s in ranges["none/clamped"]):
        notes.append("chunked prefill: a chunk boundary falling between the pool and the row end "
                     "can make a stall here a crash")
    return DeploymentPlan(d, budgets, local, blocks, geo.bytes_per_token, geo.bytes_per_block,
                          capacity, clamped, width_now, width_fix,
                          table_nbytes(d.max_batch_size, width_now, d.pp_size),
                          table_nbytes(d.max_batch_size, width_fix, d.pp_size),
                          ranges, hybrid, tuple(notes), tuple(slot_bytes))


def example_deployments() -> Dict[str, Deployment]:
    """The walk's three deployments from the shipped presets: issue #21470 as kvlab's scenario
    assumes it (notebook 01), the seed's 4 MiB repro (notebook 02) and PR #17261's Qwen3.5-27B on
    an H100 with 24.86 GiB for the caches (notebook 05)."""
    from kvlab.analysis.mamba_residency import PR_MAX_BATCH_SIZE, PR_QUOTA_BYTES
    from kvlab.analysis.models import geometry_from_config
    from kvlab.run.scenarios import load_scenario

    examples = {}
    scenario = load_scenario("issue-21470")
    p, dep = scenario.parameters, scenario.deployment
    examples["issue-21470"] = Deployment(
        model=load_model("qwen3-235b-a22b"), gpu_gib=dep.gpu_memory_gib,
        weights_gib=p.model_weights_bytes / GIB, workspace_gib=dep.workspace_gib,
        workspace_skew_gib=dep.workspace_skew_gib, activations_gib=dep.activations_gib,
        non_torch_gib=dep.non_torch_gib, free_gpu_memory_fraction=dep.free_gpu_memory_fraction,
        attention_dp=dep.attention_dp, ranks=dep.ranks, tp_size=dep.ranks,
        max_seq_len=p.configured_max_seq_len, max_batch_size=p.max_batch_size,
        max_new_tokens=dep.requests[0].max_new_tokens, max_num_tokens=dep.max_num_tokens,
        chunked_prefill=dep.chunked_prefill, tokens_per_block=p.tokens_per_block,
        kv_dtype=p.kv_dtype)
    repro = load_scenario("rtx5080-4mib").parameters
    seed = geometry_from_config(
        SimpleNamespace(model_type="seed", num_hidden_layers=repro.num_layers, num_attention_heads=repro.num_kv_heads,
                num_key_value_heads=repro.num_kv_heads, head_dim=repro.head_dim,
                torch_dtype=repro.kv_dtype, max_position_embeddings=repro.configured_max_seq_len),
        name="seed-repro", source="the seed's repro model: 2 layers, 2 KV heads of 128, fp16",
        where="data/scenarios/rtx5080-4mib.yaml")
    examples["rtx5080-4mib"] = Deployment(
        model=seed, gpu_gib=GPUS["rtx-5080"].gib, weights_gib=repro.model_weights_bytes / GIB,
        kv_quota_gib=repro.pool_mib / 1024, max_seq_len=repro.configured_max_seq_len,
        max_batch_size=repro.max_batch_size, max_new_tokens=16, tokens_per_block=repro.tokens_per_block,
        kv_dtype=repro.kv_dtype)
    examples["pr-17261"] = Deployment(
        model=load_model("qwen3.5-27b"), gpu_gib=GPUS["h100-80gb"].gib,
        kv_quota_gib=PR_QUOTA_BYTES / GIB, max_batch_size=PR_MAX_BATCH_SIZE,
        max_seq_len=32768, mamba_ssm_dtype="bfloat16")
    return examples


__all__ = ["Deployment", "DeploymentPlan", "PLAN_EXIT_CODES", "POLICY_LABELS", "Segment",
           "example_deployments", "plan_deployment"]
