"""Measurements on a device (notebook 03, :mod:`kvlab.analysis.measurements`): the page-index
table's copy each step, a paged read beside a plain copy, the pool's allocation, and the pool
left after a growing MoE workspace."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvlab.core.memory import GIB, MemoryBudget
from kvlab.notebook.viz.pages import width_lines
from kvlab.notebook.viz.ranks import budget_stack
from kvlab.notebook.viz.style import (
    OUTCOME_COLORS,
    as_figure,
    bar,
    base_layout,
    foot_legend,
    format_bytes,
    legend_below,
    lines_trace,
    log_log_axes,
)

#: Bars of :func:`paged_read_spec`: the gather through the table, and the plain copy.
READ_COLORS = {"gather": "#332288", "copy": "#999999"}


def _on(device: str) -> str:
    return f", measured on {device}" if device else ""


def _copy_hover(r: Mapping) -> str:
    return (
        f"width {r['width']:,}, max_batch_size {r['max_batch_size']:,} ({r['slots']:,} slots)<br>"
        f"{format_bytes(r['nbytes'])} a step in {r['median_us']:,.1f} us ({r['gb_per_s']:.2f} GB/s)"
    )


def table_copy_spec(
    rows: Sequence[Mapping], *, device: str = "", labels: Mapping[int, str] | None = None
) -> dict:
    """Per-step host-to-device copy time of the page-index table against max_batch_size, a line
    per row width (log axes); ``rows``: ``page_index_copy`` dicts, ``labels`` names widths."""
    widths = sorted({r["width"] for r in rows})
    subtitle = "pinned int32 [slots, 2, width] copied with non_blocking=True; median of the steps"
    big = max((r["max_batch_size"] for r in rows), default=0)
    at = {r["width"]: r for r in rows if r["max_batch_size"] == big}
    lo, hi = at.get(widths[0]) if widths else None, at.get(widths[-1]) if widths else None
    if len(widths) > 1 and lo and hi:
        subtitle = (
            f"at max_batch_size {big:,}: {widths[-1]:,} entries {format_bytes(hi['nbytes'])} "
            f"in {hi['median_us']:,.1f} us vs {widths[0]:,} entries "
            f"{format_bytes(lo['nbytes'])} in {lo['median_us']:,.1f} us"
        )
    legend = dict(orientation="v", yanchor="top", y=0.98, x=0.02, bgcolor="rgba(255,255,255,0.8)")
    layout = base_layout(
        f"The page-index table's copy to the device, each step{_on(device)}",
        subtitle,
        height=460,
        **log_log_axes(("max_batch_size", "sequences"), ("host-to-device copy per step", "us")),
        legend=legend,
    )
    return {"data": width_lines(rows, "median_us", labels, _copy_hover), "layout": layout}


def paged_read_spec(rows: Sequence[Mapping], *, device: str = "") -> dict:
    """Bandwidth of a gather of pages through a shuffled row beside a plain copy of the same
    bytes, by page size (``paged_read`` dicts). Traces: 2 bars (gather, copy)."""
    x = [format_bytes(r["page_bytes"]) for r in rows]
    data = []
    for side, label in (("gather", "gather through the table"), ("copy", "plain copy")):
        values = [r[f"{side}_gb_per_s"] for r in rows]
        hovers = [
            f"pages of {xi}: {label} {v:,.0f} GB/s ({r['num_pages']:,} pages, "
            f"{format_bytes(r['nbytes'])})"
            for xi, v, r in zip(x, values, rows)
        ]
        text = dict(text=[f"{v:,.0f}" for v in values], textposition="outside", cliponaxis=False)
        data.append(bar(x, values, label, READ_COLORS[side], hovers, **text))
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
        legend=legend_below(-0.2),
    )
    return {"data": data, "layout": layout}


def pool_allocation_spec(rows: Sequence[Mapping], *, device: str = "") -> dict:
    """Time to allocate the pool's storage (cold ``torch.empty``) against its size, log axes
    (``pool_allocation`` dicts). Traces: 1."""
    rows = sorted(rows, key=lambda r: r["nbytes"])
    hovers = [
        f"{format_bytes(r['nbytes'])} ({r['num_blocks']:,} pages of "
        f"{format_bytes(r['bytes_per_block'])}): {r['median_ms']:,.2f} ms"
        for r in rows
    ]
    x, y = [r["nbytes"] / GIB for r in rows], [r["median_ms"] for r in rows]
    trace = lines_trace(x, y, "torch.empty of the pool", OUTCOME_COLORS["ok"], hovers)
    layout = base_layout(
        f"Allocating the KV pool{_on(device)}",
        "median of cold allocations (allocator cache emptied first)",
        height=400,
        showlegend=False,
        **log_log_axes(("pool size", "GiB"), ("allocation time", "ms")),
    )
    return {"data": [trace], "layout": layout}


def pool_vs_workspace_spec(rows: Sequence[Mapping], *, device: str = "") -> dict:
    """A stacked bar per MoE workspace size of one GPU's memory and the pool allocated after
    it (``pool_vs_workspace`` dicts). Traces: the 8 budget parts."""
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
    x = [f"{r['workspace_bytes'] / GIB:g} GiB" for r in rows]
    pools = [r["pool_bytes_allocated"] for r in rows]
    traces = budget_stack(x, budgets, pools, [0] * len(rows), after_min=False)
    subtitle = (
        f"pool {rows[0]['pool_blocks']:,} -> {rows[-1]['pool_blocks']:,} blocks; max_seq_len "
        f"clamped to {rows[0]['max_seq_len']:,} -> {rows[-1]['max_seq_len']:,} tokens"
        if rows
        else "no measurement (it needs a CUDA GPU)"
    )
    layout = base_layout(
        f"The KV pool after a growing MoE workspace{_on(device)}",
        subtitle,
        barmode="stack",
        height=560,
        bargap=0.2,
        xaxis=dict(title=dict(text="MoE workspace allocated at warm-up")),
        yaxis=dict(title=dict(text="GiB of the GPU")),
        legend=foot_legend(font=dict(size=11)),
        margin=dict(l=70, r=30, t=80, b=150),
    )
    return {"data": traces, "layout": layout}


table_copy_figure = as_figure(table_copy_spec)
paged_read_figure = as_figure(paged_read_spec)
pool_allocation_figure = as_figure(pool_allocation_spec)
pool_vs_workspace_figure = as_figure(pool_vs_workspace_spec)
