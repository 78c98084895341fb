"""Notebook 01's panel: the 16 ranks' plan for rank 0's MoE workspace and a long context, with a
button that runs the ranks for real and compares."""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ipywidgets as W

from kvlab.analysis.rank_plan import RanksPlan, outcome_of, plan_ranks
from kvlab.core.checks import check_float, check_instance, check_int
from kvlab.notebook import viz
from kvlab.notebook.panel import DEFAULT_WAIT_S, Panel, verdict_html
from kvlab.notebook.tables import cell_text, table
from kvlab.notebook.widgets.controls import context_slider, control
from kvlab.run.distributed import run_ranks
from kvlab.run.rank_config import RunConfig, scenario_config
from kvlab.run.scenarios import load_scenario

#: Context lengths the panel offers (tokens): 128 Ki to 1 Mi, the report's 1,000,000 included.
RANKS_CONTEXT_CHOICES = tuple(
    sorted({2**k for k in range(17, 21)} | {3 * 2**17, 3 * 2**18, 896_000, 960_000, 1_000_000})
)
#: The widest the run's table grows (px): under the panel's figures and verdict.
RANKS_RUN_TABLE_WIDTH = 960


@dataclass(frozen=True)
class RanksModel:
    """The inputs, the run's config and its closed-form plan; the real run is the action."""

    workspace_gib: float
    context: int
    config: RunConfig
    plan: RanksPlan

    @property
    def shown_requests(self) -> tuple[dict, ...]:
        """request_fit_spec rows: the shortest and longest background requests, then the rest."""
        by_size = sorted(self.plan.requests, key=lambda q: q.tokens)
        background = [q for q in by_size if q.request_id.startswith("bg-")]
        named = [q for q in by_size if not q.request_id.startswith("bg-")]
        return tuple(
            dict(id=q.request_id, tokens=q.tokens, outcome=q.verdict, rank=q.rank)
            for q in background[:1] + background[-1:] + named
        )


def ranks_model(
    values: Mapping[str, Any], *, scenario: Any = "issue-21470", ranks: int = 16
) -> RanksModel:
    """The scenario's ranks (policy "clamped") with ``values``' workspace and context, planned
    in closed form; ``scenario``: a name or path for load_scenario, or what it loaded."""
    workspace, context = float(values["workspace_gib"]), int(values["context"])
    loaded = load_scenario(scenario) if isinstance(scenario, (str, os.PathLike)) else scenario
    config = scenario_config(
        loaded, ranks, "none/clamped", workspace_gib=workspace, context_length=context
    )
    return RanksModel(workspace, context, config, plan_ranks(config))


def ranks_figures(model: RanksModel) -> dict[str, dict]:
    """The per-rank memory budget and the requests against the pool and the row."""
    r0, shown = model.plan.ranks[0], model.shown_requests
    crashes = sum(q["outcome"] == "crash" for q in shown)
    return {
        "budget": viz.rank_budget_spec(model.plan.ranks),
        "requests": viz.request_fit_spec(
            shown,
            capacity_tokens=r0.capacity_tokens,
            row_tokens=r0.max_blocks_per_seq * model.config.geometry.tokens_per_block,
            title=f"Requests against each rank's pool ({r0.blocks:,} pages) and row",
            subtitle=f"{len(shown)} of {len(model.plan.requests)} requests: the shortest and "
            "longest background ones and the long context; "
            + (f"{crashes} beyond the row: ValueError" if crashes else "none beyond the row"),
        ),
    }


def ranks_verdict(model: RanksModel) -> tuple[str | None, str]:
    """(outcome, HTML): does the pool clamp, which requests would crash, how the run will end."""
    plan, r0 = model.plan, model.plan.ranks[0]
    clamp = (
        f"the pool holds {r0.capacity_tokens:,} tokens after the MIN, so max_seq_len "
        f"{plan.configured_max_seq_len:,} is clamped to {r0.max_seq_len:,}"
        if r0.max_seq_len < plan.configured_max_seq_len
        else f"the pool holds {r0.capacity_tokens:,} tokens: no clamp"
    )
    crash = [f"{q.request_id} (rank {q.rank})" for q in plan.requests if q.verdict == "crash"]
    headline = (
        f"{len(plan.ranks)} ranks, rank 0's workspace {model.workspace_gib:g} GiB: {clamp}; "
        + (f"{', '.join(crash)} would raise. " if crash else "no request exceeds the row. ")
        + f"Predicted: {plan.ended} - {plan.reason}."
    )
    return plan.outcome, verdict_html(plan.outcome, headline)


