"""The project's own wiring: pyproject.toml, environment.yml, the README's commands and CI."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
VENV = "python3 -m venv .venv && . .venv/bin/activate"
TEST_COMMAND = "bash scripts/test.sh"
QUICK_START = [VENV, "bash scripts/walkthrough.sh"]  # a learner's; the developers' is TEST_COMMAND
#: The README and every file under docs/: their relative links must point at files that exist.
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _expand(project: dict, extra: str) -> set[str]:
    """Requirement names of an extra, following its kvlab[...] references."""
    names = set()
    for text in project["optional-dependencies"][extra]:
        req = Requirement(text)
        if req.name == project["name"]:
            for inner in req.extras:
                names |= _expand(project, inner)
        else:
            names.add(req.name)
    return names


def test_pyproject_requirements_parse_and_self_references_exist(project):
    extras = project["optional-dependencies"]
    assert {"notebooks", "test", "ui", "gpu", "trtllm", "dev", "all"} <= set(extras)
    for text in project["dependencies"]:
        Requirement(text)
    for name, reqs in extras.items():
        for text in reqs:
            req = Requirement(text)
            if req.name == project["name"]:
                assert req.extras <= set(extras), (name, text)


def test_core_dependencies(project):
    reqs = {Requirement(t).name: Requirement(t) for t in project["dependencies"]}
    assert {
        "torch",
        "numpy",
        "pyyaml",
        "plotly",
        "ipywidgets",
        "anywidget",
        "tqdm",
        "pandas",
    } <= set(reqs)
    # scripts/setup.sh installs torch 2.13.0 (the CPU build) on machines without a GPU.
    assert reqs["torch"].specifier.contains(Version("2.13.0"))
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert re.search(r'pip install "torch==2\.13\.0"', setup)


def test_test_extra_holds_the_notebooks_extra(project):
    assert _expand(project, "notebooks") <= _expand(project, "test")
    assert {"pytest", "hypothesis", "pytest-timeout", "papermill", "kaleido"} <= _expand(
        project, "test"
    )
    assert _expand(project, "dev") >= _expand(project, "test") | _expand(project, "ui")


def test_console_script(project):
    assert project["scripts"]["kvlab"] == "kvlab.cli:run"


def test_environment_yml_installs_this_package_with_existing_extras(project):
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "conda-forge" in env["channels"]
    deps = env["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python="))
    major_minor = python.split("=", 1)[1]
    assert Requirement(f"python{project['requires-python']}").specifier.contains(
        Version(major_minor)
    )
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert len(pip) == 1, "pyproject.toml is the source of truth: environment.yml lists no packages"
    match = re.fullmatch(r"-e \.\[([\w,-]+)\]", pip[0])
    assert match, pip[0]
    extras = set(match.group(1).split(","))
    assert extras and extras <= set(project["optional-dependencies"])


def _quick_start_commands() -> list[list[str]]:
    """The commands of each code block of the README's Quick start: a learner's, then the
    developers'."""
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", readme, re.M | re.S)
    assert section, "README.md has no '## Quick start' section"
    blocks = re.findall(r"^```(?:bash|sh)?\n(.*?)^```", section.group(1), re.M | re.S)
    return [
        [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
        for block in blocks
    ]


def test_readme_quick_start_is_the_venv_and_the_walkthrough_then_the_developers_tests():
    """A learner's commands download only what the walk needs (issue 45: the test command
    pulled ~13 GB of engine environments into every learner's set-up)."""
    assert _quick_start_commands() == [QUICK_START, [TEST_COMMAND]]
    for command in QUICK_START[1:] + [TEST_COMMAND]:
        assert (ROOT / command.split()[1]).is_file(), command


def test_every_script_the_readme_names_exists_with_its_flags():
    """`bash scripts/X.sh --flag` anywhere in the README: the script exists and handles the flag
    (the quick tier, `bash scripts/test.sh --quick`, included)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"bash (scripts/[\w.-]+)((?: --[\w-]+)*)", readme)
    assert ("scripts/test.sh", " --quick") in commands
    for script, flags in commands:
        text = (ROOT / script).read_text(encoding="utf-8")
        for flag in flags.split():
            assert f'"{flag}"' in text, f"{script} does not handle {flag}"


def test_ci_runs_the_readme_test_command():
    ci = ROOT / ".ci" / "run"
    assert os.access(ci, os.X_OK)
    lines = [line.strip() for line in ci.read_text().splitlines()]
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    assert [TEST_COMMAND] in _quick_start_commands() and TEST_COMMAND in lines


@pytest.mark.parametrize(
    "script", ["scripts/setup.sh", "scripts/test.sh", "scripts/walkthrough.sh", ".ci/run"]
)
def test_scripts_are_valid_bash(script):
    result = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def rows_minutes(rows):
    """(what, minutes) of each row of the plan, in order (two breaks share a name)."""
    return [(what.strip(), int(length)) for _, _, length, what in rows]


def test_the_instructors_plan_adds_up_and_keeps_to_the_notebooks_estimates():
    """docs/INSTRUCTORS.md's timed plan: each row starts where the one before ended, and each
    notebook 01 to 06 and each exercise gets the minutes it states ("About N minutes")."""
    text = (ROOT / "docs" / "INSTRUCTORS.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+):(\d\d) \| (\d+) \| ([^|]+) \|", text, re.M)
    assert rows, "no timed plan"
    clock = 0
    for hours, minutes, length, what in rows:
        assert int(hours) * 60 + int(minutes) == clock, (
            f"{what.strip()} starts at {hours}:{minutes}"
        )
        clock += int(length)
    title = re.search(r"^## A (\d+(?:\.\d+)?)-hour plan", text, re.M)
    assert title and float(title.group(1)) * 60 == clock, "the plan's title and its rows disagree"
    slots = {what.strip(): int(length) for _, _, length, what in rows}
    for path in sorted((ROOT / "notebooks" / "workshop").glob("ex*.py")):
        stated = int(re.search(r"About (\d+) minutes", path.read_text(encoding="utf-8")).group(1))
        number = path.name[2]
        slot = next(
            minutes for what, minutes in slots.items() if what.startswith(f"Exercise {number} ")
        )
        assert slot == stated, (
            f"exercise {number}: {slot} min in the plan, {stated} in its notebook"
        )
    for path in sorted((ROOT / "notebooks").glob("0*.py")):
        stated = int(re.search(r"About (\d+) minutes", path.read_text(encoding="utf-8")).group(1))
        number = path.name[:2]
        slot = next(
            (minutes for what, minutes in slots.items() if what.startswith(f"{number} ·")), None
        )
        assert slot == stated, (
            f"notebook {number}: {slot} min in the plan, {stated} in the notebook"
        )
    # the shorter day: what it drops is what those rows take, and what is left is what it says
    short = re.search(
        r"^Short on time \((\d+) h (\d+) min\): drop 05, exercise 4 and 06 \(−(\d+) min\) "
        r"and the second break \(−(\d+) min\)",
        text,
        re.M,
    )
    assert short, "no shorter plan"
    left, dropped, breaks = int(short[1]) * 60 + int(short[2]), int(short[3]), int(short[4])
    assert dropped == sum(
        m for what, m in slots.items() if what.startswith(("05 ·", "Exercise 4 ", "06 ·"))
    )
    assert breaks == [m for what, m in rows_minutes(rows) if what == "Break"][1]
    assert left == clock - dropped - breaks


def _broken_links(document: Path) -> list[str]:
    """The relative Markdown links of ``document`` (outside code blocks) whose file does not
    exist, or whose ``#anchor`` names no heading of that file as GitHub spells its anchors."""
    text = re.sub(r"^```.*?^```", "", document.read_text(encoding="utf-8"), flags=re.M | re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z][a-z+.-]*:|#", target):
            continue  # a URL, or an anchor of this page
        file, _, anchor = target.partition("#")
        path = (document.parent / file).resolve()
        if not path.exists() or (anchor and anchor not in _anchors(path)):
            broken.append(target)
    return broken


def _anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_that_exist(document):
    assert _broken_links(document) == []


def test_the_link_check_sees_a_broken_link(tmp_path):
    (tmp_path / "there.md").write_text("# A heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[a](there.md#a-heading) [b](gone.md) [c](there.md#nowhere) [d](https://example.org) "
        "[e](#top)\n```\n[f](in-a-code-block.md)\n```\n"
    )
    assert _broken_links(page) == ["gone.md", "there.md#nowhere"]


def test_the_files_a_reader_opens_first_fit_one_sitting():
    """The README's "Read five files first" names the teaching path; together they stay short
    enough to read in one sitting (issue 40: at most 1,200 lines as ruff format writes them)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    bullet = readme.split("Read five files first", 1)[1].split("\n- ", 1)[0]
    files = re.findall(r"`(kvlab/[\w/]+\.py)`", bullet)
    assert len(files) == 5, files
    lines = sum(len((ROOT / f).read_text(encoding="utf-8").splitlines()) for f in files)
    assert lines <= 1200, f"{files} hold {lines} lines"
