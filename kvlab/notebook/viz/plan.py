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
    across,
    as_figure,
    bar,
    base_layout,
    end_note,
    foot_legend,
    hover,
    legend_entry,
    note,
    titled,
    upright,
)

#: The plan figure's short name for each TensorRT-LLM policy.
PLAN_POLICY_NAMES = {
    "none/clamped": "current code",
    "none/configured": "one-line fix",
    "capacity": "admission (PR #21720)",
    "v1": "current code (V1)",
    CLAMP_PROPOSAL: "PR #17261's clamp",
}
#: The plot's width in px where the panel draws it (the narrowest), and an 11 px character's
#: width: what an annotation's side is chosen by.
PLOT_PX, CHAR_PX = 450, 5.5
#: The legend's words for a V1 plan's rejections (V1 has no admission control).
V1_REJECT_LABEL = "rejected at the request door"
_NO_POOL = (
    "Nothing to draw: no rank can build a KV pool,<br>so no context length runs under any "
    "policy.<br>The per-rank figure shows what takes the memory."
)


def _beside(fraction: float, text: str, gap: int) -> dict:
    """``ax`` and ``xanchor`` that keep ``text`` inside the plot beside a point ``fraction``
    along the x axis: left of it where it fits, else right, else centred."""
    need = gap + CHAR_PX * len(text)
    if fraction * PLOT_PX >= need:
        return dict(ax=-gap, xanchor="right")
    if (1 - fraction) * PLOT_PX >= need:
        return dict(ax=gap, xanchor="left")
    return dict(ax=0, xanchor="center")


def plan_ranges_spec(plan, *, title: str | None = None) -> dict:
    """What a lone request of each context length meets under each policy of a ``DeploymentPlan``,
    with the pool and the row (V1: max_seq_len) as lines. Traces: 4 bars, ticks, 2 lines."""
    d = check_instance("plan", plan, DeploymentPlan).deployment
    top, tpb = d.configured_max_seq_len, d.tokens_per_block
    labels = {**OUTCOME_LABELS, **({"reject": V1_REJECT_LABEL} if plan.manager == "v1" else {})}
    traces: list[dict] = []
    annotations: list[dict] = []
    ticks: dict[str, list] = dict(x=[], y=[], color=[], text=[])
    for outcome in ENGINE_OUTCOMES:
        color = OUTCOME_COLORS[outcome]
        ys, xs, bases, hovers = [], [], [], []
        for policy, segments in plan.ranges.items():
            name = PLAN_POLICY_NAMES[policy]
            for s in (s for s in segments if s.verdict == outcome):
                middle, size = (s.low + s.high) / 2, s.high - s.low + 1
                ys.append(name)
                xs.append(size)
                bases.append(s.low - 1)
                hovers.append(f"{name}: {s.low:,}-{s.high:,} tokens<br>{labels[outcome]}")
                if size >= top / 100:
                    continue
                for key, value in zip(ticks, (middle, name, color, hovers[-1])):
                    ticks[key].append(value)
                # a tick on a million-token axis is easy to miss: named, with an arrow
                text = f"{labels[outcome]}: {s.low:,}-{s.high:,} ({size:,} tokens)"
                # level with its bar (the note on the pool and row lines sits above the plot),
                # further ones above and below
                stagger = (0, -30, 30)[len(annotations) % 3]
                arrow = dict(showarrow=True, arrowhead=2, arrowcolor=color, ay=stagger)
                arrow.update(_beside(middle / top, text, 40), bgcolor="rgba(255,255,255,0.9)")
                annotations.append(note(text, middle, name, color, 11, **arrow))
        bars = bar(xs, ys, labels[outcome], color, hovers, orientation="h", base=bases)
        traces.append(dict(bars, showlegend=bool(xs)))
    tick = dict(symbol="line-ns", size=26, line=dict(width=4, color=ticks["color"]))
    narrow = dict(type="scatter", mode="markers", x=ticks["x"], y=ticks["y"], marker=tick)
    traces.append(dict(narrow, **hover(ticks["text"]), name="narrow range", showlegend=False))
    # V1: the KV manager's max_seq_len, "clamped to" only when the pool clamped it
    if plan.manager == "v2":
        second = ("row spans now", plan.width_current * tpb)
    elif plan.clamped:
        second = ("max_seq_len clamped to", plan.clamped_max_seq_len)
    else:
        second = ("KV manager's max_seq_len (not clamped)", plan.clamped_max_seq_len)
    lines = [("pool holds", plan.capacity_tokens, POOL_COLOR, "dot"), (*second, ROW_COLOR, "dash")]
    fix = plan.width_fix
    if fix is not None and fix * tpb <= top and fix != plan.width_current:
        lines.append(("row spans with the fix", fix * tpb, ROW_COLOR, "dashdot"))
    if not plan.blocks:  # no pool, no row: nothing to draw
        lines = []
    shapes = [upright(v, c, dash) for _, v, c, dash in lines if v <= top]
    for words, value, color, dash in lines[:2]:
        beyond = "" if value <= top else " (beyond the axis)"
        traces.append(legend_entry(f"{words} {value:,} tokens{beyond}", color, dash))
    drawn = [v for _, v, _, _ in lines[:2] if v <= top]
    if len(drawn) == 2 and abs(drawn[0] - drawn[1]) < top / 100:  # one line to the eye
        a, b = drawn
        other = "row" if plan.manager == "v2" else "max_seq_len"
        text = (
            f"pool and {other} both {a:,} tokens"
            if a == b
            else f"pool {plan.capacity_tokens:,} and {other} {second[1]:,}: {abs(a - b):,} tokens apart"
        )
        anchor = _beside(max(a, b) / top, text, 0)["xanchor"]
        where = dict(yref="paper", yanchor="bottom", xanchor=anchor)
        annotations.append(note(text, max(a, b), 1.0, "#444", 11, **where))
    now = plan.ranges.get(plan.current_policy, ())
    bad = [s for s in now if s.verdict in ("crash", "stall")]
    if bad:
        subtitle = "current code: " + "; ".join(f"{s.low:,}-{s.high:,} {s.verdict}" for s in bad)
    else:
        rejected = any(s.verdict == "reject" for s in now)
        subtitle = f"current code: every context up to {top:,} finishes" + (
            " or is rejected" if rejected else ""
        )
    if plan.manager == "v1":
        subtitle = f"V1 manager, {subtitle}"
    axes = {}
    if not plan.blocks:
        subtitle = "no rank can build a KV pool: nothing starts under any policy"
        axes = dict(visible=False)  # no axes to read: the figure says why it is empty
        crash = OUTCOME_COLORS["crash"]
        annotations.append(note(_NO_POOL, 0.5, 0.5, crash, 13, xref="paper", yref="paper"))
    elif not plan.starts:
        subtitle = (
            "merged code raises at construction (state slots), so nothing runs; the bands "
            "are for the pool PR #17261's clamp (a proposal) would leave"
        )
    names = [PLAN_POLICY_NAMES[p] for p in plan.ranges]
    x_title = dict(text="context length (prompt tokens)")
    y_axis = dict(autorange=True, **axes)
    layout = base_layout(
        titled(title, f"{d.model.name}: what each context length meets"),
        subtitle,
        barmode="overlay",
        height=400,
        shapes=shapes,
        annotations=annotations,
        bargap=0.35,
        xaxis=dict(title=x_title, range=[0, top * 1.02], tickformat=",", **axes),
        yaxis=dict(title=None, categoryorder="array", categoryarray=names[::-1], **y_axis),
        legend=foot_legend(font=dict(size=11)),
    )
    layout["margin"] = {**layout["margin"], "l": 160, "b": 130}
    return {"data": traces, "layout": layout}


