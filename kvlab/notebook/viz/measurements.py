"""Measurements on a device (notebook 03; :mod:`kvlab.analysis.measurements`): the page-index
table's copy each step, a paged read beside a plain copy, the pool's allocation, and the pool
left after a growing MoE workspace."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvlab.core.memory import GIB
from kvlab.notebook.viz.ranks import budget_stack
from kvlab.notebook.viz.style import (
    OUTCOME_COLORS,
    WIDTH_LINE_COLORS,
    as_figure,
    base_layout,
    format_bytes,
    log_log_axes,
)

#: Bars of :func:`paged_read_spec`: the gather through the table, and the plain copy.
READ_COLORS = {"gather": "#332288", "copy": "#999999"}


def _on(device: str) -> str:
    """The title's tail for figures measured on a device."""
    return f", measured on {device}" if device else ""


def table_copy_spec(
    rows: Sequence[Mapping], *, device: str = "", labels: Mapping[int, str] | None = None
) -> dict:
    """Per-step host-to-device copy time of the page-index table against max_batch_size, one
    line per row width (log axes). ``rows``: ``kvlab.analysis.measurements.page_index_copy`` dicts;
    ``labels`` names widths (e.g. ``{68: "clamped", 260: "configured"}``). Traces: one per width."""
    labels = dict(labels or {})
    widths = sorted({r["width"] for r in rows})
    traces = []
    for i, width in enumerate(widths):
        mine = sorted((r for r in rows if r["width"] == width), key=lambda r: r["max_batch_size"])
        name = f"{width:,} entries (max_seq_len {mine[0]['max_seq_len']:,})" + (
            f" - {labels[width]}" if width in labels else ""
        )
        hover = [
            f"width {width:,}, max_batch_size {r['max_batch_size']:,} ({r['slots']:,} slots)<br>"
            f"{format_bytes(r['nbytes'])} a step in {r['median_us']:,.1f} us ({r['gb_per_s']:.2f} GB/s)"
            for r in mine
        ]
        traces.append(
            dict(
                type="scatter",
                x=[r["max_batch_size"] for r in mine],
                y=[r["median_us"] for r in mine],
                mode="lines+markers",
                name=name,
                hovertext=hover,
                hovertemplate="%{hovertext}<extra></extra>",
                line=dict(color=WIDTH_LINE_COLORS[i % len(WIDTH_LINE_COLORS)], width=2.5),
            )
        )
    subtitle = "pinned int32 [slots, 2, width] copied with non_blocking=True; median of the steps"
    if len(widths) > 1:
        big = max(r["max_batch_size"] for r in rows)
        at = {r["width"]: r for r in rows if r["max_batch_size"] == big}
        lo, hi = at.get(widths[0]), at.get(widths[-1])
        if lo and hi:
            subtitle = (
                f"at max_batch_size {big:,}: {widths[-1]:,} entries {format_bytes(hi['nbytes'])} in "
                f"{hi['median_us']:,.1f} us vs {widths[0]:,} entries {format_bytes(lo['nbytes'])} "
                f"in {lo['median_us']:,.1f} us"
            )
    layout = base_layout(
        f"The page-index table's copy to the device, each step{_on(device)}",
        subtitle,
        height=460,
        **log_log_axes(("max_batch_size", "sequences"), ("host-to-device copy per step", "us")),
        legend=dict(
            orientation="v", yanchor="top", y=0.98, x=0.02, bgcolor="rgba(255,255,255,0.8)"
        ),
    )
    return {"data": traces, "layout": layout}


table_copy_figure = as_figure(table_copy_spec)


