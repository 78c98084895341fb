"""The one reader of each file format kvlab is given: text (UTF-8), JSON, and a JSON line. Each
refuses what is not a regular file (a folder, a FIFO, a device, a dangling link), bounds the
size, the nesting and the digits of an integer, refuses a key given twice (JSON itself lets
the last one win), and names the file, and the line where it has one, in its error. [kvlab]
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

#: The deepest nesting a JSON document may have (kvlab's own files nest four or five levels).
MAX_JSON_DEPTH = 32
#: The most digits of a JSON integer (a 64-bit hash has 20; Python refuses past 4,300).
MAX_INT_DIGITS = 30


class FileFormatError(ValueError):
    """A file that cannot be read as its format; the message names the file (and line)."""


def regular_file(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` if it is a regular file (a link to one counts), else FileFormatError."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot read {what}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise FileFormatError(f"{path}: not a regular file ({what} is a file)")
    return path


def read_text(path: str | os.PathLike[str], what: str, max_bytes: int) -> str:
    """The UTF-8 text (a byte-order mark dropped) of the regular file ``path`` of at most
    ``max_bytes`` bytes, else FileFormatError."""
    path = regular_file(path, what)
    try:
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise FileFormatError(f"{path}: cannot read {what}: {exc.strerror}") from None
    if len(data) > max_bytes:
        raise FileFormatError(f"{path}: {what} must be at most {max_bytes:,} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"{path}: {what} must be UTF-8 text ({exc.reason})") from None


def parse_json(text: str, where: str) -> Any:
    """``text`` as JSON, else FileFormatError naming ``where`` (a file, or a file's line) and
    where in the text: no key twice in an object, no integer of more than MAX_INT_DIGITS digits,
    no nesting deeper than MAX_JSON_DEPTH (the last two named by their key's path)."""

    def object_of(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value = dict(pairs)
        if len(value) < len(pairs):
            keys = [key for key, _ in pairs]
            twice = next(key for key in keys if keys.count(key) > 1)
            raise FileFormatError(f"{where}: the key {twice!r:.40} is given twice")
        return value

    def integer(digits: str) -> int | _LongInt:
        return int(digits) if len(digits.lstrip("-")) <= MAX_INT_DIGITS else _LongInt(digits)

    deep = f"{where}: nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        value = json.loads(text, object_pairs_hook=object_of, parse_int=integer)
    except json.JSONDecodeError as exc:
        raise FileFormatError(f"{where}: not JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise FileFormatError(deep) from None
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:  # walked without recursion
        item, depth, key = stack.pop()
        if isinstance(item, _LongInt):
            raise FileFormatError(
                f"{where}: {key or 'the document'} is an integer of {item.length:,} digits "
                f"(at most {MAX_INT_DIGITS})"
            )
        if isinstance(item, (dict, list)) and depth > MAX_JSON_DEPTH:
            raise FileFormatError(f"{deep} (at {key[:80]})")
        if isinstance(item, dict):
            stack.extend(
                (v, depth + 1, f"{key}.{k}" if key else str(k))
                for k, v in item.items()
                if isinstance(v, _NESTED)
            )
        elif isinstance(item, list):
            stack.extend(
                (v, depth + 1, f"{key}[{i}]") for i, v in enumerate(item) if isinstance(v, _NESTED)
            )
    return value


class _LongInt:
    """An integer literal of more than MAX_INT_DIGITS digits, until the walk names its key."""

    def __init__(self, digits: str):
        self.length = len(digits.lstrip("-"))


_NESTED = (dict, list, _LongInt)  # what the walk looks into or names


def load_json(path: str | os.PathLike[str], what: str, max_bytes: int) -> Any:
    """The JSON document in the regular file ``path`` (:func:`read_text`, :func:`parse_json`)."""
    return parse_json(read_text(path, what, max_bytes), str(path))


__all__ = [
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "FileFormatError",
    "load_json",
    "parse_json",
    "read_text",
    "regular_file",
]
