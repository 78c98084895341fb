"""Recurrent-state residency (notebook 05): the review findings of PR #17261 (bug beside fix),
what a quota goes to under merged residency and under the clamp, and what each answer would
serve. Merged TensorRT-LLM raises when the slots do not fit; PR #17261's clamp (closed without
merging) and PR #18985's feasible max_batch_size default (open) are proposals."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from kvlab.case_studies import FindingRun
from kvlab.core.checks import check_instance, check_items
from kvlab.core.memory import GIB
from kvlab.notebook.viz.style import (
    OUTCOME_COLORS,
    across,
    as_figure,
    bar,
    base_layout,
    end_note,
    foot_legend,
    format_bytes,
    heading,
    note,
    on_panel,
    panel_axes,
    panel_domains,
    thin_label,
    titled,
    wrap_words,
)

#: Bug and fix bars of :func:`review_findings_spec`.
BUG_FIX_COLORS = {"bug": OUTCOME_COLORS["crash"], "fix": OUTCOME_COLORS["ok"]}


def review_findings_spec(runs: Sequence, *, title: str | None = None) -> dict:
    """A panel per review finding of PR #17261 (FindingRun objects), bug beside fix, headed by
    what the bug did; a cap of None is a hatched bar to the top."""
    runs = [
        check_instance(f"runs[{i}]", run, FindingRun)
        for i, run in enumerate(check_items("runs", runs, "FindingRun objects"))
    ]
    findings = sorted({r.finding for r in runs})
    # each panel as wide as its metrics need; gaps for the next panel's tick labels
    counts = [max([len(r.metrics) for r in runs if r.finding == f] + [1]) for f in findings]
    domains = panel_domains(counts, 0.12)
    data, annotations = [], []
    axes: dict[str, dict] = {}
    for k, finding in enumerate(findings):
        mine = sorted((r for r in runs if r.finding == finding), key=lambda r: not r.bug)
        top = max([1] + [v for r in mine for _, v in r.metrics if v is not None])
        for run in mine:
            labels, values = [m[0] for m in run.metrics], [m[1] for m in run.metrics]
            hovers = [
                f"finding {finding}, {run.label}: {lab} = "
                f"{'None (unbounded)' if v is None else v}<br>{run.what}"
                for lab, v in zip(labels, values)
            ]
            hatch = dict(shape=["/" if v is None else "" for v in values], fillmode="overlay")
            marker = dict(color=BUG_FIX_COLORS[run.label], pattern=dict(hatch, fgcolor="white"))
            heights = [top if v is None else v for v in values]
            bars = bar(labels, heights, run.label, None, hovers, **on_panel(k))
            text = ["None: unbounded" if v is None else str(v) for v in values]
            # constraintext "none": whole above its narrow bar
            bars.update(text=text, textposition="outside", cliponaxis=False, constraintext="none")
            data.append(dict(bars, marker=marker, legendgroup=run.label, showlegend=k == 0))
        # the metrics' names level, broken between words: rotated, they ran into each other
        names = [m[0] for m in mine[0].metrics] if mine else []
        ticktext = ["<br>".join(wrap_words(m, 7)) for m in names]
        x = dict(domain=domains[k], tickangle=0, tickvals=names, ticktext=ticktext)
        axes |= panel_axes(k, x, dict(rangemode="tozero", range=[0, (top or 1) * 1.25]))
        bug = next((r for r in mine if r.bug), None)
        lines = [f"<b>finding {finding}</b>"] + (wrap_words(f"bug: {bug.what}", 18) if bug else [])
        annotations.append(heading("<br>".join(lines), sum(domains[k]) / 2))
    layout = base_layout(
        titled(title, "The review findings of PR #17261's clamp (a proposal): bug vs fix"),
        "1: caps and first chunks admitted per rank (hatched: None, unbounded); "
        "2: disagg inits admitted in one pass; 3: B's chunks scheduled vs stalled passes",
        height=480,
        annotations=annotations,
        barmode="group",
        legend=foot_legend(),
        margin=dict(l=60, r=30, t=150, b=110),
        **axes,
    )
    return {"data": data, "layout": layout}


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
    """Stacked bars (GiB) of what the quota (dashed) goes to under merged residency and PR
    #17261's clamp, of ``residency_bytes(plan)``; merged code that raises shows its need."""
    builds = split["raw_fits"]
    raw_need = sum(split["raw"][k] for k in ("resident", "dummies", "pages"))
    merged = "merged" if builds else f"merged: needs {format_bytes(raw_need)}, does not build"
    names = [merged, "PR #17261 clamp (proposal)"]
    bars = [split["raw"], split["clamped"]]
    x = []  # each bar's name over its parts, top of the stack first
    for k, (name, parts) in enumerate(zip(names, bars)):
        listed = [
            f"{label} {format_bytes(parts[key])}"
            for key, label, _ in reversed(RESIDENCY_PARTS)
            if parts[key]
        ]
        if k == 0 and not builds:
            listed = ["it would need:"] + listed
        if k == 1 and not split.get("clamp_fits", True):
            listed = ["no sequence fits: it raises too", "and builds nothing"]
        small = [f'<span style="font-size:11px">{line}</span>' for line in listed]
        x.append("<br>".join([f"<b>{name}</b>"] + small))
    tallest = max(sum(parts[key] for key, _, _ in RESIDENCY_PARTS) for parts in bars)
    data = []
    for key, label, color in RESIDENCY_PARTS:
        sizes = [parts[key] for parts in bars]
        hovers = [f"{n}: {label} {format_bytes(b)}" for n, b in zip(names, sizes)]
        gib = [b / GIB if b else None for b in sizes]
        name = thin_label(label, sizes, tallest, format_bytes)
        data.append(bar(x, gib, name, color, hovers, showlegend=any(sizes)))
    q, crash = quota_bytes / GIB, OUTCOME_COLORS["crash"]
    layout = base_layout(
        titled(title, "Recurrent-state slots vs attention pages vs the quota"),
        subtitle,
        barmode="stack",
        height=500,
        bargap=0.35,
        shapes=[across(q, crash, "dash")],
        annotations=[end_note(f"quota {q:.2f} GiB", q, crash)],
        xaxis=dict(type="category", tickangle=0),
        yaxis=dict(title=dict(text="GiB"), range=[0, max(q, raw_need / GIB) * 1.12]),
        legend=foot_legend(font=dict(size=11)),
        margin=dict(l=70, r=30, t=80, b=150),
    )
    return {"data": data, "layout": layout}


