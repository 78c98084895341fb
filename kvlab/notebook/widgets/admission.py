"""Each notebook's live panel, built on :class:`kvlab.notebook.panel.Panel`: a model computed
from the controls' values, the figures drawn from it, and a verdict.

- :func:`repro_panel`, notebook 02: the 4 MiB repro of issue #21470 with sliders.
- :func:`admission_panel`, notebook 04: one long request beside small ones, under each policy.
- :func:`ranks_panel`, notebook 01: the 16 ranks' plan for a workspace and a context.
- :func:`mamba_panel`, notebook 05: Qwen3.5-27B's state slots against a quota.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

import ipywidgets as W

from kvlab.analysis.compare import EngineConfig, build_scheduler, long_and_small, run_policy
from kvlab.analysis.deployment import (MANAGERS, Deployment, DeploymentPlan, example_deployments,
                                       plan_deployment)
from kvlab.analysis.gpus import GPUS
from kvlab.analysis.models import load_model, model_names
from kvlab.analysis.mamba_residency import MAMBA_SSM_DTYPES, qwen_plan, residency_bytes
from kvlab.analysis.phase import PhaseSetup, phase_verdicts
from kvlab.analysis.presets import ENGINE_OUTCOMES, engine_outcome, seed_geometry
from kvlab.analysis.rank_plan import outcome_of, plan_ranks
from kvlab.analysis.repro import ReproResult, no_pool_reason, run_repro
from kvlab.core.checks import check_choice, check_float, check_int
from kvlab.core.memory import GIB, MIB
from kvlab.core.page_index import WIDTH_POLICIES
from kvlab.core.request import LIVE_STATES, UNFINISHED_STATUSES
from kvlab.notebook import viz
from kvlab.notebook.panel import DEFAULT_WAIT_S, Panel, check_control_value, verdict_html
from kvlab.notebook.parameters import check_repro_parameters
from kvlab.notebook.tables import counted, gib_pair, table
from kvlab.run.distributed import run_ranks
from kvlab.run.rank_config import scenario_config
from kvlab.run.scenarios import load_scenario
from kvlab.run.run_result import cut_between_words
from kvlab.run.simulation import Engine, SimulationResult
from kvlab.run.trace import Trace
from kvlab.sched.policies import PEER_POLICIES, POLICIES, TRTLLM_POLICIES

# --- notebook 02: the 4 MiB repro ----------------------------------------------------------------

#: Pool slider range, MiB: 2**-6 (16 KiB, less than a page at 32 tokens) to 2**10 (1 GiB); it
#: grows to include a value passed to repro_panel.
POOL_MIB_RANGE = (2.0 ** -6, 2.0 ** 10)
#: Context slider range, tokens.
CONTEXT_RANGE = (32, 131072)
TOKENS_PER_BLOCK_CHOICES = (8, 16, 32, 64, 128)


def labelled(values) -> list:
    """(label, value) options for a SelectionSlider of counts: the label with thousands
    separators (its readout shows 1,000,000, not 1000000)."""
    return [(f"{v:,}", v) for v in values]


def context_choices(extra=()) -> list:
    """Context lengths for the log-feel slider: 2**k and 1.5 * 2**k from 32 to 131072."""
    lo, hi = CONTEXT_RANGE
    values = {v for k in range(5, 18) for v in (2 ** k, 3 * 2 ** (k - 1)) if lo <= v <= hi}
    values.update(int(v) for v in extra)
    return sorted(values)


@dataclass(frozen=True)
class ReproModel:
    """What the repro panel shows: the inputs, and the result or why there is none."""

    pool_mib: float
    context: int
    tokens_per_block: int
    policy: str
    result: Optional[ReproResult]
    no_pool: Optional[str]  # why there is no pool (quota below one page), else None

    @property
    def outcome(self) -> Optional[str]:
        return self.result.outcome if self.result else None


def repro_model(values: Mapping[str, Any]) -> ReproModel:
    """Run the repro for the panel's values. The configured max_seq_len is the context, as in
    the seed (both 8192). A pool below one page gives a model with ``no_pool`` set."""
    pool_mib, context = float(values["pool_mib"]), int(values["context"])
    tpb, policy = int(values["tokens_per_block"]), values["policy"]
    reason = no_pool_reason(pool_mib, tpb)
    result = None if reason else run_repro(pool_mib, context, policy, tpb, max_seq_len=context)
    return ReproModel(pool_mib, context, tpb, policy, result, reason)


def repro_figures(model: ReproModel) -> Dict[str, dict]:
    """The page map and the index-row figure (as kvlab.notebook.viz specs) of a repro model, a no-pool
    model included."""
    if model.result is not None:
        return {"pool": viz.repro_page_map_spec(model.result),
                "row": viz.repro_index_row_spec(model.result)}
    needed = seed_geometry(model.tokens_per_block).blocks_for_tokens(model.context)
    return {"pool": viz.page_map_spec(0, needed, None, tokens_per_block=model.tokens_per_block,
                                      title=f"No pool: {model.pool_mib:g} MiB holds no page"),
            "row": viz.index_row_spec(0, needed, 0, None, tokens_per_block=model.tokens_per_block,
                                      policy=model.policy,
                                      title="No pool, so no manager and no page-index row")}


def repro_verdict(model: ReproModel) -> Tuple[Optional[str], str]:
    """(outcome, HTML) for the verdict box."""
    if model.result is None:
        return None, verdict_html(None, model.no_pool or "no result")
    return model.outcome, verdict_html(model.outcome, model.result.verdict, model.result.explain())


def repro_panel(pool_mib: float = 4.0, context: int = 8192, tokens_per_block: int = 32,
                policy: str = "clamped", *, wait_s: float = DEFAULT_WAIT_S) -> Panel:
    """Notebook 02's live panel: pool size (MiB, log slider), context length, tokens per block
    and the page-index width policy -> the pool page map, the index row and the verdict."""
    check_repro_parameters(pool_mib, context, tokens_per_block, policy)
    exponent = math.log2(pool_mib)  # the range grows to include the value given
    pool = W.FloatLogSlider(value=float(pool_mib), base=2, min=min(-6, math.floor(exponent)),
                            max=max(10, math.ceil(exponent)),
                            step=0.5, description="pool (MiB)", readout_format=".4g",
                            continuous_update=True, style={"description_width": "90px"},
                            layout=W.Layout(width="420px"))
    ctx = W.SelectionSlider(options=labelled(context_choices([context])), value=int(context),
                            description="context", continuous_update=True,
                            style={"description_width": "90px"}, layout=W.Layout(width="420px"))
    tpb = W.Dropdown(options=sorted(set(TOKENS_PER_BLOCK_CHOICES) | {int(tokens_per_block)}),
                     value=int(tokens_per_block), description="tokens/block",
                     style={"description_width": "90px"},
                     layout=W.Layout(width="420px"))  # the sliders' width: "row width" heads its own column
    pol = W.ToggleButtons(options=[(name, name) for name in WIDTH_POLICIES], value=policy,
                          description="row width", tooltips=list(WIDTH_POLICIES.values()),
                          style={"description_width": "90px", "button_width": "100px"})
    return Panel({"pool_mib": pool, "context": ctx, "tokens_per_block": tpb, "policy": pol},
                 repro_model, repro_figures, repro_verdict,
                 title="Issue #21470 on one GPU: one resize against a tiny pool", wait_s=wait_s)


# --- notebook 04: admission control, live ----------------------------------------------------------

#: Policies the admission panel offers (kvlab.sched.policies.POLICIES).
ADMISSION_PANEL_POLICIES = ("none/clamped", "none/configured", "capacity", "vllm", "sglang")
#: Pool slider range of the admission panel, as powers of two of MiB: 1/16 MiB (one 64 KiB page
#: of the seed's geometry) to 256 MiB (4096 pages); it grows to include a value passed in.
ADMISSION_POOL_EXPONENTS = (-4, 8)


@dataclass(frozen=True)
class AdmissionModel:
    """What the admission panel shows: the engine, the policy, the run and its outcome."""

    pool_mib: float
    context: int
    policy: str
    engine: Any                  # kvlab.analysis.compare.EngineConfig, or None when the pool holds no page
    result: Any                  # kvlab.SimulationResult, or None
    outcome: Optional[str]
    no_pool: Optional[str]
    phase_verdict: Optional[str]  # the closed-form verdict for the long request alone
    num_small: int


def admission_model(values: Mapping[str, Any], *, num_small: int = 4,
                    stall_limit: int = 1000) -> AdmissionModel:
    """Run one long request of ``context`` tokens beside ``num_small`` small ones (256 + 32
    tokens, every 4 steps) on a pool of ``pool_mib`` MiB under ``policy``, with the real stall
    limit. The configured max_seq_len is the seed's 8192, or the context when that is longer."""

    pool_mib, context, policy = float(values["pool_mib"]), int(values["context"]), values["policy"]
    reason = no_pool_reason(pool_mib, 32)
    if reason:
        return AdmissionModel(pool_mib, context, policy, None, None, None, reason, None, num_small)
    engine = EngineConfig(pool_mib=pool_mib, max_seq_len=max(8192, context), stall_limit=stall_limit)
    requests = long_and_small(context, num_small=num_small)
    result = run_policy(policy, requests, engine, max_steps=50_000)
    phase = None
    if policy in TRTLLM_POLICIES:
        setup = PhaseSetup(max_seq_len=engine.max_seq_len, max_new_tokens=requests[0].max_new_tokens)
        phase = ENGINE_OUTCOMES[phase_verdicts([engine.total_blocks], [context], policy, setup)[0, 0]]
    return AdmissionModel(pool_mib, context, policy, engine, result, engine_outcome(result), None,
                          phase, num_small)


