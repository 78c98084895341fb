"""Each notebook's live panel, built on :class:`kvlab.notebook.panel.Panel`: a model computed
from the controls' values, the figures drawn from it, and a verdict. One module a panel:

- :func:`repro_panel` (``repro``), notebook 02: the 4 MiB repro of issue #21470 with sliders.
- :func:`step_panel` (``step``), notebook 03: one scheduling pass at a time.
- :func:`admission_panel` (``admission``), notebook 04: one long request beside small ones,
  under each policy.
- :func:`ranks_panel` (``ranks``), notebook 01: the 16 ranks' plan for a workspace and a context.
- :func:`mamba_panel` (``mamba``), notebook 05: Qwen3.5-27B's state slots against a quota.
- :func:`plan_panel` (``plan``), notebook 06: preflight for a deployment.

Reading order: ``controls`` (the slider options the panels share) -> ``repro`` -> ``step`` ->
``admission`` -> ``ranks`` -> ``mamba`` -> ``plan``. Every public name is importable from here.
"""

from kvlab.notebook.widgets.admission import (
    ADMISSION_PANEL_POLICIES,
    ADMISSION_POOL_EXPONENTS,
    AdmissionModel,
    admission_figures,
    admission_model,
    admission_panel,
    admission_verdict,
)
from kvlab.notebook.widgets.controls import CONTEXT_RANGE, context_choices, labelled
from kvlab.notebook.widgets.mamba import (
    MAMBA_QUOTA_CHOICES_GIB,
    MAMBA_QUOTA_STEP_GIB,
    MambaModel,
    mamba_figures,
    mamba_model,
    mamba_panel,
    mamba_verdict,
)
from kvlab.notebook.widgets.plan import (
    PLAN_BATCH_SIZES,
    PLAN_MAX_SEQ_LENS,
    PLAN_RANKS,
    plan_figures,
    plan_model,
    plan_panel,
    plan_verdict,
)
from kvlab.notebook.widgets.ranks import (
    RANKS_CONTEXT_CHOICES,
    RANKS_RUN_TABLE_WIDTH,
    RanksModel,
    ranks_figures,
    ranks_model,
    ranks_panel,
    ranks_run_html,
    ranks_verdict,
    run_planned_ranks,
)
from kvlab.notebook.widgets.repro import (
    POOL_MIB_RANGE,
    TOKENS_PER_BLOCK_CHOICES,
    ReproModel,
    repro_figures,
    repro_model,
    repro_panel,
    repro_verdict,
)
from kvlab.notebook.widgets.step import (
    STEP_ENGINE,
    STEP_MAX_PASSES,
    STEP_WORKLOAD,
    StepModel,
    step_figures,
    step_model,
    step_panel,
    step_passes,
    step_verdict,
)

__all__ = [
    "CONTEXT_RANGE",
    "context_choices",
    "labelled",
    "POOL_MIB_RANGE",
    "TOKENS_PER_BLOCK_CHOICES",
    "ReproModel",
    "repro_figures",
    "repro_model",
    "repro_panel",
    "repro_verdict",
    "STEP_ENGINE",
    "STEP_MAX_PASSES",
    "STEP_WORKLOAD",
    "StepModel",
    "step_figures",
    "step_model",
    "step_panel",
    "step_passes",
    "step_verdict",
    "ADMISSION_PANEL_POLICIES",
    "ADMISSION_POOL_EXPONENTS",
    "AdmissionModel",
    "admission_figures",
    "admission_model",
    "admission_panel",
    "admission_verdict",
    "RANKS_CONTEXT_CHOICES",
    "RANKS_RUN_TABLE_WIDTH",
    "RanksModel",
    "ranks_figures",
    "ranks_model",
    "ranks_panel",
    "ranks_run_html",
    "ranks_verdict",
    "run_planned_ranks",
    "MAMBA_QUOTA_CHOICES_GIB",
    "MAMBA_QUOTA_STEP_GIB",
    "MambaModel",
    "mamba_figures",
    "mamba_model",
    "mamba_panel",
    "mamba_verdict",
    "PLAN_BATCH_SIZES",
    "PLAN_MAX_SEQ_LENS",
    "PLAN_RANKS",
    "plan_figures",
    "plan_model",
    "plan_panel",
    "plan_verdict",
]
