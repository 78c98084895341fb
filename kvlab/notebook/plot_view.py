"""A plotly figure on screen that redraws with ``Plotly.react``: the panels' figures.

plotly's own ``go.FigureWidget`` applies every change as ``Plotly.update`` (a full relayout),
then diffs the whole drawn layout and sends it back to the kernel; on the 2-core machine that
kept a slider press from reaching the figure within 100 ms (``benchmarks/browser_latency.py``:
p50 121-154 ms for the two-figure panels, 80-90 ms with this view). :class:`PlotView` sends the
figure's JSON one way only and lets ``Plotly.react`` (plotly.js's diffing redraw, the one Dash
uses) redraw what changed. The plotly.js it runs is the one the plotly package ships
(``package_data/plotly.min.js``), so it draws exactly what kaleido renders for the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Union

import anywidget
import plotly
import plotly.graph_objects as go
import plotly.io.json as plotly_json
import traitlets

_PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"

# plotly.min.js sets window.Plotly when evaluated (its UMD wrapper falls back to a global in
# a module); the view draws once its element is in the page, so text is measured right.
_VIEW_JS = """
export default {
  render({ model, el }) {
    const div = document.createElement("div");
    el.appendChild(div);
    const draw = () => {
      if (!div.isConnected) { requestAnimationFrame(draw); return; }
      const fig = JSON.parse(model.get("figure_json"));
      window.Plotly.react(div, fig.data || [], fig.layout || {}, fig.config || {});
    };
    draw();
    model.on("change:figure_json", draw);
    return () => { model.off("change:figure_json", draw); window.Plotly.purge(div); };
  }
};
"""

#: What every view passes to plotly.js besides the figure.
CONFIG = {"displaylogo": False}


class PlotView(anywidget.AnyWidget):
    """One figure on screen. :meth:`show` replaces what it shows (a go.Figure or a figure
    dict, as ``kvlab.notebook.viz``'s ``*_spec`` functions return); an unchanged figure is not
    sent again. :attr:`figure` is what it shows, as a go.Figure."""

    _esm = traitlets.Unicode(_PLOTLY_JS.read_text(encoding="utf-8") + _VIEW_JS).tag(sync=True)
    figure_json = traitlets.Unicode("{}").tag(sync=True)

    def __init__(self, figure: Union[go.Figure, Mapping[str, Any]], **kwargs):
        super().__init__(**kwargs)
        self._spec: Mapping[str, Any] = {}
        self.show(figure)

    def show(self, figure: Union[go.Figure, Mapping[str, Any]]) -> bool:
        """Show ``figure``; True if it differed from what was shown (and was sent)."""
        if isinstance(figure, go.Figure):
            spec = figure.to_plotly_json()
        elif isinstance(figure, Mapping):
            spec = dict(figure)
        else:
            raise TypeError(f"figure must be a go.Figure or a figure dict, got {type(figure).__name__}")
        text = plotly_json.to_json_plotly({**spec, "config": CONFIG})
        self._spec = spec
        if text == self.figure_json:
            return False
        self.figure_json = text
        return True

    @property
    def figure(self) -> go.Figure:
        """What the view shows, as a (new) go.Figure."""
        return go.Figure(self._spec)


__all__ = ["CONFIG", "PlotView"]
