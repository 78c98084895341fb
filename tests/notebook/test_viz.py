"""kvlab.notebook.viz: the figures carry the seed's numbers, keep their trace structure, update in place."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kvlab import PageIndexTable
from kvlab.analysis.deployment import example_deployments, plan_deployment
from kvlab.analysis.repro import page_index_price, run_repro, sweep_repro
from kvlab.core.page_index import max_blocks_per_seq
from kvlab.notebook import viz

FREE, HELD, WANTED, MISSING = range(4)  # viz.PAGE_STATES order


def cells(fig) -> list:
    """The page map's cell codes, row-major, without the padding of the last row."""
    return [v for row in fig.data[0].z for v in row if v is not None]


def test_outcome_colors_are_distinct_hex_colours_for_every_outcome():
    engine = {"crash", "stall", "refused", "reject", "ok"}
    assert (
        set(viz.OUTCOME_COLORS)
        == engine | set(viz.UNRAISED_STALLS)
        == engine | {"livelock", "unfinished"}
    )
    assert len({viz.OUTCOME_COLORS[o] for o in engine}) == 5
    # the stalls nothing raised keep the stall's colour; their labels say which they are
    assert (
        viz.OUTCOME_COLORS["livelock"]
        == viz.OUTCOME_COLORS["unfinished"]
        == viz.OUTCOME_COLORS["stall"]
    )
    assert all(re.fullmatch(r"#[0-9A-F]{6}", c) for c in viz.OUTCOME_COLORS.values())
    assert set(viz.OUTCOME_LABELS) == set(viz.OUTCOME_COLORS)
    assert "stall" not in viz.OUTCOME_LABELS["livelock"] + viz.OUTCOME_LABELS["unfinished"]
    assert viz.outcome_color(None) == viz.outcome_color("unknown") == viz.NEUTRAL_COLOR


def test_the_on_screen_toolbar_stands_clear_of_the_title():
    """plotly's modebar, across the top by default, covered the titles of the panels' figures."""
    assert viz.style.base_layout("a title", "a subtitle")["modebar"] == {"orientation": "v"}
    budget = viz.rank_budget_spec(ranks_plan_of_the_report().ranks)
    assert budget["layout"]["modebar"]["orientation"] == "v"


def ranks_plan_of_the_report():
    from kvlab.analysis.rank_plan import plan_ranks
    from kvlab.run.rank_config import scenario_config
    from kvlab.run.scenarios import load_scenario

    return plan_ranks(scenario_config(load_scenario("issue-21470"), 16, "none/clamped"))


def test_request_fit_shows_a_request_past_its_limits_and_labels_what_coincides():
    """Notebook 01 section 8: 1,000,064 tokens against a pool of 958,784 and a row of 958,848
    (on a log axis all three sat at "1M"): a linear axis shows the bar 4 % above the lines, and
    the labels say by how much it overshoots each and which line is which."""
    requests = [
        dict(id="bg-000", tokens=2064, outcome="ok"),
        dict(id="long-ctx", tokens=1_000_064, outcome="crash"),
    ]
    spec = viz.request_fit_spec(requests, capacity_tokens=958_784, row_tokens=958_848)
    bar = spec["data"][0]
    assert bar["text"] == [
        "2,064",
        "1,000,064 tokens<br>41,280 past the pool<br>41,216 past the row",
    ]
    assert (
        bar["textposition"] == ["auto", "inside"] and bar["textangle"] == 0
    )  # level, inside if it fits
    notes = {a["text"]: a["yanchor"] for a in spec["layout"]["annotations"]}
    # the row, the larger, above its line; the pool below its own: apart though the lines coincide
    assert notes == {"row spans 958,848 tokens": "bottom", "pool holds 958,784 tokens": "top"}
    axis = spec["layout"]["yaxis"]
    assert (
        axis.get("type") in (None, "linear")
        and axis["range"][0] == 0
        and axis["range"][1] > 1_000_064
    )


def test_the_plan_bands_name_a_band_too_thin_to_see_and_lines_that_coincide():
    """Notebook 06 section 1: current code stalls on 958,722-958,848 (127 tokens of a
    1,048,576-token axis) between the pool (958,784) and the row's end (958,848)."""
    spec = viz.plan_ranges_spec(plan_deployment(example_deployments()["issue-21470"]))
    notes = [a["text"] for a in spec["layout"]["annotations"]]
    assert "stall (no progress): 958,722-958,848 (127 tokens)" in notes
    arrow = next(a for a in spec["layout"]["annotations"] if a["text"].startswith("stall"))
    assert (
        arrow["showarrow"]
        and arrow["y"] == "current code"
        and arrow["x"] == (958_722 + 958_848) / 2
    )
    assert "pool 958,784 and row 958,848: 64 tokens apart" in notes
    # issue 45: the band's note sat above its bar, over the note above the plot; it is level
    # with its bar now (drawn at 560 px and looked at)
    assert arrow["ay"] == 0


