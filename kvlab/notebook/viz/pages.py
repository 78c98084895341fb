"""Figures: pure functions from kvlab results to plotly ``go.Figure`` objects.

Nothing here builds a widget or keeps state. Each figure comes twice: ``name_spec(...)`` returns
the figure as a plain dict (``{"data": [...], "layout": {...}}``) and ``name_figure(...)`` the
same as a ``go.Figure``. A panel (``kvlab.notebook.panel``) hands a spec to its figure's
``PlotView`` on every change (plain dicts skip plotly's validation of a whole new figure, which
costs more than the rest of an update). Every figure function returns the same traces (count,
order and types) whatever its input, so ``Plotly.react`` redraws a figure in place.

One colour per outcome across every notebook (:data:`OUTCOME_COLORS`), from Paul Tol's
colour-blind-safe "vibrant" and "high-contrast" sets; outcomes are also named in every label and
hover text, so colour is never the only cue.

:func:`show` displays a figure as a static bundle (plotly's JSON mime type, an HTML copy that
loads plotly.js from its CDN, and a plain-text line), so an executed notebook holds a figure even
when no frontend ran it (papermill) and nbconvert's HTML export shows it.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple

import plotly.graph_objects as go

from kvlab.analysis.deployment import CLAMP_PROPOSAL
from kvlab.analysis.presets import ENGINE_OUTCOMES, engine_outcome
from kvlab.core.arith import div_ceil
from kvlab.core.memory import GIB, MIB
from kvlab.notebook.tables import counted

#: One colour per outcome, in every notebook: crash red, stall orange, refused amber,
#: reject blue, ok green (bluish, so that it stays apart from red for red-green colour blindness).
OUTCOME_COLORS = {
    "crash": "#CC3311",
    "stall": "#EE7733",
    "refused": "#DDAA33",
    "reject": "#0077BB",
    "ok": "#009988",
}
#: What each outcome means, for legends and hover text.
OUTCOME_LABELS = {
    "crash": "crash (ValueError)",
    "stall": "stall (no progress)",
    "refused": "refused (resize returned False)",
    "reject": "rejected at admission",
    "ok": "ok",
}
#: Colour for "not applicable" (no pool, no outcome).
NEUTRAL_COLOR = "#BBBBBB"

#: Page states in the pool page map. "missing" pages are drawn in the outcome's colour.
PAGE_STATES = ("free", "held", "wanted", "missing")
PAGE_STATE_LABELS = {
    "free": "free page",
    "held": "held by the request",
    "wanted": "requested, not allocated",
    "missing": "requested beyond the pool (no such page)",
}
PAGE_COLORS = {"free": "#E8E8E8", "held": OUTCOME_COLORS["ok"], "wanted": "#88CCEE"}
#: Bars of the index-row figure that are not outcomes.
ROW_COLOR = "#555555"
POOL_COLOR = "#999999"

#: Widths the page map stays readable at; beyond this one cell stands for several pages.
MAX_PAGE_CELLS = 2048

FONT = dict(family="Inter, Helvetica, Arial, sans-serif", size=13)
FIGURE_WIDTH = 720


def outcome_color(outcome: Optional[str]) -> str:
    """The colour of an outcome; neutral grey for None or an unknown name."""
    return OUTCOME_COLORS.get(outcome or "", NEUTRAL_COLOR)


#: Characters of a 12 px subtitle line in a figure FIGURE_WIDTH wide (about 7 px a character).
SUBTITLE_CHARS = 96


def _wrap(text: str, chars: int) -> List[str]:
    """``text`` in lines of at most ``chars`` characters, broken between words."""
    lines: List[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _base_layout(title: str, subtitle: str = "", **extra) -> dict:
    """Shared look. No plotly template: resolving one costs ~10 ms a figure, too slow for a
    widget that redraws on every slider step, so the few settings that matter are explicit.
    The subtitle is 12 px, broken between words to the figure's width, below the title."""
    width = extra.get("width", FIGURE_WIDTH)
    lines = _wrap(subtitle, SUBTITLE_CHARS * width // FIGURE_WIDTH) if subtitle else []
    # The subtitle's lines go in the title's text (every plotly.js renders that alike; a
    # FigureWidget drew ``title.subtitle`` above the title), anchored to the figure's top.
    text = "<br>".join([title] + [f'<span style="font-size:12px;color:#444">{line}</span>'
                                  for line in lines])
    layout = dict(title=dict(text=text, x=0.0, xanchor="left", xref="container", y=1.0,
                             yref="container", yanchor="top", pad=dict(t=26), font=dict(size=16)),
                  font=FONT, template=None, width=FIGURE_WIDTH, paper_bgcolor="white",
                  plot_bgcolor="white", margin=dict(l=70, r=30, t=80, b=60),
                  hoverlabel=dict(font_size=12, bgcolor="white"))
    for axis in ("xaxis", "yaxis"):
        extra[axis] = {**AXIS_STYLE, **extra.get(axis, {})}
    layout.update(extra)
    layout["margin"] = {**layout["margin"],
                        "t": max(layout["margin"].get("t", 80), 64 + 17 * len(lines))}
    return layout


AXIS_STYLE = dict(gridcolor="#E6E9EF", linecolor="#B0B6BE", zeroline=False, ticks="outside",
                  tickcolor="#B0B6BE", automargin=True, ticklabeloverflow="allow",
                  separatethousands=True)  # tick labels as 1,000, like the text around them


def _log_log_axes(x: Tuple[str, str], y: Tuple[str, str]) -> dict:
    """Both axes logarithmic, each titled "quantity (unit, log scale)", labelled at powers of
    ten only (no bare minor digits); ``x`` and ``y`` are (quantity, unit) (the sweeps over
    sizes)."""
    return {f"{axis}axis": dict(title=dict(text=f"{name} ({unit}, log scale)"), type="log", dtick=1)
            for axis, (name, unit) in (("x", x), ("y", y))}


def _fmt_bytes(n: float) -> str:
    """1088 B, 272.5 KiB, 16.0 MiB: binary units, as the seed counts MiB."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _as_figure(spec_fn, name=None):
    """``name_figure`` from ``name_spec``: the same arguments, a go.Figure instead of the plain
    dict. Widgets use the ``_spec`` functions directly (no plotly validation on every update)."""

    @functools.wraps(spec_fn)
    def figure(*args, **kwargs) -> go.Figure:
        return go.Figure(spec_fn(*args, **kwargs))

    figure.__name__ = figure.__qualname__ = name or spec_fn.__name__.replace("_spec", "_figure")
    figure.__signature__ = inspect.signature(spec_fn).replace(return_annotation="go.Figure")
    figure.__doc__ = f"``{spec_fn.__name__}`` as a go.Figure (same arguments).\n\n{spec_fn.__doc__}"
    return figure


# --- the pool as a page map -------------------------------------------------------------------

def _page_state(page: int, total_blocks: int, needed_blocks: int, allocated: bool) -> str:
    if page < needed_blocks:
        if page >= total_blocks:
            return "missing"
        return "held" if allocated else "wanted"
    return "free"


def page_map_spec(total_blocks: int, needed_blocks: int, outcome: Optional[str], *,
                    tokens_per_block: int = 32, title: Optional[str] = None,
                    max_cells: int = MAX_PAGE_CELLS) -> dict:
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
    heat = dict(type="heatmap", z=z, text=text, hovertemplate="%{text}<extra></extra>", colorscale=colorscale,
                      zmin=-0.5, zmax=n - 0.5, showscale=False, xgap=1, ygap=1, name="pages",
                      showlegend=False)
    shown = {code for zrow in z for code in zrow if code is not None}
    legend = [dict(type="scatter", x=[None], y=[None], mode="markers", name=PAGE_STATE_LABELS[state],
                   marker=dict(symbol="square", size=12, color=color), hoverinfo="skip",
                   showlegend=codes[state] in shown)  # an entry only for what the map holds
              for state, color in zip(PAGE_STATES, colors)]
    beyond = max(0, needed_blocks - total_blocks)
    scale = f"one cell = {per_cell:,} pages" if per_cell > 1 else "one cell = one page"
    subtitle = (f"pool {total_blocks:,} pages = {total_blocks * tokens_per_block:,} tokens; request "
                f"{needed_blocks:,} pages = {needed_blocks * tokens_per_block:,} tokens"
                + (f"; {beyond:,} pages beyond the pool" if beyond else "") + f" ({scale})")
    tick_step = max(1, div_ceil(rows, 8))
    if title is None:
        title = (f"KV pool: {total_blocks:,} pages of {tokens_per_block} tokens; "
                 f"the request needs {needed_blocks:,}")
    layout = _base_layout(
        title, subtitle, height=190 + rows * (19 if cols == 32 else 9.5),
        xaxis=dict(showgrid=False, showline=False, ticks="", range=[-0.5, cols - 0.5],
                   constrain="domain", side="top", tickfont=dict(size=10), title=None),
        yaxis=dict(title=dict(text="first page of row"), showgrid=False, showline=False, ticks="",
                   autorange="reversed", scaleanchor="x", constrain="domain",
                   tickvals=list(range(0, rows, tick_step)),
                   ticktext=[f"{r * cols * per_cell:,}" for r in range(0, rows, tick_step)]),
        legend=dict(orientation="h", yanchor="top", y=-0.02, x=0, font=dict(size=12)),
        margin=dict(l=70, r=30, t=100, b=50))
    return {"data": [heat, *legend], "layout": layout}


# --- the page-index row: entries needed against entries available -----------------------------

def index_row_spec(width: int, needed: int, total_blocks: int, outcome: Optional[str], *,
                     tokens_per_block: int = 32, policy: Optional[str] = None,
                     title: Optional[str] = None, subtitle: Optional[str] = None) -> dict:
    """The request's page-index entries against the row's width and the pool's pages.

    Three horizontal bars in one trace (always one trace): the row (``width`` entries), the pool
    (``total_blocks`` pages) and the request (``needed`` entries, in the outcome's colour), with
    a dashed line where the row ends and where the pool ends. The native resize checks the row
    first: needed > width is the ValueError; then the pool: needed > pages is False.
    """
    width, needed, total_blocks = int(width), int(needed), int(total_blocks)
    tpb = tokens_per_block
    row_label = f"page-index row [{policy}]" if policy else "page-index row"
    labels = [f"request: {needed:,} entries", f"pool: {total_blocks:,} pages", f"{row_label}: {width:,}"]
    values = [needed, total_blocks, width]
    verdict = ("more than the row holds: ValueError" if needed > width else
               "fits the row, more than the pool: False" if needed > total_blocks else
               "fits the row and the pool")
    hovers = [f"request: {needed:,} entries = ceil(context / {tpb}) = {needed * tpb:,} tokens<br>{verdict}",
              f"pool: {total_blocks:,} pages of {tpb} tokens = {total_blocks * tpb:,} tokens",
              f"row width (max_blocks_per_seq): {width:,} entries = {width * tpb:,} tokens"]
    bar = dict(type="bar", y=labels, x=values, orientation="h",
                 marker=dict(color=[outcome_color(outcome), POOL_COLOR, ROW_COLOR]),
                 hovertext=hovers, hovertemplate="%{hovertext}<extra></extra>", name="entries",
                 cliponaxis=False)
    top = max(values) * 1.12 or 1
    shapes = [dict(type="line", x0=width, x1=width, y0=-0.5, y1=2.5, xref="x", yref="y",
                   line=dict(color=ROW_COLOR, dash="dash", width=2)),
              dict(type="line", x0=total_blocks, x1=total_blocks, y0=-0.5, y1=1.5, xref="x",
                   yref="y", line=dict(color=POOL_COLOR, dash="dot", width=2))]
    annotations = [dict(x=width, y=2.5, xref="x", yref="y", text=f"row ends: {width:,}",
                        showarrow=False, yanchor="bottom", font=dict(color=ROW_COLOR, size=12)),
                   dict(x=total_blocks, y=-0.5, xref="x", yref="y", text=f"pool ends: {total_blocks:,}",
                        showarrow=False, yanchor="top", font=dict(color=POOL_COLOR, size=12))]
    if title is None:
        title = f"Page-index row: {needed:,} entries needed, {width:,} available"
    if subtitle is None:  # what the resize would do; a caller whose engine never got there says so
        subtitle = f"{OUTCOME_LABELS.get(outcome, outcome or 'no outcome')}: {verdict}"
    layout = _base_layout(
        title, subtitle, height=300, shapes=shapes, annotations=annotations, showlegend=False,
        bargap=0.35,
        xaxis=dict(title=dict(text=f"entries = pages of {tpb} tokens"), range=[0, top],
                   rangemode="tozero"),
        yaxis=dict(title=None, automargin=True))
    return {"data": [bar], "layout": layout}


def page_table_spec(width: int, needed: int, total_blocks: int, *, slots: int = 3,
                    tokens_per_block: int = 32, shown_links: int = 6) -> dict:
    """What the page-index table is for: ``slots`` rows (one a sequence) of ``width`` entries
    above the pool's ``total_blocks`` pages. Entry i of a row holds the pool page of the
    sequence's tokens ``i * tokens_per_block`` to ``(i + 1) * tokens_per_block - 1``; arrows
    follow the first ``shown_links`` entries of row 0 to their pages (drawn scattered, as pages
    come back to the free list in any order: entry i holds page ``37 i mod total_blocks``,
    an illustration, not a run). A request of ``needed``
    entries: those past the row's end are drawn dotted in the crash colour, entries the row
    does not have (the native check refuses them before looking at the pool). Past 256, a cell
    stands for several entries or pages (the subtitle says how many). Traces: one
    (legend-only) per part, always four; the picture is shapes and annotations."""
    width, needed, total_blocks = int(width), int(needed), int(total_blocks)
    tpb = tokens_per_block
    unit = max(1, div_ceil(max(width, needed, total_blocks), 256))  # entries or pages a cell
    width_c, needed_c, pool_c = (div_ceil(n, unit) for n in (width, needed, total_blocks))
    span = max(width_c, needed_c, pool_c)
    shapes, annotations = [], []
    held = min(needed, width, total_blocks)  # entries of row 0 that point at a page
    for slot in range(slots):
        y = 3.0 + slot
        for cell in range(width_c):
            filled = slot == 0 and cell * unit < held
            shapes.append(dict(type="rect", x0=cell, x1=cell + 1, y0=y, y1=y + 0.8,
                               fillcolor=PAGE_COLORS["held"] if filled else PAGE_COLORS["free"],
                               line=dict(color="white", width=0.5)))
        annotations.append(dict(x=-0.5, y=y + 0.4, xref="x", yref="y", xanchor="right",
                                showarrow=False, text=f"row {slot}" + (" (request)" if slot == 0 else ""),
                                font=dict(size=11)))
    if needed > width:
        shapes.append(dict(type="rect", x0=width_c, x1=needed_c, y0=3.0, y1=3.8,
                           fillcolor="rgba(204,51,17,0.18)",
                           line=dict(color=OUTCOME_COLORS["crash"], width=1.5, dash="dot")))
        annotations.append(dict(x=(width_c + needed_c) / 2, y=3.4, xref="x", yref="y", showarrow=False,
                                text=f"entries {width:,}..{needed - 1:,}: the row has none",
                                font=dict(size=12, color=OUTCOME_COLORS["crash"]),
                                bgcolor="rgba(255,255,255,0.85)"))
    step = 37 if math.gcd(37, total_blocks) == 1 else 1
    pages_held = {(entry * step) % total_blocks for entry in range(held)}
    cells_held = {page // unit for page in pages_held}
    for cell in range(pool_c):
        used = cell in cells_held
        shapes.append(dict(type="rect", x0=cell, x1=cell + 1, y0=0.0, y1=0.8,
                           fillcolor=PAGE_COLORS["held"] if used else PAGE_COLORS["free"],
                           line=dict(color="white", width=0.5)))
    annotations.append(dict(x=-0.5, y=0.4, xref="x", yref="y", xanchor="right", showarrow=False,
                            text="KV pool", font=dict(size=11)))
    for entry in range(min(shown_links, held)):
        page = (entry * step) % total_blocks
        annotations.append(dict(x=page / unit + 0.5, y=0.85, ax=entry / unit + 0.5, ay=3.0, xref="x", yref="y",
                                axref="x", ayref="y", showarrow=True, arrowhead=2, arrowsize=0.8,
                                arrowwidth=1, arrowcolor=ROW_COLOR, text=""))
    shapes.append(dict(type="line", x0=width_c, x1=width_c, y0=2.8, y1=3.0 + slots, xref="x", yref="y",
                       line=dict(color=ROW_COLOR, dash="dash", width=2)))
    annotations.append(dict(x=width_c, y=3.0 + slots, xref="x", yref="y", yanchor="bottom", showarrow=False,
                            text=f"row width: {width:,} entries", font=dict(size=12, color=ROW_COLOR)))
    annotations.append(dict(x=pool_c, y=0.8, xref="x", yref="y", xanchor="left", yanchor="bottom",
                            showarrow=False, text=f" pool: {total_blocks:,} pages",
                            font=dict(size=12, color=POOL_COLOR)))
    legend = [dict(type="scatter", x=[None], y=[None], mode="markers", name=name, hoverinfo="skip",
                   marker=dict(symbol="square", size=12, color=color), showlegend=show)
              for name, color, show in (
                  ("an entry holding a page number (int32)", PAGE_COLORS["held"], held > 0),
                  ("an empty entry, or a free page", PAGE_COLORS["free"], True),
                  (f"entries the request needs past the row ({max(0, needed - width):,})",
                   OUTCOME_COLORS["crash"], needed > width),
                  ("entry i -> the page of tokens i x {} .. (i + 1) x {} - 1".format(tpb, tpb),
                   ROW_COLOR, held > 0))]
    verdict = ("more entries than the row has: ValueError, before the pool is looked at"
               if needed > width else "every entry fits the row")
    scale = f"; one cell = {unit:,} entries or pages" if unit > 1 else ""
    layout = _base_layout(
        "The page-index table: one row per sequence, one entry per page",
        f"the request needs {needed:,} entries (ceil(context / {tpb})); its row has {width:,}; the pool "
        f"has {total_blocks:,} pages: {verdict}{scale}", height=380, shapes=shapes, annotations=annotations,
        legend=dict(orientation="h", yanchor="top", y=-0.05, x=0),
        xaxis=dict(range=[-0.2 * span, span * 1.04], showgrid=False, showticklabels=False, ticks="",
                   showline=False),
        yaxis=dict(range=[-0.4, 3.6 + slots], showgrid=False, showticklabels=False, ticks="",
                   showline=False),
        margin=dict(l=20, r=20, b=20))
    return {"data": legend, "layout": layout}


page_table_figure = _as_figure(page_table_spec)


page_map_figure = _as_figure(page_map_spec)


index_row_figure = _as_figure(index_row_spec)


def repro_page_map_spec(result) -> dict:
    """:func:`page_map_spec` of a ``kvlab.analysis.repro.ReproResult``."""
    return page_map_spec(result.total_blocks, result.entries_needed, result.outcome,
                         tokens_per_block=result.tokens_per_block)


def repro_index_row_spec(result) -> dict:
    """:func:`index_row_spec` of a ``kvlab.analysis.repro.ReproResult``."""
    return index_row_spec(result.max_blocks_per_seq, result.entries_needed, result.total_blocks,
                          result.outcome, tokens_per_block=result.tokens_per_block,
                          policy=result.policy)


repro_page_map = _as_figure(repro_page_map_spec, "repro_page_map")
repro_index_row = _as_figure(repro_index_row_spec, "repro_index_row")


# --- the price of a wider table ----------------------------------------------------------------

#: Line colours for row widths: kept clear of the outcome colours (Tol "muted" set).
WIDTH_LINE_COLORS = ("#332288", "#AA4499", "#88CCEE", "#999933", "#555555", "#CC6677")


def table_price_spec(rows: Sequence[Mapping], *, labels: Optional[Mapping[int, str]] = None,
                       compare: Optional[Sequence[int]] = None) -> dict:
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
        name = f"{width:,} entries (max_seq_len {seq:,})" + (f" - {labels[width]}" if width in labels else "")
        hover = [f"width {width:,} entries, max_batch_size {r['max_batch_size']:,} "
                 f"({r['slots']:,} slots)<br>{r['nbytes']:,} B = {_fmt_bytes(r['nbytes'])}" for r in mine]
        traces.append(dict(type="scatter", x=[r["max_batch_size"] for r in mine], y=[r["nbytes"] for r in mine],
                                 mode="lines+markers", name=name, hovertext=hover,
                                 hovertemplate="%{hovertext}<extra></extra>",
                                 line=dict(color=WIDTH_LINE_COLORS[i % len(WIDTH_LINE_COLORS)], width=2.5)))
    annotations = []
    subtitle = "bytes = (max_batch_size + 1 dummy) slots x 2 (K, V) x width x 4 B (int32)"
    if compare:
        narrow, wide = compare
        big = max(r["max_batch_size"] for r in rows)
        at = {r["width"]: r for r in rows if r["max_batch_size"] == big}
        if narrow in at and wide in at:
            a, b = at[narrow]["nbytes"], at[wide]["nbytes"]
            ratio = b / a
            for r, side in ((at[narrow], "right"), (at[wide], "left")):
                annotations.append(dict(x=math.log10(big), y=math.log10(r["nbytes"]), xref="x",
                                        yref="y", text=f"{r['width']:,} entries: {_fmt_bytes(r['nbytes'])}",
                                        showarrow=True, arrowhead=2, ax=-60, ay=-25 if side == "left" else 25,
                                        font=dict(size=12)))
            subtitle = (f"at max_batch_size {big:,}: {wide:,} vs {narrow:,} entries = {_fmt_bytes(b)} vs "
                        f"{_fmt_bytes(a)}, x{ratio:.2f} the bytes ({wide}/{narrow})")
    layout = _base_layout(
        "The price of the wider row: host page-index table bytes", subtitle, height=460,
        annotations=annotations,
        **_log_log_axes(("max_batch_size", "sequences"), ("table bytes", "pinned host int32")),
        legend=dict(orientation="v", yanchor="top", y=0.98, x=0.02, bgcolor="rgba(255,255,255,0.8)"))
    return {"data": traces, "layout": layout}


table_price_figure = _as_figure(table_price_spec)


# --- outcome map: one resize over pool sizes and context lengths ------------------------------

def outcome_map_spec(results: Iterable, *, title: Optional[str] = None) -> dict:
    """Outcome of one resize for each (pool MiB, context) of ``kvlab.analysis.repro.sweep_repro``
    results: a scatter of squares coloured by outcome, log axes. One trace per outcome in
    ``("crash", "refused", "ok")``, always (empty ones included, without a legend entry), so
    widgets can update it."""
    results = list(results)
    policies = sorted({r.policy for r in results})
    traces = []
    for outcome in ("crash", "refused", "ok"):
        mine = [r for r in results if r.outcome == outcome]
        hover = [f"pool {r.pool_bytes / (1 << 20):g} MiB ({r.total_blocks:,} pages), "
                 f"context {r.context:,}<br>needs {r.entries_needed:,} entries, row {r.max_blocks_per_seq:,}"
                 f"<br>{OUTCOME_LABELS[outcome]}" for r in mine]
        traces.append(dict(type="scatter", x=[r.pool_bytes / (1 << 20) for r in mine], y=[r.context for r in mine],
                                 mode="markers", name=f"{OUTCOME_LABELS[outcome]} ({len(mine):,})",
                                 showlegend=bool(mine),  # no legend entry for what is not there
                                 marker=dict(symbol="square", size=11, color=OUTCOME_COLORS[outcome]),
                                 hovertext=hover, hovertemplate="%{hovertext}<extra></extra>"))
    if title is None:
        title = f"One resize, every pool and context [{', '.join(policies)}]"
    layout = _base_layout(
        title, "max_seq_len = context (the configured length), one sequence, seed geometry",
        height=460,
        **_log_log_axes(("KV pool", "MiB"), ("context", "tokens")),
        legend=dict(orientation="h", yanchor="top", y=-0.15, x=0))
    return {"data": traces, "layout": layout}


outcome_map_figure = _as_figure(outcome_map_spec)


# --- the scheduler over time: requests, pool pages, the stall detector --------------------------

#: Line colours of the timeline's non-outcome series (Tol "muted"; clear of the outcome colours).
TIMELINE_COLORS = {"running": "#332288", "waiting": "#AA4499", "suspended": "#88CCEE",
                   "used": "#999933", "free": "#DDDDDD"}
#: The timeline's traces, in order (always all six).
TIMELINE_SERIES = ("running", "waiting", "suspended", "used_blocks", "free_blocks",
                   "stalled_passes")
_TIMELINE_DOMAINS = ([0.70, 1.0], [0.37, 0.62], [0.0, 0.29])


def scheduler_timeline_spec(result, *, stall_limit: Optional[int] = None,
                            outcome: Optional[str] = None, title: Optional[str] = None,
                            subtitle: Optional[str] = None, stall_detector: bool = True) -> dict:
    """A run over time, in three panels sharing the step axis: requests (running, waiting,
    suspended), the pool (used and free pages, stacked to the pool's size) and the stall
    detector's counter of consecutive passes without progress, with the stall limit dashed; for
    a scheduler without a stall detector (``stall_detector=False``: vLLM's) the third panel
    counts the preemptions of each step instead.

    ``result`` is a ``kvlab.SimulationResult``. The step at which an error stopped the engine is
    marked in every panel in the outcome's colour (``outcome`` defaults to
    ``kvlab.analysis.presets.engine_outcome``). Always six scatter traces (:data:`TIMELINE_SERIES`);
    the suspended line, and its legend entry, only show when the run suspended anything."""
    trace = result.trace
    steps = trace.column("step")
    outcome = outcome if outcome is not None else engine_outcome(result)
    total = (trace[0].free_blocks + trace[0].used_blocks) if len(trace) else 0
    suspended = any(trace.column("suspended"))

    def line(name, column, axis, color, **extra):
        values = trace.column(column)
        return dict(type="scatter", x=steps, y=values, name=name, xaxis=f"x{axis}" if axis > 1 else "x",
                    yaxis=f"y{axis}" if axis > 1 else "y", mode="lines", line=dict(color=color, width=2, shape="hv"),
                    hovertemplate=f"step %{{x}}<br>{name}: %{{y}}<extra></extra>", **extra)

    data = [line("running", "running", 1, TIMELINE_COLORS["running"]),
            line("waiting", "waiting", 1, TIMELINE_COLORS["waiting"]),
            # drawn, with its legend entry, only when the run suspended anything (a run with no
            # host tier never does): no entry for a line that holds nothing
            line("suspended (host tier)", "suspended", 1, TIMELINE_COLORS["suspended"],
                 visible=suspended, showlegend=suspended),
            line("used pages", "used_blocks", 2, TIMELINE_COLORS["used"], stackgroup="pool"),
            line("free pages", "free_blocks", 2, "#AAAAAA", stackgroup="pool",
                 fillcolor=TIMELINE_COLORS["free"]),
            line("stalled passes", "stalled_passes", 3, OUTCOME_COLORS["stall"]) if stall_detector
            else line("preemptions", "num_recompute_paused", 3, OUTCOME_COLORS["stall"])]
    for trace_spec in data[3:5]:
        trace_spec["line"]["width"] = 1
    shapes, annotations = [], []
    lowest = ("stall detector: passes without progress" if stall_detector
              else "preemptions in the step (no stall detector)")
    for axis, (text, domain) in enumerate(zip(("requests", f"KV pool ({total:,} pages)", lowest),
                                              _TIMELINE_DOMAINS), start=1):
        annotations.append(dict(text=f"<b>{text}</b>", x=0, xref="paper", y=domain[1], yref="paper",
                                xanchor="left", yanchor="bottom", showarrow=False, font=dict(size=12)))
    if stall_limit is not None:
        shapes.append(dict(type="line", xref="x3 domain", x0=0, x1=1, yref="y3", y0=stall_limit,
                           y1=stall_limit, line=dict(color=OUTCOME_COLORS["stall"], dash="dash", width=1.5)))
        annotations.append(dict(text=f"stall limit {stall_limit:,}", xref="x3 domain", x=1, yref="y3",
                                y=stall_limit, xanchor="right", yanchor="bottom", showarrow=False,
                                font=dict(size=11, color=OUTCOME_COLORS["stall"])))
    error = getattr(result, "error", None)
    if error is not None and steps:
        color = outcome_color(outcome)
        shapes.append(dict(type="line", xref="x", x0=steps[-1], x1=steps[-1], yref="paper", y0=0, y1=1,
                           line=dict(color=color, width=2)))
        annotations.append(dict(text=f"{type(error).__name__} in pass {len(steps):,} (step {steps[-1]:,})",
                                xref="x", x=steps[-1],
                                yref="paper", y=1.0, xanchor="right", yanchor="bottom", showarrow=False,
                                font=dict(size=11, color=color)))
    if len(steps) <= 1:  # one pass: points, not lines, and why there is nothing over time
        for trace_spec in data:
            trace_spec["mode"] = "markers"
        # in the right half of the pool's panel, a few words a line: clear of the point (at
        # the centre of the step axis) and of the axes' labels on the left
        note = ("the run ended in its first pass" + (f" ({type(error).__name__})" if error is not None else "")
                + ": one point per panel, nothing to draw over time")
        annotations.append(dict(text="<br>".join(_wrap(note, 34)), xref="paper", x=1.0, xanchor="right",
                                yref="paper", y=sum(_TIMELINE_DOMAINS[1]) / 2, yanchor="middle",
                                align="left", showarrow=False, font=dict(size=12, color="#444"),
                                bgcolor="rgba(255,255,255,0.85)"))
    counts = {s: sum(1 for v in result.status.values() if v == s)
              for s in ("finished", "rejected", "waiting", "running")}
    if title is None:
        title = f"Scheduler timeline: {OUTCOME_LABELS.get(outcome, outcome or 'no outcome')}"
    if subtitle is None:
        subtitle = (f"{counted(len(steps), 'pass')}; " + ", ".join(f"{n:,} {s}" for s, n in counts.items() if n)
                    + (f"; stopped by {type(error).__name__}" if error is not None else ""))
    top = max(trace.column("stalled_passes" if stall_detector else "num_recompute_paused")
              + [stall_limit or 0, 1])
    axes = {}
    for axis, domain in enumerate(_TIMELINE_DOMAINS, start=1):
        suffix = "" if axis == 1 else str(axis)
        axes[f"xaxis{suffix}"] = dict(AXIS_STYLE, anchor=f"y{suffix}", domain=[0, 1],
                                      showticklabels=axis == 3, **({} if axis == 1 else {"matches": "x"}),
                                      **({"title": dict(text="scheduler iteration (step)")} if axis == 3 else {}))
        axes[f"yaxis{suffix}"] = dict(AXIS_STYLE, anchor=f"x{suffix}", domain=domain, rangemode="tozero")
    axes["yaxis"]["title"] = dict(text="requests")
    axes["yaxis2"].update(title=dict(text="pages"), range=[0, max(total, 1) * 1.05])
    axes["yaxis3"].update(title=dict(text="passes" if stall_detector else "requests"),
                          range=[0, top * 1.1])
    layout = _base_layout(title, subtitle, height=560, shapes=shapes, annotations=annotations,
                          # the legend at the figure's foot, under the step axis's title whatever
                          # the fonts (placed on the plot, a wider font ran it into the title)
                          legend=dict(orientation="h", yref="container", yanchor="bottom", y=0, x=0,
                                      traceorder="normal"),
                          margin=dict(l=70, r=30, t=90, b=90), **axes)
    return {"data": data, "layout": layout}


scheduler_timeline_figure = _as_figure(scheduler_timeline_spec)


#: What a request got in one pass (:func:`pass_spec`), and its colour.
PASS_RESULTS = {"scheduled": OUTCOME_COLORS["ok"], "refused": OUTCOME_COLORS["refused"],
                "suspended": TIMELINE_COLORS["suspended"], "waiting": NEUTRAL_COLOR,
                "crash": OUTCOME_COLORS["crash"], "finished": "#332288", "rejected": OUTCOME_COLORS["reject"]}


def pass_spec(rows: Sequence[Mapping], *, title: str, subtitle: str = "") -> dict:
    """One scheduling pass: for each request (``rows``: dicts with ``request``, ``asked``
    tokens, ``got`` tokens, ``result``, a key of :data:`PASS_RESULTS`, and ``why``), the tokens
    it asked for (outline) and got (filled, in the result's colour). Traces: two bars, always."""
    names = [r["request"] for r in rows]
    hover = [f"{r['request']}: asked {r['asked']:,} tokens, got {r['got']:,}<br>{r['result']}: {r['why']}"
             for r in rows]
    asked = dict(type="bar", orientation="h", y=names, x=[max(r["asked"], 1) for r in rows],
                 name="asked (outline)", text=[r["result"] for r in rows], textposition="outside",
                 cliponaxis=False, marker=dict(color="rgba(0,0,0,0)", line=dict(color="#555555", width=1.5)),
                 hovertext=hover, hovertemplate="%{hovertext}<extra></extra>")
    got = dict(type="bar", orientation="h", y=names, x=[r["got"] or None for r in rows],
               name="got (filled, by result)", marker=dict(color=[PASS_RESULTS[r["result"]] for r in rows]),
               hovertext=hover, hovertemplate="%{hovertext}<extra></extra>")
    top = max([1] + [r["asked"] for r in rows])
    layout = _base_layout(title, subtitle, height=230 + 36 * max(len(rows), 1), barmode="overlay",
                          legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1, xanchor="right"),
                          margin=dict(l=70, r=80, t=100, b=60),
                          xaxis=dict(title=dict(text="tokens this pass (log scale)"), type="log",
                                     dtick=1, range=[-0.5, math.log10(top) + 0.6]),
                          yaxis=dict(autorange="reversed", automargin=True))
    return {"data": [asked, got], "layout": layout}


pass_figure = _as_figure(pass_spec)


# --- the phase diagram: pool size x context length, one subplot per regime ----------------------



def phase_diagram_spec(pool_blocks: Sequence[int], context_lens: Sequence[int],
                       diagram: Mapping[str, Sequence[Sequence[int]]], *,
                       bytes_per_block: int = 65536, tokens_per_block: int = 32,
                       mark: Optional[tuple] = None, title: Optional[str] = None,
                       subtitle: Optional[str] = None) -> dict:
    """``kvlab.analysis.phase.phase_diagram`` as one heatmap per regime, side by side: x the pool (MiB,
    log2 ticks), y the context length (log2 ticks), each cell in its verdict's colour
    (:data:`OUTCOME_COLORS`; codes index :data:`ENGINE_OUTCOMES`). ``mark = (pool_blocks,
    context)`` puts a star on one point (the seed's) in every subplot. Traces: per regime a
    heatmap and a marker trace, then one legend entry per verdict."""
    pools = [int(p) for p in pool_blocks]
    contexts = [int(c) for c in context_lens]
    regimes = list(diagram)
    n = max(len(regimes), 1)
    gap = 0.04
    width = (1 - gap * (n - 1)) / n
    xs = [math.log2(p * bytes_per_block / (1 << 20)) for p in pools]
    ys = [math.log2(c) for c in contexts]
    colors = [OUTCOME_COLORS[v] for v in ENGINE_OUTCOMES]
    colorscale = []
    for i, color in enumerate(colors):
        colorscale += [[i / len(colors), color], [(i + 1) / len(colors), color]]
    data, axes, annotations = [], {}, []
    for k, regime in enumerate(regimes):
        grid = [[int(v) for v in row] for row in diagram[regime]]  # (pools, contexts)
        z = [[grid[i][j] for i in range(len(pools))] for j in range(len(contexts))]
        text = [[f"pool {pools[i] * bytes_per_block / (1 << 20):.4g} MiB ({pools[i]:,} pages = "
                 f"{pools[i] * tokens_per_block:,} tokens)<br>context {contexts[j]:,}<br>"
                 f"{regime}: {OUTCOME_LABELS[ENGINE_OUTCOMES[z[j][i]]]}"
                 for i in range(len(pools))] for j in range(len(contexts))]
        suffix = "" if k == 0 else str(k + 1)
        data.append(dict(type="heatmap", x=xs, y=ys, z=z, text=text, colorscale=colorscale, zmin=-0.5,
                         zmax=len(colors) - 0.5, showscale=False, name=regime,
                         hovertemplate="%{text}<extra></extra>", xaxis=f"x{suffix}", yaxis=f"y{suffix}"))
        mx, my = ([math.log2(mark[0] * bytes_per_block / (1 << 20))], [math.log2(mark[1])]) if mark else ([], [])
        data.append(dict(type="scatter", x=mx, y=my, mode="markers", name="the seed's point",
                         showlegend=k == 0 and bool(mark), xaxis=f"x{suffix}", yaxis=f"y{suffix}",
                         marker=dict(symbol="star", size=14, color="white", line=dict(color="black", width=1.5)),
                         hovertemplate="the seed's point<extra></extra>"))
        lo = k * (width + gap)
        xt = list(range(math.ceil(min(xs, default=0)), math.floor(max(xs, default=0)) + 1))
        yt = list(range(math.ceil(min(ys, default=0)), math.floor(max(ys, default=0)) + 1))
        axes[f"xaxis{suffix}"] = dict(AXIS_STYLE, domain=[lo, lo + width], anchor=f"y{suffix}",
                                      tickvals=xt[::2] if len(xt) > 8 else xt,
                                      ticktext=[f"{2 ** t:,}" for t in (xt[::2] if len(xt) > 8 else xt)],
                                      title=dict(text="KV pool (MiB)"), showgrid=False)
        axes[f"yaxis{suffix}"] = dict(AXIS_STYLE, anchor=f"x{suffix}", tickvals=yt,
                                      ticktext=[f"{2 ** t:,}" for t in yt], showgrid=False,
                                      showticklabels=k == 0,
                                      **({"title": dict(text="context length (tokens)")} if k == 0 else {}))
        counts = {v: sum(row.count(i) for row in grid) for i, v in enumerate(ENGINE_OUTCOMES)}
        annotations.append(dict(text=f"<b>{regime}</b><br><sup>" + ", ".join(
            f"{c:,} {v}" for v, c in counts.items() if c) + "</sup>", x=lo + width / 2, xref="paper",
            y=1.0, yref="paper", yanchor="bottom", showarrow=False, font=dict(size=12)))
    for verdict, color in zip(ENGINE_OUTCOMES, colors):
        data.append(dict(type="scatter", x=[None], y=[None], mode="markers", name=OUTCOME_LABELS[verdict],
                         marker=dict(symbol="square", size=12, color=color), hoverinfo="skip"))
    if title is None:
        title = "Phase diagram: one request alone, every pool size and context length"
    if subtitle is None:
        subtitle = f"{len(pools)} pools x {len(contexts)} contexts per regime (closed-form verdicts, kvlab.analysis.phase)"
    layout = _base_layout(title, subtitle, height=470, width=max(FIGURE_WIDTH, 330 * n),
                          annotations=annotations, legend=dict(orientation="h", yanchor="top", y=-0.18, x=0),
                          margin=dict(l=70, r=30, t=110, b=60), **axes)
    return {"data": data, "layout": layout}


phase_diagram_figure = _as_figure(phase_diagram_spec)


# --- policies side by side: goodput, waiting time, preemptions ---------------------------------

#: The panels of :func:`policy_bars_spec`: (column of kvlab.analysis.compare.outcome_rows, axis title).
POLICY_METRICS = (("goodput_tokens_per_step", "goodput (tokens / step)"),
                  ("mean_wait_steps", "mean wait (steps)"),
                  ("preemptions", "preemptions"))


def policy_bars_spec(rows: Sequence[Mapping], *, metrics: Sequence[tuple] = POLICY_METRICS,
                     title: Optional[str] = None, subtitle: Optional[str] = None) -> dict:
    """One bar per policy in each of the ``metrics`` panels (side by side), coloured by the
    engine's outcome and labelled with it. ``rows`` are ``kvlab.analysis.compare.outcome_rows`` dicts.
    Traces: one bar trace per metric, then one legend entry per outcome (always)."""
    policies = [r["policy"] for r in rows]
    outcomes = [r["outcome"] for r in rows]
    n = len(metrics)
    gap = 0.08
    width = (1 - gap * (n - 1)) / n
    data, axes, annotations = [], {}, []
    for k, (column, label) in enumerate(metrics):
        suffix = "" if k == 0 else str(k + 1)
        values = [r.get(column) for r in rows]
        values = [None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in values]
        text = [f"{v:.3g}" if isinstance(v, float) else ("" if v is None else str(v)) for v in values]
        hover = [f"{p}: {label} {t or 'n/a'}<br>outcome: {OUTCOME_LABELS.get(o, o)}<br>"
                 f"finished {r.get('finished')}, rejected {r.get('rejected')}, unfinished {r.get('unfinished')}"
                 for p, o, t, r in zip(policies, outcomes, text, rows)]
        data.append(dict(type="bar", x=policies, y=values, name=label, text=text, textposition="outside",
                         cliponaxis=False, marker=dict(color=[outcome_color(o) for o in outcomes]),
                         hovertext=hover, hovertemplate="%{hovertext}<extra></extra>", showlegend=False,
                         xaxis=f"x{suffix}", yaxis=f"y{suffix}"))
        lo = k * (width + gap)
        axes[f"xaxis{suffix}"] = dict(AXIS_STYLE, domain=[lo, lo + width], anchor=f"y{suffix}",
                                      tickangle=-90)  # upright: no name runs into its neighbour
        top = max([v for v in values if v is not None] + [0])
        axes[f"yaxis{suffix}"] = dict(AXIS_STYLE, anchor=f"x{suffix}", rangemode="tozero",
                                      range=[0, (top or 1) * 1.2])
        annotations.append(dict(text=f"<b>{label}</b>", x=lo + width / 2, xref="paper", y=1.0, yref="paper",
                                yanchor="bottom", showarrow=False, font=dict(size=12)))
    for outcome in ("crash", "stall", "reject", "ok"):
        data.append(dict(type="scatter", x=[None], y=[None], mode="markers", name=OUTCOME_LABELS[outcome],
                         marker=dict(symbol="square", size=12, color=OUTCOME_COLORS[outcome]),
                         hoverinfo="skip", showlegend=outcome in outcomes))
    if title is None:
        title = "Policies on one workload: goodput, waiting time, preemptions"
    if subtitle is None:
        subtitle = "bars coloured by the engine's outcome; goodput = finished requests' tokens per scheduler pass"
    # the legend above the panels: the upright policy names take the space below them
    layout = _base_layout(title, subtitle, height=500, annotations=annotations, barmode="group",
                          legend=dict(orientation="h", yanchor="bottom", y=1.08, x=0),
                          margin=dict(l=60, r=30, t=130, b=120), **axes)
    return {"data": data, "layout": layout}


policy_bars_figure = _as_figure(policy_bars_spec)

#: Dash styles that tell apart policies sharing an outcome colour.
POLICY_DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


def served_over_time_spec(runs: Mapping[str, object], seconds_per_iteration: float, *,
                          max_points: int = 600, title: Optional[str] = None,
                          subtitle: Optional[str] = None) -> dict:
    """Requests arrived (grey) and finished, per policy, against the clock of a replayed trace
    (steps times ``seconds_per_iteration``, in minutes); each policy's line in its outcome's
    colour and ends where its engine did (an X where a crash or a stall stopped it). ``runs``:
    policy -> SimulationResult of one workload. Traces: arrivals, then one line per policy (policies
    whose lines coincide share one legend entry)."""
    first = next(iter(runs.values()))
    arrivals = sorted(r.arrival_step for r in first.requests.values())
    scale = seconds_per_iteration / 60.0
    end = max([arrivals[-1]] + [run.end_step for run in runs.values()])
    stride = max(1, len(arrivals) // max_points)
    data = [dict(type="scatter", mode="lines", name="arrived", line=dict(color=NEUTRAL_COLOR, width=1.5),
                 x=[s * scale for s in arrivals[::stride]] + [end * scale],
                 y=list(range(1, len(arrivals) + 1, stride)) + [len(arrivals)],
                 hovertemplate="minute %{x:.1f}: %{y} arrived<extra></extra>")]
    for k, (policy, run) in enumerate(runs.items()):
        outcome = engine_outcome(run)
        steps = run.trace.steps
        stride = max(1, len(steps) // max_points)
        kept = list(steps[::stride]) + list(steps[-1:])
        stopped = run.error is not None  # an X where the engine stopped
        data.append(dict(type="scatter", mode="lines+markers",
                         name=f"{policy}: {OUTCOME_LABELS.get(outcome, outcome)}",
                         line=dict(color=outcome_color(outcome), width=2.5,
                                   dash=POLICY_DASHES[k % len(POLICY_DASHES)]),
                         marker=dict(symbol="x", size=[0] * (len(kept) - 1) + [14 if stopped else 0],
                                     color=outcome_color(outcome)),
                         x=[s.step * scale for s in kept], y=[s.finished_total for s in kept],
                         hovertemplate=f"{policy}: minute %{{x:.1f}}, %{{y}} finished<extra></extra>"))
    # an engine that stopped a moment into an hour is a speck at the origin: say where, in words
    stops = [(policy, run) for policy, run in runs.items() if run.error is not None]
    annotations = [dict(x=run.end_step * scale, y=run.trace.steps[-1].finished_total if run.trace.steps else 0,
                        xref="x", yref="y", showarrow=True, arrowhead=2, ax=50, ay=-150 + 30 * i,
                        bgcolor="rgba(255,255,255,0.9)",
                        text=f"{policy}: {OUTCOME_LABELS.get(engine_outcome(run), engine_outcome(run))} "
                             f"at minute {run.end_step * scale:.1f}",
                        font=dict(size=12, color=outcome_color(engine_outcome(run))), xanchor="left")
                   for i, (policy, run) in enumerate(stops)]
    # policies whose runs draw the same curve share one legend entry that names them all
    curves = {}
    for policy, line in zip(runs, data[1:]):
        curves.setdefault((line["name"].split(": ", 1)[1], tuple(line["x"]), tuple(line["y"])), []).append(
            (policy, line))
    for (label, _, _), same in curves.items():
        if len(same) > 1:
            same[0][1]["name"] = f"{', '.join(p for p, _ in same)}: {label} (one curve, the runs coincide)"
            for _, line in same[1:]:
                line["showlegend"] = False
    layout = _base_layout(title or "A replayed trace: requests served over time",
                          subtitle or f"one scheduler iteration = {seconds_per_iteration * 1000:g} ms; "
                                      "X: the engine stopped there",
                          height=420, xaxis=dict(title="minutes since the trace's first request",
                                                 rangemode="tozero"),
                          yaxis=dict(title="requests", rangemode="tozero"),
                          legend=dict(orientation="h", yanchor="top", y=-0.22, x=0),
                          margin=dict(l=70, r=30, t=80, b=110), annotations=annotations)
    return {"data": data, "layout": layout}


served_over_time_figure = _as_figure(served_over_time_spec)


# --- widgets: update in place; static display -------------------------------------------------

def static_bundle(fig: go.Figure, *, html: bool = True) -> dict:
    """A display bundle that needs no widget frontend: plotly's JSON mime type (JupyterLab,
    VS Code), optionally an HTML copy that loads plotly.js from its CDN (nbconvert's HTML
    export), and one plain-text line."""
    fig = go.Figure(fig)
    bundle = {"application/vnd.plotly.v1+json": fig.to_plotly_json(),
              "text/plain": f"<Figure: {figure_title(fig)}>"}
    if html:
        bundle["text/html"] = figure_html(fig)
    return bundle


def figure_html(fig: go.Figure) -> str:
    """The figure as an HTML fragment (plotly.js from its CDN)."""
    return go.Figure(fig).to_html(include_plotlyjs="cdn", full_html=False,
                                  config={"displaylogo": False, "responsive": True})


def figure_title(fig: go.Figure) -> str:
    """The figure's title without its subtitle or markup."""
    return (fig.layout.title.text or "").split("<br>")[0]


def figure_text(fig) -> str:
    """The figure's title and subtitle as plain text (markup removed, lines joined by spaces);
    ``fig`` is a go.Figure or a spec."""
    text = (fig["layout"]["title"]["text"] if isinstance(fig, dict) else fig.layout.title.text) or ""
    return re.sub(r"<[^>]+>", "", text.replace("<br>", " "))


def show(fig: go.Figure) -> None:
    """Display a figure statically (see :func:`static_bundle`), in Jupyter or under papermill."""
    from IPython.display import display

    display(static_bundle(fig), raw=True)


# --- multi-rank (notebook 01): per-rank memory budgets and the requests against the pool ----------

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


def _budget_stack(x: Sequence[str], budgets: Sequence, pool_bytes: Sequence[int],
                  lost_bytes: Sequence[int], state_bytes: Sequence[int] = ()) -> list:
    """The 8 stacked bar traces of :data:`BUDGET_PARTS`, one bar per ``x``: each budget's parts,
    the pool built, a hybrid's recurrent-state slots, the quota the MIN took away, and the rest
    of the GPU unused (a part that is zero in every bar, such as the MIN's share on one GPU or
    the slots of an attention-only model, has no legend entry)."""
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
        values["unused"].append(max(0, b.total_bytes - b.peak_memory_bytes - pool - state - lost) / GIB)
    traces = []
    for key, label, color in BUDGET_PARTS:
        hover = [f"{xi}: {label} {v:.1f} GiB" for xi, v in zip(x, values[key])]
        traces.append(dict(type="bar", x=list(x), y=values[key], name=label, marker=dict(color=color),
                           hovertext=hover, hovertemplate="%{hovertext}<extra></extra>",
                           showlegend=any(values[key])))  # no entry for a part no bar has
    return traces


def rank_budget_spec(ranks: Sequence, *, title: Optional[str] = None,
                     state_bytes: Sequence[int] = ()) -> dict:
    """Stacked bars, one per rank, of what its GPU memory goes to (GiB): weights, MoE workspace,
    activation peak, non-torch memory, the KV pool it built after the MIN all-reduce, the KV
    quota the MIN took away (its own quota minus the pool) and the unused headroom.

    ``ranks``: ``kvlab.run.rank.RankResult`` (or ``kvlab.analysis.rank_plan.RankPlan``) objects;
    ``state_bytes``: each rank's recurrent-state slots (a hybrid's, beside its pool).
    Traces: one bar per part, always 8.
    """
    lost = [(r.local_blocks - r.blocks) * (r.quota_bytes // r.blocks if r.blocks else 0)
            for r in ranks]  # whole blocks the MIN took away
    traces = _budget_stack([f"rank {r.rank}" for r in ranks], [r.budget for r in ranks],
                           [r.quota_bytes for r in ranks], lost, state_bytes)
    own = [r.local_quota_bytes / GIB for r in ranks]
    subtitle = (f"own KV quotas {min(own):.1f}-{max(own):.1f} GiB; after the MIN every rank's pool is "
                f"{', '.join(f'{p:,}' for p in sorted({r.blocks for r in ranks}))} blocks"
                if ranks else "no ranks")
    layout = _base_layout(
        title or f"Per-rank memory: the MoE workspace shrinks the KV pool ({len(ranks)} ranks)", subtitle,
        barmode="stack", height=460, bargap=0.15,
        xaxis=dict(title=None, tickangle=-45 if len(ranks) > 8 else 0),
        yaxis=dict(title=dict(text="GiB per GPU")),
        legend=dict(orientation="h", yanchor="top", y=-0.2, x=0, font=dict(size=11)))
    return {"data": traces, "layout": layout}


rank_budget_figure = _as_figure(rank_budget_spec)


def request_fit_spec(requests: Sequence[Mapping], *, capacity_tokens: int, row_tokens: int,
                     title: Optional[str] = None, subtitle: Optional[str] = None) -> dict:
    """Each request's tokens (prompt + new) against the pool's capacity and the page-index
    row's span (width x tokens_per_block), coloured by its outcome. ``requests``: dicts with
    ``id``, ``tokens``, ``outcome`` (a key of :data:`OUTCOME_COLORS`) and optional ``rank``.
    Traces: one bar trace, then two legend entries naming the limits (drawn as full-width
    lines: dotted the pool, dashed the row), so the two stay apart even when they coincide."""
    ids = [str(r["id"]) for r in requests]
    tokens = [int(r["tokens"]) for r in requests]
    outcomes = [r.get("outcome") for r in requests]
    hover = [f"{r['id']}" + (f" on rank {r['rank']}" if r.get("rank") is not None else "")
             + f": {int(r['tokens']):,} tokens<br>{OUTCOME_LABELS.get(r.get('outcome'), 'no outcome')}"
             for r in requests]
    bar = dict(type="bar", x=ids, y=tokens, marker=dict(color=[outcome_color(o) for o in outcomes]),
               hovertext=hover, hovertemplate="%{hovertext}<extra></extra>", name="requests",
               showlegend=False)
    limits = (("pool", capacity_tokens, POOL_COLOR, "dot", "pool holds"),
              ("row", row_tokens, ROW_COLOR, "dash", "row spans"))
    shapes = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=value, y1=value,
                   line=dict(color=color, dash=dash, width=2)) for _, value, color, dash, _ in limits]
    legend = [dict(type="scatter", x=[None], y=[None], mode="lines", name=f"{words} {value:,} tokens",
                   line=dict(color=color, dash=dash, width=2), hoverinfo="skip")
              for _, value, color, dash, words in limits]
    crashes = sum(1 for o in outcomes if o == "crash")
    if subtitle is None:
        subtitle = (f"{crashes} request(s) beyond the row: ValueError" if crashes
                    else "no request beyond the row")
    layout = _base_layout(
        title or "Requests against the pool and the page-index row", subtitle, height=400,
        shapes=shapes, bargap=0.3, legend=dict(orientation="h", yanchor="top", y=-0.12, x=0),
        xaxis=dict(title=None, type="category"),
        yaxis=dict(title=dict(text="tokens (prompt + new, log scale)"), type="log", dtick=1))
    return {"data": [bar, *legend], "layout": layout}


request_fit_figure = _as_figure(request_fit_spec)


# --- recurrent-state residency (notebook 05): the review's findings, the quota's split ----------
# Merged TensorRT-LLM raises when the recurrent-state slots do not fit; PR #17261's clamp (closed
# without merging) and PR #18985's feasible max_batch_size default (open) are proposals.

#: Bug and fix bars of :func:`review_findings_spec`.
BUG_FIX_COLORS = {"bug": OUTCOME_COLORS["crash"], "fix": OUTCOME_COLORS["ok"]}


def review_findings_spec(runs: Sequence, *, title: Optional[str] = None) -> dict:
    """One panel per review finding of PR #17261 (a proposal, closed without merging), its
    metrics as grouped bars, bug beside fix. ``runs``: ``kvlab.case_studies.FindingRun`` objects (each
    finding with bug=True and bug=False). Traces: two bar traces (bug, fix) per finding present."""
    findings = sorted({r.finding for r in runs})
    n = max(len(findings), 1)
    gap = 0.08
    width = (1 - gap * (n - 1)) / n
    data, axes, annotations = [], {}, []
    for k, finding in enumerate(findings):
        suffix = "" if k == 0 else str(k + 1)
        lo = k * (width + gap)
        mine = sorted((r for r in runs if r.finding == finding), key=lambda r: not r.bug)
        top = max([1] + [v for r in mine for _, v in r.metrics if v is not None])
        for run in mine:
            labels = [m[0] for m in run.metrics]
            values = [m[1] for m in run.metrics]
            hover = [f"finding {finding}, {run.label}: {lab} = "
                     f"{'None (unbounded)' if v is None else v}<br>"
                     f"{OUTCOME_LABELS.get(run.outcome, run.outcome)}" for lab, v in zip(labels, values)]
            # a cap of None (no bound) is a hatched bar to the top, labelled, never a bar of 0
            data.append(dict(type="bar", x=labels, y=[top if v is None else v for v in values],
                             name=run.label, textposition="outside", cliponaxis=False,
                             text=["None: unbounded" if v is None else str(v) for v in values],
                             constraintext="none",  # whole above its narrow bar, not shrunk to its width
                             legendgroup=run.label, showlegend=k == 0,
                             marker=dict(color=BUG_FIX_COLORS[run.label], pattern=dict(
                                 shape=["/" if v is None else "" for v in values], fillmode="overlay",
                                 fgcolor="white")),
                             hovertext=hover, hovertemplate="%{hovertext}<extra></extra>",
                             xaxis=f"x{suffix}", yaxis=f"y{suffix}"))
        axes[f"xaxis{suffix}"] = dict(AXIS_STYLE, domain=[lo, lo + width], anchor=f"y{suffix}", tickangle=-30)
        axes[f"yaxis{suffix}"] = dict(AXIS_STYLE, anchor=f"x{suffix}", rangemode="tozero",
                                      range=[0, (top or 1) * 1.25])
        annotations.append(dict(text=f"<b>finding {finding}</b>", x=lo + width / 2, xref="paper", y=1.0,
                                yref="paper", yanchor="bottom", showarrow=False, font=dict(size=12)))
    layout = _base_layout(title or "The review findings of PR #17261's clamp (a proposal): bug vs fix",
                          "1: caps and first chunks admitted per rank (hatched: None, unbounded); "
                          "2: disagg inits admitted in one pass; 3: B's chunks scheduled vs stalled passes",
                          height=440, annotations=annotations, barmode="group",
                          legend=dict(orientation="h", yanchor="top", y=-0.3, x=0),
                          margin=dict(l=60, r=30, t=100, b=60), **axes)
    return {"data": data, "layout": layout}


review_findings_figure = _as_figure(review_findings_spec)

#: The parts of a quota in :func:`residency_stack_spec`, bottom to top.
RESIDENCY_PARTS = (
    ("resident", "resident state slots", "#332288"),
    ("dummies", "dummy slots (CUDA-graph padding)", "#88CCEE"),
    ("pages", "attention pages", OUTCOME_COLORS["ok"]),
    ("unused", "unused", "#EEEEEE"),
)


def residency_stack_spec(split: Mapping, quota_bytes: int, *, title: Optional[str] = None,
                         subtitle: str = "") -> dict:
    """Stacked bars (GiB) of what the quota goes to under merged residency and under PR #17261's
    clamp (a proposal): resident slots, dummy slots, attention pages, unused; the quota as a
    dashed line. ``split``: ``kvlab.analysis.mamba_residency.residency_bytes(plan)``. Traces: always 4 bars."""
    gib = GIB
    x = ["merged" + ("" if split["raw_fits"] else " (raises)"),
         "PR #17261 clamp (proposal)"]
    data = []
    for key, label, color in RESIDENCY_PARTS:
        values = [split["raw"][key] / gib, split["clamped"][key] / gib]
        hover = [f"{xi}: {label} {v:.2f} GiB" for xi, v in zip(x, values)]
        # the amounts in the legend: a part too thin to see in the bars is still named and sized
        data.append(dict(type="bar", x=x, y=values, name=f"{label}: {values[0]:.2f} | {values[1]:.2f} GiB",
                         marker=dict(color=color),
                         hovertext=hover, hovertemplate="%{hovertext}<extra></extra>"))
    q = quota_bytes / gib
    raw_total = sum(split["raw"][k] for k in ("resident", "dummies", "pages")) / gib
    shapes = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=q, y1=q,
                   line=dict(color=OUTCOME_COLORS["crash"], dash="dash", width=2))]
    annotations = [dict(xref="paper", x=1, y=q, yref="y", xanchor="right", yanchor="bottom",
                        showarrow=False, text=f"quota {q:.2f} GiB",
                        font=dict(color=OUTCOME_COLORS["crash"], size=12))]
    layout = _base_layout(title or "Recurrent-state slots vs attention pages vs the quota", subtitle,
                          barmode="stack", height=420, bargap=0.35, shapes=shapes,
                          annotations=annotations,
                          yaxis=dict(title=dict(text="GiB"), range=[0, max(q, raw_total) * 1.12]),
                          legend=dict(orientation="h", yanchor="top", y=-0.15, x=0, font=dict(size=11)))
    return {"data": data, "layout": layout}


residency_stack_figure = _as_figure(residency_stack_spec)

#: Bars of :func:`residency_proposals_spec`: served at once, and queued.
PROPOSAL_PARTS = (("resident", "served at once (a state slot each)", "#332288"),
                  ("waiting", "waiting in the queue", "#BBBBBB"))


def residency_proposals_spec(rows: Sequence[Mapping], *, title: Optional[str] = None,
                             subtitle: str = "") -> dict:
    """One stacked bar per answer (``kvlab.analysis.mamba_residency.proposal_rows``): of the concurrent requests,
    how many are served at once and how many wait; an answer that raises at construction has
    no bar and says so. Traces: always 2 bars (served, waiting)."""
    import re

    status = [re.sub(r", PR #\d+", "", r["status"]) for r in rows]  # the label names the PR
    x = [f"<b>{r['label']}</b><br><i>{st}</i><br>max_batch_size {r['max_batch_size']}"
         for r, st in zip(rows, status)]
    data = []
    for key, label, color in PROPOSAL_PARTS:
        values = [r[key] for r in rows]
        hover = [f"{r['label']} ({r['status']}): {label} {v}" for r, v in zip(rows, values)]
        data.append(dict(type="bar", x=x, y=values, name=label, marker=dict(color=color),
                         text=[str(v) if v else "" for v in values], textposition="inside",
                         insidetextanchor="middle", hovertext=hover,
                         hovertemplate="%{hovertext}<extra></extra>"))
    top = max([r["resident"] + r["waiting"] for r in rows] + [1])
    annotations = [dict(x=xi, y=0, xref="x", yref="y", yanchor="bottom", showarrow=False,
                        text="ValueError at<br>construction:<br>nothing served",
                        font=dict(color=OUTCOME_COLORS["crash"], size=12))
                   for xi, r in zip(x, rows) if r["outcome"] == "crash"]
    layout = _base_layout(title or "Merged code raises; what each proposal would serve", subtitle,
                          barmode="stack", height=480, bargap=0.3, annotations=annotations,
                          xaxis=dict(type="category", tickangle=0, tickfont=dict(size=11)),
                          yaxis=dict(title=dict(text="concurrent requests"), range=[0, top * 1.1]),
                          legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1,
                                      xanchor="right", traceorder="normal", font=dict(size=11)),
                          margin=dict(l=70, r=30, t=110, b=90))
    return {"data": data, "layout": layout}


residency_proposals_figure = _as_figure(residency_proposals_spec)


# --- measurements on a device (kvlab.analysis.measurements) ----------------------------------------------

#: Bars of :func:`paged_read_spec`: the gather through the table, and the plain copy.
READ_COLORS = {"gather": "#332288", "copy": "#999999"}


def _on(device: str) -> str:
    """The title's tail for figures measured on a device."""
    return f", measured on {device}" if device else ""


def table_copy_spec(rows: Sequence[Mapping], *, device: str = "",
                    labels: Optional[Mapping[int, str]] = None) -> dict:
    """Per-step host-to-device copy time of the page-index table against max_batch_size, one
    line per row width (log axes). ``rows``: ``kvlab.analysis.measurements.page_index_copy`` dicts;
    ``labels`` names widths (e.g. ``{68: "clamped", 260: "configured"}``). Traces: one per width."""
    labels = dict(labels or {})
    widths = sorted({r["width"] for r in rows})
    traces = []
    for i, width in enumerate(widths):
        mine = sorted((r for r in rows if r["width"] == width), key=lambda r: r["max_batch_size"])
        name = (f"{width:,} entries (max_seq_len {mine[0]['max_seq_len']:,})"
                + (f" - {labels[width]}" if width in labels else ""))
        hover = [f"width {width:,}, max_batch_size {r['max_batch_size']:,} ({r['slots']:,} slots)<br>"
                 f"{_fmt_bytes(r['nbytes'])} a step in {r['median_us']:,.1f} us ({r['gb_per_s']:.2f} GB/s)"
                 for r in mine]
        traces.append(dict(type="scatter", x=[r["max_batch_size"] for r in mine],
                           y=[r["median_us"] for r in mine], mode="lines+markers", name=name,
                           hovertext=hover, hovertemplate="%{hovertext}<extra></extra>",
                           line=dict(color=WIDTH_LINE_COLORS[i % len(WIDTH_LINE_COLORS)], width=2.5)))
    subtitle = "pinned int32 [slots, 2, width] copied with non_blocking=True; median of the steps"
    if len(widths) > 1:
        big = max(r["max_batch_size"] for r in rows)
        at = {r["width"]: r for r in rows if r["max_batch_size"] == big}
        lo, hi = at.get(widths[0]), at.get(widths[-1])
        if lo and hi:
            subtitle = (f"at max_batch_size {big:,}: {widths[-1]:,} entries {_fmt_bytes(hi['nbytes'])} in "
                        f"{hi['median_us']:,.1f} us vs {widths[0]:,} entries {_fmt_bytes(lo['nbytes'])} "
                        f"in {lo['median_us']:,.1f} us")
    layout = _base_layout(
        f"The page-index table's copy to the device, each step{_on(device)}", subtitle, height=460,
        **_log_log_axes(("max_batch_size", "sequences"), ("host-to-device copy per step", "us")),
        legend=dict(orientation="v", yanchor="top", y=0.98, x=0.02, bgcolor="rgba(255,255,255,0.8)"))
    return {"data": traces, "layout": layout}


table_copy_figure = _as_figure(table_copy_spec)


def paged_read_spec(rows: Sequence[Mapping], *, device: str = "") -> dict:
    """Read bandwidth of a gather of pages through a shuffled page-index row beside a plain copy
    of the same bytes, by page size (grouped bars, GB/s). ``rows``:
    ``kvlab.analysis.measurements.paged_read`` dicts. Traces: always 2 bars (gather, copy)."""
    x = [_fmt_bytes(r["page_bytes"]) for r in rows]
    data = []
    for side, label in (("gather", "gather through the table"), ("copy", "plain copy")):
        values = [r[f"{side}_gb_per_s"] for r in rows]
        hover = [f"pages of {xi}: {label} {v:,.0f} GB/s ({r['num_pages']:,} pages, "
                 f"{_fmt_bytes(r['nbytes'])})" for xi, v, r in zip(x, values, rows)]
        data.append(dict(type="bar", x=x, y=values, name=label, marker=dict(color=READ_COLORS[side]),
                         text=[f"{v:,.0f}" for v in values], textposition="outside", cliponaxis=False,
                         hovertext=hover, hovertemplate="%{hovertext}<extra></extra>"))
    ratios = [r["gather_vs_copy"] for r in rows]
    subtitle = (f"the gather reads at {min(ratios):.0%} to {max(ratios):.0%} of the copy's bandwidth"
                if ratios else "no measurement")
    layout = _base_layout(
        f"Paged read vs plain copy{_on(device)}", subtitle, height=420, barmode="group",
        xaxis=dict(title=dict(text="page size"), type="category"),
        yaxis=dict(title=dict(text="GB/s of bytes read"), rangemode="tozero"),
        legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))
    return {"data": data, "layout": layout}


