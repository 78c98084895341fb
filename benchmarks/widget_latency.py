"""Widget latency: time from setting a control's value to the panel's figure views and verdict
being updated, headless, for every panel in kvlab.notebook.widgets (each ``*_panel`` factory), at its
defaults and at its largest setting (every slider at its maximum).

Prints one JSON line: {"panels": {name: {"defaults": {p50_ms, p95_ms}, "largest": {...}}}}.
Target (issue 6): p50 under 20 ms and p95 under 50 ms at defaults.
Run: python benchmarks/widget_latency.py [--repeats N]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import time
import warnings

import ipywidgets as W

from kvlab.notebook import widgets

SLIDERS = (W.FloatLogSlider, W.FloatSlider, W.IntSlider, W.SelectionSlider)


def panel_factories():
    return {
        name: fn
        for name, fn in inspect.getmembers(widgets, inspect.isfunction)
        if name.endswith("_panel") and fn.__module__.startswith(f"{widgets.__name__}.")
    }


def _values(control):
    """Two neighbouring values of a slider (its current one and the next), to toggle between."""
    if isinstance(control, W.SelectionSlider):
        options = [o[1] if isinstance(o, tuple) else o for o in control.options]
        i = options.index(control.value)
        return control.value, options[i + 1 if i + 1 < len(options) else i - 1]
    step = control.step or 1
    other = control.value + step if control.value + step <= control.max else control.value - step
    return control.value, other


def _largest(panel):
    largest = {}
    for name, control in panel.controls.items():
        if isinstance(control, W.SelectionSlider):
            options = control.options
            last = options[-1]
            largest[name] = last[1] if isinstance(last, tuple) else last
        elif isinstance(control, SLIDERS):
            largest[name] = control.max
    panel.set(**largest)


def measure(panel, repeats):
    """Latency of one control change, over every slider of the panel, in ms."""
    samples = []
    sliders = [c for c in panel.controls.values() if isinstance(c, SLIDERS)]
    for control in sliders:
        a, b = _values(control)
        for i in range(repeats):
            before = panel.updates
            start = time.perf_counter()
            control.value = b if i % 2 == 0 else a
            panel.flush()
            elapsed = time.perf_counter() - start
            assert panel.updates > before, "the panel did not update"
            samples.append(elapsed * 1000)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(samples[min(len(samples) - 1, int(0.95 * len(samples)))], 2),
        "samples": len(samples),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40, help="changes per slider (default 40)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    results = {}
    for name, factory in panel_factories().items():
        panel = factory()
        defaults = measure(panel, args.repeats)
        _largest(panel)
        results[name] = {"defaults": defaults, "largest": measure(panel, max(4, args.repeats // 4))}
    print(
        json.dumps(
            {
                "benchmark": "widget_latency",
                "panels": results,
                "target": {"defaults_p50_ms": 20, "defaults_p95_ms": 50},
            }
        )
    )


if __name__ == "__main__":
    main()