def test_the_plan_legend_says_clamped_only_when_the_plan_does():
    """Notebook 06 section 3: llama-3.1-70b's KV manager gets 131,073 (131,072 plus the overlap
    scheduler's token), which the pool does not clamp; the plan says "not clamped"."""
    import dataclasses

    from kvlab.analysis.deployment import Deployment
    from kvlab.analysis.gpus import GPUS
    from kvlab.analysis.models import load_model

    llama = plan_deployment(
        Deployment(
            model=load_model("llama-3.1-70b"),
            gpu_gib=GPUS["h100-80gb"].gib,
            tp_size=4,
            max_seq_len=131072,
            max_batch_size=256,
            chunked_prefill=True,
            manager="auto",
        )
    )
    assert llama.manager == "v1" and not llama.clamped and "not clamped" in llama.explain()
    names = [t["name"] for t in viz.plan_ranges_spec(llama)["data"]]
    assert "KV manager's max_seq_len (not clamped) 131,073 tokens (beyond the axis)" in names
    assert not any("clamped to" in n for n in names)
    v1 = plan_deployment(dataclasses.replace(example_deployments()["issue-21470"], manager="auto"))
    assert v1.manager == "v1" and v1.clamped
    names = [t["name"] for t in viz.plan_ranges_spec(v1)["data"]]
    assert f"max_seq_len clamped to {v1.clamped_max_seq_len:,} tokens" in names
    notes = [a["text"] for a in viz.plan_ranges_spec(v1)["layout"]["annotations"]]
    assert notes == ["pool and max_seq_len both 958,752 tokens"]  # V1: no granules


def test_a_livelock_is_not_labelled_a_stall():
    """Notebook 03's chunked run with no tier below the GPU preempts the long request again and
    again and never raises: engine_outcome files it under "stall", its figures say livelock."""
    from kvlab.analysis.compare import EngineConfig, build_scheduler, long_and_small
    from kvlab.analysis.presets import engine_outcome
    from kvlab.run.simulation import simulate

    engine = EngineConfig(chunked_prefill=True, max_num_tokens=256, host_cache_size=0)  # 03 §9
    run = simulate(
        build_scheduler("none/configured", engine), long_and_small(8192, num_small=6), max_steps=300
    )
    assert run.error is None and engine_outcome(run) == "stall" and run.summary()["recomputes"] > 0
    assert viz.run_outcome(run) == "livelock"
    title = viz.scheduler_timeline_spec(run)["layout"]["title"]["text"]
    assert "livelock" in title and "stall (no progress)" not in title
    line = viz.served_over_time_spec({"none/configured": run}, 0.05)["data"][1]
    assert line["name"] == f"none/configured: {viz.OUTCOME_LABELS['livelock']}"
    assert line["line"]["color"] == viz.OUTCOME_COLORS["livelock"]


def test_a_stall_that_raised_stays_a_stall_and_a_step_limit_is_unfinished():
    from kvlab.analysis.compare import EngineConfig, build_scheduler, long_and_small
    from kvlab.run.simulation import simulate

    deadlock = simulate(
        build_scheduler("none/configured", EngineConfig(stall_limit=20)),
        long_and_small(8192, num_small=0),
        max_steps=100,
    )
    assert viz.run_outcome(deadlock) == "stall"  # SchedulerDeadlock: the detector fired
    cut = simulate(
        build_scheduler("none/configured", EngineConfig(stall_limit=20)),
        long_and_small(8192, num_small=0),
        max_steps=5,
    )
    assert cut.error is None and viz.run_outcome(cut) == "unfinished"


