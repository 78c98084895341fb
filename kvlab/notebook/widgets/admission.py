"""Notebook 04's live panel: one long request beside small ones, under each policy (pool size,
context length, policy) -> the scheduler timeline, the long request's pages against the pool and
the row, and a verdict naming the outcome with the numbers."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ipywidgets as W

from kvlab.analysis.compare import EngineConfig, long_and_small, run_policy
from kvlab.analysis.phase import PhaseSetup, phase_verdicts
from kvlab.analysis.presets import ENGINE_OUTCOMES, engine_outcome, seed_geometry
from kvlab.analysis.repro import no_pool_reason
from kvlab.core.checks import check_choice, check_float, check_int
from kvlab.core.memory import readout_mib
from kvlab.core.words import counted
from kvlab.notebook import viz
from kvlab.notebook.panel import DEFAULT_WAIT_S, Panel, verdict_html
from kvlab.notebook.widgets.controls import context_choices, labelled
from kvlab.run.simulation import SimulationResult
from kvlab.run.trace import Trace
from kvlab.sched.policies import PEER_POLICIES, POLICIES, TRTLLM_POLICIES

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
    engine: Any  # kvlab.analysis.compare.EngineConfig, or None when the pool holds no page
    result: Any  # kvlab.SimulationResult, or None
    outcome: str | None
    no_pool: str | None
    phase_verdict: str | None  # the closed-form verdict for the long request alone
    num_small: int


def admission_model(
    values: Mapping[str, Any], *, num_small: int = 4, stall_limit: int = 1000
) -> AdmissionModel:
    """Run one long request of ``context`` tokens beside ``num_small`` small ones (256 + 32
    tokens, every 4 steps) on a pool of ``pool_mib`` MiB under ``policy``, with the real stall
    limit. The configured max_seq_len is the seed's 8192, or the context when that is longer."""

    pool_mib, context, policy = float(values["pool_mib"]), int(values["context"]), values["policy"]
    reason = no_pool_reason(pool_mib, 32)
    if reason:
        return AdmissionModel(pool_mib, context, policy, None, None, None, reason, None, num_small)
    engine = EngineConfig(
        pool_mib=pool_mib, max_seq_len=max(8192, context), stall_limit=stall_limit
    )
    requests = long_and_small(context, num_small=num_small)
    result = run_policy(policy, requests, engine, max_steps=50_000)
    phase = None
    if policy in TRTLLM_POLICIES:
        setup = PhaseSetup(
            max_seq_len=engine.max_seq_len, max_new_tokens=requests[0].max_new_tokens
        )
        phase = ENGINE_OUTCOMES[
            phase_verdicts([engine.total_blocks], [context], policy, setup)[0, 0]
        ]
    return AdmissionModel(
        pool_mib, context, policy, engine, result, engine_outcome(result), None, phase, num_small
    )


def admission_figures(model: AdmissionModel) -> dict[str, dict]:
    """The scheduler timeline of the run and the long request's pages against the pool and
    the page-index row (kvlab.notebook.viz specs)."""

    if model.result is None:
        empty = SimulationResult({}, {}, None, Trace(), {}, 0, 0)
        needed = seed_geometry().blocks_for_tokens(model.context)
        return {
            "timeline": viz.scheduler_timeline_spec(empty, title="No pool, so no engine to run"),
            "demand": viz.index_row_spec(0, needed, 0, None, title=f"No pool: {model.no_pool}"),
        }
    engine, result = model.engine, model.result
    manager = engine.manager(POLICIES[model.policy][1])
    needed = engine.geometry.blocks_for_tokens(model.context)  # what the first resize checks
    complete = engine.geometry.blocks_for_tokens(model.context + 16)
    peer = model.policy in PEER_POLICIES  # vLLM's and SGLang's own loops: no stall detector
    timeline = viz.scheduler_timeline_spec(
        result,
        stall_limit=None if peer else engine.stall_limit,
        outcome=model.outcome,
        stall_detector=not peer,
        title=f"{model.policy}: {_label(model)}",
        page="one-token page" if model.policy == "sglang" else "page",
    )
    demand = viz.index_row_spec(
        manager.max_blocks_per_seq,
        needed,
        engine.total_blocks,
        model.outcome,
        policy=POLICIES[model.policy][1],
        with_output=complete,
        title=f"The long request: context {counted(needed, 'page')}, {complete:,} to complete; pool "
        f"{engine.total_blocks:,}, row {manager.max_blocks_per_seq:,}",
        subtitle=_demand_subtitle(model, peer),
    )
    return {"timeline": timeline, "demand": demand}


