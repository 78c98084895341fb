"""The controls the panels share: the pool and context sliders, and their options."""

from __future__ import annotations

import math

import ipywidgets as W

#: Context slider range, tokens.
CONTEXT_RANGE = (32, 131072)
#: The panels' slider look: a 110 px description on a 420 px slider.
LABEL = {"description_width": "110px"}
WIDE = "420px"


def labelled(values) -> list:
    """(label, value) options for a SelectionSlider of counts, labelled 1,000,000."""
    return [(f"{v:,}", v) for v in values]


def context_choices(extra=()) -> list:
    """Context lengths for the log-feel slider: 2**k and 1.5 * 2**k from 32 to 131072."""
    lo, hi = CONTEXT_RANGE
    values = {v for k in range(5, 18) for v in (2**k, 3 * 2 ** (k - 1)) if lo <= v <= hi}
    values.update(int(v) for v in extra)
    return sorted(values)


def pool_slider(pool_mib: float, exponents: tuple[int, int]) -> W.FloatLogSlider:
    """The pool (MiB) on a log2 slider from 2**exponents[0] to 2**exponents[1], widened to
    hold ``pool_mib``."""
    exponent = math.log2(pool_mib)
    return W.FloatLogSlider(
        value=float(pool_mib),
        base=2,
        min=min(exponents[0], math.floor(exponent)),
        max=max(exponents[1], math.ceil(exponent)),
        step=0.5,
        description="pool (MiB)",
        readout_format=",.4g",
        continuous_update=True,
        style=LABEL,
        layout=W.Layout(width=WIDE),
    )


def context_slider(context: int, choices, *, continuous: bool = True) -> W.SelectionSlider:
    """The context length (tokens) over ``choices``."""
    return W.SelectionSlider(
        options=labelled(choices),
        value=int(context),
        description="context (tokens)",
        continuous_update=continuous,
        style=LABEL,
        layout=W.Layout(width=WIDE),
    )