def test_the_review_findings_say_what_each_bug_did():
    """Finding 1's ranks build and raise nothing: they disagree; no label calls that a stall."""
    from kvlab.case_studies import run_review_findings

    runs = run_review_findings()
    assert [r.what for r in runs] == [
        "ranks disagree",
        "ok",
        "crash (StateSlotsExhausted)",
        "ok",
        "stall (SchedulerDeadlock)",
        "ok",
    ]
    spec = viz.review_findings_spec(runs)
    first = [t for t in spec["data"] if t["xaxis"] == "x" and t["name"] == "bug"][0]
    assert all(h.endswith("ranks disagree") and "stall" not in h for h in first["hovertext"])
    headings = [a["text"] for a in spec["layout"]["annotations"]]
    assert [h.replace("<br>", " ") for h in headings] == [
        "<b>finding 1</b> bug: ranks disagree",
        "<b>finding 2</b> bug: crash (StateSlotsExhausted)",
        "<b>finding 3</b> bug: stall (SchedulerDeadlock)",
    ]
    # each panel as wide as its metrics need, with room between panels for the next one's labels
    domains = [spec["layout"][f"xaxis{s}"]["domain"] for s in ("", "2", "3")]
    widths = [hi - lo for lo, hi in domains]
    assert widths[0] == pytest.approx(2 * widths[1]) and widths[1] == pytest.approx(widths[2])
    assert all(b[0] - a[1] >= 0.1 for a, b in zip(domains, domains[1:]))
    # the metrics' names level and broken between words, not rotated into each other
    assert spec["layout"]["xaxis"]["tickangle"] == 0
    assert list(spec["layout"]["xaxis"]["ticktext"]) == [
        "rank 0<br>cap",
        "rank 1<br>cap",
        "rank 0<br>admitted",
        "rank 1<br>admitted",
    ]


def test_page_map_of_the_seed_shows_64_pool_pages_and_the_256_the_request_needs():
    fig = viz.repro_page_map(run_repro(4, 8192))
    z = cells(fig)
    assert len(z) == 256  # max(pool pages, pages needed)
    assert z.count(WANTED) == 64 and z.count(MISSING) == 192  # nothing allocated: it crashed
    assert z.count(HELD) == 0 and z.count(FREE) == 0
    title = viz.figure_text(fig)
    assert "64 pages of 32 tokens" in title and "needs 256" in title
    assert "192 pages beyond the pool" in title and "one cell = one page" in title
    # the pages beyond the pool take the crash colour, in the colour scale and the legend
    assert fig.data[0].colorscale[-1][1] == viz.OUTCOME_COLORS["crash"]
    assert fig.data[4].marker.color == viz.OUTCOME_COLORS["crash"]
    assert "page 0 (tokens 0-31)" in fig.data[0].text[0][0]
    # a line of 32 cells is labelled by its first page, not called a "row" (notebook 02's row is
    # the page-index row), and no axis title outgrows a map of two lines
    assert (
        fig.layout.yaxis.ticktext[:2] == ("page 0", "page 32")
        and fig.layout.yaxis.title.text is None
    )


def test_page_map_of_an_allocated_request_holds_its_pages():
    result = run_repro(32, 8192)  # 512 pages, 256 needed
    assert result.outcome == "ok"
    z = cells(viz.repro_page_map(result))
    assert len(z) == 512 and z.count(HELD) == 256 and z.count(FREE) == 256


def test_page_map_of_a_refusal_uses_the_refused_colour():
    fig = viz.repro_page_map(run_repro(4, 8192, "configured"))
    assert fig.data[0].colorscale[-1][1] == viz.OUTCOME_COLORS["refused"]
    assert cells(fig).count(MISSING) == 192


def test_page_map_groups_pages_beyond_max_cells():
    fig = viz.page_map_figure(65536, 16384, "ok", tokens_per_block=8)
    z = cells(fig)
    assert len(z) <= viz.MAX_PAGE_CELLS
    assert "one cell = 32 pages" in viz.figure_text(fig)
    assert z.count(HELD) == 16384 // 32


def test_page_map_without_a_pool_is_all_missing_in_neutral_grey():
    fig = viz.page_map_figure(0, 256, None)
    assert set(cells(fig)) == {MISSING}
    assert fig.data[0].colorscale[-1][1] == viz.NEUTRAL_COLOR


def test_index_row_shows_68_available_and_256_needed_for_the_seed():
    fig = viz.repro_index_row(run_repro(4, 8192))
    bar = fig.data[0]
    assert list(bar.x) == [256, 64, 68]
    assert bar.marker.color[0] == viz.OUTCOME_COLORS["crash"]
    assert "256 entries needed, 68 available" in viz.figure_text(fig)
    assert {s.x0 for s in fig.layout.shapes} == {68, 64}  # where the row and the pool end
    assert any("row ends: 68" == a.text for a in fig.layout.annotations)
    assert "ValueError" in viz.figure_text(fig)  # the subtitle names the failure


def test_index_row_of_the_one_line_fix_shows_260_and_a_refusal():
    fig = viz.repro_index_row(run_repro(4, 8192, "configured"))
    assert list(fig.data[0].x) == [256, 64, 260]
    assert fig.data[0].marker.color[0] == viz.OUTCOME_COLORS["refused"]
    assert "[configured]" in fig.data[0].y[2]