def admission_figures(model: AdmissionModel) -> Dict[str, dict]:
    """The scheduler timeline of the run and the long request's pages against the pool and
    the page-index row (kvlab.notebook.viz specs)."""

    if model.result is None:
        empty = SimulationResult({}, {}, None, Trace(), {}, 0, 0)
        needed = seed_geometry().blocks_for_tokens(model.context)
        return {"timeline": viz.scheduler_timeline_spec(empty, title="No pool, so no engine to run"),
                "demand": viz.index_row_spec(0, needed, 0, None, title=f"No pool: {model.no_pool}")}
    engine, result = model.engine, model.result
    manager = engine.manager(POLICIES[model.policy][1])
    needed = engine.geometry.blocks_for_tokens(model.context + 16)
    peer = model.policy in PEER_POLICIES  # vLLM's and SGLang's own loops: no stall detector
    timeline = viz.scheduler_timeline_spec(
        result, stall_limit=None if peer else engine.stall_limit, outcome=model.outcome,
        stall_detector=not peer, title=f"{model.policy}: {viz.OUTCOME_LABELS[model.outcome]}")
    demand = viz.index_row_spec(
        manager.max_blocks_per_seq, needed, engine.total_blocks, model.outcome,
        policy=POLICIES[model.policy][1],
        title=f"The long request: {needed} pages to complete; pool {engine.total_blocks}, "
              f"row {manager.max_blocks_per_seq}",
        subtitle=(f"{viz.OUTCOME_LABELS['reject']}: it never reaches "
                  "the row or the pool" if result.status.get("long") == "rejected" else None))
    return {"timeline": timeline, "demand": demand}


