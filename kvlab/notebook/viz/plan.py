"""Preflight (notebook 06): what a lone request of each context length meets under each policy,
and every rank's memory, for a deployment's plan (:mod:`kvlab.analysis.deployment`)."""

from __future__ import annotations

from kvlab.analysis.deployment import CLAMP_PROPOSAL, DeploymentPlan
from kvlab.analysis.presets import ENGINE_OUTCOMES
from kvlab.core.checks import check_instance
from kvlab.core.memory import GIB
from kvlab.core.words import counted
from kvlab.notebook.viz.ranks import BUDGET_PARTS, gib_text, rank_axis, rank_budget_spec
from kvlab.notebook.viz.style import (
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    POOL_COLOR,
    ROW_COLOR,
    as_figure,
    base_layout,
    titled,
)

#: The plan figure's short name for each TensorRT-LLM policy (kvlab.analysis.deployment).
PLAN_POLICY_NAMES = {
    "none/clamped": "current code",
    "none/configured": "one-line fix",
    "capacity": "admission (PR #21720)",
    "v1": "current code (V1)",
    CLAMP_PROPOSAL: "PR #17261's clamp",
}

#: The plot's width in px where the panel draws it (640 px less the 160 + 30 px margins), the
#: narrowest it is drawn, and an 11 px character's width (about 5.3 px measured, rounded up):
#: what an annotation's side is chosen by.
PLOT_PX, CHAR_PX = 450, 5.5


def _beside(fraction: float, text: str, gap: int) -> dict:
    """The side of a point ``fraction`` of the way along the x axis where ``text`` (``gap`` px
    from it) stays inside the plot: left of it where it fits (xanchor "right"), else right of
    it, else centred on it; as an annotation's ``ax`` and ``xanchor``."""
    need = gap + CHAR_PX * len(text)
    if fraction * PLOT_PX >= need:
        return dict(ax=-gap, xanchor="right")
    if (1 - fraction) * PLOT_PX >= need:
        return dict(ax=gap, xanchor="left")
    return dict(ax=0, xanchor="center")


#: The legend's words for a V1 plan's rejections (V1 has no admission control).
V1_REJECT_LABEL = "rejected at the request door"


