"""The scheduler at work: a run over time (requests, pool pages, the stall detector) and one
scheduling pass, request by request (notebooks 03 and 04, and their panels)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from kvlab.core.checks import check_choice, check_instance, check_int
from kvlab.core.request import UNFINISHED_STATUSES
from kvlab.core.words import counted
from kvlab.notebook.viz.style import (
    AXIS_STYLE,
    NEUTRAL_COLOR,
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    as_figure,
    base_layout,
    outcome_color,
    run_outcome,
    wrap_words,
)
from kvlab.run.simulation import SimulationResult

#: Line colours of the timeline's non-outcome series (Tol "muted"; clear of the outcome colours).
TIMELINE_COLORS = {
    "running": "#332288",
    "waiting": "#AA4499",
    "suspended": "#88CCEE",
    "queued": "#882255",
    "used": "#999933",
    "free": "#DDDDDD",
}
#: The timeline's traces, in order (always all seven; the queue's last, so that the others keep
#: their places).
TIMELINE_SERIES = (
    "running",
    "waiting",
    "suspended",
    "used_blocks",
    "free_blocks",
    "stalled_passes",
    "queued",
)
_TIMELINE_DOMAINS = ([0.70, 1.0], [0.37, 0.62], [0.0, 0.29])


#: Where a run left its requests (:func:`end_counts`), in the order a subtitle names them.
END_PLACES = (
    "finished",
    "rejected",
    "running",
    "suspended",
    "waiting in the scheduler",
    "queued in the executor",
    "not yet arrived",
)


def end_place(result, request_id: str) -> str:
    """Where ``result`` left one request, one of :data:`END_PLACES` (or its status where kvlab
    has no request to read). A result's status says "waiting" for any request not started,
    wherever it is; the timeline's waiting line counts only those the scheduler holds, so the
    others are told apart as the run's reasons do: never submitted and arrived before the run's
    end step (queued), or not arrived by then."""
    status = result.status[request_id]
    request = result.requests.get(request_id)
    state = request.state if request is not None else status
    if state == "suspended":
        return "suspended"
    if state != "waiting" or request is None:
        return status
    if request.activated_step is not None:
        return "waiting in the scheduler"
    return "queued in the executor" if request.arrival_step < result.end_step else "not yet arrived"


def end_counts(result) -> dict:
    """How many requests ``result`` left in each of :data:`END_PLACES` (:func:`end_place`)."""
    counts = dict.fromkeys(END_PLACES, 0)
    for request_id in result.status:
        place = end_place(result, request_id)
        counts[place] = counts.get(place, 0) + 1
    return counts


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
    """A run over time, in three panels sharing the step axis: requests (running, waiting,
    suspended), the pool (used and free pages, stacked to the pool's size) and the stall
    detector's counter of consecutive passes without progress, with the stall limit dashed; for
    a scheduler without a stall detector (``stall_detector=False``: vLLM's) the third panel
    counts the preemptions of each step instead. ``page``: what the pool's title counts (SGLang's
    pages hold one token each: "one-token page").

    ``result`` is a ``kvlab.SimulationResult``. The step at which an error stopped the engine is
    marked in every panel in the outcome's colour (``outcome`` defaults to
    :func:`~kvlab.notebook.viz.style.run_outcome`: a livelock is not called a stall). Always seven scatter traces (:data:`TIMELINE_SERIES`);
    the suspended and the executor's queue lines, and their legend entries, only show when they
    hold anything, and "running", "waiting" and "used pages" have a legend entry only when
    they rise above zero. The
    default subtitle counts where the run left its requests (:func:`end_counts`), in the words
    the plot's legend uses."""
    trace = check_instance("result", result, SimulationResult).trace
    if stall_limit is not None:
        stall_limit = check_int(
            "stall_limit", stall_limit, low=1, high=1 << 30
        )  # Scheduler's range
    if outcome is not None:
        check_choice("outcome", outcome, OUTCOME_LABELS)
    check_instance("stall_detector", stall_detector, bool)
    steps = trace.column("step")
    outcome = outcome if outcome is not None else run_outcome(result)
    total = (trace[0].free_blocks + trace[0].used_blocks) if len(trace) else 0
    suspended = any(trace.column("suspended"))
    queued = any(trace.column("queued"))
    used = any(trace.column("used_blocks"))

    def line(name, column, axis, color, **extra):
        values = trace.column(column)
        return dict(
            type="scatter",
            x=steps,
            y=values,
            name=name,
            xaxis=f"x{axis}" if axis > 1 else "x",
            yaxis=f"y{axis}" if axis > 1 else "y",
            mode="lines",
            line=dict(color=color, width=2, shape="hv"),
            hovertemplate=f"step %{{x}}<br>{name}: %{{y}}<extra></extra>",
            **extra,
        )

    # a line that stays at zero all run has no legend entry (it lies on the axis)
    data = [
        line(
            "running",
            "running",
            1,
            TIMELINE_COLORS["running"],
            showlegend=any(trace.column("running")),
        ),
        line(
            "waiting in the scheduler",
            "waiting",
            1,
            TIMELINE_COLORS["waiting"],
            showlegend=any(trace.column("waiting")),
        ),
        # drawn, with its legend entry, only when the run suspended anything (a run with no
        # host tier never does): no entry for a line that holds nothing
        line(
            "suspended",
            "suspended",
            1,
            TIMELINE_COLORS["suspended"],
            visible=suspended,
            showlegend=suspended,
        ),
        line(
            "used pages",
            "used_blocks",
            2,
            TIMELINE_COLORS["used"],
            stackgroup="pool",
            showlegend=used,
        ),
        line(
            "free pages",
            "free_blocks",
            2,
            "#AAAAAA",
            stackgroup="pool",
            fillcolor=TIMELINE_COLORS["free"],
        ),
        line("stalled passes", "stalled_passes", 3, OUTCOME_COLORS["stall"])
        if stall_detector
        else line("preemptions", "num_recompute_paused", 3, OUTCOME_COLORS["stall"]),
        # arrived, not yet let in by the executor (max_num_active_requests), which the
        # subtitle counts too
        line(
            "queued in the executor",
            "queued",
            1,
            TIMELINE_COLORS["queued"],
            visible=queued,
            showlegend=queued,
        ),
    ]
    for trace_spec in data[3:5]:
        trace_spec["line"]["width"] = 1
    data[6]["line"]["dash"] = "dot"  # the waiting line shows through where the two counts agree
    shapes, annotations = [], []
    lowest = (
        "stall detector: passes without progress"
        if stall_detector
        else "preemptions in the step (no stall detector)"
    )
    pool = (
        f"KV pool ({counted(total, page)})" if len(trace) else "KV pool"
    )  # no pass, no pool to read
    for text, domain in zip(("requests", pool, lowest), _TIMELINE_DOMAINS):
        annotations.append(
            dict(
                text=f"<b>{text}</b>",
                x=0,
                xref="paper",
                y=domain[1],
                yref="paper",
                xanchor="left",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=12),
            )
        )
    if stall_limit is not None:
        shapes.append(
            dict(
                type="line",
                xref="x3 domain",
                x0=0,
                x1=1,
                yref="y3",
                y0=stall_limit,
                y1=stall_limit,
                line=dict(color=OUTCOME_COLORS["stall"], dash="dash", width=1.5),
            )
        )
        annotations.append(
            dict(
                text=f"stall limit {stall_limit:,}",
                xref="x3 domain",
                x=1,
                yref="y3",
                y=stall_limit,
                xanchor="right",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=11, color=OUTCOME_COLORS["stall"]),
            )
        )
    error = getattr(result, "error", None)
    if error is not None and steps:
        color = outcome_color(outcome)
        shapes.append(
            dict(
                type="line",
                xref="x",
                x0=steps[-1],
                x1=steps[-1],
                yref="paper",
                y0=0,
                y1=1,
                line=dict(color=color, width=2),
            )
        )
        annotations.append(
            dict(
                text=f"{type(error).__name__} in pass {len(steps):,} (step {steps[-1]:,})",
                xref="x",
                x=steps[-1],
                yref="paper",
                y=1.0,
                xanchor="right",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=11, color=color),
            )
        )
    if len(steps) <= 1:  # one pass: points, not lines, and why there is nothing over time
        for trace_spec in data:
            trace_spec["mode"] = "markers"
        # in the right half of the pool's panel, a few words a line: clear of the point (at
        # the centre of the step axis) and of the axes' labels on the left
        ended = error is not None or not any(
            s in UNFINISHED_STATUSES for s in result.status.values()
        )
        note = (
            "no scheduling pass ran: nothing to draw over time"
            if not steps
            else "the run ended in its first pass"
            + (f" ({type(error).__name__})" if error is not None else "")
            + ": one point per panel, nothing to draw over time"
            if ended
            else "one pass so far: one point per panel, nothing to draw over time yet"
        )
        annotations.append(
            dict(
                text="<br>".join(wrap_words(note, 34)),
                xref="paper",
                x=1.0,
                xanchor="right",
                yref="paper",
                y=sum(_TIMELINE_DOMAINS[1]) / 2,
                yanchor="middle",
                align="left",
                showarrow=False,
                font=dict(size=12, color="#444"),
                bgcolor="rgba(255,255,255,0.85)",
            )
        )
    if title is None:
        title = f"Scheduler timeline: {OUTCOME_LABELS.get(outcome, outcome or 'no outcome')}"
    if subtitle is None:
        subtitle = (
            f"{counted(len(steps), 'pass')}; at the end: "
            + ", ".join(f"{n:,} {where}" for where, n in end_counts(result).items() if n)
            + (f"; stopped by {type(error).__name__}" if error is not None else "")
        )
    top = max(
        trace.column("stalled_passes" if stall_detector else "num_recompute_paused")
        + [stall_limit or 0, 1]
    )
    axes = {}
    for axis, domain in enumerate(_TIMELINE_DOMAINS, start=1):
        suffix = "" if axis == 1 else str(axis)
        axes[f"xaxis{suffix}"] = dict(
            AXIS_STYLE,
            anchor=f"y{suffix}",
            domain=[0, 1],
            showticklabels=axis == 3,
            **({} if axis == 1 else {"matches": "x"}),
            **({"title": dict(text="scheduler iteration (step)")} if axis == 3 else {}),
        )
        axes[f"yaxis{suffix}"] = dict(
            AXIS_STYLE, anchor=f"x{suffix}", domain=domain, rangemode="tozero"
        )
    steps = trace.column("step")
    if steps and steps[-1] - steps[0] < 10:  # a few steps: whole steps on the axis, not -1 ... 1
        for name in ("xaxis", "xaxis2", "xaxis3"):
            axes[name].update(range=[steps[0] - 0.5, steps[-1] + 0.5], dtick=1)
    axes["yaxis"]["title"] = dict(text="requests")
    axes["yaxis2"].update(title=dict(text="pages"), range=[0, max(total, 1) * 1.05])
    axes["yaxis3"].update(
        title=dict(text="passes" if stall_detector else "requests"), range=[0, top * 1.1]
    )
    layout = base_layout(
        title,
        subtitle,
        height=560,
        shapes=shapes,
        annotations=annotations,
        # the legend at the figure's foot, under the step axis's title whatever
        # the fonts (placed on the plot, a wider font ran it into the title)
        legend=dict(
            orientation="h", yref="container", yanchor="bottom", y=0, x=0, traceorder="normal"
        ),
        margin=dict(l=70, r=30, t=90, b=90),
        **axes,
    )
    return {"data": data, "layout": layout}


