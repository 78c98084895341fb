"""Notebook 03's panel: one scheduling pass at a time, the long request beside two small ones
(the pass slider is the "next pass" control; the policy picks the engine)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ipywidgets as W

from kvlab.analysis.compare import EngineConfig, build_scheduler, long_and_small
from kvlab.analysis.presets import engine_outcome
from kvlab.analysis.sentences import brief, sentence
from kvlab.core.cause import Cause
from kvlab.core.checks import check_choice, check_int
from kvlab.core.request import LIVE_STATES, UNFINISHED_STATUSES, RequestState
from kvlab.core.words import counted
from kvlab.notebook import viz
from kvlab.notebook.panel import DEFAULT_WAIT_S, Panel, verdict_html
from kvlab.notebook.widgets.controls import control
from kvlab.run.simulation import Engine, SimulationResult
from kvlab.sched.deadlock import SchedulerDeadlock
from kvlab.sched.policies import TRTLLM_POLICIES

#: The seed's pool with a stall limit of 20 passes, so that the detector's end is a few key
#: presses away (notebook 03 keeps the real 1000).
STEP_ENGINE = EngineConfig(stall_limit=20)
#: The 8192-token request beside two small ones.
STEP_WORKLOAD = tuple(long_and_small(num_small=2, every=2))
#: The most passes the step-through runs (every policy's run ends sooner).
STEP_MAX_PASSES = 60


@dataclass(frozen=True)
class StepModel:
    """The engine after ``passes`` passes under ``policy``, and what the last one decided."""

    policy: str
    passes: int  # passes run (fewer than asked when the run ended)
    result: SimulationResult
    rows: tuple[dict, ...]  # the last pass, a dict a request (viz.pass_spec)
    stalled: int  # the stall detector's count after the last pass
    used_pages: int
    total_pages: int
    #: request id -> the pass it ended in (finished or rejected), for those that have ended
    ended: Mapping[str, int] = dataclasses.field(default_factory=dict)


def _asked(request) -> int:
    """Tokens ``request`` needs from the next pass: the rest of its context and its draft
    tokens, or one generation step (1 + draft)."""
    if request.context_current_position < request.prompt_len:
        return request.context_remaining_length + request.num_draft_tokens
    return 1 + request.num_draft_tokens


def _pass_result(engine, request, scheduled, asked: int) -> tuple[str, str]:
    """What ``request`` got in the engine's last pass (a key of viz.PASS_RESULTS), and why."""
    error = engine.error
    if error is not None and getattr(error, "request_id", "") == request.request_id:
        return "crash", f"{type(error).__name__}: {error}"
    if error is not None and not isinstance(error, SchedulerDeadlock):
        # an error inside the pass; the deadlock is raised after a whole pass
        return "waiting", "the engine stopped before this pass reached it"
    if request.request_id in scheduled:
        return "scheduled", "the pages and the token budget were there"
    if request.state == RequestState.SUSPENDED:
        return "suspended", "its cache gave way (pages to the tier below, or kept)"
    if request.state in (RequestState.FINISHED, RequestState.REJECTED):
        return str(request.state), sentence(request.reason)
    if request.state == RequestState.WAITING and asked > 0:
        then = "the engine stopped after this pass" if error is not None else "retried next pass"
        return (
            "refused",
            f"not scheduled: the resize returned False or the budget was spent; {then}",
        )
    return "waiting", "not reached this pass"