def admission_verdict(model: AdmissionModel) -> Tuple[Optional[str], str]:
    """(outcome, HTML): the outcome named with the numbers."""
    if model.result is None:
        return None, verdict_html(None, model.no_pool or "no result")
    result, engine = model.result, model.engine
    small = [i for i in result.status if i != "long"]
    done = sum(result.status[i] == "finished" for i in small)
    need = engine.geometry.blocks_for_tokens(model.context + 16)
    where = (f"{model.context} + 16 tokens need {need} pages; the pool has {engine.total_blocks} "
             f"({engine.pool_mib:g} MiB)")
    if model.outcome == "crash":
        headline = (f"Crash at step {result.end_step - 1}: PageIndexTooShort ({result.error}) "
                    f"stops the engine; {done} of {len(small)} small requests finished, the rest "
                    f"are lost. {where}.")
    elif model.outcome == "stall":
        if isinstance(result.error, RuntimeError) and result.status["long"] == "running":
            headline = (f"Stall: the long request was admitted, and its context took "
                        f"{engine.geometry.blocks_for_tokens(model.context)} of "
                        f"the pool's {engine.total_blocks} pages; its next tokens need more, which "
                        f"nobody frees, so it holds the pool while the small requests starved "
                        f"({done} of {len(small)} finished), then SchedulerDeadlock after "
                        f"{engine.stall_limit} passes without progress (step {result.end_step - 1}). "
                        f"{where}.")
        elif isinstance(result.error, RuntimeError):
            headline = (f"Stall: refused every pass, the long request starved while {done} of "
                        f"{len(small)} small requests finished, then SchedulerDeadlock after "
                        f"{engine.stall_limit} passes without progress (step {result.end_step - 1}). "
                        f"{where}.")
        else:
            headline = f"Stall: requests still unfinished when the run ended. {where}."
    elif model.outcome == "reject":
        headline = (f"Rejected: {result.reasons.get('long', '').rstrip('.')}. {done} of {len(small)} small "
                    f"requests finished.")
    else:
        headline = (f"OK: all {len(result.status)} requests finished in {result.end_step} steps. "
                    f"{where}.")
    detail = "\n".join(f"{rid}: {result.status[rid]} - {_reason_without_error(result, rid)}"
                       for rid in ["long", *small])
    if model.phase_verdict is not None:
        detail = (f"phase diagram (the long request alone): {model.phase_verdict}\n" + detail)
    return model.outcome, verdict_html(model.outcome, headline, detail)


def _reason_without_error(result, request_id: str, width: int = 200) -> str:
    """A request's reason without the engine error's text the headline already gives, cut
    between words to ``width`` characters (as a run's rank table cuts its outcomes)."""
    why = result.reasons[request_id]
    error = "" if result.error is None else str(result.error)
    if error and why.endswith(f": {error}"):
        why = why[:-len(error) - 2]
    return cut_between_words(why, width)


def admission_panel(pool_mib: float = 4.0, context: int = 8192, policy: str = "none/clamped", *,
                    num_small: int = 4, stall_limit: int = 1000,
                    wait_s: float = DEFAULT_WAIT_S) -> Panel:
    """Notebook 04's live panel: pool size (MiB, log slider), context length of the long
    request and the policy -> the scheduler timeline, the long request's pages against the
    pool and the row, and a verdict naming the outcome with the numbers."""

    check_float("pool_mib", pool_mib, low=0.0, high=1 << 20, low_open=True)
    check_int("context", context, low=1, high=1 << 30)
    check_choice("policy", policy, ADMISSION_PANEL_POLICIES)
    check_int("num_small", num_small, low=0, high=64)
    check_int("stall_limit", stall_limit, low=1, high=100_000)
    exponent = math.log2(pool_mib)
    lo, hi = ADMISSION_POOL_EXPONENTS
    pool = W.FloatLogSlider(value=float(pool_mib), base=2, min=min(lo, math.floor(exponent)),
                            max=max(hi, math.ceil(exponent)), step=0.5, description="pool (MiB)",
                            readout_format=".4g", continuous_update=True,
                            style={"description_width": "90px"}, layout=W.Layout(width="420px"))
    ctx = W.SelectionSlider(options=labelled(context_choices([context])), value=int(context),
                            description="context", continuous_update=True,
                            style={"description_width": "90px"}, layout=W.Layout(width="420px"))
    pol = W.ToggleButtons(options=list(ADMISSION_PANEL_POLICIES), value=policy, description="policy",
                          style={"description_width": "90px", "button_width": "150px"})

    def compute(values):
        return admission_model(values, num_small=num_small, stall_limit=stall_limit)

    return Panel({"pool_mib": pool, "context": ctx, "policy": pol}, compute, admission_figures,
                 admission_verdict, title="Not yet or never: one long request beside small ones",
                 wait_s=wait_s)


