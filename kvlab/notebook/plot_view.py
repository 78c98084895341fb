"""A plotly figure on screen that redraws with ``Plotly.react``: the panels' figures. Unlike
``go.FigureWidget`` (a full relayout, the drawn layout sent back) it sends the figure's JSON one
way, to the plotly.js the plotly package ships: it draws what kaleido renders for the report."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anywidget
import plotly
import plotly.graph_objects as go
import plotly.io.json as plotly_json
import traitlets
from ipywidgets import widget_serialization

_PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"

# The view's module is small (anywidget gives a module 2 s to load): the page evaluates
# plotly.min.js once, from the one PlotlyLibrary every view names, which sets window.Plotly. A
# view draws once its element is in the page, so text is measured right.
_VIEW_JS = """
function plotly(model) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  window.__kvlabPlotly ??= (async () => {
    const library = await model.widget_manager.get_model(model.get("library").replace("IPY_MODEL_", ""));
    const url = URL.createObjectURL(new Blob([library.get("source")], { type: "text/javascript" }));
    try { await import(url); } finally { URL.revokeObjectURL(url); }
    return window.Plotly;
  })().catch((error) => { window.__kvlabPlotly = undefined; throw error; });
  return window.__kvlabPlotly;
}

export default {
  async render({ model, el }) {
    const div = document.createElement("div");
    el.appendChild(div);
    const Plotly = await plotly(model);
    const draw = () => {
      if (!div.isConnected) { requestAnimationFrame(draw); return; }
      const fig = JSON.parse(model.get("figure_json"));
      Plotly.react(div, fig.data || [], fig.layout || {}, fig.config || {});
    };
    draw();
    model.on("change:figure_json", draw);
    return () => { model.off("change:figure_json", draw); Plotly.purge(div); };
  }
};
"""

#: What every view passes to plotly.js besides the figure.
CONFIG = {"displaylogo": False}


class PlotlyLibrary(anywidget.AnyWidget):
    """The plotly.js the plotly package ships, sent to the page once (:meth:`shared`)."""

    _esm = traitlets.Unicode("export default {};").tag(sync=True)
    source = traitlets.Unicode().tag(sync=True)

    _shared: PlotlyLibrary | None = None

    @classmethod
    def shared(cls) -> PlotlyLibrary:
        """The one instance (a new one once the last was closed)."""
        if cls._shared is None or cls._shared.comm is None:
            cls._shared = cls(source=_PLOTLY_JS.read_text(encoding="utf-8"))
        return cls._shared


class PlotView(anywidget.AnyWidget):
    """One figure on screen: :meth:`show` replaces it (a go.Figure or a spec dict), sending
    only a changed one; :attr:`figure` is what it shows."""

    _esm = traitlets.Unicode(_VIEW_JS).tag(sync=True)
    figure_json = traitlets.Unicode("{}").tag(sync=True)
    library = traitlets.Instance(PlotlyLibrary).tag(sync=True, **widget_serialization)

    def __init__(self, figure: go.Figure | Mapping[str, Any], **kwargs):
        super().__init__(library=PlotlyLibrary.shared(), **kwargs)
        self._spec: Mapping[str, Any] = {}
        self.show(figure)

    def show(self, figure: go.Figure | Mapping[str, Any]) -> bool:
        """Show ``figure``; True if it differed from what was shown (and was sent)."""
        if not isinstance(figure, (go.Figure, Mapping)):
            got = type(figure).__name__
            raise TypeError(f"figure must be a go.Figure or a figure dict, got {got}")
        spec = figure.to_plotly_json() if isinstance(figure, go.Figure) else dict(figure)
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
