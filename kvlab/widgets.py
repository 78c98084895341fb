"""Live panels for the notebooks: controls -> compute -> FigureWidgets updated in place.

One pattern for every notebook (:class:`Panel`)::

    panel = Panel(
        controls={"pool_mib": FloatLogSlider(...), ...},   # ipywidgets with a .value
        compute=lambda values: model,                      # values: {name: control.value}
        figures=lambda model: {"map": spec, ...},          # kvlab.viz *_spec (or go.Figure)
        verdict=lambda model: ("ok", "<b>html</b>"),       # (outcome or None, HTML)
        title="...")
    panel                                # display it (last expression of a cell)
    panel.set(pool_mib=32)               # set several controls, recompute once

A change of any control recomputes the model and patches each FigureWidget in place with
``kvlab.viz.update_figure`` inside ``batch_update`` (the widgets are built once, never rebuilt:
each figure function returns the same traces whatever the model). Changes are coalesced by a
:class:`Debouncer`. A model that cannot be computed (``compute`` raises) leaves the figures as
they were and says why in the verdict instead of printing a traceback.

Displayed where no widget frontend runs (papermill, nbconvert), a panel still shows: its display
bundle carries, next to the widget view, a static copy of the figures (plotly's JSON mime type
and an HTML copy) and the verdict, and a frontend that cannot show the widget falls back to them.

:func:`repro_panel` is notebook 02's panel: the 4 MiB repro of issue #21470 with sliders.
"""

from __future__ import annotations

import asyncio
import html
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import ipywidgets as W
import plotly.graph_objects as go

from . import viz
from .page_index import WIDTH_POLICIES
from .repro import (ReproResult, check_repro_parameters, no_pool_reason, run_repro,
                    seed_geometry)

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
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not 0 <= wait_s <= 10:
            raise ValueError(f"wait_s must be a number of seconds in [0, 10], got {wait_s!r}")
        self.fn = fn
        self.wait_s = float(wait_s)
        self.calls = 0  # calls received
        self.runs = 0  # times fn ran
        self._handle: Optional[asyncio.TimerHandle] = None
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


def verdict_html(outcome: Optional[str], headline: str, detail: str = "") -> str:
    """The verdict box: a coloured bar and label for the outcome, a sentence, optional detail."""
    color = viz.outcome_color(outcome)
    label = viz.OUTCOME_LABELS.get(outcome or "", "no outcome")
    body = (f'<div style="border-left:6px solid {color};padding:6px 10px;margin:4px 0;'
            f'line-height:1.4">'
            f'<div style="font-weight:700;color:{color};letter-spacing:.02em">{html.escape(label.upper())}</div>'
            f'<div class="kvlab-verdict">{html.escape(headline)}</div>')
    if detail:
        body += (f'<pre style="font-size:11px;white-space:pre-wrap;word-break:normal;'
                 f'overflow-wrap:normal;margin:6px 0 0 0">{html.escape(detail)}</pre>')
    return body + "</div>"