def plan_ranges_spec(plan, *, title: str | None = None) -> dict:
    """What a lone request of each context length meets under each policy, as horizontal bands
    over the context axis (``plan``: a ``kvlab.analysis.deployment.DeploymentPlan``), with the
    pool's capacity and, under V2, the page-index row's span (now, and under the fix when it
    falls inside the axis), under V1 the clamped max_seq_len, drawn as vertical lines. A band
    too narrow to see at this scale is marked by a tick of its colour and named, with its range
    and width, by an arrow; two lines closer than the eye can split are labelled with the tokens
    between them.
    Traces: one bar per engine outcome (4), the ticks, two legend entries for the lines: always
    7."""
    d = check_instance("plan", plan, DeploymentPlan).deployment
    top = d.configured_max_seq_len
    tpb = d.tokens_per_block
    names = [PLAN_POLICY_NAMES[p] for p in plan.ranges]
    # V1 has no admission control: what it rejects, the request checks reject at the door
    labels = {**OUTCOME_LABELS, **({"reject": V1_REJECT_LABEL} if plan.manager == "v1" else {})}
    traces = []
    ticks = dict(x=[], y=[], color=[], text=[])
    annotations = []
    for outcome in ENGINE_OUTCOMES:
        ys, xs, bases, hover = [], [], [], []
        for policy, segments in plan.ranges.items():
            for s in segments:
                if s.verdict != outcome:
                    continue
                ys.append(PLAN_POLICY_NAMES[policy])
                xs.append(s.high - s.low + 1)
                bases.append(s.low - 1)
                hover.append(
                    f"{PLAN_POLICY_NAMES[policy]}: {s.low:,}-{s.high:,} tokens<br>{labels[outcome]}"
                )
                if s.high - s.low + 1 < top / 100:
                    ticks["x"].append((s.low + s.high) / 2)
                    ticks["y"].append(PLAN_POLICY_NAMES[policy])
                    ticks["color"].append(OUTCOME_COLORS[outcome])
                    ticks["text"].append(hover[-1])
                    # named with an arrow: a tick on a million-token axis is easy to miss; its
                    # words on the side where they stay inside the plot, clear of the axis labels
                    text = (
                        f"{labels[outcome]}: {s.low:,}-{s.high:,} ({s.high - s.low + 1:,} tokens)"
                    )
                    annotations.append(
                        dict(
                            x=(s.low + s.high) / 2,
                            y=PLAN_POLICY_NAMES[policy],
                            xref="x",
                            yref="y",
                            text=text,
                            showarrow=True,
                            arrowhead=2,
                            arrowcolor=OUTCOME_COLORS[outcome],
                            ay=-24 - 16 * (len(annotations) % 2),
                            **_beside((s.low + s.high) / 2 / top, text, 40),
                            font=dict(size=11, color=OUTCOME_COLORS[outcome]),
                            bgcolor="rgba(255,255,255,0.9)",
                        )
                    )
        traces.append(
            dict(
                type="bar",
                orientation="h",
                x=xs,
                y=ys,
                base=bases,
                name=labels[outcome],
                marker=dict(color=OUTCOME_COLORS[outcome]),
                hovertext=hover,
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=bool(xs),
            )
        )
    traces.append(
        dict(
            type="scatter",
            mode="markers",
            x=ticks["x"],
            y=ticks["y"],
            marker=dict(symbol="line-ns", size=26, line=dict(width=4, color=ticks["color"])),
            hovertext=ticks["text"],
            hovertemplate="%{hovertext}<extra></extra>",
            name="narrow range",
            showlegend=False,
        )
    )
    # V1: the KV manager's max_seq_len (the configured one plus the overlap scheduler's token),
    # in the plan's own words: "clamped to" only when the pool clamped it
    second = (
        ("row spans now", plan.width_current * tpb)
        if plan.manager == "v2"
        else ("max_seq_len clamped to", plan.clamped_max_seq_len)
        if plan.clamped
        else ("KV manager's max_seq_len (not clamped)", plan.clamped_max_seq_len)
    )
    lines = [("pool holds", plan.capacity_tokens, POOL_COLOR, "dot"), (*second, ROW_COLOR, "dash")]
    if (
        plan.width_fix is not None
        and plan.width_fix * tpb <= top
        and plan.width_fix != plan.width_current
    ):
        lines.append(("row spans with the fix", plan.width_fix * tpb, ROW_COLOR, "dashdot"))
    if not plan.blocks:  # no pool, no row: nothing to draw
        lines = []
    shapes = [
        dict(
            type="line",
            xref="x",
            x0=v,
            x1=v,
            yref="paper",
            y0=0,
            y1=1,
            line=dict(color=c, dash=dash, width=2),
        )
        for _, v, c, dash in lines
        if v <= top
    ]
    for words, value, color, dash in lines[:2]:
        shown = value <= top
        traces.append(
            dict(
                type="scatter",
                x=[None],
                y=[None],
                mode="lines",
                name=f"{words} {value:,} tokens" + ("" if shown else " (beyond the axis)"),
                line=dict(color=color, dash=dash, width=2),
                hoverinfo="skip",
            )
        )
    drawn = [(words, v) for words, v, _, _ in lines[:2] if v <= top]
    if len(drawn) == 2 and abs(drawn[0][1] - drawn[1][1]) < top / 100:  # one line to the eye
        (_, a), (_, b) = drawn
        other = "row" if plan.manager == "v2" else "max_seq_len"
        text = (
            f"pool and {other} both {a:,} tokens"
            if a == b
            else f"pool {plan.capacity_tokens:,} and {other} {second[1]:,}: {abs(a - b):,} tokens apart"
        )
        side = _beside(max(a, b) / top, text, 0)
        annotations.append(
            dict(
                x=max(a, b),
                xref="x",
                y=1.0,
                yref="paper",
                yanchor="bottom",
                xanchor=side["xanchor"],
                showarrow=False,
                font=dict(size=11, color="#444"),
                text=text,
            )
        )
    now = plan.ranges.get(plan.current_policy, ())
    bad = [s for s in now if s.verdict in ("crash", "stall")]
    rejected = any(s.verdict == "reject" for s in now)
    subtitle = (
        "current code: " + "; ".join(f"{s.low:,}-{s.high:,} {s.verdict}" for s in bad)
        if bad
        else f"current code: every context up to {top:,} finishes"
        + (" or is rejected" if rejected else "")
    )
    if plan.manager == "v1":
        subtitle = f"V1 manager, {subtitle}"
    axes = {}
    if not plan.blocks:
        subtitle = "no rank can build a KV pool: nothing starts under any policy"
        # no axes to read: the figure says why it is empty, in the verdict's colour
        axes = dict(visible=False)
        annotations.append(
            dict(
                x=0.5,
                y=0.5,
                xref="paper",
                yref="paper",
                showarrow=False,
                font=dict(size=13, color=OUTCOME_COLORS["crash"]),
                text="Nothing to draw: no rank can build a KV pool,<br>so no context length runs "
                "under any policy.<br>The per-rank figure shows what takes the memory.",
            )
        )
    elif not plan.starts:
        subtitle = (
            "merged code raises at construction (state slots), so nothing runs; the bands "
            "are for the pool PR #17261's clamp (a proposal) would leave"
        )
    layout = base_layout(
        titled(title, f"{d.model.name}: what each context length meets"),
        subtitle,
        barmode="overlay",
        height=400,
        shapes=shapes,
        annotations=annotations,
        bargap=0.35,
        xaxis=dict(
            title=dict(text="context length (prompt tokens)"),
            range=[0, top * 1.02],
            tickformat=",",
            **axes,
        ),
        yaxis=dict(
            title=None, categoryorder="array", categoryarray=names[::-1], autorange=True, **axes
        ),
        # at the figure's foot, under the axis title however many lines the subtitle takes
        legend=dict(
            orientation="h", yref="container", yanchor="bottom", y=0, x=0, font=dict(size=11)
        ),
    )
    layout["margin"] = {**layout["margin"], "l": 160, "b": 130}
    return {"data": traces, "layout": layout}


