"""Multi-rank memory (notebooks 01 and 06): what each rank's GPU memory goes to after the MIN
all-reduce, and the requests against the pool and the page-index row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvlab.analysis.rank_plan import RankPlan
from kvlab.core.checks import check_instance, check_int, check_items, check_sequence
from kvlab.core.memory import GIB
from kvlab.notebook.viz.style import (
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    POOL_COLOR,
    ROW_COLOR,
    across,
    as_figure,
    bar,
    base_layout,
    legend_below,
    legend_entry,
    note,
    outcome_color,
    thin_label,
    titled,
)
from kvlab.run.rank import RankResult

#: Parts of a rank's memory, bottom to top: (key, legend label, colour).
BUDGET_PARTS = (
    ("weights", "weights", "#332288"),
    ("workspace", "MoE workspace", "#AA4499"),
    ("activations", "activations (peak)", "#88CCEE"),
    ("non-torch", "non-torch (NCCL, CUDA graphs)", "#999933"),
    ("KV pool", "KV pool (after the MIN)", OUTCOME_COLORS["ok"]),
    ("state slots", "recurrent-state slots (hybrids)", "#DDCC77"),
    ("lost to MIN", "KV lost to the MIN all-reduce", "#BBBBBB"),
    ("unused", "unused (1 - free_gpu_memory_fraction)", "#EEEEEE"),
)


def gib_text(gib: float) -> str:
    """37.5 GiB; two significant digits under 1 GiB (0.061 GiB)."""
    return f"{gib:,.1f} GiB" if gib >= 1 else f"{gib:.2g} GiB"


def rank_axis(labels: Sequence[str]) -> dict:
    """The x axis of "rank N" bars: level up to 8, slanted up to 16, numbers alone past 16."""
    if len(labels) > 16:
        return dict(
            title=dict(text="rank"),
            tickangle=0,
            tickvals=list(labels),
            ticktext=[label.removeprefix("rank ") for label in labels],
        )
    return dict(title=None, tickangle=-45 if len(labels) > 8 else 0)


def budget_stack(
    x: Sequence[str],
    budgets: Sequence,
    pool_bytes: Sequence[int],
    lost_bytes: Sequence[int],
    state_bytes: Sequence[int] = (),
    *,
    after_min: bool = True,
) -> list:
    """The 8 stacked bar traces of :data:`BUDGET_PARTS`, a bar per ``x`` (GiB); a part zero in
    every bar has no legend entry, one too thin to see gives its size."""
    states = list(state_bytes) or [0] * len(budgets)
    columns = []
    for b, pool, lost, state in zip(budgets, pool_bytes, lost_bytes, states):
        unused = max(0, b.total_bytes - b.peak_memory_bytes - pool - state - lost)
        used = (b.weights_bytes, b.workspace_bytes, b.activation_peak_bytes, b.non_torch_bytes)
        columns.append((*used, pool, state, lost, unused))
    values = [[n / GIB for n in part] for part in zip(*columns)] or [[]] * len(BUDGET_PARTS)
    tallest = max((sum(column) for column in zip(*values)), default=0)
    traces = []
    for (key, label, color), part in zip(BUDGET_PARTS, values):
        if key == "KV pool" and not after_min:
            label = "KV pool"
        label = thin_label(label, part, tallest, gib_text)
        hovers = [f"{xi}: {label} {v:.1f} GiB" for xi, v in zip(x, part)]
        traces.append(bar(list(x), part, label, color, hovers, showlegend=any(part)))
    return traces


def rank_budget_spec(
    ranks: Sequence, *, title: str | None = None, state_bytes: Sequence[int] = ()
) -> dict:
    """A stacked bar per rank (RankResult or RankPlan) of what its GPU memory goes to (GiB);
    ``state_bytes``: each rank's recurrent-state slots. Traces: 8 bars."""
    ranks = [
        check_instance(f"ranks[{i}]", r, (RankResult, RankPlan))
        for i, r in enumerate(check_items("ranks", ranks, "RankResult or RankPlan objects"))
    ]
    state_bytes = check_sequence("state_bytes", state_bytes, check_int)
    if state_bytes and len(state_bytes) != len(ranks):
        raise ValueError(
            f"state_bytes must hold one count per rank ({len(ranks)}), got {len(state_bytes)}"
        )
    lost = [  # whole blocks the MIN took away
        (r.local_blocks - r.blocks) * (r.quota_bytes // r.blocks if r.blocks else 0) for r in ranks
    ]
    labels = [f"rank {r.rank}" for r in ranks]
    budgets, pools = [r.budget for r in ranks], [r.quota_bytes for r in ranks]
    traces = budget_stack(labels, budgets, pools, lost, state_bytes, after_min=len(ranks) > 1)
    own = [r.local_quota_bytes / GIB for r in ranks]
    blocks = ", ".join(f"{p:,}" for p in sorted({r.blocks for r in ranks}))
    subtitle = (
        f"own KV quotas {min(own):.1f}-{max(own):.1f} GiB; after the MIN every rank's pool is "
        f"{blocks} blocks"
        if ranks
        else "no ranks"
    )
    default = f"Per-rank memory: the MoE workspace shrinks the KV pool ({len(ranks)} ranks)"
    layout = base_layout(
        titled(title, default),
        subtitle,
        barmode="stack",
        height=460,
        bargap=0.15,
        xaxis=rank_axis(labels),
        yaxis=dict(title=dict(text="GiB per GPU")),
        legend=legend_below(-0.2, font=dict(size=11)),
    )
    return {"data": traces, "layout": layout}


def request_fit_spec(
    requests: Sequence[Mapping],
    *,
    capacity_tokens: int,
    row_tokens: int,
    title: str | None = None,
    subtitle: str | None = None,
) -> dict:
    """Each request's tokens (dicts of ``id``, ``tokens``, ``outcome``, ``rank``) against the
    pool (dotted) and the row (dashed) on a linear axis, labelled with how far past each."""
    tokens = [int(r["tokens"]) for r in requests]
    outcomes = [r.get("outcome") for r in requests]
    hovers = [
        f"{r['id']}"
        + (f" on rank {r['rank']}" if r.get("rank") is not None else "")
        + f": {int(r['tokens']):,} tokens<br>"
        + OUTCOME_LABELS.get(r.get("outcome") or "", "no outcome")
        for r in requests
    ]
    limits = (
        ("pool", capacity_tokens, POOL_COLOR, "dot", "pool holds"),
        ("row", row_tokens, ROW_COLOR, "dash", "row spans"),
    )
    lowest = min(capacity_tokens, row_tokens)
    text = [
        f"{t:,} tokens"
        + "".join(f"<br>{t - value:,} past the {name}" for name, value, *_ in limits if t > value)
        if t > lowest
        else f"{t:,}"
        for t in tokens
    ]
    ids = [str(r["id"]) for r in requests]
    colors = [outcome_color(o) for o in outcomes]
    bars = bar(ids, tokens, "requests", colors, hovers, showlegend=False, cliponaxis=False)
    # inside a bar that holds its label, level; outside only a bar too short to hold it
    inside = ["inside" if t > lowest else "auto" for t in tokens]
    bars.update(text=text, textposition=inside, insidetextanchor="middle", textangle=0)
    bars["constraintext"] = "none"
    # at the left, the larger limit's value above its line, the smaller's below: apart though
    # the lines coincide
    larger = max(limits, key=lambda limit: limit[1])
    shapes, annotations, legend = [], [], []
    for limit in limits:
        _, value, color, dash, words = limit
        said = f"{words} {value:,} tokens"
        where: dict[str, Any] = dict(xref="paper", xanchor="left")
        where["yanchor"] = "bottom" if limit is larger else "top"
        shapes.append(across(value, color, dash))
        annotations.append(note(said, 0, value, color, **where))
        legend.append(legend_entry(said, color, dash))
    crashes = outcomes.count("crash")
    if subtitle is None:
        subtitle = (
            f"{crashes} request(s) beyond the row: ValueError"
            if crashes
            else "no request beyond the row"
        )
    y_range = [0, 1.12 * max(tokens + [capacity_tokens, row_tokens, 1])]
    layout = base_layout(
        titled(title, "Requests against the pool and the page-index row"),
        subtitle,
        height=420,
        shapes=shapes,
        annotations=annotations,
        bargap=0.3,
        legend=legend_below(-0.12),
        xaxis=dict(title=None, type="category"),
        yaxis=dict(title=dict(text="tokens (prompt + new)"), rangemode="tozero", range=y_range),
    )
    return {"data": [bars, *legend], "layout": layout}


rank_budget_figure = as_figure(rank_budget_spec)
request_fit_figure = as_figure(request_fit_spec)
