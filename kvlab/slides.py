"""``kvlab slides``: an HTML slide deck per notebook, for the projector, offline: one slide per
``#``-``###`` heading with the first sentence of its paragraph (the whole paragraph in the
speaker notes) and, from the executed copy (``kvlab walkthrough``'s build/notebooks/) where its
headings match, the section's plotly figure that its heading names (``figure_for``: of a section
that draws a sized and a shrunk pool, the shrunk one under "... on a shrunk pool"), else its
first. As reveal.js does, each slide is a fixed
1280 x 720 canvas scaled to the screen, one at a time; unlike nbconvert's reveal.js exporter it
needs no slide metadata in the notebooks and loads nothing from the network.
"""

from __future__ import annotations

import copy
import html
import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from kvlab.notebook.panel import PANEL_MIME
from kvlab.notebook.walkthrough import PLOTLY_MIME

HEADING = re.compile(r"^(#{1,3})\s+(.+?)\s*#*\s*$")  # the title, sections and subsections
FENCE = re.compile(r"^\s*(```|~~~)")
PLOTLY_JS = "plotly.min.js"
#: The slide canvas (px), scaled as a whole to the screen, as reveal.js scales its slides.
CANVAS = (1280, 720)
#: A figure's smallest font on the canvas: 16 px on a 1024 x 768 projector (scale 0.8).
FIGURE_FONT_PX = 20
#: A figure of this many rows of subplots or more gets the slide's height below the heading, its
#: sentence in a column SIDE_PX wide beside it (smaller) instead of above it.
TALL_ROWS = 3
SIDE_PX = 260
#: The longest text on a slide (characters of markdown); the paragraph goes to the notes.
SAY_CHARS = 200


@dataclass
class Deck:
    """A written deck: its file, its slides, and where its figures came from (or why none)."""

    path: Path
    slides: list[Slide]
    note: str


@dataclass
class Slide:
    """One heading of a notebook: its level, text, first paragraph and first figure (plotly JSON)."""

    level: int
    title: str
    paragraph: str
    figure: dict | None = None


def _blocks(source: str):
    """(level, title, lines after it) per heading outside a code fence; level 0 before the first."""
    level, title, fenced = 0, "", False
    lines: list[str] = []
    for line in source.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match:
            yield level, title, lines
            level, title, lines = len(match.group(1)), match.group(2), []
        else:
            lines.append(line)
    yield level, title, lines


def _first_paragraph(lines: list[str]) -> str:
    return "\n".join(lines).strip().split("\n\n", 1)[0].strip()


def _figure(output) -> dict | None:
    data = output.get("data", {})
    if PANEL_MIME in data and data[PANEL_MIME].get("figures"):
        return data[PANEL_MIME]["figures"][0]
    figure = data.get(PLOTLY_MIME)
    return json.loads(figure) if isinstance(figure, str) else figure


#: A tag of a title's markup (plotly's <br>, <span>, <b>).
MARKUP = re.compile(r"<[^>]*>")
#: Words that say nothing of which figure a heading means.
STOP_WORDS = frozenset(
    "a an and as at by each for from in is it its of on one or the to versus vs what with".split()
)


def _words(text: str) -> set[str]:
    """A title's words, lower case, singular, without markup, numbers or STOP_WORDS."""
    words = re.findall(r"[a-z][a-z'’]*", MARKUP.sub(" ", text).lower())
    return {w[:-1] if w.endswith("s") and len(w) > 3 else w for w in words} - STOP_WORDS


def figure_title(figure: dict) -> str:
    """A figure's own title, its first line (its subtitle dropped), without markup."""
    title = figure.get("layout", {}).get("title", "")
    text = title.get("text", "") if isinstance(title, dict) else str(title or "")
    return MARKUP.sub("", re.split(r"<br\s*/?>", text, maxsplit=1)[0]).strip()


def figure_for(heading: str, figures: list[dict]) -> dict | None:
    """The figure of a section that belongs to its heading: the one whose title has the most of
    the heading's words that no other figure's title has ("shrunk" picks the shrunk pool's
    figure of a section that draws a sized and a shrunk pool), else the first (none if the
    section draws none)."""
    if not figures:
        return None
    titles = [_words(figure_title(f)) for f in figures]
    named = _words(heading)
    scores = [
        len(named & words - set().union(*(t for j, t in enumerate(titles) if j != i)))
        for i, words in enumerate(titles)
    ]
    return figures[scores.index(max(scores))]


