"""Live panels for the notebooks: controls -> compute -> FigureWidgets updated in place.

One pattern for every notebook (:class:`Panel`)::

    panel = Panel(
        controls={"pool_mib": FloatLogSlider(...), ...},   # ipywidgets with a .value
        compute=lambda values: model,                      # values: {name: control.value}
        figures=lambda model: {"map": spec, ...},          # kvlab.notebook.viz *_spec (or go.Figure)
        verdict=lambda model: ("ok", "<b>html</b>"),       # (outcome or None, HTML)
        title="...")
    panel                                # display it (last expression of a cell)
    panel.set(pool_mib=32)               # set several controls, recompute once

A change of any control recomputes the model and patches each FigureWidget in place with
``kvlab.notebook.viz.update_figure`` inside ``batch_update`` (the widgets are built once, never rebuilt:
each figure function returns the same traces whatever the model). Changes are coalesced by a
:class:`Debouncer`. A model that cannot be computed (``compute`` raises) leaves the figures as
they were and says why in the verdict instead of printing a traceback.

Displayed where no widget frontend runs (papermill, nbconvert), a panel still shows: its display
bundle carries, next to the widget view, a static copy of the figures (plotly's JSON mime type
and an HTML copy) and the verdict, and a frontend that cannot show the widget falls back to them.

:func:`repro_panel` is notebook 02's panel: the 4 MiB repro of issue #21470 with sliders.
:func:`admission_panel` is notebook 04's: one long request beside small ones, under each policy.
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

from kvlab.notebook import viz
from kvlab.core.mamba import MAMBA_SSM_DTYPES
from kvlab.core.memory import GIB, MIB
from kvlab.core.page_index import WIDTH_POLICIES
from kvlab.analysis.presets import seed_geometry
from kvlab.analysis.repro import ReproResult, check_repro_parameters, no_pool_reason, run_repro

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


def check_control_value(name: str, control: W.ValueWidget, value) -> None:
    """ValueError naming ``name`` and the accepted values or range when ``control`` (a selection
    or a slider) does not offer ``value``."""
    options = getattr(control, "options", None)
    if options is not None:  # SelectionSlider, Dropdown, ToggleButtons: (label, value) pairs
        choices = [o[1] if isinstance(o, tuple) else o for o in options]
        if value not in choices or isinstance(value, bool) != isinstance(choices[0], bool):
            shown = (repr(choices) if len(choices) <= 8 else
                     f"{len(choices)} values from {choices[0]!r} to {choices[-1]!r}")
            raise ValueError(f"{name} must be one of the control's values ({shown}), got {value!r}")
        return
    if hasattr(control, "min") and hasattr(control, "max"):
        base = getattr(control, "base", None)  # FloatLogSlider: min and max are exponents
        low, high = (base ** control.min, base ** control.max) if base else (control.min, control.max)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")


class Panel:
    """Controls, a compute function, figure functions and a verdict, wired together (module
    docstring). Attributes: ``controls`` (name -> ipywidget), ``figures`` (name ->
    go.FigureWidget), ``verdict`` (an ipywidgets.HTML), ``model`` (the last computed model),
    ``error`` (the last compute error, or None), ``updates`` (refreshes done), ``widget`` (the
    whole panel as one ipywidgets box).

    ``action``: (button label, ``run(model) -> (result, HTML)``) for work too slow to redo on
    every change (a real multi-rank run): a button runs it for the current model and shows the
    HTML under the verdict until a control changes. :meth:`act` presses it from code."""

    def __init__(self, controls: Mapping[str, W.ValueWidget], compute: Callable[[Dict[str, Any]], Any],
                 figures: Callable[[Any], Mapping[str, Any]],
                 verdict: Callable[[Any], Tuple[Optional[str], str]], *, title: str = "",
                 wait_s: float = DEFAULT_WAIT_S, figure_width: int = 640,
                 verdict_width: str = "320px",
                 action: Optional[Tuple[str, Callable[[Any], Tuple[Any, str]]]] = None):
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
        self._action = action
        self.action_result: Any = None
        self.action_output = W.HTML(layout=W.Layout(width=verdict_width))
        side = [self.verdict]
        if action is not None:
            self.action_button = W.Button(description=action[0], layout=W.Layout(width="auto"))
            self.action_button.on_click(lambda _button: self.act())
            side += [self.action_button, self.action_output]
        self._debouncer = Debouncer(self.refresh, wait_s)
        self._holding = False
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        header = [W.HTML(f"<h3 style='margin:4px 0'>{html.escape(title)}</h3>")] if title else []
        control_rows = [W.HBox(list(self.controls.values())[i:i + 2])
                        for i in range(0, len(self.controls), 2)]
        self.widget = W.VBox([*header, *control_rows,
                              W.HBox([W.VBox(list(self.figures.values())), W.VBox(side)])])

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
        self.action_result, self.action_output.value = None, ""  # it described other values
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
        """Set controls by name and recompute once, at once (also inside a running kernel). A
        value the control does not offer is a ValueError naming the control and what it
        offers (a slider would clamp it silently; a selection raises ipywidgets' TraitError,
        which names neither)."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; controls are {sorted(self.controls)}")
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
    """The page map and the index-row figure (as kvlab.notebook.viz specs) of a repro model, a no-pool
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


# --- notebook 04: admission control, live ----------------------------------------------------------

#: Policies the admission panel offers (kvlab.analysis.presets.POLICIES).
ADMISSION_PANEL_POLICIES = ("none/clamped", "none/configured", "capacity", "vllm", "sglang")
#: Pool slider range of the admission panel, as powers of two of MiB: 1/16 MiB (one 64 KiB page
#: of the seed's geometry) to 256 MiB (4096 pages); it grows to include a value passed in.
ADMISSION_POOL_EXPONENTS = (-4, 8)


@dataclass(frozen=True)
class AdmissionModel:
    """What the admission panel shows: the engine, the policy, the run and its outcome."""

    pool_mib: float
    context: int
    policy: str
    engine: Any                  # kvlab.analysis.compare.EngineConfig, or None when the pool holds no page
    result: Any                  # kvlab.SimulationResult, or None
    outcome: Optional[str]
    no_pool: Optional[str]
    phase_verdict: Optional[str]  # the closed-form verdict for the long request alone
    num_small: int


def admission_model(values: Mapping[str, Any], *, num_small: int = 4,
                    stall_limit: int = 1000) -> AdmissionModel:
    """Run one long request of ``context`` tokens beside ``num_small`` small ones (256 + 32
    tokens, every 4 steps) on a pool of ``pool_mib`` MiB under ``policy``, with the real stall
    limit. The configured max_seq_len is the seed's 8192, or the context when that is longer."""
    from kvlab.analysis.compare import EngineConfig, build_scheduler, long_and_small
    from kvlab.analysis.phase import PhaseSetup, phase_verdicts
    from kvlab.analysis.presets import ENGINE_OUTCOMES, TRTLLM_POLICIES, engine_outcome
    from kvlab.run.simulation import simulate

    pool_mib, context, policy = float(values["pool_mib"]), int(values["context"]), values["policy"]
    reason = no_pool_reason(pool_mib, 32)
    if reason:
        return AdmissionModel(pool_mib, context, policy, None, None, None, reason, None, num_small)
    engine = EngineConfig(pool_mib=pool_mib, max_seq_len=max(8192, context), stall_limit=stall_limit)
    requests = long_and_small(context, num_small=num_small)
    result = simulate(build_scheduler(policy, engine), requests, max_steps=50_000)
    phase = None
    if policy in TRTLLM_POLICIES:
        setup = PhaseSetup(max_seq_len=engine.max_seq_len, max_new_tokens=requests[0].max_new_tokens)
        phase = ENGINE_OUTCOMES[phase_verdicts([engine.total_blocks], [context], policy, setup)[0, 0]]
    return AdmissionModel(pool_mib, context, policy, engine, result, engine_outcome(result), None,
                          phase, num_small)


