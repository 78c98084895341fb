"""Figures: pure functions from kvlab results to plotly ``go.Figure`` objects.

Nothing here builds a widget or keeps state. Each figure comes twice: ``name_spec(...)`` returns
the figure as a plain dict (``{"data": [...], "layout": {...}}``) and ``name_figure(...)`` the
same as a ``go.Figure``. A panel (``kvlab.notebook.panel``) hands a spec to its figure's
``PlotView`` on every change (plain dicts skip plotly's validation of a whole new figure, which
costs more than the rest of an update). Every figure function returns the same traces (count,
order and types) whatever its input, so ``Plotly.react`` redraws a figure in place.

Reading order: ``style`` (one colour and label per outcome, the shared layout) -> ``pages`` (one
resize against the pool and the page-index table) -> ``timeline`` (a run over time, one pass)
-> ``comparison`` (policies side by side: phase diagram, bars, served over time) -> ``ranks``
(multi-rank memory) -> ``residency`` (recurrent-state slots and the review's findings) ->
``measurements`` (timings on a device) -> ``plan`` (preflight) -> ``display`` (a figure shown
without a widget frontend, and its text). Every public name is importable from here.
"""

from kvlab.notebook.viz.comparison import (
    POLICY_DASHES,
    POLICY_METRICS,
    phase_diagram_figure,
    phase_diagram_spec,
    policy_bars_figure,
    policy_bars_spec,
    served_over_time_figure,
    served_over_time_spec,
)
from kvlab.notebook.viz.display import figure_html, figure_text, figure_title, show, static_bundle
from kvlab.notebook.viz.measurements import (
    READ_COLORS,
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
    PAGE_STATE_LABELS,
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
from kvlab.notebook.viz.plan import PLAN_POLICY_NAMES, plan_ranges_figure, plan_ranges_spec
from kvlab.notebook.viz.ranks import (
    BUDGET_PARTS,
    rank_budget_figure,
    rank_budget_spec,
    request_fit_figure,
    request_fit_spec,
)
from kvlab.notebook.viz.residency import (
    BUG_FIX_COLORS,
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
    AXIS_STYLE,
    FIGURE_WIDTH,
    FONT,
    NEUTRAL_COLOR,
    OUTCOME_COLORS,
    OUTCOME_LABELS,
    POOL_COLOR,
    ROW_COLOR,
    SUBTITLE_CHARS,
    UNRAISED_STALLS,
    WIDTH_LINE_COLORS,
    outcome_color,
    run_outcome,
)
from kvlab.notebook.viz.timeline import (
    PASS_RESULTS,
    TIMELINE_COLORS,
    TIMELINE_SERIES,
    end_place,
    pass_figure,
    pass_spec,
    scheduler_timeline_figure,
    scheduler_timeline_spec,
)

__all__ = [
    # style
    "AXIS_STYLE",
    "FIGURE_WIDTH",
    "FONT",
    "NEUTRAL_COLOR",
    "OUTCOME_COLORS",
    "OUTCOME_LABELS",
    "POOL_COLOR",
    "ROW_COLOR",
    "SUBTITLE_CHARS",
    "UNRAISED_STALLS",
    "WIDTH_LINE_COLORS",
    "outcome_color",
    "run_outcome",
    # pages
    "MAX_PAGE_CELLS",
    "PAGE_COLORS",
    "PAGE_STATE_LABELS",
    "PAGE_STATES",
    "index_row_figure",
    "index_row_spec",
    "outcome_map_figure",
    "outcome_map_spec",
    "page_map_figure",
    "page_map_spec",
    "page_table_figure",
    "page_table_spec",
    "repro_index_row",
    "repro_index_row_spec",
    "repro_page_map",
    "repro_page_map_spec",
    "table_price_figure",
    "table_price_spec",
    # timeline
    "PASS_RESULTS",
    "TIMELINE_COLORS",
    "TIMELINE_SERIES",
    "end_place",
    "pass_figure",
    "pass_spec",
    "scheduler_timeline_figure",
    "scheduler_timeline_spec",
    # comparison
    "POLICY_DASHES",
    "POLICY_METRICS",
    "phase_diagram_figure",
    "phase_diagram_spec",
    "policy_bars_figure",
    "policy_bars_spec",
    "served_over_time_figure",
    "served_over_time_spec",
    # ranks
    "BUDGET_PARTS",
    "rank_budget_figure",
    "rank_budget_spec",
    "request_fit_figure",
    "request_fit_spec",
    # residency
    "BUG_FIX_COLORS",
    "PROPOSAL_PARTS",
    "RESIDENCY_PARTS",
    "residency_proposals_figure",
    "residency_proposals_spec",
    "residency_stack_figure",
    "residency_stack_spec",
    "review_findings_figure",
    "review_findings_spec",
    # measurements
    "READ_COLORS",
    "paged_read_figure",
    "paged_read_spec",
    "pool_allocation_figure",
    "pool_allocation_spec",
    "pool_vs_workspace_figure",
    "pool_vs_workspace_spec",
    "table_copy_figure",
    "table_copy_spec",
    # plan
    "PLAN_POLICY_NAMES",
    "plan_ranges_figure",
    "plan_ranges_spec",
    # display
    "figure_html",
    "figure_text",
    "figure_title",
    "show",
    "static_bundle",
]
