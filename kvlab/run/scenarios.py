"""Scenario files: ``data/scenarios/*.yaml`` -> validated, frozen
:class:`~kvlab.run.scenario_schema.Scenario` objects (``load_scenario("rtx5080-4mib")``). A file is
read with PyYAML's safe loader after a pass over its node tree that refuses tags, aliases,
duplicate keys, over-long integers and YAML 1.1's octal and base-60 numbers; every problem is a
:class:`ScenarioError` naming the file and the field."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kvlab.core.checks import MAX_COUNT, check_instance
from kvlab.core.paths import DATA_DIR
from kvlab.run.rank_config import scenario_numbers
from kvlab.run.scenario_schema import (
    EXPECTED,
    Assumption,
    Scenario,
    ScenarioError,
    accepts_text,
    join_field,
    parse_scenario,
    shown,
)
from kvlab.sched.context_plan import check_chunk_budget

__all__ = ["ALIASES", "SCENARIO_DIR", "ScenarioError", "list_scenarios", "load_scenario"]

SCENARIO_DIR = DATA_DIR / "scenarios"
#: Longer integer literals are refused before Python converts them (MAX_COUNT has 16 digits).
MAX_INT_CHARS = 64
#: The largest scenario file read (the real ones are a few KiB).
MAX_FILE_BYTES = 1 << 20
#: Short names accepted besides the file stems.
ALIASES: Mapping[str, str] = {"issue-21470": "issue_21470_16x_gb300"}
SCENARIO_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_YAML = "tag:yaml.org,2002:"
_PLAIN_TAGS = {_YAML + t for t in ("str", "int", "float", "bool", "null", "map", "seq")}
#: What PyYAML (YAML 1.1) silently converts: 010 -> 8 (octal), 1:00 -> 60 (base 60).
_YAML11_NUMBER = re.compile(r"[-+]?(0[0-7_]+|[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?)")


def _check_nodes(
    node: yaml.Node, file: Path, where: str = "", seen: set[int] | None = None
) -> None:
    """Refuse what a plain scenario file has no use for: tags, aliases, duplicate keys."""
    seen = set() if seen is None else seen
    what, line = where or "the document", node.start_mark.line + 1
    problem = None
    if id(node) in seen:
        problem = f"uses a YAML alias (line {line}); scenario files spell every value out"
    elif node.tag not in _PLAIN_TAGS:
        problem = (
            f"has the YAML tag {node.tag.replace(_YAML, '!!')!r} (line {line}); scenario "
            "files hold plain mappings, lists, strings and numbers only"
        )
    elif node.tag == _YAML + "int" and len(node.value) > MAX_INT_CHARS:
        problem = (
            f"is an integer of {len(node.value)} characters (line {line}); no scenario "
            f"number is above {MAX_COUNT}"
        )
    elif node.tag in (_YAML + "int", _YAML + "float") and _YAML11_NUMBER.fullmatch(node.value):
        problem = (
            f"is written {node.value} (line {line}), which YAML 1.1 reads as a base-8 or "
            "base-60 number; write it in decimal (a leading zero or a colon is refused), or "
            "quote it if it is text"
        )
    if problem:
        raise ScenarioError(file, where, f"{what} {problem}")
    seen.add(id(node))
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


def _yaml_problem(error: yaml.YAMLError) -> str:
    """What the YAML parser found and where, without the snippet of the file it quotes."""
    if isinstance(error, yaml.reader.ReaderError):
        return f"{error.reason} #x{error.character:04x} at byte {error.position}"
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return f"{error.context + ', ' if error.context else ''}{error.problem}{where}"
    return type(error).__name__


def _read_yaml(path: Path) -> Any:
    try:
        if not path.is_file():  # a folder, a device such as /dev/zero, a FIFO
            raise ScenarioError(path, "", "cannot read the scenario file: not a regular file")
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise ScenarioError(
                path,
                "",
                f"the file is larger than MAX_FILE_BYTES={MAX_FILE_BYTES} bytes; scenario "
                "files are a few KiB",
            )
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(path, "", f"cannot read the scenario file: {e}") from None
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses control characters at once
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError(path, "", f"the file is empty; it must be {accepts_text(Scenario)}")
        _check_nodes(node, path)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ScenarioError(path, "", f"not valid YAML: {_yaml_problem(e)}") from None
    except RecursionError:
        raise ScenarioError(
            path, "", "the document is nested too deeply; scenario files are a few levels deep"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


def list_scenarios() -> list[str]:
    """Names of the scenarios under data/scenarios/, sorted."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def _locate(name_or_path: str | os.PathLike[str]) -> Path:
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
    known = f"known scenarios: {list_scenarios()}"
    if not SCENARIO_NAME.fullmatch(text):
        raise ScenarioError(
            SCENARIO_DIR,
            "name",
            f"a scenario name is 1 to 100 letters, digits, '_', '-' or '.', got {shown(text)}; "
            f"{known} (or pass a path to a .yaml file)",
        )
    path = SCENARIO_DIR / f"{text}.yaml"
    if not path.is_file():
        raise ScenarioError(
            SCENARIO_DIR,
            "name",
            f"no scenario named {text!r}; {known}, aliases {sorted(ALIASES)} (or pass a path to "
            "a .yaml file)",
        )
    return path