def slides_of(notebook) -> list[Slide]:
    """The slides of a notebook (an nbformat node): one per heading; figures from its outputs,
    the one of each section that belongs to its heading (figure_for)."""
    slides: list[Slide] = []
    drawn: list[list[dict]] = []  # every figure of each slide's section
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for level, title, lines in _blocks(cell.source):
                if level:
                    slides.append(Slide(level, title, _first_paragraph(lines)))
                    drawn.append([])
                elif slides and not slides[-1].paragraph:  # a heading alone in the cell before
                    slides[-1].paragraph = _first_paragraph(lines)
        elif slides:
            drawn[-1].extend(f for f in map(_figure, cell.get("outputs", [])) if f)
    for slide, figures in zip(slides, drawn, strict=True):
        slide.figure = figure_for(slide.title, figures)
    return slides


def _has_figure(slides: list[Slide]) -> bool:
    return any(s.figure is not None for s in slides)


def _executed_slides(path: Path, executed_dir: Path | None, slides: list[Slide]):
    """The executed copy's slides if it exists and has the same headings, and why not if not."""
    import nbformat

    if not re.match(r"\d\d_", path.name):  # the walkthrough runs only the walk's NN_ notebooks
        return (
            None,
            "text only: an exercise draws no figures (`kvlab walkthrough` runs the walk only)",
        )
    executed = Path(executed_dir) / path.name if executed_dir is not None else None
    if executed is None or not executed.is_file():
        return None, "text only: no executed copy (run `kvlab walkthrough` for the figures)"
    try:
        ran = slides_of(nbformat.read(executed, as_version=4))
    except (ValueError, OSError, RecursionError, nbformat.ValidationError) as exc:  # cut short
        why = str(exc).split(":")[0][:120] or type(exc).__name__
        return None, f"text only: {executed} is not a notebook ({why}; run `kvlab walkthrough`)"
    if [s.title for s in ran] != [s.title for s in slides]:
        return None, f"text only: {executed} has other headings (run `kvlab walkthrough` again)"
    return ran, f"figures from {executed}"


def projector_sentence(paragraph: str) -> str:
    """What a slide says: the paragraph's first sentence; a longer one than SAY_CHARS is cut at
    a clause's end past half of it (else at a word), never inside an inline code span."""
    first = re.split(r"(?<=[.!?])\s+(?=[A-Z(`*])", " ".join(paragraph.split()), maxsplit=1)[0]
    if len(first) <= SAY_CHARS:
        return first
    cut = first[:SAY_CHARS].rsplit(" ", 1)[0]
    clause = max(cut.rfind(mark) for mark in (", ", "; ", ": ", " ("))  # a clause's end first
    cut = cut[:clause] if clause > SAY_CHARS // 2 else cut
    if cut.count("`") % 2:  # do not end inside `code`
        cut = cut[: cut.rindex("`")].rstrip()
    return cut.rstrip(",;:") + " ..."


#: A line of figure text on the canvas (px): FIGURE_FONT_PX and its leading.
LINE_PX = round(FIGURE_FONT_PX * 1.3)


#: The longest line of an upright axis title: characters of FIGURE_FONT_PX, about 200 canvas px.
Y_TITLE_CHARS = 18


def _wrap(text: str, width: int) -> str:
    """A title in lines of at most ``width`` characters (but for a longer word), joined by
    <br>; one that already breaks its lines is left as it is."""
    if "<br" in text or len(text) <= width:
        return text
    return "<br>".join(textwrap.wrap(text, width, break_long_words=False))


def _lines(text) -> int:
    return str(text or "").count("<br") + 1


