"""The engines as they ship, caching on and off (notebook 04 §8b): bars of what caching changed per
engine, and one engine's requests, the prompt tokens each found cached and its time to first
token beside the same run with caching switched the other way. Every figure says which of each
engine's defaults were on (:func:`kvlab.analysis.shipped.defaults_label`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from kvlab.analysis.shipped import ShippedRun
from kvlab.core.request import RequestState
from kvlab.notebook.viz.style import (
    NEUTRAL_COLOR,
    OUTCOME_COLORS,
    as_figure,
    bar,
    base_layout,
    heading,
    hover,
    legend_below,
    on_panel,
    panel_axes,
    panel_domains,
    titled,
)

#: Caching on and off, in the figures' colours.
CACHING_COLORS = {True: "#AA4499", False: "#9AA5B1"}
CACHING_NAMES = {True: "caching on (as shipped)", False: "caching off"}
#: The bars' panels: (row key, heading, unit, scale).
CACHING_METRICS: tuple[tuple[str, str, str, float], ...] = (
    ("reused_share", "prompt tokens from the cache", "%", 100.0),
    ("mean_ttft_steps", "mean time to first token", "steps", 1.0),
    ("waited", "requests that waited", "count", 1.0),
    ("preemptions", "preemptions", "count", 1.0),
)


def _value_texts(values: Sequence[float | None], unit: str) -> list[str]:
    """Bar labels: a share to one decimal, steps to one decimal where all are below ten (else
    whole), counts whole."""
    shown = [v for v in values if v is not None]
    decimals = 1 if unit == "%" or (unit == "steps" and max(shown, default=0) < 10) else 0
    suffix = "%" if unit == "%" else ""
    return ["" if v is None else f"{v:,.{decimals}f}{suffix}" for v in values]


def caching_bars_spec(
    rows: Sequence[Mapping[str, Any]], *, title: str | None = None, subtitle: str | None = None
) -> dict:
    """Per engine (``caching_rows`` dicts), a bar with caching on and one with it off in each
    of :data:`CACHING_METRICS`' panels. Traces: two a panel (on, off), the first panel's in the
    legend. The default subtitle is each engine's defaults as run with caching on."""
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    by_key = {(r["engine"], r["caching"]): r for r in rows}
    columns, rows_of = panel_domains([1, 1], 0.12), [[0.6, 1.0], [0.0, 0.36]]
    data: list[dict] = []
    annotations: list[dict] = []
    axes: dict[str, dict] = {}
    for k, (column, name, unit, scale) in enumerate(CACHING_METRICS):
        top = 0.0
        for on in (True, False):
            values = [
                None if (e, on) not in by_key else (by_key[e, on][column] or 0) * scale
                for e in engines
            ]
            top = max([top] + [v for v in values if v is not None])
            text = _value_texts(values, unit)
            hovers = [
                f"{by_key[e, on]['defaults'] if (e, on) in by_key else e}<br>{name}: {t or 'n/a'}"
                for e, t in zip(engines, text)
            ]
            trace = bar(engines, values, CACHING_NAMES[on], CACHING_COLORS[on], hovers)
            trace.update(text=text, textposition="outside", cliponaxis=False)
            trace.update(legendgroup=str(on), showlegend=k == 0, constraintext="none")
            data.append(dict(trace, **on_panel(k)))
        x_domain, y_domain = columns[k % 2], rows_of[k // 2]
        axes |= panel_axes(
            k,
            dict(domain=x_domain),
            dict(domain=y_domain, rangemode="tozero", range=[0, (top or 1) * 1.25]),
        )
        annotations.append(
            dict(heading(f"<b>{name}</b><br>({unit})", sum(x_domain) / 2), y=y_domain[1] + 0.03)
        )
    shipped = [by_key[e, True]["defaults"] for e in engines if (e, True) in by_key]
    default = "; ".join(shipped) + "; caching off: the same, the cache switched off"
    layout = base_layout(
        titled(title, "The engines as they ship, caching on and off"),
        titled(subtitle, default, "subtitle"),
        height=620,
        barmode="group",
        annotations=annotations,
        legend=legend_below(-0.08),
        margin=dict(l=50, r=20, t=150, b=80),
        **axes,
    )
    return {"data": data, "layout": layout}


def caching_requests_spec(
    run: ShippedRun, other: ShippedRun, *, title: str | None = None, subtitle: str | None = None
) -> dict:
    """``run``'s requests in arrival order: above, each prompt's tokens found cached and
    computed (a rejected request's prompt in the rejection colour); below, each request's time
    to first token (steps, log scale) in ``run`` and in ``other`` (the same engine, caching the
    other way). Traces: cached, computed, rejected, this run's TTFT, the other's."""
    requests = sorted(run.result.requests.values(), key=lambda r: (r.arrival_step, r.request_id))
    x = list(range(1, len(requests) + 1))
    rejected = [run.result.status[r.request_id] == RequestState.REJECTED for r in requests]
    cached = [0 if no else r.prepopulated_prompt_len for r, no in zip(requests, rejected)]
    computed = [0 if no else r.prompt_len - c for r, no, c in zip(requests, rejected, cached)]
    refused = [r.prompt_len if no else 0 for r, no in zip(requests, rejected)]
    ids = [r.request_id for r in requests]
    data: list[dict] = [
        bar(
            x,
            cached,
            "prompt tokens found cached",
            CACHING_COLORS[True],
            [f"{i}: {c:,} of {r.prompt_len:,} cached" for i, c, r in zip(ids, cached, requests)],
        ),
        bar(
            x,
            computed,
            "prompt tokens computed",
            "#DDE3EA",
            [f"{i}: {c:,} computed" for i, c in zip(ids, computed)],
        ),
        bar(
            x,
            refused,
            "rejected (longer than the pool)",
            OUTCOME_COLORS["reject"],
            [f"{i}: {p:,} tokens, rejected" for i, p in zip(ids, refused)],
        ),
    ]

    def ttft(result) -> list[float | None]:
        out: list[float | None] = []
        for request in requests:
            mine = result.requests[request.request_id]
            out.append(
                None
                if mine.first_token_step is None
                else max(mine.first_token_step - mine.arrival_step, 1)
            )
        return out

    for which, color, symbol in (
        (run, CACHING_COLORS[run.caching], "circle"),
        (other, NEUTRAL_COLOR, "x"),
    ):
        values = ttft(which.result)
        name = f"time to first token, {CACHING_NAMES[which.caching]}"
        trace: dict[str, Any] = dict(type="scatter", mode="markers", x=x, y=values, name=name)
        trace["marker"] = dict(color=color, size=8, symbol=symbol)
        trace.update(
            hover(
                [f"{i}: {'n/a' if v is None else f'{v:,.0f} steps'}" for i, v in zip(ids, values)]
            ),
            **on_panel(1),
        )
        data.append(trace)
    for trace in data[:3]:
        trace.update(on_panel(0))
    tallest = max([c + d + f for c, d, f in zip(cached, computed, refused)] + [1])
    all_ttft = [v for t in data[3:] for v in t["y"] if v is not None] or [1]
    axes = panel_axes(
        0,
        dict(domain=[0, 1], showticklabels=False, matches="x2"),
        dict(domain=[0.5, 1], title="prompt tokens", range=[0, tallest * 1.1]),
    )
    axes |= panel_axes(
        1,
        dict(domain=[0, 1], title="requests in arrival order"),
        dict(
            domain=[0, 0.4],
            title="time to first token<br>(steps, log scale)",
            type="log",
            dtick=1,
            range=[-0.2, math.log10(max(all_ttft)) + 0.3],
        ),
    )
    layout = base_layout(
        titled(title, f"{run.engine}, caching {'on' if run.caching else 'off'}: each request"),
        titled(subtitle, run.label, "subtitle"),
        height=600,
        barmode="stack",
        legend=legend_below(-0.22, traceorder="normal"),
        margin=dict(l=70, r=20, t=100, b=190),
        **axes,
    )
    return {"data": data, "layout": layout}


caching_bars_figure = as_figure(caching_bars_spec)
caching_requests_figure = as_figure(caching_requests_spec)