def paged_read_spec(rows: Sequence[Mapping], *, device: str = "") -> dict:
    """Read bandwidth of a gather of pages through a shuffled page-index row beside a plain copy
    of the same bytes, by page size (grouped bars, GB/s). ``rows``:
    ``kvlab.analysis.measurements.paged_read`` dicts. Traces: always 2 bars (gather, copy)."""
    x = [format_bytes(r["page_bytes"]) for r in rows]
    data = []
    for side, label in (("gather", "gather through the table"), ("copy", "plain copy")):
        values = [r[f"{side}_gb_per_s"] for r in rows]
        hover = [
            f"pages of {xi}: {label} {v:,.0f} GB/s ({r['num_pages']:,} pages, "
            f"{format_bytes(r['nbytes'])})"
            for xi, v, r in zip(x, values, rows)
        ]
        data.append(
            dict(
                type="bar",
                x=x,
                y=values,
                name=label,
                marker=dict(color=READ_COLORS[side]),
                text=[f"{v:,.0f}" for v in values],
                textposition="outside",
                cliponaxis=False,
                hovertext=hover,
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    ratios = [r["gather_vs_copy"] for r in rows]
    subtitle = (
        f"the gather reads at {min(ratios):.0%} to {max(ratios):.0%} of the copy's bandwidth"
        if ratios
        else "no measurement"
    )
    layout = base_layout(
        f"Paged read vs plain copy{_on(device)}",
        subtitle,
        height=420,
        barmode="group",
        xaxis=dict(title=dict(text="page size"), type="category"),
        yaxis=dict(title=dict(text="GB/s of bytes read"), rangemode="tozero"),
        legend=dict(orientation="h", yanchor="top", y=-0.2, x=0),
    )
    return {"data": data, "layout": layout}


paged_read_figure = as_figure(paged_read_spec)


def pool_allocation_spec(rows: Sequence[Mapping], *, device: str = "") -> dict:
    """Time to allocate the pool's storage (``torch.empty``, synchronized, cold) against its
    size, log axes. ``rows``: ``kvlab.analysis.measurements.pool_allocation`` dicts. Traces: always 1."""
    rows = sorted(rows, key=lambda r: r["nbytes"])
    hover = [
        f"{format_bytes(r['nbytes'])} ({r['num_blocks']:,} pages of {format_bytes(r['bytes_per_block'])}): "
        f"{r['median_ms']:,.2f} ms"
        for r in rows
    ]
    trace = dict(
        type="scatter",
        x=[r["nbytes"] / GIB for r in rows],
        y=[r["median_ms"] for r in rows],
        mode="lines+markers",
        name="torch.empty of the pool",
        hovertext=hover,
        hovertemplate="%{hovertext}<extra></extra>",
        line=dict(color=OUTCOME_COLORS["ok"], width=2.5),
    )
    layout = base_layout(
        f"Allocating the KV pool{_on(device)}",
        "median of cold allocations (allocator cache emptied first)",
        height=400,
        showlegend=False,
        **log_log_axes(("pool size", "GiB"), ("allocation time", "ms")),
    )
    return {"data": [trace], "layout": layout}


pool_allocation_figure = as_figure(pool_allocation_spec)


def pool_vs_workspace_spec(rows: Sequence[Mapping], *, device: str = "") -> dict:
    """Stacked bars, one per MoE workspace size, of one GPU's memory as measured and the KV pool
    allocated after it (GiB). ``rows``: ``kvlab.core.memory.pool_vs_workspace`` dicts. Traces: the 8
    of :data:`BUDGET_PARTS` (one GPU: no MIN, so the pool is not called "after the MIN" and
    nothing is lost to one)."""
    from kvlab.core.memory import MemoryBudget

    budgets = [
        MemoryBudget(
            total_bytes=r["total_bytes"],
            weights_bytes=r["weights_bytes"],
            workspace_bytes=r["measured_workspace_bytes"],
            activation_peak_bytes=r["activation_peak_bytes"],
            non_torch_bytes=r["non_torch_bytes"],
        )
        for r in rows
    ]
    traces = budget_stack(
        [f"{r['workspace_bytes'] / GIB:g} GiB" for r in rows],
        budgets,
        [r["pool_bytes_allocated"] for r in rows],
        [0] * len(rows),
        after_min=False,
    )
    if rows:
        first, last = rows[0], rows[-1]
        subtitle = (
            f"pool {first['pool_blocks']:,} -> {last['pool_blocks']:,} blocks; max_seq_len clamped to "
            f"{first['max_seq_len']:,} -> {last['max_seq_len']:,} tokens"
        )
    else:
        subtitle = "no measurement (it needs a CUDA GPU)"
    layout = base_layout(
        f"The KV pool after a growing MoE workspace{_on(device)}",
        subtitle,
        barmode="stack",
        height=560,
        bargap=0.2,
        xaxis=dict(title=dict(text="MoE workspace allocated at warm-up")),
        yaxis=dict(title=dict(text="GiB of the GPU")),
        legend=dict(
            orientation="h", yref="container", yanchor="bottom", y=0, x=0, font=dict(size=11)
        ),
        margin=dict(l=70, r=30, t=80, b=150),
    )
    return {"data": traces, "layout": layout}


pool_vs_workspace_figure = as_figure(pool_vs_workspace_spec)