paged_read_figure = _as_figure(paged_read_spec)


def pool_allocation_spec(rows: Sequence[Mapping], *, device: str = "") -> dict:
    """Time to allocate the pool's storage (``torch.empty``, synchronized, cold) against its
    size, log axes. ``rows``: ``kvlab.analysis.measurements.pool_allocation`` dicts. Traces: always 1."""
    rows = sorted(rows, key=lambda r: r["nbytes"])
    hover = [f"{_fmt_bytes(r['nbytes'])} ({r['num_blocks']:,} pages of {_fmt_bytes(r['bytes_per_block'])}): "
             f"{r['median_ms']:,.2f} ms" for r in rows]
    trace = dict(type="scatter", x=[r["nbytes"] / GIB for r in rows], y=[r["median_ms"] for r in rows],
                 mode="lines+markers", name="torch.empty of the pool", hovertext=hover,
                 hovertemplate="%{hovertext}<extra></extra>", line=dict(color=OUTCOME_COLORS["ok"], width=2.5))
    layout = _base_layout(
        f"Allocating the KV pool{_on(device)}", "median of cold allocations (allocator cache emptied first)",
        height=400, showlegend=False,
        **_log_log_axes(("pool size", "GiB"), ("allocation time", "ms")))
    return {"data": [trace], "layout": layout}