#: What the demand figure's row and pool are for a peer, which has no page-index row.
PEER_ROW_NOTES = {
    "vllm": "vLLM has no page-index row (the row drawn is TensorRT-LLM's, for comparison) and "
    "keeps one of the pool's pages as its null block",
    "sglang": "SGLang has no page-index row (the row drawn is TensorRT-LLM's, for comparison), and "
    "its pool's pages hold one token each, so its timeline counts tokens",
}


def _demand_subtitle(model: AdmissionModel, peer: bool) -> str | None:
    """The demand figure's subtitle: the figure's own verdict (None) unless the long request
    never reached the row or the pool, or the policy is a peer's."""
    rejected = model.result.status.get("long") == "rejected"
    if not rejected and not peer:
        return None
    said = (
        f"{_label(model)}: it never reaches the row or the pool"
        if rejected
        else viz.OUTCOME_LABELS[model.outcome]
    )
    return f"{said}; {PEER_ROW_NOTES[model.policy]}" if peer else said


def _refused_to_start(model: AdmissionModel) -> bool:
    """The engine raised before any pass (vLLM's start-up check: no room for one block), so
    every request was rejected without being looked at."""
    return model.outcome == "reject" and model.result.error is not None


def _label(model: AdmissionModel) -> str:
    """The outcome's label; an engine that refused to start rejected nothing at admission."""
    return (
        "the engine refused to start"
        if _refused_to_start(model)
        else viz.OUTCOME_LABELS[model.outcome]
    )


def admission_verdict(model: AdmissionModel) -> tuple[str | None, str]:
    """(outcome, HTML): the outcome named with the numbers."""
    if model.result is None:
        return None, verdict_html(None, model.no_pool or "no result")
    result, engine = model.result, model.engine
    small = [i for i in result.status if i != "long"]
    done = sum(result.status[i] == "finished" for i in small)
    where = (
        f"The long request's context of {model.context:,} tokens needs "
        f"{counted(engine.geometry.blocks_for_tokens(model.context), 'page')}, "
        f"{engine.geometry.blocks_for_tokens(model.context + 16):,} with its 16 output tokens; "
        f"the pool has {engine.total_blocks:,} ({readout_mib(engine.pool_mib)} MiB)"
    )
    if model.outcome == "crash":
        headline = (
            f"Crash at step {result.end_step - 1:,}: PageIndexTooShort ({result.error}) "
            f"stops the engine; {done} of {len(small)} small requests finished, the rest "
            f"are lost. {where}."
        )
    elif model.outcome == "stall":
        if isinstance(result.error, RuntimeError) and result.status["long"] == "running":
            suspended = result.requests["long"].state == "suspended"
            moved = max(result.trace.column("host_blocks")) > 0
            held = (
                "so the scheduler suspended it and its pages moved to the host tier, yet "
                "nothing else was scheduled, and the small requests starved"
                if suspended and moved
                else "so the scheduler suspended it; a suspended request's pages stay on the GPU "
                "until an allocation moves them to the host tier, and none did: it holds the "
                "pool while the small requests starved"
                if suspended
                else "which nobody frees, so it holds the pool while the small requests starved"
            )
            headline = (
                f"Stall: the long request was admitted, and its context took "
                f"{engine.geometry.blocks_for_tokens(model.context):,} of "
                f"the pool's {engine.total_blocks:,} pages; its next tokens need more, "
                f"{held} "
                f"({done} of {len(small)} finished), then SchedulerDeadlock after "
                f"{engine.stall_limit:,} passes without progress (step {result.end_step - 1:,}). "
                f"{where}."
            )
        elif isinstance(result.error, RuntimeError):
            headline = (
                f"Stall: refused every pass, the long request starved while {done} of "
                f"{len(small)} small requests finished, then SchedulerDeadlock after "
                f"{engine.stall_limit:,} passes without progress (step {result.end_step - 1:,}). "
                f"{where}."
            )
        else:
            headline = f"Stall: requests still unfinished when the run ended. {where}."
    elif _refused_to_start(model):
        headline = (
            f"The engine refused to start ({type(result.error).__name__}: "
            f"{str(result.error).rstrip('.')}), so no request ran: all "
            f"{len(result.status)} were rejected unseen. {where}."
        )
        return model.outcome, verdict_html(model.outcome, headline, label=_label(model))
    elif model.outcome == "reject":
        headline = (
            f"Rejected: {result.reasons.get('long', '').rstrip('.')}. {done} of {len(small)} small "
            f"requests finished."
        )
    else:
        headline = (
            f"OK: {counted(len(result.status), 'request')}, all finished in "
            f"{counted(result.end_step, 'step')}. "
            f"{where}."
        )
    # each request where the timeline's subtitle counts it ("not yet arrived", not "waiting")
    detail = "\n".join(
        f"{rid}: {viz.end_place(result, rid)} - {_reason_without_error(result, rid)}"
        for rid in ["long", *small]
    )
    if model.phase_verdict is not None:
        detail = f"phase diagram (the long request alone): {model.phase_verdict}\n" + detail
    return model.outcome, verdict_html(model.outcome, headline, detail)


