"""One resize against the pool and the page-index table (notebooks 02 and 03): the pool's page
map, the request's entries against the row and the pool, the table's picture, its price in host
bytes, and the outcome of one resize over every pool size and context length."""

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
    bar,
    base_layout,
    code_heatmap,
    foot_legend,
    format_bytes,
    hover,
    legend_below,
    legend_entry,
    lines_trace,
    log_log_axes,
    note,
    outcome_color,
    titled,
    upright,
)

#: Page states in the pool page map; "missing" pages are drawn in the outcome's colour.
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
#: The most rows (sequences) and arrows the page-index table's picture draws.
MAX_TABLE_SLOTS, MAX_TABLE_LINKS = 16, 256
_BARE_AXIS = dict(showgrid=False, showline=False, ticks="", title=None)
#: An arrow of the table's picture, from an entry of row 0 to its page.
_LINK = dict(xref="x", yref="y", axref="x", ayref="y", y=0.85, ay=3.0, text="", showarrow=True)
_LINK |= dict(arrowhead=2, arrowsize=0.8, arrowwidth=1, arrowcolor=ROW_COLOR)


def page_map_spec(
    total_blocks: int,
    needed_blocks: int,
    outcome: str | None,
    *,
    tokens_per_block: int = 32,
    title: str | None = None,
    max_cells: int = MAX_PAGE_CELLS,
) -> dict:
    """The pool's pages, then those the request needs beyond it, a grid coloured by state; past
    ``max_cells`` a cell stands for 2**k pages. Traces: a heatmap, a legend entry a state."""
    total_blocks, needed_blocks, tpb = int(total_blocks), int(needed_blocks), tokens_per_block
    pages = max(total_blocks, needed_blocks, 1)
    per_cell = 1
    while div_ceil(pages, per_cell) > max_cells:
        per_cell *= 2
    cols = 32 if div_ceil(pages, per_cell) <= 512 else 64
    rows = div_ceil(pages, per_cell * cols)
    held = "held" if outcome == "ok" else "wanted"

    def cell(first: int) -> tuple[int | None, str]:
        """The state's code and the hover of the cell whose first page is ``first``."""
        if first >= pages:
            return None, ""
        last = min(first + per_cell, pages) - 1
        state = "free" if first >= needed_blocks else "missing" if first >= total_blocks else held
        where = f"page {first:,}" if first == last else f"pages {first:,}-{last:,}"
        tokens = f"tokens {first * tpb:,}-{(last + 1) * tpb - 1:,}"
        return PAGE_STATES.index(state), f"{where} ({tokens})<br>{PAGE_STATE_LABELS[state]}"

    grid = [[cell(c * per_cell) for c in range(r * cols, (r + 1) * cols)] for r in range(rows)]
    z = [[code for code, _ in row] for row in grid]
    missing = outcome_color(outcome) if outcome not in (None, "ok") else NEUTRAL_COLOR
    colors = [PAGE_COLORS["free"], PAGE_COLORS["held"], PAGE_COLORS["wanted"], missing]
    text = [[words for _, words in row] for row in grid]
    heat = code_heatmap(z, text, colors, "pages", xgap=1, ygap=1, showlegend=False)
    shown = {code for row in z for code in row}
    legend = [
        legend_entry(PAGE_STATE_LABELS[state], color, show=code in shown)
        for code, (state, color) in enumerate(zip(PAGE_STATES, colors))
    ]
    beyond = needed_blocks - total_blocks
    scale = f"one cell = {per_cell:,} pages" if per_cell > 1 else "one cell = one page"
    subtitle = (
        f"pool {total_blocks:,} pages = {total_blocks * tpb:,} tokens; request "
        f"{needed_blocks:,} pages = {needed_blocks * tpb:,} tokens"
        + (f"; {beyond:,} pages beyond the pool" if beyond > 0 else "")
        + f" ({scale})"
    )
    ticks = range(0, rows, max(1, div_ceil(rows, 8)))
    # each line labelled with its first page: an axis title would outgrow a map of few lines
    bare = dict(_BARE_AXIS, constrain="domain")
    yaxis = dict(bare, autorange="reversed", scaleanchor="x")
    yaxis.update(tickvals=list(ticks), ticktext=[f"page {r * cols * per_cell:,}" for r in ticks])
    default = f"KV pool: {total_blocks:,} pages of {tpb} tokens; the request needs "
    layout = base_layout(
        titled(title, f"{default}{needed_blocks:,}"),
        subtitle,
        height=190 + rows * (19 if cols == 32 else 9.5),
        xaxis=dict(bare, range=[-0.5, cols - 0.5], side="top", tickfont=dict(size=10)),
        yaxis=yaxis,
        legend=legend_below(-0.02, font=dict(size=12)),
        margin=dict(l=70, r=50, t=100, b=50),  # r: room for the toolbar
    )
    return {"data": [heat, *legend], "layout": layout}


