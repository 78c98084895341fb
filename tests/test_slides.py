"""kvlab.slides without a browser: which figure a heading gets, how a numbered heading renders,
and what a figure's rows tell the deck's script (tests/notebook/test_slides_browser.py measures
the drawn slides)."""

from __future__ import annotations

import nbformat

from kvlab.slides import _projector_figure, deck_html, figure_for, slides_of


def _figure(title: str, **layout) -> dict:
    return {
        "data": [],
        "layout": {"title": {"text": f"{title}<br><span>a subtitle</span>"}, **layout},
    }


def test_a_heading_gets_the_figure_it_names_else_its_sections_first():
    sized, shrunk = (
        _figure("Azure's code hour on the sized pool"),
        _figure("Azure's code hour on the shrunk pool"),
    )
    assert (
        figure_for("7. A real hour: Azure's code traffic on a shrunk pool", [sized, shrunk])
        is shrunk
    )
    assert figure_for("7. A real hour on a pool", [sized, shrunk]) is sized  # names neither
    row, pool, both = _figure("Page-index row"), _figure("KV pool"), _figure("clamped row, pool")
    assert figure_for("3. The picture: same pool, wider row", [row, pool, both]) is row
    assert figure_for("Findings", []) is None


def test_slides_of_picks_among_every_figure_of_a_section():
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell("## 7. On a shrunk pool\n\nText."))
    for title in ("on the sized pool", "on the shrunk pool"):
        code = nbformat.v4.new_code_cell("show()")
        spec = _figure(title)
        mime = "application/vnd.plotly.v1+json"
        code.outputs = [nbformat.v4.new_output("display_data", data={mime: spec})]
        nb.cells.append(code)
    (slide,) = slides_of(nb)
    assert slide.figure["layout"]["title"]["text"].startswith("on the shrunk pool")
    page = deck_html("deck", [slide], "note")
    assert "<em>Figure: on the shrunk pool</em>" in page  # the notes say which figure it is


def test_a_numbered_heading_is_a_heading_not_a_list():
    (slide,) = slides_of(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("## 4. Costs")])
    )
    page = deck_html("deck", [slide], "note")
    assert "<h2>4. Costs</h2>" in page and "<ol" not in page


def test_rows_of_subplots_carry_their_titles_tick_labels_and_bar_labels():
    layout = {
        "yaxis": {"domain": [0.6, 1.0], "range": [0, 60]},
        "yaxis2": {"domain": [0.0, 0.36]},
        "xaxis": {"anchor": "y"},
        "xaxis2": {"anchor": "y2", "title": {"text": "step"}},
        "annotations": [
            {
                "text": "<b>cached</b><br>(%)",
                "xref": "paper",
                "yref": "paper",
                "y": 1.03,
                "yanchor": "bottom",
                "x": 0.22,
            },
            {
                "text": "<b>waited</b>",
                "xref": "paper",
                "yref": "paper",
                "y": 0.36,
                "yanchor": "bottom",
                "x": 0.22,
            },
            {
                "text": "crash in pass 1",
                "xref": "x2",
                "yref": "paper",
                "y": 0.36,
                "yanchor": "bottom",
                "x": 0,
                "xanchor": "right",
            },
        ],
    }
    data = [{"type": "bar", "y": [54.9, 0], "text": ["54.9%", "0%"], "textposition": "outside"}]
    figure = _projector_figure({"data": data, "layout": layout})
    top, bottom = figure["rows"]
    assert top["axes"] == ["yaxis"] and bottom["axes"] == ["yaxis2"]
    assert top["titles"] == [0] and bottom["titles"] == [1, 2]
    assert top["above"] > bottom["above"] / 2 > 0  # two lines above the top row
    assert figure["layout"]["margin"]["t"] >= top["above"]  # the top row's titles fit the margin
    assert top["below"] > 20  # the row's tick labels, before the next row's titles
    assert top["bars"] == {"yaxis": [0, 60, 54.9]}  # the axis grows room for "54.9%" if need be
    notes = figure["layout"]["annotations"]
    assert notes[0]["xanchor"] == "center" and notes[2]["yshift"] > 0  # the mark above the title
