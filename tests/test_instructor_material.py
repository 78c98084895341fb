"""The workshop's instructor material: every "Discuss" question has a model answer, the handout's
numbers are kvlab's, the slide deck has a slide per heading, the wheelhouse script and the guide
agree with setup.sh."""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from pathlib import Path

import nbformat
import pytest
from bounds import HANG_S

from kvlab import KVCacheManager
from kvlab.analysis.presets import seed_geometry
from kvlab.analysis.repro import MIB, run_repro
from kvlab.cli import REPRO_EXIT_CODES, build_parser
from kvlab.core.arith import div_ceil
from kvlab.core.page_index import max_blocks_per_seq
from kvlab.slides import FIGURE_FONT_PX, build_deck, slides_of

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
ANSWERS = NOTEBOOKS / "workshop" / "instructor" / "ANSWERS.md"
HANDOUT = ROOT / "docs" / "HANDOUT.md"
GUIDE = ROOT / "docs" / "INSTRUCTORS.md"


def _words(text: str) -> str:
    return " ".join(text.split())


# --- Discuss questions and their answers -----------------------------------------------------------


def discuss_questions(path: Path) -> dict:
    """``{"<notebook>.<n>": question}`` for the bullets under a "## Discuss" heading of the
    notebook at ``path``; <notebook> is its name up to the first "_" ("ex1", "03")."""
    prefix = path.stem.split("_")[0]
    questions = {}
    for cell in nbformat.read(path, as_version=4).cells:
        lines = cell.source.splitlines() if cell.cell_type == "markdown" else []
        if not lines or not re.match(r"^##\s+Discuss\b", lines[0]):
            continue
        items = []
        for line in lines[1:]:
            if re.match(r"^[*-]\s+", line):
                items.append(line[2:])
            elif line.startswith(" ") and items:  # a bullet's continuation
                items[-1] += " " + line
        questions.update({f"{prefix}.{n}": _words(q) for n, q in enumerate(items, 1)})
    return questions


def answer_entries(text: str) -> dict:
    """``{key: quoted question}`` for each "### key" entry of ANSWERS.md and its "> " quote."""
    entries = {}
    for key, body in re.findall(r"^### (\S+)\n(.*?)(?=^#{2,3} |\Z)", text, re.M | re.S):
        entries[key] = _words(
            " ".join(line[1:] for line in body.splitlines() if line.startswith(">"))
        )
    return entries


def all_questions() -> dict:
    questions = {}
    for path in sorted(NOTEBOOKS.rglob("*.ipynb")):
        if ".ipynb_checkpoints" not in path.parts:
            questions.update(discuss_questions(path))
    return questions


def test_every_discuss_question_has_an_answer_that_quotes_it():
    questions, answers = all_questions(), answer_entries(ANSWERS.read_text(encoding="utf-8"))
    assert {key.split(".")[0] for key in questions} >= {"ex1", "ex2", "ex3", "ex4"}
    assert sorted(set(questions) - set(answers)) == [], "Discuss questions without an answer entry"
    assert sorted(set(answers) - set(questions)) == [], (
        "answer entries for questions no notebook asks"
    )
    changed = [key for key in questions if answers[key] != questions[key]]
    assert changed == [], (
        f"the question changed in the notebook; update its quote and answer: {changed}"
    )
    text = ANSWERS.read_text(encoding="utf-8")
    for key in questions:  # each has an answer below its quote, not only the quote
        body = re.search(
            rf"^### {re.escape(key)}\n(.*?)(?=^#{{2,3}} |\Z)", text, re.M | re.S
        ).group(1)
        assert (
            len([line for line in body.splitlines() if line and not line.startswith(">")]) >= 2
        ), key


def test_a_new_question_without_an_answer_is_found(tmp_path):
    """What the test above relies on: a bullet added under "## Discuss" gets a key no entry has."""
    nb = nbformat.read(NOTEBOOKS / "workshop" / "ex1_page_index_width.ipynb", as_version=4)
    discuss = next(c for c in nb.cells if c.source.startswith("## Discuss"))
    discuss.source += "\n* What would a row of 1,000,000 tokens cost?\n  (A continuation line.)"
    path = tmp_path / "ex1_page_index_width.ipynb"
    nbformat.write(nb, path)
    questions = discuss_questions(path)
    answers = answer_entries(ANSWERS.read_text(encoding="utf-8"))
    new = sorted(set(questions) - set(answers))
    assert new == [f"ex1.{len(questions)}"]
    assert questions[new[0]] == "What would a row of 1,000,000 tokens cost? (A continuation line.)"