__all__ = ["ReproModel", "repro_figures", "repro_model", "repro_panel", "repro_verdict",
           "context_choices", "labelled",
           "ADMISSION_PANEL_POLICIES", "AdmissionModel", "admission_figures", "admission_model",
           "admission_panel", "admission_verdict"]


# --- notebook 01: the 16-GPU report, live ------------------------------------------------------------

#: Context lengths the ranks panel offers (tokens): 128 Ki to 1 Mi, the report's 1,000,000 included.
RANKS_CONTEXT_CHOICES = tuple(sorted({2 ** k for k in range(17, 21)} | {3 * 2 ** 17, 3 * 2 ** 18,
                                                                        896_000, 960_000, 1_000_000}))


@dataclass(frozen=True)
class RanksModel:
    """What the ranks panel shows: the inputs, the run's config and its closed-form plan
    (:mod:`kvlab.analysis.rank_plan`); the real run is the panel's action."""

    workspace_gib: float
    context: int
    config: Any  # kvlab.run.rank_config.RunConfig
    plan: Any  # kvlab.analysis.rank_plan.RanksPlan

    @property
    def outcome(self) -> str:
        return self.plan.outcome

    @property
    def shown_requests(self) -> Tuple[dict, ...]:
        """request_fit_spec rows: the shortest and longest background requests, then the named
        ones (the long context)."""
        by_size = sorted(self.plan.requests, key=lambda q: q.tokens)
        background = [q for q in by_size if q.request_id.startswith("bg-")]
        named = [q for q in by_size if not q.request_id.startswith("bg-")]
        return tuple(dict(id=q.request_id, tokens=q.tokens, outcome=q.verdict, rank=q.rank)
                     for q in background[:1] + background[-1:] + named)


def ranks_model(values: Mapping[str, Any], *, scenario: Any = "issue-21470", ranks: int = 16) -> RanksModel:
    """The scenario's ranks (policy "clamped", the report) with rank 0's MoE workspace and the
    long context from ``values``, planned in closed form (no run: a slider move takes ms).
    ``scenario``: a name or path for load_scenario, or a scenario it loaded (the panel loads
    its scenario once: parsing the YAML took most of a slider move's time)."""

    workspace, context = float(values["workspace_gib"]), int(values["context"])
    loaded = load_scenario(scenario) if isinstance(scenario, (str, os.PathLike)) else scenario
    config = scenario_config(loaded, ranks, "none/clamped", workspace_gib=workspace,
                             context_length=context)
    return RanksModel(workspace, context, config, plan_ranks(config))


def ranks_figures(model: RanksModel) -> Dict[str, dict]:
    """The per-rank memory budget and the requests against the pool and the row."""
    r0 = model.plan.ranks[0]
    tpb = model.config.geometry.tokens_per_block
    return {"budget": viz.rank_budget_spec(model.plan.ranks),
            "requests": viz.request_fit_spec(
                model.shown_requests, capacity_tokens=r0.capacity_tokens,
                row_tokens=r0.max_blocks_per_seq * tpb,
                title=f"Requests against each rank's pool ({r0.blocks:,} pages) and row",
                subtitle=f"{len(model.shown_requests)} of {len(model.plan.requests)} requests: the "
                         "shortest and longest background ones and the long context; "
                         + (f"{crashes} beyond the row: ValueError" if (crashes := sum(
                             q["outcome"] == "crash" for q in model.shown_requests))
                            else "none beyond the row"))}


def ranks_verdict(model: RanksModel) -> Tuple[Optional[str], str]:
    """(outcome, HTML): does the pool clamp, which requests would crash, how the run will end."""
    plan, r0 = model.plan, model.plan.ranks[0]
    clamp = (f"the pool holds {r0.capacity_tokens:,} tokens after the MIN, so max_seq_len "
             f"{plan.configured_max_seq_len:,} is clamped to {r0.max_seq_len:,}"
             if r0.max_seq_len < plan.configured_max_seq_len else
             f"the pool holds {r0.capacity_tokens:,} tokens: no clamp")
    crash = [f"{q.request_id} (rank {q.rank})" for q in plan.requests if q.verdict == "crash"]
    headline = (f"{len(plan.ranks)} ranks, rank 0's workspace {model.workspace_gib:g} GiB: {clamp}; "
                + (f"{', '.join(crash)} would raise. " if crash else "no request exceeds the row. ")
                + f"Predicted: {plan.ended} - {plan.reason}.")
    return plan.outcome, verdict_html(plan.outcome, headline)


