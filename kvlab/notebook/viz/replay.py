"""A trace replayed on a deployment (kvlab replay, notebook 06 "your traffic"): each run's
mean wait for a first scheduled pass over arrival time, one line a run, the rejections as
crosses on the same time axis."""

from __future__ import annotations

from kvlab.analysis.replay import ENGINE_TITLES, Replay
from kvlab.core.checks import check_instance
from kvlab.notebook.viz.style import WIDTH_LINE_COLORS, as_figure, base_layout, legend_below


def replay_spec(replay: Replay, title: str | None = None) -> dict:
    """The figure's spec: one line per run (mean wait of the requests arriving in each time
    bin, in seconds), its longest wait and rejections in the hover."""
    check_instance("replay", replay, Replay)
    spi, data = replay.seconds_per_iteration, []
    for k, run in enumerate(replay.runs):
        rows = run.timeline(spi)
        name = f"{ENGINE_TITLES[run.engine]} {run.policy}"
        hovers = [
            f"{name}<br>arrived from {r['start_s']:,.0f} s: {r['arrived']:,}<br>"
            f"mean wait {r['mean_wait_s']:,.2f} s, longest {r['max_wait_s']:,.2f} s<br>"
            f"rejected {r['rejected']:,}"
            for r in rows
        ]
        data.append(
            dict(
                type="scatter",
                mode="lines",
                x=[r["start_s"] / 60 for r in rows],
                y=[r["mean_wait_s"] for r in rows],
                name=name + (f" ({run.stopped})" if run.stopped else ""),
                line=dict(color=WIDTH_LINE_COLORS[k % len(WIDTH_LINE_COLORS)], width=2),
                hovertext=hovers,
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    subtitle = (
        f"{replay.trace}: {replay.requests:,} requests on a pool of {replay.config.total_blocks:,} "
        f"blocks; arrivals at {spi:g} s per scheduler iteration"
    )
    layout = base_layout(
        title or "Waits over time, per engine and policy",
        subtitle,
        xaxis=dict(title="arrival time (minutes)"),
        yaxis=dict(title="mean wait for a first pass (s)", rangemode="tozero"),
        legend=legend_below(-0.18),
        height=460,
    )
    return dict(data=data, layout=layout)


replay_figure = as_figure(replay_spec)
