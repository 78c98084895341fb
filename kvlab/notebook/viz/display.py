"""Figures shown without a widget frontend (papermill, nbconvert's HTML export), and their text."""

from __future__ import annotations

import re

import plotly.graph_objects as go


def static_bundle(fig: go.Figure, *, html: bool = True) -> dict:
    """A display bundle of plotly's JSON mime type, optionally an HTML copy that loads
    plotly.js from its CDN, and a plain-text line."""
    fig = go.Figure(fig)
    bundle = {
        "application/vnd.plotly.v1+json": fig.to_plotly_json(),
        "text/plain": f"<Figure: {(fig.layout.title.text or '').split('<br>')[0]}>",
    }
    if html:
        bundle["text/html"] = figure_html(fig)
    return bundle


def figure_html(fig: go.Figure) -> str:
    """The figure as an HTML fragment (plotly.js from its CDN)."""
    return go.Figure(fig).to_html(
        include_plotlyjs="cdn", full_html=False, config={"displaylogo": False, "responsive": True}
    )


def figure_text(fig) -> str:
    """The title and subtitle of a go.Figure or a spec as plain text."""
    title = fig["layout"]["title"]["text"] if isinstance(fig, dict) else fig.layout.title.text
    return re.sub(r"<[^>]+>", "", (title or "").replace("<br>", " "))


def show(fig: go.Figure) -> None:
    """Display a figure statically (:func:`static_bundle`), in Jupyter or under papermill."""
    from IPython.display import display

    display(static_bundle(fig), raw=True)