def run_planned_ranks(model: RanksModel) -> Tuple[Any, str]:
    """The ranks panel's action: run the ranks for real (in-process threads, the same RankRunner
    code as the processes) and say whether the run ended as the plan said."""

    result = run_ranks(model.config, in_process=True, progress=False)
    outcome = outcome_of(result)
    agrees = outcome == model.plan.outcome and result.ended == model.plan.ended
    headline = (f"The run ({result.wall_s:.2f} s): {result.ended} - {result.reason}. "
                + ("As predicted." if agrees else f"NOT as predicted ({model.plan.ended}: "
                                                  f"{model.plan.reason})."))
    return result, verdict_html(outcome, headline) + table(result.rank_rows(), index="rank").to_html()


def ranks_panel(workspace_gib: float = 28.0, context: int = 1_000_000, *, ranks: int = 16,
                scenario: str = "issue-21470", wait_s: float = DEFAULT_WAIT_S) -> Panel:
    """Notebook 01's live panel: rank 0's MoE workspace (GiB; the others add the scenario's
    skew) and the long context's length -> every rank's memory budget after the MIN, the
    requests against the pool and the row, and how the run will end (closed form,
    :mod:`kvlab.analysis.rank_plan`); its button runs the ranks for real and compares."""

    check_float("workspace_gib", workspace_gib, low=0.0, high=64.0)
    check_int("context", context, low=1, high=1 << 24)
    check_int("ranks", ranks, low=1, high=128)
    ws = W.FloatSlider(value=float(workspace_gib), min=0.0, max=64.0, step=1.0,
                       description="workspace (GiB)", continuous_update=False,
                       style={"description_width": "110px"}, layout=W.Layout(width="420px"))
    ctx = W.SelectionSlider(options=labelled(sorted(set(RANKS_CONTEXT_CHOICES) | {int(context)})),
                            value=int(context), description="context", continuous_update=False,
                            style={"description_width": "110px"}, layout=W.Layout(width="420px"))

    loaded = load_scenario(scenario)  # once: each slider move plans from the parsed scenario

    def compute(values):
        return ranks_model(values, scenario=loaded, ranks=ranks)

    return Panel({"workspace_gib": ws, "context": ctx}, compute, ranks_figures, ranks_verdict,
                 title=f"Issue #21470 on {ranks} ranks: when does the pool clamp, who crashes?",
                 wait_s=wait_s, action=(f"Run the {ranks} ranks", run_planned_ranks))


__all__ += ["RANKS_CONTEXT_CHOICES", "RanksModel", "ranks_figures", "ranks_model", "ranks_panel",
            "ranks_verdict", "run_planned_ranks"]


# --- notebook 05: recurrent-state residency (merged; proposals PR #17261, #18985), live ----------



@dataclass(frozen=True)
class MambaModel:
    """What the residency panel shows: Qwen3.5-27B's plan for a quota under merged residency,
    beside PR #17261's clamp and PR #18985's feasible max_batch_size default (proposals)."""

    quota_gib: float
    max_batch_size: int
    ssm_dtype: str
    plan: Any            # kvlab.core.mamba.ResidencyPlan
    split: dict          # kvlab.analysis.mamba_residency.residency_bytes(plan)

    @property
    def raw_fits(self) -> bool:
        """Merged TensorRT-LLM builds (its floor fits the quota)."""
        return self.split["raw_fits"]

    @property
    def resident(self) -> int:
        """Sequences resident under PR #17261's clamp (0: not even one fits)."""
        return max(self.plan.local_cap, 0)

    @property
    def feasible_max_batch_size(self) -> int:
        """PR #18985: the largest max_batch_size default that fits this quota (0: none)."""
        return self.plan.feasible_max_batch_size()

    @property
    def outcome(self) -> str:
        """Merged TensorRT-LLM's outcome: "ok" (builds) or "crash" (ValueError)."""
        return "ok" if self.raw_fits else "crash"


def mamba_model(values: Mapping[str, Any]) -> MambaModel:
    """Qwen3.5-27B (one rank) for the panel's quota (GiB), max_batch_size and SSM dtype."""

    quota_gib, batch, dtype = float(values["quota_gib"]), int(values["max_batch_size"]), values["ssm_dtype"]
    plan = qwen_plan(int(quota_gib * GIB), batch, dtype)
    return MambaModel(quota_gib, batch, dtype, plan, residency_bytes(plan))


def mamba_figures(model: MambaModel) -> Dict[str, dict]:
    """The quota split, merged beside PR #17261's clamp (a kvlab.notebook.viz spec)."""
    return {"stack": viz.residency_stack_spec(
        model.split, model.plan.quota_bytes,
        subtitle=f"Qwen3.5-27B, max_batch_size {model.max_batch_size}, {model.ssm_dtype} SSM state, "
                 f"{model.plan.slot_bytes / MIB:.1f} MiB a slot")}