def _resize_verdict(needed: int, complete: int, width: int, pages: int) -> str:
    """What the native resize does with ``needed`` entries (``complete`` with the output): the
    row is checked first (it raises ValueError, which the outcome's label names), then the pool
    (False)."""
    if needed > width:
        return "more than the row holds: the resize raises before it looks at the pool"
    if needed > pages:
        return "fits the row, more than the pool: the resize returns False"
    if complete > width:
        return "its context fits, its output runs past the row: a later resize raises"
    if complete > pages:
        return (
            "its context fits the row and the pool, its output not the pool: a resize returns False"
        )
    return "fits the row and the pool"


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
    """The request's page-index entries (``with_output``: with its output) against the row's
    ``width`` and the pool's pages: three bars in one trace, dashed where row and pool end."""
    width, needed, total_blocks = int(width), int(needed), int(total_blocks)
    complete = needed if with_output is None else int(with_output)
    tpb = tokens_per_block
    row_label = f"page-index row [{policy}]" if policy else "page-index row"
    more = complete != needed
    labels = [
        f"request: {counted(needed, 'entry', 'entries')}"
        + (f" ({complete:,} with its output)" if more else ""),
        f"pool: {counted(total_blocks, 'page')}",
        f"{row_label}: {width:,}" if width else f"{row_label}: not built",
    ]
    verdict = _resize_verdict(needed, complete, width, total_blocks)
    hovers = [
        f"request: {needed:,} entries = ceil(context / {tpb}) = {needed * tpb:,} tokens"
        + (f"; {complete:,} entries with its output" if more else "")
        + f"<br>{verdict}",
        f"pool: {total_blocks:,} pages of {tpb} tokens = {total_blocks * tpb:,} tokens",
        f"row width (max_blocks_per_seq): {width:,} entries = {width * tpb:,} tokens",
    ]
    values = [needed, total_blocks, width]
    colors = [outcome_color(outcome), POOL_COLOR, ROW_COLOR]
    entries = bar(values, labels, "entries", colors, hovers, orientation="h", cliponaxis=False)
    shapes, annotations = [], []  # where the row and the pool end: none for an empty one
    for end, color, dash, top, words, y, anchor in (
        (width, ROW_COLOR, "dash", 2.5, "row ends", 2.5, "bottom"),
        (total_blocks, POOL_COLOR, "dot", 1.5, "pool ends", -0.5, "top"),
    ):
        if end:
            shapes.append(upright(end, color, dash, -0.5, top, yref="y"))
            annotations.append(note(f"{words}: {end:,}", end, y, color, yanchor=anchor))
    x_range = dict(range=[0, max(values) * 1.12 or 1], rangemode="tozero")
    if subtitle is None:  # what the resize would do; a caller whose engine never got there says so
        subtitle = f"{OUTCOME_LABELS.get(outcome or '', outcome or 'no outcome')}: {verdict}"
    layout = base_layout(
        titled(title, f"Page-index row: {needed:,} entries needed, {width:,} available"),
        subtitle,
        height=300,
        shapes=shapes,
        annotations=annotations,
        showlegend=False,
        bargap=0.35,
        xaxis=dict(title=dict(text=f"entries = pages of {tpb} tokens"), **x_range),
        yaxis=dict(title=None, automargin=True),
    )
    return {"data": [entries], "layout": layout}


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
    """The page-index table: ``slots`` rows of ``width`` entries above the pool's pages, row 0
    filled for a request of ``needed`` entries (entry i -> page 37 i mod pool: an illustration,
    not a run), entries past the row's end dotted in the crash colour, arrows for the first
    ``shown_links``; past 256 a cell stands for several. Traces: four legend entries."""
    width = check_int("width", width, low=1)
    total_blocks = check_int("total_blocks", total_blocks, low=1)
    needed = check_int("needed", needed)
    slots = check_int("slots", slots, low=1, high=MAX_TABLE_SLOTS)
    if dummy_slot is not None:
        dummy_slot = check_int("dummy_slot", dummy_slot, low=1, high=slots - 1)
    shown_links = check_int("shown_links", shown_links, high=MAX_TABLE_LINKS)
    tpb = check_int("tokens_per_block", tokens_per_block, low=1, high=65536)  # KVGeometry's range
    unit = max(1, div_ceil(max(width, needed, total_blocks), 256))  # entries or pages a cell
    width_c, needed_c, pool_c = (div_ceil(n, unit) for n in (width, needed, total_blocks))
    span = max(width_c, needed_c, pool_c)
    held = min(needed, width, total_blocks)  # entries of row 0 that point at a page
    raises = needed > width  # then no entry is filled: drawn as requested, not allocated
    fill = PAGE_COLORS["wanted" if raises else "held"]
    step = 37 if math.gcd(37, total_blocks) == 1 else 1
    pool_held = _cells_held(held, total_blocks, step, unit)
    crash = OUTCOME_COLORS["crash"]

    def rect(x0, x1, y0, fill, edge):
        return dict(type="rect", x0=x0, x1=x1, y0=y0, y1=y0 + 0.8, fillcolor=fill, line=edge)

    def cell(x, y, filled):
        return rect(
            x, x + 1, y, fill if filled else PAGE_COLORS["free"], dict(color="white", width=0.5)
        )

    def label(text, y):
        return note(text, -0.5, y, size=11, xanchor="right")

    shapes, annotations = [], []
    for slot in range(slots):
        shapes += [cell(c, 3.0 + slot, slot == 0 and c * unit < held) for c in range(width_c)]
        kind = " (request)" if slot == 0 else " (dummy)" if slot == dummy_slot else ""
        annotations.append(label(f"row {slot}{kind}", 3.4 + slot))
    if raises:
        dotted = dict(color=crash, width=1.5, dash="dot")
        shapes.append(rect(width_c, needed_c, 3.0, "rgba(204,51,17,0.18)", dotted))
        text = f"entries {width:,}..{needed - 1:,}: the row has none"
        middle = (width_c + needed_c) / 2
        annotations.append(note(text, middle, 3.4, crash, bgcolor="rgba(255,255,255,0.85)"))
    shapes += [cell(c, 0.0, c in pool_held) for c in range(pool_c)]
    annotations.append(label("KV pool", 0.4))
    annotations += [
        dict(_LINK, x=(entry * step) % total_blocks / unit + 0.5, ax=entry / unit + 0.5)
        for entry in range(min(shown_links, held))
    ]
    pool = f" pool: {total_blocks:,} pages"
    shapes.append(upright(width_c, ROW_COLOR, "dash", 2.8, 3.0 + slots, yref="y"))
    annotations += [
        note(f"row width: {width:,} entries", width_c, 3.0 + slots, ROW_COLOR, yanchor="bottom"),
        note(pool, pool_c, 0.8, POOL_COLOR, xanchor="left", yanchor="bottom"),
    ]
    filled = (
        "an entry the request would fill, and its page: none is taken, the ValueError comes first"
        if raises
        else "an entry holding a page number (int32), and its page"
    )
    past = f"entries the request needs past the row ({max(0, needed - width):,})"
    link = f"entry i -> the page of tokens i x {tpb} .. (i + 1) x {tpb} - 1"
    legend = [
        legend_entry(filled, fill, show=held > 0),
        legend_entry("an empty entry, or a free page", PAGE_COLORS["free"]),
        legend_entry(past, crash, show=raises),
        legend_entry(link, ROW_COLOR, show=held > 0),
    ]
    verdict = (
        "more entries than the row has: ValueError, before the pool is looked at"
        if raises
        else "every entry fits the row"
    )
    scale = f"; one cell = {unit:,} entries or pages" if unit > 1 else ""
    hidden = dict(_BARE_AXIS, showticklabels=False)
    layout = base_layout(
        "The page-index table: one row per sequence, one entry per page",
        f"the request needs {needed:,} entries (ceil(context / {tpb})); its row has {width:,}; "
        f"the pool has {total_blocks:,} pages: {verdict}{scale}",
        height=380,
        shapes=shapes,
        annotations=annotations,
        legend=legend_below(-0.05),
        xaxis=dict(hidden, range=[-0.2 * span, span * 1.04]),
        yaxis=dict(hidden, range=[-0.4, 3.6 + slots]),
        margin=dict(l=20, r=20, b=20),
    )
    return {"data": legend, "layout": layout}


