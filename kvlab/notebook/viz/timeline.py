"""The scheduler at work (notebooks 03 and 04, and their panels): a run over time (requests, pool
pages, the stall detector) and one scheduling pass, request by request."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kvlab.core.checks import check_choice, check_instance, check_int
from kvlab.core.request import UNFINISHED_STATUSES, RequestState
from kvlab.core.words import counted
from kvlab.notebook.viz.style import (
    NEUTRAL_COLOR,
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    across,
    as_figure,
    base_layout,
    end_note,
    foot_legend,
    hover,
    note,
    on_panel,
    outcome_color,
    panel_axes,
    run_outcome,
    titled,
    upright,
    wrap_words,
)
from kvlab.run.simulation import SimulationResult

#: Line colours of the timeline's non-outcome series (Tol "muted").
TIMELINE_COLORS = {
    "running": "#332288",
    "waiting": "#AA4499",
    "suspended": "#88CCEE",
    "queued": "#882255",
    "used": "#999933",
    "free": "#DDDDDD",
}
#: The timeline's traces, in order (always all seven; the queue last, so the others keep places).
TIMELINE_SERIES: tuple[str, ...] = ("running", "waiting", "suspended", "used_blocks", "free_blocks")
TIMELINE_SERIES += ("stalled_passes", "queued")
_TIMELINE_DOMAINS = ([0.70, 1.0], [0.37, 0.62], [0.0, 0.29])
#: Where a run left its requests (:func:`end_place`), in the order a subtitle names them.
END_PLACES = (
    RequestState.FINISHED,
    RequestState.REJECTED,
    RequestState.RUNNING,
    RequestState.SUSPENDED,
    "waiting in the scheduler",
    "queued in the executor",
    "not yet arrived",
)


def end_place(result, request_id: str) -> str:
    """Where ``result`` left a request, one of :data:`END_PLACES`: a "waiting" status is told
    apart as the scheduler's, the executor's queue, or not arrived by the run's end."""
    status = result.status[request_id]
    request = result.requests.get(request_id)
    state = request.state if request is not None else status
    if state == RequestState.SUSPENDED:
        return RequestState.SUSPENDED
    if state != RequestState.WAITING or request is None:
        return status
    if request.activated_step is not None:
        return "waiting in the scheduler"
    return "queued in the executor" if request.arrival_step < result.end_step else "not yet arrived"


def end_counts(result) -> dict:
    """How many requests ``result`` left in each of :data:`END_PLACES`."""
    places = Counter(end_place(result, request_id) for request_id in result.status)
    return dict.fromkeys(END_PLACES, 0) | places


def _one_pass_words(result, steps: list) -> str:
    """Why a run of at most one pass has nothing to draw over time."""
    error = result.error
    if not steps:
        return "no scheduling pass ran: nothing to draw over time"
    if error is None and any(s in UNFINISHED_STATUSES for s in result.status.values()):
        return "one pass so far: one point per panel, nothing to draw over time yet"
    raised = f" ({type(error).__name__})" if error is not None else ""
    return (
        f"the run ended in its first pass{raised}: one point per panel, nothing to draw over time"
    )