def admission_figures(model: AdmissionModel) -> Dict[str, dict]:
    """The scheduler timeline of the run and the long request's pages against the pool and
    the page-index row (kvlab.notebook.viz specs)."""
    from kvlab.analysis.presets import POLICIES
    from kvlab.run.simulation import SimulationResult
    from kvlab.run.trace import Trace

    if model.result is None:
        empty = SimulationResult({}, {}, None, Trace(), {}, 0, 0)
        needed = seed_geometry().blocks_for_tokens(model.context)
        return {"timeline": viz.scheduler_timeline_spec(empty, title="No pool, so no engine to run"),
                "demand": viz.index_row_spec(0, needed, 0, None, title=f"No pool: {model.no_pool}")}
    engine, result = model.engine, model.result
    manager = engine.manager(POLICIES[model.policy][1])
    needed = engine.geometry.blocks_for_tokens(model.context + 16)
    timeline = viz.scheduler_timeline_spec(
        result, stall_limit=engine.stall_limit, outcome=model.outcome,
        title=f"{model.policy}: {viz.OUTCOME_LABELS[model.outcome]}")
    demand = viz.index_row_spec(
        manager.max_blocks_per_seq, needed, engine.total_blocks, model.outcome,
        policy=POLICIES[model.policy][1],
        title=f"The long request: {needed} pages to complete; pool {engine.total_blocks}, "
              f"row {manager.max_blocks_per_seq}")
    return {"timeline": timeline, "demand": demand}


