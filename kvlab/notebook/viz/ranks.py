"""Multi-rank memory (notebooks 01 and 06): what each rank's GPU memory goes to after the MIN
all-reduce, and the requests against the pool and the page-index row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvlab.analysis.rank_plan import RankPlan
from kvlab.core.checks import check_instance, check_int, check_items, check_sequence
from kvlab.core.memory import GIB
from kvlab.notebook.viz.style import (
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    POOL_COLOR,
    ROW_COLOR,
    as_figure,
    base_layout,
    outcome_color,
    thin_label,
    titled,
)
from kvlab.run.rank import RankResult

#: Parts of a rank's memory, bottom to top, with their colours (Tol "muted"; the KV pool in the
#: "ok" colour, the share the MIN took away hatched in grey).
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
    """A rank's memory as its figures write it: "37.5 GiB", and two significant digits under
    1 GiB ("0.061 GiB"), where one decimal would round a pool to 0.1 or 0.0."""
    return f"{gib:,.1f} GiB" if gib >= 1 else f"{gib:.2g} GiB"


def budget_label(
    key: str, label: str, values: Sequence[float], tallest: float, *, after_min: bool
) -> str:
    """A part's legend entry: the KV pool is "after the MIN" only with ``after_min`` (more than
    one rank); a part too thin to see (:func:`~kvlab.notebook.viz.style.thin_label`) is named
    with its size in GiB."""
    if key == "KV pool" and not after_min:
        label = "KV pool"
    return thin_label(label, values, tallest, gib_text)


def rank_axis(labels: Sequence[str]) -> dict:
    """The x axis of bars labelled "rank N": level up to 8 ranks, slanted up to 16; past 16 the
    slanted labels would touch, so the ticks give the numbers alone under the title "rank"."""
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
    """The 8 stacked bar traces of :data:`BUDGET_PARTS`, one bar per ``x``: each budget's parts,
    the pool built, a hybrid's recurrent-state slots, the quota the MIN took away, and the rest
    of the GPU unused (a part that is zero in every bar, such as the MIN's share on one GPU or
    the slots of an attention-only model, has no legend entry; one too thin to see is sized in
    its entry: :func:`budget_label`). ``after_min``: the pools came out of a MIN all-reduce."""
    values = {key: [] for key, _, _ in BUDGET_PARTS}
    states = list(state_bytes) or [0] * len(budgets)
    for b, pool, lost, state in zip(budgets, pool_bytes, lost_bytes, states):
        values["weights"].append(b.weights_bytes / GIB)
        values["workspace"].append(b.workspace_bytes / GIB)
        values["activations"].append(b.activation_peak_bytes / GIB)
        values["non-torch"].append(b.non_torch_bytes / GIB)
        values["KV pool"].append(pool / GIB)
        values["state slots"].append(state / GIB)
        values["lost to MIN"].append(lost / GIB)
        values["unused"].append(
            max(0, b.total_bytes - b.peak_memory_bytes - pool - state - lost) / GIB
        )
    tallest = max((sum(column) for column in zip(*values.values())), default=0)
    traces = []
    for key, label, color in BUDGET_PARTS:
        label = budget_label(key, label, values[key], tallest, after_min=after_min)
        hover = [f"{xi}: {label} {v:.1f} GiB" for xi, v in zip(x, values[key])]
        traces.append(
            dict(
                type="bar",
                x=list(x),
                y=values[key],
                name=label,
                marker=dict(color=color),
                hovertext=hover,
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=any(values[key]),
            )
        )  # no entry for a part no bar has
    return traces


def rank_budget_spec(
    ranks: Sequence, *, title: str | None = None, state_bytes: Sequence[int] = ()
) -> dict:
    """Stacked bars, one per rank, of what its GPU memory goes to (GiB): weights, MoE workspace,
    activation peak, non-torch memory, the KV pool it built after the MIN all-reduce, the KV
    quota the MIN took away (its own quota minus the pool) and the unused headroom.

    ``ranks``: ``kvlab.run.rank.RankResult`` (or ``kvlab.analysis.rank_plan.RankPlan``) objects;
    ``state_bytes``: each rank's recurrent-state slots (a hybrid's, beside its pool).
    Traces: one bar per part, always 8.
    """
    ranks = [
        check_instance(f"ranks[{i}]", r, (RankResult, RankPlan))
        for i, r in enumerate(check_items("ranks", ranks, "RankResult or RankPlan objects"))
    ]
    state_bytes = check_sequence("state_bytes", state_bytes, check_int)
    if state_bytes and len(state_bytes) != len(ranks):
        raise ValueError(
            f"state_bytes must hold one count per rank ({len(ranks)}), got {len(state_bytes)}"
        )
    lost = [
        (r.local_blocks - r.blocks) * (r.quota_bytes // r.blocks if r.blocks else 0) for r in ranks
    ]  # whole blocks the MIN took away
    labels = [f"rank {r.rank}" for r in ranks]
    traces = budget_stack(
        labels,
        [r.budget for r in ranks],
        [r.quota_bytes for r in ranks],
        lost,
        state_bytes,
        after_min=len(ranks) > 1,
    )
    own = [r.local_quota_bytes / GIB for r in ranks]
    subtitle = (
        f"own KV quotas {min(own):.1f}-{max(own):.1f} GiB; after the MIN every rank's pool is "
        f"{', '.join(f'{p:,}' for p in sorted({r.blocks for r in ranks}))} blocks"
        if ranks
        else "no ranks"
    )
    layout = base_layout(
        titled(
            title, f"Per-rank memory: the MoE workspace shrinks the KV pool ({len(ranks)} ranks)"
        ),
        subtitle,
        barmode="stack",
        height=460,
        bargap=0.15,
        xaxis=rank_axis(labels),
        yaxis=dict(title=dict(text="GiB per GPU")),
        legend=dict(orientation="h", yanchor="top", y=-0.2, x=0, font=dict(size=11)),
    )
    return {"data": traces, "layout": layout}


rank_budget_figure = as_figure(rank_budget_spec)


def request_fit_spec(
    requests: Sequence[Mapping],
    *,
    capacity_tokens: int,
    row_tokens: int,
    title: str | None = None,
    subtitle: str | None = None,
) -> dict:
    """Each request's tokens (prompt + new) against the pool's capacity and the page-index
    row's span (width x tokens_per_block), coloured by its outcome. ``requests``: dicts with
    ``id``, ``tokens``, ``outcome`` (a key of :data:`OUTCOME_COLORS`) and optional ``rank``.
    Traces: one bar trace, then two legend entries naming the limits (drawn as full-width
    lines: dotted the pool, dashed the row), so the two stay apart even when they coincide.
    The axis is linear, so that a request a few percent past a limit stands visibly above it
    (on a log axis it looked level); each bar is labelled level with its tokens, inside where it
    fits (one past a limit, always inside, with how far past), and each line with its value, the larger above its line, as
    the two limits may all but coincide."""
    ids = [str(r["id"]) for r in requests]
    tokens = [int(r["tokens"]) for r in requests]
    outcomes = [r.get("outcome") for r in requests]
    hover = [
        f"{r['id']}"
        + (f" on rank {r['rank']}" if r.get("rank") is not None else "")
        + f": {int(r['tokens']):,} tokens<br>{OUTCOME_LABELS.get(r.get('outcome'), 'no outcome')}"
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
    bar = dict(
        type="bar",
        x=ids,
        y=tokens,
        marker=dict(color=[outcome_color(o) for o in outcomes]),
        # inside a bar that holds its label, half way up, clear of the limits' lines above;
        # level, never turned on its side; outside only a bar too short to hold it
        text=text,
        textposition=["inside" if t > lowest else "auto" for t in tokens],
        insidetextanchor="middle",
        textangle=0,
        constraintext="none",
        cliponaxis=False,
        hovertext=hover,
        hovertemplate="%{hovertext}<extra></extra>",
        name="requests",
        showlegend=False,
    )
    shapes = [
        dict(
            type="line",
            xref="paper",
            x0=0,
            x1=1,
            yref="y",
            y0=value,
            y1=value,
            line=dict(color=color, dash=dash, width=2),
        )
        for _, value, color, dash, _ in limits
    ]
    # at the left, over the shortest requests: the larger limit's value above its line, the
    # smaller's below, so the two read apart when the lines coincide
    larger = max(limits, key=lambda limit: limit[1])
    annotations = [
        dict(
            xref="paper",
            x=0,
            xanchor="left",
            yref="y",
            y=value,
            yanchor="bottom" if limit is larger else "top",
            showarrow=False,
            text=f"{words} {value:,} tokens",
            font=dict(color=color, size=12),
        )
        for limit in limits
        for _, value, color, _, words in [limit]
    ]
    legend = [
        dict(
            type="scatter",
            x=[None],
            y=[None],
            mode="lines",
            name=f"{words} {value:,} tokens",
            line=dict(color=color, dash=dash, width=2),
            hoverinfo="skip",
        )
        for _, value, color, dash, words in limits
    ]
    crashes = sum(1 for o in outcomes if o == "crash")
    if subtitle is None:
        subtitle = (
            f"{crashes} request(s) beyond the row: ValueError"
            if crashes
            else "no request beyond the row"
        )
    layout = base_layout(
        titled(title, "Requests against the pool and the page-index row"),
        subtitle,
        height=420,
        shapes=shapes,
        annotations=annotations,
        bargap=0.3,
        legend=dict(orientation="h", yanchor="top", y=-0.12, x=0),
        xaxis=dict(title=None, type="category"),
        yaxis=dict(
            title=dict(text="tokens (prompt + new)"),
            rangemode="tozero",
            range=[0, 1.12 * max(tokens + [capacity_tokens, row_tokens, 1])],
        ),
    )
    return {"data": [bar, *legend], "layout": layout}


request_fit_figure = as_figure(request_fit_spec)