scheduler_timeline_figure = as_figure(scheduler_timeline_spec)


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
    """One scheduling pass: for each request (``rows``: dicts with ``request``, ``asked``
    tokens, ``got`` tokens, ``result``, a key of :data:`PASS_RESULTS`, and ``why``), the tokens
    it asked for (outline) and got (filled, in the result's colour). The filled bars' colours
    vary by request, so their legend is one swatch per result filled this pass, in its colour.
    Traces: two bars, then one legend entry per :data:`PASS_RESULTS` key, always."""
    names = [r["request"] for r in rows]
    hover = [
        f"{r['request']}: asked {r['asked']:,} tokens, got {r['got']:,}<br>{r['result']}: {r['why']}"
        for r in rows
    ]
    asked = dict(
        type="bar",
        orientation="h",
        y=names,
        x=[max(r["asked"], 1) for r in rows],
        name="asked (outline)",
        text=[r["result"] for r in rows],
        textposition="outside",
        cliponaxis=False,
        marker=dict(color="rgba(0,0,0,0)", line=dict(color="#555555", width=1.5)),
        hovertext=hover,
        hovertemplate="%{hovertext}<extra></extra>",
    )
    got = dict(
        type="bar",
        orientation="h",
        y=names,
        x=[r["got"] or None for r in rows],
        name="got (filled, by result)",
        marker=dict(color=[PASS_RESULTS[r["result"]] for r in rows]),
        showlegend=False,
        hovertext=hover,
        hovertemplate="%{hovertext}<extra></extra>",
    )
    shown = {
        r["result"] for r in rows if r["got"]
    }  # drawn filled: a request that got 0 is an outline
    swatches = [
        dict(
            type="bar",
            orientation="h",
            y=[None],
            x=[None],
            name=result,
            marker=dict(color=color),
            showlegend=result in shown,
            hoverinfo="skip",
        )
        for result, color in PASS_RESULTS.items()
    ]
    top = max([1] + [r["asked"] for r in rows])
    layout = base_layout(
        title,
        subtitle,
        height=230 + 36 * max(len(rows), 1),
        barmode="overlay",
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1, xanchor="right"),
        margin=dict(l=70, r=80, t=100, b=60),
        xaxis=dict(
            title=dict(text="tokens this pass (log scale)"),
            type="log",
            dtick=1,
            range=[-0.5, math.log10(top) + 0.6],
        ),
        yaxis=dict(autorange="reversed", automargin=True),
    )
    return {"data": [asked, got, *swatches], "layout": layout}


pass_figure = as_figure(pass_spec)