pool_allocation_figure = _as_figure(pool_allocation_spec)


def pool_vs_workspace_spec(rows: Sequence[Mapping], *, device: str = "") -> dict:
    """Stacked bars, one per MoE workspace size, of one GPU's memory as measured and the KV pool
    allocated after it (GiB). ``rows``: ``kvlab.core.memory.pool_vs_workspace`` dicts. Traces: the 8
    of :data:`BUDGET_PARTS` (nothing is lost to a MIN on one GPU)."""
    from kvlab.core.memory import MemoryBudget

    budgets = [MemoryBudget(total_bytes=r["total_bytes"], weights_bytes=r["weights_bytes"],
                            workspace_bytes=r["measured_workspace_bytes"],
                            activation_peak_bytes=r["activation_peak_bytes"],
                            non_torch_bytes=r["non_torch_bytes"]) for r in rows]
    traces = _budget_stack([f"{r['workspace_bytes'] / GIB:g} GiB" for r in rows], budgets,
                           [r["pool_bytes_allocated"] for r in rows], [0] * len(rows))
    if rows:
        first, last = rows[0], rows[-1]
        subtitle = (f"pool {first['pool_blocks']:,} -> {last['pool_blocks']:,} blocks; max_seq_len clamped to "
                    f"{first['max_seq_len']:,} -> {last['max_seq_len']:,} tokens")
    else:
        subtitle = "no measurement (it needs a CUDA GPU)"
    layout = _base_layout(
        f"The KV pool after a growing MoE workspace{_on(device)}", subtitle, barmode="stack",
        height=460, bargap=0.2, xaxis=dict(title=dict(text="MoE workspace allocated at warm-up")),
        yaxis=dict(title=dict(text="GiB of the GPU")),
        legend=dict(orientation="h", yanchor="top", y=-0.25, x=0, font=dict(size=11)))
    return {"data": traces, "layout": layout}