def test_the_answers_numbers_are_kvlabs():
    text = _words(ANSWERS.read_text(encoding="utf-8"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for context, outcome in (
            (2100, "refused"),
            (2200, "crash"),
            (2176, "refused"),
            (2177, "crash"),
        ):
            assert run_repro(4, context, "clamped").outcome == outcome, context
        assert f"--context 2176` exits {REPRO_EXIT_CODES['refused']}" in text
        assert f"`--context 2177` exits {REPRO_EXIT_CODES['crash']}" in text
        nbytes = {
            p: KVCacheManager(
                seed_geometry(),
                quota_bytes=4 * MIB,
                max_seq_len=8192,
                max_batch_size=512,
                page_index_policy=p,
            ).page_index.nbytes
            for p in ("clamped", "configured")
        }
    assert f"513 x 2 x 68 x 4 = {nbytes['clamped']:,} B" in text
    assert f"513 x 2 x 260 x 4 = {nbytes['configured']:,} B" in text
    big = div_ceil(8192 + 16, 32)
    assert (
        f"Request requires {big} KV cache blocks to complete, which exceeds the total capacity of 64"
        in text
    )


# --- the handout --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def handout() -> str:
    return HANDOUT.read_text(encoding="utf-8")


def test_the_handout_fits_two_printed_pages_and_tells_the_story_in_six_lines(handout):
    assert len(handout.split()) <= 900, "more than two printed pages"
    story = re.search(r"^## The story in six lines\n\n(.*?)\n\n", handout, re.M | re.S).group(1)
    assert [line.split(".")[0] for line in story.splitlines()] == [str(n) for n in range(1, 7)]
    assert "docs/GLOSSARY.md" in handout and (ROOT / "docs" / "GLOSSARY.md").is_file()


def test_the_handout_numbers_are_kvlabs(handout):
    g = seed_geometry()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mgr = {
            p: KVCacheManager(
                g, quota_bytes=4 * MIB, max_seq_len=8192, max_batch_size=512, page_index_policy=p
            )
            for p in ("clamped", "configured")
        }
        pools = {mib: run_repro(mib, 8192, "clamped") for mib in (8, 16)}
    clamped, configured = mgr["clamped"], mgr["configured"]
    tpb = g.tokens_per_block
    phrases = [
        f"{g.num_layers} × {g.kv_factor} × {g.num_kv_heads} × {g.head_dim} × 2 B = {g.bytes_per_token:,} B",
        f"4 MiB / {g.bytes_per_block:,} B = {clamped.total_blocks} pages ({clamped.total_blocks * tpb:,} tokens)",
        f"min({clamped.configured_max_seq_len:,}, {clamped.max_num_tokens:,}) = {clamped.max_seq_len:,}",
        f"clamped: ceil({clamped.max_seq_len + 1:,} / {tpb}) = {div_ceil(clamped.max_seq_len + 1, tpb)} → "
        f"{clamped.max_blocks_per_seq} entries",
        f"configured: ceil({8192 + 1:,} / {tpb}) = {div_ceil(8193, tpb)} → {configured.max_blocks_per_seq} entries",
        f"8,192 tokens → {g.blocks_for_tokens(8192)}",
        f"{g.blocks_for_tokens(8192)} > {clamped.max_blocks_per_seq}: crash; with {configured.max_blocks_per_seq}: "
        f"{g.blocks_for_tokens(8192)} > {clamped.total_blocks} pages: `False`",
        f"at batch 512: {clamped.page_index.nbytes:,} B → {configured.page_index.nbytes:,} B "
        f"(×{configured.page_index.nbytes / clamped.page_index.nbytes:.2f})",
        f"8 MiB still crashes (row {pools[8].max_blocks_per_seq} entries, {pools[8].entries_needed} needed)",
        f"16 MiB holds 8,192 tokens exactly ({pools[16].total_blocks} pages, row {pools[16].max_blocks_per_seq}): allocated",
    ]
    assert (clamped.total_blocks, clamped.max_blocks_per_seq, configured.max_blocks_per_seq) == (
        64,
        68,
        260,
    )
    assert pools[8].outcome == "crash" and pools[16].outcome == "ok"
    assert max_blocks_per_seq(clamped.max_seq_len, tpb) == clamped.max_blocks_per_seq
    missing = [p for p in phrases if p not in handout]
    assert missing == [], "the handout's numbers differ from kvlab's"


def test_the_handout_commands_exist_and_exit_as_it_says(handout):
    block = re.search(r"^## What you type\n\n```bash\n(.*?)^```", handout, re.M | re.S).group(1)
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for line in block.splitlines():
        words = line.split("#")[0].split()
        if words[0] == "kvlab":
            assert words[1] in commands, line
        elif words[0] == "bash":
            assert (ROOT / words[1]).is_file(), line
    for flags, outcome in (
        ("", "crash"),
        ("--policy none/configured", "refused"),
        ("--pool-mib 16", "ok"),
    ):
        stated = re.search(rf"^kvlab repro {re.escape(flags)}\s*# .*?exit (\d)", block, re.M)
        assert stated and int(stated.group(1)) == REPRO_EXIT_CODES[outcome], flags


# --- the slides ---------------------------------------------------------------------------------


def _headings(path: Path) -> list:
    """The headings (# to ###) of the notebook's markdown, outside code fences."""
    titles = []
    for cell in nbformat.read(path, as_version=4).cells:
        fenced = False
        for line in cell.source.splitlines() if cell.cell_type == "markdown" else []:
            fenced ^= line.lstrip().startswith("```")
            match = None if fenced else re.match(r"^#{1,3}\s+(.*)", line)
            if match:
                titles.append(match.group(1).strip())
    return titles


@pytest.mark.parametrize(
    "name, bare",
    [
        ("02_single_gpu_repro_4mib", []),
        (
            "03_the_one_line_fix",
            ["7. Alone: refused every pass, then the deadlock"],
        ),  # heading, then code
        ("ex3_admission_check", []),
    ],
)
def test_a_deck_has_one_slide_per_heading(name, bare, tmp_path):
    path = next(NOTEBOOKS.rglob(f"{name}.ipynb"))
    deck = build_deck(path, tmp_path, executed_dir=tmp_path / "none")
    page = deck.path.read_text(encoding="utf-8")
    headings = _headings(path)
    assert [s.title for s in deck.slides] == headings
    assert page.count('<section class="slide') == len(headings) >= 4
    why = "an exercise draws no figures" if name.startswith("ex") else "no executed copy"
    assert f"text only: {why}" in page and "plotly.min.js" not in page
    assert not (tmp_path / "plotly.min.js").exists()
    assert [s.title for s in deck.slides if not s.paragraph] == bare, (
        "a slide without its first paragraph"
    )


def _executed(path: Path, figure_after: str, headings=None) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for title in headings or ["Deck", "One", "Two"]:
        nb.cells.append(
            nbformat.v4.new_markdown_cell(
                f"{'#' if title == 'Deck' else '##'} {title}\n\nAbout {title}."
            )
        )
        code = nbformat.v4.new_code_cell("show()")
        if title == figure_after:
            code.outputs = [
                nbformat.v4.new_output(
                    "display_data",
                    data={
                        "application/vnd.plotly.v1+json": {
                            "data": [{"type": "bar", "y": [1, 2], "name": "</script> pages"}],
                            "layout": {"title": {"text": "pages"}},
                        },
                        "text/plain": "<Figure>",
                    },
                )
            ]
        nb.cells.append(code)
    nbformat.write(nb, path)
    return nb


def test_a_deck_takes_each_sections_first_figure_from_the_executed_copy(tmp_path):
    (tmp_path / "src").mkdir(), (tmp_path / "ran").mkdir()
    _executed(tmp_path / "src" / "01_deck.ipynb", figure_after="")  # stored without outputs
    _executed(tmp_path / "ran" / "01_deck.ipynb", figure_after="Two")
    deck = build_deck(tmp_path / "src" / "01_deck.ipynb", tmp_path / "out", tmp_path / "ran")
    assert [s.figure is not None for s in deck.slides] == [False, False, True]
    page = deck.path.read_text(encoding="utf-8")
    assert page.count('class="figure"') == 1 and '<script src="plotly.min.js">' in page
    assert "<\\/script> pages" in page  # a trace's name cannot end the script early
    figure = json.loads(page.split('<script type="application/json">')[1].split("</script>")[0])
    assert "title" not in figure["layout"]  # the slide's heading says it, in the room's size
    assert figure["layout"]["font"]["size"] == FIGURE_FONT_PX
    assert figure["data"][0]["name"] == "</script> pages"
    assert (
        tmp_path / "out" / "plotly.min.js"
    ).stat().st_size > 1_000_000  # plotly.js itself: offline
    assert "figures from" in deck.note


def test_an_executed_copy_with_other_headings_is_not_used(tmp_path):
    (tmp_path / "src").mkdir(), (tmp_path / "ran").mkdir()
    _executed(tmp_path / "src" / "01_deck.ipynb", figure_after="")
    _executed(tmp_path / "ran" / "01_deck.ipynb", figure_after="One", headings=["Deck", "One"])
    deck = build_deck(tmp_path / "src" / "01_deck.ipynb", tmp_path / "out", tmp_path / "ran")
    assert len(deck.slides) == 3 and not any(s.figure for s in deck.slides)
    assert "has other headings" in deck.note


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda text: text[: len(text) // 2], "Notebook does not appear to be JSON"),
        (lambda text: "[" * 50_000 + "]" * 50_000, "maximum recursion depth exceeded"),
    ],
    ids=["cut short", "nested deep"],
)
def test_an_executed_copy_that_is_not_a_notebook_is_not_used(tmp_path, damage, why):
    """A walkthrough stopped while writing leaves a truncated copy: the deck is text only."""
    (tmp_path / "src").mkdir(), (tmp_path / "ran").mkdir()
    _executed(tmp_path / "src" / "01_deck.ipynb", figure_after="")
    _executed(tmp_path / "ran" / "01_deck.ipynb", figure_after="One")
    whole = (tmp_path / "ran" / "01_deck.ipynb").read_text()
    (tmp_path / "ran" / "01_deck.ipynb").write_text(damage(whole))
    deck = build_deck(tmp_path / "src" / "01_deck.ipynb", tmp_path / "out", tmp_path / "ran")
    assert len(deck.slides) == 3 and not any(s.figure for s in deck.slides)
    assert f"is not a notebook ({why}" in deck.note


def test_slides_of_never_reads_a_heading_inside_a_code_fence():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "# Title\n\nText.\n\n```bash\n# a comment\n```\n\n## Next\n\nMore."
        )
    ]
    assert [(s.level, s.title, s.paragraph) for s in slides_of(nb)] == [
        (1, "Title", "Text."),
        (2, "Next", "More."),
    ]