@pytest.mark.parametrize(
    "fn,inputs",
    [
        (
            viz.page_map_spec,
            [(64, 256, "crash"), (512, 256, "ok"), (0, 256, None), (65536, 16384, "ok")],
        ),
        (viz.index_row_spec, [(68, 256, 64, "crash"), (260, 256, 64, "refused"), (0, 1, 0, None)]),
    ],
)
def test_figures_keep_their_trace_structure_whatever_the_input(fn, inputs):
    shapes = {tuple(t["type"] for t in fn(*args)["data"]) for args in inputs}
    assert len(shapes) == 1


def test_page_index_price_measures_real_tables():
    rows = page_index_price([2048, 8192], [1, 512])
    assert [(r["width"], r["max_batch_size"], r["nbytes"]) for r in rows] == [
        (68, 1, 1088),
        (68, 512, 279_072),
        (260, 1, 4160),
        (260, 512, 1_067_040),
    ]
    for r in rows:
        assert r["nbytes"] == PageIndexTable(r["max_batch_size"], r["width"]).nbytes
        assert r["width"] == max_blocks_per_seq(r["max_seq_len"], 32)


def test_table_price_figure_has_a_line_per_width_with_the_bytes_and_the_ratio():
    rows = page_index_price([2048, 8192, 131072], [1, 8, 64, 512])
    fig = viz.table_price_figure(rows, labels={68: "clamped", 260: "configured"}, compare=(68, 260))
    assert len(fig.data) == 3
    by_width = {int(t.name.split()[0].replace(",", "")): t for t in fig.data}
    assert set(by_width) == {68, 260, 4100}
    assert list(by_width[260].y) == [r["nbytes"] for r in rows if r["width"] == 260]
    assert "clamped" in by_width[68].name and "configured" in by_width[260].name
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"
    assert "x3.82" in viz.figure_text(fig)  # 260 / 68
    assert {a.text for a in fig.layout.annotations} == {
        "68 entries: 272.5 KiB",
        "260 entries: 1.0 MiB",
    }
    # the values sit right of their lines' last points, past every curve, not on top of one
    for note in fig.layout.annotations:
        assert (
            note.xanchor == "left"
            and not note.showarrow
            and note.x == pytest.approx(max(fig.layout.xaxis.range) - 0.1)
        )
    assert fig.layout.legend.yref == "container"  # under the plot, not over the curves
    assert "1,067,040 B" in by_width[260].hovertext[-1]


def test_outcome_map_counts_outcomes_with_three_fixed_traces():
    sweep = sweep_repro([1, 4, 64], [1024, 8192, 65536], "clamped")
    fig = viz.outcome_map_figure(sweep)
    assert [t.marker.color for t in fig.data] == [
        viz.OUTCOME_COLORS[o] for o in ("crash", "refused", "ok")
    ]
    total = sum(len(t.x) for t in fig.data)
    assert total == len(sweep) == 9
    crash = fig.data[0]
    assert (4.0, 8192) in set(zip(crash.x, crash.y))  # the seed's cell crashes
    empty = viz.outcome_map_figure([])
    assert len(empty.data) == 3


def test_static_bundle_needs_no_frontend():
    fig = viz.repro_page_map(run_repro(4, 8192))
    bundle = viz.static_bundle(fig)
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["type"] == "heatmap"
    assert "cdn.plot.ly" in bundle["text/html"] and "Plotly.newPlot" in bundle["text/html"]
    assert bundle["text/plain"] == "<Figure: KV pool: 64 pages of 32 tokens; the request needs 256>"
    assert "text/html" not in viz.static_bundle(fig, html=False)


# --- the scheduler timeline, the phase diagram, the policy bars (notebooks 03 and 04) -----------

from kvlab.analysis.compare import EngineConfig, long_and_small, outcome_rows, run_policies  # noqa: E402
from kvlab.analysis.phase import phase_diagram  # noqa: E402
from kvlab.analysis.presets import ENGINE_OUTCOMES, OUTCOMES  # noqa: E402
from kvlab.run.workload import LogNormal, poisson_workload  # noqa: E402


@pytest.fixture(scope="module")
def seed_runs():
    return run_policies(long_and_small(8192, num_small=3), engine=EngineConfig(stall_limit=40))