class Panel:
    """Controls, a compute function, figure functions and a verdict, wired together (module
    docstring). Attributes: ``controls`` (name -> ipywidget), ``figures`` (name ->
    go.FigureWidget), ``verdict`` (an ipywidgets.HTML), ``model`` (the last computed model),
    ``error`` (the last compute error, or None), ``updates`` (refreshes done), ``widget`` (the
    whole panel as one ipywidgets box)."""

    def __init__(self, controls: Mapping[str, W.ValueWidget], compute: Callable[[Dict[str, Any]], Any],
                 figures: Callable[[Any], Mapping[str, Any]],
                 verdict: Callable[[Any], Tuple[Optional[str], str]], *, title: str = "",
                 wait_s: float = DEFAULT_WAIT_S, figure_width: int = 640,
                 verdict_width: str = "320px"):
        if not controls:
            raise ValueError("controls must name at least one widget")
        self.controls: Dict[str, W.ValueWidget] = dict(controls)
        self._compute, self._figures, self._verdict = compute, figures, verdict
        self.figure_width = figure_width
        self.title = title
        self.error: Optional[BaseException] = None
        self.updates = 0
        self.outcome: Optional[str] = None
        self.model = compute(self.values)
        self.figures: Dict[str, go.FigureWidget] = {
            name: go.FigureWidget(fig) for name, fig in self._render(self.model).items()}
        self.outcome, text = verdict(self.model)
        self.verdict = W.HTML(value=text, layout=W.Layout(width=verdict_width))
        self._debouncer = Debouncer(self.refresh, wait_s)
        self._holding = False
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        header = [W.HTML(f"<h3 style='margin:4px 0'>{html.escape(title)}</h3>")] if title else []
        control_rows = [W.HBox(list(self.controls.values())[i:i + 2])
                        for i in range(0, len(self.controls), 2)]
        self.widget = W.VBox([*header, *control_rows,
                              W.HBox([W.VBox(list(self.figures.values())), self.verdict])])

    # -- state ------------------------------------------------------------------------------
    @property
    def values(self) -> Dict[str, Any]:
        """The controls' current values, by name."""
        return {name: control.value for name, control in self.controls.items()}

    @property
    def debouncer(self) -> Debouncer:
        return self._debouncer

    def _render(self, model) -> Dict[str, Any]:
        figs = dict(self._figures(model))
        for fig in figs.values():
            if isinstance(fig, dict):
                fig.setdefault("layout", {})["width"] = self.figure_width
            else:
                fig.layout.width = self.figure_width
        return figs

    def _on_change(self, change) -> None:
        if not self._holding:
            self._debouncer()

    def refresh(self) -> None:
        """Recompute the model from the controls and update the figures and the verdict in
        place. A compute error is shown in the verdict; the figures keep their last state."""
        self.updates += 1
        try:
            model = self._compute(self.values)
            figs = self._render(model)
        except Exception as exc:  # shown to the reader, not raised into the widget callback
            self.error = exc
            self.outcome = None
            self.verdict.value = verdict_html(None, f"cannot compute: {type(exc).__name__}: {exc}")
            return
        self.error = None
        self.model = model
        for name, fig in figs.items():
            viz.update_figure(self.figures[name], fig)
        self.outcome, self.verdict.value = self._verdict(model)

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

    def set(self, **values) -> "Panel":
        """Set controls by name and recompute once, at once (also inside a running kernel)."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; controls are {sorted(self.controls)}")
        with self.hold():
            for name, value in values.items():
                self.controls[name].value = value
        return self

    def flush(self) -> bool:
        """Apply a pending (debounced) update now."""
        return self._debouncer.flush()

    # -- display ----------------------------------------------------------------------------
    @property
    def verdict_text(self) -> str:
        """The verdict's headline as plain text."""
        match = re.search(r'class="kvlab-verdict">(.*?)</div>', self.verdict.value, re.S)
        return html.unescape(match.group(1)) if match else _plain(self.verdict.value)

    def static_bundle(self) -> dict:
        """The panel without a widget frontend: verdict and figures as HTML, the first figure
        as plotly JSON, the verdict as plain text."""
        figs = [go.Figure(f) for f in self.figures.values()]
        parts = [f"<h3>{html.escape(self.title)}</h3>"] if self.title else []
        parts.append("<p><code>" + html.escape(", ".join(f"{k}={v!r}" for k, v in self.values.items()))
                     + "</code></p>")
        parts.append(self.verdict.value)
        parts += [viz.figure_html(f) for f in figs]
        bundle = {"text/html": "\n".join(parts), "text/plain": f"{self.title}: {self.verdict_text}"}
        if figs:
            bundle["application/vnd.plotly.v1+json"] = figs[0].to_plotly_json()
        return bundle

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.static_bundle()
        view = self.widget._repr_mimebundle_() or {}
        view.pop("text/plain", None)
        bundle.update(view)
        return bundle


# --- notebook 02: the 4 MiB repro ----------------------------------------------------------------

#: Pool slider range, MiB: 2**-6 (16 KiB, less than a page at 32 tokens) to 2**10 (1 GiB); it
#: grows to include a value passed to repro_panel.
POOL_MIB_RANGE = (2.0 ** -6, 2.0 ** 10)
#: Context slider range, tokens.
CONTEXT_RANGE = (32, 131072)
TOKENS_PER_BLOCK_CHOICES = (8, 16, 32, 64, 128)


def context_choices(extra=()) -> list:
    """Context lengths for the log-feel slider: 2**k and 1.5 * 2**k from 32 to 131072."""
    lo, hi = CONTEXT_RANGE
    values = {v for k in range(5, 18) for v in (2 ** k, 3 * 2 ** (k - 1)) if lo <= v <= hi}
    values.update(int(v) for v in extra)
    return sorted(values)


