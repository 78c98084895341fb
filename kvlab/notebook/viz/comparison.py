"""Policies side by side (notebook 04): the phase diagram of one request alone over pool sizes
and context lengths, bars of goodput, waiting time and preemptions, and a replayed trace's
requests served over time."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from kvlab.analysis.presets import ENGINE_OUTCOMES
from kvlab.core.memory import MIB, readout_mib
from kvlab.notebook.viz.style import (
    FIGURE_WIDTH,
    NEUTRAL_COLOR,
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    as_figure,
    base_layout,
    code_heatmap,
    heading,
    hover,
    legend_below,
    legend_entry,
    note,
    on_panel,
    outcome_color,
    panel_axes,
    panel_domains,
    run_outcome,
    titled,
)
from kvlab.run.simulation import SimulationResult

#: The seed's point on the phase diagram: a white star.
_STAR = dict(symbol="star", size=14, color="white", line=dict(color="black", width=1.5))


def _log2_axis(values: Sequence[float], most: float = math.inf) -> dict:
    """An axis of log2 ``values`` ticked at the whole powers of two, every other past ``most``."""
    ticks = list(range(math.ceil(min(values, default=0)), math.floor(max(values, default=0)) + 1))
    ticks = ticks[::2] if len(ticks) > most else ticks
    return dict(tickvals=ticks, ticktext=[f"{2**t:,}" for t in ticks], showgrid=False)


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
    """``kvlab.analysis.phase.phase_diagram`` as a heatmap per regime (pool MiB by context),
    ``mark = (pool_blocks, context)`` starred. Traces: a heatmap and a star a regime, a legend."""
    pools, contexts = [int(p) for p in pool_blocks], [int(c) for c in context_lens]
    mib = [p * bytes_per_block / MIB for p in pools]
    xs, ys = [math.log2(m) for m in mib], [math.log2(c) for c in contexts]
    colors = [OUTCOME_COLORS[v] for v in ENGINE_OUTCOMES]
    star = (
        ([math.log2(mark[0] * bytes_per_block / MIB)], [math.log2(mark[1])]) if mark else ([], [])
    )
    x_axis = dict(_log2_axis(xs, 8), title=dict(text="KV pool (MiB)"))
    data, annotations = [], []
    axes: dict[str, dict] = {}
    domains = panel_domains([1] * max(len(diagram), 1), 0.04)
    for k, (regime, rows) in enumerate(diagram.items()):
        grid = [[int(v) for v in row] for row in rows]  # (pools, contexts)
        z = [[grid[i][j] for i in range(len(pools))] for j in range(len(contexts))]
        text = [
            [
                f"pool {readout_mib(mib[i])} MiB ({p:,} pages = {p * tokens_per_block:,} tokens)"
                f"<br>context {c:,}<br>{regime}: {OUTCOME_LABELS[ENGINE_OUTCOMES[z[j][i]]]}"
                for i, p in enumerate(pools)
            ]
            for j, c in enumerate(contexts)
        ]
        data.append(code_heatmap(z, text, colors, regime, x=xs, y=ys, **on_panel(k)))
        name = "the seed's point"
        point: dict[str, Any] = dict(
            type="scatter", x=star[0], y=star[1], mode="markers", name=name, marker=_STAR
        )
        point.update(showlegend=k == 0 and bool(mark), hovertemplate=f"{name}<extra></extra>")
        data.append(dict(point, **on_panel(k)))
        y_axis = dict(_log2_axis(ys), showticklabels=k == 0)
        axes |= panel_axes(k, dict(x_axis, domain=domains[k]), y_axis)
        counts = [sum(row.count(i) for row in grid) for i in range(len(ENGINE_OUTCOMES))]
        tally = ", ".join(f"{c:,} {v}" for v, c in zip(ENGINE_OUTCOMES, counts) if c)
        annotations.append(heading(f"<b>{regime}</b><br><sup>{tally}</sup>", sum(domains[k]) / 2))
    axes["yaxis"]["title"] = dict(text="context length (tokens)")
    data += [legend_entry(OUTCOME_LABELS[v], color) for v, color in zip(ENGINE_OUTCOMES, colors)]
    default = (
        f"{len(pools)} pools x {len(contexts)} contexts per regime (closed-form verdicts, "
        "kvlab.analysis.phase)"
    )
    layout = base_layout(
        titled(title, "Phase diagram: one request alone, every pool size and context length"),
        titled(subtitle, default, "subtitle"),
        height=470,
        width=max(FIGURE_WIDTH, 330 * max(len(diagram), 1)),
        annotations=annotations,
        legend=legend_below(-0.18),
        margin=dict(l=70, r=30, t=110, b=60),
        **axes,
    )
    return {"data": data, "layout": layout}


#: The panels of :func:`policy_bars_spec`: (column of ``outcome_rows``, axis title).
POLICY_METRICS = (
    ("goodput_tokens_per_step", "goodput (tokens / step)"),
    ("mean_wait_steps", "mean wait (steps)"),
    ("preemptions", "preemptions"),
)
#: The columns that average over the requests that started: their ticks name the unfinished.
MEAN_METRICS = ("mean_wait_steps",)


def policy_bars_spec(
    rows: Sequence[Mapping],
    *,
    metrics: Sequence[tuple] = POLICY_METRICS,
    title: str | None = None,
    subtitle: str | None = None,
) -> dict:
    """A bar per policy (``outcome_rows`` dicts) in each of the ``metrics`` panels, in its
    outcome's colour. Traces: a bar trace per metric, a legend entry per outcome."""
    policies = [r["policy"] for r in rows]
    outcomes = [r["outcome"] for r in rows]
    colors = [outcome_color(o) for o in outcomes]
    data, annotations = [], []
    axes: dict[str, dict] = {}
    domains = panel_domains([1] * len(metrics), 0.08)
    for k, (column, label) in enumerate(metrics):
        values = [r.get(column) for r in rows]
        values = [None if isinstance(v, float) and math.isnan(v) else v for v in values]
        text = [f"{v:.3g}" if isinstance(v, float) else "" if v is None else str(v) for v in values]
        hovers = [
            f"{p}: {label} {t or 'n/a'}<br>outcome: {OUTCOME_LABELS.get(o, o)}<br>finished "
            f"{r.get('finished')}, rejected {r.get('rejected')}, unfinished {r.get('unfinished')}"
            for p, o, t, r in zip(policies, outcomes, text, rows)
        ]
        bars = dict(type="bar", x=policies, y=values, name=label, marker=dict(color=colors))
        # constraintext "none": the values full size, not shrunk to their bars
        bars.update(text=text, textposition="outside", cliponaxis=False, constraintext="none")
        data.append(dict(bars, **hover(hovers), showlegend=False, **on_panel(k)))
        x = dict(domain=domains[k], tickangle=-90)  # upright names: none runs into its neighbour
        if column in MEAN_METRICS:
            x["tickvals"] = policies
            x["ticktext"] = [
                p + (f"<br>({r['unfinished']:,} unfinished)" if r.get("unfinished") else "")
                for p, r in zip(policies, rows)
            ]
        top = max([v for v in values if v is not None] + [0])
        axes |= panel_axes(k, x, dict(rangemode="tozero", range=[0, (top or 1) * 1.2]))
        # the unit on a line of its own: a panel's title stays within its panel
        name, _, unit = label.partition(" (")
        heading_text = f"<b>{name}</b>" + (f"<br>({unit}" if unit else "")
        annotations.append(heading(heading_text, sum(domains[k]) / 2))
    data += [
        legend_entry(OUTCOME_LABELS[o], OUTCOME_COLORS[o], show=o in outcomes)
        for o in ("crash", "stall", "reject", "ok")
    ]
    default = (
        "coloured by the engine's outcome; goodput = finished requests' tokens per pass; "
        "mean wait: arrival to first pass, over the requests that started"
    )
    layout = base_layout(
        titled(title, "Policies on one workload: goodput, waiting time, preemptions"),
        titled(subtitle, default, "subtitle"),
        height=560,
        annotations=annotations,
        barmode="group",
        legend=dict(orientation="h", yanchor="bottom", y=1.2, x=0),  # above: names take below
        margin=dict(l=60, r=30, t=170, b=150),
        **axes,
    )
    return {"data": data, "layout": layout}