def test_scheduler_timeline_shows_the_stall_counter_climbing_to_the_limit(seed_runs):
    result = seed_runs["none/configured"]
    fig = viz.scheduler_timeline_figure(result, stall_limit=40)
    assert [t.name for t in fig.data] == [
        "running",
        "waiting in the scheduler",
        "suspended",
        "used pages",
        "free pages",
        "stalled passes",
        "queued in the executor",
    ]
    stalled = fig.data[5]
    assert list(stalled.y) == result.trace.column("stalled_passes") and stalled.y[-1] == 40
    assert stalled.line.color == viz.OUTCOME_COLORS["stall"]
    assert [u + f for u, f in zip(fig.data[3].y, fig.data[4].y)] == [64] * len(result.trace)
    assert any(s.y0 == 40 and s.yref == "y3" for s in fig.layout.shapes)  # the stall limit, dashed
    last = result.trace[-1].step  # passes count from 1, steps from 0: the annotation says both
    assert any(
        a.text == f"SchedulerDeadlock in pass {len(result.trace)} (step {last})"
        for a in fig.layout.annotations
    )
    assert "stall" in viz.figure_text(
        fig
    ) and "at the end: 3 finished, 1 waiting in the scheduler" in viz.figure_text(fig)


def test_the_timeline_subtitle_counts_what_its_waiting_line_counts(seed_runs):
    """A result's status says "waiting" for requests still queued in the executor or not yet
    arrived; the waiting line counts only the scheduler's: the subtitle tells them apart."""
    from kvlab.analysis.compare import EngineConfig, build_scheduler, long_and_small
    from kvlab.notebook.viz.timeline import end_counts
    from kvlab.run.simulation import simulate

    livelock = simulate(
        build_scheduler(
            "none/configured",
            EngineConfig(chunked_prefill=True, max_num_tokens=256, host_cache_size=0),
        ),
        long_and_small(8192, num_small=6),
        max_steps=200,
    )  # notebook 03 section 9
    for result in (livelock, seed_runs["none/clamped"]):
        counts, last = end_counts(result), result.trace[-1]
        assert counts["waiting in the scheduler"] == last.waiting
        assert counts["queued in the executor"] == last.queued
        assert counts["running"] == last.running
        assert sum(counts.values()) == len(result.status)
    livelock_spec = viz.scheduler_timeline_spec(livelock)
    assert (
        "at the end: 1 running, 3 waiting in the scheduler, 3 queued in the executor"
        in livelock_spec["layout"]["title"]["text"]
    )
    # the queue the subtitle counts has its line, and its legend entry, when it holds anything
    queue = livelock_spec["data"][6]
    assert queue["name"] == "queued in the executor" and queue["y"] == livelock.trace.column(
        "queued"
    )
    assert queue["visible"] and queue["showlegend"]
    assert not viz.scheduler_timeline_spec(seed_runs["none/configured"])["data"][6]["showlegend"]
    clamped = viz.scheduler_timeline_spec(seed_runs["none/clamped"])["layout"]["title"]["text"]
    assert "at the end: 2 waiting in the scheduler, 2 not yet arrived; stopped by" in clamped


def test_the_timeline_names_suspended_requests_only_when_a_run_suspended_any(seed_runs):
    """No host tier, or none needed: no "suspended" line or legend entry for nothing."""
    quiet = viz.scheduler_timeline_spec(seed_runs["none/configured"])["data"][2]
    assert max(seed_runs["none/configured"].trace.column("suspended")) == 0
    assert quiet["name"] == "suspended" and not quiet["showlegend"] and not quiet["visible"]
    workload = poisson_workload(
        60,
        rate=0.05,
        prompt_len=LogNormal(256, 1.0, 16, 8192),
        max_new_tokens=LogNormal(64, 0.8, 1, 512),
        seed=0,
    )
    busy = run_policies(workload, ["capacity"], EngineConfig(), max_steps=100_000)["capacity"]
    assert max(busy.trace.column("suspended")) > 0
    shown = viz.scheduler_timeline_spec(busy)["data"][2]
    assert shown["showlegend"] and shown["visible"]


def test_policies_that_draw_the_same_curve_share_one_legend_entry(seed_runs):
    runs = {
        "a": seed_runs["capacity"],
        "b": seed_runs["capacity"],
        "c": seed_runs["none/configured"],
    }
    data = viz.served_over_time_spec(runs, 0.05)["data"]
    assert [t.get("showlegend", True) for t in data] == [True, True, False, True]
    assert data[1]["name"] == "a, b: rejected at admission (one curve, the runs coincide)"
    assert data[3]["name"] == "c: stall (no progress)"  # SchedulerDeadlock: a stall indeed