def mamba_verdict(model: MambaModel) -> Tuple[Optional[str], str]:
    """(outcome, HTML): does merged TensorRT-LLM build, and what the two proposals would do
    (PR #17261's clamp: how many sequences stay resident; PR #18985: the largest feasible
    max_batch_size default)."""
    plan, gib = model.plan, GIB
    slots = plan.requested + plan.dummies
    need_gib, quota_gib = gib_pair(plan.raw_need_bytes, plan.quota_bytes)
    raw = f"{slots} slots x {plan.slot_bytes / MIB:.1f} MiB + one page = {need_gib} GiB"
    fits = model.feasible_max_batch_size
    if model.raw_fits:
        headline = (f"Merged builds: {raw} <= quota {quota_gib} GiB; all {plan.requested} "
                    f"sequences resident (merged code has no cap). The proposals change nothing here.")
    elif model.resident >= 1:
        used = (model.resident + plan.dummies) * plan.slot_bytes / gib
        headline = (f"Merged raises: {raw} > quota {quota_gib} GiB (ValueError at "
                    f"construction). Proposal PR #17261 (closed without merging), the clamp: "
                    f"{model.resident} resident (+{plan.dummies} dummy) = {used:.2f} GiB of slots; "
                    f"{model.split['clamped']['pages'] // plan.page_bytes} attention pages; "
                    f"{plan.requested - model.resident} sequences queue. Proposal PR #18985 (open): "
                    f"a max_batch_size default of at most {fits} fits; an explicit "
                    f"{model.max_batch_size} still raises, with a message in GiB.")
    else:
        headline = (f"Merged raises: {raw} > quota {quota_gib} GiB; the clamp (PR #17261) "
                    f"keeps 0: not even one sequence's state fits, so it raises too, and no "
                    f"max_batch_size default fits (PR #18985).")
    detail = (f"slot {plan.slot_bytes:,} B; page {plan.page_bytes:,} B; quota {plan.quota_bytes:,} B; "
              f"merged floor {plan.raw_need_bytes:,} B")
    return model.outcome, verdict_html(model.outcome, headline, detail)


def mamba_panel(quota_gib: float = 24.86, max_batch_size: int = 512, ssm_dtype: str = "bfloat16", *,
                wait_s: float = DEFAULT_WAIT_S) -> Panel:
    """Notebook 05's live panel: the quota (GiB), max_batch_size and the SSM state dtype of
    Qwen3.5-27B -> the quota split under merged residency beside PR #17261's clamp (a proposal),
    and a verdict: merged builds or raises, the clamp's residency, PR #18985's feasible
    max_batch_size default."""

    check_float("quota_gib", quota_gib, low=0.0, high=1024.0, low_open=True)
    check_int("max_batch_size", max_batch_size, low=1, high=4096)
    check_choice("ssm_dtype", ssm_dtype, MAMBA_SSM_DTYPES)
    quota = W.FloatSlider(value=float(quota_gib), min=min(0.1, float(quota_gib)), max=max(80.0, float(quota_gib)), step=0.01,
                          description="quota (GiB)", readout_format=".2f", continuous_update=True,
                          style={"description_width": "110px"}, layout=W.Layout(width="420px"))
    batch = W.IntSlider(value=int(max_batch_size), min=1, max=max(1024, int(max_batch_size)),
                        description="max_batch_size", continuous_update=True,
                        style={"description_width": "110px"}, layout=W.Layout(width="420px"))
    dtype = W.ToggleButtons(options=list(MAMBA_SSM_DTYPES), value=ssm_dtype, description="SSM dtype",
                            style={"description_width": "110px", "button_width": "90px"})
    return Panel({"quota_gib": quota, "max_batch_size": batch, "ssm_dtype": dtype}, mamba_model,
                 mamba_figures, mamba_verdict,
                 title="Qwen3.5-27B: merged residency, or the proposals (PR #17261, PR #18985)",
                 wait_s=wait_s)


__all__ += ["MambaModel", "mamba_figures", "mamba_model", "mamba_panel",
            "mamba_verdict"]


# --- notebook 03: one scheduling pass at a time ------------------------------------------------

#: The step-through's engine: the seed's pool, a stall limit of 20 passes so that the stall
#: detector's end is a few key presses away (the real limit, 1000, is notebook 03's default).
STEP_ENGINE = EngineConfig(stall_limit=20)
#: The step-through's requests: the 8192-token one beside two small ones.
STEP_WORKLOAD = tuple(long_and_small(num_small=2, every=2))
STEP_MAX_PASSES = 60


@dataclass(frozen=True)
class StepModel:
    """The engine after ``passes`` passes under ``policy``, and what the last one decided."""

    policy: str
    passes: int                 # passes run (fewer than asked when the run ended)
    result: SimulationResult
    rows: Tuple[dict, ...]      # the last pass, one dict a request (viz.pass_spec)
    stalled: int                # the stall detector's count after the last pass
    used_pages: int
    total_pages: int


def _asked(request) -> int:
    """Tokens ``request`` needs from the next pass: the rest of its context (non-chunked) plus
    its draft tokens, or one generation step (1 + draft)."""
    if request.context_current_position < request.prompt_len:
        return request.context_remaining_length + request.num_draft_tokens
    return 1 + request.num_draft_tokens