pool_vs_workspace_figure = _as_figure(pool_vs_workspace_spec)


# --- preflight: a deployment's plan ------------------------------------------------------------

#: The plan figure's short name for each TensorRT-LLM policy (kvlab.analysis.deployment).
PLAN_POLICY_NAMES = {"none/clamped": "current code", "none/configured": "one-line fix",
                     "capacity": "admission (PR #21720)", "v1": "current code (V1)",
                     CLAMP_PROPOSAL: "PR #17261's clamp"}


def plan_ranges_spec(plan, *, title: Optional[str] = None) -> dict:
    """What a lone request of each context length meets under each policy, as horizontal bands
    over the context axis (``plan``: a ``kvlab.analysis.deployment.DeploymentPlan``), with the
    pool's capacity and, under V2, the page-index row's span (now, and under the fix when it
    falls inside the axis), under V1 the clamped max_seq_len, drawn as vertical lines. A band
    too narrow to see at this scale is marked by a tick of its colour (hover for its range).
    Traces: one bar per engine outcome (4), the ticks, two legend entries for the lines: always
    7."""
    d = plan.deployment
    top = d.configured_max_seq_len
    tpb = d.tokens_per_block
    names = [PLAN_POLICY_NAMES[p] for p in plan.ranges]
    traces = []
    ticks = dict(x=[], y=[], color=[], text=[])
    for outcome in ENGINE_OUTCOMES:
        ys, xs, bases, hover = [], [], [], []
        for policy, segments in plan.ranges.items():
            for s in segments:
                if s.verdict != outcome:
                    continue
                ys.append(PLAN_POLICY_NAMES[policy])
                xs.append(s.high - s.low + 1)
                bases.append(s.low - 1)
                hover.append(f"{PLAN_POLICY_NAMES[policy]}: {s.low:,}-{s.high:,} tokens<br>"
                             f"{OUTCOME_LABELS[outcome]}")
                if s.high - s.low + 1 < top / 100:
                    ticks["x"].append((s.low + s.high) / 2)
                    ticks["y"].append(PLAN_POLICY_NAMES[policy])
                    ticks["color"].append(OUTCOME_COLORS[outcome])
                    ticks["text"].append(hover[-1])
        traces.append(dict(type="bar", orientation="h", x=xs, y=ys, base=bases,
                           name=OUTCOME_LABELS[outcome], marker=dict(color=OUTCOME_COLORS[outcome]),
                           hovertext=hover, hovertemplate="%{hovertext}<extra></extra>",
                           showlegend=bool(xs)))
    traces.append(dict(type="scatter", mode="markers", x=ticks["x"], y=ticks["y"],
                       marker=dict(symbol="line-ns", size=26, line=dict(width=4, color=ticks["color"])),
                       hovertext=ticks["text"], hovertemplate="%{hovertext}<extra></extra>",
                       name="narrow range", showlegend=False))
    second = (("row spans now", plan.width_current * tpb) if plan.manager == "v2" else
              ("max_seq_len clamped to", plan.clamped_max_seq_len))
    lines = [("pool holds", plan.capacity_tokens, POOL_COLOR, "dot"), (*second, ROW_COLOR, "dash")]
    if plan.width_fix is not None and plan.width_fix * tpb <= top and plan.width_fix != plan.width_current:
        lines.append(("row spans with the fix", plan.width_fix * tpb, ROW_COLOR, "dashdot"))
    shapes = [dict(type="line", xref="x", x0=v, x1=v, yref="paper", y0=0, y1=1,
                   line=dict(color=c, dash=dash, width=2)) for _, v, c, dash in lines if v <= top]
    for words, value, color, dash in lines[:2]:
        shown = value <= top
        traces.append(dict(type="scatter", x=[None], y=[None], mode="lines",
                           name=f"{words} {value:,} tokens" + ("" if shown else " (beyond the axis)"),
                           line=dict(color=color, dash=dash, width=2), hoverinfo="skip"))
    now = plan.ranges.get(plan.current_policy, ())
    bad = [s for s in now if s.verdict in ("crash", "stall")]
    subtitle = ("current code: " + "; ".join(f"{s.low:,}-{s.high:,} {s.verdict}" for s in bad)
                if bad else f"current code: every context up to {top:,} finishes or is rejected")
    if plan.manager == "v1":
        subtitle = f"V1 manager, {subtitle}"
    if not plan.blocks:
        subtitle = "no rank can build a KV pool: nothing starts under any policy"
    elif not plan.starts:
        subtitle = ("merged code raises at construction (state slots), so nothing runs; the bands "
                    "are for the pool PR #17261's clamp (a proposal) would leave")
    layout = _base_layout(
        title or f"{d.model.name}: what each context length meets", subtitle, barmode="overlay",
        height=380, shapes=shapes, bargap=0.35,
        xaxis=dict(title=dict(text="context length (prompt tokens)"), range=[0, top * 1.02],
                   tickformat=","),
        yaxis=dict(title=None, categoryorder="array", categoryarray=names[::-1], autorange=True),
        # at the figure's foot, under the axis title however many lines the subtitle takes
        legend=dict(orientation="h", yref="container", yanchor="bottom", y=0, x=0, font=dict(size=11)))
    layout["margin"] = {**layout["margin"], "l": 160, "b": 130}
    return {"data": traces, "layout": layout}


plan_ranges_figure = _as_figure(plan_ranges_spec)