#: Bars of :func:`residency_proposals_spec`: served at once, and queued.
PROPOSAL_PARTS = (
    ("resident", "served at once (a state slot each)", "#332288"),
    ("waiting", "waiting in the queue", "#BBBBBB"),
)


def residency_proposals_spec(
    rows: Sequence[Mapping], *, title: str | None = None, subtitle: str = ""
) -> dict:
    """A stacked bar per answer (``kvlab.analysis.mamba_residency.proposal_rows``): requests
    served at once and waiting; one that raises at construction says so. Traces: 2 bars."""
    status = [re.sub(r", PR #\d+", "", r["status"]) for r in rows]  # the label names the PR
    x = [
        f"<b>{r['label']}</b><br><i>{st}</i><br>max_batch_size {r['max_batch_size']:,}"
        for r, st in zip(rows, status)
    ]
    data = []
    for key, label, color in PROPOSAL_PARTS:
        values = [r[key] for r in rows]
        hovers = [f"{r['label']} ({r['status']}): {label} {v}" for r, v in zip(rows, values)]
        text = dict(text=[str(v) if v else "" for v in values], textposition="inside")
        data.append(bar(x, values, label, color, hovers, **text, insidetextanchor="middle"))
    top = max([r["resident"] + r["waiting"] for r in rows] + [1])
    crashed = "ValueError at<br>construction:<br>nothing served"
    annotations = [
        note(crashed, xi, 0, OUTCOME_COLORS["crash"], yanchor="bottom")
        for xi, r in zip(x, rows)
        if r["outcome"] == "crash"
    ]
    legend = dict(orientation="h", yanchor="bottom", y=1.0, x=1, xanchor="right")
    layout = base_layout(
        titled(title, "Merged code raises; what each proposal would serve"),
        subtitle,
        barmode="stack",
        height=480,
        bargap=0.3,
        annotations=annotations,
        xaxis=dict(type="category", tickangle=0, tickfont=dict(size=11)),
        yaxis=dict(title=dict(text="concurrent requests"), range=[0, top * 1.1]),
        legend=dict(legend, traceorder="normal", font=dict(size=11)),
        margin=dict(l=70, r=30, t=110, b=90),
    )
    return {"data": data, "layout": layout}


review_findings_figure = as_figure(review_findings_spec)
residency_stack_figure = as_figure(residency_stack_spec)
residency_proposals_figure = as_figure(residency_proposals_spec)
