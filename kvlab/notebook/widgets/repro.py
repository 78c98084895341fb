"""Notebook 02's live panel: the 4 MiB repro of issue #21470 with sliders (pool size, context
length, tokens per block, the page-index width policy) -> the pool page map, the index row and
the verdict."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ipywidgets as W

from kvlab.analysis.presets import seed_geometry
from kvlab.analysis.repro import ReproResult, no_pool_reason, run_repro
from kvlab.core.memory import readout_mib
from kvlab.core.page_index import WIDTH_POLICIES
from kvlab.notebook import viz
from kvlab.notebook.panel import DEFAULT_WAIT_S, Panel, verdict_html
from kvlab.notebook.parameters import check_repro_parameters
from kvlab.notebook.widgets.controls import context_choices, labelled

#: Pool slider range, MiB: 2**-6 (16 KiB, less than a page at 32 tokens) to 2**10 (1 GiB); it
#: grows to include a value passed to repro_panel.
POOL_MIB_RANGE = (2.0**-6, 2.0**10)
TOKENS_PER_BLOCK_CHOICES = (8, 16, 32, 64, 128)


@dataclass(frozen=True)
class ReproModel:
    """What the repro panel shows: the inputs, and the result or why there is none."""

    pool_mib: float
    context: int
    tokens_per_block: int
    policy: str
    result: ReproResult | None
    no_pool: str | None  # why there is no pool (quota below one page), else None

    @property
    def outcome(self) -> str | None:
        return self.result.outcome if self.result else None


def repro_model(values: Mapping[str, Any]) -> ReproModel:
    """Run the repro for the panel's values. The configured max_seq_len is the context, as in
    the seed (both 8192). A pool below one page gives a model with ``no_pool`` set."""
    pool_mib, context = float(values["pool_mib"]), int(values["context"])
    tpb, policy = int(values["tokens_per_block"]), values["policy"]
    reason = no_pool_reason(pool_mib, tpb)
    result = None if reason else run_repro(pool_mib, context, policy, tpb, max_seq_len=context)
    return ReproModel(pool_mib, context, tpb, policy, result, reason)


def repro_figures(model: ReproModel) -> dict[str, dict]:
    """The page map and the index-row figure (as kvlab.notebook.viz specs) of a repro model, a no-pool
    model included."""
    if model.result is not None:
        return {
            "pool": viz.repro_page_map_spec(model.result),
            "row": viz.repro_index_row_spec(model.result),
        }
    needed = seed_geometry(model.tokens_per_block).blocks_for_tokens(model.context)
    return {
        "pool": viz.page_map_spec(
            0,
            needed,
            None,
            tokens_per_block=model.tokens_per_block,
            title=f"No pool: {readout_mib(model.pool_mib)} MiB holds no page",
        ),
        "row": viz.index_row_spec(
            0,
            needed,
            0,
            None,
            tokens_per_block=model.tokens_per_block,
            policy=model.policy,
            title="No pool, so no manager and no page-index row",
            subtitle=f"nothing is checked: the request would need "
            f"{needed:,} entries of a row that is never built",
        ),
    }


def repro_verdict(model: ReproModel) -> tuple[str | None, str]:
    """(outcome, HTML) for the verdict box."""
    if model.result is None:
        return None, verdict_html(None, model.no_pool or "no result")
    return model.outcome, verdict_html(model.outcome, model.result.verdict, model.result.explain())


def repro_panel(
    pool_mib: float = 4.0,
    context: int = 8192,
    tokens_per_block: int = 32,
    policy: str = "clamped",
    *,
    wait_s: float = DEFAULT_WAIT_S,
) -> Panel:
    """Notebook 02's live panel: pool size (MiB, log slider), context length, tokens per block
    and the page-index width policy -> the pool page map, the index row and the verdict."""
    check_repro_parameters(pool_mib, context, tokens_per_block, policy)
    exponent = math.log2(pool_mib)  # the range grows to include the value given
    low, high = (int(math.log2(end)) for end in POOL_MIB_RANGE)
    pool = W.FloatLogSlider(
        value=float(pool_mib),
        base=2,
        min=min(low, math.floor(exponent)),
        max=max(high, math.ceil(exponent)),
        step=0.5,
        description="pool (MiB)",
        readout_format=",.4g",
        continuous_update=True,
        style={"description_width": "110px"},
        layout=W.Layout(width="420px"),
    )
    ctx = W.SelectionSlider(
        options=labelled(context_choices([context])),
        value=int(context),
        description="context (tokens)",
        continuous_update=True,
        style={"description_width": "110px"},
        layout=W.Layout(width="420px"),
    )
    tpb = W.Dropdown(
        options=sorted(set(TOKENS_PER_BLOCK_CHOICES) | {int(tokens_per_block)}),
        value=int(tokens_per_block),
        description="tokens/block",
        style={"description_width": "110px"},
        layout=W.Layout(width="420px"),
    )  # the sliders' width: "row width" heads its own column
    pol = W.ToggleButtons(
        options=[(name, name) for name in WIDTH_POLICIES],
        value=policy,
        description="row width",
        tooltips=list(WIDTH_POLICIES.values()),
        style={"description_width": "110px", "button_width": "100px"},
    )
    return Panel(
        {"pool_mib": pool, "context": ctx, "tokens_per_block": tpb, "policy": pol},
        repro_model,
        repro_figures,
        repro_verdict,
        title="Issue #21470 on one GPU: one resize against a tiny pool",
        wait_s=wait_s,
    )


__all__ = [
    "POOL_MIB_RANGE",
    "TOKENS_PER_BLOCK_CHOICES",
    "ReproModel",
    "repro_figures",
    "repro_model",
    "repro_panel",
    "repro_verdict",
]