#: The run's columns the button's table keeps: how each rank ended (its memory is the figures').
RANKS_RUN_COLUMNS = ("requests", "outcome")


def ranks_run_html(model: RanksModel, result) -> str:
    """A ranks run of ``model.config`` against the plan: whether it ended as predicted, what
    every rank shares said once, then how the ranks ended, one row per run of consecutive ranks
    that ended alike ("1-15": the notebook's own rank table is not repeated)."""
    check_instance("model", model, RanksModel)
    outcome = outcome_of(result)
    agrees = outcome == model.plan.outcome and result.ended == model.plan.ended
    headline = f"The run ({result.wall_s:.2f} s): {result.ended} - {result.reason}. " + (
        "As predicted."
        if agrees
        else f"NOT as predicted ({model.plan.ended}: {model.plan.reason})."
    )
    rows = result.rank_rows()
    shared = [c for c in rows[0] if c != "rank" and len({r[c] for r in rows}) == 1]
    said_once = ""
    if len(rows) > 1 and shared:
        every = "; ".join(f"{c} {cell_text(rows[0][c])}" for c in shared)
        said_once = f"<p>Every rank: {html.escape(every)}</p>"
    groups: list[tuple[list[int], dict]] = []
    for row in rows:
        ended = {c: row[c] for c in RANKS_RUN_COLUMNS}
        if groups and groups[-1][1] == ended:
            groups[-1][0].append(row["rank"])
        else:
            groups.append(([row["rank"]], ended))
    grouped = [
        {"ranks": f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]}", **ended} for r, ended in groups
    ]
    width = f'style="max-width:{RANKS_RUN_TABLE_WIDTH}px"'
    shown = table(grouped, index="ranks").set_table_attributes(width).to_html()
    return verdict_html(outcome, headline) + said_once + shown


def run_planned_ranks(model: RanksModel) -> tuple[Any, str]:
    """The panel's action: run the ranks for real (in-process threads) against the plan."""
    result = run_ranks(model.config, in_process=True, progress=False)
    return result, ranks_run_html(model, result)


def ranks_panel(
    workspace_gib: float = 28.0,
    context: int = 1_000_000,
    *,
    ranks: int = 16,
    scenario: str = "issue-21470",
    wait_s: float = DEFAULT_WAIT_S,
) -> Panel:
    """Notebook 01's panel: rank 0's MoE workspace (the others add the scenario's skew) and the
    long context -> every rank's memory after the MIN, the requests against the pool and the
    row, how the run will end; its button runs the ranks for real and compares."""
    check_float("workspace_gib", workspace_gib, low=0.0, high=64.0)
    check_int("context", context, low=1, high=1 << 24)
    check_int("ranks", ranks, low=1, high=128)
    controls = {
        "workspace_gib": control(
            W.FloatSlider,
            "workspace (GiB)",
            value=workspace_gib,
            min=0.0,
            max=64.0,
            step=1.0,
            continuous_update=False,
        ),
        "context": context_slider(
            context, sorted({*RANKS_CONTEXT_CHOICES, context}), continuous=False
        ),
    }
    loaded = load_scenario(scenario)  # once: parsing the YAML took most of a slider move
    return Panel(
        controls,
        lambda values: ranks_model(values, scenario=loaded, ranks=ranks),
        ranks_figures,
        ranks_verdict,
        title=f"Issue #21470 on {ranks} ranks: when does the pool clamp, who crashes?",
        wait_s=wait_s,
        action=("Run the ranks", run_planned_ranks),
    )
