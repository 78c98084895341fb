"""Notebook 04's panel: one long request beside small ones under each policy (pool, context,
policy) -> the scheduler timeline, the long request's pages against the pool and the row, and a
verdict naming the outcome with the numbers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ipywidgets as W

from kvlab.analysis.compare import EngineConfig, long_and_small, run_policy
from kvlab.analysis.phase import PhaseSetup, phase_verdicts
from kvlab.analysis.presets import ENGINE_OUTCOMES, engine_outcome, seed_geometry
from kvlab.analysis.repro import no_pool_reason
from kvlab.analysis.sentences import sentence, where
from kvlab.core.checks import check_choice, check_int
from kvlab.core.memory import readout_mib
from kvlab.core.request import RequestState
from kvlab.core.words import counted
from kvlab.notebook import viz
from kvlab.notebook.panel import DEFAULT_WAIT_S, Panel, verdict_html
from kvlab.notebook.parameters import check_pool_and_context
from kvlab.notebook.widgets.controls import context_choices, context_slider, control, pool_slider
from kvlab.run.simulation import SimulationResult
from kvlab.run.trace import Trace
from kvlab.sched.policies import PEER_POLICIES, POLICIES, TRTLLM_POLICIES

#: Policies the admission panel offers (kvlab.sched.policies.POLICIES).
ADMISSION_PANEL_POLICIES = ("none/clamped", "none/configured", "capacity", "vllm", "sglang")
#: Pool slider range as powers of two of MiB: one 64 KiB page to 4096 pages.
ADMISSION_POOL_EXPONENTS = (-4, 8)
#: What the demand figure's row and pool are for a peer, which has no page-index row.
PEER_ROW_NOTES = {
    "vllm": "vLLM has no page-index row (the row drawn is TensorRT-LLM's, for comparison) and "
    "keeps one of the pool's pages as its null block",
    "sglang": "SGLang has no page-index row (the row drawn is TensorRT-LLM's, for comparison), and "
    "its pool's pages hold one token each, so its timeline counts tokens",
}


@dataclass(frozen=True)
class AdmissionModel:
    """The run of the long request beside small ones under a policy, or why there is none
    (``no_pool``: the engine, the run and the outcome are then None)."""

    context: int
    policy: str
    engine: EngineConfig | None
    result: SimulationResult | None
    outcome: str | None
    no_pool: str | None
    phase_verdict: str | None  # the closed-form verdict for the long request alone

    @property
    def ran(self) -> tuple[EngineConfig, SimulationResult, str]:
        """The engine, its run and the outcome, which a model with a pool has."""
        assert self.engine is not None and self.result is not None and self.outcome is not None
        return self.engine, self.result, self.outcome

    def pages(self, tokens: int) -> int:
        return self.ran[0].geometry.blocks_for_tokens(tokens)

    @property
    def refused_to_start(self) -> bool:
        """The engine raised before any pass (vLLM: no room for one block)."""
        return self.outcome == "reject" and self.ran[1].error is not None

    @property
    def label(self) -> str:
        """The outcome's label; an engine that refused to start rejected nothing at admission."""
        if self.refused_to_start:
            return "the engine refused to start"
        return viz.OUTCOME_LABELS[self.outcome or ""]


def admission_model(
    values: Mapping[str, Any], *, num_small: int = 4, stall_limit: int = 1000
) -> AdmissionModel:
    """One long request of ``context`` tokens beside ``num_small`` small ones on a pool of
    ``pool_mib`` MiB under ``policy``; max_seq_len is the seed's 8192 or the context."""
    pool_mib, context, policy = float(values["pool_mib"]), int(values["context"]), values["policy"]
    reason = no_pool_reason(pool_mib, 32)
    if reason:
        return AdmissionModel(context, policy, None, None, None, reason, None)
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
    return AdmissionModel(context, policy, engine, result, engine_outcome(result), None, phase)


def admission_figures(model: AdmissionModel) -> dict[str, dict]:
    """The run's scheduler timeline and the long request's pages against the pool and row."""
    if model.result is None:
        empty = SimulationResult({}, {}, None, Trace(), {}, 0, 0)
        needed = seed_geometry().blocks_for_tokens(model.context)
        return {
            "timeline": viz.scheduler_timeline_spec(empty, title="No pool, so no engine to run"),
            "demand": viz.index_row_spec(0, needed, 0, None, title=f"No pool: {model.no_pool}"),
        }
    (engine, result, outcome), policy = model.ran, model.policy
    width = engine.manager(POLICIES[policy][1]).max_blocks_per_seq
    needed, complete = model.pages(model.context), model.pages(model.context + 16)
    peer = policy in PEER_POLICIES  # vLLM's and SGLang's own loops: no stall detector
    # the demand figure's own verdict, unless the long request never got there or it is a peer's
    said = None
    if result.status.get("long") == RequestState.REJECTED:
        said = f"{model.label}: it never reaches the row or the pool"
    if peer:
        said = f"{said or model.label}; {PEER_ROW_NOTES[policy]}"
    return {
        "timeline": viz.scheduler_timeline_spec(
            result,
            stall_limit=None if peer else engine.stall_limit,
            outcome=outcome,
            stall_detector=not peer,
            title=f"{policy}: {model.label}",
            page="one-token page" if policy == "sglang" else "page",
        ),
        "demand": viz.index_row_spec(
            width,
            needed,
            engine.total_blocks,
            outcome,
            policy=POLICIES[policy][1],
            with_output=complete,
            title=f"The long request: context {counted(needed, 'page')}, {complete:,} to "
            f"complete; pool {engine.total_blocks:,}, row {width:,}",
            subtitle=said,
        ),
    }


