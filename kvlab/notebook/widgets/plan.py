"""Notebook 06's panel, preflight: issue #21470's deployment under the reader's hand -> what
each context length meets, every rank's memory, and a verdict."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Mapping
from typing import Any

import ipywidgets as W

from kvlab.analysis.deployment import (
    Deployment,
    DeploymentPlan,
    example_deployments,
    plan_deployment,
)
from kvlab.analysis.deployment_spec import MANAGERS
from kvlab.analysis.gpus import GPUS
from kvlab.analysis.models import load_model, model_names
from kvlab.core.memory import GIB
from kvlab.notebook import viz
from kvlab.notebook.panel import (
    DEFAULT_WAIT_S,
    DETAIL_STYLE,
    Panel,
    check_control_value,
    verdict_html,
)
from kvlab.notebook.viz.plan import V1_REJECT_LABEL, plan_ranks_spec
from kvlab.notebook.widgets.controls import labelled

#: The panel's configured max_seq_len, max_batch_size and rank choices.
PLAN_MAX_SEQ_LENS = tuple(1 << k for k in range(12, 22))
PLAN_BATCH_SIZES = tuple(1 << k for k in range(0, 12))
PLAN_RANKS = (1, 2, 4, 8, 16, 32)


def plan_model(values: Mapping[str, Any], *, base: Deployment | None = None) -> DeploymentPlan:
    """The plan of ``base`` (issue #21470's deployment) with the panel's values; weights of 0
    are derived from the model, and tp = ranks as in the report."""
    base = base or example_deployments()["issue-21470"]
    deployment = dataclasses.replace(
        base,
        model=load_model(values["model"]),
        gpu_gib=GPUS[values["gpu"]].gib,
        weights_gib=values["weights_gib"] or None,
        workspace_gib=values["workspace_gib"],
        max_seq_len=values["max_seq_len"],
        max_batch_size=values["max_batch_size"],
        ranks=values["ranks"],
        tp_size=values["ranks"],
        kv_dtype=None,
        manager=values["manager"],
    )
    return plan_deployment(deployment)


def plan_figures(plan: DeploymentPlan) -> dict[str, dict]:
    return {"ranges": viz.plan_ranges_spec(plan), "ranks": plan_ranks_spec(plan)}


def plan_in_words_html(plan: DeploymentPlan) -> str:
    """``plan.explain()`` under the verdict, a fact a line, wrapped by the browser between
    words (JupyterLab's own ``pre`` breaks anywhere)."""
    return f'<pre style="{DETAIL_STYLE};margin:6px 0 0 0">{html.escape(plan.explain(width=None))}</pre>'


def plan_verdict(plan: DeploymentPlan) -> tuple[str | None, str]:
    """(outcome, HTML): what current code and admission control do with the deployment, and
    the plan in words. No KV pool is a failure labelled "cannot start" (kvlab does not model
    the executor's error then)."""
    now = plan.worst()
    first = plan.first(now) if now in ("crash", "stall") else None
    if not plan.blocks:
        return now, verdict_html(
            now,
            "Cannot start under any policy: no rank can build a KV pool (see the notes below).",
            label="cannot start",
        ) + plan_in_words_html(plan)
    if not plan.starts:
        assert plan.hybrid is not None  # with pools built, only a hybrid's state slots stop it
        headline = (
            f"Current code raises at construction: {plan.hybrid['slots']:,} state slots need "
            f"{plan.hybrid['need_bytes'] / GIB:,.2f} GiB of {plan.hybrid['quota_bytes'] / GIB:,.2f} GiB."
        )
    elif first is not None:
        headline = (
            f"Current code: a context of {first:,} tokens or more "
            + (
                (
                    "raises ValueError and takes every rank down"
                    if plan.deployment.world_size > 1
                    else "raises ValueError and takes the engine down"
                )
                if now == "crash"
                else "stalls the engine"
            )
            + f" (pool {plan.capacity_tokens:,} tokens, "
            f"row {plan.width_current:,} entries)."
        )
    elif plan.manager == "v1":
        headline = (
            f"Current code (V1 manager): nothing crashes; prompts of "
            f"{plan.clamped_max_seq_len:,} tokens or more are rejected, the longest that "
            f"finishes is {plan.longest():,} tokens."
        )
    else:
        headline = (
            f"Current code: safe; the longest context that finishes is {plan.longest():,} tokens."
        )
    if not plan.starts:
        headline += " Admission control does not help: nothing starts."
    elif plan.manager == "v2":
        headline += (
            f" Admission control: {plan.worst('capacity')}, longest "
            f"{plan.longest('capacity'):,} tokens."
        )
    label = V1_REJECT_LABEL if plan.manager == "v1" and now == "reject" else None
    return now, verdict_html(now, headline, label=label) + plan_in_words_html(plan)


def plan_panel(
    model: str = "qwen3-235b-a22b",
    gpu: str = "gb300",
    *,
    manager: str = "v2",
    weights_gib: float = 22.0,
    workspace_gib: float = 28.0,
    max_seq_len: int = 1 << 20,
    max_batch_size: int = 16,
    ranks: int = 16,
    wait_s: float = DEFAULT_WAIT_S,
) -> Panel:
    """Notebook 06's panel: issue #21470's deployment with the model, GPU, KV cache manager,
    weights (0: derived; a new model resets them), workspace, max_seq_len, max_batch_size and
    ranks under the reader's hand."""
    # descriptions whole: the longest, "max_batch_size (sequences)", takes about 187 px
    style, layout = {"description_width": "200px"}, W.Layout(width="500px")
    controls = {  # each slider's description names its unit
        "workspace_gib": W.FloatSlider(min=0, max=64, step=1, description="rank 0 workspace (GiB)"),
        "max_seq_len": W.SelectionSlider(
            options=labelled(PLAN_MAX_SEQ_LENS), description="max_seq_len (tokens)"
        ),
        "model": W.Dropdown(options=list(model_names()), description="model"),
        "manager": W.Dropdown(options=list(MANAGERS), description="KV cache manager"),
        "gpu": W.Dropdown(options=list(GPUS), description="GPU"),
        "weights_gib": W.FloatSlider(min=0, max=400, step=1, description="weights per rank (GiB)"),
        "max_batch_size": W.SelectionSlider(
            options=labelled(PLAN_BATCH_SIZES), description="max_batch_size (sequences)"
        ),
        "ranks": W.SelectionSlider(
            options=list(PLAN_RANKS), description="ranks (GPUs, attention DP)"
        ),
    }
    values = dict(
        workspace_gib=workspace_gib,
        max_seq_len=max_seq_len,
        model=model,
        manager=manager,
        gpu=gpu,
        weights_gib=weights_gib,
        max_batch_size=max_batch_size,
        ranks=ranks,
    )
    for name, control in controls.items():
        check_control_value(name, control, values[name])
        control.value = values[name]
        control.style, control.layout = style, layout
        if hasattr(control, "continuous_update"):
            control.continuous_update = False
    # the weights given belong to a model: another model's are derived (0) until set again
    controls["model"].observe(
        lambda change: setattr(controls["weights_gib"], "value", 0.0), names="value"
    )
    base = example_deployments()["issue-21470"]
    return Panel(
        controls,
        lambda values: plan_model(values, base=base),
        plan_figures,
        plan_verdict,
        title="Your deployment: will it hit issue #21470?",
        wait_s=wait_s,
        verdict_width="360px",
    )  # beside the 640 px figures: 1,000 px in all
