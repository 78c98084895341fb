"""Figures shown without a widget frontend, and their text.

:func:`show` displays a figure as a static bundle (plotly's JSON mime type, an HTML copy that
loads plotly.js from its CDN, and a plain-text line), so an executed notebook holds a figure even
when no frontend ran it (papermill) and nbconvert's HTML export shows it.
"""

from __future__ import annotations

import re

import plotly.graph_objects as go


def static_bundle(fig: go.Figure, *, html: bool = True) -> dict:
    """A display bundle that needs no widget frontend: plotly's JSON mime type (JupyterLab,
    VS Code), optionally an HTML copy that loads plotly.js from its CDN (nbconvert's HTML
    export), and one plain-text line."""
    fig = go.Figure(fig)
    bundle = {
        "application/vnd.plotly.v1+json": fig.to_plotly_json(),
        "text/plain": f"<Figure: {figure_title(fig)}>",
    }
    if html:
        bundle["text/html"] = figure_html(fig)
    return bundle


def figure_html(fig: go.Figure) -> str:
    """The figure as an HTML fragment (plotly.js from its CDN)."""
    return go.Figure(fig).to_html(
        include_plotlyjs="cdn", full_html=False, config={"displaylogo": False, "responsive": True}
    )


def figure_title(fig: go.Figure) -> str:
    """The figure's title without its subtitle or markup."""
    return (fig.layout.title.text or "").split("<br>")[0]


def figure_text(fig) -> str:
    """The figure's title and subtitle as plain text (markup removed, lines joined by spaces);
    ``fig`` is a go.Figure or a spec."""
    text = (
        fig["layout"]["title"]["text"] if isinstance(fig, dict) else fig.layout.title.text
    ) or ""
    return re.sub(r"<[^>]+>", "", text.replace("<br>", " "))


def show(fig: go.Figure) -> None:
    """Display a figure statically (see :func:`static_bundle`), in Jupyter or under papermill."""
    from IPython.display import display

    display(static_bundle(fig), raw=True)