def step_model(values: Mapping[str, Any]) -> StepModel:
    """Run :data:`STEP_WORKLOAD` under ``values["policy"]`` for ``values["pass"]`` passes
    (from scratch: a pass is ms) and describe the last one."""
    policy, wanted = values["policy"], int(values["pass"])
    engine = Engine(build_scheduler(policy, STEP_ENGINE), STEP_WORKLOAD)
    asked: dict[str, int] = {}
    ended: dict[str, int] = {}
    while engine.iterations < wanted and engine.error is None:
        if not engine.num_live:
            if not engine.has_pending_arrivals:
                break
            engine.advance_to(engine.arrivals[engine.next_arrival].arrival_step)
        asked = {
            r.request_id: _asked(r)
            for r in engine.requests
            if r.arrival_step <= engine.step and r.state in LIVE_STATES
        }
        engine.iterate()
        for r in engine.requests:  # what ended in this pass (a rejection at arrival included)
            if r.state not in LIVE_STATES and r.request_id not in ended:
                ended[r.request_id] = max(engine.iterations, 1)
    batch = engine.last_batch
    scheduled = (
        {r.request_id for r in (*batch.context_requests, *batch.generation_requests)}
        if batch
        else set()
    )
    rows = []
    for request in (r for r in engine.requests if r.request_id in asked):
        want = asked[request.request_id]
        result, why = _pass_result(engine, request, scheduled, want)
        if result == "scheduled" and request.state == RequestState.FINISHED:
            why += "; that was its last token: it finished"
        got = want if result == "scheduled" else 0
        rows.append(dict(request=request.request_id, asked=want, got=got, result=result, why=why))
    manager = engine.scheduler.manager
    return StepModel(
        policy,
        engine.iterations,
        engine.result(engine.step),
        tuple(rows),
        engine.scheduler.stalled_passes,
        manager.total_blocks - manager.free_blocks,
        manager.total_blocks,
        ended,
    )


@functools.cache
def step_passes(policy: str) -> int:
    """The passes the run has under ``policy`` (to its end, at most :data:`STEP_MAX_PASSES`):
    the pass slider's range."""
    policy = check_choice("policy", policy, TRTLLM_POLICIES)
    return step_model({"policy": policy, "pass": STEP_MAX_PASSES}).passes


def step_figures(model: StepModel) -> dict[str, dict]:
    """This pass, request by request, and the run so far."""
    steps = f", steps 0 to {model.passes - 1:,}" if model.passes > 1 else ", step 0"
    return {
        "pass": viz.pass_spec(
            model.rows,
            title=f"Pass {model.passes}: what each request asked for, and got",
            subtitle=f"policy {model.policy}; after the pass, "
            f"{model.used_pages:,} of {model.total_pages:,} pool pages in use",
        ),
        "timeline": viz.scheduler_timeline_spec(
            model.result,
            stall_limit=STEP_ENGINE.stall_limit,
            title=f"The run so far: {counted(model.passes, 'pass')}{steps}",
        ),
    }