def step_model(values: Mapping[str, Any]) -> StepModel:
    """Run :data:`STEP_WORKLOAD` under ``values["policy"]`` for ``values["pass"]`` scheduling
    passes (from scratch: a pass is ms) and describe the last one."""
    policy, wanted = values["policy"], int(values["pass"])
    engine = Engine(build_scheduler(policy, STEP_ENGINE), STEP_WORKLOAD)
    asked: Dict[str, int] = {}
    while engine.iterations < wanted and engine.error is None:
        if not engine.num_live:
            if not engine.has_pending_arrivals:
                break
            engine.advance_to(engine.arrivals[engine.next_arrival].arrival_step)
        live = [r for r in engine.requests if r.arrival_step <= engine.step
                and r.state in LIVE_STATES]
        asked = {r.request_id: _asked(r) for r in live}
        engine.iterate()
    batch = engine.last_batch
    rows = []
    for request in engine.requests:
        if request.request_id not in asked:
            continue
        scheduled = ({r.request_id: r for r in batch.context_requests}
                     | {r.request_id: r for r in batch.generation_requests}) if batch else {}
        if engine.error is not None and getattr(engine.error, "request_id", "") == request.request_id:
            result, why = "crash", f"{type(engine.error).__name__}: {engine.error}"
        elif engine.error is not None:
            result, why = "waiting", "the engine stopped before this pass reached it"
        elif request.request_id in scheduled:
            result, why = "scheduled", "the pages and the token budget were there"
        elif request.state == "suspended":
            result, why = "suspended", "its cache gave way (pages to the tier below, or kept)"
        elif request.state in ("finished", "rejected"):
            result, why = request.state, request.reason
        elif request.state == "waiting" and asked[request.request_id] > 0:
            result, why = "refused", ("not scheduled: the resize returned False or the budget "
                                      "was spent; retried next pass")
        else:
            result, why = "waiting", "not reached this pass"
        got = asked[request.request_id] if result == "scheduled" else 0
        rows.append(dict(request=request.request_id, asked=asked[request.request_id], got=got,
                         result=result, why=why))
    manager = engine.scheduler.manager
    return StepModel(policy, engine.iterations, engine.result(engine.step), tuple(rows),
                     engine.scheduler.stalled_passes, manager.total_blocks - manager.free_blocks,
                     manager.total_blocks)


def step_figures(model: StepModel) -> Dict[str, dict]:
    """This pass, request by request, and the run so far."""
    return {"pass": viz.pass_spec(model.rows, title=f"Pass {model.passes}: what each request asked "
                                  "for, and got", subtitle=f"policy {model.policy}; pool "
                                  f"{model.used_pages} of {model.total_pages} pages in use"),
            "timeline": viz.scheduler_timeline_spec(model.result, stall_limit=STEP_ENGINE.stall_limit,
                                                    title=f"The run so far: {counted(model.passes, 'pass')}")}


def step_verdict(model: StepModel) -> Tuple[Optional[str], str]:
    """(outcome, HTML): where the run stands after this pass."""
    outcome = engine_outcome(model.result)
    error = model.result.error
    if error is not None:
        headline = f"Pass {model.passes} ended the engine: {type(error).__name__}."
    elif not any(s in UNFINISHED_STATUSES for s in model.result.status.values()):
        headline = f"Every request is done after {counted(model.passes, 'pass')}."
    else:
        headline = (f"Pass {model.passes}: the stall detector counts {model.stalled} of "
                    f"{STEP_ENGINE.stall_limit} passes without progress. Press → for the next.")
        outcome = None
    return outcome, verdict_html(outcome, headline)


def step_panel(policy: str = "none/configured", passes: int = 1, *,
               wait_s: float = DEFAULT_WAIT_S) -> Panel:
    """Notebook 03's panel: one scheduling pass at a time. The pass slider is the "next pass"
    control (its arrow keys step one pass); the policy picks the engine."""
    policy = check_choice("policy", policy, TRTLLM_POLICIES)
    passes = check_int("passes", passes, low=1, high=STEP_MAX_PASSES)
    pick = W.ToggleButtons(options=list(TRTLLM_POLICIES), value=policy, description="policy",
                           style={"button_width": "130px"})
    step = W.IntSlider(value=passes, min=1, max=STEP_MAX_PASSES, description="pass",
                       continuous_update=False, layout=W.Layout(width="420px"))
    return Panel({"policy": pick, "pass": step}, step_model, step_figures, step_verdict,
                 title="One scheduling pass at a time: the long request beside two small ones",
                 wait_s=wait_s)


__all__ += ["STEP_ENGINE", "STEP_MAX_PASSES", "STEP_WORKLOAD", "StepModel", "step_figures",
            "step_model", "step_panel", "step_verdict"]


# --- notebook 06: preflight ------------------------------------------------------------------

#: Context-length limits the plan panel offers (configured max_seq_len): powers of two.
PLAN_MAX_SEQ_LENS = tuple(1 << k for k in range(12, 22))
PLAN_BATCH_SIZES = tuple(1 << k for k in range(0, 12))
PLAN_RANKS = (1, 2, 4, 8, 16, 32)


