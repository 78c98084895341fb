"""Scenario files: ``data/scenarios/*.yaml`` -> validated, frozen :class:`Scenario` objects.

A scenario records one experiment from a source (a blog post, an issue, a pull request): the
configuration it ran and the numbers it reported. Notebooks, the ``kvlab scenario`` command and the
tests load it by name::

    from kvlab.run.scenarios import load_scenario
    sc = load_scenario("rtx5080-4mib")      # a name under data/scenarios/, or a path to a file
    sc.parameters.pool_mib, sc.expected["width_clamped"]   # 4, 68

The schema is declarative: :mod:`kvlab.run.scenario_schema` holds the records a file becomes,
each field carrying its check; this module reads a file into them and checks what one field
cannot check alone.

Two optional blocks carry a multi-rank deployment (``issue_21470_16x_gb300.yaml``):
``deployment`` (:class:`ScenarioDeployment`: ranks, per-rank memory budget, scheduler settings and the
requests; its memory budget replaces ``parameters.pool_mib``, which is required otherwise), and
``assumptions``: for every number the source leaves unstated, ``field.path: {value, range,
why}``. An assumption must name a field the file sets, repeat its value, and keep it inside its
range (``[low, high]`` for a number, the alternatives for a string).

Files are read with PyYAML's safe loader after a pass over the parsed node tree that refuses
YAML tags (``!!python/object`` and friends), anchors/aliases, duplicate keys and integers of
more than ``MAX_INT_CHARS`` characters; a file that is not a regular file, is larger than
``MAX_FILE_BYTES`` or is nested too deeply for the parser is refused too. Every problem
raises :class:`ScenarioError` (a ValueError) whose message names the file, the field path (such
as ``parameters.pool_mib``) and what the field accepts.

The scenario folder is found next to the package (``kvlab/../data/scenarios``): that is the
repository in an editable install (``pip install -e .``), the supported way to use kvlab. A
non-editable install carries no scenario files; pass a path to ``load_scenario`` there.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from kvlab.core.checks import MAX_COUNT, check_instance
from kvlab.core.paths import DATA_DIR
from kvlab.run.rank_config import scenario_numbers
from kvlab.run.scenario_fields import Int, Record, ScenarioError, join_field, parse_field, shown
from kvlab.run.scenario_schema import EXPECTED, Assumption, Scenario
from kvlab.sched.scheduler import check_chunk_budget

SCENARIO_DIR = DATA_DIR / "scenarios"

# --- loading -------------------------------------------------------------------------------------

#: Longer integer literals are refused before Python converts them (MAX_COUNT has 16 digits).
MAX_INT_CHARS = 64
_PLAIN_TAGS = {
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")
}
_NUMBER_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
#: What PyYAML (YAML 1.1) silently converts: 010 -> 8 (octal), 1:00 -> 60 (base 60).
_YAML11_NUMBER = re.compile(r"[-+]?(0[0-7_]+|[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?)")


def _check_nodes(node, file, where: str = "", seen=None) -> None:
    """Refuse what a plain scenario file has no use for: tags, aliases, duplicate keys."""
    seen = set() if seen is None else seen
    what = where or "the document"
    if id(node) in seen:
        raise ScenarioError(
            file,
            where,
            f"{what} uses a YAML alias (line {node.start_mark.line + 1}); "
            "scenario files spell every value out",
        )
    seen.add(id(node))
    if node.tag not in _PLAIN_TAGS:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise ScenarioError(
            file,
            where,
            f"{what} has the YAML tag {tag!r} (line "
            f"{node.start_mark.line + 1}); scenario files hold plain mappings, "
            "lists, strings and numbers only",
        )
    if node.tag == "tag:yaml.org,2002:int" and len(node.value) > MAX_INT_CHARS:
        raise ScenarioError(
            file,
            where,
            f"{what} is an integer of {len(node.value)} characters "
            f"(line {node.start_mark.line + 1}); no scenario number is above "
            f"{MAX_COUNT}",
        )
    if node.tag in _NUMBER_TAGS and _YAML11_NUMBER.fullmatch(node.value):
        raise ScenarioError(
            file,
            where,
            f"{what} is written {node.value} (line "
            f"{node.start_mark.line + 1}), which YAML 1.1 reads as a base-8 or "
            "base-60 number; write it in decimal (a leading zero or a colon is "
            "refused), or quote it if it is text",
        )
    if isinstance(node, yaml.MappingNode):
        names = set()
        for key, value in node.value:
            _check_nodes(key, file, where, seen)
            if not isinstance(key, yaml.ScalarNode):
                raise ScenarioError(
                    file,
                    where,
                    f"{what} has a key that is not a plain name (line {key.start_mark.line + 1})",
                )
            name = join_field(where, key.value)
            if key.value in names:
                raise ScenarioError(
                    file, name, f"{name} is given twice (line {key.start_mark.line + 1})"
                )
            names.add(key.value)
            _check_nodes(value, file, name, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_nodes(item, file, f"{where}[{i}]", seen)


#: The largest scenario file read (the real ones are a few KiB).
MAX_FILE_BYTES = 1 << 20


def _yaml_problem(error: yaml.YAMLError) -> str:
    """What the YAML parser found and where, without the snippet of the file it quotes."""
    if isinstance(error, yaml.reader.ReaderError):
        return f"{error.reason} #x{error.character:04x} at byte {error.position}"
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return f"{error.context + ', ' if error.context else ''}{error.problem}{where}"
    return type(error).__name__


def _read_yaml(path: Path):
    try:
        if not path.is_file():  # a folder, a device such as /dev/zero, a FIFO
            raise ScenarioError(path, "", "cannot read the scenario file: not a regular file")
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise ScenarioError(
                path,
                "",
                f"the file is larger than MAX_FILE_BYTES={MAX_FILE_BYTES} "
                "bytes; scenario files are a few KiB",
            )
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(path, "", f"cannot read the scenario file: {e}") from None
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses control characters at once
    except yaml.YAMLError as e:
        raise ScenarioError(path, "", f"not valid YAML: {_yaml_problem(e)}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError(path, "", "the file is empty; it must be " + str(Record(Scenario)))
        _check_nodes(node, path)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ScenarioError(path, "", f"not valid YAML: {_yaml_problem(e)}") from None
    except RecursionError:
        raise ScenarioError(
            path, "", "the document is nested too deeply; scenario files are a few levels deep"
        ) from None
    finally:
        loader.dispose()


def list_scenarios() -> list[str]:
    """Names of the scenarios under data/scenarios/, sorted."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