def scheduler_timeline_spec(
    result,
    *,
    stall_limit: int | None = None,
    outcome: str | None = None,
    title: str | None = None,
    subtitle: str | None = None,
    stall_detector: bool = True,
    page: str = "page",
) -> dict:
    """A SimulationResult over time: requests, the pool's pages, and the stall detector's count
    (without one, the preemptions) with ``stall_limit`` dashed. Traces: :data:`TIMELINE_SERIES`."""
    trace = check_instance("result", result, SimulationResult).trace
    if stall_limit is not None:
        stall_limit = check_int("stall_limit", stall_limit, low=1, high=1 << 30)
    if outcome is not None:
        check_choice("outcome", outcome, OUTCOME_LABELS)
    check_instance("stall_detector", stall_detector, bool)
    steps = trace.column("step")
    outcome = outcome if outcome is not None else run_outcome(result)
    total = (trace[0].free_blocks + trace[0].used_blocks) if len(trace) else 0
    lowest = "stalled_passes" if stall_detector else "num_recompute_paused"
    stall = OUTCOME_COLORS["stall"]

    # (name, column, panel, colour, legend): "any" an entry once the line leaves zero, "hide"
    # the line too until then (a run with no host tier never suspends), "always"
    rows = (
        ("running", "running", 0, TIMELINE_COLORS["running"], "any"),
        ("waiting in the scheduler", "waiting", 0, TIMELINE_COLORS["waiting"], "any"),
        ("suspended", "suspended", 0, TIMELINE_COLORS["suspended"], "hide"),
        ("used pages", "used_blocks", 1, TIMELINE_COLORS["used"], "any"),
        ("free pages", "free_blocks", 1, "#AAAAAA", "always"),
        ("stalled passes" if stall_detector else "preemptions", lowest, 2, stall, "always"),
        # arrived, not yet let in by the executor (max_num_active_requests)
        ("queued in the executor", "queued", 0, TIMELINE_COLORS["queued"], "hide"),
    )
    data = []
    for name, column, panel, color, legend in rows:
        values = trace.column(column)
        line = dict(color=color, width=1 if panel == 1 else 2, shape="hv")
        hovers = f"step %{{x}}<br>{name}: %{{y}}<extra></extra>"
        spec = dict(type="scatter", x=steps, y=values, name=name, **on_panel(panel))
        spec.update(mode="lines" if len(steps) > 1 else "markers", line=line, hovertemplate=hovers)
        if panel == 1:
            spec["stackgroup"] = "pool"
        if legend == "hide":
            spec["visible"] = any(values)
        if legend != "always":
            spec["showlegend"] = any(values)
        data.append(spec)
    data[4]["fillcolor"] = TIMELINE_COLORS["free"]
    data[6]["line"]["dash"] = "dot"  # the waiting line shows through where the two agree
    panel_titles = (
        "requests",
        f"KV pool ({counted(total, page)})" if len(trace) else "KV pool",
        "stall detector: passes without progress"
        if stall_detector
        else "preemptions in the step (no stall detector)",
    )
    shapes = []
    annotations = [
        note(f"<b>{text}</b>", 0, top, xref="paper", yref="paper", xanchor="left", yanchor="bottom")
        for text, (_, top) in zip(panel_titles, _TIMELINE_DOMAINS)
    ]
    if stall_limit is not None:
        shapes.append(across(stall_limit, stall, "dash", "x3 domain", "y3"))
        shapes[-1]["line"]["width"] = 1.5
        text = f"stall limit {stall_limit:,}"
        annotations.append(end_note(text, stall_limit, stall, 11, xref="x3 domain", yref="y3"))
    error = result.error
    if error is not None and steps:
        color, end = outcome_color(outcome), steps[-1]
        shapes.append(upright(end, color))
        text = f"{type(error).__name__} in pass {len(steps):,} (step {end:,})"
        where: dict[str, Any] = dict(yref="paper", xanchor="right", yanchor="bottom")
        annotations.append(note(text, end, 1.0, color, 11, **where))
    if len(steps) <= 1:  # one pass: points, not lines, and why there is nothing over time
        # in the right half of the pool's panel: clear of the point and of the axes' labels
        words = "<br>".join(wrap_words(_one_pass_words(result, steps), 34))
        middle = sum(_TIMELINE_DOMAINS[1]) / 2
        where = dict(xref="paper", yref="paper", xanchor="right", yanchor="middle", align="left")
        annotations.append(
            note(words, 1.0, middle, "#444", bgcolor="rgba(255,255,255,0.85)", **where)
        )
    if subtitle is None:
        subtitle = (
            f"{counted(len(steps), 'pass')}; at the end: "
            + ", ".join(f"{n:,} {place}" for place, n in end_counts(result).items() if n)
            + (f"; stopped by {type(error).__name__}" if error is not None else "")
        )
    top = max(trace.column(lowest) + [stall_limit or 0, 1])
    y_titles = ("requests", "pages", "passes" if stall_detector else "requests")
    y_ranges = (None, [0, max(total, 1) * 1.05], [0, top * 1.1])
    axes: dict[str, dict] = {}
    for k, domain in enumerate(_TIMELINE_DOMAINS):
        x = dict(domain=[0, 1], showticklabels=k == 2)
        if k:
            x["matches"] = "x"
        if steps and steps[-1] - steps[0] < 10:  # a few steps: whole steps on the axis
            x.update(range=[steps[0] - 0.5, steps[-1] + 0.5], dtick=1)
        y: dict[str, Any] = dict(domain=domain, rangemode="tozero", title=dict(text=y_titles[k]))
        if y_ranges[k]:
            y["range"] = y_ranges[k]
        axes |= panel_axes(k, x, y)
    axes["xaxis3"]["title"] = dict(text="scheduler iteration (step)")
    said = OUTCOME_LABELS.get(outcome, outcome or "no outcome")
    layout = base_layout(
        titled(title, f"Scheduler timeline: {said}"),
        subtitle,
        height=560,
        shapes=shapes,
        annotations=annotations,
        legend=foot_legend(traceorder="normal"),  # under the step axis's title, whatever the fonts
        margin=dict(l=70, r=30, t=90, b=90),
        **axes,
    )
    return {"data": data, "layout": layout}


