"""The ``kvlab`` command (also ``python -m kvlab``).

``kvlab repro``        the 4 MiB single-GPU repro: arithmetic and outcome of one resize;
                       exit 0 allocated, 3 refused (False), 4 crashed (ValueError)
``kvlab walkthrough``  execute the notebooks with papermill into build/ and print the findings
``kvlab scenario NAME`` run a multi-rank scenario (``issue-21470``: the 16 x GB300 report) as
                       real rank processes over torch.distributed (``--in-process``: threads);
                       prints each rank's pool and outcome and how the run ended; exit 0 every
                       rank finished, 3 requests left unfinished at max_steps, 4 the engine went
                       down (a rank raised; every rank shut down), 5 a rank died or hung;
                       a signal (SIGINT, SIGTERM, SIGHUP) stops every rank and exits 128 + its
                       number (130, 143, 129), with no traceback

Bad arguments exit 2 with a usage line and no traceback: a value outside its range, a pool the
machine cannot allocate, a scenario file that does not validate, a ``-p`` parameter that no
selected notebook has or whose value has the wrong type (its range is checked by the notebook).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import List, Optional

from kvlab.core.page_index import WIDTH_POLICIES

#: Exit codes of ``kvlab repro``, one per allocator outcome.
REPRO_EXIT_CODES = {"ok": 0, "refused": 3, "crash": 4}
#: Exit codes of ``kvlab scenario``, one per way a multi-rank run ends.
SCENARIO_EXIT_CODES = {"completed": 0, "unfinished": 3, "shut down": 4, "died": 5, "hung": 5}


#: The longest VALUE of ``-p NAME=VALUE``: every notebook parameter is a number, a bool or a
#: short word.
MAX_PARAMETER_CHARS = 200


def _parameter(text: str):
    """NAME=VALUE with VALUE a Python literal (int, float, bool, str)."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        shown = text if len(text) <= 60 else f"{text[:60]}... ({len(text)} characters)"
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {shown!r}")
    if len(value) > MAX_PARAMETER_CHARS:
        raise argparse.ArgumentTypeError(f"the value of {name} must be at most {MAX_PARAMETER_CHARS} "
                                         f"characters, got {len(value)}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return name, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{repro,walkthrough,scenario}")

    repro = sub.add_parser("repro", help="the 4 MiB single-GPU repro of issue #21470",
                           description="Resize one cache to --context tokens on a pool of "
                           "--pool-mib MiB (the seed's model shape). Exit 0 allocated, "
                           "3 refused (False), 4 crashed (ValueError).")
    repro.add_argument("--pool-mib", type=float, default=4.0, help="KV pool size in MiB (default 4)")
    repro.add_argument("--context", type=int, default=8192, help="context length in tokens (default 8192)")
    repro.add_argument("--policy", choices=sorted(WIDTH_POLICIES), default="clamped",
                       help="page-index width policy (default clamped)")
    repro.add_argument("--tokens-per-block", type=int, default=32, help="tokens per page (default 32)")
    repro.add_argument("--max-seq-len", type=int, default=8192, help="configured max_seq_len (default 8192)")
    repro.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    repro.set_defaults(handler=_repro, subparser=repro)

    walk = sub.add_parser("walkthrough", help="execute the notebooks and summarise the findings",
                          description="Execute notebooks/NN_*.ipynb with papermill into BUILD "
                          "and print what each found.")
    walk.add_argument("-p", "--parameter", type=_parameter, action="append", default=[],
                      metavar="NAME=VALUE", help="papermill parameter for every notebook that has it")
    walk.add_argument("--only", action="append", default=[], metavar="PREFIX",
                      help="run only notebooks whose name starts with PREFIX (e.g. 02)")
    walk.add_argument("--notebook-dir", type=Path, default=None,
                      help="folder of NN_*.ipynb notebooks (default: the kit's notebooks/)")
    walk.add_argument("--build-dir", type=Path, default=Path("build"), help="output folder (default build)")
    walk.add_argument("--smoke", action="store_true", help="set SMOKE=True (the quick CI run)")
    walk.set_defaults(handler=_walkthrough, subparser=walk)

    from kvlab.run.distributed import BACKENDS, MAX_RANKS
    from kvlab.sched.policies import RANK_POLICIES

    scen = sub.add_parser("scenario", help="run a multi-rank scenario (issue-21470) over torch.distributed",
                          description="Run NAME (a scenario with a deployment block, e.g. "
                          "issue-21470) on --ranks rank processes; exit 0 every rank finished, "
                          "3 requests unfinished, 4 the engine went down, 5 a rank died or hung.")
    scen.add_argument("name", metavar="NAME", help="scenario name (issue-21470 or a file stem) or a .yaml path")
    scen.add_argument("--ranks", type=int, default=None,
                      help=f"number of ranks, 1..{MAX_RANKS} (default: the scenario's)")
    scen.add_argument("--policy", choices=sorted(RANK_POLICIES), default="clamped",
                      help="clamped (the report), configured (the one-line fix), admission "
                      "(PR #21720); default clamped")
    scen.add_argument("--backend", choices=BACKENDS, default="gloo",
                      help="gloo (CPU) or nccl (one GPU per rank); default gloo")
    scen.add_argument("--in-process", action="store_true",
                      help="run the ranks as threads of this process (no torch.distributed)")
    scen.add_argument("--timeout", type=float, default=120.0,
                      help="seconds before hung ranks are killed (default 120)")
    scen.set_defaults(handler=_scenario, subparser=scen)
    return parser


