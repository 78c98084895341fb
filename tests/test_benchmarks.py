"""Every benchmark runs and prints one JSON line with its figures (the figures themselves are
not asserted: speed targets live in the benchmarks, not in timed tests)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bounds import HANG_S

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
QUICK_ARGS = {
    "browser_latency.py": ["--presses", "2", "--panels", "mamba_panel"],  # JupyterLab + Chromium
    "distributed_startup.py": ["--ranks", "4", "--repeat", "1"],
    "fuzz_system.py": ["--seconds", "1", "--examples", "20"],
    "gpu_measurements.py": ["--device", "cpu", "--quick"],  # CPU: prints, stores nothing
    "hostile_inputs.py": ["--limit", "20", "--jobs", "2", "--load", "1"],
    "mooncake_replay.py": ["--minutes", "1"],
    "replay_memory.py": ["--rows", "200", "800"],
    "phase_diagram.py": ["--repeat", "2"],
    "scheduler_throughput.py": [
        "--repeat",
        "1",
        "--requests",
        "200",
        "--sizes",
        "100",
        "200",
        "--trace",
        "--trace-limit",
        "300",
        "--pass-cost-passes",
        "50",
    ],
    "widget_latency.py": ["--repeats", "4"],
    "peer_conformance.py": ["--stored", "--only", "nb04/long", "front-door"],  # no vLLM needed
}


def test_every_benchmark_is_listed():
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == sorted(QUICK_ARGS)


#: Benchmarks that drive JupyterLab in the system Chromium: marked ``ui`` as well.
UI = {"browser_latency.py"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [
        pytest.param(name, marks=[pytest.mark.ui] if name in UI else [])
        for name in sorted(QUICK_ARGS)
    ],
)
def test_benchmark_prints_its_figures(script):
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *QUICK_ARGS[script]],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stdout[-2000:]
    figures = json.loads(lines[-1])
    assert figures and all(value is not None for value in figures.values())