def test_an_engine_that_stopped_is_named_where_it_stopped(seed_runs):
    """A crash a moment into an hour is a speck at the origin: an annotation names it."""
    runs = {p: seed_runs[p] for p in ("none/clamped", "none/configured", "capacity")}
    notes = viz.served_over_time_spec(runs, 0.05)["layout"]["annotations"]
    assert [n["text"].split(":")[0] for n in notes] == ["none/clamped", "none/configured"]
    assert notes[0]["text"].startswith("none/clamped: crash (ValueError) at minute 0.0")
    assert notes[0]["x"] == runs["none/clamped"].end_step * 0.05 / 60


def test_a_one_pass_timeline_says_why_it_draws_points(seed_runs):
    """none/clamped crashes in its first pass: an empty-looking frame unless the figure says so."""
    result = seed_runs["none/clamped"]
    assert len(result.trace) == 1
    spec = viz.scheduler_timeline_spec(result)
    assert {t["mode"] for t in spec["data"]} == {"markers"}
    assert any(
        "ended in its first pass (PageIndexTooShort)" in a["text"].replace("<br>", " ")
        for a in spec["layout"]["annotations"]
    )


def test_scheduler_timeline_keeps_its_traces_whatever_the_run(seed_runs):
    shapes = {
        tuple(t["type"] for t in viz.scheduler_timeline_spec(r)["data"]) for r in seed_runs.values()
    }
    assert shapes == {("scatter",) * 7}
    crash = viz.scheduler_timeline_figure(seed_runs["none/clamped"])
    assert "crash" in viz.figure_text(crash)
    assert any(s.line.color == viz.OUTCOME_COLORS["crash"] for s in crash.layout.shapes)
    ok = viz.scheduler_timeline_figure(seed_runs["capacity"])
    assert "rejected at admission" in ok.layout.title.text and max(ok.data[5].y) == 0


def test_phase_diagram_has_a_subplot_per_regime_in_outcome_colours():
    pools, contexts = [1, 16, 64, 1024], [32, 1024, 8192]
    diagram = phase_diagram(pools, contexts)
    fig = viz.phase_diagram_figure(pools, contexts, diagram, mark=(64, 8192))
    heatmaps = [t for t in fig.data if t.type == "heatmap"]
    assert [h.name for h in heatmaps] == list(diagram)
    assert [h.xaxis for h in heatmaps] == ["x", "x2", "x3"]
    for heat, grid in zip(heatmaps, diagram.values()):
        # z is (contexts, pools): the transpose of kvlab.analysis.phase's (pools, contexts)
        assert [list(row) for row in heat.z] == [
            [int(grid[i][j]) for i in range(4)] for j in range(3)
        ]
    # every outcome, once
    assert (
        set(viz.OUTCOME_COLORS)
        == set(viz.OUTCOME_LABELS)
        == set(OUTCOMES) | set(viz.UNRAISED_STALLS)
    )
    seed_cell = heatmaps[0].text[2][2]
    assert "pool 4 MiB (64 pages" in seed_cell and "crash" in seed_cell
    legend = [t for t in fig.data if t.type == "scatter" and t.x == (None,)]
    assert [t.marker.color for t in legend] == [viz.OUTCOME_COLORS[v] for v in ENGINE_OUTCOMES]
    assert [t.marker.symbol for t in fig.data if t.type == "scatter" and t.x != (None,)] == [
        "star"
    ] * 3
    assert [heat.colorscale[-1][1] for heat in heatmaps] == [viz.OUTCOME_COLORS["crash"]] * 3


def test_policy_bars_colour_each_policy_by_its_outcome(seed_runs):
    rows = outcome_rows(seed_runs)
    fig = viz.policy_bars_figure(rows)
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == 3 and len(fig.data) == 7
    assert list(bars[0].x) == list(seed_runs)
    assert list(bars[0].marker.color) == [
        viz.OUTCOME_COLORS[o] for o in ("crash", "stall", "reject", "reject", "reject")
    ]
    assert list(bars[0].y) == [r["goodput_tokens_per_step"] for r in rows]
    assert bars[1].y[0] is None  # nothing started before the crash: no waiting time
    assert "outcome: crash" in bars[0].hovertext[0]
    # the mean wait leaves out the requests that never started: its axis names the unfinished
    wait_axis = fig.layout.xaxis2
    unfinished = {r["policy"]: r["unfinished"] for r in rows}
    assert unfinished["none/clamped"] == 4 and unfinished["capacity"] == 0
    assert list(wait_axis.ticktext)[:3] == [
        "none/clamped<br>(4 unfinished)",
        "none/configured<br>(1 unfinished)",
        "capacity",
    ]
    assert fig.layout.xaxis.ticktext is None  # goodput counts every pass: names only
    # each panel's title within its panel: the unit on a line of its own
    assert [a.text for a in fig.layout.annotations] == [
        "<b>goodput</b><br>(tokens / step)",
        "<b>mean wait</b><br>(steps)",
        "<b>preemptions</b>",
    ]


