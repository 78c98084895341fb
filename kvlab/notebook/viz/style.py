"""The figures' look: one colour and label per outcome (Paul Tol's colour-blind-safe sets; every
label names the outcome too, so colour is never the only cue), the shared layout, and the small
pieces every figure is built from."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import plotly.graph_objects as go

from kvlab.analysis.presets import engine_outcome
from kvlab.core.checks import check_instance
from kvlab.core.memory import GIB, MIB

#: The names :func:`run_outcome` gives a "stall" that nothing raised.
UNRAISED_STALLS = ("livelock", "unfinished")
#: Each outcome's colour, one in every notebook (the unraised stalls keep the stall's orange),
#: and its label.
_OUTCOMES = {
    "crash": ("#CC3311", "crash (ValueError)"),
    "stall": ("#EE7733", "stall (no progress)"),
    "livelock": ("#EE7733", "livelock (preempted again and again, never raises)"),
    "unfinished": ("#EE7733", "unfinished when the steps ran out"),
    "refused": ("#DDAA33", "refused (resize returned False)"),
    "reject": ("#0077BB", "rejected at admission"),
    "ok": ("#009988", "ok"),
}
OUTCOME_COLORS = {outcome: color for outcome, (color, _) in _OUTCOMES.items()}
OUTCOME_LABELS = {outcome: label for outcome, (_, label) in _OUTCOMES.items()}
#: "Not applicable" (no pool, no outcome); the page-index row and the pool (not outcomes).
NEUTRAL_COLOR, ROW_COLOR, POOL_COLOR = "#BBBBBB", "#555555", "#999999"
#: Line colours for row widths, clear of the outcome colours (Tol "muted").
WIDTH_LINE_COLORS = ("#332288", "#AA4499", "#88CCEE", "#999933", "#555555", "#CC6677")
FIGURE_WIDTH = 720
#: Characters of a 12 px subtitle line in a figure FIGURE_WIDTH wide.
SUBTITLE_CHARS = 96
#: A stacked part under this share of the tallest bar is too thin to see (:func:`thin_label`).
THIN_SHARE = 0.01
AXIS_STYLE = dict(
    gridcolor="#E6E9EF",
    linecolor="#B0B6BE",
    zeroline=False,
    ticks="outside",
    tickcolor="#B0B6BE",
    automargin=True,
    ticklabeloverflow="allow",
    separatethousands=True,
)
#: The layout every figure starts from: no plotly template (resolving one costs ~10 ms a
#: redraw), the title at the top left, the toolbar upright in the right margin.
LAYOUT = dict(
    font=dict(family="Inter, Helvetica, Arial, sans-serif", size=13),
    template=None,
    width=FIGURE_WIDTH,
    paper_bgcolor="white",
    plot_bgcolor="white",
    margin=dict(l=70, r=30, t=80, b=60),
    hoverlabel=dict(font_size=12, bgcolor="white"),
    modebar=dict(orientation="v"),
)
TITLE = dict(x=0.0, xanchor="left", xref="container", y=1.0, yref="container", yanchor="top")
#: A hover that shows a trace's ``text`` alone.
TEXT_HOVER = "%{text}<extra></extra>"
_SUBTITLE_LINE = '<span style="font-size:12px;color:#444">{}</span>'


def run_outcome(result) -> str:
    """``engine_outcome(result)``, except that a stall nothing raised is a "livelock" when
    requests were preempted and "unfinished" otherwise."""
    outcome = engine_outcome(result)
    if outcome != "stall" or result.error is not None:
        return outcome
    return "livelock" if result.summary()["recomputes"] else "unfinished"


def outcome_color(outcome: str | None) -> str:
    """The colour of an outcome; neutral grey for None or an unknown name."""
    return OUTCOME_COLORS.get(outcome or "", NEUTRAL_COLOR)


def wrap_words(text: str, chars: int) -> list[str]:
    """``text`` in lines of at most ``chars`` characters, broken between words."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def titled(title: str | None, default: str, name: str = "title") -> str:
    """``title`` (a str or None), or ``default`` where it is empty; a TypeError naming it else."""
    return check_instance(name, title, (str, type(None))) or default


