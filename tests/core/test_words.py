"""kvlab.core.words: counts and articles in kvlab's own text."""

from __future__ import annotations

import pytest

from kvlab.core.words import a_or_an, counted


def test_counted_agrees_number_and_noun():
    assert [
        counted(1, "pass"),
        counted(2, "pass"),
        counted(1072, "request"),
        counted(0, "page"),
    ] == ["1 pass", "2 passes", "1,072 requests", "0 pages"]
    assert counted(3, "query", "queries") == "3 queries"


@pytest.mark.parametrize(
    "number, article",
    [
        ("8,192", "an"),
        ("80", "an"),
        ("11.31", "an"),
        ("18", "an"),
        ("11,000", "an"),
        ("4", "a"),
        ("110", "a"),
        ("1,024", "a"),
        ("0.5", "a"),
    ],
)
def test_a_or_an_reads_the_number_aloud(number, article):
    """Learner pass A: 02 printed "a 8,192-token context"."""
    assert a_or_an(number) == article