#: Short names accepted besides the file stems.
ALIASES: Mapping[str, str] = {"issue-21470": "issue_21470_16x_gb300"}


SCENARIO_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def _locate(name_or_path) -> Path:
    check_instance("name_or_path", name_or_path, (str, os.PathLike))
    if isinstance(name_or_path, str):
        name_or_path = ALIASES.get(name_or_path, name_or_path)
    text = str(name_or_path)
    if (
        isinstance(name_or_path, Path)
        or "/" in text
        or "\\" in text
        or text.endswith((".yaml", ".yml"))
    ):
        return Path(name_or_path)
    if not SCENARIO_NAME.fullmatch(text):
        raise ScenarioError(
            SCENARIO_DIR,
            "name",
            f"a scenario name is 1 to 100 letters, digits, "
            f"'_', '-' or '.', got {shown(text)}; known scenarios: "
            f"{list_scenarios()} (or pass a path to a .yaml file)",
        )
    path = SCENARIO_DIR / f"{text}.yaml"
    if not path.is_file():
        raise ScenarioError(
            SCENARIO_DIR,
            "name",
            f"no scenario named {text!r}; known scenarios: "
            f"{list_scenarios()}, aliases {sorted(ALIASES)} (or pass a path to "
            "a .yaml file)",
        )
    return path


def load_scenario(name_or_path) -> Scenario:
    """Load and validate a scenario: a name under data/scenarios/ (the file stem, or an alias
    of :data:`ALIASES` such as ``"issue-21470"``) or a path."""
    path = _locate(name_or_path)
    scenario = parse_field(Record(Scenario), _read_yaml(path), path, "")
    if scenario.name != path.stem:
        raise ScenarioError(
            path, "name", f"name must equal the file's stem {path.stem!r}, got {scenario.name!r}"
        )
    _check_cross_fields(scenario, path)
    return scenario


