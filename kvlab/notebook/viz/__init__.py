"""Figures: pure functions from kvlab results to plotly figures, one module per kind. Each
comes as ``name_spec`` (a plain dict the panels hand to their views) and ``name_figure`` (a
go.Figure), and returns the same traces whatever its input, so ``Plotly.react`` redraws it in
place."""

# The package re-exports its modules' public names: notebooks use viz.NAME.
# ruff: noqa: F401

from kvlab.notebook.viz.caching import (
    caching_bars_figure,
    caching_bars_spec,
    caching_requests_figure,
    caching_requests_spec,
)
from kvlab.notebook.viz.comparison import (
    phase_diagram_figure,
    phase_diagram_spec,
    policy_bars_figure,
    policy_bars_spec,
    served_over_time_figure,
    served_over_time_spec,
)
from kvlab.notebook.viz.display import figure_html, figure_text, show, static_bundle
from kvlab.notebook.viz.measurements import (
    paged_read_figure,
    paged_read_spec,
    pool_allocation_figure,
    pool_allocation_spec,
    pool_vs_workspace_figure,
    pool_vs_workspace_spec,
    table_copy_figure,
    table_copy_spec,
)
from kvlab.notebook.viz.pages import (
    MAX_PAGE_CELLS,
    PAGE_COLORS,
    PAGE_STATES,
    index_row_figure,
    index_row_spec,
    outcome_map_figure,
    outcome_map_spec,
    page_map_figure,
    page_map_spec,
    page_table_figure,
    page_table_spec,
    repro_index_row,
    repro_index_row_spec,
    repro_page_map,
    repro_page_map_spec,
    table_price_figure,
    table_price_spec,
)
from kvlab.notebook.viz.plan import plan_ranges_figure, plan_ranges_spec
from kvlab.notebook.viz.ranks import (
    BUDGET_PARTS,
    rank_budget_figure,
    rank_budget_spec,
    request_fit_figure,
    request_fit_spec,
)
from kvlab.notebook.viz.residency import (
    PROPOSAL_PARTS,
    RESIDENCY_PARTS,
    residency_proposals_figure,
    residency_proposals_spec,
    residency_stack_figure,
    residency_stack_spec,
    review_findings_figure,
    review_findings_spec,
)
from kvlab.notebook.viz.style import (
    FIGURE_WIDTH,
    NEUTRAL_COLOR,
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    UNRAISED_STALLS,
    outcome_color,
    run_outcome,
)
from kvlab.notebook.viz.timeline import (
    PASS_RESULTS,
    end_place,
    pass_figure,
    pass_spec,
    scheduler_timeline_figure,
    scheduler_timeline_spec,
)