plan_ranges_figure = as_figure(plan_ranges_spec)

#: The per-rank figure's legend: an entry's text in one of two columns (two fit the 540 px
#: between the panel's margins, a symbol each) and its rows' height; the rank labels' room under
#: the bars (rotated past 8 ranks), and the bars' own height, in px.
LEGEND_TEXT_PX, LEGEND_ROW_PX, TICKS_PX, BARS_PX = 220, 19, {True: 60, False: 30}, 280
#: The GPU's memory, a line across the per-rank bars (neither an outcome nor the pool or row).
GPU_COLOR = "#222222"


def plan_ranks_spec(plan, *, title: str | None = None) -> dict:
    """Every rank's memory in a deployment's plan (``plan``: a ``DeploymentPlan``): the bars of
    :func:`~kvlab.notebook.viz.ranks.rank_budget_spec`, a dashed line at the GPU's memory (a bar
    above it does not fit), a subtitle that gives what the bars draw (each rank's own KV memory
    before the MIN: the pool, the share the MIN took and a hybrid's state slots; one rank's
    alone; what takes the GPU where there is no pool) and the legend at the figure's foot,
    under the rank labels however many lines it takes. Traces: as rank_budget_spec's, 8."""
    plan = check_instance("plan", plan, DeploymentPlan)
    ranks = plan.rank_plans()
    n = len(ranks)
    traces = rank_budget_spec(ranks, state_bytes=plan.state_bytes)["data"]
    part = {key: trace["y"] for (key, _, _), trace in zip(BUDGET_PARTS, traces)}
    own = [sum(values) for values in zip(part["KV pool"], part["lost to MIN"], part["state slots"])]
    gpu = plan.deployment.gpu_gib
    blocks = (
        f"{counted(plan.blocks, 'block')} ({gib_text(plan.blocks * plan.bytes_per_block / GIB)})"
    )
    # where merged code raises at construction, the bars are the pool PR #17261's clamp would leave
    proposal = "" if plan.starts else " under PR #17261's clamp (a proposal)"
    for (key, _, _), trace in zip(BUDGET_PARTS, traces):
        if key == "KV pool" and proposal:  # the legend says so too, not only the subtitle
            trace["name"] = trace["name"].replace("KV pool", "KV pool under PR #17261's clamp", 1)
    if not plan.blocks:
        peaks = [r.budget.peak_memory_bytes / GIB for r in ranks]
        subtitle = (
            f"no KV pool: weights, workspace, activations and non-torch memory take "
            f"{'' if min(peaks) == max(peaks) else 'up to '}{max(peaks):,.1f} GiB of the "
            f"GPU's {gpu:,.1f} GiB"
            if max(peaks) > gpu
            else "no KV pool: what the ranks leave holds less than one page of "
            f"{plan.bytes_per_block / 2**20:,.2f} MiB"
        )
    elif n == 1:
        subtitle = f"one rank, no MIN all-reduce: its KV pool{proposal} is {blocks}"
    else:
        low, high = f"{min(own):,.1f}", f"{max(own):,.1f}"
        what = "quota" if plan.manager == "v2" else "pool"
        subtitle = (
            f"each rank's own KV {what} {low if low == high else f'{low}-{high}'} GiB "
            f"before the MIN; after it every rank's pool{proposal} is {blocks}"
        )
    tallest = max([sum(column) for column in zip(*part.values())] + [gpu])
    # two columns of fixed width where every entry fits one, else one: rows known in advance
    names = [t["name"] for t in traces if t["showlegend"]]
    columns = 2 if CHAR_PX * max(map(len, names), default=0) <= LEGEND_TEXT_PX else 1
    rows = -(-len(names) // columns)
    bottom = TICKS_PX[n > 8] + LEGEND_ROW_PX * rows + 16
    layout = base_layout(
        titled(title, f"Per-rank memory ({counted(n, 'rank')})"),
        subtitle,
        barmode="stack",
        bargap=0.15,
        shapes=[
            dict(
                type="line",
                xref="paper",
                x0=0,
                x1=1,
                yref="y",
                y0=gpu,
                y1=gpu,
                line=dict(color=GPU_COLOR, dash="dash", width=2),
            )
        ],
        annotations=[
            dict(
                xref="paper",
                x=1,
                xanchor="right",
                yref="y",
                y=gpu,
                yanchor="bottom",
                showarrow=False,
                text=f"the GPU's memory: {gpu:,.1f} GiB",
                font=dict(size=11, color=GPU_COLOR),
                bgcolor="rgba(255,255,255,0.9)",
            )
        ],
        xaxis=rank_axis(traces[0]["x"]),
        yaxis=dict(title=dict(text="GiB per GPU"), range=[0, tallest * 1.08]),
        legend=dict(
            orientation="h",
            yref="container",
            yanchor="bottom",
            y=0,
            x=0,
            entrywidth=LEGEND_TEXT_PX * (3 - columns),
            entrywidthmode="pixels",
            font=dict(size=11),
        ),
    )
    layout["margin"] = {**layout["margin"], "b": bottom}
    layout["height"] = BARS_PX + layout["margin"]["t"] + bottom
    return {"data": traces, "layout": layout}


plan_ranks_figure = as_figure(plan_ranks_spec)