@dataclass(frozen=True)
class ReproModel:
    """What the repro panel shows: the inputs, and the result or why there is none."""

    pool_mib: float
    context: int
    tokens_per_block: int
    policy: str
    result: Optional[ReproResult]
    no_pool: Optional[str]  # why there is no pool (quota below one page), else None

    @property
    def outcome(self) -> Optional[str]:
        return self.result.outcome if self.result else None


def repro_model(values: Mapping[str, Any]) -> ReproModel:
    """Run the repro for the panel's values. The configured max_seq_len is the context, as in
    the seed (both 8192). A pool below one page gives a model with ``no_pool`` set."""
    pool_mib, context = float(values["pool_mib"]), int(values["context"])
    tpb, policy = int(values["tokens_per_block"]), values["policy"]
    reason = no_pool_reason(pool_mib, tpb)
    result = None if reason else run_repro(pool_mib, context, policy, tpb, max_seq_len=context)
    return ReproModel(pool_mib, context, tpb, policy, result, reason)


def repro_figures(model: ReproModel) -> Dict[str, dict]:
    """The page map and the index-row figure (as kvlab.viz specs) of a repro model, a no-pool
    model included."""
    if model.result is not None:
        return {"pool": viz.repro_page_map_spec(model.result),
                "row": viz.repro_index_row_spec(model.result)}
    needed = seed_geometry(model.tokens_per_block).blocks_for_tokens(model.context)
    return {"pool": viz.page_map_spec(0, needed, None, tokens_per_block=model.tokens_per_block,
                                      title=f"No pool: {model.pool_mib:g} MiB holds no page"),
            "row": viz.index_row_spec(0, needed, 0, None, tokens_per_block=model.tokens_per_block,
                                      policy=model.policy,
                                      title="No pool, so no manager and no page-index row")}


def repro_verdict(model: ReproModel) -> Tuple[Optional[str], str]:
    """(outcome, HTML) for the verdict box."""
    if model.result is None:
        return None, verdict_html(None, model.no_pool or "no result")
    return model.outcome, verdict_html(model.outcome, model.result.verdict, model.result.explain())


def repro_panel(pool_mib: float = 4.0, context: int = 8192, tokens_per_block: int = 32,
                policy: str = "clamped", *, wait_s: float = DEFAULT_WAIT_S) -> Panel:
    """Notebook 02's live panel: pool size (MiB, log slider), context length, tokens per block
    and the page-index width policy -> the pool page map, the index row and the verdict."""
    check_repro_parameters(pool_mib, context, tokens_per_block, policy)
    exponent = math.log2(pool_mib)  # the range grows to include the value given
    pool = W.FloatLogSlider(value=float(pool_mib), base=2, min=min(-6, math.floor(exponent)),
                            max=max(10, math.ceil(exponent)),
                            step=0.5, description="pool (MiB)", readout_format=".4g",
                            continuous_update=True, style={"description_width": "90px"},
                            layout=W.Layout(width="420px"))
    ctx = W.SelectionSlider(options=context_choices([context]), value=int(context),
                            description="context", continuous_update=True,
                            style={"description_width": "90px"}, layout=W.Layout(width="420px"))
    tpb = W.Dropdown(options=sorted(set(TOKENS_PER_BLOCK_CHOICES) | {int(tokens_per_block)}),
                     value=int(tokens_per_block), description="tokens/block",
                     style={"description_width": "90px"}, layout=W.Layout(width="200px"))
    pol = W.ToggleButtons(options=[(name, name) for name in WIDTH_POLICIES], value=policy,
                          description="row width", tooltips=list(WIDTH_POLICIES.values()),
                          style={"description_width": "90px", "button_width": "100px"})
    return Panel({"pool_mib": pool, "context": ctx, "tokens_per_block": tpb, "policy": pol},
                 repro_model, repro_figures, repro_verdict,
                 title="Issue #21470 on one GPU: one resize against a tiny pool", wait_s=wait_s)


__all__ = ["Debouncer", "Panel", "ReproModel", "repro_figures", "repro_model", "repro_panel",
           "repro_verdict", "verdict_html", "context_choices"]