def admission_verdict(model: AdmissionModel) -> Tuple[Optional[str], str]:
    """(outcome, HTML): the outcome named with the numbers."""
    if model.result is None:
        return None, verdict_html(None, model.no_pool or "no result")
    result, engine = model.result, model.engine
    small = [i for i in result.status if i != "long"]
    done = sum(result.status[i] == "finished" for i in small)
    need = engine.geometry.blocks_for_tokens(model.context + 16)
    where = (f"{model.context} + 16 tokens need {need} pages; the pool has {engine.total_blocks} "
             f"({engine.pool_mib:g} MiB)")
    if model.outcome == "crash":
        headline = (f"Crash at step {result.end_step - 1}: PageIndexTooShort ({result.error}) "
                    f"stops the engine; {done} of {len(small)} small requests finished, the rest "
                    f"are lost. {where}.")
    elif model.outcome == "stall":
        if isinstance(result.error, RuntimeError):
            headline = (f"Stall: refused every pass, the long request starved while {done} of "
                        f"{len(small)} small requests finished, then SchedulerDeadlock after "
                        f"{engine.stall_limit} passes without progress (step {result.end_step - 1}). "
                        f"{where}.")
        else:
            headline = f"Stall: requests still unfinished when the run ended. {where}."
    elif model.outcome == "reject":
        headline = (f"Rejected: {result.reasons.get('long', '').rstrip('.')}. {done} of {len(small)} small "
                    f"requests finished.")
    else:
        headline = (f"OK: all {len(result.status)} requests finished in {result.end_step} steps. "
                    f"{where}.")
    detail = "\n".join(f"{rid}: {result.status[rid]} - {result.reasons[rid][:200]}"
                       for rid in ["long", *small])
    if model.phase_verdict is not None:
        detail = (f"phase diagram (the long request alone): {model.phase_verdict}\n" + detail)
    return model.outcome, verdict_html(model.outcome, headline, detail)


def admission_panel(pool_mib: float = 4.0, context: int = 8192, policy: str = "none/clamped", *,
                    num_small: int = 4, stall_limit: int = 1000,
                    wait_s: float = DEFAULT_WAIT_S) -> Panel:
    """Notebook 04's live panel: pool size (MiB, log slider), context length of the long
    request and the policy -> the scheduler timeline, the long request's pages against the
    pool and the row, and a verdict naming the outcome with the numbers."""
    from kvlab.core.checks import check_choice, check_float, check_int

    check_float("pool_mib", pool_mib, low=0.0, high=1 << 20, low_open=True)
    check_int("context", context, low=1, high=1 << 30)
    check_choice("policy", policy, ADMISSION_PANEL_POLICIES)
    check_int("num_small", num_small, low=0, high=64)
    check_int("stall_limit", stall_limit, low=1, high=100_000)
    exponent = math.log2(pool_mib)
    lo, hi = ADMISSION_POOL_EXPONENTS
    pool = W.FloatLogSlider(value=float(pool_mib), base=2, min=min(lo, math.floor(exponent)),
                            max=max(hi, math.ceil(exponent)), step=0.5, description="pool (MiB)",
                            readout_format=".4g", continuous_update=True,
                            style={"description_width": "90px"}, layout=W.Layout(width="420px"))
    ctx = W.SelectionSlider(options=context_choices([context]), value=int(context),
                            description="context", continuous_update=True,
                            style={"description_width": "90px"}, layout=W.Layout(width="420px"))
    pol = W.ToggleButtons(options=list(ADMISSION_PANEL_POLICIES), value=policy, description="policy",
                          style={"description_width": "90px", "button_width": "120px"})

    def compute(values):
        return admission_model(values, num_small=num_small, stall_limit=stall_limit)

    return Panel({"pool_mib": pool, "context": ctx, "policy": pol}, compute, admission_figures,
                 admission_verdict, title="Not yet or never: one long request beside small ones",
                 wait_s=wait_s)