def test_the_page_table_picture_points_rows_at_pages_and_marks_the_missing_entries():
    """Notebook 02 §3: the seed's row of 68 entries above its 64 pages, an 8192-token request
    needing 256: entries 68..255 drawn as missing, arrows from row 0 into the pool."""
    spec = viz.page_table_spec(68, 256, 64)
    layout = spec["layout"]
    texts = [a["text"] for a in layout["annotations"]]
    assert "entries 68..255: the row has none" in texts and "row width: 68 entries" in texts
    arrows = [a for a in layout["annotations"] if a.get("showarrow")]
    assert len(arrows) == 6 and len({a["x"] for a in arrows}) == 6  # six entries, six pages
    assert all(a["ay"] == 3.0 and a["y"] < 1 for a in arrows)  # from row 0 down to the pool
    cells = [s for s in layout["shapes"] if s["type"] == "rect"]
    assert len(cells) == 3 * 68 + 1 + 64  # three rows, the missing span, the pool
    assert "ValueError" in viz.figure_text(spec)
    fits = viz.page_table_spec(260, 256, 1024)
    assert not any("the row has none" in a["text"] for a in fits["layout"]["annotations"])
    assert [t["showlegend"] for t in fits["data"]] == [True, True, False, True]
    # what row 0 holds: pages it points at when it fits; when it raises, pages requested and
    # never taken (the ValueError comes first), in the page map's "requested" colour
    assert fits["data"][0]["marker"]["color"] == viz.PAGE_COLORS["held"]
    assert spec["data"][0]["marker"]["color"] == viz.PAGE_COLORS["wanted"]
    assert "none is taken" in spec["data"][0]["name"]
    pool = [c["fillcolor"] for c in cells if c["y0"] == 0.0]
    assert pool.count(viz.PAGE_COLORS["wanted"]) == 64 and viz.PAGE_COLORS["held"] not in pool


# --- bad arguments: each refused at the figure's door, naming the parameter -------------------


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(needed=float("inf")), "needed"),
        (dict(needed=-1), "needed"),
        (dict(width="x"), "width"),
        (dict(width=10**30), "width"),
        (dict(total_blocks=-1), "total_blocks"),
        (dict(total_blocks=0), "total_blocks"),
        (dict(slots=np.zeros((2, 2))), "slots"),
        (dict(slots=-1), "slots"),
        (dict(shown_links="x"), "shown_links"),
        (dict(shown_links=-1), "shown_links"),
        (dict(shown_links=10**30), "shown_links"),
        (dict(tokens_per_block=""), "tokens_per_block"),
        (dict(tokens_per_block=None), "tokens_per_block"),
        (dict(tokens_per_block=[]), "tokens_per_block"),
        (dict(tokens_per_block=2**63), "tokens_per_block"),
    ],
)
def test_the_page_table_picture_names_a_bad_argument(kwargs, named):
    args = {**dict(width=68, needed=256, total_blocks=64), **kwargs}
    with pytest.raises((TypeError, ValueError), match=rf"^{named} must"):
        viz.page_table_figure(**args)


def test_the_page_table_picture_of_a_huge_pool_is_as_quick_as_a_small_one():
    """The pages row 0 holds are found lap by lap around the pool, not entry by entry."""
    spec = viz.page_table_spec(2**40, 2**40, 2**40 + 1)
    pool = [s for s in spec["layout"]["shapes"] if s["type"] == "rect" and s["y0"] == 0.0]
    assert len(pool) == 256 and all(s["fillcolor"] == viz.PAGE_COLORS["held"] for s in pool[:-1])


@pytest.mark.parametrize("figure", [viz.repro_page_map, viz.repro_index_row])
@pytest.mark.parametrize("bad", [2**63, [], None, np.zeros((2, 2))])
def test_a_repro_figure_takes_only_a_repro_result(figure, bad):
    with pytest.raises(TypeError, match="^result must be a ReproResult"):
        figure(bad)


@pytest.mark.parametrize(
    "bad, error",
    [
        ((i for i in range(3)), TypeError),
        (-1, TypeError),
        ("x", TypeError),
        ([run_repro()] * 2 + [3], TypeError),
    ],
)
def test_the_outcome_map_takes_repro_results(bad, error):
    with pytest.raises(error, match=r"^results(\[\d+\])? must be"):
        viz.outcome_map_figure(bad)


