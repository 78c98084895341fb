"""Scenario files: ``data/scenarios/*.yaml`` -> validated, frozen :class:`Scenario` objects.

A scenario records one experiment from a source (a blog post, an issue, a pull request): the
configuration it ran and the numbers it reported. Notebooks, the ``kvlab scenario`` command and the
tests load it by name::

    from kvlab.scenarios import load_scenario
    sc = load_scenario("rtx5080-4mib")      # a name under data/scenarios/, or a path to a file
    sc.parameters.pool_mib, sc.expected["width_clamped"]   # 4, 68

The schema is declarative. Each field of :class:`Scenario` and :class:`ScenarioParameters` carries
its check in its ``metadata["spec"]``; a field without a default is required, one with a default
is optional. To extend the schema (the multi-rank scenario of issue #21470 will add ranks and
a memory budget), add a field with a spec and a default at the end of the dataclass, and name
any new expected quantity in :data:`EXPECTED`. Nothing else changes.

Files are read with PyYAML's safe loader after a pass over the parsed node tree that refuses
YAML tags (``!!python/object`` and friends), anchors/aliases and duplicate keys. Every problem
raises :class:`ScenarioError` (a ValueError) whose message names the file, the field path (such
as ``parameters.pool_mib``) and what the field accepts.

The scenario folder is found next to the package (``kvlab/../data/scenarios``): that is the
repository in an editable install (``pip install -e .``), the supported way to use kvlab. A
non-editable install carries no scenario files; pass a path to ``load_scenario`` there.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from kvlab._validate import MAX_COUNT, check_choice, check_int
from kvlab.geometry import DTYPE_BYTES

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "data" / "scenarios"

MAX_TOKENS = 1 << 24  # 16 Mi tokens: far beyond any context window, small enough to catch typos
MAX_SHAPE = 1 << 14  # layers, heads, head size, tokens per block

# The quantities a scenario's `expected` block may state, and what each one is. A source's
# reported numbers go here; tests compare kvlab's own results against them.
EXPECTED: Mapping[str, str] = {
    "bytes_per_token": "KV bytes one token takes over all layers, K and V, on one rank",
    "capacity_tokens": "tokens the pool holds: total_blocks * tokens_per_block",
    "total_blocks": "pages in the pool: pool bytes // (bytes_per_token * tokens_per_block)",
    "width_clamped": "page-index row width from the clamped max_seq_len (since PR #12306)",
    "width_configured": "page-index row width from the configured max_seq_len (the one-line fix)",
    "entries_needed": "page-index entries the context needs: ceil(context_length / tokens_per_block)",
}


class ScenarioError(ValueError):
    """A scenario file that cannot be used. ``file`` and ``field`` say where (``field`` is a
    dotted path such as ``parameters.pool_mib``, or ``""`` for the whole document)."""

    def __init__(self, file, field: str, message: str):
        self.file = str(file)
        self.field = field
        super().__init__(f"{file}: {message}")


# --- field specs ---------------------------------------------------------------------------------
# A spec checks one value: ``spec.check(where, value)`` returns the value or raises
# TypeError/ValueError with a message that starts with ``where``; ``str(spec)`` describes what
# it accepts (used when the field is missing).


@dataclass(frozen=True)
class Int:
    low: int
    high: int = MAX_COUNT

    def __str__(self):
        return f"an int in [{self.low}, {self.high}]"

    def check(self, where: str, value) -> int:
        return check_int(where, value, low=self.low, high=self.high)


@dataclass(frozen=True)
class Choice:
    choices: frozenset

    def __str__(self):
        return f"one of {sorted(self.choices)}"

    def check(self, where: str, value) -> str:
        return check_choice(where, value, self.choices)


@dataclass(frozen=True)
class Text:
    pattern: str = r"\s*\S.*"  # any non-blank text
    meaning: str = "a non-empty string"

    def __str__(self):
        return self.meaning

    def check(self, where: str, value) -> str:
        if not isinstance(value, str):
            raise TypeError(f"{where} must be {self}, got {value!r} ({type(value).__name__})")
        if not re.fullmatch(self.pattern, value, re.DOTALL):
            raise ValueError(f"{where} must be {self}, got {value!r}")
        return value


@dataclass(frozen=True)
class Record:
    """A mapping whose keys are the fields of a dataclass; built into that dataclass."""

    cls: type

    def __str__(self):
        return f"a mapping with the fields {[f.name for f in dataclasses.fields(self.cls)]}"

    def fields(self) -> dict[str, tuple[Any, bool]]:
        return {f.name: (f.metadata["spec"],
                         f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                for f in dataclasses.fields(self.cls)}

    def build(self, values: dict):
        return self.cls(**values)


@dataclass(frozen=True)
class Table:
    """A mapping from some of the names in ``keys`` to values that all pass ``value``; a dict."""

    keys: Mapping[str, str]
    value: Any

    def __str__(self):
        return f"a mapping from some of {sorted(self.keys)} to {self.value}"

    def fields(self) -> dict[str, tuple[Any, bool]]:
        return {name: (self.value, False) for name in self.keys}

    def build(self, values: dict) -> dict:
        return values


def spec(check, **kwargs):
    """A dataclass field whose YAML value is checked by ``check`` (a spec above)."""
    return field(metadata={"spec": check}, **kwargs)


def _join(where: str, name) -> str:
    return f"{where}.{name}" if where else str(name)


def _parse(check, value, file, where: str):
    if not isinstance(check, (Record, Table)):
        try:
            return check.check(where, value)
        except (TypeError, ValueError) as e:
            raise ScenarioError(file, where, str(e)) from None
    what = where or "the document"
    if not isinstance(value, dict):
        raise ScenarioError(file, where, f"{what} must be {check}, got {type(value).__name__} {value!r}")
    fields = check.fields()
    for key in value:
        if key not in fields:
            raise ScenarioError(file, _join(where, key), f"{_join(where, key)} is not a known field "
                                f"of {what}; known fields: {sorted(fields)}")
    values = {}
    for name, (sub, required) in fields.items():
        if name in value:
            values[name] = _parse(sub, value[name], file, _join(where, name))
        elif required:
            raise ScenarioError(file, _join(where, name), f"{_join(where, name)} is missing; it must be {sub}")
    return check.build(values)


# --- the schema ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioParameters:
    """The configuration an experiment ran (names follow TensorRT-LLM's where it has one)."""

    pool_mib: int = spec(Int(1, 1 << 20))  # KV pool (quota) per rank, MiB; at most 1 TiB
    num_layers: int = spec(Int(1, MAX_SHAPE))  # attention layers holding KV
    num_kv_heads: int = spec(Int(1, MAX_SHAPE))
    head_dim: int = spec(Int(1, MAX_SHAPE))
    kv_dtype: str = spec(Choice(frozenset(DTYPE_BYTES)))
    tokens_per_block: int = spec(Int(1, MAX_SHAPE))
    configured_max_seq_len: int = spec(Int(1, MAX_TOKENS))  # what the user asked for (max_seq_len)
    max_batch_size: int = spec(Int(1, 1 << 16))
    context_length: int = spec(Int(1, MAX_TOKENS))  # the prompt that reached resize_context
    model_weights_bytes: int = spec(Int(0))  # weights resident on the rank (0: none loaded)

    @property
    def pool_bytes(self) -> int:
        return self.pool_mib * 2**20


NAME = Text(r"[a-z0-9][a-z0-9_.-]*", "a lower-case file stem: letters, digits, '_', '.', '-'")


@dataclass(frozen=True)
class Scenario:
    """One experiment: where it comes from, what it ran, and the numbers it reported."""

    name: str = spec(NAME)  # equals the file's stem
    title: str = spec(Text())
    source: str = spec(Text())  # the publication and the software version it used
    gpu: str = spec(Text())
    parameters: ScenarioParameters = spec(Record(ScenarioParameters))
    expected: dict = spec(Table(EXPECTED, Int(0)), default_factory=dict)


# --- loading -------------------------------------------------------------------------------------

_PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")}


def _check_nodes(node, file, where: str = "", seen=None) -> None:
    """Refuse what a plain scenario file has no use for: tags, aliases, duplicate keys."""
    seen = set() if seen is None else seen
    what = where or "the document"
    if id(node) in seen:
        raise ScenarioError(file, where, f"{what} uses a YAML alias (line {node.start_mark.line + 1}); "
                            "scenario files spell every value out")
    seen.add(id(node))
    if node.tag not in _PLAIN_TAGS:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise ScenarioError(file, where, f"{what} has the YAML tag {tag!r} (line "
                            f"{node.start_mark.line + 1}); scenario files hold plain mappings, "
                            "lists, strings and numbers only")
    if isinstance(node, yaml.MappingNode):
        names = set()
        for key, value in node.value:
            _check_nodes(key, file, where, seen)
            if not isinstance(key, yaml.ScalarNode):
                raise ScenarioError(file, where, f"{what} has a key that is not a plain name "
                                    f"(line {key.start_mark.line + 1})")
            name = _join(where, key.value)
            if key.value in names:
                raise ScenarioError(file, name, f"{name} is given twice (line {key.start_mark.line + 1})")
            names.add(key.value)
            _check_nodes(value, file, name, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_nodes(item, file, f"{where}[{i}]", seen)


def _read_yaml(path: Path):
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(path, "", f"cannot read the scenario file: {e}") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError(path, "", "the file is empty; it must be " + str(Record(Scenario)))
        _check_nodes(node, path)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ScenarioError(path, "", f"not valid YAML: {e}") from None
    finally:
        loader.dispose()


def list_scenarios() -> list[str]:
    """Names of the scenarios under data/scenarios/, sorted."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def _locate(name_or_path) -> Path:
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or "\\" in text or text.endswith((".yaml", ".yml")):
        return Path(name_or_path)
    path = SCENARIO_DIR / f"{text}.yaml"
    if not path.is_file():
        raise ScenarioError(SCENARIO_DIR, "name", f"no scenario named {text!r}; known scenarios: "
                            f"{list_scenarios()} (or pass a path to a .yaml file)")
    return path


def load_scenario(name_or_path) -> Scenario:
    """Load and validate a scenario: a name under data/scenarios/ (the file stem) or a path."""
    path = _locate(name_or_path)
    scenario = _parse(Record(Scenario), _read_yaml(path), path, "")
    if scenario.name != path.stem:
        raise ScenarioError(path, "name", f"name must equal the file's stem {path.stem!r}, "
                            f"got {scenario.name!r}")
    return scenario
