"""The Panel pattern: controls -> compute -> figures redrawn in place.

One pattern for every notebook's live panel (:class:`Panel`; each notebook's own is in
:mod:`kvlab.notebook.widgets`)::

    panel = Panel(
        controls={"pool_mib": FloatLogSlider(...), ...},   # ipywidgets with a .value
        compute=lambda values: model,                      # values: {name: control.value}
        figures=lambda model: {"map": spec, ...},          # kvlab.notebook.viz *_spec (or go.Figure)
        verdict=lambda model: ("ok", "<b>html</b>"),       # (outcome or None, HTML)
        title="...")
    panel                                # display it (last expression of a cell)
    panel.set(pool_mib=32)               # set several controls, recompute once

A change of any control recomputes the model, sets the verdict, then hands each figure to its
:class:`~kvlab.notebook.plot_view.PlotView` (built once, never rebuilt), which sends it only if
it changed and redraws it with ``Plotly.react``. The verdict goes first because the browser
shows it at once, whereas each figure costs it a plotly redraw (``benchmarks/browser_latency.py``
measures both in JupyterLab in Chromium). Changes are
coalesced by a :class:`Debouncer`. A model that cannot be computed (``compute`` raises) leaves
the figures as they were and says why in the verdict instead of printing a traceback.

Displayed where no widget frontend runs (papermill, nbconvert), a panel still shows: its display
bundle carries, next to the widget view, a static copy of the figures (plotly's JSON mime type
and an HTML copy) and the verdict, and a frontend that cannot show the widget falls back to them.
"""

from __future__ import annotations

import asyncio
import html
import json
import numbers
import re
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from kvlab.notebook import viz
from kvlab.notebook.plot_view import PlotView
from kvlab.notebook.tables import keep_whole

#: The display bundle's copy of a whole panel (title, values, verdict HTML, every figure as
#: plotly JSON), which the walkthrough's report draws as images (kvlab.notebook.walkthrough).
PANEL_MIME = "application/vnd.kvlab.panel+json"

#: Seconds within which changes are folded into one recompute (see Debouncer).
DEFAULT_WAIT_S = 0.05


class Debouncer:
    """Coalesce bursts of calls of ``fn`` (a function of no arguments that reads the current
    state, e.g. the controls' values).

    With a running asyncio event loop (a Jupyter kernel handling slider messages), the first
    call of a burst runs ``fn`` at once (leading edge); calls within the next ``wait_s`` seconds
    are folded into one more run at the end of that window (trailing edge), which sees the final
    state. So a dragged slider recomputes at most once per ``wait_s`` and always ends on its last
    value. With no running loop (plain Python, headless tests) or ``wait_s == 0``, every call
    runs ``fn`` synchronously, so a test sees the update as soon as it sets a value.
    """

    def __init__(self, fn: Callable[[], Any], wait_s: float = DEFAULT_WAIT_S):
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        if (
            isinstance(wait_s, bool)
            or not isinstance(wait_s, (int, float))
            or not 0 <= wait_s <= 10
        ):
            raise ValueError(f"wait_s must be a number of seconds in [0, 10], got {wait_s!r}")
        self.fn = fn
        self.wait_s = float(wait_s)
        self.calls = 0  # calls received
        self.runs = 0  # times fn ran
        self._handle: asyncio.TimerHandle | None = None
        self._last_run = float("-inf")

    @property
    def pending(self) -> bool:
        """A trailing run is scheduled."""
        return self._handle is not None

    def __call__(self) -> None:
        self.calls += 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or self.wait_s == 0:
            self._run()
            return
        if self._handle is not None:  # a trailing run is already due: fold this call into it
            return
        since = loop.time() - self._last_run
        if since >= self.wait_s:
            self._last_run = loop.time()
            self._run()
        else:
            self._handle = loop.call_later(self.wait_s - since, self._trailing)

    def _trailing(self) -> None:
        self._handle = None
        try:
            self._last_run = asyncio.get_running_loop().time()
        except RuntimeError:  # pragma: no cover - called by the loop, so it runs
            pass
        self._run()

    def flush(self) -> bool:
        """Run a pending trailing call now; True if there was one."""
        if self._handle is None:
            return False
        self._handle.cancel()
        self._handle = None
        self._run()
        return True

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _run(self) -> None:
        self.runs += 1
        self.fn()