def _stall_headline(model: AdmissionModel, done: int, small: int) -> str:
    engine, result, _ = model.ran
    if not isinstance(result.error, RuntimeError):
        return "Stall: requests still unfinished when the run ended."
    deadlock = (
        f"then SchedulerDeadlock after {engine.stall_limit:,} passes without progress "
        f"(step {result.end_step - 1:,})."
    )
    if result.status["long"] != RequestState.RUNNING:
        return (
            f"Stall: refused every pass, the long request starved while {done} of {small} small "
            f"requests finished, {deadlock}"
        )
    if result.requests["long"].state != RequestState.SUSPENDED:
        held = "which nobody frees, so it holds the pool while the small requests starved"
    elif max(result.trace.column("host_blocks")) > 0:
        held = (
            "so the scheduler suspended it and its pages moved to the host tier, yet nothing "
            "else was scheduled, and the small requests starved"
        )
    else:
        held = (
            "so the scheduler suspended it; a suspended request's pages stay on the GPU until an "
            "allocation moves them to the host tier, and none did: it holds the pool while the "
            "small requests starved"
        )
    return (
        f"Stall: the long request was admitted, and its context took "
        f"{model.pages(model.context):,} of the pool's {engine.total_blocks:,} pages; its next "
        f"tokens need more, {held} ({done} of {small} finished), {deadlock}"
    )


def admission_verdict(model: AdmissionModel) -> tuple[str | None, str]:
    """(outcome, HTML): the outcome named with the numbers."""
    if model.result is None:
        return None, verdict_html(None, model.no_pool or "no result")
    engine, result, _ = model.ran
    small = [i for i in result.status if i != "long"]
    done = sum(result.status[i] == RequestState.FINISHED for i in small)
    finished = f"{done} of {len(small)} small requests finished"
    where = (
        f"The long request's context of {model.context:,} tokens needs "
        f"{counted(model.pages(model.context), 'page')}, {model.pages(model.context + 16):,} "
        f"with its 16 output tokens; the pool has {engine.total_blocks:,} "
        f"({readout_mib(engine.pool_mib)} MiB)"
    )
    if model.outcome == "crash":
        headline = (
            f"Crash at step {result.end_step - 1:,}: PageIndexTooShort ({result.error}) stops "
            f"the engine; {finished}, the rest are lost. {where}."
        )
    elif model.outcome == "stall":
        headline = f"{_stall_headline(model, done, len(small))} {where}."
    elif model.refused_to_start:
        headline = (
            f"The engine refused to start ({type(result.error).__name__}: "
            f"{str(result.error).rstrip('.')}), so no request ran: all "
            f"{len(result.status)} were rejected unseen. {where}."
        )
        return model.outcome, verdict_html(model.outcome, headline, label=model.label)
    elif model.outcome == "reject":
        headline = f"Rejected: {sentence(result.reasons.get('long')).rstrip('.')}. {finished}."
    else:
        headline = (
            f"OK: {counted(len(result.status), 'request')}, all finished in "
            f"{counted(result.end_step, 'step')}. {where}."
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
    """A request's reason without what the headline gives: where the engine's error left it
    (for the request that raised it, with no scheduling passes: they are not its story)."""
    reason = result.reasons[request_id]
    if reason is None or "error" not in reason.numbers:
        return sentence(reason)
    if reason.numbers["raised_by_this_request"]:
        return "raised the error; " + where(reason, passes=False)
    return where(reason)


def admission_panel(
    pool_mib: float = 4.0,
    context: int = 8192,
    policy: str = "none/clamped",
    *,
    num_small: int = 4,
    stall_limit: int = 1000,
    wait_s: float = DEFAULT_WAIT_S,
) -> Panel:
    """Notebook 04's panel: pool (MiB, log slider), the long request's context and the policy
    -> the scheduler timeline, the long request against the pool and the row, a verdict."""
    check_pool_and_context(pool_mib, context)
    check_choice("policy", policy, ADMISSION_PANEL_POLICIES)
    check_int("num_small", num_small, low=0, high=64)
    check_int("stall_limit", stall_limit, low=1, high=100_000)  # a panel's run stays quick
    controls = {
        "pool_mib": pool_slider(pool_mib, ADMISSION_POOL_EXPONENTS),
        "context": context_slider(context, context_choices([context])),
        "policy": control(
            W.ToggleButtons,
            "policy",
            width=None,
            button_width="150px",
            options=list(ADMISSION_PANEL_POLICIES),
            value=policy,
        ),
    }
    return Panel(
        controls,
        lambda values: admission_model(values, num_small=num_small, stall_limit=stall_limit),
        admission_figures,
        admission_verdict,
        title="Not yet or never: one long request beside small ones",
        wait_s=wait_s,
    )