#: The per-rank figure's legend: an entry's text width in one of two columns and a row's
#: height; the rank labels' room (rotated past 8 ranks) and the bars' own height, in px.
LEGEND_TEXT_PX, LEGEND_ROW_PX, TICKS_PX, BARS_PX = 220, 19, {True: 60, False: 30}, 280
#: The GPU's memory, a line across the per-rank bars.
GPU_COLOR = "#222222"


def plan_ranks_spec(plan, *, title: str | None = None) -> dict:
    """Every rank's memory in a deployment's plan (``rank_budget_spec``'s 8 bars), the GPU's
    memory dashed, each rank's own KV memory before the MIN in the subtitle."""
    plan = check_instance("plan", plan, DeploymentPlan)
    ranks = plan.rank_plans()
    n = len(ranks)
    traces = rank_budget_spec(ranks, state_bytes=plan.state_bytes)["data"]
    part = {key: trace["y"] for (key, _, _), trace in zip(BUDGET_PARTS, traces)}
    own = [sum(values) for values in zip(part["KV pool"], part["lost to MIN"], part["state slots"])]
    gpu = plan.deployment.gpu_gib
    pool_gib = gib_text(plan.blocks * plan.bytes_per_block / GIB)
    blocks = f"{counted(plan.blocks, 'block')} ({pool_gib})"
    # where merged code raises at construction, the bars are the pool PR #17261's clamp leaves
    proposal = "" if plan.starts else " under PR #17261's clamp (a proposal)"
    if proposal:  # the legend says so too
        pool = traces[[key for key, _, _ in BUDGET_PARTS].index("KV pool")]
        pool["name"] = pool["name"].replace("KV pool", "KV pool under PR #17261's clamp", 1)
    peaks = [r.budget.peak_memory_bytes / GIB for r in ranks]
    if not plan.blocks and max(peaks) > gpu:
        up_to = "" if min(peaks) == max(peaks) else "up to "
        subtitle = (
            f"no KV pool: weights, workspace, activations and non-torch memory take "
            f"{up_to}{max(peaks):,.1f} GiB of the GPU's {gpu:,.1f} GiB"
        )
    elif not plan.blocks:
        page = f"{plan.bytes_per_block / 2**20:,.2f} MiB"
        subtitle = f"no KV pool: what the ranks leave holds less than one page of {page}"
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
    bottom = TICKS_PX[n > 8] + LEGEND_ROW_PX * -(-len(names) // columns) + 16
    gpu_note = end_note(f"the GPU's memory: {gpu:,.1f} GiB", gpu, GPU_COLOR, 11)
    legend = foot_legend(entrywidth=LEGEND_TEXT_PX * (3 - columns), entrywidthmode="pixels")
    layout = base_layout(
        titled(title, f"Per-rank memory ({counted(n, 'rank')})"),
        subtitle,
        barmode="stack",
        bargap=0.15,
        shapes=[across(gpu, GPU_COLOR, "dash")],
        annotations=[dict(gpu_note, bgcolor="rgba(255,255,255,0.9)")],
        xaxis=rank_axis(traces[0]["x"]),
        yaxis=dict(title=dict(text="GiB per GPU"), range=[0, tallest * 1.08]),
        legend=dict(legend, font=dict(size=11)),
    )
    layout["margin"] = {**layout["margin"], "b": bottom}
    layout["height"] = BARS_PX + layout["margin"]["t"] + bottom
    return {"data": traces, "layout": layout}


plan_ranges_figure = as_figure(plan_ranges_spec)