def _tick_px(axis: dict) -> int:
    """How far an x axis's tick labels reach below its plot (canvas px), 0 if it shows none."""
    if axis.get("showticklabels") is False or axis.get("visible") is False:
        return 0
    labels = [str(t) for t in axis.get("ticktext") or [""]]
    if abs(axis.get("tickangle") or 0) >= 45:  # upright: as tall as the longest label is long
        longest = max(len(MARKUP.sub("", line)) for t in labels for line in t.split("<br>"))
        tall = round(max(longest, 6) * FIGURE_FONT_PX * 0.55)
    else:
        tall = max(map(_lines, labels)) * LINE_PX
    title = axis.get("title")
    text = title.get("text") if isinstance(title, dict) else title
    return tall + 10 + (_lines(text) * LINE_PX + 8 if text else 0)


def _rows(layout: dict, data: list) -> list[dict]:
    """The figure's rows of subplots, top first, for the deck's script to lay out on the slide in
    pixels (a figure made for a notebook's 560 px spaces its rows in fractions of it): each row's
    y axes and relative height, the room above it for its subplot titles (its annotations), below
    it for its x tick labels, and per y axis holding bars labelled outside, the tallest bar, so
    that the axis grows room for the labels."""
    axes = {
        key: axis
        for key, axis in layout.items()
        if re.fullmatch(r"yaxis\d*", key) and isinstance(axis, dict) and not axis.get("overlaying")
    }
    rows: dict[tuple, dict] = {}
    for key, axis in axes.items():
        low, high = (round(float(v), 4) for v in axis.get("domain", [0, 1]))
        row = rows.setdefault((high, low), {"axes": [], "weight": max(high - low, 0.01)})
        row.update(top=high, bottom=low, titles=[], above=0, below=8, bars={})
        row["axes"].append(key)
    ordered = sorted(rows.values(), key=lambda r: -r["top"])
    if any(a["bottom"] < b["top"] for a, b in zip(ordered, ordered[1:])):
        return []  # overlapping rows (an inset): leave the figure's own layout
    row_of = {name: row for row in ordered for name in row["axes"]}
    for key, axis in layout.items():  # an x axis's tick labels below the row of its y axis
        if re.fullmatch(r"xaxis\d*", key) and isinstance(axis, dict):
            anchor = str(axis.get("anchor", "y")).replace("y", "yaxis", 1)
            if anchor in row_of:
                row_of[anchor]["below"] = max(row_of[anchor]["below"], _tick_px(axis))
    for index, note in enumerate(layout.get("annotations", [])):  # titles atop a row
        y = note.get("y")
        if note.get("yref") != "paper" or note.get("yanchor") != "bottom" or y is None:
            continue
        atop = [r for r in ordered if r["top"] - 0.02 <= y <= r["top"] + 0.1]
        if atop:
            atop[0]["titles"].append(index)
            note.setdefault("xanchor", "center")  # over its subplot, not from its middle on
            atop[0]["above"] = max(atop[0]["above"], _lines(note.get("text")) * LINE_PX + 6)
    for row in ordered:  # a mark at a data point (a crash's pass) in a line above the titles
        notes = [layout["annotations"][i] for i in row["titles"]]
        marks = [n for n in notes if not re.fullmatch(r"paper|x\d* domain", n.get("xref", "paper"))]
        if marks and len(marks) < len(notes):
            for note in marks:
                note["yshift"] = row["above"] - 6
            row["above"] += max(_lines(n.get("text")) for n in marks) * LINE_PX
    stack = layout.get("barmode") in ("stack", "relative")
    for trace in data:
        outside = trace.get("textposition") in ("outside", "auto") and trace.get("text") is not None
        if trace.get("type") != "bar" or not outside or trace.get("orientation") == "h":
            continue
        name = str(trace.get("yaxis", "y")).replace("y", "yaxis", 1)
        values = [v for v in trace.get("y") or [] if isinstance(v, int | float)]
        if name not in row_of or not values or axes[name].get("type") == "log" or min(values) < 0:
            continue
        axis = axes[name]
        bars = row_of[name]["bars"]
        low, high = axis.get("range") or [0, max(values) * 1.05]
        top = sum(values) if stack else max(values)  # a stack: no taller than all its bars
        bars[name] = [low, high, max(top, bars.get(name, [0, 0, 0])[2])]
    return [
        {k: r[k] for k in ("axes", "weight", "titles", "above", "below", "bars")} for r in ordered
    ]