__all__ = ["Debouncer", "Panel", "check_control_value", "ReproModel", "repro_figures", "repro_model", "repro_panel",
           "repro_verdict", "verdict_html", "context_choices",
           "ADMISSION_PANEL_POLICIES", "AdmissionModel", "admission_figures", "admission_model",
           "admission_panel", "admission_verdict"]


# --- notebook 01: the 16-GPU report, live ------------------------------------------------------------

#: Context lengths the ranks panel offers (tokens): 128 Ki to 1 Mi, the report's 1,000,000 included.
RANKS_CONTEXT_CHOICES = tuple(sorted({2 ** k for k in range(17, 21)} | {3 * 2 ** 17, 3 * 2 ** 18,
                                                                        896_000, 960_000, 1_000_000}))


@dataclass(frozen=True)
class RanksModel:
    """What the ranks panel shows: the inputs, the run's config and its closed-form plan
    (:mod:`kvlab.analysis.rank_plan`); the real run is the panel's action."""

    workspace_gib: float
    context: int
    config: Any  # kvlab.run.distributed.RunConfig
    plan: Any  # kvlab.analysis.rank_plan.RanksPlan

    @property
    def outcome(self) -> str:
        return self.plan.outcome

    @property
    def shown_requests(self) -> Tuple[dict, ...]:
        """request_fit_spec rows: the shortest and longest background requests, then the named
        ones (the long context)."""
        by_size = sorted(self.plan.requests, key=lambda q: q.tokens)
        background = [q for q in by_size if q.request_id.startswith("bg-")]
        named = [q for q in by_size if not q.request_id.startswith("bg-")]
        return tuple(dict(id=q.request_id, tokens=q.tokens, outcome=q.verdict, rank=q.rank)
                     for q in background[:1] + background[-1:] + named)


def ranks_model(values: Mapping[str, Any], *, scenario: str = "issue-21470", ranks: int = 16) -> RanksModel:
    """The scenario's ranks (policy "clamped", the report) with rank 0's MoE workspace and the
    long context from ``values``, planned in closed form (no run: a slider move takes ms)."""
    from kvlab.run.distributed import scenario_config
    from kvlab.analysis.rank_plan import plan_ranks
    from kvlab.run.scenarios import load_scenario

    workspace, context = float(values["workspace_gib"]), int(values["context"])
    config = scenario_config(load_scenario(scenario), ranks, "clamped", workspace_gib=workspace,
                             context_length=context)
    return RanksModel(workspace, context, config, plan_ranks(config))


def ranks_figures(model: RanksModel) -> Dict[str, dict]:
    """The per-rank memory budget and the requests against the pool and the row."""
    r0 = model.plan.ranks[0]
    tpb = model.config.geometry.tokens_per_block
    return {"budget": viz.rank_budget_spec(model.plan.ranks),
            "requests": viz.request_fit_spec(
                model.shown_requests, capacity_tokens=r0.capacity_tokens,
                row_tokens=r0.max_blocks_per_seq * tpb,
                title=f"Requests against every rank's pool ({r0.blocks} blocks) and row "
                      f"({r0.max_blocks_per_seq} entries)")}


def ranks_verdict(model: RanksModel) -> Tuple[Optional[str], str]:
    """(outcome, HTML): does the pool clamp, which requests would crash, how the run will end."""
    plan, r0 = model.plan, model.plan.ranks[0]
    clamp = (f"the pool holds {r0.capacity_tokens:,} tokens after the MIN, so max_seq_len "
             f"{plan.configured_max_seq_len:,} is clamped to {r0.max_seq_len:,}"
             if r0.max_seq_len < plan.configured_max_seq_len else
             f"the pool holds {r0.capacity_tokens:,} tokens: no clamp")
    crash = [f"{q.request_id} (rank {q.rank})" for q in plan.requests if q.verdict == "crash"]
    headline = (f"{len(plan.ranks)} ranks, rank 0's workspace {model.workspace_gib:g} GiB: {clamp}; "
                + (f"{', '.join(crash)} would raise. " if crash else "no request exceeds the row. ")
                + f"Predicted: {plan.ended} - {plan.reason}.")
    return plan.outcome, verdict_html(plan.outcome, headline)