#: What a request got in one pass (:func:`pass_spec`), and its colour.
PASS_RESULTS = {
    "scheduled": OUTCOME_COLORS["ok"],
    "refused": OUTCOME_COLORS["refused"],
    "suspended": TIMELINE_COLORS["suspended"],
    "waiting": NEUTRAL_COLOR,
    "crash": OUTCOME_COLORS["crash"],
    "finished": "#332288",
    "rejected": OUTCOME_COLORS["reject"],
}


def pass_spec(rows: Sequence[Mapping], *, title: str, subtitle: str = "") -> dict:
    """One pass: each request's tokens asked (outline) and got (filled in its ``result``'s
    colour); ``rows``: dicts of request, asked, got, result, why."""
    hovers = [
        f"{r['request']}: asked {r['asked']:,} tokens, got {r['got']:,}<br>{r['result']}: {r['why']}"
        for r in rows
    ]
    bars = dict(type="bar", orientation="h", y=[r["request"] for r in rows], **hover(hovers))
    outline = dict(color="rgba(0,0,0,0)", line=dict(color="#555555", width=1.5))
    asked = dict(bars, x=[max(r["asked"], 1) for r in rows], name="asked (outline)")
    asked.update(text=[r["result"] for r in rows], textposition="outside", cliponaxis=False)
    asked["marker"] = outline
    got = dict(bars, x=[r["got"] or None for r in rows], name="got (filled, by result)")
    got.update(marker=dict(color=[PASS_RESULTS[r["result"]] for r in rows]), showlegend=False)
    shown = {r["result"] for r in rows if r["got"]}  # a request that got 0 is an outline
    swatch = dict(type="bar", orientation="h", x=[None], y=[None], hoverinfo="skip")
    swatches = [
        dict(swatch, name=result, marker=dict(color=color), showlegend=result in shown)
        for result, color in PASS_RESULTS.items()
    ]
    top = max([1] + [r["asked"] for r in rows])
    x_axis = dict(type="log", dtick=1, range=[-0.5, math.log10(top) + 0.6])
    layout = base_layout(
        title,
        subtitle,
        height=230 + 36 * max(len(rows), 1),
        barmode="overlay",
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1, xanchor="right"),
        margin=dict(l=70, r=80, t=100, b=60),
        xaxis=dict(title=dict(text="tokens this pass (log scale)"), **x_axis),
        yaxis=dict(autorange="reversed", automargin=True),
    )
    return {"data": [asked, got, *swatches], "layout": layout}


scheduler_timeline_figure = as_figure(scheduler_timeline_spec)
pass_figure = as_figure(pass_spec)
