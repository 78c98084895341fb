"""Notebook 02's panel: the 4 MiB repro of issue #21470 (pool, context, tokens per block, the
row's width policy) -> the pool's page map, the index row and the verdict."""

from __future__ import annotations

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
from kvlab.notebook.widgets.controls import context_choices, context_slider, control, pool_slider

#: Pool slider range as powers of two of MiB (16 KiB, less than a page, to 1 GiB).
REPRO_POOL_EXPONENTS = (-6, 10)
TOKENS_PER_BLOCK_CHOICES = (8, 16, 32, 64, 128)


@dataclass(frozen=True)
class ReproModel:
    """The panel's inputs, and the repro's result or why there is none (no pool)."""

    pool_mib: float
    context: int
    tokens_per_block: int
    policy: str
    result: ReproResult | None
    no_pool: str | None

    @property
    def outcome(self) -> str | None:
        return self.result.outcome if self.result else None


def repro_model(values: Mapping[str, Any]) -> ReproModel:
    """The repro for the panel's values, max_seq_len = context as in the seed."""
    pool_mib, context = float(values["pool_mib"]), int(values["context"])
    tpb, policy = int(values["tokens_per_block"]), values["policy"]
    reason = no_pool_reason(pool_mib, tpb)
    result = None if reason else run_repro(pool_mib, context, policy, tpb, max_seq_len=context)
    return ReproModel(pool_mib, context, tpb, policy, result, reason)


def repro_figures(model: ReproModel) -> dict[str, dict]:
    """The page map and the index row, a no-pool model's included."""
    if model.result is not None:
        return {
            "pool": viz.repro_page_map_spec(model.result),
            "row": viz.repro_index_row_spec(model.result),
        }
    tpb = model.tokens_per_block
    needed = seed_geometry(tpb).blocks_for_tokens(model.context)
    no_pool = f"No pool: {readout_mib(model.pool_mib)} MiB holds no page"
    return {
        "pool": viz.page_map_spec(0, needed, None, tokens_per_block=tpb, title=no_pool),
        "row": viz.index_row_spec(
            0,
            needed,
            0,
            None,
            tokens_per_block=tpb,
            policy=model.policy,
            title="No pool, so no manager and no page-index row",
            subtitle=f"nothing is checked: the request would need {needed:,} entries of a row "
            "that is never built",
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
    """Notebook 02's panel: pool (MiB, log slider), context, tokens per block and the row's
    width policy -> the pool's page map, the index row and the verdict."""
    check_repro_parameters(pool_mib, context, tokens_per_block, policy)
    controls = {
        "pool_mib": pool_slider(pool_mib, REPRO_POOL_EXPONENTS),
        "context": context_slider(context, context_choices([context])),
        "tokens_per_block": control(
            W.Dropdown,
            "tokens/block",
            options=sorted({*TOKENS_PER_BLOCK_CHOICES, tokens_per_block}),
            value=tokens_per_block,
        ),
        "policy": control(
            W.ToggleButtons,
            "row width",
            width=None,
            button_width="100px",
            options=list(WIDTH_POLICIES),
            value=policy,
            tooltips=list(WIDTH_POLICIES.values()),
        ),
    }
    return Panel(
        controls,
        repro_model,
        repro_figures,
        repro_verdict,
        title="Issue #21470 on one GPU: one resize against a tiny pool",
        wait_s=wait_s,
    )