def run_planned_ranks(model: RanksModel) -> Tuple[Any, str]:
    """The ranks panel's action: run the ranks for real (in-process threads, the same RankRunner
    code as the processes) and say whether the run ended as the plan said."""
    from kvlab.run.distributed import run_ranks
    from kvlab.analysis.rank_plan import outcome_of

    result = run_ranks(model.config, in_process=True, progress=False)
    outcome = outcome_of(result)
    agrees = outcome == model.plan.outcome and result.ended == model.plan.ended
    headline = (f"The run ({result.wall_s:.2f} s): {result.ended} - {result.reason}. "
                + ("As predicted." if agrees else f"NOT as predicted ({model.plan.ended}: "
                                                  f"{model.plan.reason})."))
    return result, verdict_html(outcome, headline, result.table())


def ranks_panel(workspace_gib: float = 28.0, context: int = 1_000_000, *, ranks: int = 16,
                scenario: str = "issue-21470", wait_s: float = DEFAULT_WAIT_S) -> Panel:
    """Notebook 01's live panel: rank 0's MoE workspace (GiB; the others add the scenario's
    skew) and the long context's length -> every rank's memory budget after the MIN, the
    requests against the pool and the row, and how the run will end (closed form,
    :mod:`kvlab.analysis.rank_plan`); its button runs the ranks for real and compares."""
    from kvlab.core.checks import check_float, check_int

    check_float("workspace_gib", workspace_gib, low=0.0, high=64.0)
    check_int("context", context, low=1, high=1 << 24)
    check_int("ranks", ranks, low=1, high=128)
    ws = W.FloatSlider(value=float(workspace_gib), min=0.0, max=64.0, step=1.0,
                       description="workspace (GiB)", continuous_update=False,
                       style={"description_width": "110px"}, layout=W.Layout(width="420px"))
    ctx = W.SelectionSlider(options=sorted(set(RANKS_CONTEXT_CHOICES) | {int(context)}),
                            value=int(context), description="context", continuous_update=False,
                            style={"description_width": "110px"}, layout=W.Layout(width="420px"))

    def compute(values):
        return ranks_model(values, scenario=scenario, ranks=ranks)

    return Panel({"workspace_gib": ws, "context": ctx}, compute, ranks_figures, ranks_verdict,
                 title=f"Issue #21470 on {ranks} ranks: when does the pool clamp, who crashes?",
                 wait_s=wait_s, action=(f"Run the {ranks} ranks", run_planned_ranks))


__all__ += ["RANKS_CONTEXT_CHOICES", "RanksModel", "ranks_figures", "ranks_model", "ranks_panel",
            "ranks_verdict", "run_planned_ranks"]


# --- notebook 05: recurrent-state residency (merged; proposals PR #17261, #18985), live ----------



@dataclass(frozen=True)
class MambaModel:
    """What the residency panel shows: Qwen3.5-27B's plan for a quota under merged residency,
    beside PR #17261's clamp and PR #18985's feasible max_batch_size default (proposals)."""

    quota_gib: float
    max_batch_size: int
    ssm_dtype: str
    plan: Any            # kvlab.core.mamba.ResidencyPlan
    split: dict          # kvlab.core.mamba.residency_bytes(plan)

    @property
    def raw_fits(self) -> bool:
        """Merged TensorRT-LLM builds (its floor fits the quota)."""
        return self.split["raw_fits"]

    @property
    def resident(self) -> int:
        """Sequences resident under PR #17261's clamp (0: not even one fits)."""
        return max(self.plan.local_cap, 0)

    @property
    def feasible_max_batch_size(self) -> int:
        """PR #18985: the largest max_batch_size default that fits this quota (0: none)."""
        return self.plan.feasible_max_batch_size()

    @property
    def outcome(self) -> str:
        """Merged TensorRT-LLM's outcome: "ok" (builds) or "crash" (ValueError)."""
        return "ok" if self.raw_fits else "crash"


def mamba_model(values: Mapping[str, Any]) -> MambaModel:
    """Qwen3.5-27B (one rank) for the panel's quota (GiB), max_batch_size and SSM dtype."""
    from kvlab.core.mamba import GIB, qwen_plan, residency_bytes

    quota_gib, batch, dtype = float(values["quota_gib"]), int(values["max_batch_size"]), values["ssm_dtype"]
    plan = qwen_plan(int(quota_gib * GIB), batch, dtype)
    return MambaModel(quota_gib, batch, dtype, plan, residency_bytes(plan))


