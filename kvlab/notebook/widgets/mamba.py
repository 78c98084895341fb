"""Notebook 05's panel: Qwen3.5-27B's recurrent-state slots against a quota, under merged
residency beside the proposals (PR #17261's clamp, PR #18985's feasible max_batch_size
default)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ipywidgets as W

from kvlab.analysis.mamba_residency import (
    MAMBA_SSM_DTYPES,
    PR_QUOTA_BYTES,
    qwen_plan,
    residency_bytes,
)
from kvlab.core.mamba import ResidencyPlan
from kvlab.core.memory import GIB, MIB
from kvlab.core.words import counted
from kvlab.notebook import viz
from kvlab.notebook.panel import DEFAULT_WAIT_S, Panel, verdict_html
from kvlab.notebook.parameters import check_mamba_parameters
from kvlab.notebook.tables import gib_pair
from kvlab.notebook.widgets.controls import control

#: The quota slider's step, GiB: 161 positions up to 80 GiB, a key press each.
MAMBA_QUOTA_STEP_GIB = 0.5
#: The quota slider's positions, GiB: every step up to 80 (an H100), 0.1 (less than one slot)
#: and the PR's 24.86; a panel built for another quota adds it.
MAMBA_QUOTA_CHOICES_GIB = tuple(
    sorted(
        {0.1, round(PR_QUOTA_BYTES / GIB, 2)} | {MAMBA_QUOTA_STEP_GIB * k for k in range(1, 161)}
    )
)


@dataclass(frozen=True)
class MambaModel:
    """Qwen3.5-27B's plan for a quota under merged residency, beside the proposals."""

    quota_gib: float
    max_batch_size: int
    ssm_dtype: str
    plan: ResidencyPlan
    split: dict  # kvlab.analysis.mamba_residency.residency_bytes(plan)

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
    quota_gib, batch = float(values["quota_gib"]), int(values["max_batch_size"])
    plan = qwen_plan(int(quota_gib * GIB), batch, values["ssm_dtype"])
    return MambaModel(quota_gib, batch, values["ssm_dtype"], plan, residency_bytes(plan))


def mamba_figures(model: MambaModel) -> dict[str, dict]:
    """The quota split, merged beside PR #17261's clamp."""
    return {
        "stack": viz.residency_stack_spec(
            model.split,
            model.plan.quota_bytes,
            subtitle=f"Qwen3.5-27B, max_batch_size {model.max_batch_size:,}, {model.ssm_dtype} "
            f"SSM state, {model.plan.slot_bytes / MIB:.1f} MiB a slot",
        )
    }


def mamba_verdict(model: MambaModel) -> tuple[str | None, str]:
    """(outcome, HTML): does merged TensorRT-LLM build, how many sequences PR #17261's clamp
    keeps resident, and PR #18985's largest feasible max_batch_size default."""
    plan = model.plan
    slots = plan.requested + plan.dummies
    need_gib, quota_gib = gib_pair(plan.raw_need_bytes, plan.quota_bytes)
    raw = f"{slots:,} slots x {plan.slot_bytes / MIB:.1f} MiB + one page = {need_gib} GiB"
    if model.raw_fits:
        resident = "resident" if plan.requested == 1 else "all resident"
        headline = (
            f"Merged builds: {raw} <= quota {quota_gib} GiB; {counted(plan.requested, 'sequence')}, "
            f"{resident} (merged code has no cap). The proposals change nothing here."
        )
    elif model.resident >= 1:
        used = (model.resident + plan.dummies) * plan.slot_bytes / GIB
        pages = model.split["clamped"]["pages"] // plan.page_bytes
        queued = counted(plan.requested - model.resident, "sequence")
        headline = (
            f"Merged raises: {raw} > quota {quota_gib} GiB (ValueError at construction). "
            f"Proposal PR #17261 (closed without merging), the clamp: {model.resident:,} "
            f"resident (+{plan.dummies:,} dummy) = {used:.2f} GiB of slots; "
            f"{counted(pages, 'attention page')}; the queue holds {queued}. Proposal PR #18985 "
            f"(open): a max_batch_size default of at most {model.feasible_max_batch_size:,} fits; "
            f"an explicit {model.max_batch_size:,} still raises, with a message in GiB."
        )
    else:
        one = ((1 + plan.dummies) * plan.slot_bytes + plan.page_bytes) / MIB
        headline = (
            f"Merged raises: {raw} > quota {quota_gib} GiB; the clamp (PR #17261) keeps 0: one "
            f"sequence's slot with {counted(plan.dummies, 'dummy slot')} and one page needs "
            f"{one:,.1f} MiB, more than the quota, so it raises too, and no max_batch_size "
            "default fits (PR #18985)."
        )
    detail = (
        f"slot {plan.slot_bytes:,} B; page {plan.page_bytes:,} B; quota {plan.quota_bytes:,} B; "
        f"merged floor {plan.raw_need_bytes:,} B"
    )
    return model.outcome, verdict_html(model.outcome, headline, detail)


def mamba_panel(
    quota_gib: float = 24.86,
    max_batch_size: int = 512,
    ssm_dtype: str = "bfloat16",
    *,
    wait_s: float = DEFAULT_WAIT_S,
) -> Panel:
    """Notebook 05's panel: the quota (GiB), max_batch_size and the SSM state dtype of
    Qwen3.5-27B -> the quota split under merged residency beside PR #17261's clamp, and what
    merged code and the two proposals do."""
    check_mamba_parameters(quota_gib=quota_gib, max_batch_size=max_batch_size, ssm_dtype=ssm_dtype)
    # descriptions whole: "max_batch_size (sequences)" takes about 187 px
    look = dict(label="200px", width="510px")
    quotas = sorted({*MAMBA_QUOTA_CHOICES_GIB, float(quota_gib)})
    controls = {
        "quota_gib": control(
            W.SelectionSlider,
            "quota (GiB)",
            options=[(f"{v:g}", v) for v in quotas],
            value=float(quota_gib),
            **look,
        ),
        "max_batch_size": control(
            W.IntSlider,
            "max_batch_size (sequences)",
            value=max_batch_size,
            min=1,
            max=max(1024, max_batch_size),
            readout_format=",d",
            **look,
        ),
        "ssm_dtype": control(
            W.ToggleButtons,
            "SSM dtype",
            label="200px",
            width=None,
            button_width="90px",
            options=list(MAMBA_SSM_DTYPES),
            value=ssm_dtype,
        ),
    }
    return Panel(
        controls,
        mamba_model,
        mamba_figures,
        mamba_verdict,
        title="Qwen3.5-27B: merged residency, or the proposals (PR #17261, PR #18985)",
        wait_s=wait_s,
    )