def _reason_without_error(result, request_id: str) -> str:
    """A request's reason, whole, without what the headline already gives: where the engine
    stopped, "engine stopped at step N by X (...): message" (kvlab.run.simulation), is the
    parenthesis alone, after "raised the error; " for the request that raised it."""
    why = result.reasons[request_id]
    if result.error is None:
        return why
    stopped = re.fullmatch(
        rf"engine stopped at step [\d,]+ by {type(result.error).__name__}"
        rf"( raised by this request)? \((.*)\): {re.escape(str(result.error))}",
        why,
        re.S,
    )
    if stopped is None:
        return why
    if stopped[1]:  # it raised in a pass, so "not refused by any pass" is not its story
        return "raised the error; " + re.sub(r"^(not refused|refused in)[^;]*; ", "", stopped[2])
    return stopped[2]


def admission_panel(
    pool_mib: float = 4.0,
    context: int = 8192,
    policy: str = "none/clamped",
    *,
    num_small: int = 4,
    stall_limit: int = 1000,
    wait_s: float = DEFAULT_WAIT_S,
) -> Panel:
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
    pool = W.FloatLogSlider(
        value=float(pool_mib),
        base=2,
        min=min(lo, math.floor(exponent)),
        max=max(hi, math.ceil(exponent)),
        step=0.5,
        description="pool (MiB)",
        readout_format=",.4g",
        continuous_update=True,
        style={"description_width": "110px"},
        layout=W.Layout(width="420px"),
    )
    ctx = W.SelectionSlider(
        options=labelled(context_choices([context])),
        value=int(context),
        description="context (tokens)",
        continuous_update=True,
        style={"description_width": "110px"},
        layout=W.Layout(width="420px"),
    )
    pol = W.ToggleButtons(
        options=list(ADMISSION_PANEL_POLICIES),
        value=policy,
        description="policy",
        style={"description_width": "110px", "button_width": "150px"},
    )

    def compute(values):
        return admission_model(values, num_small=num_small, stall_limit=stall_limit)

    return Panel(
        {"pool_mib": pool, "context": ctx, "policy": pol},
        compute,
        admission_figures,
        admission_verdict,
        title="Not yet or never: one long request beside small ones",
        wait_s=wait_s,
    )


__all__ = [
    "ADMISSION_PANEL_POLICIES",
    "ADMISSION_POOL_EXPONENTS",
    "AdmissionModel",
    "admission_figures",
    "admission_model",
    "admission_panel",
    "admission_verdict",
]
