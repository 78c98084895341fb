"""Preflight (notebook 06): what a lone request of each context length meets under each policy,
for a deployment's plan (:mod:`kvlab.analysis.deployment`)."""

from __future__ import annotations

from typing import Optional

from kvlab.analysis.deployment import CLAMP_PROPOSAL, DeploymentPlan
from kvlab.analysis.presets import ENGINE_OUTCOMES
from kvlab.core.checks import check_instance
from kvlab.notebook.viz.style import (OUTCOME_COLORS, OUTCOME_LABELS, POOL_COLOR, ROW_COLOR,
                                      as_figure, base_layout, titled)

#: The plan figure's short name for each TensorRT-LLM policy (kvlab.analysis.deployment).
PLAN_POLICY_NAMES = {"none/clamped": "current code", "none/configured": "one-line fix",
                     "capacity": "admission (PR #21720)", "v1": "current code (V1)",
                     CLAMP_PROPOSAL: "PR #17261's clamp"}


def plan_ranges_spec(plan, *, title: Optional[str] = None) -> dict:
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
                hover.append(f"{PLAN_POLICY_NAMES[policy]}: {s.low:,}-{s.high:,} tokens<br>"
                             f"{OUTCOME_LABELS[outcome]}")
                if s.high - s.low + 1 < top / 100:
                    ticks["x"].append((s.low + s.high) / 2)
                    ticks["y"].append(PLAN_POLICY_NAMES[policy])
                    ticks["color"].append(OUTCOME_COLORS[outcome])
                    ticks["text"].append(hover[-1])
                    # named with an arrow: a tick on a million-token axis is easy to miss
                    annotations.append(dict(
                        x=(s.low + s.high) / 2, y=PLAN_POLICY_NAMES[policy], xref="x", yref="y",
                        text=f"{OUTCOME_LABELS[outcome]}: {s.low:,}-{s.high:,} "
                             f"({s.high - s.low + 1:,} tokens)",
                        showarrow=True, arrowhead=2, arrowcolor=OUTCOME_COLORS[outcome], ax=-40,
                        ay=-24 - 16 * (len(annotations) % 2), xanchor="right",
                        font=dict(size=11, color=OUTCOME_COLORS[outcome]),
                        bgcolor="rgba(255,255,255,0.9)"))
        traces.append(dict(type="bar", orientation="h", x=xs, y=ys, base=bases,
                           name=OUTCOME_LABELS[outcome], marker=dict(color=OUTCOME_COLORS[outcome]),
                           hovertext=hover, hovertemplate="%{hovertext}<extra></extra>",
                           showlegend=bool(xs)))
    traces.append(dict(type="scatter", mode="markers", x=ticks["x"], y=ticks["y"],
                       marker=dict(symbol="line-ns", size=26, line=dict(width=4, color=ticks["color"])),
                       hovertext=ticks["text"], hovertemplate="%{hovertext}<extra></extra>",
                       name="narrow range", showlegend=False))
    # V1: the KV manager's max_seq_len (the configured one plus the overlap scheduler's token),
    # in the plan's own words: "clamped to" only when the pool clamped it
    second = (("row spans now", plan.width_current * tpb) if plan.manager == "v2" else
              ("max_seq_len clamped to", plan.clamped_max_seq_len) if plan.clamped else
              ("KV manager's max_seq_len (not clamped)", plan.clamped_max_seq_len))
    lines = [("pool holds", plan.capacity_tokens, POOL_COLOR, "dot"), (*second, ROW_COLOR, "dash")]
    if plan.width_fix is not None and plan.width_fix * tpb <= top and plan.width_fix != plan.width_current:
        lines.append(("row spans with the fix", plan.width_fix * tpb, ROW_COLOR, "dashdot"))
    shapes = [dict(type="line", xref="x", x0=v, x1=v, yref="paper", y0=0, y1=1,
                   line=dict(color=c, dash=dash, width=2)) for _, v, c, dash in lines if v <= top]
    for words, value, color, dash in lines[:2]:
        shown = value <= top
        traces.append(dict(type="scatter", x=[None], y=[None], mode="lines",
                           name=f"{words} {value:,} tokens" + ("" if shown else " (beyond the axis)"),
                           line=dict(color=color, dash=dash, width=2), hoverinfo="skip"))
    drawn = [(words, v) for words, v, _, _ in lines[:2] if v <= top]
    if len(drawn) == 2 and abs(drawn[0][1] - drawn[1][1]) < top / 100:  # one line to the eye
        (_, a), (_, b) = drawn
        other = "row" if plan.manager == "v2" else "max_seq_len"
        annotations.append(dict(
            x=max(a, b), xref="x", y=1.0, yref="paper", yanchor="bottom", xanchor="right",
            showarrow=False, font=dict(size=11, color="#444"),
            text=(f"pool and {other} both {a:,} tokens" if a == b else
                  f"pool {plan.capacity_tokens:,} and {other} {second[1]:,}: {abs(a - b):,} tokens apart")))
    now = plan.ranges.get(plan.current_policy, ())
    bad = [s for s in now if s.verdict in ("crash", "stall")]
    rejected = any(s.verdict == "reject" for s in now)
    subtitle = ("current code: " + "; ".join(f"{s.low:,}-{s.high:,} {s.verdict}" for s in bad)
                if bad else f"current code: every context up to {top:,} finishes"
                + (" or is rejected" if rejected else ""))
    if plan.manager == "v1":
        subtitle = f"V1 manager, {subtitle}"
    if not plan.blocks:
        subtitle = "no rank can build a KV pool: nothing starts under any policy"
    elif not plan.starts:
        subtitle = ("merged code raises at construction (state slots), so nothing runs; the bands "
                    "are for the pool PR #17261's clamp (a proposal) would leave")
    layout = base_layout(
        titled(title, f"{d.model.name}: what each context length meets"), subtitle, barmode="overlay",
        height=400, shapes=shapes, annotations=annotations, bargap=0.35,
        xaxis=dict(title=dict(text="context length (prompt tokens)"), range=[0, top * 1.02],
                   tickformat=","),
        yaxis=dict(title=None, categoryorder="array", categoryarray=names[::-1], autorange=True),
        # at the figure's foot, under the axis title however many lines the subtitle takes
        legend=dict(orientation="h", yref="container", yanchor="bottom", y=0, x=0, font=dict(size=11)))
    layout["margin"] = {**layout["margin"], "l": 160, "b": 130}
    return {"data": traces, "layout": layout}


plan_ranges_figure = as_figure(plan_ranges_spec)