def _cells_held(held: int, total_blocks: int, step: int, unit: int) -> set[int]:
    """The cells of ``unit`` pages holding page ``entry * step % total_blocks`` of an entry
    below ``held``, lap by lap around the pool (each lap an arithmetic progression)."""
    cells: set[int] = set()
    entry = 0
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


def repro_page_map_spec(result: ReproResult) -> dict:
    """:func:`page_map_spec` of a ``kvlab.analysis.repro.ReproResult``."""
    r = check_instance("result", result, ReproResult)
    return page_map_spec(
        r.total_blocks, r.entries_needed, r.outcome, tokens_per_block=r.tokens_per_block
    )


def repro_index_row_spec(result: ReproResult) -> dict:
    """:func:`index_row_spec` of a ``kvlab.analysis.repro.ReproResult``."""
    r = check_instance("result", result, ReproResult)
    row = (r.max_blocks_per_seq, r.entries_needed, r.total_blocks, r.outcome)
    return index_row_spec(*row, tokens_per_block=r.tokens_per_block, policy=r.policy)


def table_price_spec(
    rows: Sequence[Mapping],
    *,
    labels: Mapping[int, str] | None = None,
    compare: Sequence[int] | None = None,
) -> dict:
    """Host page-index table bytes against max_batch_size, a line per row width of
    ``page_index_price`` rows; ``compare = (narrow, wide)``: their ratio at the largest size."""
    subtitle = "bytes = (max_batch_size + 1 dummy) slots x 2 (K, V) x width x 4 B (int32)"
    big = max((r["max_batch_size"] for r in rows), default=0)
    at = {r["width"]: r for r in rows if r["max_batch_size"] == big}
    annotations = []
    if compare and compare[0] in at and compare[1] in at:
        narrow, wide = compare
        a, b = at[narrow]["nbytes"], at[wide]["nbytes"]
        widths = sorted({r["width"] for r in rows})
        # right of each line's last point, in the margin: clear of every curve
        for r in (at[narrow], at[wide]):
            text = f"{r['width']:,} entries: {format_bytes(r['nbytes'])}"
            color = _width_color(widths, r["width"])
            y = math.log10(r["nbytes"])
            annotations.append(note(text, math.log10(big), y, color, xanchor="left", xshift=8))
        subtitle = (
            f"at max_batch_size {big:,}: {wide:,} vs {narrow:,} entries = {format_bytes(b)} vs "
            f"{format_bytes(a)}, x{b / a:.2f} the bytes ({wide}/{narrow})"
        )
    layout = base_layout(
        "The price of the wider row: host page-index table bytes",
        subtitle,
        height=560,
        annotations=annotations,
        margin=dict(l=80, r=170 if annotations else 30, t=80, b=130),
        **log_log_axes(("max_batch_size", "sequences"), ("table bytes", "pinned host int32")),
        legend=foot_legend(),
    )
    if rows:  # the points' span only: plotly's autorange would make room for the labels too
        sizes = [math.log10(r["max_batch_size"]) for r in rows]
        layout["xaxis"]["range"] = [min(sizes) - 0.1, max(sizes) + 0.1]
    return {"data": width_lines(rows, "nbytes", labels, _price_hover), "layout": layout}


