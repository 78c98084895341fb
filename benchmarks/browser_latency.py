"""Browser latency: what the learner feels, from a key press on a panel's slider to the figure's
and the verdict's DOM change, in real JupyterLab in headless Chromium.

Generates a notebook with one cell per panel of kvlab.notebook.widgets, each at its defaults
(``from kvlab.notebook.widgets import repro_panel; repro_panel()``, ...), starts JupyterLab on
127.0.0.1 (random port and token, temporary root, config and runtime folders), opens the
notebook with playwright in the system Chromium (as tests/notebook/test_browser.py does), runs
the cells, and for each panel focuses its first slider and presses ArrowRight and ArrowLeft in
turn (``--presses`` times, ``--repeat`` rounds), so the panel stays next to its defaults.

For each press, the page records (performance.now(), in the page) the keydown, and every DOM
mutation inside the panel's plotly figures and inside its verdict (MutationObserver). Once no
mutation has come for ``--quiet-ms``, the press has landed; its figure latency is keydown ->
the last figure mutation, its verdict latency keydown -> the last verdict mutation (a press
that leaves the verdict's HTML unchanged gives no verdict sample). The next press follows.

Prints one JSON line per panel: {"benchmark": "browser_latency", "panel", "figure": {p50_ms,
p95_ms, max_ms, samples}, "verdict": {...}, "machine": {cpus, loadavg, python, chromium, ...}}.
Target (issue): p50 <= 100 ms and p95 <= 250 ms, figure and verdict, every panel at defaults.
Run: python benchmarks/browser_latency.py [--presses 30] [--repeat 1] [--panels repro_panel ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from lab_server import start_lab, stop_lab  # noqa: E402  (the browser test's own server)

CHROMIUM = Path("/usr/bin/chromium")
PANELS = (
    "repro_panel",
    "admission_panel",
    "ranks_panel",
    "mamba_panel",
    "step_panel",
    "plan_panel",
)
NOTEBOOK = "browser_latency.ipynb"

# Installed on the page once per panel: observers on the panel's figures and verdict, a keydown
# listener, and window.__kvlat.wait(quietMs, timeoutMs) -> the times of the last press.
INSTALL_JS = """([cellIndex]) => {
    if (window.__kvlat) { window.__kvlat.disconnect(); }
    const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[cellIndex];
    const plots = Array.from(cell.querySelectorAll('.js-plotly-plot'));
    const verdictNode = cell.querySelector('.kvlab-verdict').closest('.widget-html');
    const state = {key: null, figure: null, verdict: null, first_figure: null, last: 0, plots: plots.length};
    const seen = (what) => () => { const t = performance.now(); state[what] = t; state.last = t;
        if (what === 'figure' && state.first_figure === null) { state.first_figure = t; } };
    const options = {subtree: true, childList: true, attributes: true, characterData: true};
    const observers = plots.map(p => { const o = new MutationObserver(seen('figure')); o.observe(p, options); return o; });
    const vo = new MutationObserver(seen('verdict'));
    vo.observe(verdictNode, options);
    observers.push(vo);
    const onKey = (e) => { if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
        state.key = performance.now(); state.figure = null; state.verdict = null; state.first_figure = null;
        state.arrivals = []; state.last = state.key; } };
    document.addEventListener('keydown', onKey, true);
    state.arrivals = [];
    const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    const onMsg = (_, args) => {
        const m = args.msg;
        if (args.direction !== 'recv' || state.key === null) { return; }
        const st = m.content && m.content.data && m.content.data.state;
        const what = st ? Object.keys(st).join(',') : m.header.msg_type;
        state.arrivals.push([Math.round(performance.now() - state.key), what]);
    };
    kernel.anyMessage.connect(onMsg);
    window.__kvlat = {
        state,
        disconnect() { kernel.anyMessage.disconnect(onMsg); observers.forEach(o => o.disconnect()); document.removeEventListener('keydown', onKey, true); },
        wait(quietMs, timeoutMs) {
            return new Promise(resolve => {
                const tick = () => {
                    const now = performance.now();
                    const landed = state.figure !== null && now - state.last >= quietMs;
                    if (landed || now - state.key >= timeoutMs) {
                        resolve({figure: state.figure === null ? null : state.figure - state.key,
                                 verdict: state.verdict === null ? null : state.verdict - state.key,
                                 first_figure: state.first_figure === null ? null : state.first_figure - state.key,
                                 key_epoch: performance.timeOrigin + state.key, arrivals: state.arrivals.slice()});
                    } else { setTimeout(tick, 10); }
                };
                setTimeout(tick, 10);
            });
        },
    };
    return plots.length;
}"""


# With --trace: a first cell that logs, in the kernel, when a control's change arrives and when
# each refresh starts and ends (wall clock, ms), to compare with the page's key press.
TRACE_CELL = """import json as _json, time as _time
from kvlab.notebook import panel as _panel_module
_kvlat_log = open({path!r}, "a")
def _kvlat_wrap(name):
    original = getattr(_panel_module.Panel, name)
    def wrapped(self, *args):
        start = _time.time() * 1000
        result = original(self, *args)
        _kvlat_log.write(_json.dumps([name, start, _time.time() * 1000]) + "\\n")
        _kvlat_log.flush()
        return result
    setattr(_panel_module.Panel, name, wrapped)