def load_scenario(name_or_path: str | os.PathLike[str]) -> Scenario:
    """Load and validate a scenario: a name under data/scenarios/ (the file stem, or an alias
    of :data:`ALIASES` such as ``"issue-21470"``) or a path."""
    path = _locate(name_or_path)
    scenario = parse_scenario(_read_yaml(path), path)
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

    def refuse(field: str, message: str) -> None:
        raise ScenarioError(path, field, message)

    def within(field: str, value: int, low: int, high: int, why: str) -> None:
        if not low <= value <= high:
            refuse(field, f"{field} must be in [{low}, {high}] ({why}), got {value}")

    pool_mib, dep = scenario.parameters.pool_mib, scenario.deployment
    if pool_mib is None and dep is None:
        refuse(
            "parameters.pool_mib",
            "parameters.pool_mib is missing; it must be an int in [1, 1048576] (only a "
            "scenario with a `deployment` block may leave it out)",
        )
    if dep is not None:
        if pool_mib is not None:
            refuse(
                "parameters.pool_mib",
                "parameters.pool_mib must be left out beside a `deployment` block, whose "
                "memory budget sets each rank's pool",
            )
        ranks, steps = f"deployment.ranks = {dep.ranks}", f"deployment.max_steps = {dep.max_steps}"
        field = "deployment.expert_parallel_size"
        within(field, dep.expert_parallel_size, 1, dep.ranks, "deployment.ranks")
        ids = [r.id for r in dep.requests]
        for i, request in enumerate(dep.requests):
            where = f"deployment.requests[{i}]"
            if ids.count(request.id) > 1:
                refuse(f"{where}.id", f"{where}.id {request.id!r} is given twice")
            if request.rank is not None:
                within(f"{where}.rank", request.rank, 0, dep.ranks - 1, ranks)
            within(f"{where}.arrival_step", request.arrival_step, 0, dep.max_steps - 1, steps)
        if dep.chunked_prefill:
            try:  # what the ranks' schedulers would refuse, refused before any rank starts
                check_chunk_budget(scenario.parameters.tokens_per_block, dep.max_num_tokens)
            except ValueError as e:
                refuse(
                    "deployment.max_num_tokens",
                    f"deployment.max_num_tokens and parameters.tokens_per_block: {e}",
                )
        bg = dep.background
        if bg is not None and bg.count and (bg.count - 1) // bg.per_step >= dep.max_steps:
            refuse(
                "deployment.background.count",
                f"deployment.background: {bg.count} requests at {bg.per_step} a step arrive "
                f"until step {(bg.count - 1) // bg.per_step}, past deployment.max_steps "
                f"({dep.max_steps}): the last would never arrive",
            )
        if bg is not None and bg.prompt_len_min > bg.prompt_len_max:
            refuse(
                "deployment.background.prompt_len_min",
                f"deployment.background.prompt_len_min ({bg.prompt_len_min}) must not exceed "
                f"prompt_len_max ({bg.prompt_len_max})",
            )
    for name, assumption in scenario.assumptions.items():
        _check_assumption(scenario, name, assumption, refuse)
    if scenario.expected:
        try:
            computed = scenario_numbers(scenario)
        except ValueError as e:
            refuse(
                "expected",
                f"expected cannot be checked: the parameters and deployment give no pool ({e})",
            )
        for name, value in scenario.expected.items():
            if computed[name] != value:
                refuse(
                    f"expected.{name}",
                    f"expected.{name} is {value}, but the parameters give {computed[name]} "
                    f"({EXPECTED[name]})",
                )


def _check_assumption(scenario: Scenario, name: str, assumption: Assumption, refuse: Any) -> None:
    """The field ``name`` exists and is set, equals the assumed value, which its range holds
    (``[low, high]`` for a number, the alternatives for a string)."""
    where = f"assumptions.{name}"
    target: Any = scenario
    for part in name.split("."):
        if part not in getattr(target, "__dataclass_fields__", {}):
            refuse(where, f"{where} names no field of the scenario")
        target = getattr(target, part)
    if target is None:
        refuse(where, f"{where} names {name}, which the file does not set")
    value, options = assumption.value, assumption.range
    if value != target:
        refuse(
            f"{where}.value",
            f"{where}.value is {value!r}, but {name} is {target!r}; they must agree",
        )
    if isinstance(value, str):
        if value not in options:
            refuse(
                f"{where}.range",
                f"{where}.range must list the value {value!r} among its alternatives, got "
                f"{list(options)}",
            )
        return
    if len(options) != 2 or any(isinstance(v, str) for v in options) or options[0] > options[1]:
        refuse(
            f"{where}.range",
            f"{where}.range must be [low, high] (two numbers, low <= high), got {list(options)}",
        )
    if not options[0] <= value <= options[1]:
        refuse(f"{where}.value", f"{where}.value {value} is outside its range {list(options)}")
