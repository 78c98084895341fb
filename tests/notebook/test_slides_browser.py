"""Every slide of every deck fits a projector (marker ``ui``): ``kvlab slides``' decks opened in
real Chromium at 1366x768 and 1024x768, paged with the keyboard, measured slide by slide: one
slide on screen at a time, nothing cut off or scrolled, a figure given room, its fonts at
least 16 screen pixels. Each deck is measured as ``kvlab slides`` writes it and again with a
real kvlab figure under every heading (where an executed copy would put one)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import plotly.graph_objects as go
import pytest

from kvlab.analysis.deployment import example_deployments, plan_deployment
from kvlab.core.paths import NOTEBOOK_DIR
from kvlab.notebook import viz
from kvlab.slides import PLOTLY_JS, build_deck, deck_html, deck_notebooks

CHROMIUM = Path("/usr/bin/chromium")
SCREENS = [(1366, 768), (1024, 768)]
#: The least height (canvas px) a figure gets on a slide.
FIGURE_MIN_PX = 280

pytestmark = [pytest.mark.ui, pytest.mark.timeout(600)]

MEASURE = """() => {
  const slide = document.querySelector(".slide.current"), deck = document.querySelector(".deck");
  const scale = parseFloat(deck.dataset.scale), box = deck.getBoundingClientRect();
  const figure = slide.querySelector(".figure");
  const fonts = figure ? [...figure.querySelectorAll("text")]
    .map(t => parseFloat(getComputedStyle(t).fontSize)).filter(size => size > 0) : [];
  return {
    shown: document.querySelectorAll(".slide.current").length,
    visible: [...document.querySelectorAll(".slide")].filter(s => s.offsetParent !== null).length,
    overflow: slide.scrollHeight - slide.clientHeight,
    inside: box.left >= -1 && box.top >= -1 && box.right <= innerWidth + 1
      && box.bottom <= innerHeight + 1,
    scrolled: document.scrollingElement.scrollTop,
    figure: figure ? figure.clientHeight : null,
    smallest_font: fonts.length ? Math.min(...fonts) * scale : null,
    title: slide.querySelector("h1, h2, h3").textContent,
  };
}"""


def _decks(out: Path) -> list[Path]:
    """Every deck as written (text only) and with a figure under every heading."""
    spec = viz.plan_ranges_spec(plan_deployment(example_deployments()["issue-21470"]))
    figure = go.Figure(spec).to_plotly_json()
    paths = []
    for notebook in deck_notebooks(NOTEBOOK_DIR):
        deck = build_deck(notebook, out / "text", executed_dir=out / "none")
        paths.append(deck.path)
        slides = [dataclasses.replace(s, figure=figure) for s in deck.slides]
        with_figures = out / "figures" / deck.path.name
        with_figures.parent.mkdir(parents=True, exist_ok=True)
        with_figures.write_text(deck_html("figures", slides, deck.note), encoding="utf-8")
        paths.append(with_figures)
    from plotly.offline import get_plotlyjs

    (out / "figures" / PLOTLY_JS).write_text(get_plotlyjs(), encoding="utf-8")
    return paths


def test_every_slide_of_every_deck_fits_a_projector(tmp_path):
    playwright_sync = pytest.importorskip("playwright.sync_api", reason="the ui extra")
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: the ui test needs the system Chromium")
    decks = _decks(tmp_path)
    problems, measured = [], 0
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            for width, height in SCREENS:
                page = browser.new_page(viewport={"width": width, "height": height})
                for deck in decks:
                    page.goto(deck.as_uri())
                    count = page.locator(".slide").count()
                    for number in range(count):
                        if number:
                            page.keyboard.press("ArrowRight")
                        if deck.parent.name == "figures":
                            page.wait_for_function(
                                "() => document.querySelector('.slide.current .main-svg')"
                            )
                        m = page.evaluate(MEASURE)
                        measured += 1
                        where = f"{width}x{height} {deck.parent.name}/{deck.name} {m['title']!r}"
                        if m["shown"] != 1 or m["visible"] != 1:
                            problems.append(f"{where}: {m['visible']} slides on screen")
                        if m["overflow"] > 0 or not m["inside"] or m["scrolled"]:
                            problems.append(f"{where}: cut off by {m['overflow']} px")
                        if m["figure"] is not None and m["figure"] < FIGURE_MIN_PX:
                            problems.append(f"{where}: figure {m['figure']} px high")
                        if m["smallest_font"] is not None and m["smallest_font"] < 16:
                            problems.append(f"{where}: a {m['smallest_font']:.1f} px font")
                page.close()
        finally:
            browser.close()
    assert measured > 2 * 100  # every slide of 10 decks, twice, on two screens
    assert not problems, "\n".join(problems[:40])
