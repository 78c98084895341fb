"""The live-panel pattern: controls -> ``compute(values)`` -> a model -> ``figures(model)``
(name -> kvlab.notebook.viz spec, each shown by a :class:`~kvlab.notebook.plot_view.PlotView`
that redraws only what changed) and ``verdict(model)`` -> (outcome, HTML). Changes are
coalesced by a :class:`Debouncer`; a model that cannot be computed keeps the figures and says
why in the verdict. Without a widget frontend (papermill, nbconvert) the display bundle
carries a static copy of the figures and the verdict."""

from __future__ import annotations

import asyncio
import html
import json
import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from kvlab.core.checks import check_float
from kvlab.notebook import viz
from kvlab.notebook.plot_view import PlotView
from kvlab.notebook.tables import keep_whole

#: The display bundle's copy of a whole panel (title, values, verdict, every figure as plotly
#: JSON), which the walkthrough's report draws as images.
PANEL_MIME = "application/vnd.kvlab.panel+json"
#: What ipywidgets' own styles lack for the panels' look, put on the page by every panel: a
#: toggle's label (kvlab.notebook.widgets.controls gives toggles the class) right-aligned, as
#: every other control's is.
TOGGLE_CLASS = "kvlab-toggle"
CONTROLS_CSS = (
    f".{TOGGLE_CLASS} > .widget-label "
    "{ text-align: right; padding-right: 12px; box-sizing: border-box; }"
)
#: Seconds within which changes are folded into one recompute.
DEFAULT_WAIT_S = 0.05
#: The verdict's detail: wrapped between words, a word longer than the box anywhere.
DETAIL_STYLE = "font-size:11px;white-space:pre-wrap;word-break:normal;overflow-wrap:anywhere"


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Debouncer:
    """Coalesce bursts of calls of ``fn``: in a running asyncio loop (a kernel handling slider
    messages) the first call of a burst runs at once and the calls within ``wait_s`` seconds of
    its end fold into one trailing run, which sees the final state; without a loop (headless
    tests) or with ``wait_s == 0`` every call runs at once."""

    def __init__(self, fn: Callable[[], Any], wait_s: float = DEFAULT_WAIT_S):
        self.fn, self.wait_s = fn, wait_s
        self.calls = self.runs = 0
        self._handle: asyncio.TimerHandle | None = None
        self._last_run = float("-inf")

    @property
    def pending(self) -> bool:
        """A trailing run is scheduled."""
        return self._handle is not None

    def __call__(self) -> None:
        self.calls += 1
        loop = _running_loop()
        if loop is None or self.wait_s == 0:
            self._run()
        elif self._handle is None:  # else a trailing run is due: this call folds into it
            wait = self._last_run + self.wait_s - loop.time()
            if wait > 0:
                self._handle = loop.call_later(wait, self.flush)
            else:
                self._run()

    def flush(self) -> bool:
        """Run a pending trailing call now; True if there was one."""
        if self._handle is None:
            return False
        self.cancel()
        self._run()
        return True

    def cancel(self) -> None:
        """Drop a pending trailing call."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _run(self) -> None:
        self.runs += 1
        try:
            self.fn()
        finally:  # the window counts from the run's end: a slow run's queued calls fold too
            loop = _running_loop()
            if loop is not None:
                self._last_run = loop.time()


def verdict_html(
    outcome: str | None, headline: str, detail: str = "", *, label: str | None = None
) -> str:
    """The verdict box: a bar and label in the outcome's colour (``label`` replaces the
    outcome's), a sentence, optional detail."""
    color = viz.outcome_color(outcome)
    label = label if label is not None else viz.OUTCOME_LABELS.get(outcome or "", "no outcome")
    body = (
        f'<div style="border-left:6px solid {color};padding:6px 10px;margin:4px 0;'
        f'line-height:1.4;overflow-wrap:anywhere">'
        f'<div style="font-weight:700;color:{color};letter-spacing:.02em">{html.escape(label.upper())}</div>'
        f'<div class="kvlab-verdict">{keep_whole(html.escape(headline))}</div>'
    )
    if detail:
        body += detail_html(keep_whole(html.escape(detail)))
    return body + "</div>"


def detail_html(escaped: str) -> str:
    """Escaped text under a verdict, a fact a line, wrapped by the browser between words."""
    return f'<pre style="{DETAIL_STYLE};margin:6px 0 0 0">{escaped}</pre>'