def _price_hover(r: Mapping) -> str:
    return (
        f"width {r['width']:,} entries, max_batch_size {r['max_batch_size']:,} "
        f"({r['slots']:,} slots)<br>{r['nbytes']:,} B = {format_bytes(r['nbytes'])}"
    )


def _width_color(widths: Sequence[int], width: int) -> str:
    return WIDTH_LINE_COLORS[widths.index(width) % len(WIDTH_LINE_COLORS)]


def width_lines(rows: Sequence[Mapping], column: str, labels, hover_of) -> list[dict]:
    """One line per row width of ``column`` against max_batch_size, named by its width and
    max_seq_len (and ``labels[width]``)."""
    labels = dict(labels or {})
    widths = sorted({r["width"] for r in rows})
    traces = []
    for width in widths:
        mine = sorted((r for r in rows if r["width"] == width), key=lambda r: r["max_batch_size"])
        name = f"{width:,} entries (max_seq_len {mine[0]['max_seq_len']:,})"
        name += f" - {labels[width]}" if width in labels else ""
        x, y = [r["max_batch_size"] for r in mine], [r[column] for r in mine]
        color = _width_color(widths, width)
        traces.append(lines_trace(x, y, name, color, [hover_of(r) for r in mine]))
    return traces


def outcome_map_spec(results: Iterable, *, title: str | None = None) -> dict:
    """The outcome of one resize for each (pool MiB, context) of
    ``kvlab.analysis.repro.sweep_repro`` results, log axes. Traces: crash, refused, ok."""
    results = [
        check_instance(f"results[{i}]", r, ReproResult)
        for i, r in enumerate(check_items("results", results, "ReproResult objects"))
    ]
    policies = sorted({r.policy for r in results})
    traces = []
    for outcome in ("crash", "refused", "ok"):
        mine = [r for r in results if r.outcome == outcome]
        hovers = [
            f"pool {readout_mib(r.pool_bytes / (1 << 20))} MiB ({r.total_blocks:,} pages), "
            f"context {r.context:,}<br>needs {r.entries_needed:,} entries, row "
            f"{r.max_blocks_per_seq:,}<br>{OUTCOME_LABELS[outcome]}"
            for r in mine
        ]
        marker = dict(symbol="square", size=11, color=OUTCOME_COLORS[outcome])
        name = f"{OUTCOME_LABELS[outcome]} ({len(mine):,})"
        x, y = [r.pool_bytes / (1 << 20) for r in mine], [r.context for r in mine]
        points = dict(type="scatter", mode="markers", marker=marker, **hover(hovers))
        traces.append(dict(points, x=x, y=y, name=name, showlegend=bool(mine)))
    layout = base_layout(
        titled(title, f"One resize, every pool and context [{', '.join(policies)}]"),
        "max_seq_len = context (the configured length), one sequence, seed geometry",
        height=460,
        **log_log_axes(("KV pool", "MiB"), ("context", "tokens")),
        legend=legend_below(-0.22),
    )
    return {"data": traces, "layout": layout}


page_map_figure = as_figure(page_map_spec)
index_row_figure = as_figure(index_row_spec)
page_table_figure = as_figure(page_table_spec)
repro_page_map = as_figure(repro_page_map_spec, "repro_page_map")
repro_index_row = as_figure(repro_index_row_spec, "repro_index_row")
table_price_figure = as_figure(table_price_spec)
outcome_map_figure = as_figure(outcome_map_spec)
