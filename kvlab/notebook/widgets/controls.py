"""The controls the panels share: one maker for the panels' look, the pool and context
sliders, and their options."""

from __future__ import annotations

import math

import ipywidgets as W

#: Context slider range, tokens.
CONTEXT_RANGE = (32, 131072)
#: The panels' slider width.
WIDE = "420px"


def control(
    kind: type[W.ValueWidget],
    description: str,
    *,
    label: str = "110px",
    width: str | None = WIDE,
    button_width: str | None = None,
    **options,
) -> W.ValueWidget:
    """An ipywidgets ``kind`` described ``description`` in the panels' look: a ``label`` wide
    description, the control ``width`` wide (None: its own), buttons ``button_width`` wide."""
    style = {"description_width": label}
    if button_width is not None:
        style["button_width"] = button_width
    layout = W.Layout(width=width) if width else W.Layout()
    return kind(description=description, style=style, layout=layout, **options)


def labelled(values) -> list:
    """(label, value) options for a SelectionSlider of counts, labelled 1,000,000."""
    return [(f"{v:,}", v) for v in values]


def context_choices(extra=()) -> list:
    """Context lengths for the log-feel slider: 2**k and 1.5 * 2**k from 32 to 131072."""
    lo, hi = CONTEXT_RANGE
    values = {v for k in range(5, 18) for v in (2**k, 3 * 2 ** (k - 1)) if lo <= v <= hi}
    values.update(int(v) for v in extra)
    return sorted(values)


def pool_slider(pool_mib: float, exponents: tuple[int, int]) -> W.ValueWidget:
    """The pool (MiB) on a log2 slider from 2**exponents[0] to 2**exponents[1], widened to
    hold ``pool_mib``."""
    exponent = math.log2(pool_mib)
    low, high = min(exponents[0], math.floor(exponent)), max(exponents[1], math.ceil(exponent))
    return control(
        W.FloatLogSlider,
        "pool (MiB)",
        value=float(pool_mib),
        base=2,
        min=low,
        max=high,
        step=0.5,
        readout_format=",.4g",
    )


def context_slider(context: int, choices, *, continuous: bool = True) -> W.ValueWidget:
    """The context length (tokens) over ``choices``."""
    return control(
        W.SelectionSlider,
        "context (tokens)",
        options=labelled(choices),
        value=int(context),
        continuous_update=continuous,
    )
