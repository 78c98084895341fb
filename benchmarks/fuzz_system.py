"""Long stateful fuzzing of the manager and the scheduler together; prints one JSON line.

Runs the hypothesis state machine of tests/test_fuzz_system.py (requests arriving, engine
steps, an outside tenant creating, resizing, suspending, resuming and freeing caches on the
same pool; every width policy, admission policy and hybrid manager; invariants checked after
every rule) in batches of ``--examples`` examples, one hypothesis seed per batch, until
``--seconds`` have passed. A batch that breaks an invariant counts as one violation; its
seed and message are reported and the run goes on with the next seed. Drains of 300 steps
that produced nothing and raised nothing are counted (not violations: the real scheduler
spins the same way). Shrinking is off for
speed; rerun one batch with ``--seed N --batches 1 --shrink`` for a minimal failing program.

    python benchmarks/fuzz_system.py [--seconds S] [--examples N] [--steps N] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import hypothesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_fuzz_system import SystemMachine  # noqa: E402

RULES = (
    "build",
    "arrive",
    "step",
    "drain",
    "create",
    "resize",
    "suspend",
    "resume",
    "free",
    "use stale handle",
    "build refused: no chunk fits",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="time budget (default 180)")
    parser.add_argument(
        "--examples", type=int, default=200, help="examples per batch (default 200)"
    )
    parser.add_argument(
        "--steps", type=int, default=50, help="rules per example, at most (default 50)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the first batch (default 0)")
    parser.add_argument("--batches", type=int, default=None, help="stop after this many batches")
    parser.add_argument("--shrink", action="store_true", help="shrink a failing example")
    args = parser.parse_args()
    phases = [Phase.generate, Phase.shrink] if args.shrink else [Phase.generate]
    config = settings(
        max_examples=args.examples,
        stateful_step_count=args.steps,
        deadline=None,
        database=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    SystemMachine.rules_run.clear()
    violations = []
    batches = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds and (
        args.batches is None or batches < args.batches
    ):
        seed = args.seed + batches
        hypothesis.seed(seed)(SystemMachine)
        try:
            run_state_machine_as_test(SystemMachine, settings=config)
        except Exception as exc:  # an invariant broke (or kvlab raised): one violation
            text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            violations.append({"seed": seed, "error": text})
            print(f"violation (seed {seed}): {text}", file=sys.stderr)
        batches += 1
    elapsed = time.perf_counter() - start
    ran = SystemMachine.rules_run
    rules = {name: ran[name] for name in RULES}
    executed = sum(rules.values())
    print(
        json.dumps(
            {
                "benchmark": "fuzz_system",
                "seconds": round(elapsed, 1),
                "batches": batches,
                "first_seed": args.seed,
                "examples_run": ran["build"],
                "rules_executed": executed,
                "rules_per_s": round(executed / elapsed, 1),
                "invariant_checks": ran["invariant checks"],
                "scheduler_iterations": ran["scheduler iterations"],
                "drains_without_progress": ran["drain without progress"],
                "violations": len(violations),
                "violation_details": violations[:10],
                "rules": rules,
                "events": {
                    k[len("event: ") :]: v
                    for k, v in sorted(ran.items())
                    if k.startswith("event: ")
                },
                "engine_stops": {
                    k[len("engine stopped: ") :]: v
                    for k, v in sorted(ran.items())
                    if k.startswith("engine stopped: ")
                },
                "builds": {
                    k[len("build: ") :]: v
                    for k, v in sorted(ran.items())
                    if k.startswith("build: ")
                },
                "hypothesis": hypothesis.__version__,
                "python": platform.python_version(),
            }
        )
    )


if __name__ == "__main__":
    main()
