"""The figures' look: one colour and one label per outcome, the shared layout, and each
``name_figure`` made from its ``name_spec``.

One colour per outcome across every notebook (:data:`OUTCOME_COLORS`), from Paul Tol's
colour-blind-safe "vibrant" and "high-contrast" sets; outcomes are also named in every label and
hover text, so colour is never the only cue.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence

import plotly.graph_objects as go

from kvlab.analysis.presets import engine_outcome
from kvlab.core.checks import check_instance
from kvlab.core.memory import GIB, MIB

#: The names :func:`run_outcome` gives a "stall" that nothing raised (kvlab.analysis.presets
#: counts both as stalls: requests unfinished, no error).
UNRAISED_STALLS = ("livelock", "unfinished")
#: One colour per outcome, in every notebook: crash red, stall orange, refused amber,
#: reject blue, ok green (bluish, so that it stays apart from red for red-green colour blindness).
#: The stalls that nothing raised (:data:`UNRAISED_STALLS`) keep the stall's orange.
OUTCOME_COLORS = {
    "crash": "#CC3311",
    "stall": "#EE7733",
    "livelock": "#EE7733",
    "unfinished": "#EE7733",
    "refused": "#DDAA33",
    "reject": "#0077BB",
    "ok": "#009988",
}
#: What each outcome means, for legends and hover text.
OUTCOME_LABELS = {
    "crash": "crash (ValueError)",
    "stall": "stall (no progress)",
    "livelock": "livelock (preempted again and again, never raises)",
    "unfinished": "unfinished when the steps ran out",
    "refused": "refused (resize returned False)",
    "reject": "rejected at admission",
    "ok": "ok",
}


def run_outcome(result) -> str:
    """A run's outcome as figures and findings name it: ``engine_outcome(result)``, except a
    "stall" that nothing raised (no SchedulerDeadlock: the steps ran out first), which is a
    "livelock" when requests were preempted along the way and "unfinished" otherwise."""
    outcome = engine_outcome(result)
    if outcome != "stall" or result.error is not None:
        return outcome
    return "livelock" if result.summary()["recomputes"] else "unfinished"


#: Colour for "not applicable" (no pool, no outcome).
NEUTRAL_COLOR = "#BBBBBB"

#: The page-index row and the pool, wherever a figure draws them (they are not outcomes).
ROW_COLOR = "#555555"
POOL_COLOR = "#999999"
#: Line colours for row widths: kept clear of the outcome colours (Tol "muted" set).
WIDTH_LINE_COLORS = ("#332288", "#AA4499", "#88CCEE", "#999933", "#555555", "#CC6677")

FONT = dict(family="Inter, Helvetica, Arial, sans-serif", size=13)
FIGURE_WIDTH = 720


def outcome_color(outcome: str | None) -> str:
    """The colour of an outcome; neutral grey for None or an unknown name."""
    return OUTCOME_COLORS.get(outcome or "", NEUTRAL_COLOR)


#: Characters of a 12 px subtitle line in a figure FIGURE_WIDTH wide (about 7 px a character).
SUBTITLE_CHARS = 96


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
    """A figure's ``title`` (or subtitle, ``name``) argument, a str or None, resolved: ``default``
    where it is empty or None; a TypeError naming it for anything else, before its truth value
    is asked (a numpy array has none)."""
    return check_instance(name, title, (str, type(None))) or default


_SUBTITLE_LINE = '<span style="font-size:12px;color:#444">{}</span>'


def _title_text(title: str, subtitle: str, width: int) -> tuple:
    """The title's text and the subtitle's lines, broken between words to ``width`` px. The
    subtitle's lines go in the title's text (every plotly.js renders that alike; a FigureWidget
    drew ``title.subtitle`` above the title), anchored to the figure's top."""
    lines = wrap_words(subtitle, SUBTITLE_CHARS * width // FIGURE_WIDTH) if subtitle else []
    return "<br>".join([title] + [_SUBTITLE_LINE.format(line) for line in lines]), lines


def resize_layout(layout, width: int) -> None:
    """Set a :func:`base_layout` layout's (a dict or plotly's Layout) ``width``, its subtitle
    broken again to fit it (a panel draws its figures narrower than :data:`FIGURE_WIDTH`)."""
    layout["width"] = width
    title = (layout["title"] or {})["text"] if "title" in layout else None
    parts = (title or "").split("<br>")
    prefix, suffix = _SUBTITLE_LINE.split("{}")
    if len(parts) < 2 or not all(p.startswith(prefix) and p.endswith(suffix) for p in parts[1:]):
        return  # no subtitle, or lines base_layout did not write
    text, lines = _title_text(
        parts[0], " ".join(p[len(prefix) : -len(suffix)] for p in parts[1:]), width
    )
    layout["title"]["text"] = text
    layout["margin"]["t"] = max(layout["margin"]["t"] or 0, 64 + 17 * len(lines))


def base_layout(title: str, subtitle: str = "", **extra) -> dict:
    """Shared look. No plotly template: resolving one costs ~10 ms a figure, too slow for a
    widget that redraws on every slider step, so the few settings that matter are explicit.
    The subtitle is 12 px, broken between words to the figure's width, below the title; the
    on-screen toolbar (plotly's modebar) is vertical, in the right margin, clear of both. A
    ``title`` or ``subtitle`` that is not a str is a TypeError naming it (every figure's own
    ``title=`` and ``subtitle=`` arrive here)."""
    check_instance("title", title, str)
    check_instance("subtitle", subtitle, str)
    width = extra.get("width", FIGURE_WIDTH)
    text, lines = _title_text(title, subtitle, width)
    layout = dict(
        title=dict(
            text=text,
            x=0.0,
            xanchor="left",
            xref="container",
            y=1.0,
            yref="container",
            yanchor="top",
            pad=dict(t=26),
            font=dict(size=16),
        ),
        font=FONT,
        template=None,
        width=FIGURE_WIDTH,
        paper_bgcolor="white",
        plot_bgcolor="white",
        margin=dict(l=70, r=30, t=80, b=60),
        hoverlabel=dict(font_size=12, bgcolor="white"),
        # on screen, plotly's toolbar stands down the right edge, not across the title
        modebar=dict(orientation="v"),
    )
    for axis in ("xaxis", "yaxis"):
        extra[axis] = {**AXIS_STYLE, **extra.get(axis, {})}
    layout.update(extra)
    layout["margin"] = {
        **layout["margin"],
        "t": max(layout["margin"].get("t", 80), 64 + 17 * len(lines)),
    }
    return layout


AXIS_STYLE = dict(
    gridcolor="#E6E9EF",
    linecolor="#B0B6BE",
    zeroline=False,
    ticks="outside",
    tickcolor="#B0B6BE",
    automargin=True,
    ticklabeloverflow="allow",
    separatethousands=True,
)  # tick labels as 1,000, like the text around them


#: A part whose largest value is under this share of the tallest bar is too thin to see: its
#: legend entry gives its size (:func:`thin_label`).
THIN_SHARE = 0.01


def thin_label(
    label: str, values: Sequence[float], tallest: float, size: Callable[[float], str]
) -> str:
    """A stacked part's legend entry: ``label``, and for a part too thin to see (its largest
    value under :data:`THIN_SHARE` of ``tallest``) its size, "label: 2 MiB, too thin to see"
    ("up to" when its bars differ). ``size`` writes a value in the figure's unit."""
    top = max(values, default=0)
    if not 0 < top < THIN_SHARE * tallest:
        return label
    return f"{label}: {'' if min(values) == top else 'up to '}{size(top)}, too thin to see"


def log_log_axes(x: tuple[str, str], y: tuple[str, str]) -> dict:
    """Both axes logarithmic, each titled "quantity (unit, log scale)", labelled at powers of
    ten only (no bare minor digits), written out with separators (100,000, never 100k); ``x``
    and ``y`` are (quantity, unit) (the sweeps over sizes)."""
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
    """1088 B, 272.5 KiB, 16.0 MiB: binary units, as the seed counts MiB."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def as_figure(spec_fn, name=None):
    """``name_figure`` from ``name_spec``: the same arguments, a go.Figure instead of the plain
    dict. Widgets use the ``_spec`` functions directly (no plotly validation on every update)."""

    @functools.wraps(spec_fn)
    def figure(*args, **kwargs) -> go.Figure:
        return go.Figure(spec_fn(*args, **kwargs))

    figure.__name__ = figure.__qualname__ = name or spec_fn.__name__.replace("_spec", "_figure")
    figure.__signature__ = inspect.signature(spec_fn).replace(return_annotation="go.Figure")
    figure.__doc__ = f"``{spec_fn.__name__}`` as a go.Figure (same arguments).\n\n{spec_fn.__doc__}"
    return figure