def plan_model(values: Mapping[str, Any], *, base: Optional[Deployment] = None) -> DeploymentPlan:
    """The plan of ``base`` (default: issue #21470's deployment) with the panel's values: the
    model and GPU presets, the KV cache manager (auto, v1, v2), weights per rank (0: derived from
    the model's parameter count and checkpoint over the ranks), rank 0's workspace (the others
    add the base's skew), max_seq_len, max_batch_size and the number of attention-DP ranks (tp =
    ranks, as in the report)."""
    base = base or example_deployments()["issue-21470"]
    deployment = dataclasses.replace(
        base, model=load_model(values["model"]), gpu_gib=GPUS[values["gpu"]].gib,
        weights_gib=values["weights_gib"] or None, workspace_gib=values["workspace_gib"],
        max_seq_len=values["max_seq_len"], max_batch_size=values["max_batch_size"],
        ranks=values["ranks"], tp_size=values["ranks"], kv_dtype=None, manager=values["manager"])
    return plan_deployment(deployment)


def plan_figures(plan: DeploymentPlan) -> Dict[str, dict]:
    return {"ranges": viz.plan_ranges_spec(plan),
            "ranks": viz.rank_budget_spec(plan.rank_plans(), state_bytes=plan.state_bytes,
                                          title=f"Per-rank memory ({len(plan.quotas)} ranks)")}


def plan_verdict(plan: DeploymentPlan) -> Tuple[Optional[str], str]:
    now = plan.worst()
    first = plan.first(now) if now in ("crash", "stall") else None
    if not plan.blocks:
        return now, verdict_html(now, "Cannot start under any policy: no rank can build a KV pool "
                                 "(see the notes below).", plan.explain())
    if not plan.starts:
        headline = (f"Current code raises at construction: {plan.hybrid['slots']:,} state slots need "
                    f"{plan.hybrid['need_bytes'] / GIB:,.2f} GiB of {plan.hybrid['quota_bytes'] / GIB:,.2f} GiB.")
    elif first is not None:
        headline = (f"Current code: a context of {first:,} tokens or more "
                    + ("raises ValueError and takes every rank down" if now == "crash"
                       else "stalls the engine") + f" (pool {plan.capacity_tokens:,} tokens, "
                    f"row {plan.width_current:,} entries).")
    elif plan.manager == "v1":
        headline = (f"Current code (V1 manager): nothing crashes; prompts of "
                    f"{plan.clamped_max_seq_len:,} tokens or more are rejected, the longest that "
                    f"finishes is {plan.longest():,} tokens.")
    else:
        headline = f"Current code: safe; the longest context that finishes is {plan.longest():,} tokens."
    if not plan.starts:
        headline += " Admission control does not help: nothing starts."
    elif plan.manager == "v2":
        headline += (f" Admission control: {plan.worst('capacity')}, longest "
                     f"{plan.longest('capacity'):,} tokens.")
    return now, verdict_html(now, headline, plan.explain())


def plan_panel(model: str = "qwen3-235b-a22b", gpu: str = "gb300", *, manager: str = "v2",
               weights_gib: float = 22.0,
               workspace_gib: float = 28.0, max_seq_len: int = 1 << 20, max_batch_size: int = 16,
               ranks: int = 16, wait_s: float = DEFAULT_WAIT_S) -> Panel:
    """Notebook 06's panel: issue #21470's deployment (its other settings: workspace skew,
    activations, attention DP, chunked prefill, a max_seq_len past the model's own limit
    allowed) with the model, GPU, KV cache manager (the issue's V2 by default), weights,
    workspace, max_seq_len, max_batch_size and ranks under the reader's hand. Weights of 0 are
    derived from the model; changing the model sets them to 0."""
    style, layout = {"description_width": "140px"}, W.Layout(width="450px")
    controls = {
        "workspace_gib": W.FloatSlider(min=0, max=64, step=1, description="rank 0 workspace (GiB)"),
        "max_seq_len": W.SelectionSlider(options=labelled(PLAN_MAX_SEQ_LENS),
                                         description="max_seq_len"),
        "model": W.Dropdown(options=list(model_names()), description="model"),
        "manager": W.Dropdown(options=list(MANAGERS), description="KV cache manager"),
        "gpu": W.Dropdown(options=list(GPUS), description="GPU"),
        "weights_gib": W.FloatSlider(min=0, max=400, step=1, description="weights/rank (GiB)"),
        "max_batch_size": W.SelectionSlider(options=labelled(PLAN_BATCH_SIZES), description="batch size"),
        "ranks": W.SelectionSlider(options=list(PLAN_RANKS), description="ranks (ADP)"),
    }
    values = dict(workspace_gib=workspace_gib, max_seq_len=max_seq_len, model=model, gpu=gpu,
                  manager=manager,
                  weights_gib=weights_gib, max_batch_size=max_batch_size, ranks=ranks)
    for name, control in controls.items():
        check_control_value(name, control, values[name])
        control.value = values[name]
        control.style, control.layout = style, layout
        if hasattr(control, "continuous_update"):
            control.continuous_update = False
    # the weights given belong to a model: another model's are derived (0) until set again
    controls["model"].observe(lambda change: setattr(controls["weights_gib"], "value", 0.0),
                              names="value")
    base = example_deployments()["issue-21470"]
    return Panel(controls, lambda values: plan_model(values, base=base), plan_figures, plan_verdict,
                 title="Your deployment: will it hit issue #21470?", wait_s=wait_s)


__all__ += ["PLAN_BATCH_SIZES", "PLAN_MAX_SEQ_LENS", "PLAN_RANKS", "plan_figures", "plan_model",
            "plan_panel", "plan_verdict"]
