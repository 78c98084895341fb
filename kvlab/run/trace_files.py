"""A trace file as a stream of requests, whichever of three formats it is, told apart by its
first line: Azure's CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``), Mooncake's JSON lines
(``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids``), and kvlab's own for a
user's traffic (docs/TRACES.md), CSV or JSON lines with ``arrival_s``, ``prompt_tokens``,
``output_tokens`` and optionally ``hash_ids`` (one hash per 512-token prompt block) or
``conversation_id``. Rows are read one at a time, so memory stays bounded however long the
file; a bad row raises :class:`TraceFormatError` naming file, line and field; rows must come in
time order.
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvlab.core.arith import div_ceil
from kvlab.core.checks import MAX_COUNT, check_float
from kvlab.core.files import FileFormatError, parse_json, regular_file
from kvlab.core.request import MOONCAKE_TOKENS_PER_HASH, Request

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
#: kvlab's own format: the fields every row has, then those it may have.
OWN_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens")
OWN_OPTIONAL = ("hash_ids", "conversation_id")
FORMATS = ("azure", "mooncake", "kvlab-csv", "kvlab-jsonl")
MAX_LINE_CHARS = 1 << 20  # a row longer than this is not a trace row (bounded memory)


class TraceFormatError(FileFormatError):
    """A trace file that cannot be read as its format says; the message names file and line."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace: its line, arrival in seconds (Azure's from its first row,
    Mooncake's and kvlab's from the file's zero), prompt and output tokens, prompt block
    hashes (one per 512 tokens) and conversation (or None)."""

    line: int
    seconds: float
    prompt: int
    output: int
    hashes: tuple[int, ...] = ()
    conversation: str | None = None


def _error(path: Path, line: int, what: str) -> TraceFormatError:
    return TraceFormatError(f"{path.name}, line {line}: {what}")


def _count(path: Path, line: int, name: str, value: Any, low: int) -> int:
    """A token count of a trace row: an int (or its decimal text) of at least ``low``."""
    if isinstance(value, str):
        value = value.strip()
        if not (value.lstrip("-").isascii() and value.lstrip("-").isdigit()) or len(value) > 20:
            raise _error(path, line, f"{name} must be a whole number, got {value!r:.40}")
        value = int(value)
    if type(value) is not int or not low <= value <= MAX_COUNT:
        raise _error(
            path, line, f"{name} must be an int in [{low}, {MAX_COUNT}], got {value!r:.40}"
        )
    return value


def _lines(path: Path, limit: int | None) -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-blank lines of a regular UTF-8 file, at most ``limit``."""
    try:
        regular_file(path, "a trace (a CSV or JSON-lines file)")
    except FileFormatError as exc:
        raise TraceFormatError(str(exc)) from None
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            for number, text in enumerate(iter(lambda: handle.readline(MAX_LINE_CHARS + 1), ""), 1):
                if len(text) > MAX_LINE_CHARS:
                    raise _error(path, number, f"longer than {MAX_LINE_CHARS:,} characters")
                if text.strip():
                    if limit is not None:
                        if not limit:
                            return
                        limit -= 1
                    yield number, text
    except UnicodeDecodeError as exc:
        raise TraceFormatError(
            f"{path.name}: not a CSV or JSON-lines file in UTF-8 ({exc})"
        ) from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read the trace ({exc.strerror})") from None


def _json_object(path: Path, line: int, text: str) -> dict[str, Any]:
    try:
        row = parse_json(text, f"{path.name}, line {line}")
    except FileFormatError as exc:
        raise TraceFormatError(str(exc)) from None
    if not isinstance(row, dict):
        raise _error(path, line, f"not a JSON object, got {type(row).__name__}")
    return row


