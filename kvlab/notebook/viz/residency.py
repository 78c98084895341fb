"""Recurrent-state residency (notebook 05): the review findings of PR #17261, bug beside fix;
what a quota goes to under merged residency and under the clamp; what each answer would serve.

Merged TensorRT-LLM raises when the recurrent-state slots do not fit; PR #17261's clamp (closed
without merging) and PR #18985's feasible max_batch_size default (open) are proposals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvlab.case_studies import FindingRun
from kvlab.core.checks import check_instance, check_items
from kvlab.core.memory import GIB
from kvlab.notebook.viz.style import (
    AXIS_STYLE,
    OUTCOME_COLORS,
    as_figure,
    base_layout,
    format_bytes,
    thin_label,
    titled,
    wrap_words,
)

#: Bug and fix bars of :func:`review_findings_spec`.
BUG_FIX_COLORS = {"bug": OUTCOME_COLORS["crash"], "fix": OUTCOME_COLORS["ok"]}


#: What each review finding's bug does, as its labels say it: finding 1's ranks build, raise
#: nothing and stall nothing, they disagree (``FindingRun.outcome`` files that under "stall");
#: 2 raises StateSlotsExhausted (a RuntimeError, not the ValueError of a "crash" elsewhere); 3's
#: stall detector fires.
def review_findings_spec(runs: Sequence, *, title: str | None = None) -> dict:
    """One panel per review finding of PR #17261 (a proposal, closed without merging), its
    metrics as grouped bars, bug beside fix. ``runs``: ``kvlab.case_studies.FindingRun`` objects (each
    finding with bug=True and bug=False); each panel's heading says what the bug did
    (``FindingRun.what``). Traces: two bar traces (bug, fix) per finding present."""
    runs = [
        check_instance(f"runs[{i}]", run, FindingRun)
        for i, run in enumerate(check_items("runs", runs, "FindingRun objects"))
    ]
    findings = sorted({r.finding for r in runs})
    n = max(len(findings), 1)
    gap = 0.12  # room for the next panel's tick labels: no heading runs into them
    # each panel as wide as its metrics need: finding 1's four beside the others' two
    counts = [max([len(r.metrics) for r in runs if r.finding == f] + [1]) for f in findings]
    unit = (1 - gap * (n - 1)) / max(sum(counts), 1)
    data, axes, annotations = [], {}, []
    lo = 0.0
    for k, finding in enumerate(findings):
        suffix = "" if k == 0 else str(k + 1)
        width = unit * counts[k]
        mine = sorted((r for r in runs if r.finding == finding), key=lambda r: not r.bug)
        top = max([1] + [v for r in mine for _, v in r.metrics if v is not None])
        for run in mine:
            labels = [m[0] for m in run.metrics]
            values = [m[1] for m in run.metrics]
            hover = [
                f"finding {finding}, {run.label}: {lab} = "
                f"{'None (unbounded)' if v is None else v}<br>"
                f"{run.what}"
                for lab, v in zip(labels, values)
            ]
            # a cap of None (no bound) is a hatched bar to the top, labelled, never a bar of 0
            data.append(
                dict(
                    type="bar",
                    x=labels,
                    y=[top if v is None else v for v in values],
                    name=run.label,
                    textposition="outside",
                    cliponaxis=False,
                    text=["None: unbounded" if v is None else str(v) for v in values],
                    constraintext="none",  # whole above its narrow bar, not shrunk to its width
                    legendgroup=run.label,
                    showlegend=k == 0,
                    marker=dict(
                        color=BUG_FIX_COLORS[run.label],
                        pattern=dict(
                            shape=["/" if v is None else "" for v in values],
                            fillmode="overlay",
                            fgcolor="white",
                        ),
                    ),
                    hovertext=hover,
                    hovertemplate="%{hovertext}<extra></extra>",
                    xaxis=f"x{suffix}",
                    yaxis=f"y{suffix}",
                )
            )
        # the metrics' names level, broken between words: rotated, they ran into each other
        names = [m[0] for m in mine[0].metrics] if mine else []
        axes[f"xaxis{suffix}"] = dict(
            AXIS_STYLE,
            domain=[lo, lo + width],
            anchor=f"y{suffix}",
            tickangle=0,
            tickvals=names,
            ticktext=["<br>".join(wrap_words(m, 7)) for m in names],
        )
        axes[f"yaxis{suffix}"] = dict(
            AXIS_STYLE, anchor=f"x{suffix}", rangemode="tozero", range=[0, (top or 1) * 1.25]
        )
        bug = next((r for r in mine if r.bug), None)  # what the bug did, under the heading
        heading = "<br>".join(
            [f"<b>finding {finding}</b>"] + (wrap_words(f"bug: {bug.what}", 18) if bug else [])
        )
        annotations.append(
            dict(
                text=heading,
                x=lo + width / 2,
                xref="paper",
                y=1.0,
                yref="paper",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=12),
            )
        )
        lo += width + gap
    layout = base_layout(
        titled(title, "The review findings of PR #17261's clamp (a proposal): bug vs fix"),
        "1: caps and first chunks admitted per rank (hatched: None, unbounded); "
        "2: disagg inits admitted in one pass; 3: B's chunks scheduled vs stalled passes",
        height=480,
        annotations=annotations,
        barmode="group",
        legend=dict(orientation="h", yref="container", yanchor="bottom", y=0, x=0),
        margin=dict(l=60, r=30, t=150, b=110),
        **axes,
    )
    return {"data": data, "layout": layout}


review_findings_figure = as_figure(review_findings_spec)

#: The parts of a quota in :func:`residency_stack_spec`, bottom to top.
RESIDENCY_PARTS = (
    ("resident", "resident state slots", "#332288"),
    ("dummies", "dummy slots (CUDA-graph padding)", "#88CCEE"),
    ("pages", "attention pages", OUTCOME_COLORS["ok"]),
    ("unused", "unused", "#EEEEEE"),
)


def residency_stack_spec(
    split: Mapping, quota_bytes: int, *, title: str | None = None, subtitle: str = ""
) -> dict:
    """Stacked bars (GiB) of what the quota goes to under merged residency and under PR #17261's
    clamp (a proposal): resident slots, dummy slots, attention pages, unused; the quota as a
    dashed line. Under each bar, its parts with their sizes; a part too thin to see says so in
    its legend entry (:func:`~kvlab.notebook.viz.style.thin_label`); a part of zero bytes is
    neither drawn nor listed, nor in the legend when both bars lack it. Merged code that raises builds nothing: its bar is what it would
    need, and says so. ``split``: ``kvlab.analysis.mamba_residency.residency_bytes(plan)``.
    Traces: always 4 bars."""
    gib = GIB
    builds = split["raw_fits"]
    raw_need = sum(split["raw"][k] for k in ("resident", "dummies", "pages"))
    # merged code that raises allocates nothing: its bar is what it would need
    clamp_builds = split.get("clamp_fits", True)
    names = [
        "merged" if builds else f"merged: needs {format_bytes(raw_need)}, does not build",
        "PR #17261 clamp (proposal)",
    ]
    bars = [split["raw"], split["clamped"]]
    x = []  # each bar's name over its parts, top of the stack first, as the bar shows them
    for k, (name, parts) in enumerate(zip(names, bars)):
        listed = [
            f"{label} {format_bytes(parts[key])}"
            for key, label, _ in reversed(RESIDENCY_PARTS)
            if parts[key]
        ]
        if k == 0 and not builds:
            listed = ["it would need:"] + listed
        if k == 1 and not clamp_builds:
            listed = ["no sequence fits: it raises too", "and builds nothing"]
        x.append(
            f"<b>{name}</b><br>"
            + "<br>".join(f'<span style="font-size:11px">{line}</span>' for line in listed)
        )
    data = []
    tallest = max(sum(parts[key] for key, _, _ in RESIDENCY_PARTS) for parts in bars)
    for key, label, color in RESIDENCY_PARTS:
        sizes = [parts[key] for parts in bars]
        hover = [f"{name}: {label} {format_bytes(b)}" for name, b in zip(names, sizes)]
        data.append(
            dict(
                type="bar",
                x=x,
                y=[b / gib if b else None for b in sizes],
                name=thin_label(label, sizes, tallest, format_bytes),
                showlegend=any(sizes),
                marker=dict(color=color),
                hovertext=hover,
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    q = quota_bytes / gib
    raw_total = raw_need / gib
    shapes = [
        dict(
            type="line",
            xref="paper",
            x0=0,
            x1=1,
            yref="y",
            y0=q,
            y1=q,
            line=dict(color=OUTCOME_COLORS["crash"], dash="dash", width=2),
        )
    ]
    annotations = [
        dict(
            xref="paper",
            x=1,
            y=q,
            yref="y",
            xanchor="right",
            yanchor="bottom",
            showarrow=False,
            text=f"quota {q:.2f} GiB",
            font=dict(color=OUTCOME_COLORS["crash"], size=12),
        )
    ]
    layout = base_layout(
        titled(title, "Recurrent-state slots vs attention pages vs the quota"),
        subtitle,
        barmode="stack",
        height=500,
        bargap=0.35,
        shapes=shapes,
        annotations=annotations,
        xaxis=dict(type="category", tickangle=0),
        yaxis=dict(title=dict(text="GiB"), range=[0, max(q, raw_total) * 1.12]),
        legend=dict(
            orientation="h", yref="container", yanchor="bottom", y=0, x=0, font=dict(size=11)
        ),
        margin=dict(l=70, r=30, t=80, b=150),
    )
    return {"data": data, "layout": layout}


residency_stack_figure = as_figure(residency_stack_spec)

#: Bars of :func:`residency_proposals_spec`: served at once, and queued.
PROPOSAL_PARTS = (
    ("resident", "served at once (a state slot each)", "#332288"),
    ("waiting", "waiting in the queue", "#BBBBBB"),
)


def residency_proposals_spec(
    rows: Sequence[Mapping], *, title: str | None = None, subtitle: str = ""
) -> dict:
    """One stacked bar per answer (``kvlab.analysis.mamba_residency.proposal_rows``): of the concurrent requests,
    how many are served at once and how many wait; an answer that raises at construction has
    no bar and says so. Traces: always 2 bars (served, waiting)."""
    import re

    status = [re.sub(r", PR #\d+", "", r["status"]) for r in rows]  # the label names the PR
    x = [
        f"<b>{r['label']}</b><br><i>{st}</i><br>max_batch_size {r['max_batch_size']:,}"
        for r, st in zip(rows, status)
    ]
    data = []
    for key, label, color in PROPOSAL_PARTS:
        values = [r[key] for r in rows]
        hover = [f"{r['label']} ({r['status']}): {label} {v}" for r, v in zip(rows, values)]
        data.append(
            dict(
                type="bar",
                x=x,
                y=values,
                name=label,
                marker=dict(color=color),
                text=[str(v) if v else "" for v in values],
                textposition="inside",
                insidetextanchor="middle",
                hovertext=hover,
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    top = max([r["resident"] + r["waiting"] for r in rows] + [1])
    annotations = [
        dict(
            x=xi,
            y=0,
            xref="x",
            yref="y",
            yanchor="bottom",
            showarrow=False,
            text="ValueError at<br>construction:<br>nothing served",
            font=dict(color=OUTCOME_COLORS["crash"], size=12),
        )
        for xi, r in zip(x, rows)
        if r["outcome"] == "crash"
    ]
    layout = base_layout(
        titled(title, "Merged code raises; what each proposal would serve"),
        subtitle,
        barmode="stack",
        height=480,
        bargap=0.3,
        annotations=annotations,
        xaxis=dict(type="category", tickangle=0, tickfont=dict(size=11)),
        yaxis=dict(title=dict(text="concurrent requests"), range=[0, top * 1.1]),
        legend=dict(
            orientation="h",
            yanchor="bottom",
            y=1.0,
            x=1,
            xanchor="right",
            traceorder="normal",
            font=dict(size=11),
        ),
        margin=dict(l=70, r=30, t=110, b=90),
    )
    return {"data": data, "layout": layout}


residency_proposals_figure = as_figure(residency_proposals_spec)