def check_control_value(name: str, control: W.ValueWidget, value) -> None:
    """ValueError naming ``name`` and what ``control`` (a selection or a slider) offers when it
    does not offer ``value`` (an array included: it is never compared)."""
    options = getattr(control, "options", None)
    if options is not None:  # SelectionSlider, Dropdown, ToggleButtons: (label, value) pairs
        choices = [o[1] if isinstance(o, tuple) else o for o in options]
        same_kind = isinstance(value, bool) == isinstance(choices[0], bool)
        if not (isinstance(value, (str, numbers.Number)) and same_kind and value in choices):
            shown = (
                repr(choices)
                if len(choices) <= 8
                else f"{len(choices)} values from {choices[0]!r} to {choices[-1]!r}"
            )
            raise ValueError(f"{name} must be one of the control's values ({shown}), got {value!r}")
    elif hasattr(control, "min") and hasattr(control, "max"):
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
    docstring): ``controls``, ``views`` (name -> PlotView), ``figures`` (name -> go.Figure),
    ``verdict`` (an ipywidgets.HTML), ``model``, ``error`` (the last compute error), ``updates``
    and ``widget`` (the whole panel). ``action``: (button label, ``run(model) -> (result,
    HTML)``) for work too slow to redo on every change; :meth:`act` presses it from code."""

    #: The figures' width (px), narrower than a notebook's: subtitles are broken again for it.
    figure_width = 640

    def __init__(
        self,
        controls: Mapping[str, W.ValueWidget],
        compute: Callable[[dict[str, Any]], Any],
        figures: Callable[[Any], Mapping[str, Any]],
        verdict: Callable[[Any], tuple[str | None, str]],
        *,
        title: str = "",
        wait_s: float = DEFAULT_WAIT_S,
        verdict_width: str = "320px",
        action: tuple[str, Callable[[Any], tuple[Any, str]]] | None = None,
    ):
        check_float("wait_s", wait_s, low=0.0, high=10.0)
        self.controls: dict[str, W.ValueWidget] = dict(controls)
        self._compute, self._figures, self._verdict = compute, figures, verdict
        self.title, self._action = title, action
        self.error: BaseException | None = None
        self.updates = 0
        self.action_result: Any = None
        self.model = compute(self.values)
        self.views = {name: PlotView(fig) for name, fig in self._render(self.model).items()}
        self.outcome, text = verdict(self.model)
        self.verdict = W.HTML(value=text, layout=W.Layout(width="auto"))
        self.action_output = W.HTML()  # below the figures, full width: it may hold a table
        side = [self.verdict]
        if action is not None:
            self.action_button = W.Button(description=action[0], layout=W.Layout(width="auto"))
            self.action_button.on_click(lambda _button: self.act())
            side.append(self.action_button)
        self.debouncer = Debouncer(self.refresh, wait_s)
        self._holding = False
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        # the controls in aligned columns, two where the page is wide enough, else one; the
        # verdict beside the figures, or below them at the page's width on a laptop
        grid = W.Layout(grid_template_columns="repeat(auto-fill, minmax(540px, 1fr))")
        beside = W.Layout(flex=f"1 1 {verdict_width}", min_width=verdict_width, max_width="760px")
        heading = f"<h3 style='margin:4px 0'>{html.escape(title)}</h3>" if title else ""
        header = [W.HTML(f"<style>{CONTROLS_CSS}</style>{heading}")]
        self.widget = W.VBox(
            [
                *header,
                W.GridBox(list(self.controls.values()), layout=grid),
                W.HBox(
                    [W.VBox(list(self.views.values())), W.VBox(side, layout=beside)],
                    layout=W.Layout(flex_flow="row wrap"),  # a narrow page puts it below
                ),
                self.action_output,
            ]
        )

    @property
    def values(self) -> dict[str, Any]:
        """The controls' current values, by name."""
        return {name: control.value for name, control in self.controls.items()}

    @property
    def figures(self) -> dict[str, go.Figure]:
        """What each view shows, by name, as new go.Figures."""
        return {name: view.figure for name, view in self.views.items()}

    def _render(self, model) -> dict[str, Any]:
        figs = dict(self._figures(model))
        for fig in figs.values():
            viz.style.resize_layout(fig.setdefault("layout", {}), self.figure_width)
        return figs

    def _on_change(self, change) -> None:
        if not self._holding:
            self.debouncer()

    def refresh(self) -> None:
        """Recompute the model and update the verdict, then the figures; a compute error is
        shown in the verdict and the figures keep their last state."""
        self.updates += 1
        try:
            model = self._compute(self.values)
            figs = self._render(model)
            outcome, text = self._verdict(model)
        except Exception as exc:  # shown to the reader, not raised into the widget callback
            self.error, self.outcome = exc, None
            self.verdict.value = verdict_html(None, f"cannot compute: {type(exc).__name__}: {exc}")
            return
        self.error, self.model = None, model
        self.action_result, self.action_output.value = None, ""  # it described other values
        self.outcome, self.verdict.value = outcome, text
        for name, fig in figs.items():
            self.views[name].show(fig)

    def set(self, **values) -> Panel:
        """Set controls by name and recompute once; a value a control does not offer is a
        ValueError naming the control and what it offers (a slider would clamp it silently)."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(
                f"unknown control(s) {sorted(unknown)}; controls are {sorted(self.controls)}"
            )
        for name, value in values.items():
            check_control_value(name, self.controls[name], value)
        self._holding = True  # no recompute in between
        try:
            for name, value in values.items():
                self.controls[name].value = value
        finally:
            self._holding = False
        self.debouncer.cancel()
        self.refresh()
        return self

    def flush(self) -> bool:
        """Apply a pending (debounced) update now."""
        return self.debouncer.flush()

    def act(self) -> Any:
        """Run the panel's action for the current model (its button) and show its HTML."""
        if self._action is None:
            raise ValueError("this panel has no action")
        self.flush()
        self.action_result, self.action_output.value = self._action[1](self.model)
        return self.action_result

    @property
    def verdict_text(self) -> str:
        """The verdict's headline as plain text."""
        match = re.search(r'class="kvlab-verdict">(.*?)</div>', self.verdict.value, re.S)
        return html.unescape(match.group(1)) if match else ""

    def static_bundle(self) -> dict:
        """The panel without a widget frontend: verdict and figures as HTML, the first figure
        as plotly JSON, the headline as text, and the whole panel (:data:`PANEL_MIME`)."""
        figs = list(self.figures.values())
        title = f"<h3>{html.escape(self.title)}</h3>" if self.title else ""
        values = ", ".join(f"{k}={v!r}" for k, v in self.values.items())
        values = f"<p><code>{html.escape(values)}</code></p>"
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
        view = self.widget._repr_mimebundle_() or {}
        view.pop("text/plain", None)
        return {**self.static_bundle(), **view}
