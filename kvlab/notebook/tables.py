"""Tables as a notebook shows them: HTML (a pandas Styler), never wrapped text. Counts get
thousands separators, fractions a fixed number of decimals, and text stays whole: a long cell
wraps between words inside its column, never clipped with "..." (the DataFrame display's
``max_colwidth``) and never broken mid-word. Units belong in the column names."""

from __future__ import annotations

import html
import numbers
import re
from collections.abc import Mapping

from kvlab.core.checks import check_instance, check_int, check_items

#: The widest a text column grows before its cells wrap (between words).
TEXT_COLUMN_WIDTH = "34em"
#: The most decimals a table writes a real with (a float holds about 16 significant digits).
MAX_DIGITS = 15

_STYLES = [
    dict(
        selector="th, td",
        props=[
            ("white-space", "normal"),
            ("word-break", "normal"),
            ("overflow-wrap", "normal"),
            ("vertical-align", "top"),
            ("padding", "3px 8px"),
        ],
    ),
    dict(selector="th", props=[("text-align", "left")]),
]


def cell_text(value, digits: int = 2) -> str:
    """One table cell as :func:`table` writes it: 1,234,567; 0.25; text as it is."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        return "" if value != value else f"{float(value):,.{digits}f}"
    return str(value)


#: A command-line flag ("--allow-auto-truncate"), for :func:`keep_whole`.
FLAG_PATTERN = r"(?<![\w-])--[\w-]+"
#: A flag or a hyphenated name ("mistral-7b-v0.1") of at most 40 characters, which a table cell
#: keeps whole.
NAME_PATTERN = r"(?<![\w.-])(?=[\w.-]{1,40}(?![\w.-]))(?:--)?[\w.]+(?:-[\w.]+)+"


def keep_whole(markup: str, pattern: str = FLAG_PATTERN) -> str:
    """``markup`` (HTML) with each match of ``pattern`` kept on one line: the browser breaks
    after a hyphen, and "--" over "allow-auto-truncate" (or "'new-" over "a'") reads as two words."""
    return re.sub(
        pattern, lambda m: f'<span style="white-space:nowrap">{m.group(0)}</span>', markup
    )


def _breakable_words(text: str) -> str:
    """``text`` with a word longer than a narrow column ("kv_cache_config.host_cache_size")
    allowed to wrap after each "." and "_" in it, never elsewhere."""
    return re.sub(r"[\w.]{25,}", lambda m: re.sub(r"(?<=[._])(?=\w)", "<wbr>", m.group(0)), text)


def _breakable_header(name) -> str:
    """A column name as HTML that may wrap after each underscore ("mean_queue_steps"): a table of
    long names stays inside the notebook's width."""
    return html.escape(cell_text(name)).replace("_", "_<wbr>")


def table(data, *, index: str | None = None, digits: int = 2):
    """``data`` (a DataFrame, or rows as dicts) as a Styler: ints as 1,234,567, reals with
    ``digits`` decimals, text left-aligned and whole. ``index``: the column to index by."""
    import pandas as pd

    digits = check_int("digits", digits, high=MAX_DIGITS)
    if not isinstance(data, pd.DataFrame):
        data = [
            check_instance(f"data[{i}]", row, Mapping)
            for i, row in enumerate(check_items("data", data, "rows (dicts), or a DataFrame"))
        ]
    frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    if index is not None:
        if check_instance("index", index, str) not in frame.columns:
            raise ValueError(
                f"index must name one of the columns {list(frame.columns)}, got {index!r:.60}"
            )
        frame = frame.set_index(index)
    # text: object columns and pandas' own string dtype (what a column of str becomes since pandas 3)
    text = [
        c
        for c in frame.columns
        if frame[c].dtype == object or pd.api.types.is_string_dtype(frame[c].dtype)
    ]
    whole = lambda v: keep_whole(_breakable_words(cell_text(v, digits)), NAME_PATTERN)  # noqa: E731
    styler = (
        frame.style.format(whole)
        .format_index(whole)
        .format_index(_breakable_header, axis=1)
        .set_table_styles(_STYLES)
    )
    if text:
        styler = styler.set_properties(
            subset=text, **{"text-align": "left", "max-width": TEXT_COLUMN_WIDTH}
        )
    return styler


__all__ = [
    "FLAG_PATTERN",
    "MAX_DIGITS",
    "NAME_PATTERN",
    "TEXT_COLUMN_WIDTH",
    "cell_text",
    "keep_whole",
    "table",
]


def gib_pair(a_bytes: int, b_bytes: int, digits: int = 2) -> tuple:
    """Two byte counts in GiB with as many decimals (from ``digits``, at most 6) as it takes for
    unequal values to read unequal: never "37.48 GiB > quota 37.48 GiB"."""
    while True:
        a, b = (f"{n / 2**30:.{digits}f}" for n in (a_bytes, b_bytes))
        if a != b or a_bytes == b_bytes or digits >= 6:
            return a, b
        digits += 1