def _check_cross_fields(scenario: Scenario, path: Path) -> None:
    """What one field cannot check alone: the pool's source, the deployment's requests, that
    each assumption matches the field it names, and that the expected numbers are what the
    parameters give."""
    if scenario.parameters.pool_mib is None and scenario.deployment is None:
        where = "parameters.pool_mib"
        raise ScenarioError(
            path,
            where,
            f"{where} is missing; it must be {Int(1, 1 << 20)} "
            "(only a scenario with a `deployment` block may leave it out)",
        )
    deployment = scenario.deployment
    if deployment is not None:
        if scenario.parameters.pool_mib is not None:
            raise ScenarioError(
                path,
                "parameters.pool_mib",
                "parameters.pool_mib must be left out "
                "beside a `deployment` block, whose memory budget sets each rank's pool",
            )
        if deployment.expert_parallel_size > deployment.ranks:
            raise ScenarioError(
                path,
                "deployment.expert_parallel_size",
                f"deployment.expert_parallel_size "
                f"must be in [1, {deployment.ranks}] (deployment.ranks), got "
                f"{deployment.expert_parallel_size}",
            )
        ids = [r.id for r in deployment.requests]
        for i, request in enumerate(deployment.requests):
            where = f"deployment.requests[{i}]"
            if ids.count(request.id) > 1:
                raise ScenarioError(
                    path, f"{where}.id", f"{where}.id {request.id!r} is given twice"
                )
            if request.rank is not None and request.rank >= deployment.ranks:
                raise ScenarioError(
                    path,
                    f"{where}.rank",
                    f"{where}.rank must be in "
                    f"[0, {deployment.ranks - 1}] (deployment.ranks = "
                    f"{deployment.ranks}), got {request.rank}",
                )
            if request.arrival_step >= deployment.max_steps:  # it would never arrive
                raise ScenarioError(
                    path,
                    f"{where}.arrival_step",
                    f"{where}.arrival_step must be "
                    f"in [0, {deployment.max_steps - 1}] (deployment.max_steps = "
                    f"{deployment.max_steps}), got {request.arrival_step}",
                )
        if deployment.chunked_prefill:
            try:  # what the ranks' schedulers would refuse, refused before any rank starts
                check_chunk_budget(scenario.parameters.tokens_per_block, deployment.max_num_tokens)
            except ValueError as e:
                raise ScenarioError(
                    path,
                    "deployment.max_num_tokens",
                    f"deployment.max_num_tokens and parameters.tokens_per_block: {e}",
                ) from None
        bg = deployment.background
        if bg is not None and bg.count and (bg.count - 1) // bg.per_step >= deployment.max_steps:
            raise ScenarioError(
                path,
                "deployment.background.count",
                f"deployment.background: {bg.count} requests at {bg.per_step} a step "
                f"arrive until step {(bg.count - 1) // bg.per_step}, past "
                f"deployment.max_steps ({deployment.max_steps}): the last would never arrive",
            )
        if bg is not None and bg.prompt_len_min > bg.prompt_len_max:
            raise ScenarioError(
                path,
                "deployment.background.prompt_len_min",
                f"deployment.background.prompt_len_min ({bg.prompt_len_min}) must "
                f"not exceed prompt_len_max ({bg.prompt_len_max})",
            )
    for name, assumption in scenario.assumptions.items():
        where = f"assumptions.{name}"
        target = scenario
        for part in name.split("."):
            if not dataclasses.is_dataclass(target) or part not in {
                f.name for f in dataclasses.fields(target)
            }:
                raise ScenarioError(path, where, f"{where} names no field of the scenario")
            target = getattr(target, part)
        if target is None:
            raise ScenarioError(path, where, f"{where} names {name}, which the file does not set")
        if assumption.value != target:
            raise ScenarioError(
                path,
                f"{where}.value",
                f"{where}.value is {assumption.value!r}, but {name} is {target!r}; they must agree",
            )
        _check_range(assumption, path, where)
    if scenario.expected:
        _check_expected(scenario, path)


def _check_expected(scenario: Scenario, path: Path) -> None:
    """Each number of ``expected`` is what kvlab computes from the parameters (and deployment)."""
    try:
        computed = scenario_numbers(scenario)
    except ValueError as e:
        raise ScenarioError(
            path,
            "expected",
            f"expected cannot be checked: the parameters and deployment give no pool ({e})",
        ) from None
    for name, value in scenario.expected.items():
        if computed[name] != value:
            raise ScenarioError(
                path,
                f"expected.{name}",
                f"expected.{name} is {value}, but the "
                f"parameters give {computed[name]} ({EXPECTED[name]})",
            )


def _check_range(assumption: Assumption, path: Path, where: str) -> None:
    value, options = assumption.value, assumption.range
    if isinstance(value, str):
        if value not in options:
            raise ScenarioError(
                path,
                f"{where}.range",
                f"{where}.range must list the value "
                f"{value!r} among its alternatives, got {list(options)}",
            )
        return
    if len(options) != 2 or any(isinstance(v, str) for v in options) or options[0] > options[1]:
        raise ScenarioError(
            path,
            f"{where}.range",
            f"{where}.range must be [low, high] (two numbers, low <= high), got {list(options)}",
        )
    if not options[0] <= value <= options[1]:
        raise ScenarioError(
            path, f"{where}.value", f"{where}.value {value} is outside its range {list(options)}"
        )