#: Dash styles that tell apart policies sharing an outcome colour.
POLICY_DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


def served_over_time_spec(
    runs: Mapping[str, SimulationResult],
    seconds_per_iteration: float,
    *,
    max_points: int = 600,
    title: str | None = None,
    subtitle: str | None = None,
) -> dict:
    """Requests arrived, and finished per policy (``runs``: policy -> SimulationResult), against
    a replayed trace's minutes, an X where an engine stopped. Traces: arrivals, a line a policy."""
    arrivals = sorted(r.arrival_step for r in next(iter(runs.values())).requests.values())
    scale = seconds_per_iteration / 60.0
    end = max([arrivals[-1]] + [run.end_step for run in runs.values()])
    stride = max(1, len(arrivals) // max_points)
    arrived: dict[str, Any] = dict(type="scatter", mode="lines", name="arrived")
    arrived["line"] = dict(color=NEUTRAL_COLOR, width=1.5)
    arrived["x"] = [s * scale for s in arrivals[::stride]] + [end * scale]
    arrived["y"] = list(range(1, len(arrivals) + 1, stride)) + [len(arrivals)]
    arrived["hovertemplate"] = "minute %{x:.1f}: %{y} arrived<extra></extra>"
    data = [arrived]
    annotations: list[dict] = []
    for k, (policy, run) in enumerate(runs.items()):
        outcome = run_outcome(run)
        said, color = OUTCOME_LABELS.get(outcome, outcome), outcome_color(outcome)
        steps = run.trace.steps
        kept = list(steps[:: max(1, len(steps) // max_points)]) + list(steps[-1:])
        dash = POLICY_DASHES[k % len(POLICY_DASHES)]
        stop = [0] * (len(kept) - 1) + [14 if run.error is not None else 0]  # the X's size
        hovers = f"{policy}: minute %{{x:.1f}}, %{{y}} finished<extra></extra>"
        served: dict[str, Any] = dict(
            type="scatter", mode="lines+markers", name=f"{policy}: {said}"
        )
        served.update(line=dict(color=color, width=2.5, dash=dash), hovertemplate=hovers)
        served["marker"] = dict(symbol="x", size=stop, color=color)
        served.update(x=[s.step * scale for s in kept], y=[s.finished_total for s in kept])
        data.append(served)
        if run.error is not None:  # a stop a moment into an hour is a speck: say where, in words
            minute = run.end_step * scale
            arrow = dict(showarrow=True, arrowhead=2, ax=50, ay=-150 + 30 * len(annotations))
            text = f"{policy}: {said} at minute {minute:.1f}"
            y = steps[-1].finished_total if steps else 0
            stop_note = note(text, minute, y, color, bgcolor="rgba(255,255,255,0.9)", **arrow)
            annotations.append(dict(stop_note, xanchor="left"))
    # policies whose runs draw the same curve share one legend entry that names them all
    curves: dict[tuple, list] = {}
    for policy, trace in zip(runs, data[1:]):
        said = trace["name"].split(": ", 1)[1]
        curves.setdefault((said, tuple(trace["x"]), tuple(trace["y"])), []).append((policy, trace))
    for (said, _, _), same in curves.items():
        if len(same) > 1:
            names = ", ".join(p for p, _ in same)
            same[0][1]["name"] = f"{names}: {said} (one curve, the runs coincide)"
            for _, trace in same[1:]:
                trace["showlegend"] = False
    default = (
        f"one scheduler iteration = {seconds_per_iteration * 1000:g} ms; "
        "X: the engine stopped there"
    )
    layout = base_layout(
        titled(title, "A replayed trace: requests served over time"),
        titled(subtitle, default, "subtitle"),
        height=420,
        xaxis=dict(title="minutes since the trace's first request", rangemode="tozero"),
        yaxis=dict(title="requests", rangemode="tozero"),
        legend=legend_below(-0.22),
        margin=dict(l=70, r=30, t=80, b=110),
        annotations=annotations,
    )
    return {"data": data, "layout": layout}


phase_diagram_figure = as_figure(phase_diagram_spec)
policy_bars_figure = as_figure(policy_bars_spec)
served_over_time_figure = as_figure(served_over_time_spec)