def _and(items: list[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def _did(model: StepModel, row: Mapping[str, Any]) -> str:
    """What the last pass did to ``row``'s request, in a few words."""
    who, result = row["request"], row["result"]
    request = model.result.requests[who]
    if result == "scheduled" and model.ended.get(who) == model.passes:
        return f"{who} scheduled and finished (its last token)"
    if result == "rejected":
        return f"{who} rejected: {row['why']}"
    if result == "refused" and request.num_refusals > 1:
        return f"{who} refused again ({request.num_refusals:,} refusals so far)"
    if result == "crash":
        return f"{who} raised {type(model.result.error).__name__}, which stopped the engine"
    if result == "waiting" and model.result.error is not None:
        return f"{who} not reached"
    return f"{who} {result}"


def _ended_before(model: StepModel) -> str:
    """The requests that ended before the last pass, in the past tense, each once ("" for
    none)."""
    earlier = sorted(
        ((at, who) for who, at in model.ended.items() if at < model.passes), key=lambda e: e[0]
    )
    said = []
    for at, who in earlier:
        if model.result.status[who] == RequestState.REJECTED:
            why = brief(model.result.reasons[who])
            said.append(f"{who} was rejected at pass {at} ({why})")
        else:
            said.append(f"{who} finished at pass {at}")
    return f" Earlier, {_and(said)}." if said else ""


def _recap(model: StepModel) -> str:
    """Each request's outcome at the run's end, in one sentence."""
    status, requests = model.result.status, model.result.requests
    finished = [who for who, s in status.items() if s == RequestState.FINISHED]
    parts = []
    if finished:
        at = [f"{model.ended[who]}" for who in finished]
        parts.append(
            f"{_and(finished)} finished (at passes {_and(at)})"
            if len(finished) > 1
            else f"{finished[0]} finished at pass {at[0]}"
        )
    else:
        parts.append("no request finished")
    parts += [
        f"{who} was rejected at pass {model.ended[who]}: {brief(model.result.reasons[who])}"
        for who, s in status.items()
        if s == RequestState.REJECTED
    ]
    raised = getattr(model.result.error, "request_id", None)  # the pass said it raised
    left = [who for who, s in status.items() if s in UNFINISHED_STATUSES and who != raised]
    reasons = model.result.reasons
    unseen = [who for who in left if (r := reasons[who]) and r.cause is Cause.NOT_SUBMITTED]
    never = [
        who for who in left if who not in unseen and requests[who].first_scheduled_step is None
    ]
    if never:
        parts.append(f"{_and(never)} never ran")
    if unseen:
        parts.append(f"{_and(unseen)} had not arrived")
    parts += [
        f"{who} was left unfinished ({requests[who].num_generated:,} of "
        f"{requests[who].max_new_tokens:,} tokens)"
        for who in left
        if who not in never and who not in unseen
    ]
    return "; ".join(parts)


def step_verdict(model: StepModel) -> tuple[str | None, str]:
    """(outcome, HTML): what the last pass did, request by request, and what ended before it,
    in the past tense; the last pass adds every request's outcome. Before the run's last pass
    it has no outcome yet."""
    outcome = engine_outcome(model.result)
    error = model.result.error
    did = "; ".join(_did(model, row) for row in model.rows) or "nothing scheduled"
    if isinstance(error, SchedulerDeadlock):
        did += (
            f"; the stall detector reached {model.stalled} of {STEP_ENGINE.stall_limit} passes "
            f"without progress and stopped the engine: {type(error).__name__}"
        )
    elif error is not None and not any(row["result"] == "crash" for row in model.rows):
        did += f"; the engine stopped: {type(error).__name__}"
    if error is None and any(s in UNFINISHED_STATUSES for s in model.result.status.values()):
        stall = (
            f" The stall detector counts {model.stalled} of {STEP_ENGINE.stall_limit} "
            "passes without progress."
            if model.stalled
            else ""
        )
        headline = f"Pass {model.passes}: {did}.{_ended_before(model)}{stall} Press → for the next."
        progress = f"in progress: pass {model.passes:,} of {step_passes(model.policy):,}"
        return None, verdict_html(None, headline, label=progress)
    headline = f"Pass {model.passes}: {did}. The run is over: {_recap(model)}."
    return outcome, verdict_html(outcome, headline)


def step_panel(
    policy: str = "none/configured", passes: int = 1, *, wait_s: float = DEFAULT_WAIT_S
) -> Panel:
    """Notebook 03's panel: the pass slider (its arrow keys step one pass) spans the passes
    the policy's run has; the policy picks the engine."""
    policy = check_choice("policy", policy, TRTLLM_POLICIES)
    passes = check_int("passes", passes, low=1, high=step_passes(policy))
    pick = control(
        W.ToggleButtons,
        "policy",
        width=None,
        button_width="130px",
        options=list(TRTLLM_POLICIES),
        value=policy,
    )
    step = control(
        W.IntSlider, "pass", value=passes, min=1, max=step_passes(policy), continuous_update=False
    )
    # observed before the panel does: the slider's range follows first, then the panel redraws
    pick.observe(lambda change: setattr(step, "max", step_passes(change["new"])), names="value")
    return Panel(
        {"policy": pick, "pass": step},
        step_model,
        step_figures,
        step_verdict,
        title="One scheduling pass at a time: the long request beside two small ones",
        wait_s=wait_s,
    )
