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
    Panel,
    check_control_value,
    detail_html,
    verdict_html,
)
from kvlab.notebook.viz.plan import V1_REJECT_LABEL, plan_ranks_spec
from kvlab.notebook.widgets.controls import control, labelled

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


def plan_verdict(plan: DeploymentPlan) -> tuple[str | None, str]:
    """(outcome, HTML): what current code and admission control do with the deployment, and
    the plan in words (``plan.explain()``, wrapped by the browser). No KV pool is a failure
    labelled "cannot start" (kvlab does not model the executor's error then)."""
    now, label = plan.worst(), None
    in_words = detail_html(html.escape(plan.explain(width=None)))
    if not plan.blocks:
        headline = (
            "Cannot start under any policy: no rank can build a KV pool (see the notes below)."
        )
        return now, verdict_html(now, headline, label="cannot start") + in_words
    if not plan.starts:
        assert plan.hybrid is not None  # with pools built, only a hybrid's state slots stop it
        headline = (
            f"Current code raises at construction: {plan.hybrid['slots']:,} state slots need "
            f"{plan.hybrid['need_bytes'] / GIB:,.2f} GiB of {plan.hybrid['quota_bytes'] / GIB:,.2f} GiB."
        )
    elif now in ("crash", "stall"):
        down = "every rank" if plan.deployment.world_size > 1 else "the engine"
        meets = (
            f"raises ValueError and takes {down} down" if now == "crash" else "stalls the engine"
        )
        headline = (
            f"Current code: a context of {plan.first(now):,} tokens or more {meets} (pool "
            f"{plan.capacity_tokens:,} tokens, row {plan.width_current:,} entries)."
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
    if plan.manager == "v1" and now == "reject":
        label = V1_REJECT_LABEL
    return now, verdict_html(now, headline, label=label) + in_words


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
    look = dict(label="200px", width="500px")
    controls = {  # each slider's description names its unit
        "workspace_gib": control(W.FloatSlider, "rank 0 workspace (GiB)", max=64, step=1, **look),
        "max_seq_len": control(
            W.SelectionSlider, "max_seq_len (tokens)", options=labelled(PLAN_MAX_SEQ_LENS), **look
        ),
        "model": control(W.Dropdown, "model", options=list(model_names()), **look),
        "manager": control(W.Dropdown, "KV cache manager", options=list(MANAGERS), **look),
        "gpu": control(W.Dropdown, "GPU", options=list(GPUS), **look),
        "weights_gib": control(W.FloatSlider, "weights per rank (GiB)", max=400, step=1, **look),
        "max_batch_size": control(
            W.SelectionSlider,
            "max_batch_size (sequences)",
            options=labelled(PLAN_BATCH_SIZES),
            **look,
        ),
        "ranks": control(
            W.SelectionSlider, "ranks (GPUs, attention DP)", options=list(PLAN_RANKS), **look
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
    for name, made in controls.items():
        check_control_value(name, made, values[name])
        made.value = values[name]
        if hasattr(made, "continuous_update"):
            made.continuous_update = False
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