_kvlat_wrap("_on_change")
_kvlat_wrap("refresh")
"""


def make_notebook(path: Path, panels, trace: Path | None = None) -> None:
    cells = [
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": [f"from kvlab.notebook.widgets import {name}\n", f"{name}()"],
        }
        for name in panels
    ]
    if trace is not None:
        cells.insert(
            0,
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": TRACE_CELL.format(path=str(trace)),
            },
        )
    path.write_text(
        json.dumps(
            {
                "cells": cells,
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {
                    "kernelspec": {
                        "name": "python3",
                        "display_name": "Python 3",
                        "language": "python",
                    }
                },
            }
        )
    )


def summary(samples) -> dict:
    if not samples:
        return {"p50_ms": None, "p95_ms": None, "max_ms": None, "samples": 0}
    s = sorted(samples)
    return {
        "p50_ms": round(statistics.median(s), 1),
        "p95_ms": round(s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))], 1),
        "max_ms": round(s[-1], 1),
        "samples": len(s),
    }


def measure_panel(page, cell_index: int, presses: int, quiet_ms: int, timeout_ms: int):
    cell = page.locator(".jp-Notebook .jp-Cell").nth(cell_index)
    cell.scroll_into_view_if_needed()
    handle = cell.locator(".widget-slider .noUi-handle").first
    handle.scroll_into_view_if_needed()
    page.evaluate(INSTALL_JS, [cell_index])
    page.wait_for_timeout(300)
    records = []
    for i in range(presses):
        handle.focus()
        handle.press("ArrowRight" if i % 2 == 0 else "ArrowLeft")
        records.append(
            page.evaluate("([q, t]) => window.__kvlat.wait(q, t)", [quiet_ms, timeout_ms])
        )
    page.evaluate("() => window.__kvlat.disconnect()")
    return records


def breakdown(records, trace_lines) -> dict:
    """Median ms from the key press to: the kernel seeing the change, the refresh's start and
    end, the first and the last figure mutation (--trace)."""
    events = [json.loads(line) for line in trace_lines if line.strip()]
    parts = {
        "to_kernel_change": [],
        "to_refresh_start": [],
        "refresh_ms": [],
        "to_refresh_end": [],
        "to_first_figure": [],
        "to_last_figure": [],
        "refreshes_per_press": [],
    }
    ordered = sorted(records, key=lambda r: r["key_epoch"])
    for r, after in zip(ordered, ordered[1:] + [None]):
        key = r["key_epoch"]
        end = after["key_epoch"] - 5 if after is not None else key + 3000
        mine = [e for e in events if key - 5 <= e[1] < end]
        changes = [e for e in mine if e[0] == "_on_change"]
        refreshes = [e for e in mine if e[0] == "refresh"]
        parts["refreshes_per_press"].append(len(refreshes))
        if changes:
            parts["to_kernel_change"].append(changes[0][1] - key)
        if refreshes:
            parts["to_refresh_start"].append(refreshes[0][1] - key)
            parts["refresh_ms"].append(refreshes[0][2] - refreshes[0][1])
            parts["to_refresh_end"].append(refreshes[-1][2] - key)
        if r["first_figure"] is not None:
            parts["to_first_figure"].append(r["first_figure"])
            parts["to_last_figure"].append(r["figure"])
    return {k: (round(statistics.median(v), 1) if v else None) for k, v in parts.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--presses", type=int, default=30, help="key presses per panel and round (default 30)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="rounds over all panels (default 1)")
    parser.add_argument("--panels", nargs="+", default=list(PANELS), choices=PANELS)
    parser.add_argument(
        "--quiet-ms",
        type=int,
        default=250,
        help="no DOM change for this long after a press: it has landed (default 250)",
    )
    parser.add_argument(
        "--timeout-ms", type=int, default=5000, help="give up on a press after this long"
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also log kernel-side times and print where the time goes (median ms)",
    )
    args = parser.parse_args()
    import playwright.sync_api as playwright_sync

    with tempfile.TemporaryDirectory(prefix="kvlab-browser-latency-") as tmpdir:
        tmp = Path(tmpdir)
        root = tmp / "lab"
        root.mkdir()
        trace = tmp / "kernel-trace.jsonl" if args.trace else None
        make_notebook(root / NOTEBOOK, args.panels, trace)
        proc, base, token = start_lab(tmp, root)
        try:
            with playwright_sync.sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=str(CHROMIUM),
                    args=[
                        "--no-sandbox",
                        "--disable-dev-shm-usage",
                        "--disable-gpu",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--no-first-run",
                    ],
                )
                try:
                    page = browser.new_page(viewport={"width": 1600, "height": 1200})
                    page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
                    page.wait_for_function(
                        "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                        " return w && w.sessionContext && w.sessionContext.session"
                        " && w.sessionContext.session.kernel; }",
                        timeout=90_000,
                    )
                    page.evaluate(
                        "() => window.jupyterapp.commands.execute('notebook:run-all-cells')"
                    )
                    page.wait_for_function(
                        "() => document.querySelectorAll('.jp-Notebook .jp-Cell .kvlab-verdict').length"
                        f" >= {len(args.panels)}"
                        f" && document.querySelectorAll('.jp-Notebook .jp-Cell .js-plotly-plot').length >= {len(args.panels)}",
                        timeout=180_000,
                    )
                    page.wait_for_timeout(1000)
                    results = {name: [] for name in args.panels}
                    first = 1 if trace is not None else 0
                    for _ in range(args.repeat):
                        for index, name in enumerate(args.panels):
                            results[name] += measure_panel(
                                page, first + index, args.presses, args.quiet_ms, args.timeout_ms
                            )
                    chromium = browser.version
                    trace_lines = trace.read_text().splitlines() if trace is not None else []
                finally:
                    browser.close()
        finally:
            stop_lab(proc)

    import ipywidgets
    import jupyterlab
    import plotly

    machine = {
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "chromium": chromium,
        "jupyterlab": jupyterlab.__version__,
        "ipywidgets": ipywidgets.__version__,
        "plotly": plotly.__version__,
        "headless": True,
    }
    for name in args.panels:
        records = results[name]
        line = {
            "benchmark": "browser_latency",
            "panel": name,
            "slider": "first",
            "presses": args.presses * args.repeat,
            "repeat": args.repeat,
            "figure": summary([r["figure"] for r in records if r["figure"] is not None]),
            "verdict": summary([r["verdict"] for r in records if r["verdict"] is not None]),
            "no_figure_change": sum(r["figure"] is None for r in records),
            "target": {"p50_ms": 100, "p95_ms": 250},
            "machine": machine,
        }
        if trace is not None:
            line["breakdown_median_ms"] = breakdown(records, trace_lines)
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