def mamba_figures(model: MambaModel) -> Dict[str, dict]:
    """The quota split, merged beside PR #17261's clamp (a kvlab.notebook.viz spec)."""
    return {"stack": viz.residency_stack_spec(
        model.split, model.plan.quota_bytes,
        subtitle=f"Qwen3.5-27B, max_batch_size {model.max_batch_size}, {model.ssm_dtype} SSM state, "
                 f"{model.plan.slot_bytes / MIB:.1f} MiB a slot")}


def mamba_verdict(model: MambaModel) -> Tuple[Optional[str], str]:
    """(outcome, HTML): does merged TensorRT-LLM build, and what the two proposals would do
    (PR #17261's clamp: how many sequences stay resident; PR #18985: the largest feasible
    max_batch_size default)."""
    plan, gib = model.plan, GIB
    slots = plan.requested + plan.dummies
    raw = (f"{slots} slots x {plan.slot_bytes / MIB:.1f} MiB + one page = "
           f"{plan.raw_need_bytes / gib:.2f} GiB")
    fits = model.feasible_max_batch_size
    if model.raw_fits:
        headline = (f"Merged builds: {raw} <= quota {model.quota_gib:.2f} GiB; all {plan.requested} "
                    f"sequences resident (merged code has no cap). The proposals change nothing here.")
    elif model.resident >= 1:
        used = (model.resident + plan.dummies) * plan.slot_bytes / gib
        headline = (f"Merged raises: {raw} > quota {model.quota_gib:.2f} GiB (ValueError at "
                    f"construction). Proposal PR #17261 (closed without merging), the clamp: "
                    f"{model.resident} resident (+{plan.dummies} dummy) = {used:.2f} GiB of slots; "
                    f"{model.split['clamped']['pages'] // plan.page_bytes} attention pages; "
                    f"{plan.requested - model.resident} sequences queue. Proposal PR #18985 (open): "
                    f"a max_batch_size default of at most {fits} fits; an explicit "
                    f"{model.max_batch_size} still raises, with a message in GiB.")
    else:
        headline = (f"Merged raises: {raw} > quota {model.quota_gib:.2f} GiB; the clamp (PR #17261) "
                    f"keeps 0: not even one sequence's state fits, so it raises too, and no "
                    f"max_batch_size default fits (PR #18985).")
    detail = (f"slot {plan.slot_bytes:,} B; page {plan.page_bytes:,} B; quota {plan.quota_bytes:,} B; "
              f"merged floor {plan.raw_need_bytes:,} B")
    return model.outcome, verdict_html(model.outcome, headline, detail)


def mamba_panel(quota_gib: float = 24.86, max_batch_size: int = 512, ssm_dtype: str = "bfloat16", *,
                wait_s: float = DEFAULT_WAIT_S) -> Panel:
    """Notebook 05's live panel: the quota (GiB), max_batch_size and the SSM state dtype of
    Qwen3.5-27B -> the quota split under merged residency beside PR #17261's clamp (a proposal),
    and a verdict: merged builds or raises, the clamp's residency, PR #18985's feasible
    max_batch_size default."""
    from kvlab.core.checks import check_choice, check_float, check_int

    check_float("quota_gib", quota_gib, low=0.0, high=1024.0, low_open=True)
    check_int("max_batch_size", max_batch_size, low=1, high=4096)
    check_choice("ssm_dtype", ssm_dtype, MAMBA_SSM_DTYPES)
    quota = W.FloatSlider(value=float(quota_gib), min=min(0.1, float(quota_gib)), max=max(80.0, float(quota_gib)), step=0.01,
                          description="quota (GiB)", readout_format=".2f", continuous_update=True,
                          style={"description_width": "110px"}, layout=W.Layout(width="420px"))
    batch = W.IntSlider(value=int(max_batch_size), min=1, max=max(1024, int(max_batch_size)),
                        description="max_batch_size", continuous_update=True,
                        style={"description_width": "110px"}, layout=W.Layout(width="420px"))
    dtype = W.ToggleButtons(options=list(MAMBA_SSM_DTYPES), value=ssm_dtype, description="SSM dtype",
                            style={"description_width": "110px", "button_width": "90px"})
    return Panel({"quota_gib": quota, "max_batch_size": batch, "ssm_dtype": dtype}, mamba_model,
                 mamba_figures, mamba_verdict,
                 title="Qwen3.5-27B: merged residency, or the proposals (PR #17261, PR #18985)",
                 wait_s=wait_s)


__all__ += ["MambaModel", "mamba_figures", "mamba_model", "mamba_panel",
            "mamba_verdict"]