def _title_text(title: str, subtitle: str, width: int) -> tuple:
    """The title with the subtitle's lines (broken to ``width`` px) in its text, and the lines."""
    lines = wrap_words(subtitle, SUBTITLE_CHARS * width // FIGURE_WIDTH) if subtitle else []
    return "<br>".join([title] + [_SUBTITLE_LINE.format(line) for line in lines]), lines


def resize_layout(layout, width: int) -> None:
    """Set a :func:`base_layout` layout's ``width``, its subtitle broken again to fit it."""
    layout["width"] = width
    title = (layout["title"] or {})["text"] if "title" in layout else None
    parts = (title or "").split("<br>")
    prefix, suffix = _SUBTITLE_LINE.split("{}")
    if len(parts) < 2 or not all(p.startswith(prefix) and p.endswith(suffix) for p in parts[1:]):
        return  # no subtitle, or lines base_layout did not write
    subtitle = " ".join(p[len(prefix) : -len(suffix)] for p in parts[1:])
    layout["title"]["text"], lines = _title_text(parts[0], subtitle, width)
    layout["margin"]["t"] = max(layout["margin"]["t"] or 0, 64 + 17 * len(lines))


def base_layout(title: str, subtitle: str = "", **extra) -> dict:
    """:data:`LAYOUT` with the title, a 12 px subtitle under it, ``extra`` on top and the
    shared :data:`AXIS_STYLE` under ``extra``'s x and y axes."""
    check_instance("title", title, str)
    check_instance("subtitle", subtitle, str)
    text, lines = _title_text(title, subtitle, extra.get("width", FIGURE_WIDTH))
    title_style = dict(TITLE, text=text, pad=dict(t=26), font=dict(size=16))
    layout: dict[str, Any] = dict(LAYOUT, title=title_style)
    for axis in ("xaxis", "yaxis"):
        extra[axis] = {**AXIS_STYLE, **extra.get(axis, {})}
    layout.update(extra)
    margin = layout["margin"]
    layout["margin"] = {**margin, "t": max(margin.get("t", 80), 64 + 17 * len(lines))}
    return layout


def hover(texts) -> dict:
    """A trace's hover: ``texts``, one a point, alone."""
    return dict(hovertext=texts, hovertemplate="%{hovertext}<extra></extra>")


def bar(x, y, name: str, color, hovers, **extra) -> dict:
    """A bar trace in ``color`` (one, or one a bar) with ``hovers``."""
    return dict(type="bar", x=x, y=y, name=name, marker=dict(color=color), **hover(hovers), **extra)


def lines_trace(x, y, name: str, color: str, hovers, width: float = 2.5, **extra) -> dict:
    """A line with a marker at each point, in ``color``, with ``hovers``."""
    look = dict(mode="lines+markers", line=dict(color=color, width=width), **hover(hovers))
    return dict(type="scatter", x=x, y=y, name=name, **look, **extra)


def legend_entry(name: str, color: str, dash: str | None = None, show: bool = True) -> dict:
    """A legend-only trace: a square swatch, or a line of ``dash``."""
    look = (
        dict(mode="lines", line=dict(color=color, dash=dash, width=2))
        if dash
        else dict(mode="markers", marker=dict(symbol="square", size=12, color=color))
    )
    return dict(
        type="scatter", x=[None], y=[None], name=name, hoverinfo="skip", showlegend=show, **look
    )


def line(color: str, dash: str | None = None, width: float = 2, **where) -> dict:
    """A line shape from (x0, y0) to (x1, y1) of ``where``."""
    style = dict(color=color, width=width) | ({"dash": dash} if dash else {})
    return {"type": "line", "xref": "x", "yref": "y", **where, "line": style}


def across(y: float, color: str, dash: str, xref: str = "paper", yref: str = "y") -> dict:
    """A dashed line across the plot at ``y``."""
    return line(color, dash, xref=xref, x0=0, x1=1, yref=yref, y0=y, y1=y)


def upright(x: float, color: str, dash: str | None = None, y0=0, y1=1, yref="paper") -> dict:
    """A line up the plot at ``x``, the plot's height unless told."""
    return line(color, dash, x0=x, x1=x, yref=yref, y0=y0, y1=y1)


def note(text: str, x, y, color: str | None = None, size: int = 12, **extra) -> dict:
    """A text annotation without an arrow, placed in data coordinates unless ``extra`` says."""
    font = dict(size=size) if color is None else dict(size=size, color=color)
    return dict(xref="x", yref="y", text=text, x=x, y=y, showarrow=False, font=font) | extra


def end_note(text: str, y: float, color: str, size: int = 12, **extra) -> dict:
    """``text`` above the right end of a line across the plot at ``y``."""
    return note(text, 1, y, color, size, xref="paper", xanchor="right", yanchor="bottom") | extra


def heading(text: str, x: float) -> dict:
    """A side-by-side panel's heading, above the plot at ``x`` (paper)."""
    return note(text, x, 1.0, xref="paper", yref="paper", yanchor="bottom")


def panel_domains(widths: Sequence[float], gap: float) -> list[list[float]]:
    """Side-by-side x domains of relative ``widths`` with ``gap`` between them."""
    unit, lo, domains = (1 - gap * (len(widths) - 1)) / max(sum(widths), 1), 0.0, []
    for width in widths:
        domains.append([lo, lo + width * unit])
        lo += width * unit + gap
    return domains


def on_panel(k: int) -> dict:
    """A trace's axes in panel ``k`` (0 the first) of side-by-side or stacked panels."""
    suffix = str(k + 1) if k else ""
    return dict(xaxis=f"x{suffix}", yaxis=f"y{suffix}")


def panel_axes(k: int, x: dict, y: dict) -> dict:
    """The layout's x and y axes of panel ``k``, anchored to each other, in the shared style."""
    suffix = str(k + 1) if k else ""
    return {
        f"xaxis{suffix}": dict(AXIS_STYLE, anchor=f"y{suffix}", **x),
        f"yaxis{suffix}": dict(AXIS_STYLE, anchor=f"x{suffix}", **y),
    }


def code_heatmap(z, text, colors: Sequence[str], name: str, **extra) -> dict:
    """A heatmap of codes 0, 1, ... each in its colour of ``colors``, ``text`` its hover."""
    n = len(colors)
    scale = [[(i + k) / n, color] for i, color in enumerate(colors) for k in (0, 1)]
    codes = dict(colorscale=scale, zmin=-0.5, zmax=n - 0.5, showscale=False)
    return dict(
        type="heatmap", z=z, text=text, name=name, hovertemplate=TEXT_HOVER, **codes, **extra
    )


def foot_legend(**extra) -> dict:
    """A horizontal legend at the figure's foot, under the axis titles."""
    return dict(orientation="h", yref="container", yanchor="bottom", y=0, x=0, **extra)


def legend_below(y: float, **extra) -> dict:
    """A horizontal legend under the plot, its top ``y`` (paper) down."""
    return dict(orientation="h", yanchor="top", y=y, x=0, **extra)


def thin_label(
    label: str, values: Sequence[float], tallest: float, size: Callable[[float], str]
) -> str:
    """A stacked part's legend entry, with its size ("up to" where bars differ) when too thin
    to see; ``size`` writes a value in the figure's unit."""
    top = max(values, default=0)
    if not 0 < top < THIN_SHARE * tallest:
        return label
    return f"{label}: {'' if min(values) == top else 'up to '}{size(top)}, too thin to see"


def log_log_axes(x: tuple[str, str], y: tuple[str, str]) -> dict:
    """Both axes logarithmic, titled "quantity (unit, log scale)", ticks at powers of ten."""
    return {
        f"{axis}axis": dict(
            title=dict(text=f"{name} ({unit}, log scale)"),
            type="log",
            dtick=1,
            exponentformat="none",
        )
        for axis, (name, unit) in (("x", x), ("y", y))
    }


def format_bytes(n: float) -> str:
    """1088 B, 272.5 KiB, 16.0 MiB: binary units."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def as_figure(spec_fn, name=None):
    """``name_figure`` from ``name_spec``: the same arguments, a go.Figure."""

    @functools.wraps(spec_fn)
    def figure(*args, **kwargs) -> go.Figure:
        return go.Figure(spec_fn(*args, **kwargs))

    figure.__name__ = figure.__qualname__ = name or spec_fn.__name__.replace("_spec", "_figure")
    figure.__signature__ = inspect.signature(spec_fn).replace(return_annotation="go.Figure")
    figure.__doc__ = f"``{spec_fn.__name__}`` as a go.Figure (same arguments).\n\n{spec_fn.__doc__}"
    return figure