def _repro(args, parser) -> int:
    from kvlab.analysis.repro import run_repro

    try:
        result = run_repro(pool_mib=args.pool_mib, context=args.context, policy=args.policy,
                           tokens_per_block=args.tokens_per_block, max_seq_len=args.max_seq_len,
                           device=args.device)
    except (ValueError, TypeError, MemoryError) as exc:
        parser.error(str(exc))
    print(result.explain())
    return REPRO_EXIT_CODES[result.outcome]


def _walkthrough(args, parser) -> int:
    from kvlab.notebook.walkthrough import (NOTEBOOK_DIR, check_parameters, image_server, run_notebook,
                              summary_table, walkthrough_notebooks)

    notebooks = [p for p in walkthrough_notebooks(args.notebook_dir or NOTEBOOK_DIR)
                 if not args.only or any(p.name.startswith(o) for o in args.only)]
    if not notebooks:
        parser.error(f"no notebook matches --only {args.only}")
    parameters = dict(args.parameter)
    if args.smoke:
        parameters["SMOKE"] = True
    try:
        check_parameters(parameters, notebooks)
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    try:
        for folder in ("notebooks", "html"):
            (args.build_dir / folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--build-dir {args.build_dir} cannot hold the output folders: {exc.strerror}")
    runs = []
    with image_server():
        for path in notebooks:
            print(f"running {path.name} ...", flush=True)
            runs.append(run_notebook(path, args.build_dir, parameters))
    print()
    print(summary_table(runs))
    print(f"\nexecuted notebooks: {args.build_dir / 'notebooks'}   HTML: {args.build_dir / 'html'}")
    return 1 if any(run.error for run in runs) else 0


def _scenario(args, parser) -> int:
    from kvlab.run.distributed import run_ranks, scenario_config
    from kvlab.run.scenarios import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.name)
        config = scenario_config(scenario, args.ranks, args.policy)
        print(f"{scenario.title}\n{scenario.gpu} x {config.world_size}, policy {args.policy}", flush=True)
        result = run_ranks(config, backend=args.backend, in_process=args.in_process,
                           timeout_s=args.timeout)
    except (ScenarioError, ValueError, TypeError, MemoryError) as exc:
        parser.error(str(exc))
    print(result.explain())
    unfinished = any(s in ("waiting", "running") for r in result.ranks for s in r.status.values())
    ended = "unfinished" if result.ended == "completed" and unfinished else result.ended
    return SCENARIO_EXIT_CODES[ended]


def main(argv: Optional[List[str]] = None) -> int:
    from kvlab.run.signals import RunStopped

    args = build_parser().parse_args(argv)
    try:
        return args.handler(args, args.subparser)
    except RunStopped as stopped:  # every rank is already stopped and reaped
        print(f"kvlab: {stopped}", file=sys.stderr)
        return stopped.code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