def trace_format(path: Path) -> str:
    """Which of :data:`FORMATS` ``path`` holds, from its first line."""
    path = Path(path)
    first = next(_lines(path, 1), None)
    if first is None:
        raise TraceFormatError(f"{path.name}: empty (no header and no rows)")
    number, text = first
    if text.lstrip().startswith("{"):
        keys = set(_json_object(path, number, text))
        if keys >= set(MOONCAKE_KEYS[:3]):
            return "mooncake"
        if OWN_FIELDS[0] in keys:  # the rest is checked row by row, naming what is wrong
            return "kvlab-jsonl"
    else:
        header = [c.strip() for c in next(csv.reader([text]))]
        if tuple(header[:3]) == AZURE_COLUMNS:
            return "azure"
        if OWN_FIELDS[0] in header:
            return "kvlab-csv"
    raise _error(
        path,
        number,
        "not a trace kvlab reads: expected the header "
        f"{','.join(AZURE_COLUMNS)} (Azure), {','.join(OWN_FIELDS)}[,hash_ids][,conversation_id] "
        "(kvlab's own CSV), or JSON objects with timestamp, input_length, output_length, "
        f"hash_ids (Mooncake) or {', '.join(OWN_FIELDS)} (kvlab's own); docs/TRACES.md",
    )


#: Each format's time field, as its rows name it.
TIME_FIELDS = {"azure": "TIMESTAMP", "mooncake": "timestamp"}


def trace_rows(path: Path, limit: int | None = None, kind: str | None = None) -> Iterator[TraceRow]:
    """The rows of ``path`` (at most ``limit``), one at a time, checked and in time order, read
    as ``kind`` (one of :data:`FORMATS`; None: :func:`trace_format` tells)."""
    path = Path(path)
    kind = trace_format(path) if kind is None else kind
    rows = {"azure": _azure_rows, "mooncake": _mooncake_rows}.get(kind, _own_rows)
    last = -math.inf
    for row in rows(path, _lines(path, None if limit is None else limit + 1)):
        if row.seconds < last:
            raise _error(
                path,
                row.line,
                f"{TIME_FIELDS.get(kind, 'arrival_s')} at {row.seconds:g} s is earlier than the "
                f"row before (at {last:g} s); the rows must be in time order",
            )
        last = row.seconds
        yield row
        if limit is not None:
            limit -= 1
            if not limit:
                return