def _projector_figure(figure: dict) -> dict:
    """The figure without its title, every font at least FIGURE_FONT_PX canvas px, the legend at
    its foot, and its rows (``_rows``) for the deck's script to space in pixels."""
    layout = copy.deepcopy(figure.get("layout", {}))
    layout.pop("width", None), layout.pop("height", None)
    layout.pop("title", None)  # the slide's heading and sentence say it, in the room's size
    layout["font"] = {**layout.get("font", {}), "size": FIGURE_FONT_PX}
    # the legend at the foot of the slide, clear of subplot titles and tick labels
    legend = dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left")
    font = {**layout.get("legend", {}).get("font", {}), "size": FIGURE_FONT_PX}
    layout["legend"] = {**layout.get("legend", {}), **legend, "font": font}
    for key, axis in layout.items():
        if re.fullmatch(r"[xy]axis\d*", key) and isinstance(axis, dict):
            axis["tickfont"] = {**axis.get("tickfont", {}), "size": FIGURE_FONT_PX}
            if isinstance(axis.get("title"), str):
                axis["title"] = {"text": axis["title"]}
            if isinstance(axis.get("title"), dict):
                axis["title"]["font"] = {**axis["title"].get("font", {}), "size": FIGURE_FONT_PX}
                if key.startswith("y") and axis["title"].get("text"):  # upright: as long as a plot
                    axis["title"]["text"] = _wrap(axis["title"]["text"], Y_TITLE_CHARS)
    for note in layout.get("annotations", []):
        note["font"] = {**note.get("font", {}), "size": FIGURE_FONT_PX}
    rows = _rows(layout, figure.get("data", []))
    top = rows[0]["above"] if rows else 0  # room for the top row's subplot titles only
    layout["margin"] = {**layout.get("margin", {}), "t": max(top, LINE_PX) + 8}
    return {"data": figure.get("data", []), "layout": layout, "rows": rows}


