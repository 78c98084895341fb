"""``kvlab slides``: a plain HTML slide deck per notebook, for the projector, offline: one slide
per ``#``-``###`` heading with its first paragraph and, from the executed copy (``kvlab
walkthrough``'s build/notebooks/) where its headings match, the section's first plotly figure.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

from kvlab.notebook.panel import PANEL_MIME
from kvlab.notebook.walkthrough import PLOTLY_MIME

HEADING = re.compile(r"^(#{1,3})\s+(.+?)\s*#*\s*$")  # the title, sections and subsections
FENCE = re.compile(r"^\s*(```|~~~)")
PLOTLY_JS = "plotly.min.js"


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


def slides_of(notebook) -> list[Slide]:
    """The slides of a notebook (an nbformat node): one per heading; figures from its outputs."""
    slides: list[Slide] = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for level, title, lines in _blocks(cell.source):
                if level:
                    slides.append(Slide(level, title, _first_paragraph(lines)))
                elif slides and not slides[-1].paragraph:  # a heading alone in the cell before
                    slides[-1].paragraph = _first_paragraph(lines)
        elif slides and slides[-1].figure is None:
            slides[-1].figure = next((f for f in map(_figure, cell.get("outputs", [])) if f), None)
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


def deck_html(title: str, slides: list[Slide], note: str) -> str:
    """A self-contained deck (but for plotly.min.js beside it, loaded only if a slide has a figure)."""
    from nbconvert.filters import markdown2html

    sections = []
    for number, slide in enumerate(slides, 1):
        tag = f"h{slide.level}"
        heading = re.sub(r"^\s*<p>|</p>\s*$", "", markdown2html(slide.title))  # one line: no <p>
        figure = ""
        if slide.figure is not None:
            spec = json.dumps(
                {"data": slide.figure.get("data", []), "layout": slide.figure.get("layout", {})}
            ).replace("</", "<\\/")
            figure = (
                f'<div class="figure" id="figure-{number}"></div>\n<script>{{ const f = {spec};\n'
                f'Plotly.newPlot("figure-{number}", f.data, f.layout, '
                "{responsive: true, displaylogo: false}); }</script>"
            )
        sections.append(
            f'<section class="slide level-{slide.level}" id="slide-{number}">\n'
            f"<{tag}>{heading}</{tag}>\n"
            f"{markdown2html(slide.paragraph) if slide.paragraph else ''}\n{figure}\n"
            f"<footer>{html.escape(title)} · {number}/{len(slides)}</footer>\n</section>"
        )
    plotly = f'<script src="{PLOTLY_JS}"></script>\n' if _has_figure(slides) else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
{plotly}<style>
html {{ scroll-snap-type: y mandatory; }}
body {{ margin: 0; font: 24px/1.45 system-ui, sans-serif; color: #222; }}
.slide {{ min-height: 100vh; box-sizing: border-box; padding: 5vh 7vw 8vh; position: relative;
         scroll-snap-align: start; border-bottom: 1px solid #ddd; break-after: page; }}
.slide.level-1 {{ display: flex; flex-direction: column; justify-content: center; }}
h1 {{ font-size: 2.1em; }} h2 {{ font-size: 1.6em; }} h3 {{ font-size: 1.3em; }}
code {{ font-size: 0.9em; background: #f3f3f3; padding: 0 0.2em; }}
.figure {{ width: 100%; height: 55vh; }}
footer {{ position: absolute; bottom: 2vh; right: 3vw; font-size: 0.6em; color: #888; }}
.note {{ font-size: 0.6em; color: #888; }}
</style></head><body>
{chr(10).join(sections)}
<p class="note">{html.escape(note)}</p>
<script>
const slides = [...document.querySelectorAll(".slide")];
const current = () => slides.findIndex(s => s.getBoundingClientRect().bottom > window.innerHeight / 2);
const go = i => slides[Math.max(0, Math.min(slides.length - 1, i))].scrollIntoView();
document.addEventListener("keydown", e => {{
  const step = {{ArrowRight: 1, ArrowDown: 1, PageDown: 1, " ": 1, ArrowLeft: -1, ArrowUp: -1, PageUp: -1}}[e.key];
  if (step) {{ e.preventDefault(); go(current() + step); }}
  if (e.key === "Home") go(0);
  if (e.key === "End") go(slides.length - 1);
}});
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
