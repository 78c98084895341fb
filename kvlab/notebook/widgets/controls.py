"""The controls the panels share: one maker for the panels' look, the pool and context
sliders, and their options."""

from __future__ import annotations

import math

import ipywidgets as W
import traitlets

from kvlab.notebook.panel import TOGGLE_CLASS

#: Context slider range, tokens.
CONTEXT_RANGE = (32, 131072)
#: The panels' slider width.
WIDE = "420px"
#: The box beside a slider that takes a typed count.
TYPED_BOX = "90px"


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
    widget = kind(description=description, style=style, layout=layout, **options)
    if isinstance(widget, W.ToggleButtons):  # its view is a block, its label left-aligned:
        layout.display, layout.align_items = "flex", "center"  # the label beside the buttons,
        widget.add_class(TOGGLE_CLASS)  # right-aligned by panel.CONTROLS_CSS
    return widget


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


class TypedCount(W.HBox):
    """A slider over counts with a box beside it to type one: ipywidgets' SelectionSlider shows
    its value in a box that takes typing and ignores it (a learner typed 1536 into notebook
    02's panel and nothing happened). A typed count ("1536", "1,536") between the first and the
    last choice becomes the value, added to the slider's stops if it is not one; a count
    outside is clamped to the nearest end; anything else puts the box back. ``value`` and
    ``options`` read as the slider's do, so a panel takes it as one control."""

    value = traitlets.Int()

    def __init__(self, description: str, choices, value: int, *, continuous: bool = True):
        self.slider = control(
            W.SelectionSlider,
            description,
            options=labelled(choices),
            value=int(value),
            readout=False,
            continuous_update=continuous,
        )
        # the slider and the box as wide as a slider with its readout: the tracks line up
        self.slider.layout.width = f"calc({WIDE} - {TYPED_BOX})"
        self.box = W.Text(
            value=f"{int(value):,}", continuous_update=False, layout=W.Layout(width=TYPED_BOX)
        )
        super().__init__([self.slider, self.box], layout=W.Layout(align_items="center"))
        self.value = int(value)
        self.slider.observe(lambda change: self._set(change["new"]), names="value")
        self.box.observe(lambda change: self._typed(change["new"]), names="value")
        self.observe(lambda change: self._set(change["new"]), names="value")  # set in code

    @property
    def options(self):
        return self.slider.options

    def _set(self, value: int) -> None:
        """Slider, box and value at ``value`` (a stop of the slider's, or made one)."""
        choices = [v for _, v in self.slider.options]
        if value not in choices:
            self.slider.options = labelled(sorted([*choices, value]))
        self.slider.value, self.box.value, self.value = value, f"{value:,}", value

    def _typed(self, text: str) -> None:
        choices = [v for _, v in self.slider.options]
        digits = text.replace(",", "").replace("_", "").strip()
        if digits.isdecimal():
            self._set(min(max(int(digits), choices[0]), choices[-1]))
        else:  # not a count: the box shows the value again
            self.box.value = f"{self.value:,}"


def context_slider(context: int, choices, *, continuous: bool = True) -> TypedCount:
    """The context length (tokens) over ``choices``, typed or slid."""
    return TypedCount("context (tokens)", choices, context, continuous=continuous)
