"""The field specs of scenario files: a spec checks one YAML value and says what it accepts,
and :func:`parse_field` walks a document against a dataclass whose fields carry their specs
(``metadata["spec"]``). Every problem is a :class:`ScenarioError` naming the file, the dotted
field path and what the field accepts; a message never quotes the file's own text
(:func:`shown`). :mod:`kvlab.run.scenario_schema` declares the schema with these."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvlab.core.checks import MAX_COUNT, check_choice, check_float, check_int


class ScenarioError(ValueError):
    """A scenario file that cannot be used. ``file`` and ``field`` say where (``field`` is a
    dotted path such as ``parameters.pool_mib``, or ``""`` for the whole document)."""

    def __init__(self, file, field: str, message: str):
        self.file = str(file)
        self.field = field
        super().__init__(f"{file}: {message}")


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
class Float:
    low: float
    high: float
    low_open: bool = False

    def __str__(self):
        return f"a number in {'(' if self.low_open else '['}{self.low}, {self.high}]"

    def check(self, where: str, value) -> float:
        return check_float(where, value, low=self.low, high=self.high, low_open=self.low_open)


@dataclass(frozen=True)
class Bool:
    def __str__(self):
        return "true or false"

    def check(self, where: str, value) -> bool:
        if not isinstance(value, bool):
            raise TypeError(
                f"{where} must be true or false, got {value!r} ({type(value).__name__})"
            )
        return value


@dataclass(frozen=True)
class Scalar:
    """A plain number or string (an assumption's value)."""

    def __str__(self):
        return "a number or a string"

    def check(self, where: str, value):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"{where} must be {self}, got {value!r} ({type(value).__name__})")
        return value


@dataclass(frozen=True)
class ListOf:
    """A list whose items all pass ``item`` (a spec or a Record); a tuple."""

    item: Any
    min_len: int = 1

    def __str__(self):
        return f"a list of at least {self.min_len} item(s), each {self.item}"


@dataclass(frozen=True)
class MappingOf:
    """A mapping from names matching ``key`` to values that all pass ``value``; a dict."""

    key: Text
    value: Any

    def __str__(self):
        return f"a mapping from {self.key} to {self.value}"


@dataclass(frozen=True)
class Record:
    """A mapping whose keys are the fields of a dataclass; built into that dataclass."""

    cls: type

    def __str__(self):
        return f"a mapping with the fields {[f.name for f in dataclasses.fields(self.cls)]}"

    def fields(self) -> dict[str, tuple[Any, bool]]:
        return {
            f.name: (
                f.metadata["spec"],
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(self.cls)
        }

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
        return dict.fromkeys(self.keys, (self.value, False))

    def build(self, values: dict) -> dict:
        return values


def spec(check, **kwargs):
    """A dataclass field whose YAML value is checked by ``check`` (a spec above)."""
    return field(metadata={"spec": check}, **kwargs)


#: A field name as a scenario file spells it; any other key is described, never quoted.
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_. -]{0,63}")


def join_field(where: str, name) -> str:
    if not (isinstance(name, str) and FIELD_NAME.fullmatch(name)):
        name = f"<a key: {shown(name)}>"
    return f"{where}.{name}" if where else str(name)


def shown(value) -> str:
    """A value from the file as an error message shows it: numbers as they are, anything else
    by its type and size, so that a message never quotes the content of the file it refuses."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return f"a str of {len(value)} character(s)"
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'mapping'} of {len(value)} item(s)"
    return f"a {type(value).__name__}"


def parse_field(check, value, file, where: str):
    if isinstance(check, ListOf):
        if not isinstance(value, list) or len(value) < check.min_len:
            raise ScenarioError(file, where, f"{where} must be {check}, got {shown(value)}")
        return tuple(
            parse_field(check.item, item, file, f"{where}[{i}]") for i, item in enumerate(value)
        )
    if isinstance(check, MappingOf):
        if not isinstance(value, dict):
            raise ScenarioError(file, where, f"{where} must be {check}, got {shown(value)}")
        for key in value:
            parse_field(check.key, key, file, join_field(where, key))
        return {
            key: parse_field(check.value, item, file, join_field(where, key))
            for key, item in value.items()
        }
    if not isinstance(check, (Record, Table)):
        try:
            return check.check(where, value)
        except (TypeError, ValueError) as e:
            message = str(e)
            if not isinstance(value, (bool, int, float)):  # the checks quote what they refuse
                message = message.replace(f"{value!r} ({type(value).__name__})", shown(value))
                message = message.replace(repr(value), shown(value))
            raise ScenarioError(file, where, message) from None
    what = where or "the document"
    if not isinstance(value, dict):
        raise ScenarioError(file, where, f"{what} must be {check}, got {shown(value)}")
    fields = check.fields()
    for key in value:
        if key not in fields:
            raise ScenarioError(
                file,
                join_field(where, key),
                f"{join_field(where, key)} is not a known field "
                f"of {what}; known fields: {sorted(fields)}",
            )
    values = {}
    for name, (sub, required) in fields.items():
        if name in value:
            values[name] = parse_field(sub, value[name], file, join_field(where, name))
        elif required:
            raise ScenarioError(
                file,
                join_field(where, name),
                f"{join_field(where, name)} is missing; it must be {sub}",
            )
    return check.build(values)
