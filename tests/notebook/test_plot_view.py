"""kvlab.notebook.plot_view: a figure view that sends the figure's JSON one way, only when it
changed, and runs the plotly.js the plotly package ships."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from kvlab.notebook.plot_view import CONFIG, PlotView


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


def test_the_view_runs_the_packaged_plotly_js():
    assert "window.Plotly = Plotly" in PlotView._esm.default_value
    assert "Plotly.react" in PlotView._esm.default_value


def test_a_view_refuses_what_is_not_a_figure():
    with pytest.raises(TypeError, match="figure must be a go.Figure or a figure dict"):
        PlotView([1, 2, 3])