def _azure_rows(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[TraceRow]:
    number, text = next(lines, (1, ""))
    header = [c.strip() for c in next(csv.reader([text]), [])]
    if tuple(header[:3]) != AZURE_COLUMNS:
        raise _error(
            path, number, f"the header must be {','.join(AZURE_COLUMNS)}, got {text.strip()!r:.80}"
        )
    start = None
    for number, text in lines:
        fields = next(csv.reader([text]))
        if len(fields) < 3:
            raise _error(path, number, f"3 fields expected, got {len(fields)}")
        try:
            stamp = datetime.fromisoformat(fields[0].strip())
        except ValueError as exc:
            raise _error(
                path, number, f"TIMESTAMP {fields[0]!r:.40} is not a date and time ({exc})"
            ) from None
        moment = (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
        start = moment if start is None else start
        prompt = _count(path, number, "ContextTokens", fields[1], 1)
        output = _count(path, number, "GeneratedTokens", fields[2], 0)
        yield TraceRow(number, moment - start, prompt, output)


def _mooncake_rows(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[TraceRow]:
    for number, text in lines:
        row = _json_object(path, number, text)
        missing = [key for key in MOONCAKE_KEYS if key not in row]
        if missing:
            raise _error(path, number, f"missing {', '.join(missing)}")
        for key in ("input_length", "output_length"):
            if isinstance(row[key], str):  # a JSON trace records numbers; text is another file
                raise _error(
                    path, number, f"{key} must be a JSON number, got the text {row[key]!r:.40}"
                )
        stamp = _seconds(path, number, "timestamp", row["timestamp"], 1000)
        prompt = _count(path, number, "input_length", row["input_length"], 1)
        output = _count(path, number, "output_length", row["output_length"], 0)
        yield TraceRow(
            number, stamp, prompt, output, _hashes(path, number, row["hash_ids"], prompt)
        )


def _own_rows(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[TraceRow]:
    header: list[str] | None = None
    for number, text in lines:
        if text.lstrip().startswith("{"):
            row: dict[str, Any] = _json_object(path, number, text)
        else:
            fields = [f.strip() for f in next(csv.reader([text]))]
            if header is None:
                header = _own_header(path, number, fields)
                continue
            if len(fields) != len(header):
                raise _error(path, number, f"{len(header)} fields expected, got {len(fields)}")
            row = {k: v for k, v in zip(header, fields, strict=True) if v != ""}
        unknown = sorted(set(row) - {*OWN_FIELDS, *OWN_OPTIONAL})
        missing = [key for key in OWN_FIELDS if key not in row]
        if unknown or missing:
            what = f"unknown field {unknown[0]!r:.40}" if unknown else f"missing {missing[0]}"
            raise _error(path, number, f"{what} (fields: {', '.join(OWN_FIELDS + OWN_OPTIONAL)})")
        prompt = _count(path, number, "prompt_tokens", row["prompt_tokens"], 1)
        output = _count(path, number, "output_tokens", row["output_tokens"], 0)
        conversation = row.get("conversation_id")
        if conversation is not None and not isinstance(conversation, (str, int)):
            raise _error(path, number, f"conversation_id must be text, got {conversation!r:.40}")
        hashes = row.get("hash_ids")
        if isinstance(hashes, str):
            hashes = [
                _count(path, number, "hash_ids", h, 0) for h in hashes.replace(";", " ").split()
            ]
        hashes = () if hashes is None else _hashes(path, number, hashes, prompt)
        if not hashes and conversation is not None:
            hashes = conversation_hashes(str(conversation), prompt)
        seconds = _seconds(path, number, "arrival_s", row["arrival_s"], 1)
        yield TraceRow(
            number,
            seconds,
            prompt,
            output,
            hashes,
            None if conversation is None else str(conversation),
        )


def _own_header(path: Path, line: int, fields: list[str]) -> list[str]:
    unknown = [f for f in fields if f not in (*OWN_FIELDS, *OWN_OPTIONAL)]
    twice = sorted({f for f in fields if fields.count(f) > 1})
    if unknown or twice:
        what = f"unknown column {unknown[0]!r:.40}" if unknown else f"the column {twice[0]!r} twice"
        raise _error(path, line, f"{what} (columns: {', '.join(OWN_FIELDS + OWN_OPTIONAL)})")
    return fields


def _seconds(path: Path, line: int, name: str, value: Any, per_second: int) -> float:
    """A time of a row in seconds: a number (or its text) >= 0 in ``1 / per_second`` units."""
    unit = "milliseconds" if per_second == 1000 else "seconds"
    try:
        number = float(value) if isinstance(value, str) and value.strip().isascii() else value
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise TypeError
        return check_float(name, number / per_second, low=0.0, high=1e12)
    except (TypeError, ValueError, OverflowError):
        raise _error(
            path, line, f"{name} must be a number of {unit} >= 0, got {value!r:.40}"
        ) from None


def _hashes(path: Path, line: int, hashes: Any, prompt: int) -> tuple[int, ...]:
    if not isinstance(hashes, list) or not all(type(h) is int for h in hashes):
        raise _error(path, line, f"hash_ids must be a list of ints, got {hashes!r:.60}")
    most = div_ceil(prompt, MOONCAKE_TOKENS_PER_HASH)
    if len(hashes) > most:
        raise _error(
            path,
            line,
            f"hash_ids holds {len(hashes)} hashes; a {prompt}-token prompt has at most {most} "
            f"blocks of {MOONCAKE_TOKENS_PER_HASH} tokens",
        )
    return tuple(hashes)


def conversation_hashes(conversation: str, prompt: int) -> tuple[int, ...]:
    """[kvlab] The block hashes of a turn whose prompt is its conversation so far: block i of a
    conversation is the same tokens in every turn that holds it whole, so it hashes
    (conversation, i); a partial last block gets none."""
    return tuple(
        int.from_bytes(hashlib.blake2b(f"{conversation}\0{i}".encode(), digest_size=8).digest())
        >> 1
        for i in range(prompt // MOONCAKE_TOKENS_PER_HASH)
    )


def trace_requests(
    rows: Iterator[TraceRow],
    seconds_per_iteration: float,
    request_id: Callable[[TraceRow], str] = lambda row: f"line-{row.line}",
) -> Iterator[Request]:
    """Each row as a Request arriving at step ``floor(seconds / seconds_per_iteration)``."""
    for row in rows:
        yield Request(
            request_id(row),
            row.prompt,
            row.output,
            int(row.seconds // seconds_per_iteration),
            prefix_hashes=row.hashes,
        )
