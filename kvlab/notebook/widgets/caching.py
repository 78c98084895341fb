"""Notebook 04 §8b's panel: a slice of Mooncake's conversations on one engine as it ships (engine,
caching on or off, pool, slice) -> each request's prompt tokens found cached and its time to
first token beside the same engine with caching the other way, and a verdict with the numbers:
what caching turned from "not yet" into "now", and what it left "never"."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import ipywidgets as W

from kvlab.analysis.reuse import ReuseCeiling, reuse_ceiling
from kvlab.analysis.shipped import (
    SHIPPED_ENGINES,
    SLICE_POOL_PAGES,
    CachingEffect,
    ShippedRun,
    caching_effect,
    caching_rows,
    conversation_slice,
    shipped_runs,
    slice_engine,
)
from kvlab.core.checks import check_bools, check_choice, check_float
from kvlab.core.request import Request
from kvlab.core.words import counted
from kvlab.notebook import viz
from kvlab.notebook.panel import DEFAULT_WAIT_S, Panel, verdict_html
from kvlab.notebook.widgets.controls import control, labelled
from kvlab.run.workload import mooncake_trace

#: The pools the panel offers, in 32-token pages (the notebook's two among them).
CACHING_PANEL_POOLS = tuple(sorted({1_200, 1_600, 2_000, 3_000, 6_000, *SLICE_POOL_PAGES.values()}))
#: The slices it offers: the first N conversations of at least three turns.
CACHING_PANEL_SLICES = (6, 12, 24)


@lru_cache(maxsize=4)
def _slice(conversations: int, minutes: float) -> tuple[Request, ...]:
    """The slice's requests (read once a slice): the panel's runs never change them."""
    trace = mooncake_trace("conversation", minutes=minutes)
    return tuple(conversation_slice(trace, conversations))


@dataclass(frozen=True)
class CachingModel:
    """One engine's run of a slice with caching as chosen (``run``) and the other way
    (``other``), the slice's ceiling and what caching changed."""

    run: ShippedRun
    other: ShippedRun
    pages: int
    conversations: int
    ceiling: ReuseCeiling
    effect: CachingEffect

    @property
    def rows(self) -> dict[bool, dict]:
        """caching_rows of both runs, by caching on or off."""
        runs = {(r.engine, r.caching): r for r in (self.run, self.other)}
        return {row["caching"]: row for row in caching_rows(runs, self.ceiling)}


def caching_model(values: Mapping[str, Any], *, minutes: float = 10.0) -> CachingModel:
    """The slice of ``conversations`` conversations (Mooncake's first ``minutes``) on
    ``engine`` as shipped, pool ``pages``, caching on and off."""
    engine = check_choice("engine", values["engine"], SHIPPED_ENGINES)
    caching = values["caching"]
    check_bools(caching=caching)
    pages, conversations = int(values["pages"]), int(values["conversations"])
    requests = _slice(conversations, minutes)
    runs = shipped_runs(requests, slice_engine(pages), [engine], (caching, not caching))
    return CachingModel(
        runs[engine, caching],
        runs[engine, not caching],
        pages,
        conversations,
        reuse_ceiling(requests),
        caching_effect(runs, engine),
    )


def caching_figures(model: CachingModel) -> dict[str, dict]:
    """The requests of the run, beside the run with caching the other way."""
    run = model.run
    pool = f"{model.pages:,}-page pool ({model.pages * 32:,} tokens)"
    return {
        "requests": viz.caching_requests_spec(
            run,
            model.other,
            title=f"{run.engine}, caching {'on' if run.caching else 'off'}: "
            f"{model.conversations} conversations",
            subtitle=f"{run.label}; {pool}",
        )
    }


def caching_verdict(model: CachingModel) -> tuple[str | None, str]:
    """(outcome, HTML): hits, first tokens, waits and rejections, against the other setting."""
    rows, run, effect = model.rows, model.run, model.effect
    on, off = rows[True], rows[False]
    mine, theirs = rows[run.caching], rows[not run.caching]
    never = effect.never_on if run.caching else effect.never_off
    outcome = "reject" if never else "ok"
    now = len(effect.now)
    headline = (
        f"{run.label}. {mine['finished']:,} finished, {mine['rejected']:,} rejected; "
        f"{on['reused_tokens']:,} prompt tokens from the cache with caching on "
        f"({on['reused_share']:.1%} of all, {on['of_ceiling']:.1%} of what a cache that "
        f"never forgets would serve). Mean time to first token {mine['mean_ttft_steps']:,.1f} "
        f"steps here, {theirs['mean_ttft_steps']:,.1f} with caching "
        f"{'off' if run.caching else 'on'}. Caching turned {counted(now, 'request')} from "
        f'"not yet" into "now" and left {counted(len(never), "request")} "never".'
    )
    detail = "\n".join(
        [
            f"waited for room: {on['waited']:,} with caching on, {off['waited']:,} off",
            f"preemptions: {on['preemptions']:,} on, {off['preemptions']:,} off",
            f"requests that found a cached prefix: {on['hit_requests']:,} of "
            f"{len(run.result.requests):,} (every prompt starts with the same block)",
        ]
        + ([f"waited only with caching on: {', '.join(effect.later)}"] if effect.later else [])
        + ([f"never (rejected either way): {', '.join(never)}"] if never else [])
    )
    return outcome, verdict_html(outcome, headline, detail, label=viz.OUTCOME_LABELS[outcome])


def caching_panel(
    engine: str = "vLLM",
    caching: bool = True,
    pages: int = SLICE_POOL_PAGES["tight"],
    conversations: int = 12,
    *,
    minutes: float = 10.0,
    wait_s: float = DEFAULT_WAIT_S,
) -> Panel:
    """Notebook 04 §8b's panel: engine, caching on or off, pool and slice -> the slice's
    requests (cached and computed prompt tokens, time to first token against the other
    setting) and a verdict."""
    check_choice("engine", engine, SHIPPED_ENGINES)
    check_bools(caching=caching)
    for name, value, offered in (
        ("pages", pages, CACHING_PANEL_POOLS),
        ("conversations", conversations, CACHING_PANEL_SLICES),
    ):
        if isinstance(value, bool) or value not in offered:
            raise ValueError(f"{name} must be one of {list(offered)}, got {value!r}")
    check_float("minutes", minutes, low=1.0, high=60.0)
    controls = {
        "engine": control(
            W.ToggleButtons,
            "engine",
            width=None,
            button_width="110px",
            options=list(SHIPPED_ENGINES),
            value=engine,
        ),
        "caching": control(
            W.ToggleButtons,
            "caching",
            width=None,
            button_width="70px",
            options=[("on", True), ("off", False)],
            value=caching,
        ),
        "pages": control(
            W.SelectionSlider,
            "pool (pages)",
            options=labelled(CACHING_PANEL_POOLS),
            value=pages,
            continuous_update=False,
        ),
        "conversations": control(
            W.Dropdown,
            "slice",
            width="260px",
            options=[(f"{n} conversations", n) for n in CACHING_PANEL_SLICES],
            value=conversations,
        ),
    }
    return Panel(
        controls,
        lambda values: caching_model(values, minutes=minutes),
        caching_figures,
        caching_verdict,
        title="Caching on and off: Mooncake's conversations on one engine as it ships",
        wait_s=wait_s,
    )