# --- the wheelhouse and the guide -----------------------------------------------------------------


def test_the_wheelhouse_script_is_valid_bash_and_pins_torch_as_setup_does():
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "wheelhouse.sh")]).returncode == 0
    dry = subprocess.run(
        ["bash", str(ROOT / "scripts" / "wheelhouse.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert dry.returncode == 0, dry.stderr
    pin = re.search(
        r'pip install "(torch==[\d.]+)"', (ROOT / "scripts" / "setup.sh").read_text()
    ).group(1)
    downloads = [line for line in dry.stdout.splitlines() if " pip download " in line]
    assert len(downloads) == 2 and all(pin in line for line in downloads)
    assert not re.search(r"torch\\?>=", dry.stdout), "an unpinned torch would fetch a second build"
    for name in (
        "numpy",
        "plotly",
        "jupyterlab",
        "papermill",
        "ipykernel",
        "pytest",
        "playwright",
        "setuptools",
    ):
        assert re.search(rf"\b{name}\b", downloads[1]), name
    offline = [line.strip() for line in dry.stdout.splitlines() if "--no-index" in line]
    assert offline == [
        f'python3 -m pip install --no-index --find-links build/wheelhouse "{pin}"',
        'python3 -m pip install --no-index --find-links build/wheelhouse -e ".[notebooks,test,ui]"',
    ]
    guide = GUIDE.read_text(encoding="utf-8")
    assert all(line in guide for line in offline), (
        "INSTRUCTORS.md's offline install differs from the script's"
    )
    bad = subprocess.run(
        ["bash", str(ROOT / "scripts" / "wheelhouse.sh"), "--dry-run", "--extras", "nope"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert bad.returncode != 0 and "no extra 'nope'" in bad.stderr


def test_the_guide_links_the_material_and_covers_macos_and_windows():
    guide = GUIDE.read_text(encoding="utf-8")
    for target in (
        "../notebooks/workshop/instructor/ANSWERS.md",
        "HANDOUT.md",
        "GLOSSARY.md",
        "../scripts/wheelhouse.sh",
    ):
        assert f"]({target})" in guide, target
        assert (GUIDE.parent / target).resolve().is_file(), target
    for command in (
        "kvlab doctor",
        "kvlab doctor --json",
        "kvlab slides",
        "bash scripts/wheelhouse.sh",
    ):
        assert command in guide, command
    for heading in ("### macOS", "### Windows", "## The room checklist"):
        assert re.search(rf"^{heading}", guide, re.M), heading


def test_the_exercises_draw_no_figures_as_their_decks_say():
    """kvlab slides says an exercise's deck is text only because the exercise draws no
    figures: true while no exercise imports a plotting module or shows a figure."""
    for source in sorted((ROOT / "notebooks" / "workshop").glob("ex*.py")):
        text = source.read_text(encoding="utf-8")
        assert not re.search(r"\bplotly\b|kvlab\.notebook\.viz|\bviz\.|\.show\(", text), source


def test_a_slide_says_the_first_sentence_and_cuts_a_long_one_at_a_clause():
    from kvlab.slides import SAY_CHARS, projector_sentence

    assert projector_sentence("One pool. Two rows.") == "One pool."
    long = "The peers run " + "the same workload, " * 12 + "side by side `kvlab.sched.vllm` ok."
    said = projector_sentence(long)
    assert len(said) <= SAY_CHARS + 4 and said.endswith("workload ...")
    coded = "x" * 150 + " and `a very long code span that the cut would split in two` ok."
    assert projector_sentence(coded) == "x" * 150 + " and ..."
