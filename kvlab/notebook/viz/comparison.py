"""Policies side by side (notebook 04): the phase diagram of one request alone over pool sizes
and context lengths, bars of goodput, waiting time and preemptions, and a replayed trace's
requests served over time."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from kvlab.analysis.presets import ENGINE_OUTCOMES
from kvlab.core.memory import MIB, readout_mib
from kvlab.notebook.viz.style import (
    AXIS_STYLE,
    FIGURE_WIDTH,
    NEUTRAL_COLOR,
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    as_figure,
    base_layout,
    outcome_color,
    run_outcome,
    titled,
)

# --- the phase diagram: pool size x context length, one subplot per regime ----------------------


def phase_diagram_spec(
    pool_blocks: Sequence[int],
    context_lens: Sequence[int],
    diagram: Mapping[str, Sequence[Sequence[int]]],
    *,
    bytes_per_block: int = 65536,
    tokens_per_block: int = 32,
    mark: tuple | None = None,
    title: str | None = None,
    subtitle: str | None = None,
) -> dict:
    """``kvlab.analysis.phase.phase_diagram`` as one heatmap per regime, side by side: x the pool (MiB,
    log2 ticks), y the context length (log2 ticks), each cell in its verdict's colour
    (:data:`OUTCOME_COLORS`; codes index :data:`ENGINE_OUTCOMES`). ``mark = (pool_blocks,
    context)`` puts a star on one point (the seed's) in every subplot. Traces: per regime a
    heatmap and a marker trace, then one legend entry per verdict."""
    pools = [int(p) for p in pool_blocks]
    contexts = [int(c) for c in context_lens]
    regimes = list(diagram)
    n = max(len(regimes), 1)
    gap = 0.04
    width = (1 - gap * (n - 1)) / n
    xs = [math.log2(p * bytes_per_block / MIB) for p in pools]
    ys = [math.log2(c) for c in contexts]
    colors = [OUTCOME_COLORS[v] for v in ENGINE_OUTCOMES]
    colorscale = []
    for i, color in enumerate(colors):
        colorscale += [[i / len(colors), color], [(i + 1) / len(colors), color]]
    data, axes, annotations = [], {}, []
    for k, regime in enumerate(regimes):
        grid = [[int(v) for v in row] for row in diagram[regime]]  # (pools, contexts)
        z = [[grid[i][j] for i in range(len(pools))] for j in range(len(contexts))]
        text = [
            [
                f"pool {readout_mib(pools[i] * bytes_per_block / MIB)} MiB ({pools[i]:,} pages = "
                f"{pools[i] * tokens_per_block:,} tokens)<br>context {contexts[j]:,}<br>"
                f"{regime}: {OUTCOME_LABELS[ENGINE_OUTCOMES[z[j][i]]]}"
                for i in range(len(pools))
            ]
            for j in range(len(contexts))
        ]
        suffix = "" if k == 0 else str(k + 1)
        data.append(
            dict(
                type="heatmap",
                x=xs,
                y=ys,
                z=z,
                text=text,
                colorscale=colorscale,
                zmin=-0.5,
                zmax=len(colors) - 0.5,
                showscale=False,
                name=regime,
                hovertemplate="%{text}<extra></extra>",
                xaxis=f"x{suffix}",
                yaxis=f"y{suffix}",
            )
        )
        mx, my = (
            ([math.log2(mark[0] * bytes_per_block / MIB)], [math.log2(mark[1])])
            if mark
            else ([], [])
        )
        data.append(
            dict(
                type="scatter",
                x=mx,
                y=my,
                mode="markers",
                name="the seed's point",
                showlegend=k == 0 and bool(mark),
                xaxis=f"x{suffix}",
                yaxis=f"y{suffix}",
                marker=dict(
                    symbol="star", size=14, color="white", line=dict(color="black", width=1.5)
                ),
                hovertemplate="the seed's point<extra></extra>",
            )
        )
        lo = k * (width + gap)
        xt = list(range(math.ceil(min(xs, default=0)), math.floor(max(xs, default=0)) + 1))
        yt = list(range(math.ceil(min(ys, default=0)), math.floor(max(ys, default=0)) + 1))
        axes[f"xaxis{suffix}"] = dict(
            AXIS_STYLE,
            domain=[lo, lo + width],
            anchor=f"y{suffix}",
            tickvals=xt[::2] if len(xt) > 8 else xt,
            ticktext=[f"{2**t:,}" for t in (xt[::2] if len(xt) > 8 else xt)],
            title=dict(text="KV pool (MiB)"),
            showgrid=False,
        )
        axes[f"yaxis{suffix}"] = dict(
            AXIS_STYLE,
            anchor=f"x{suffix}",
            tickvals=yt,
            ticktext=[f"{2**t:,}" for t in yt],
            showgrid=False,
            showticklabels=k == 0,
            **({"title": dict(text="context length (tokens)")} if k == 0 else {}),
        )
        counts = {v: sum(row.count(i) for row in grid) for i, v in enumerate(ENGINE_OUTCOMES)}
        annotations.append(
            dict(
                text=f"<b>{regime}</b><br><sup>"
                + ", ".join(f"{c:,} {v}" for v, c in counts.items() if c)
                + "</sup>",
                x=lo + width / 2,
                xref="paper",
                y=1.0,
                yref="paper",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=12),
            )
        )
    for verdict, color in zip(ENGINE_OUTCOMES, colors):
        data.append(
            dict(
                type="scatter",
                x=[None],
                y=[None],
                mode="markers",
                name=OUTCOME_LABELS[verdict],
                marker=dict(symbol="square", size=12, color=color),
                hoverinfo="skip",
            )
        )
    if title is None:
        title = "Phase diagram: one request alone, every pool size and context length"
    if subtitle is None:
        subtitle = f"{len(pools)} pools x {len(contexts)} contexts per regime (closed-form verdicts, kvlab.analysis.phase)"
    layout = base_layout(
        title,
        subtitle,
        height=470,
        width=max(FIGURE_WIDTH, 330 * n),
        annotations=annotations,
        legend=dict(orientation="h", yanchor="top", y=-0.18, x=0),
        margin=dict(l=70, r=30, t=110, b=60),
        **axes,
    )
    return {"data": data, "layout": layout}


phase_diagram_figure = as_figure(phase_diagram_spec)


# --- policies side by side: goodput, waiting time, preemptions ---------------------------------

#: The panels of :func:`policy_bars_spec`: (column of kvlab.analysis.compare.outcome_rows, axis title).
POLICY_METRICS = (
    ("goodput_tokens_per_step", "goodput (tokens / step)"),
    ("mean_wait_steps", "mean wait (steps)"),
    ("preemptions", "preemptions"),
)


#: The columns of :data:`POLICY_METRICS` that average over requests (not every request counts).
MEAN_METRICS = ("mean_wait_steps",)


def policy_bars_spec(
    rows: Sequence[Mapping],
    *,
    metrics: Sequence[tuple] = POLICY_METRICS,
    title: str | None = None,
    subtitle: str | None = None,
) -> dict:
    """One bar per policy in each of the ``metrics`` panels (side by side), coloured by the
    engine's outcome and labelled with it. ``rows`` are ``kvlab.analysis.compare.outcome_rows`` dicts.
    A mean over requests (:data:`MEAN_METRICS`) covers only the requests it applies to: under
    its bars the policies' names carry the runs' unfinished requests, so a crash that left most
    of them unserved does not read as the shortest wait. Traces: one bar trace per metric, then one legend entry per
    outcome (always)."""
    policies = [r["policy"] for r in rows]
    outcomes = [r["outcome"] for r in rows]
    n = len(metrics)
    gap = 0.08
    width = (1 - gap * (n - 1)) / n
    data, axes, annotations = [], {}, []
    for k, (column, label) in enumerate(metrics):
        suffix = "" if k == 0 else str(k + 1)
        values = [r.get(column) for r in rows]
        values = [
            None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in values
        ]
        text = [
            f"{v:.3g}" if isinstance(v, float) else ("" if v is None else str(v)) for v in values
        ]
        hover = [
            f"{p}: {label} {t or 'n/a'}<br>outcome: {OUTCOME_LABELS.get(o, o)}<br>"
            f"finished {r.get('finished')}, rejected {r.get('rejected')}, unfinished {r.get('unfinished')}"
            for p, o, t, r in zip(policies, outcomes, text, rows)
        ]
        data.append(
            dict(
                type="bar",
                x=policies,
                y=values,
                name=label,
                text=text,
                textposition="outside",
                cliponaxis=False,
                constraintext="none",  # full size, not shrunk to the bar
                marker=dict(color=[outcome_color(o) for o in outcomes]),
                hovertext=hover,
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=False,
                xaxis=f"x{suffix}",
                yaxis=f"y{suffix}",
            )
        )
        lo = k * (width + gap)
        axes[f"xaxis{suffix}"] = dict(
            AXIS_STYLE, domain=[lo, lo + width], anchor=f"y{suffix}", tickangle=-90
        )  # upright: no name runs into its neighbour
        if column in MEAN_METRICS:  # under the bar, upright like its name: the requests left out
            axes[f"xaxis{suffix}"].update(
                tickvals=policies,
                ticktext=[
                    p + (f"<br>({r['unfinished']:,} unfinished)" if r.get("unfinished") else "")
                    for p, r in zip(policies, rows)
                ],
            )
        top = max([v for v in values if v is not None] + [0])
        axes[f"yaxis{suffix}"] = dict(
            AXIS_STYLE, anchor=f"x{suffix}", rangemode="tozero", range=[0, (top or 1) * 1.2]
        )
        # the unit on a line of its own: a panel's title stays within its panel
        annotations.append(
            dict(
                text="<b>"
                + label.replace(" (", "</b><br>(", 1)
                + ("" if " (" in label else "</b>"),
                x=lo + width / 2,
                xref="paper",
                y=1.0,
                yref="paper",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=12),
            )
        )
    for outcome in ("crash", "stall", "reject", "ok"):
        data.append(
            dict(
                type="scatter",
                x=[None],
                y=[None],
                mode="markers",
                name=OUTCOME_LABELS[outcome],
                marker=dict(symbol="square", size=12, color=OUTCOME_COLORS[outcome]),
                hoverinfo="skip",
                showlegend=outcome in outcomes,
            )
        )
    if title is None:
        title = "Policies on one workload: goodput, waiting time, preemptions"
    if subtitle is None:
        subtitle = (
            "coloured by the engine's outcome; goodput = finished requests' tokens per "
            "pass; mean wait: arrival to first pass, over the requests that started"
        )
    # the legend above the panels: the upright policy names take the space below them
    layout = base_layout(
        title,
        subtitle,
        height=560,
        annotations=annotations,
        barmode="group",
        legend=dict(orientation="h", yanchor="bottom", y=1.2, x=0),
        margin=dict(l=60, r=30, t=170, b=150),
        **axes,
    )
    return {"data": data, "layout": layout}


policy_bars_figure = as_figure(policy_bars_spec)

#: Dash styles that tell apart policies sharing an outcome colour.
POLICY_DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


def served_over_time_spec(
    runs: Mapping[str, object],
    seconds_per_iteration: float,
    *,
    max_points: int = 600,
    title: str | None = None,
    subtitle: str | None = None,
) -> dict:
    """Requests arrived (grey) and finished, per policy, against the clock of a replayed trace
    (steps times ``seconds_per_iteration``, in minutes); each policy's line in its outcome's
    colour and ends where its engine did (an X where a crash or a stall stopped it). ``runs``:
    policy -> SimulationResult of one workload. Traces: arrivals, then one line per policy (policies
    whose lines coincide share one legend entry)."""
    first = next(iter(runs.values()))
    arrivals = sorted(r.arrival_step for r in first.requests.values())
    scale = seconds_per_iteration / 60.0
    end = max([arrivals[-1]] + [run.end_step for run in runs.values()])
    stride = max(1, len(arrivals) // max_points)
    data = [
        dict(
            type="scatter",
            mode="lines",
            name="arrived",
            line=dict(color=NEUTRAL_COLOR, width=1.5),
            x=[s * scale for s in arrivals[::stride]] + [end * scale],
            y=list(range(1, len(arrivals) + 1, stride)) + [len(arrivals)],
            hovertemplate="minute %{x:.1f}: %{y} arrived<extra></extra>",
        )
    ]
    for k, (policy, run) in enumerate(runs.items()):
        outcome = run_outcome(run)
        steps = run.trace.steps
        stride = max(1, len(steps) // max_points)
        kept = list(steps[::stride]) + list(steps[-1:])
        stopped = run.error is not None  # an X where the engine stopped
        data.append(
            dict(
                type="scatter",
                mode="lines+markers",
                name=f"{policy}: {OUTCOME_LABELS.get(outcome, outcome)}",
                line=dict(
                    color=outcome_color(outcome),
                    width=2.5,
                    dash=POLICY_DASHES[k % len(POLICY_DASHES)],
                ),
                marker=dict(
                    symbol="x",
                    size=[0] * (len(kept) - 1) + [14 if stopped else 0],
                    color=outcome_color(outcome),
                ),
                x=[s.step * scale for s in kept],
                y=[s.finished_total for s in kept],
                hovertemplate=f"{policy}: minute %{{x:.1f}}, %{{y}} finished<extra></extra>",
            )
        )
    # an engine that stopped a moment into an hour is a speck at the origin: say where, in words
    stops = [(policy, run) for policy, run in runs.items() if run.error is not None]
    annotations = [
        dict(
            x=run.end_step * scale,
            y=run.trace.steps[-1].finished_total if run.trace.steps else 0,
            xref="x",
            yref="y",
            showarrow=True,
            arrowhead=2,
            ax=50,
            ay=-150 + 30 * i,
            bgcolor="rgba(255,255,255,0.9)",
            text=f"{policy}: {OUTCOME_LABELS.get(run_outcome(run), run_outcome(run))} "
            f"at minute {run.end_step * scale:.1f}",
            font=dict(size=12, color=outcome_color(run_outcome(run))),
            xanchor="left",
        )
        for i, (policy, run) in enumerate(stops)
    ]
    # policies whose runs draw the same curve share one legend entry that names them all
    curves = {}
    for policy, line in zip(runs, data[1:]):
        curves.setdefault(
            (line["name"].split(": ", 1)[1], tuple(line["x"]), tuple(line["y"])), []
        ).append((policy, line))
    for (label, _, _), same in curves.items():
        if len(same) > 1:
            same[0][1]["name"] = (
                f"{', '.join(p for p, _ in same)}: {label} (one curve, the runs coincide)"
            )
            for _, line in same[1:]:
                line["showlegend"] = False
    layout = base_layout(
        titled(title, "A replayed trace: requests served over time"),
        titled(
            subtitle,
            f"one scheduler iteration = {seconds_per_iteration * 1000:g} ms; "
            "X: the engine stopped there",
            "subtitle",
        ),
        height=420,
        xaxis=dict(title="minutes since the trace's first request", rangemode="tozero"),
        yaxis=dict(title="requests", rangemode="tozero"),
        legend=dict(orientation="h", yanchor="top", y=-0.22, x=0),
        margin=dict(l=70, r=30, t=80, b=110),
        annotations=annotations,
    )
    return {"data": data, "layout": layout}


served_over_time_figure = as_figure(served_over_time_spec)