def test_the_outcome_map_takes_a_generator_of_results():
    assert viz.outcome_map_spec(r for r in sweep_repro([4], [8192]))["data"][0]["y"] == [8192]


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(result=0), "result"),
        (dict(stall_limit={}), "stall_limit"),
        (dict(stall_limit=2**63), "stall_limit"),
        (dict(stall_limit=True), "stall_limit"),
        (dict(outcome={}), "outcome"),
        (dict(outcome=-1), "outcome"),
        (dict(outcome=float("inf")), "outcome"),
        (dict(stall_detector="x"), "stall_detector"),
        (dict(stall_detector=[]), "stall_detector"),
        (dict(subtitle=True), "subtitle"),
        (dict(title=float("inf")), "title"),
    ],
)
def test_the_timeline_names_a_bad_argument(seed_runs, kwargs, named):
    args = {"result": seed_runs["none/clamped"], **kwargs}
    with pytest.raises((TypeError, ValueError), match=rf"^{named} must"):
        viz.scheduler_timeline_figure(**args)


def test_every_figure_refuses_a_title_that_is_not_text(seed_runs):
    """One check in the shared layout, and one where a figure falls back to its own title."""
    deployment = example_deployments()["rtx5080-4mib"]
    calls = [
        lambda t: viz.outcome_map_figure(sweep_repro([4], [8192]), title=t),
        lambda t: viz.plan_ranges_figure(plan_deployment(deployment), title=t),
        lambda t: viz.rank_budget_figure([], title=t),
        lambda t: viz.review_findings_figure([], title=t),
        lambda t: viz.page_map_figure(64, 256, "crash", title=t),
        lambda t: viz.pass_figure([], title=t),
    ]
    for call in calls:
        for bad in (float("inf"), np.zeros((2, 2)), True):
            with pytest.raises(TypeError, match="^title must be a str"):
                call(bad)


def test_plan_rank_and_review_figures_name_a_bad_argument():
    with pytest.raises(TypeError, match="^plan must be a DeploymentPlan"):
        viz.plan_ranges_figure(True)
    for bad in (np.zeros((2, 2)), 0):
        with pytest.raises(TypeError, match=r"^ranks(\[0\])? must be"):
            viz.rank_budget_figure(bad)
    plan = plan_deployment(example_deployments()["issue-21470"])
    for bad in (float("inf"), np.zeros((2, 2))):
        with pytest.raises(TypeError, match=r"^state_bytes(\[0\])? must be"):
            viz.rank_budget_figure(plan.rank_plans(), state_bytes=bad)
    with pytest.raises(ValueError, match="^state_bytes must hold one count per rank"):
        viz.rank_budget_figure(plan.rank_plans(), state_bytes=[0])
    with pytest.raises(TypeError, match="^runs must be a sequence"):
        viz.review_findings_figure(float("nan"))
    with pytest.raises(TypeError, match=r"^runs\[0\] must be a FindingRun"):
        viz.review_findings_figure(["x"])


def test_a_timeline_of_a_few_steps_ticks_whole_steps():
    """A run that ended in its first pass: the step axis shows step 0, not -1, -0.5, 0, 0.5, 1."""
    from kvlab.analysis.compare import long_and_small, run_policy

    layout = viz.scheduler_timeline_spec(run_policy("none/clamped", long_and_small(num_small=2)))[
        "layout"
    ]
    assert all(
        layout[axis]["dtick"] == 1 and layout[axis]["range"] == [-0.5, 0.5]
        for axis in ("xaxis", "xaxis2", "xaxis3")
    )


def test_an_empty_row_or_pool_draws_no_end_line():
    """Learner pass A: 02's no-pool figure drew 'row ends: 0' and 'pool ends: 0' on the axis."""
    texts = lambda spec: [a["text"] for a in spec["layout"]["annotations"]]  # noqa: E731
    empty = viz.index_row_spec(0, 256, 0, None, policy="clamped")
    assert not [t for t in texts(empty) if "ends" in t] and not empty["layout"]["shapes"]
    assert "page-index row [clamped]: not built" in empty["data"][0]["y"]
    assert texts(viz.index_row_spec(68, 256, 64, "crash")) == ["row ends: 68", "pool ends: 64"]


def test_the_page_table_labels_the_dummy_row():
    spec = viz.page_table_spec(68, 256, 64, slots=2, dummy_slot=1)
    rows = [
        a["text"]
        for a in spec["layout"]["annotations"]
        if re.fullmatch(r"row \d+( \(.*\))?", a["text"])
    ]
    assert rows == ["row 0 (request)", "row 1 (dummy)"]
    with pytest.raises(ValueError, match="dummy_slot"):
        viz.page_table_spec(68, 256, 64, slots=2, dummy_slot=2)
