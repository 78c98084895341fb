"""Tables as a notebook shows them: HTML (a pandas Styler) with counts as 1,234,567, reals to a
fixed number of decimals, and text whole, wrapped between words, never clipped with "..."."""

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
_CELL_CSS = "white-space: normal; word-break: normal; overflow-wrap: normal; vertical-align: top"
_STYLES = [
    dict(selector="th, td", props=f"{_CELL_CSS}; padding: 3px 8px"),
    dict(selector="th", props="text-align: left"),
]
#: A command-line flag ("--allow-auto-truncate"), for :func:`keep_whole`.
FLAG_PATTERN = r"(?<![\w-])--[\w-]+"
#: A flag or a hyphenated name ("mistral-7b-v0.1") of at most 40 characters, kept whole.
NAME_PATTERN = r"(?<![\w.-])(?=[\w.-]{1,40}(?![\w.-]))(?:--)?[\w.]+(?:-[\w.]+)+"


def cell_text(value, digits: int = 2) -> str:
    """One table cell as :func:`table` writes it: 1,234,567; 0.25; text as it is."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        return "" if value != value else f"{float(value):,.{digits}f}"
    return str(value)


def keep_whole(markup: str, pattern: str = FLAG_PATTERN) -> str:
    """``markup`` with each match of ``pattern`` kept on one line (a browser breaks after a
    hyphen, and "--" over "allow-auto-truncate" reads as two words)."""
    return re.sub(pattern, r'<span style="white-space:nowrap">\g<0></span>', markup)


def _whole(value, digits: int) -> str:
    """A cell's HTML: a name kept whole, a word too long for a column ("a.b_c...") allowed to
    wrap after each "." and "_" in it."""

    def breakable(match: re.Match) -> str:
        return re.sub(r"(?<=[._])(?=\w)", "<wbr>", match.group(0))

    return keep_whole(re.sub(r"[\w.]{25,}", breakable, cell_text(value, digits)), NAME_PATTERN)


def table(data, *, index: str | None = None, digits: int = 2):
    """``data`` (a DataFrame, or rows as dicts) as a Styler: ints as 1,234,567, reals with
    ``digits`` decimals, text left-aligned and whole. ``index``: the column to index by."""
    import pandas as pd

    digits = check_int("digits", digits, high=MAX_DIGITS)
    frame = data
    if not isinstance(data, pd.DataFrame):
        rows = check_items("data", data, "rows (dicts), or a DataFrame")
        frame = pd.DataFrame([check_instance(f"data[{i}]", r, Mapping) for i, r in enumerate(rows)])
    if index is not None:
        if check_instance("index", index, str) not in frame.columns:
            raise ValueError(
                f"index must name one of the columns {list(frame.columns)}, got {index!r:.60}"
            )
        frame = frame.set_index(index)
    # text: object columns and pandas' own string dtype (a column of str since pandas 3)
    text = [c for c in frame.columns if pd.api.types.is_string_dtype(frame[c].dtype)]
    styler = (
        frame.style.format(lambda v: _whole(v, digits))
        .format_index(lambda v: _whole(v, digits))
        # a long column name may wrap after each underscore ("mean_queue_steps")
        .format_index(lambda v: html.escape(cell_text(v)).replace("_", "_<wbr>"), axis=1)
        .set_table_styles(_STYLES)
    )
    if text:
        styler = styler.set_properties(
            subset=text, **{"text-align": "left", "max-width": TEXT_COLUMN_WIDTH}
        )
    return styler


def gib_pair(a_bytes: int, b_bytes: int, digits: int = 2) -> tuple:
    """Two byte counts in GiB with as many decimals (at most 6) as unequal values need to read
    unequal: never "37.48 GiB > quota 37.48 GiB"."""
    while True:
        a, b = (f"{n / 2**30:.{digits}f}" for n in (a_bytes, b_bytes))
        if a != b or a_bytes == b_bytes or digits >= 6:
            return a, b
        digits += 1
