"""One resize against the pool and the page-index table (notebooks 02 and 03): the pool as a
page map, the request's entries against the row and the pool, the table's picture, its price in
host bytes, and the outcome of one resize over every pool size and context length.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from kvlab.analysis.repro import ReproResult
from kvlab.core.arith import div_ceil
from kvlab.core.checks import check_instance, check_int, check_items
from kvlab.core.memory import readout_mib
from kvlab.core.words import counted
from kvlab.notebook.viz.style import (
    NEUTRAL_COLOR,
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    POOL_COLOR,
    ROW_COLOR,
    WIDTH_LINE_COLORS,
    as_figure,
    base_layout,
    format_bytes,
    log_log_axes,
    outcome_color,
)

#: Page states in the pool page map. "missing" pages are drawn in the outcome's colour.
PAGE_STATES = ("free", "held", "wanted", "missing")
PAGE_STATE_LABELS = {
    "free": "free page",
    "held": "held by the request",
    "wanted": "requested, not allocated",
    "missing": "requested beyond the pool (no such page)",
}
PAGE_COLORS = {"free": "#E8E8E8", "held": OUTCOME_COLORS["ok"], "wanted": "#88CCEE"}

#: Widths the page map stays readable at; beyond this one cell stands for several pages.
MAX_PAGE_CELLS = 2048
#: The most rows (sequences) and arrows the page-index table's picture draws: more stop reading.
MAX_TABLE_SLOTS = 16
MAX_TABLE_LINKS = 256


# --- the pool as a page map -------------------------------------------------------------------


def _page_state(page: int, total_blocks: int, needed_blocks: int, allocated: bool) -> str:
    if page < needed_blocks:
        if page >= total_blocks:
            return "missing"
        return "held" if allocated else "wanted"
    return "free"


def page_map_spec(
    total_blocks: int,
    needed_blocks: int,
    outcome: str | None,
    *,
    tokens_per_block: int = 32,
    title: str | None = None,
    max_cells: int = MAX_PAGE_CELLS,
) -> dict:
    """The pool as a grid of pages against what one request asked for.

    Cells are the pool's ``total_blocks`` pages followed, when the request needs more, by the
    pages it would need beyond the pool ("missing", drawn in the outcome's colour). A request
    that was allocated (``outcome == "ok"``) holds its pages; otherwise they stay free and are
    drawn as "requested, not allocated". Beyond ``max_cells`` cells, one cell stands for a power
    of two of pages. Traces: one heatmap and one legend entry per page state (always 5).
    """
    total_blocks, needed_blocks = int(total_blocks), int(needed_blocks)
    pages = max(total_blocks, needed_blocks, 1)
    per_cell = 1
    while div_ceil(pages, per_cell) > max_cells:
        per_cell *= 2
    cells = div_ceil(pages, per_cell)
    cols = 32 if cells <= 512 else 64
    rows = div_ceil(cells, cols)
    allocated = outcome == "ok"
    codes = {state: i for i, state in enumerate(PAGE_STATES)}
    z, text = [], []
    for r in range(rows):
        zrow, trow = [], []
        for c in range(cols):
            cell = r * cols + c
            first = cell * per_cell
            if first >= pages:
                zrow.append(None)
                trow.append("")
                continue
            last = min(first + per_cell, pages) - 1
            state = _page_state(first, total_blocks, needed_blocks, allocated)
            where = f"page {first:,}" if first == last else f"pages {first:,}-{last:,}"
            tokens = f"tokens {first * tokens_per_block:,}-{(last + 1) * tokens_per_block - 1:,}"
            zrow.append(codes[state])
            trow.append(f"{where} ({tokens})<br>{PAGE_STATE_LABELS[state]}")
        z.append(zrow)
        text.append(trow)
    missing_color = outcome_color(outcome) if outcome not in (None, "ok") else NEUTRAL_COLOR
    colors = [PAGE_COLORS["free"], PAGE_COLORS["held"], PAGE_COLORS["wanted"], missing_color]
    n = len(colors)
    colorscale = []
    for i, color in enumerate(colors):
        colorscale += [[i / n, color], [(i + 1) / n, color]]
    heat = dict(
        type="heatmap",
        z=z,
        text=text,
        hovertemplate="%{text}<extra></extra>",
        colorscale=colorscale,
        zmin=-0.5,
        zmax=n - 0.5,
        showscale=False,
        xgap=1,
        ygap=1,
        name="pages",
        showlegend=False,
    )
    shown = {code for zrow in z for code in zrow if code is not None}
    legend = [
        dict(
            type="scatter",
            x=[None],
            y=[None],
            mode="markers",
            name=PAGE_STATE_LABELS[state],
            marker=dict(symbol="square", size=12, color=color),
            hoverinfo="skip",
            showlegend=codes[state] in shown,
        )  # an entry only for what the map holds
        for state, color in zip(PAGE_STATES, colors)
    ]
    beyond = max(0, needed_blocks - total_blocks)
    scale = f"one cell = {per_cell:,} pages" if per_cell > 1 else "one cell = one page"
    subtitle = (
        f"pool {total_blocks:,} pages = {total_blocks * tokens_per_block:,} tokens; request "
        f"{needed_blocks:,} pages = {needed_blocks * tokens_per_block:,} tokens"
        + (f"; {beyond:,} pages beyond the pool" if beyond else "")
        + f" ({scale})"
    )
    tick_step = max(1, div_ceil(rows, 8))
    if title is None:
        title = (
            f"KV pool: {total_blocks:,} pages of {tokens_per_block} tokens; "
            f"the request needs {needed_blocks:,}"
        )
    layout = base_layout(
        title,
        subtitle,
        height=190 + rows * (19 if cols == 32 else 9.5),
        xaxis=dict(
            showgrid=False,
            showline=False,
            ticks="",
            range=[-0.5, cols - 0.5],
            constrain="domain",
            side="top",
            tickfont=dict(size=10),
            title=None,
        ),
        # each line labelled with its first page: an axis title would outgrow a map of few lines
        yaxis=dict(
            title=None,
            showgrid=False,
            showline=False,
            ticks="",
            autorange="reversed",
            scaleanchor="x",
            constrain="domain",
            tickvals=list(range(0, rows, tick_step)),
            ticktext=[f"page {r * cols * per_cell:,}" for r in range(0, rows, tick_step)],
        ),
        legend=dict(orientation="h", yanchor="top", y=-0.02, x=0, font=dict(size=12)),
        margin=dict(l=70, r=50, t=100, b=50),
    )  # r: room for the toolbar beside the last column
    return {"data": [heat, *legend], "layout": layout}


# --- the page-index row: entries needed against entries available -----------------------------


def index_row_spec(
    width: int,
    needed: int,
    total_blocks: int,
    outcome: str | None,
    *,
    tokens_per_block: int = 32,
    policy: str | None = None,
    with_output: int | None = None,
    title: str | None = None,
    subtitle: str | None = None,
) -> dict:
    """The request's page-index entries against the row's width and the pool's pages.

    Three horizontal bars in one trace (always one trace): the row (``width`` entries), the pool
    (``total_blocks`` pages) and the request's context (``needed`` entries, in the outcome's
    colour), with a dashed line where the row ends and where the pool ends. The native resize
    checks the row first: needed > width is the ValueError; then the pool: needed > pages is
    False. ``with_output``: the entries the request needs to complete (context and output),
    named beside the context's when they differ.
    """
    width, needed, total_blocks = int(width), int(needed), int(total_blocks)
    complete = needed if with_output is None else int(with_output)
    tpb = tokens_per_block
    row_label = f"page-index row [{policy}]" if policy else "page-index row"
    request_label = f"request: {counted(needed, 'entry', 'entries')}" + (
        f" ({complete:,} with its output)" if complete != needed else ""
    )
    labels = [
        request_label,
        f"pool: {counted(total_blocks, 'page')}",
        f"{row_label}: {width:,}" if width else f"{row_label}: not built",
    ]
    values = [needed, total_blocks, width]
    verdict = (
        "more than the row holds: ValueError"
        if needed > width
        else "fits the row, more than the pool: the resize returns False"
        if needed > total_blocks
        else "its context fits, its output runs past the row: ValueError"
        if complete > width
        else "its context fits the row and the pool, its output not the pool: a resize returns False"
        if complete > total_blocks
        else "fits the row and the pool"
    )
    hovers = [
        f"request: {needed:,} entries = ceil(context / {tpb}) = {needed * tpb:,} tokens"
        + (f"; {complete:,} entries with its output" if complete != needed else "")
        + f"<br>{verdict}",
        f"pool: {total_blocks:,} pages of {tpb} tokens = {total_blocks * tpb:,} tokens",
        f"row width (max_blocks_per_seq): {width:,} entries = {width * tpb:,} tokens",
    ]
    bar = dict(
        type="bar",
        y=labels,
        x=values,
        orientation="h",
        marker=dict(color=[outcome_color(outcome), POOL_COLOR, ROW_COLOR]),
        hovertext=hovers,
        hovertemplate="%{hovertext}<extra></extra>",
        name="entries",
        cliponaxis=False,
    )
    top = max(values) * 1.12 or 1
    shapes, annotations = [], []  # where the row and the pool end: none for one that is empty
    if width:
        shapes.append(
            dict(
                type="line",
                x0=width,
                x1=width,
                y0=-0.5,
                y1=2.5,
                xref="x",
                yref="y",
                line=dict(color=ROW_COLOR, dash="dash", width=2),
            )
        )
        annotations.append(
            dict(
                x=width,
                y=2.5,
                xref="x",
                yref="y",
                text=f"row ends: {width:,}",
                showarrow=False,
                yanchor="bottom",
                font=dict(color=ROW_COLOR, size=12),
            )
        )
    if total_blocks:
        shapes.append(
            dict(
                type="line",
                x0=total_blocks,
                x1=total_blocks,
                y0=-0.5,
                y1=1.5,
                xref="x",
                yref="y",
                line=dict(color=POOL_COLOR, dash="dot", width=2),
            )
        )
        annotations.append(
            dict(
                x=total_blocks,
                y=-0.5,
                xref="x",
                yref="y",
                text=f"pool ends: {total_blocks:,}",
                showarrow=False,
                yanchor="top",
                font=dict(color=POOL_COLOR, size=12),
            )
        )
    if title is None:
        title = f"Page-index row: {needed:,} entries needed, {width:,} available"
    if subtitle is None:  # what the resize would do; a caller whose engine never got there says so
        subtitle = f"{OUTCOME_LABELS.get(outcome, outcome or 'no outcome')}: {verdict}"
    layout = base_layout(
        title,
        subtitle,
        height=300,
        shapes=shapes,
        annotations=annotations,
        showlegend=False,
        bargap=0.35,
        xaxis=dict(
            title=dict(text=f"entries = pages of {tpb} tokens"), range=[0, top], rangemode="tozero"
        ),
        yaxis=dict(title=None, automargin=True),
    )
    return {"data": [bar], "layout": layout}


def page_table_spec(
    width: int,
    needed: int,
    total_blocks: int,
    *,
    slots: int = 3,
    dummy_slot: int | None = None,
    tokens_per_block: int = 32,
    shown_links: int = 6,
) -> dict:
    """What the page-index table is for: ``slots`` rows (one a sequence; ``dummy_slot``, if
    given, labelled as the reserved dummy row) of ``width`` entries above the pool's
    ``total_blocks`` pages. Entry i of a row holds the pool page of the
    sequence's tokens ``i * tokens_per_block`` to ``(i + 1) * tokens_per_block - 1``; arrows
    follow the first ``shown_links`` entries of row 0 to their pages (drawn scattered, as pages
    come back to the free list in any order: entry i holds page ``37 i mod total_blocks``,
    an illustration, not a run). A request of ``needed``
    entries: those past the row's end are drawn dotted in the crash colour, entries the row
    does not have (the native check refuses them before looking at the pool), and then the
    entries and pages row 0 would fill are drawn as requested, not allocated (none is taken). Past 256, a cell
    stands for several entries or pages (the subtitle says how many). Traces: one
    (legend-only) per part, always four; the picture is shapes and annotations."""
    width, total_blocks = (
        check_int("width", width, low=1),
        check_int("total_blocks", total_blocks, low=1),
    )
    needed = check_int("needed", needed)
    slots = check_int("slots", slots, low=1, high=MAX_TABLE_SLOTS)
    if dummy_slot is not None:
        dummy_slot = check_int("dummy_slot", dummy_slot, low=1, high=slots - 1)
    shown_links = check_int("shown_links", shown_links, high=MAX_TABLE_LINKS)
    tpb = check_int("tokens_per_block", tokens_per_block, low=1, high=65536)  # KVGeometry's range
    unit = max(1, div_ceil(max(width, needed, total_blocks), 256))  # entries or pages a cell
    width_c, needed_c, pool_c = (div_ceil(n, unit) for n in (width, needed, total_blocks))
    span = max(width_c, needed_c, pool_c)
    shapes, annotations = [], []
    held = min(needed, width, total_blocks)  # entries of row 0 that point at a page
    raises = needed > width  # then no entry is filled: they are drawn as requested, not allocated
    fill = PAGE_COLORS["wanted" if raises else "held"]
    for slot in range(slots):
        y = 3.0 + slot
        for cell in range(width_c):
            filled = slot == 0 and cell * unit < held
            shapes.append(
                dict(
                    type="rect",
                    x0=cell,
                    x1=cell + 1,
                    y0=y,
                    y1=y + 0.8,
                    fillcolor=fill if filled else PAGE_COLORS["free"],
                    line=dict(color="white", width=0.5),
                )
            )
        annotations.append(
            dict(
                x=-0.5,
                y=y + 0.4,
                xref="x",
                yref="y",
                xanchor="right",
                showarrow=False,
                text=f"row {slot}"
                + (" (request)" if slot == 0 else " (dummy)" if slot == dummy_slot else ""),
                font=dict(size=11),
            )
        )
    if raises:
        shapes.append(
            dict(
                type="rect",
                x0=width_c,
                x1=needed_c,
                y0=3.0,
                y1=3.8,
                fillcolor="rgba(204,51,17,0.18)",
                line=dict(color=OUTCOME_COLORS["crash"], width=1.5, dash="dot"),
            )
        )
        annotations.append(
            dict(
                x=(width_c + needed_c) / 2,
                y=3.4,
                xref="x",
                yref="y",
                showarrow=False,
                text=f"entries {width:,}..{needed - 1:,}: the row has none",
                font=dict(size=12, color=OUTCOME_COLORS["crash"]),
                bgcolor="rgba(255,255,255,0.85)",
            )
        )
    step = 37 if math.gcd(37, total_blocks) == 1 else 1
    cells_held = _cells_held(held, total_blocks, step, unit)
    for cell in range(pool_c):
        used = cell in cells_held
        shapes.append(
            dict(
                type="rect",
                x0=cell,
                x1=cell + 1,
                y0=0.0,
                y1=0.8,
                fillcolor=fill if used else PAGE_COLORS["free"],
                line=dict(color="white", width=0.5),
            )
        )
    annotations.append(
        dict(
            x=-0.5,
            y=0.4,
            xref="x",
            yref="y",
            xanchor="right",
            showarrow=False,
            text="KV pool",
            font=dict(size=11),
        )
    )
    for entry in range(min(shown_links, held)):
        page = (entry * step) % total_blocks
        annotations.append(
            dict(
                x=page / unit + 0.5,
                y=0.85,
                ax=entry / unit + 0.5,
                ay=3.0,
                xref="x",
                yref="y",
                axref="x",
                ayref="y",
                showarrow=True,
                arrowhead=2,
                arrowsize=0.8,
                arrowwidth=1,
                arrowcolor=ROW_COLOR,
                text="",
            )
        )
    shapes.append(
        dict(
            type="line",
            x0=width_c,
            x1=width_c,
            y0=2.8,
            y1=3.0 + slots,
            xref="x",
            yref="y",
            line=dict(color=ROW_COLOR, dash="dash", width=2),
        )
    )
    annotations.append(
        dict(
            x=width_c,
            y=3.0 + slots,
            xref="x",
            yref="y",
            yanchor="bottom",
            showarrow=False,
            text=f"row width: {width:,} entries",
            font=dict(size=12, color=ROW_COLOR),
        )
    )
    annotations.append(
        dict(
            x=pool_c,
            y=0.8,
            xref="x",
            yref="y",
            xanchor="left",
            yanchor="bottom",
            showarrow=False,
            text=f" pool: {total_blocks:,} pages",
            font=dict(size=12, color=POOL_COLOR),
        )
    )
    legend = [
        dict(
            type="scatter",
            x=[None],
            y=[None],
            mode="markers",
            name=name,
            hoverinfo="skip",
            marker=dict(symbol="square", size=12, color=color),
            showlegend=show,
        )
        for name, color, show in (
            (
                "an entry the request would fill, and its page: none is taken, the ValueError "
                "comes first"
                if raises
                else "an entry holding a page number (int32), and its page",
                fill,
                held > 0,
            ),
            ("an empty entry, or a free page", PAGE_COLORS["free"], True),
            (
                f"entries the request needs past the row ({max(0, needed - width):,})",
                OUTCOME_COLORS["crash"],
                raises,
            ),
            (
                f"entry i -> the page of tokens i x {tpb} .. (i + 1) x {tpb} - 1",
                ROW_COLOR,
                held > 0,
            ),
        )
    ]
    verdict = (
        "more entries than the row has: ValueError, before the pool is looked at"
        if raises
        else "every entry fits the row"
    )
    scale = f"; one cell = {unit:,} entries or pages" if unit > 1 else ""
    layout = base_layout(
        "The page-index table: one row per sequence, one entry per page",
        f"the request needs {needed:,} entries (ceil(context / {tpb})); its row has {width:,}; the pool "
        f"has {total_blocks:,} pages: {verdict}{scale}",
        height=380,
        shapes=shapes,
        annotations=annotations,
        legend=dict(orientation="h", yanchor="top", y=-0.05, x=0),
        xaxis=dict(
            range=[-0.2 * span, span * 1.04],
            showgrid=False,
            showticklabels=False,
            ticks="",
            showline=False,
        ),
        yaxis=dict(
            range=[-0.4, 3.6 + slots],
            showgrid=False,
            showticklabels=False,
            ticks="",
            showline=False,
        ),
        margin=dict(l=20, r=20, b=20),
    )
    return {"data": legend, "layout": layout}


def _cells_held(held: int, total_blocks: int, step: int, unit: int) -> set:
    """The cells of ``unit`` pages holding page ``entry * step % total_blocks`` of some entry
    below ``held`` (at most ``total_blocks``), lap by lap around the pool: each lap is an
    arithmetic progression of pages, and there are at most ``step`` laps, so a pool of 2**40
    pages costs what one of 64 does."""
    cells, entry = set(), 0
    while entry < held:
        first = entry * step % total_blocks
        count = min(held - entry, (total_blocks - 1 - first) // step + 1)  # entries of this lap
        last = first + (count - 1) * step
        if step <= unit:  # no cell between first and last is skipped
            cells.update(range(first // unit, last // unit + 1))
        else:  # a cell narrower than a step: at most 256 x 37 pages in all
            cells.update(page // unit for page in range(first, last + 1, step))
        entry += count
    return cells


page_table_figure = as_figure(page_table_spec)


page_map_figure = as_figure(page_map_spec)


index_row_figure = as_figure(index_row_spec)


def repro_page_map_spec(result: ReproResult) -> dict:
    """:func:`page_map_spec` of a ``kvlab.analysis.repro.ReproResult``."""
    check_instance("result", result, ReproResult)
    return page_map_spec(
        result.total_blocks,
        result.entries_needed,
        result.outcome,
        tokens_per_block=result.tokens_per_block,
    )


def repro_index_row_spec(result: ReproResult) -> dict:
    """:func:`index_row_spec` of a ``kvlab.analysis.repro.ReproResult``."""
    check_instance("result", result, ReproResult)
    return index_row_spec(
        result.max_blocks_per_seq,
        result.entries_needed,
        result.total_blocks,
        result.outcome,
        tokens_per_block=result.tokens_per_block,
        policy=result.policy,
    )


repro_page_map = as_figure(repro_page_map_spec, "repro_page_map")
repro_index_row = as_figure(repro_index_row_spec, "repro_index_row")


# --- the price of a wider table ----------------------------------------------------------------


def table_price_spec(
    rows: Sequence[Mapping],
    *,
    labels: Mapping[int, str] | None = None,
    compare: Sequence[int] | None = None,
) -> dict:
    """Host page-index table bytes against max_batch_size, one line per row width (log axes).

    ``rows`` are ``kvlab.analysis.repro.page_index_price`` dicts. ``labels`` names widths (e.g.
    ``{68: "clamped, seed"}``). ``compare = (narrow, wide)`` annotates the ratio of the two
    widths' bytes at the largest batch size.
    """
    labels = dict(labels or {})
    widths = sorted({r["width"] for r in rows})
    traces = []
    for i, width in enumerate(widths):
        mine = sorted((r for r in rows if r["width"] == width), key=lambda r: r["max_batch_size"])
        seq = mine[0]["max_seq_len"]
        name = f"{width:,} entries (max_seq_len {seq:,})" + (
            f" - {labels[width]}" if width in labels else ""
        )
        hover = [
            f"width {width:,} entries, max_batch_size {r['max_batch_size']:,} "
            f"({r['slots']:,} slots)<br>{r['nbytes']:,} B = {format_bytes(r['nbytes'])}"
            for r in mine
        ]
        traces.append(
            dict(
                type="scatter",
                x=[r["max_batch_size"] for r in mine],
                y=[r["nbytes"] for r in mine],
                mode="lines+markers",
                name=name,
                hovertext=hover,
                hovertemplate="%{hovertext}<extra></extra>",
                line=dict(color=WIDTH_LINE_COLORS[i % len(WIDTH_LINE_COLORS)], width=2.5),
            )
        )
    annotations = []
    subtitle = "bytes = (max_batch_size + 1 dummy) slots x 2 (K, V) x width x 4 B (int32)"
    if compare:
        narrow, wide = compare
        big = max(r["max_batch_size"] for r in rows)
        at = {r["width"]: r for r in rows if r["max_batch_size"] == big}
        if narrow in at and wide in at:
            a, b = at[narrow]["nbytes"], at[wide]["nbytes"]
            ratio = b / a
            # right of each line's last point, in the margin: clear of every curve
            for r in (at[narrow], at[wide]):
                annotations.append(
                    dict(
                        x=math.log10(big),
                        y=math.log10(r["nbytes"]),
                        xref="x",
                        yref="y",
                        text=f"{r['width']:,} entries: {format_bytes(r['nbytes'])}",
                        showarrow=False,
                        xanchor="left",
                        xshift=8,
                        font=dict(
                            size=12,
                            color=WIDTH_LINE_COLORS[
                                widths.index(r["width"]) % len(WIDTH_LINE_COLORS)
                            ],
                        ),
                    )
                )
            subtitle = (
                f"at max_batch_size {big:,}: {wide:,} vs {narrow:,} entries = {format_bytes(b)} vs "
                f"{format_bytes(a)}, x{ratio:.2f} the bytes ({wide}/{narrow})"
            )
    layout = base_layout(
        "The price of the wider row: host page-index table bytes",
        subtitle,
        height=560,
        annotations=annotations,
        margin=dict(l=80, r=170 if annotations else 30, t=80, b=130),
        **log_log_axes(("max_batch_size", "sequences"), ("table bytes", "pinned host int32")),
        # under the plot, clear of every curve
        legend=dict(orientation="h", yref="container", yanchor="bottom", y=0, x=0),
    )
    if rows:  # the points' span only: plotly's autorange would make room for the labels too
        sizes = [r["max_batch_size"] for r in rows]
        layout["xaxis"]["range"] = [math.log10(min(sizes)) - 0.1, math.log10(max(sizes)) + 0.1]
    return {"data": traces, "layout": layout}


table_price_figure = as_figure(table_price_spec)


# --- outcome map: one resize over pool sizes and context lengths ------------------------------


def outcome_map_spec(results: Iterable, *, title: str | None = None) -> dict:
    """Outcome of one resize for each (pool MiB, context) of ``kvlab.analysis.repro.sweep_repro``
    results: a scatter of squares coloured by outcome, log axes. One trace per outcome in
    ``("crash", "refused", "ok")``, always (empty ones included, without a legend entry), so
    widgets can update it."""
    results = [
        check_instance(f"results[{i}]", r, ReproResult)
        for i, r in enumerate(check_items("results", results, "ReproResult objects"))
    ]
    policies = sorted({r.policy for r in results})
    traces = []
    for outcome in ("crash", "refused", "ok"):
        mine = [r for r in results if r.outcome == outcome]
        hover = [
            f"pool {readout_mib(r.pool_bytes / (1 << 20))} MiB ({r.total_blocks:,} pages), "
            f"context {r.context:,}<br>needs {r.entries_needed:,} entries, row {r.max_blocks_per_seq:,}"
            f"<br>{OUTCOME_LABELS[outcome]}"
            for r in mine
        ]
        traces.append(
            dict(
                type="scatter",
                x=[r.pool_bytes / (1 << 20) for r in mine],
                y=[r.context for r in mine],
                mode="markers",
                name=f"{OUTCOME_LABELS[outcome]} ({len(mine):,})",
                showlegend=bool(mine),  # no legend entry for what is not there
                marker=dict(symbol="square", size=11, color=OUTCOME_COLORS[outcome]),
                hovertext=hover,
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    if title is None:
        title = f"One resize, every pool and context [{', '.join(policies)}]"
    layout = base_layout(
        title,
        "max_seq_len = context (the configured length), one sequence, seed geometry",
        height=460,
        **log_log_axes(("KV pool", "MiB"), ("context", "tokens")),
        legend=dict(orientation="h", yanchor="top", y=-0.22, x=0),
    )  # clear of the axis title
    return {"data": traces, "layout": layout}


outcome_map_figure = as_figure(outcome_map_spec)
