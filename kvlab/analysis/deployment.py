"""Preflight: will a deployment hit issue #21470? ``kvlab plan`` and notebook 06.

:func:`plan_deployment` follows the real start-up in closed form (docs/REFERENCE.md §1-§5, §8):
the manager; each rank's pool per stage; ``allreduce(MIN)``; the clamp and V2's row width, now and
under the one-line fix; what a lone request of each context length meets. [kvlab] The
simplifications (even weights, sliding windows as full attention, ...) are in the plan's notes.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from kvlab.analysis.context_ranges import Segment, change_points, v1_segments, v2_segments
from kvlab.analysis.deployment_spec import Deployment
from kvlab.analysis.gpus import GPUS
from kvlab.analysis.hybrid_split import hybrid_plan
from kvlab.analysis.mamba_residency import PR_MAX_BATCH_SIZE, PR_QUOTA_BYTES
from kvlab.analysis.models import geometry_from_config, load_model
from kvlab.analysis.phase import PhaseSetup
from kvlab.analysis.presets import ENGINE_OUTCOMES
from kvlab.analysis.rank_plan import RankPlan
from kvlab.analysis.v1_capacity import estimated_bytes_per_token, free_at_construction, v1_tokens
from kvlab.core.arith import div_ceil
from kvlab.core.checks import check_instance
from kvlab.core.memory import GIB, MIB, MemoryBudget
from kvlab.core.page_index import max_blocks_per_seq
from kvlab.core.table_size import table_nbytes
from kvlab.core.v2_storage import dense_pages
from kvlab.core.words import counted
from kvlab.run.scenarios import load_scenario
from kvlab.sched.policies import TRTLLM_POLICIES

CURRENT_POLICY = {"v1": "v1", "v2": "none/clamped"}
#: PR #17261's clamp (a proposal): the ranges of the pool it would leave when merged code raises.
CLAMP_PROPOSAL = "pr-17261"
POLICY_LABELS = {
    "none/clamped": "current TensorRT-LLM (row sized from the clamped max_seq_len)",
    "none/configured": "the one-line fix (row sized from the configured max_seq_len)",
    "capacity": "admission control (PR #21720, a proposal)",
    "v1": "current TensorRT-LLM, V1 KVCacheManager (the worker rejects a prompt of "
    "the clamped max_seq_len or more)",
    CLAMP_PROPOSAL: "PR #17261's clamp (a proposal, closed without merging): the "
    "pool it would leave",
}
#: ``kvlab plan``'s exit code: the current code's worst verdict, 5 when most lengths are refused.
PLAN_EXIT_CODES = {"ok": 0, "reject": 0, "stall": 3, "crash": 4}
MOSTLY_REFUSED_EXIT = 5
EXPLAIN_WIDTH = 100  # characters per line of DeploymentPlan.explain


@dataclass(frozen=True)
class DeploymentPlan:
    """:func:`plan_deployment`'s answers: :meth:`to_dict` for JSON, :meth:`explain` for people."""

    deployment: Deployment
    budgets: tuple[MemoryBudget, ...]  # each rank's memory budget
    quotas: tuple[int, ...]  # each rank's KV quota (V2) or KV memory at construction (V1)
    local_blocks: tuple[int, ...]  # each rank's own pool (after any state slots), blocks
    blocks: int  # every rank's pool after the MIN
    bytes_per_token: int  # the stage with the most attention layers
    bytes_per_block: int
    capacity_tokens: int
    clamped_max_seq_len: int
    width_current: int
    width_fix: int | None
    table_bytes_current: int | None
    table_bytes_fix: int | None
    ranges: dict[str, tuple[Segment, ...]]
    hybrid: dict[str, Any] | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    state_bytes: tuple[int, ...] = ()  # each rank's state slots (merged, else the clamp's)
    estimated_bytes_per_token: int = 0  # V1: the creator's estimate, the same stage
    stage: int = 0  # the largest stage: bytes_per_token's and the explanation's
    paged: tuple[bool, ...] = ()  # each rank holds KV pages (a Mamba-only stage does not)

    @property
    def manager(self) -> str:
        return self.deployment.resolved_manager

    @property
    def current_policy(self) -> str:
        return CURRENT_POLICY[self.manager]

    @property
    def starts(self) -> bool:
        """Merged TensorRT-LLM builds its caches and every rank holds a page."""
        return bool(self.blocks) and (self.hybrid is None or self.hybrid["merged_builds"])

    @property
    def clamped(self) -> bool:
        return self.clamped_max_seq_len < self.deployment.kv_max_seq_len

    def worst(self, policy: str | None = None) -> str:
        """The worst verdict under ``policy`` (default: the current code's); "crash" where the
        engine cannot start, for every policy but the proposal that changes construction."""
        policy = policy or self.current_policy
        if not self.starts and policy != CLAMP_PROPOSAL:
            return "crash"
        verdicts = (s.verdict for s in self.ranges.get(policy, ()))
        return max(verdicts, key=ENGINE_OUTCOMES.index, default="ok")

    def longest(self, policy: str | None = None) -> int:
        """The longest context length that finishes under ``policy`` (0: none)."""
        segments = self.ranges.get(policy or self.current_policy, ())
        return max((s.high for s in segments if s.verdict == "ok"), default=0)

    def first(self, verdict: str, policy: str | None = None) -> int | None:
        """The shortest context length meeting ``verdict`` under ``policy``, or None."""
        segments = self.ranges.get(policy or self.current_policy, ())
        return min((s.low for s in segments if s.verdict == verdict), default=None)

    @property
    def refused_by_max_num_tokens(self) -> int:
        """Context lengths up to max_seq_len that ``max_num_tokens`` refuses (no chunking)."""
        d = self.deployment
        return 0 if d.chunked_prefill else max(0, d.configured_max_seq_len - d.max_num_tokens)

    @property
    def mostly_refused(self) -> bool:
        return (
            self.starts
            and 2 * self.refused_by_max_num_tokens > self.deployment.configured_max_seq_len
        )

    @property
    def exit_code(self) -> int:
        code = PLAN_EXIT_CODES[self.worst()]
        refused = self.mostly_refused or (self.starts and self.longest() == 0)
        return MOSTLY_REFUSED_EXIT if code == 0 and refused else code

    def rank_plans(self) -> tuple[RankPlan, ...]:
        """Each rank as a :class:`~kvlab.analysis.rank_plan.RankPlan` (the per-rank figure's)."""
        return tuple(
            RankPlan(
                rank=rank,
                budget=budget,
                local_quota_bytes=quota,
                local_blocks=own,
                blocks=self.blocks,
                capacity_tokens=self.capacity_tokens,
                quota_bytes=self.blocks * self.bytes_per_block,
                max_seq_len=self.clamped_max_seq_len,
                max_blocks_per_seq=self.width_current,
            )
            for rank, (budget, quota, own) in enumerate(
                zip(self.budgets, self.quotas, self.local_blocks, strict=True)
            )
        )

    def to_dict(self) -> dict[str, Any]:
        d = self.deployment
        pool = {
            "local_blocks": list(self.local_blocks),
            "blocks": self.blocks,
            "capacity_tokens": self.capacity_tokens,
            "clamped_max_seq_len": self.clamped_max_seq_len,
            "clamped": self.clamped,
            "width": {"current": self.width_current, "one_line_fix": self.width_fix},
            "table_bytes": {
                "current": self.table_bytes_current,
                "one_line_fix": self.table_bytes_fix,
            },
        }
        return {
            "model": d.model.name,
            "architecture": d.model.architecture,
            "manager": self.manager,
            "ranks": d.world_size,
            "tp_size": d.tp_size,
            "pp_size": d.pp_size,
            "attention_dp": d.attention_dp,
            "gpu_bytes": round(d.gpu_gib * GIB),
            "weights_bytes_per_rank": d.weights_bytes,
            "kv_dtype": d.kv_geometry().dtype,
            ("kv_quota_bytes" if self.manager == "v2" else "kv_free_bytes_at_construction"): list(
                self.quotas
            ),
            "bytes_per_token": self.bytes_per_token,
            "estimated_bytes_per_token": self.estimated_bytes_per_token or None,
            "bytes_per_block": self.bytes_per_block,
            "requested_max_seq_len": d.requested_max_seq_len,
            "configured_max_seq_len": d.configured_max_seq_len,
            "kv_max_seq_len": d.kv_max_seq_len,
            "starts": self.starts,
            # the pool and what follows from it exist only where the engine starts; where
            # merged code raises they are PR #17261's clamp's, under its own key
            **(
                pool
                if self.starts
                else {**dict.fromkeys(pool), "proposals": {CLAMP_PROPOSAL: pool}}
            ),
            "policies": {
                p: {
                    "label": POLICY_LABELS[p],
                    "worst": self.worst(p),
                    "longest_ok": self.longest(p),
                    "ranges": [[s.low, s.high, s.verdict] for s in self.ranges[p]],
                }
                for p in self.ranges
            },
            "refused_by_max_num_tokens": self.refused_by_max_num_tokens,
            "hybrid": self.hybrid,
            "host_cache": _host_tier(d),
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "notes": list(self.notes),
        }

    @property
    def verdict(self) -> str:
        """The current code's answer in a few words."""
        if not self.blocks:
            return "cannot start, no rank can build a KV pool"
        if not self.starts:
            return (
                "merged TensorRT-LLM raises ValueError at construction (the state slots do "
                "not fit); lower max_batch_size or give the caches more memory"
            )
        if self.longest() == 0:
            return (
                "every context refused: no prompt fits what the pool and the settings leave "
                f"(max_seq_len clamped to {self.clamped_max_seq_len:,}); see the ranges"
            )
        if self.mostly_refused:
            d = self.deployment
            return (
                f"most contexts refused: max_num_tokens ({d.max_num_tokens:,}) refuses every "
                f"prompt over it, {self.refused_by_max_num_tokens:,} of the "
                f"{d.configured_max_seq_len:,} lengths up to max_seq_len; turn on chunked "
                "prefill or raise max_num_tokens"
            )
        return {
            "ok": "safe, every context up to max_seq_len finishes",
            "reject": "safe, contexts that cannot run are rejected with a reason",
            "stall": "at risk, a long context stalls the engine (SchedulerDeadlock)",
            "crash": "at risk of issue #21470, a long context raises ValueError and takes "
            "every rank down",
        }[self.worst()]

    def explain(self, width: int | None = EXPLAIN_WIDTH) -> str:
        """The plan in words, one fact a line wrapped at ``width`` (None: not wrapped)."""
        d = self.deployment
        geo = d.kv_geometry(self.stage)
        manager = {
            "v1": "KV cache manager V1 (KVCacheManager)",
            "v2": "KV cache manager V2 (KVCacheManagerV2)",
        }[self.manager]
        ranks = counted(d.world_size, "rank")
        lines = [
            f"{d.model.name} ({d.model.architecture}) on {ranks} of "
            f"{d.gpu_gib:,.1f} GiB: tp {d.tp_size}, pp {d.pp_size}"
            f"{', attention DP' if d.attention_dp else ''}; {manager}",
            f"KV per token per rank: {geo.bytes_per_token_formula()}; one page of "
            f"{d.tokens_per_block} tokens = {self.bytes_per_block:,} B",
        ]
        if self.manager == "v1" and self.estimated_bytes_per_token != self.bytes_per_token:
            lines.append(
                f"The creator's estimate: {self.estimated_bytes_per_token:,} B per token "
                f"(get_cache_size_per_token: the model's own attention layers, "
                f"head_dim x KV heads // tp, a floor over all heads), "
                f"{self.bytes_per_token / max(self.estimated_bytes_per_token, 1):.2f}x "
                "below the real bytes"
            )
        q = sorted(set(self.quotas))
        what = "KV quota per rank" if self.manager == "v2" else "Free at construction per rank"
        lines.append(
            f"{what}: "
            + (_size(q[0]) if len(q) == 1 else f"{_size(q[0])} to {_size(q[-1])}")
            + f" ({_size(d.weights_bytes)} weights per rank)"
        )
        if self.hybrid is not None:
            h = self.hybrid
            lines.append(
                f"Recurrent state (stage {h['stage']}): {h['slots']:,} slots "
                f"({h['requested']:,} sequences + {h['dummies']} reserved) x "
                f"{h['slot_bytes'] / MIB:,.1f} MiB = {h['need_bytes'] / GIB:,.2f} GiB with "
                f"one page, against {h['quota_bytes'] / GIB:,.2f} GiB: "
                + (
                    "merged TensorRT-LLM builds"
                    if h["merged_builds"]
                    else "merged TensorRT-LLM raises at construction: " + h["error"]
                )
            )
            if len(h["stages"]) > 1:
                lines.append(
                    "  per stage (attention/recurrent layers, need of quota): "
                    + "; ".join(
                        f"{st['stage']}: {st['attention_layers']}/{st['recurrent_layers']}, "
                        f"{st['need_bytes'] / GIB:,.2f} of {st['quota_bytes'] / GIB:,.2f} GiB"
                        for st in h["stages"]
                    )
                )
            if not h["merged_builds"]:
                lines.append(
                    f"  PR #17261's clamp (a proposal, closed without merging) keeps "
                    f"{h['clamp_resident']:,} resident; PR #18985 (a proposal, open) "
                    f"would default max_batch_size to {h['feasible_max_batch_size']:,}"
                )
        if self.blocks:
            blocks = sorted({b for b, paged in zip(self.local_blocks, self.paged) if paged})
            lines.append(
                f"Pool: {self.blocks:,} blocks = {self.capacity_tokens:,} tokens "
                + ("per rank after the MIN all-reduce" if d.world_size > 1 else "on its one rank")
                + (f" (ranks alone: {blocks[0]:,} to {blocks[-1]:,})" if len(blocks) > 1 else "")
                + ("" if self.starts else ", under PR #17261's clamp")
            )
            lines.append(
                f"max_seq_len {d.configured_max_seq_len:,} (the KV manager's "
                f"{d.kv_max_seq_len:,}: {_kv_len_terms(d)}): "
                + (f"clamped to {self.clamped_max_seq_len:,}" if self.clamped else "not clamped")
            )
            if self.starts and self.manager == "v2":
                lines.append(
                    f"Page-index row: {self.width_current:,} entries now, {self.width_fix:,} "
                    f"under the one-line fix; table {self.table_bytes_current:,} B now, "
                    f"{self.table_bytes_fix:,} B under the fix"
                )
            elif self.starts:  # no table exists where construction raises
                lines.append(
                    f"Blocks per sequence: {self.width_current:,} (ceil of the KV manager's "
                    f"max_seq_len{', as clamped,' if self.clamped else ''} "
                    f"{self.clamped_max_seq_len:,} over {d.tokens_per_block:,} tokens a block"
                    + (
                        ", one more after a beam-search clamp)"
                        if d.max_beam_width > 1 and self.clamped
                        else ")"
                    )
                )
        lines.append(f"Host tier: {_host_tier(d)['text']}")
        if self.ranges:
            lines.append(
                f"A lone request of 1..{d.configured_max_seq_len:,} prompt tokens "
                f"(+{d.max_new_tokens:,} new):"
            )
            for policy, segments in self.ranges.items():
                lines.append(f"  {POLICY_LABELS[policy]}:")
                lines += [f"    {s.low:,}-{s.high:,} {s.verdict}" for s in segments]
        if self.starts:
            lines.append(f"Longest context that finishes now: {self.longest():,} tokens")
        if self.mostly_refused:
            lines.append(
                f"WARNING: max_num_tokens ({d.max_num_tokens:,}) refuses every prompt "
                f"over {d.max_num_tokens:,} tokens with chunked prefill off: "
                f"{self.refused_by_max_num_tokens:,} of the {d.configured_max_seq_len:,} "
                "context lengths up to max_seq_len"
            )
        lines.append(f"Verdict: {self.verdict}")
        lines += [f"Note: {n}" for n in self.notes]
        if width is None:
            return "\n".join(lines)
        # whole words on every line, in a terminal as in a notebook's narrow output
        return "\n".join(
            textwrap.fill(
                line,
                width,
                subsequent_indent="    ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            for line in lines
        )


def _kv_len_terms(d: Deployment) -> str:
    terms = [] if d.disable_overlap_scheduler else [f"+{1 + d.max_draft_len} overlap scheduler"]
    if d.spec_mode:
        terms.append(f"+{d.num_extra_kv_tokens + d.max_draft_len} speculative decoding")
    return ", ".join(terms) or "as configured"


def _host_tier(d: Deployment) -> dict[str, Any]:
    """The host tier as configured: its bytes, or upstream's default for the manager."""
    if d.host_cache_gib is not None:
        return {
            "bytes": round(d.host_cache_gib * GIB),
            "text": f"{d.host_cache_gib:,.1f} GiB per rank; it holds evicted pages, and the "
            "clamp and the row count GPU pages only, so no verdict changes",
        }
    if d.resolved_manager == "v1":
        return {"bytes": 0, "text": "none (V1's default host_cache_size)"}
    return {
        "bytes": None,
        "text": "automatic (V2's default: min(the quota, half the host's "
        "available memory per rank on the node, 80 % of the "
        "memlock limit)); it changes no verdict here",
    }


def plan_deployment(deployment: Deployment) -> DeploymentPlan:
    """The plan of ``deployment`` (module docstring): nothing allocated, nothing run."""
    d = check_instance("deployment", deployment, Deployment)
    manager = d.resolved_manager
    budgets = d.budgets()
    stages = [d.stage_of(r) for r in range(d.world_size)]
    tpb = d.tokens_per_block
    notes = list(d.model.notes)
    notes += _setting_notes(d)

    hybrid, slot_bytes, pages = None, [0] * d.world_size, None
    # V1 allocates a layer even for a stage with none
    has_pages = [manager == "v1" or d.attention_layers(s) > 0 for s in stages]
    if manager == "v1":
        quotas = tuple(free_at_construction(b) for b in budgets)
        pages = [int(v1_tokens(d, b, s) // tpb) for b, s in zip(budgets, stages)]
    else:
        quotas = tuple(b.kv_quota_bytes for b in budgets)
        if d.model.linear_layers:
            hybrid, slot_bytes, pages = hybrid_plan(d, quotas, stages)
            if not hybrid["merged_builds"]:
                notes.append(
                    f"merged code raises at construction on pipeline stage "
                    f"{hybrid['stage']}, so nothing runs under any current policy; the "
                    "ranges given are for the pool PR #17261's clamp (a proposal) would leave"
                )
    if pages is None and manager == "v2" and hybrid is None:  # the storage manager's granules
        pages = [dense_pages(q, d.kv_geometry(s)) for q, s in zip(quotas, stages)]
    if pages is None:  # [kvlab] PR #17261's clamp: the quota less the slots it keeps
        pages = [
            max(q - sb, 0) // d.kv_geometry(s).bytes_per_block
            for q, sb, s in zip(quotas, slot_bytes, stages)
        ]
    local = tuple(pages)
    blocks = min((b for b, paged in zip(local, has_pages) if paged), default=0)
    capacity = blocks * tpb
    configured, kv_len = d.configured_max_seq_len, d.kv_max_seq_len
    beam, extra = d.max_beam_width, d.num_extra_kv_tokens
    if manager == "v1":  # the window's upper bound (get_max_atten_window_upper_bound)
        bound = (blocks // beam) * tpb
        bound -= tpb if beam > 1 and kv_len > bound else 0
    else:
        bound = capacity
    clamped = min(kv_len, max(bound, 0)) if blocks else kv_len
    if manager == "v1":  # C++ ceilDiv(window + (one more block under a beam clamp), tpb)
        width_now = div_ceil(clamped, tpb) + (1 if beam > 1 and clamped < kv_len else 0)
        width_fix = table_now = table_fix = None
    else:
        pools = max((h["num_pools"] for h in hybrid["stages"]), default=1) if hybrid else 1
        reserved = hybrid["dummies"] if hybrid else 1
        width_now, width_fix = (
            max_blocks_per_seq(n, tpb, extra, d.max_draft_len) for n in (clamped, kv_len)
        )
        table_now, table_fix = (
            table_nbytes(d.max_batch_size, w, d.pp_size, num_pools=pools, num_reserved=reserved)
            for w in (width_now, width_fix)
        )

    starts = bool(blocks) and (hybrid is None or hybrid["merged_builds"])
    setup = PhaseSetup(
        geometry=d.kv_geometry(),
        max_seq_len=kv_len,
        max_new_tokens=d.max_new_tokens,
        max_num_tokens=(1 << 30) if d.chunked_prefill else d.max_num_tokens,
        num_extra_kv_tokens=extra + d.max_draft_len,
    )
    if not blocks:
        ranges = {}
        rank = min(range(len(local)), key=lambda r: (not has_pages[r], local[r]))
        notes.append(
            f"rank {rank}'s KV memory ({_size(quotas[rank])}) holds no "
            f"{_size(d.kv_geometry(stages[rank]).bytes_per_block)} page after what else it "
            f"holds ({_size(budgets[rank].peak_memory_bytes)} of "
            f"{_size(budgets[rank].total_bytes)}): the executor cannot start (kvlab does "
            "not model the exact start-up error); give more ranks, a larger GPU or less "
            "memory to the rest"
        )
    elif manager == "v1":
        ranges = {"v1": v1_segments(d, clamped)}
    else:  # where construction raises, only the proposal that changes it runs
        points = change_points(setup, configured)
        keys = {p: p for p in TRTLLM_POLICIES} if starts else {CLAMP_PROPOSAL: "none/clamped"}
        ranges = {k: v2_segments(blocks, p, setup, points, configured) for k, p in keys.items()}
    if d.chunked_prefill and any(s.verdict == "stall" for s in ranges.get("none/clamped", ())):
        notes.append(
            "chunked prefill: a context listed as a stall can crash instead, depending on "
            "where its chunk boundaries fall between the end of the pool and the end of the row"
        )
    notes += _admission_edge_note(ranges, d.max_new_tokens)
    biggest = max(range(d.pp_size), key=lambda s: d.kv_geometry(s).bytes_per_token)
    big = d.kv_geometry(biggest)
    return DeploymentPlan(
        deployment=d,
        budgets=budgets,
        quotas=quotas,
        local_blocks=local,
        blocks=blocks,
        bytes_per_token=big.bytes_per_token,
        bytes_per_block=big.bytes_per_block,
        capacity_tokens=capacity,
        clamped_max_seq_len=clamped,
        width_current=width_now,
        width_fix=width_fix,
        table_bytes_current=table_now,
        table_bytes_fix=table_fix,
        ranges=ranges,
        hybrid=hybrid,
        notes=tuple(notes),
        state_bytes=tuple(slot_bytes),
        estimated_bytes_per_token=estimated_bytes_per_token(d, biggest) if manager == "v1" else 0,
        stage=biggest,
        paged=tuple(has_pages),
    )


def _admission_edge_note(ranges: dict, max_new_tokens: int) -> list[str]:
    """Where admission control rejects contexts current code finishes: PR #21720's demand counts
    the KV of every new token, and the engine never stores the last one's."""
    ok = {
        k: [s for s in ranges.get(k, ()) if s.verdict == "ok"] for k in ("none/clamped", "capacity")
    }
    if not (ok["none/clamped"] and ok["capacity"]):
        return []
    now, admitted = ok["none/clamped"][-1].high, ok["capacity"][-1].high
    if admitted >= now:
        return []
    span = f"{admitted + 1:,}" if now == admitted + 1 else f"{admitted + 1:,}-{now:,}"
    return [
        f"admission control rejects {span}, which current code finishes: its demand counts the "
        f"KV of all {max_new_tokens:,} new tokens, and the engine never stores the last one's"
    ]


def _setting_notes(d: Deployment) -> list:
    """What the executor does to the settings before any cache exists, said in the plan."""
    notes = []
    m = d.model
    if d.manager == "auto":
        notes.append(
            f"manager: use_kv_cache_manager_v2='auto' gives {m.architecture} the "
            f"{m.preferred_manager.upper()} manager"
            + (" (its model class declares V2)" if m.preferred_manager == "v2" else "")
        )
    if d.max_beam_width > 1 and (
        m.preferred_manager == "v2" if d.manager == "auto" else d.manager == "v2"
    ):
        notes.append(
            "KVCacheManagerV2 is not supported with max_beam_width > 1. Falling back to "
            "KVCacheManager."
        )
    if m.max_seq_len_limit is not None and d.requested_max_seq_len > m.max_seq_len_limit:
        notes.append(
            f"max_seq_len {d.requested_max_seq_len:,} is above the model's own limit "
            f"({m.max_seq_len_limit:,} tokens); the deployment allows that "
            "(allow_long_max_model_len), so it is kept"
            if d.allow_long_max_model_len
            else f"Specified self.max_seq_len={d.requested_max_seq_len} is larger than what the "
            f"model can support ({m.max_seq_len_limit}). Setting max_seq_len to "
            f"{m.max_seq_len_limit}."  # upstream's warning, word for word
        )
    if d.weights_gib is None:
        quant = m.quantization if not d.weights_dtype else None
        how = (
            f"{quant.weights_algo} (from {quant.source}), embeddings, lm_head, routers and "
            f"norms in {m.dtype}"
            if quant and quant.weights_algo
            else d.weights_dtype or m.dtype
        )
        notes.append(
            f"weights: {m.parameters:,} parameters in {how}, split evenly over tp "
            f"{d.tp_size} x pp {d.pp_size} but routers and norms "
            f"({m.replicated_parameters:,} parameters) whole on every tp rank (experts and "
            "replicated attention are not modelled; give weights_gib for them)"
        )
    if d.kv_dtype is None and m.kv_dtype != m.dtype:
        assert m.quantization is not None  # only the checkpoint's KV quantization changes it
        notes.append(
            f"KV cache in {m.kv_dtype}: the checkpoint's kv_cache_quant_algo "
            f"({m.quantization.source})"
        )
    if d.pp_size > 1:
        layout = ", ".join(
            f"{a}/{r}" if m.linear_layers else f"{a}"
            for a, r in (m.stage(d.pp_size, s) for s in range(d.pp_size))
        )
        notes.append(
            f"pipeline: each stage planned with its own layers (Mapping.pp_layers), "
            f"attention{'/recurrent' if m.linear_layers else ''} per stage: {layout}"
            + (f", plus {d.draft_layers} draft layer(s) on the last" if d.draft_layers else "")
        )
    if m.linear_layers and d.mamba_ssm_dtype is None and m.mamba_ssm_dtype not in (None, m.dtype):
        notes.append(
            f"SSM state in {m.dtype}: mamba_ssm_cache_dtype 'auto' is the model's dtype, "
            f"the config's mamba_ssm_dtype ({m.mamba_ssm_dtype}) is not read (give "
            f"mamba_ssm_dtype={m.mamba_ssm_dtype} to plan that)"
        )
    if d.resolved_manager == "v1" and d.kv_quota_gib is not None:
        notes.append(
            "kv_cache_config.max_gpu_total_bytes: the V1 manager's "
            "calculate_max_num_blocks does not read it (resource_manager.py at 001541bad)"
        )
    if m.kv_factor == 1 and d.tokens_per_block != 64:
        notes.append(
            "MLA: on Hopper (SM90) with the TRTLLM attention backend the executor sets "
            'tokens_per_block to 64 for FlashMLA ("Change tokens_per_block to: 64 for '
            'using FlashMLA"); give tokens_per_block 64 to plan that'
        )
    if d.spec_mode:
        notes.append(
            f"speculative decoding ({d.spec_mode}, max_draft_len {d.max_draft_len}): "
            f"{counted(d.num_extra_kv_tokens, 'extra KV token')} and "
            f"{counted(d.max_draft_len, 'draft token')} per sequence in the cache and the row; "
            "the draft layers take the "
            "target's KV geometry"
        )
    return notes


def _size(nbytes: int) -> str:
    """Bytes in GiB, or MiB below one GiB."""
    return f"{nbytes / GIB:,.2f} GiB" if nbytes >= GIB else f"{nbytes / MIB:,.2f} MiB"


def example_deployments() -> dict[str, Deployment]:
    """The walk's three deployments from the shipped presets: issue #21470 as kvlab's scenario
    assumes it (notebook 01: the V2 manager, and a max_seq_len past the model's 40,960, which
    the deployment must have allowed), the seed's 4 MiB repro on V2 (notebook 02) and PR
    #17261's Qwen3.5-27B on an H100 with 24.86 GiB for the caches (notebook 05)."""
    examples = {}
    scenario = load_scenario("issue-21470")
    p, dep = scenario.parameters, scenario.deployment
    assert dep is not None  # the shipped scenario has its deployment block
    examples["issue-21470"] = Deployment(
        model=load_model("qwen3-235b-a22b"),
        gpu_gib=dep.gpu_memory_gib,
        weights_gib=p.model_weights_bytes / GIB,
        workspace_gib=dep.workspace_gib,
        workspace_skew_gib=dep.workspace_skew_gib,
        activations_gib=dep.activations_gib,
        non_torch_gib=dep.non_torch_gib,
        free_gpu_memory_fraction=dep.free_gpu_memory_fraction,
        attention_dp=dep.attention_dp,
        ranks=dep.ranks,
        tp_size=dep.ranks,
        max_seq_len=p.configured_max_seq_len,
        max_batch_size=p.max_batch_size,
        max_new_tokens=dep.requests[0].max_new_tokens,
        max_num_tokens=dep.max_num_tokens,
        chunked_prefill=dep.chunked_prefill,
        tokens_per_block=p.tokens_per_block,
        kv_dtype=p.kv_dtype,
        manager="v2",
        allow_long_max_model_len=True,
    )
    repro = load_scenario("rtx5080-4mib").parameters
    seed = geometry_from_config(
        SimpleNamespace(
            model_type="seed",
            num_hidden_layers=repro.num_layers,
            num_attention_heads=repro.num_kv_heads,
            num_key_value_heads=repro.num_kv_heads,
            head_dim=repro.head_dim,
            torch_dtype=repro.kv_dtype,
            max_position_embeddings=repro.configured_max_seq_len,
        ),
        name="seed-repro",
        source="the seed's repro model: 2 layers, 2 KV heads of 128, fp16",
        where="data/scenarios/rtx5080-4mib.yaml",
    )
    examples["rtx5080-4mib"] = Deployment(
        model=seed,
        gpu_gib=GPUS["rtx-5080"].gib,
        weights_gib=repro.model_weights_bytes / GIB,
        kv_quota_gib=repro.pool_bytes / GIB,
        max_seq_len=repro.configured_max_seq_len,
        max_batch_size=repro.max_batch_size,
        max_new_tokens=16,
        tokens_per_block=repro.tokens_per_block,
        kv_dtype=repro.kv_dtype,
        manager="v2",
    )
    examples["pr-17261"] = Deployment(
        model=load_model("qwen3.5-27b"),
        gpu_gib=GPUS["h100-80gb"].gib,
        kv_quota_gib=PR_QUOTA_BYTES / GIB,
        max_batch_size=PR_MAX_BATCH_SIZE,
        max_seq_len=32768,
        mamba_ssm_dtype="bfloat16",
    )
    return examples