def _plain(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", markup)).split("\n")[0] if markup else ""


def verdict_html(
    outcome: str | None, headline: str, detail: str = "", *, label: str | None = None
) -> str:
    """The verdict box: a coloured bar and label for the outcome, a sentence, optional detail.
    ``label`` replaces the outcome's label: what a run with no outcome yet stands at."""
    color = viz.outcome_color(outcome)
    label = label if label is not None else viz.OUTCOME_LABELS.get(outcome or "", "no outcome")
    # overflow-wrap: a word longer than the box (an engine's URL) is broken rather than cut off
    body = (
        f'<div style="border-left:6px solid {color};padding:6px 10px;margin:4px 0;'
        f'line-height:1.4;overflow-wrap:anywhere">'
        f'<div style="font-weight:700;color:{color};letter-spacing:.02em">{html.escape(label.upper())}</div>'
        f'<div class="kvlab-verdict">{keep_whole(html.escape(headline))}</div>'
    )
    if detail:
        body += (
            f'<pre style="font-size:11px;white-space:pre-wrap;word-break:normal;'
            f'overflow-wrap:anywhere;margin:6px 0 0 0">{keep_whole(html.escape(detail))}</pre>'
        )
    return body + "</div>"


def check_control_value(name: str, control: W.ValueWidget, value) -> None:
    """ValueError naming ``name`` and the accepted values or range when ``control`` (a selection
    or a slider) does not offer ``value`` (a value that is not one number or str, such as a numpy
    array, included: it is never compared, as an array has no one truth value)."""
    options = getattr(control, "options", None)
    if options is not None:  # SelectionSlider, Dropdown, ToggleButtons: (label, value) pairs
        choices = [o[1] if isinstance(o, tuple) else o for o in options]
        if (
            not isinstance(value, (str, numbers.Number))
            or value not in choices
            or isinstance(value, bool) != isinstance(choices[0], bool)
        ):
            shown = (
                repr(choices)
                if len(choices) <= 8
                else f"{len(choices)} values from {choices[0]!r} to {choices[-1]!r}"
            )
            raise ValueError(f"{name} must be one of the control's values ({shown}), got {value!r}")
        return
    if hasattr(control, "min") and hasattr(control, "max"):
        base = getattr(control, "base", None)  # FloatLogSlider: min and max are exponents
        low, high = (base**control.min, base**control.max) if base else (control.min, control.max)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not low <= value <= high
        ):
            raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")


