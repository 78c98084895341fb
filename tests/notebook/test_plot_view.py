"""kvlab.notebook.plot_view: a figure view that sends the figure's JSON one way, only when it
changed, and runs the plotly.js the plotly package ships."""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
import pytest

from kvlab.notebook.plot_view import CONFIG, PlotlyLibrary, PlotView


def test_a_view_shows_a_figure_or_its_dict_and_reads_it_back():
    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]), layout=dict(title=dict(text="t")))
    view = PlotView(fig)
    sent = json.loads(view.figure_json)
    assert sent["data"][0]["type"] == "bar" and sent["config"] == CONFIG
    assert list(view.figure.data[0].y) == [3, 4] and view.figure.layout.title.text == "t"
    assert view.show({"data": [{"type": "scatter", "x": [1], "y": [5]}], "layout": {}})  # a dict
    assert view.figure.data[0].type == "scatter"


def test_an_unchanged_figure_is_not_sent_again():
    spec = {"data": [{"type": "bar", "x": [1], "y": [2]}], "layout": {}}
    view = PlotView(spec)
    sent = []
    view.observe(lambda change: sent.append(change), names="figure_json")
    assert view.show(dict(spec)) is False and sent == []
    assert view.show({"data": [{"type": "bar", "x": [1], "y": [3]}], "layout": {}}) is True
    assert len(sent) == 1


def test_the_views_share_one_copy_of_the_packaged_plotly_js():
    """plotly.js goes to the page once, in the library every view names; a view's own module
    stays small, since anywidget gives a model 2 s to load it (a 4.6 MB module per view left
    06's figures blank on a busy machine)."""
    import plotly

    first, second = PlotView({"data": [], "layout": {}}), PlotView({"data": [], "layout": {}})
    assert first.library is second.library is PlotlyLibrary.shared()
    packaged = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert first.library.source == packaged.read_text(encoding="utf-8")
    assert "window.Plotly = Plotly" in first.library.source
    assert first.get_state()["library"] == f"IPY_MODEL_{first.library.model_id}"
    assert len(PlotView._esm.default_value) < 4096 and "Plotly.react" in PlotView._esm.default_value
    first.library.close()  # a closed library (Widget.close_all) is replaced, not named again
    assert PlotView({"data": [], "layout": {}}).library is not first.library


def test_a_view_refuses_what_is_not_a_figure():
    with pytest.raises(TypeError, match="figure must be a go.Figure or a figure dict"):
        PlotView([1, 2, 3])
