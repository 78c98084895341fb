"""kvlab.notebook.viz figures of kvlab.analysis.measurements results: real CPU rows (tiny sizes) and fixed rows."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from kvlab.analysis.measurements import page_index_copy, paged_read, pool_allocation
from kvlab.notebook import viz


@pytest.fixture(scope="module")
def copies():
    return page_index_copy([2048, 8192, 32768], [1, 4, 16], repeat=2)


def test_table_copy_has_one_line_per_width_over_the_batch_sizes(copies):
    fig = viz.table_copy_figure(copies, device="CPU", labels={68: "clamped", 260: "configured"})
    assert isinstance(fig, go.Figure) and len(fig.data) == 3
    assert [t.name for t in fig.data] == [
        "68 entries (max_seq_len 2,048) - clamped",
        "260 entries (max_seq_len 8,192) - configured",
        "1,028 entries (max_seq_len 32,768)",
    ]
    for trace in fig.data:
        assert list(trace.x) == [1, 4, 16]
    assert list(fig.data[0].y) == [r["median_us"] for r in copies if r["width"] == 68]
    title = viz.figure_text(fig)
    assert (
        "measured on CPU" in title and "at max_batch_size 16: 1,028 entries 136.5 KiB in" in title
    )
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"


def test_table_copy_of_one_width_explains_the_copy():
    rows = [
        {
            "max_seq_len": 2048,
            "width": 68,
            "max_batch_size": 1,
            "slots": 2,
            "nbytes": 1088,
            "median_us": 3.0,
            "min_us": 2.5,
            "gb_per_s": 0.363,
        }
    ]
    spec = viz.table_copy_spec(rows)
    assert "non_blocking=True" in viz.figure_text(spec)
    assert "1.1 KiB a step in 3.0 us (0.36 GB/s)" in spec["data"][0]["hovertext"][0]


def test_paged_read_has_gather_and_copy_bars_by_page_size():
    rows = paged_read([64, 4096], pool_bytes=1 << 16, repeat=2)
    fig = viz.paged_read_figure(rows, device="CPU")
    assert [t.name for t in fig.data] == ["gather through the table", "plain copy"]
    assert list(fig.data[0].x) == ["64 B", "4.0 KiB"]
    assert list(fig.data[1].y) == [r["copy_gb_per_s"] for r in rows]
    assert "of the copy's bandwidth" in viz.figure_text(fig)
    empty = viz.paged_read_spec([])
    assert len(empty["data"]) == 2 and "no measurement" in viz.figure_text(empty)


def test_paged_read_subtitle_gives_the_ratio_range():
    rows = [
        {
            "page_bytes": b,
            "num_pages": 1,
            "nbytes": b,
            "gather_gb_per_s": g,
            "copy_gb_per_s": 4000.0,
            "gather_vs_copy": g / 4000,
        }
        for b, g in ((4096, 2000.0), (1 << 20, 3600.0))
    ]
    assert "at 50% to 90% of the copy's" in viz.figure_text(viz.paged_read_spec(rows))


def test_pool_allocation_is_one_line_in_gib():
    rows = pool_allocation([1 << 22, 1 << 20], bytes_per_block=1 << 16, repeat=1)
    fig = viz.pool_allocation_figure(rows, device="CPU")
    assert len(fig.data) == 1
    assert list(fig.data[0].x) == [1 / 1024, 4 / 1024]
    assert "64.0 KiB" in fig.data[0].hovertext[
        0
    ] and "Allocating the KV pool, measured on CPU" in viz.figure_text(fig)


def test_pool_vs_workspace_from_the_stored_h200_rows():
    from kvlab.analysis.measurements import load_measurements

    rows = load_measurements("h200")["pool_vs_workspace"]
    spec = viz.pool_vs_workspace_spec(rows, device="NVIDIA H200")
    names = [t["name"] for t in spec["data"]]
    assert len(names) == len(viz.BUDGET_PARTS)
    assert all(
        name.startswith(label)
        for name, (_, label, _) in zip(names, viz.BUDGET_PARTS)
        if not label.startswith("KV pool")
    )
    # one GPU: no MIN, so the pool is not "after the MIN"; the 0.67 GiB of non-torch memory, a
    # hairline on a 141 GiB bar, is sized in its legend entry
    assert names[4] == "KV pool"
    assert names[3] == "non-torch (NCCL, CUDA graphs): 0.67 GiB, too thin to see"
    pool = next(t for t in spec["data"] if t["name"].startswith("KV pool"))["y"]
    workspace = next(t for t in spec["data"] if t["name"] == "MoE workspace")["y"]
    assert pool == sorted(pool, reverse=True) and workspace == sorted(workspace)
    # one GPU: no MIN all-reduce took anything, so no legend entry says it did
    shown = {t["name"] for t in spec["data"] if t["showlegend"]}
    assert "KV lost to the MIN all-reduce" not in shown and "MoE workspace" in shown
    # the bars of each column add up to the GPU's memory
    total = rows[0]["total_bytes"] / 2**30
    for i in range(len(rows)):
        assert abs(sum(t["y"][i] for t in spec["data"]) - total) < 0.01
    assert viz.figure_text(viz.pool_vs_workspace_spec([]))