class Panel:
    """Controls, a compute function, figure functions and a verdict, wired together (module
    docstring). Attributes: ``controls`` (name -> ipywidget), ``views`` (name -> PlotView, the
    figures on screen), ``figures`` (name -> go.Figure, what they show), ``verdict`` (an
    ipywidgets.HTML), ``model`` (the last computed model), ``error`` (the last compute error, or
    None), ``updates`` (refreshes done), ``widget`` (the whole panel as one ipywidgets box).

    ``action``: (button label, ``run(model) -> (result, HTML)``) for work too slow to redo on
    every change (a real multi-rank run): a button runs it for the current model and shows the
    HTML under the verdict until a control changes. :meth:`act` presses it from code."""

    def __init__(
        self,
        controls: Mapping[str, W.ValueWidget],
        compute: Callable[[dict[str, Any]], Any],
        figures: Callable[[Any], Mapping[str, Any]],
        verdict: Callable[[Any], tuple[str | None, str]],
        *,
        title: str = "",
        wait_s: float = DEFAULT_WAIT_S,
        figure_width: int = 640,
        verdict_width: str = "320px",
        action: tuple[str, Callable[[Any], tuple[Any, str]]] | None = None,
    ):
        if not controls:
            raise ValueError("controls must name at least one widget")
        self.controls: dict[str, W.ValueWidget] = dict(controls)
        self._compute, self._figures, self._verdict = compute, figures, verdict
        self.figure_width = figure_width
        self.title = title
        self.error: BaseException | None = None
        self.updates = 0
        self.outcome: str | None = None
        self.model = compute(self.values)
        self.views: dict[str, PlotView] = {
            name: PlotView(fig) for name, fig in self._render(self.model).items()
        }
        self.outcome, text = verdict(self.model)
        self.verdict = W.HTML(value=text, layout=W.Layout(width=verdict_width))
        self._action = action
        self.action_result: Any = None
        self.action_output = W.HTML()  # below the figures, full width: it may hold a table
        side = [self.verdict]
        if action is not None:
            self.action_button = W.Button(description=action[0], layout=W.Layout(width="auto"))
            self.action_button.on_click(lambda _button: self.act())
            side += [self.action_button]
        self._debouncer = Debouncer(self.refresh, wait_s)
        self._holding = False
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        header = [W.HTML(f"<h3 style='margin:4px 0'>{html.escape(title)}</h3>")] if title else []
        wrap = W.Layout(
            flex_flow="row wrap"
        )  # a narrow page puts the next box below, not off screen
        control_rows = [
            W.HBox(list(self.controls.values())[i : i + 2], layout=wrap)
            for i in range(0, len(self.controls), 2)
        ]
        self.widget = W.VBox(
            [
                *header,
                *control_rows,
                W.HBox([W.VBox(list(self.views.values())), W.VBox(side)], layout=wrap),
                self.action_output,
            ]
        )

    # -- state ------------------------------------------------------------------------------
    @property
    def values(self) -> dict[str, Any]:
        """The controls' current values, by name."""
        return {name: control.value for name, control in self.controls.items()}

    @property
    def figures(self) -> dict[str, go.Figure]:
        """What each view shows, by name, as new go.Figures."""
        return {name: view.figure for name, view in self.views.items()}

    @property
    def debouncer(self) -> Debouncer:
        return self._debouncer

    def _render(self, model) -> dict[str, Any]:
        figs = dict(self._figures(model))
        for fig in figs.values():  # narrower than a notebook's figure: subtitles broken again
            viz.style.resize_layout(
                fig.setdefault("layout", {}) if isinstance(fig, dict) else fig.layout,
                self.figure_width,
            )
        return figs

    def _on_change(self, change) -> None:
        if not self._holding:
            self._debouncer()

    def refresh(self) -> None:
        """Recompute the model from the controls and update the verdict, then the figures, in
        place. A compute error (in the model, the figures or the verdict) is shown in the
        verdict; the figures keep their last state."""
        self.updates += 1
        try:
            model = self._compute(self.values)
            figs = self._render(model)
            outcome, text = self._verdict(model)
        except Exception as exc:  # shown to the reader, not raised into the widget callback
            self.error = exc
            self.outcome = None
            self.verdict.value = verdict_html(None, f"cannot compute: {type(exc).__name__}: {exc}")
            return
        self.error = None
        self.model = model
        self.action_result, self.action_output.value = None, ""  # it described other values
        # The verdict first: it is one small message that the browser shows at once, while each
        # figure costs the browser a plotly redraw (tens of ms on 2 cores) before the next message.
        self.outcome, self.verdict.value = outcome, text
        for name, fig in figs.items():
            self.views[name].show(fig)

    @contextmanager
    def hold(self):
        """Change several controls without recomputing in between; recompute once at the end."""
        self._holding = True
        try:
            yield self
        finally:
            self._holding = False
        self._debouncer.cancel()
        self.refresh()

    def set(self, **values) -> Panel:
        """Set controls by name and recompute once, at once (also inside a running kernel). A
        value the control does not offer is a ValueError naming the control and what it
        offers (a slider would clamp it silently; a selection raises ipywidgets' TraitError,
        which names neither)."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(
                f"unknown control(s) {sorted(unknown)}; controls are {sorted(self.controls)}"
            )
        for name, value in values.items():
            check_control_value(name, self.controls[name], value)
        with self.hold():
            for name, value in values.items():
                self.controls[name].value = value
        return self

    def flush(self) -> bool:
        """Apply a pending (debounced) update now."""
        return self._debouncer.flush()

    def act(self) -> Any:
        """Run the panel's action for the current model (what its button does); returns its
        result and shows its HTML under the verdict."""
        if self._action is None:
            raise ValueError("this panel has no action")
        self.flush()
        self.action_result, self.action_output.value = self._action[1](self.model)
        return self.action_result

    # -- display ----------------------------------------------------------------------------
    @property
    def verdict_text(self) -> str:
        """The verdict's headline as plain text."""
        match = re.search(r'class="kvlab-verdict">(.*?)</div>', self.verdict.value, re.S)
        return html.unescape(match.group(1)) if match else _plain(self.verdict.value)

    def static_bundle(self) -> dict:
        """The panel without a widget frontend: verdict and figures as HTML, the first figure
        as plotly JSON, the verdict as plain text, and the whole panel (:data:`PANEL_MIME`)
        for the walkthrough's report."""
        figs = list(self.figures.values())
        title = f"<h3>{html.escape(self.title)}</h3>" if self.title else ""
        values = (
            "<p><code>"
            + html.escape(", ".join(f"{k}={v!r}" for k, v in self.values.items()))
            + "</code></p>"
        )
        parts = [title, values, self.verdict.value] + [viz.figure_html(f) for f in figs]
        bundle = {
            "text/html": "\n".join(p for p in parts if p),
            "text/plain": f"{self.title}: {self.verdict_text}",
            PANEL_MIME: {
                "title": title,
                "values": values,
                "verdict": self.verdict.value,
                "figures": [json.loads(f.to_json()) for f in figs],
            },
        }
        if figs:
            bundle["application/vnd.plotly.v1+json"] = figs[0].to_plotly_json()
        return bundle

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.static_bundle()
        view = self.widget._repr_mimebundle_() or {}
        view.pop("text/plain", None)
        bundle.update(view)
        return bundle


__all__ = [
    "DEFAULT_WAIT_S",
    "PANEL_MIME",
    "Debouncer",
    "Panel",
    "check_control_value",
    "verdict_html",
]
