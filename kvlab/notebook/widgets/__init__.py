"""Each notebook's live panel, one module a panel, built on :class:`kvlab.notebook.panel.Panel`
(a model from the controls' values, figures drawn from it, a verdict)."""

# The package re-exports the panels and what the tests read of them.
# ruff: noqa: F401

from kvlab.notebook.widgets.admission import (
    ADMISSION_PANEL_POLICIES,
    admission_model,
    admission_panel,
    admission_verdict,
)
from kvlab.notebook.widgets.caching import (
    CACHING_PANEL_POOLS,
    CACHING_PANEL_SLICES,
    caching_model,
    caching_panel,
    caching_verdict,
)
from kvlab.notebook.widgets.controls import context_choices
from kvlab.notebook.widgets.mamba import MAMBA_QUOTA_STEP_GIB, mamba_panel
from kvlab.notebook.widgets.plan import plan_panel
from kvlab.notebook.widgets.ranks import (
    RANKS_RUN_TABLE_WIDTH,
    ranks_model,
    ranks_panel,
)
from kvlab.notebook.widgets.repro import repro_model, repro_panel
from kvlab.notebook.widgets.step import STEP_ENGINE, step_model, step_panel, step_passes