def deck_html(title: str, slides: list[Slide], note: str) -> str:
    """A self-contained deck (but for plotly.min.js beside it, loaded only if a slide has a
    figure): the canvas scaled to the window, one slide shown; N shows the speaker notes under
    the slide, S in a window of their own."""
    from nbconvert.filters import markdown2html

    sections = []
    for number, slide in enumerate(slides, 1):
        tag = f"h{slide.level}"
        number_dot = re.sub(r"^(\d+)([.)])", r"\1\\\2", slide.title)  # "4. What": not a list
        heading = re.sub(r"^\s*<p>|</p>\s*$", "", markdown2html(number_dot))  # one line: no <p>
        figure, shape = "", ""
        if slide.figure is not None:
            projected = _projector_figure(slide.figure)
            spec = json.dumps(projected).replace("</", "<\\/")
            figure = f'<div class="figure"></div><script type="application/json">{spec}</script>'
            if len(projected["rows"]) >= TALL_ROWS:  # the slide's height to the rows
                shape = " tall"
        say = projector_sentence(slide.paragraph)
        notes = markdown2html(slide.paragraph) if slide.paragraph else ""
        if slide.figure is not None and figure_title(slide.figure):  # which figure: its title
            notes += f"<p><em>Figure: {html.escape(figure_title(slide.figure))}</em></p>"
        sections.append(
            f'<section class="slide level-{slide.level}{shape}" id="slide-{number}">\n'
            f"<{tag}>{heading}</{tag}>\n"
            f'<div class="say">{markdown2html(say) if say else ""}</div>\n{figure}\n'
            f'<aside class="notes">{notes}</aside>\n'
            f"<footer>{html.escape(title)} · {number}/{len(slides)}</footer>\n</section>"
        )
    plotly = f'<script src="{PLOTLY_JS}"></script>\n' if _has_figure(slides) else ""
    width, height = CANVAS
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
{plotly}<style>
html, body {{ margin: 0; height: 100%; overflow: hidden; background: #fff; }}
body {{ font: 28px/1.3 system-ui, sans-serif; color: #222; }}
.deck {{ position: absolute; left: 50%; top: 50%; width: {width}px; height: {height}px; }}
.slide {{ display: none; position: absolute; inset: 0; box-sizing: border-box;
         padding: 32px 64px 48px; overflow: hidden; flex-direction: column; }}
.slide.current {{ display: flex; }}
.slide.level-1 {{ justify-content: center; }}
h1 {{ font-size: 52px; margin: 0 0 24px; }} h2 {{ font-size: 38px; margin: 0 0 12px; }}
h3 {{ font-size: 34px; margin: 0 0 12px; }}
.say p {{ margin: 0 0 12px; }}
code {{ font-size: 0.9em; background: #f3f3f3; padding: 0 0.2em; }}
.figure {{ flex: 1 1 auto; min-height: 0; }}
.slide.tall.current {{ display: grid; grid-template: auto 1fr / 1fr {SIDE_PX}px; column-gap: 24px; }}
.slide.tall > h1, .slide.tall > h2, .slide.tall > h3 {{ grid-column: 1 / 3; }}
.slide.tall .say {{ grid-area: 2 / 2; font-size: 22px; overflow-wrap: anywhere; }}
.slide.tall .figure {{ grid-area: 2 / 1; }}
.notes {{ display: none; }}
footer {{ position: absolute; bottom: 14px; right: 24px; font-size: 18px; color: #888; }}
#notes {{ display: none; position: fixed; left: 0; right: 0; bottom: 0; max-height: 45vh;
          overflow: auto; background: #fffbe6; border-top: 2px solid #d9c36a; padding: 12px 24px;
          font-size: 18px; z-index: 2; }}
body.with-notes #notes {{ display: block; }}
.note {{ display: none; }}
@media print {{
  html, body {{ overflow: visible; height: auto; }}
  .deck {{ position: static; transform: none !important; }}
  .slide {{ display: flex; position: relative; width: {width}px; height: {height}px;
           break-after: page; }}
}}
</style></head><body>
<div class="deck">
{chr(10).join(sections)}
</div>
<div id="notes"></div>
<p class="note">{html.escape(note)}</p>
<script>
const deck = document.querySelector(".deck");
const slides = [...document.querySelectorAll(".slide")];
let index = 0;
function fit() {{  // the canvas scaled to the window, as reveal.js does
  const scale = Math.min(window.innerWidth / {width}, window.innerHeight / {height});
  deck.style.transform = `translate(-50%, -50%) scale(${{scale}})`;
  deck.dataset.scale = scale;
}}
function fitRows(box, rows) {{  // the figure's rows spaced in pixels: kvlab/slides.py _rows
  const plot = box._fullLayout._size.h, update = {{}};
  const gaps = rows.slice(1).reduce((sum, r, i) => sum + rows[i].below + r.above, 0);
  const weight = rows.reduce((sum, r) => sum + r.weight, 0);
  let y = 0;  // px from the plot's top
  rows.forEach((r, i) => {{
    if (i) y += rows[i - 1].below + r.above;
    const top = 1 - y / plot, tall = rows.length > 1 ? Math.max(plot - gaps, 0) * r.weight / weight : plot;
    y += tall;
    r.axes.forEach(a => {{  // as many ticks as the row holds apart, where the figure set none
      const axis = box.layout[a];
      if (axis.dtick === undefined && !axis.tickvals) update[a + ".nticks"] = Math.max(3, Math.floor(tall / {round(1.5 * LINE_PX)}));
    }});
    if (rows.length > 1) {{
      r.axes.forEach(a => {{ update[a + ".domain"] = [Math.max(0, 1 - y / plot), top]; }});
      r.titles.forEach(k => {{ update[`annotations[${{k}}].y`] = top; }});
    }}
    for (const [a, [low, high, most]] of Object.entries(r.bars)) {{  // room for the bars' labels
      const share = {LINE_PX + 4} / Math.max(tall, 1);
      if (share < 0.6) update[a + ".range"] = [low, Math.max(high, (most - share * low) / (1 - share))];
    }}
  }});
  return Object.keys(update).length ? Plotly.relayout(box, update) : Promise.resolve();
}}
function show(i) {{
  index = Math.max(0, Math.min(slides.length - 1, i));
  slides.forEach((s, k) => s.classList.toggle("current", k === index));
  const slide = slides[index], box = slide.querySelector(".figure");
  if (box && !box.dataset.drawn && window.Plotly) {{
    const f = JSON.parse(slide.querySelector("script[type='application/json']").textContent);
    const size = {{width: box.clientWidth, height: box.clientHeight}};
    box.dataset.drawn = "1";
    Plotly.newPlot(box, f.data, Object.assign(f.layout, size), {{displayModeBar: false}})
      .then(() => fitRows(box, f.rows || [])).then(() => {{ box.dataset.fitted = "1"; }});
  }}
  const notes = slide.querySelector(".notes").innerHTML;
  document.getElementById("notes").innerHTML = notes;
  if (speaker && !speaker.closed) {{  // the presenter's own window, off the projector
    speaker.document.title = `${{index + 1}}/${{slides.length}}`;
    speaker.document.body.innerHTML = `<h3>${{slide.querySelector("h1, h2, h3").innerHTML}}</h3>${{notes}}`;
  }}
  history.replaceState(null, "", `#${{index + 1}}`);
}}
let speaker = null;
document.addEventListener("keydown", e => {{
  const step = {{ArrowRight: 1, ArrowDown: 1, PageDown: 1, " ": 1, ArrowLeft: -1, ArrowUp: -1, PageUp: -1}}[e.key];
  if (step) {{ e.preventDefault(); show(index + step); }}
  if (e.key === "Home") show(0);
  if (e.key === "End") show(slides.length - 1);
  if (e.key === "n") document.body.classList.toggle("with-notes");
  if (e.key === "s") {{  // speaker notes in a window of their own, as reveal.js's S key
    speaker = window.open("", "kvlab-speaker-notes", "width=720,height=560");
    if (speaker) {{
      speaker.document.body.style.font = "20px/1.45 system-ui, sans-serif";
      show(index);
    }}
  }}
}});
window.addEventListener("resize", fit);
fit();
show((parseInt(location.hash.slice(1)) || 1) - 1);
</script></body></html>
"""


def build_deck(path: Path, out_dir: Path, executed_dir: Path | None = None) -> Deck:
    """Write ``out_dir/<notebook>.html`` (and plotly.min.js once, if a slide has a figure)."""
    import nbformat

    try:
        slides = slides_of(nbformat.read(path, as_version=4))
    except (ValueError, RecursionError, nbformat.ValidationError) as exc:
        why = str(exc).split(":")[0][:120] or type(exc).__name__
        raise ValueError(f"{path} is not a notebook nbformat can read: {why}") from None
    ran, note = _executed_slides(Path(path), executed_dir, slides)
    slides = ran or slides
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if _has_figure(slides) and not (out_dir / PLOTLY_JS).is_file():
        from plotly.offline import get_plotlyjs

        (out_dir / PLOTLY_JS).write_text(get_plotlyjs(), encoding="utf-8")
    title = slides[0].title if slides else Path(path).stem
    deck = out_dir / Path(path).with_suffix(".html").name
    deck.write_text(deck_html(title, slides, note), encoding="utf-8")
    return Deck(deck, slides, note)


def build_index(decks: list[Deck], out_dir: Path) -> Path:
    """``out_dir/index.html``: a link to each deck."""
    items = "\n".join(
        f'<li><a href="{html.escape(d.path.name)}">{html.escape(d.path.stem)}</a> '
        f"({len(d.slides)} slides)</li>"
        for d in decks
    )
    index = Path(out_dir) / "index.html"
    index.write_text(
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>kvlab '
        f'slides</title></head><body style="font: 20px system-ui, sans-serif">\n'
        f"<h1>kvlab workshop: slides</h1>\n<ul>\n{items}\n</ul>\n</body></html>\n",
        encoding="utf-8",
    )
    return index


def deck_notebooks(notebook_dir: Path) -> list[Path]:
    """The walk's notebooks (NN_*), then the exercises (workshop/ex*), in order."""
    from kvlab.notebook.walkthrough import walkthrough_notebooks

    return walkthrough_notebooks(notebook_dir) + sorted(
        Path(notebook_dir).glob("workshop/ex*.ipynb")
    )
