"""kvlab.core.files: the one reader of each format refuses what is not its format, naming the
file (and line), and never hangs on a special file."""

from __future__ import annotations

import os
import re

import pytest

from kvlab.core.files import FileFormatError, load_json, parse_json, read_text


def test_a_bom_is_dropped_and_utf8_read(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert load_json(path, "a file", 100) == {"a": 1}


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p.mkdir(), "not a regular file"),
        (lambda p: os.mkfifo(p), "not a regular file"),  # a FIFO: refused, never opened
        (lambda p: p.symlink_to(p.parent / "gone"), "cannot read a file: No such file"),
        (lambda p: p.write_text('{"a": 1}', encoding="utf-16"), "must be UTF-8 text"),
        (lambda p: p.write_text(" " * 101), "must be at most 100 bytes"),
    ],
    ids=["folder", "FIFO", "dangling link", "UTF-16", "too large"],
)
def test_what_is_not_a_small_utf8_file_is_refused_naming_it(tmp_path, make, words):
    path = tmp_path / "x.json"
    make(path)
    with pytest.raises(FileFormatError, match=re.escape(words)) as error:
        read_text(path, "a file", 100)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"a": 1, "b": {"c": 2, "c": 3}}', "f.json: the key 'c' is given twice"),
        ('{"n": ' + "9" * 5000 + "}", "f.json: n is an integer of 5,000 digits (at most 30)"),
        ('{"a": [' + "[" * 40 + "]" * 40 + "]}", "f.json: nested deeper than 32 levels (at a"),
        ("[" * 100_000, "f.json: nested deeper than 32 levels"),
        ('{"a": 1,\n "b": }', "f.json: not JSON (Expecting value, line 2)"),
        ("", "not JSON (Expecting value, line 1)"),
    ],
    ids=["twice", "long integer", "deep", "very deep", "not JSON", "empty"],
)
def test_json_is_refused_past_its_bounds_naming_where(text, words):
    with pytest.raises(FileFormatError, match=re.escape(words)):
        parse_json(text, "f.json")


def test_json_within_the_bounds_is_read_as_json():
    text = '{"a": [1, -2.5, "x", null, true], "n": ' + "9" * 30 + ', "d": ' + "[" * 31 + "]" * 31
    assert parse_json(text + "}", "f.json")["n"] == int("9" * 30)
