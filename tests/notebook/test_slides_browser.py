"""Every slide of every deck fits a projector (marker ``ui``): ``kvlab slides``' decks opened in
real Chromium at 1366x768 and 1024x768, paged with the keyboard, measured slide by slide: one
slide on screen at a time, nothing cut off or scrolled, a figure given room, its fonts at
least 16 screen pixels, no two of its texts (subplot titles and other annotations, tick labels,
axis titles, bar labels, the legend) over each other or outside it, and every plot of it (each
subplot) tall enough to read. Each deck is measured as ``kvlab slides`` writes it, again with
real kvlab figures under every heading (one subplot, a row of three with upright tick labels and
bar labels, two rows of two, three rows: the shapes the walk draws), and with the executed
copies' own figures where ``kvlab walkthrough`` has made them (build/notebooks, or
$KVLAB_EXECUTED_DIR)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import plotly.graph_objects as go
import pytest

from kvlab.analysis.compare import EngineConfig, long_and_small, outcome_rows, run_policies
from kvlab.analysis.deployment import example_deployments, plan_deployment
from kvlab.analysis.shipped import caching_rows, shared_prefix_runs
from kvlab.core.paths import NOTEBOOK_DIR, REPOSITORY
from kvlab.notebook import viz
from kvlab.slides import PLOTLY_JS, build_deck, deck_html, deck_notebooks

CHROMIUM = Path("/usr/bin/chromium")
SCREENS = [(1366, 768), (1024, 768)]
#: The least height (canvas px) a figure gets on a slide.
FIGURE_MIN_PX = 280
#: The least height (canvas px) of each plot of a figure (a subplot's axes, not its labels).
PLOT_MIN_PX = 64
#: How far (screen px) two texts may touch before they count as over each other.
TOUCH_PX = 2

pytestmark = [pytest.mark.ui, pytest.mark.timeout(900)]

MEASURE = """() => {
  const slide = document.querySelector(".slide.current"), deck = document.querySelector(".deck");
  const scale = parseFloat(deck.dataset.scale), box = deck.getBoundingClientRect();
  const figure = slide.querySelector(".figure");
  const texts = figure ? [...figure.querySelectorAll("svg text")].filter(t =>
    t.textContent.trim() && t.getBBox().width > 0 && getComputedStyle(t).display !== "none"
    && t.closest("[style*='opacity: 0']") === null) : [];
  const fonts = texts.map(t => parseFloat(getComputedStyle(t).fontSize)).filter(size => size > 0);
  // each line of each text as the quadrilateral it covers on screen (tick labels may be turned)
  const corners = (x, y, w, h) => [[x, y], [x + w, y], [x + w, y + h], [x, y + h]];
  const pieces = texts.flatMap((t, i) => {
    const lines = [...t.querySelectorAll("tspan.line")].filter(l => l.textContent.trim());
    if (lines.length > 1) return lines.map(l => {
      const range = document.createRange();
      range.selectNodeContents(l);
      const r = range.getBoundingClientRect();
      return [i, corners(r.left, r.top, r.width, r.height)];
    });
    const b = t.getBBox(), m = t.getScreenCTM();
    return [[i, corners(b.x, b.y, b.width, b.height)
      .map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f])]];
  });
  const apart = (p, q) => [p, q].some(quad => quad.some((a, i) => {  // a separating axis
    const b = quad[(i + 1) % 4], n = [b[1] - a[1], a[0] - b[0]], len = Math.hypot(...n) || 1;
    const span = r => r.map(([x, y]) => (x * n[0] + y * n[1]) / len);
    const [s, t] = [span(p), span(q)];
    return Math.min(Math.max(...s), Math.max(...t)) - Math.max(Math.min(...s), Math.min(...t))
      < {touch};
  }));
  const name = i => texts[i].textContent.trim().slice(0, 40);
  const overlaps = [];
  pieces.forEach(([i, p], k) => pieces.slice(k + 1).forEach(([j, q]) => {
    if (i !== j && !apart(p, q)) overlaps.push(`'${name(i)}' over '${name(j)}'`);
  }));
  const frame = figure && figure.getBoundingClientRect();
  const outside = [...new Set(pieces.filter(([i, q]) => !q.every(([x, y]) => x >= frame.left - 1
    && x <= frame.right + 1 && y >= frame.top - 1 && y <= frame.bottom + 1)).map(([i]) => name(i)))];
  const full = figure && figure._fullLayout;
  const plots = full ? Object.keys(full).filter(k => /^yaxis[0-9]*$/.test(k))
    .map(k => full[k]._length) : [];
  return {
    shown: document.querySelectorAll(".slide.current").length,
    visible: [...document.querySelectorAll(".slide")].filter(s => s.offsetParent !== null).length,
    overflow: slide.scrollHeight - slide.clientHeight,
    inside: box.left >= -1 && box.top >= -1 && box.right <= innerWidth + 1
      && box.bottom <= innerHeight + 1,
    scrolled: document.scrollingElement.scrollTop,
    figure: figure ? figure.clientHeight : null,
    smallest_font: fonts.length ? Math.min(...fonts) * scale : null,
    overlaps, outside,
    shortest_plot: plots.length ? Math.min(...plots) : null,
    title: slide.querySelector("h1, h2, h3").textContent,
  };
}""".replace("{touch}", str(TOUCH_PX))


def _kvlab_figures() -> list[dict]:
    """Real kvlab figures of the shapes the walk draws: one plot; three in a row with upright
    tick labels and bar labels; two rows of two with two-line subplot titles and bar labels;
    three rows over one x axis, one of them a run that ended in its first pass (a note)."""
    runs = run_policies(long_and_small(8192, num_small=3), engine=EngineConfig(stall_limit=40))
    figures = [
        go.Figure(viz.plan_ranges_spec(plan_deployment(example_deployments()["issue-21470"]))),
        viz.policy_bars_figure(outcome_rows(runs)),
        viz.caching_bars_figure(caching_rows(shared_prefix_runs())),
        viz.scheduler_timeline_figure(runs["none/configured"], stall_limit=40),
        viz.scheduler_timeline_figure(runs["none/clamped"], stall_limit=40),
    ]
    return [f.to_plotly_json() for f in figures]


def _decks(out: Path) -> list[Path]:
    """Every deck as written (text only) and with a kvlab figure under every heading."""
    figures = _kvlab_figures()
    paths = []
    for notebook in deck_notebooks(NOTEBOOK_DIR):
        deck = build_deck(notebook, out / "text", executed_dir=out / "none")
        paths.append(deck.path)
        slides = [
            dataclasses.replace(s, figure=figures[k % len(figures)])
            for k, s in enumerate(deck.slides)
        ]
        with_figures = out / "figures" / deck.path.name
        with_figures.parent.mkdir(parents=True, exist_ok=True)
        with_figures.write_text(deck_html("figures", slides, deck.note), encoding="utf-8")
        paths.append(with_figures)
    from plotly.offline import get_plotlyjs

    (out / "figures" / PLOTLY_JS).write_text(get_plotlyjs(), encoding="utf-8")
    return paths


def _measure(decks: list[Path]) -> tuple[list[str], int]:
    """Each slide of each deck on each screen: what does not fit, and how many were measured."""
    playwright_sync = pytest.importorskip("playwright.sync_api", reason="the ui extra")
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: the ui test needs the system Chromium")
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
                        if page.locator(".slide.current .figure").count():
                            page.wait_for_function(  # drawn, and its rows spaced
                                "() => document.querySelector('.slide.current .figure')"
                                ".dataset.fitted"
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
                        if m["shortest_plot"] is not None and m["shortest_plot"] < PLOT_MIN_PX:
                            problems.append(f"{where}: a plot {m['shortest_plot']:.0f} px high")
                        problems += [f"{where}: {o}" for o in m["overlaps"]]
                        problems += [f"{where}: {o!r} cut off the figure" for o in m["outside"]]
                page.close()
        finally:
            browser.close()
    return problems, measured


def test_every_slide_of_every_deck_fits_a_projector(tmp_path):
    problems, measured = _measure(_decks(tmp_path))
    assert measured > 2 * 100  # every slide of 10 decks, twice, on two screens
    assert not problems, "\n".join(problems[:40])


def test_every_figure_of_the_executed_notebooks_reads_on_a_projector(tmp_path):
    """The decks with the figures ``kvlab walkthrough`` drew (each section's own, its heading's
    pick of several), where its executed copies are here: every one of them readable."""
    executed = Path(os.environ.get("KVLAB_EXECUTED_DIR", REPOSITORY / "build" / "notebooks"))
    decks = [
        build_deck(notebook, tmp_path, executed_dir=executed)
        for notebook in deck_notebooks(NOTEBOOK_DIR)
    ]
    decks = [d for d in decks if d.note.startswith("figures from")]
    if not decks:
        pytest.skip(
            f"no executed copy in {executed}: run `kvlab walkthrough` (or set KVLAB_EXECUTED_DIR)"
        )
    problems, measured = _measure([d.path for d in decks])
    assert measured >= 2 * sum(len(d.slides) for d in decks)
    assert not problems, "\n".join(problems[:40])
