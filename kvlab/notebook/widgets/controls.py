"""What the panels share: slider options for counts and context lengths."""

from __future__ import annotations

#: Context slider range, tokens.
CONTEXT_RANGE = (32, 131072)


def labelled(values) -> list:
    """(label, value) options for a SelectionSlider of counts: the label with thousands
    separators (its readout shows 1,000,000, not 1000000)."""
    return [(f"{v:,}", v) for v in values]


def context_choices(extra=()) -> list:
    """Context lengths for the log-feel slider: 2**k and 1.5 * 2**k from 32 to 131072."""
    lo, hi = CONTEXT_RANGE
    values = {v for k in range(5, 18) for v in (2**k, 3 * 2 ** (k - 1)) if lo <= v <= hi}
    values.update(int(v) for v in extra)
    return sorted(values)


__all__ = ["CONTEXT_RANGE", "context_choices", "labelled"]
