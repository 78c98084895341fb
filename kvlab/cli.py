"""The ``kvlab`` command (also ``python -m kvlab``).
Its subcommands: ``kvlab NAME --help`` says what each does and its exit codes. Bad arguments exit
2 with a usage line and no traceback; a signal stops every rank and exits 128 + its number; an
output that cannot be written (a full disk) exits 74 with one line.
"""

from __future__ import annotations

import argparse
import ast
import errno
import importlib
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

from kvlab.core.request import UNFINISHED_STATUSES
from kvlab.sched.policies import POLICIES, TRTLLM_POLICIES

#: A write that failed: a full disk or quota, an I/O error, a closed descriptor.
OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF)
OUTPUT_ERROR_EXIT = 74  # sysexits.h's EX_IOERR
#: ``kvlab repro``'s policies: one resize, no admission check, so the two "none/" ones.
REPRO_POLICIES = tuple(p for p in TRTLLM_POLICIES if POLICIES[p][0] == "none")
REPRO_EXIT_CODES = {"ok": 0, "refused": 3, "crash": 4}
SCENARIO_EXIT_CODES = {
    "completed": 0,
    "unfinished": 3,
    "shut down": 4,
    "died": 5,
    "hung": 5,
    "deadline": 6,
}
MAX_PARAMETER_CHARS = 200  # the longest VALUE of -p NAME=VALUE: a number, a bool or a short word
MAX_ERROR_CHARS = 300  # the longest usage error printed: argparse quotes a bad value whole


def _parameter(text: str):
    """NAME=VALUE with VALUE a Python literal (int, float, bool, str)."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        shown = text if len(text) <= 60 else f"{text[:60]}... ({len(text)} characters)"
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {shown!r}")
    if len(value) > MAX_PARAMETER_CHARS:
        raise argparse.ArgumentTypeError(
            f"the value of {name} must be at most {MAX_PARAMETER_CHARS} "
            f"characters, got {len(value)}"
        )
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return name, value


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), whose usage error cuts a long message."""

    def error(self, message):
        if len(message) > MAX_ERROR_CHARS:
            message = f"{message[:MAX_ERROR_CHARS]}... (cut: {len(message):,} characters)"
        super().error(message)


@contextmanager
def _usage_errors(parser, *errors: type[BaseException]):
    """A bad value met past argparse (by the library's doors) is a usage error too."""
    try:
        yield
    except errors as exc:
        parser.error(str(exc))


def _command(sub, name: str, handler, summary: str, description: str):
    parser = sub.add_parser(name, help=summary, description=description)
    parser.set_defaults(handler=handler, subparser=parser)
    return parser


def _add_notebook_choice(parser: argparse.ArgumentParser, example: str, holds: str) -> None:
    """``--only`` and ``--notebook-dir``, as walkthrough and slides both take them."""
    only = f"only notebooks whose name starts with PREFIX (e.g. {example})"
    parser.add_argument("--only", action="append", default=[], metavar="PREFIX", help=only)
    folder = f"folder of {holds} (default: the kit's notebooks/)"
    parser.add_argument("--notebook-dir", type=Path, default=None, help=folder)


def build_parser() -> argparse.ArgumentParser:
    from kvlab.analysis.replay import ENGINE_POLICIES
    from kvlab.run.distributed import BACKENDS
    from kvlab.run.rank_config import MAX_RANKS

    parser = _Parser(prog="kvlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="{repro,walkthrough,scenario,plan,replay,doctor,slides}",
    )

    add = _command(
        sub,
        "repro",
        _repro,
        "the 4 MiB single-GPU repro of issue #21470",
        "Resize one cache to --context tokens on a pool of --pool-mib MiB (the seed's model "
        "shape). Exit 0 allocated, 3 refused (False), 4 crashed (ValueError).",
    ).add_argument
    add("--pool-mib", type=float, default=4.0, help="KV pool size in MiB (default 4)")
    add("--context", type=int, default=8192, help="context length in tokens (default 8192)")
    policy = (
        "none/clamped (the report's row) or none/configured (the one-line fix's); one resize, "
        "so no admission check (default none/clamped)"
    )
    add("--policy", choices=REPRO_POLICIES, default="none/clamped", help=policy)
    add("--tokens-per-block", type=int, default=32, help="tokens per page (default 32)")
    add("--max-seq-len", type=int, default=8192, help="configured max_seq_len (default 8192)")
    add("--device", default="cpu", help="cpu or cuda (default cpu)")

    walk = _command(
        sub,
        "walkthrough",
        _walkthrough,
        "execute the notebooks and summarise the findings",
        "Execute notebooks/NN_*.ipynb with papermill into BUILD and print what each found.",
    )
    add = walk.add_argument
    parameter = "papermill parameter for every notebook that has it"
    add(
        "-p",
        "--parameter",
        type=_parameter,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=parameter,
    )
    _add_notebook_choice(walk, "02", "NN_*.ipynb notebooks")
    add("--build-dir", type=Path, default=Path("build"), help="output folder (default build)")
    add("--smoke", action="store_true", help="set SMOKE=True (the quick CI run)")

    add = _command(
        sub,
        "scenario",
        _scenario,
        "run a multi-rank scenario (issue-21470) over torch.distributed",
        "Run NAME (a scenario with a deployment block, e.g. issue-21470) on --ranks rank "
        "processes; exit 0 every rank finished, 3 requests unfinished, 4 the engine went down, "
        "5 a rank died or hung, 6 the run passed --deadline.",
    ).add_argument
    add("name", metavar="NAME", help="scenario name (issue-21470 or a file stem) or a .yaml path")
    ranks = f"number of ranks, 1..{MAX_RANKS} (default: the scenario's)"
    add("--ranks", type=int, default=None, help=ranks)
    policy = (
        "none/clamped (the report), none/configured (the one-line fix), "
        "capacity (PR #21720's admission control); default none/clamped"
    )
    add("--policy", choices=TRTLLM_POLICIES, default="none/clamped", help=policy)
    nccl = "gloo (CPU) or nccl (one GPU per rank); default gloo"
    add("--backend", choices=BACKENDS, default="gloo", help=nccl)
    threads = "run the ranks as threads of this process (no torch.distributed)"
    add("--in-process", action="store_true", help=threads)
    timeout = (
        "seconds without progress (no rank stepping) before the ranks are called hung "
        "and killed; slow ranks that keep stepping are not (default 120)"
    )
    add("--timeout", type=float, default=120.0, help=timeout)
    deadline = (
        "seconds the whole run may take; past them every rank is stopped and the run "
        "says so (default: none)"
    )
    add("--deadline", type=float, default=None, help=deadline)

    plan = _command(
        sub,
        "plan",
        _plan,
        "preflight: will a deployment hit issue #21470?",
        "Plan a deployment without running it: each rank's KV quota, pool, max_seq_len clamp, "
        "page-index row, and what every context length meets under each policy, for the KV "
        "cache manager it gets (V1 or V2). Exit 0 safe, 3 a context stalls, 4 a context or the "
        "construction raises, 5 most contexts up to max_seq_len are refused (max_num_tokens, "
        "or no room).",
    )
    _add_deployment_flags(plan, listing=True)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")

    replay = _command(
        sub,
        "replay",
        _replay,
        "your traffic on your deployment: who crashes, stalls, waits",
        "Replay a trace file on the pool kvlab plan gives the deployment (the rank that "
        "matters, after the MIN), under each engine and policy, and print per run: finished, "
        "rejected, unfinished, crashed, the first request that crashed or stalled the engine "
        "and why, waits and time to first token (p50/p99), preemptions, goodput, prompt tokens "
        "found cached. Traces: Azure's CSV, Mooncake's JSON lines, or your own CSV or JSON lines "
        "(arrival_s, prompt_tokens, output_tokens[, hash_ids][, conversation_id]; docs/TRACES.md). "
        "Exit 0 every request served, 3 a run stalled or left requests unfinished, 4 a run "
        "crashed, 5 every run rejected most requests.",
    )
    replay.add_argument("--trace", type=Path, required=True, metavar="FILE", help="the trace")
    _add_deployment_flags(replay, listing=False)
    engines = "trtllm (its three policies), vllm or sglang (as they ship), or all (default)"
    replay.add_argument("--engine", choices=[*ENGINE_POLICIES, "all"], default="all", help=engines)
    policy_help = "only these policies (repeatable): " + ", ".join(POLICIES)
    replay.add_argument(
        "--policy", action="append", choices=list(POLICIES), default=[], help=policy_help
    )
    spi = (
        "seconds a scheduler iteration takes: places arrivals and says waits in seconds too "
        "(default: arrivals at 0.05 s, waits in iterations)"
    )
    replay.add_argument("--seconds-per-iteration", type=float, default=None, help=spi)
    replay.add_argument("--limit", type=int, default=None, help="the first N rows only")
    steps = "stop a run after this many iterations (default: none)"
    replay.add_argument("--max-steps", type=int, default=None, help=steps)
    real = "vLLM's and SGLang's real schedulers (set up by scripts/setup.sh) instead of the peers"
    replay.add_argument("--real", action="store_true", help=real)
    replay.add_argument("--json", action="store_true", help="print the replay as JSON")
    plot = "write the waits over time to this HTML file (plotly, offline)"
    replay.add_argument("--plot", type=Path, default=None, metavar="FILE.html", help=plot)

    doctor = _command(
        sub,
        "doctor",
        _doctor,
        "check this laptop for the workshop (run it the day before)",
        "One line per check: ok, warn or FAIL with the fix. Exit 0 when every required check "
        "passes (warnings allowed), 1 otherwise.",
    )
    room = "print the checks as JSON (collect a room's results)"
    doctor.add_argument("--json", action="store_true", help=room)

    slides = _command(
        sub,
        "slides",
        _slides,
        "an HTML slide deck per notebook, offline",
        "Write OUT/<notebook>.html for each notebook (the walk, then the exercises): one slide "
        "per heading with its first paragraph, and the first figure of the section where an "
        "executed copy is in EXECUTED (kvlab walkthrough's build/notebooks); OUT/index.html "
        "links them.",
    )
    _add_notebook_choice(slides, "02, ex1", "NN_*.ipynb notebooks and workshop/")
    figures = "executed copies, for the figures (default build/notebooks)"
    slides.add_argument("--executed-dir", type=Path, default=Path("build/notebooks"), help=figures)
    out = "output folder (default build/slides)"
    slides.add_argument("--out", type=Path, default=Path("build/slides"), help=out)
    return parser


def _add_deployment_flags(parser: argparse.ArgumentParser, listing: bool) -> None:
    """The deployment's flags, kvlab plan's and kvlab replay's."""
    from kvlab.analysis.gpus import GPUS

    add = parser.add_mutually_exclusive_group(required=True).add_argument
    add("--model", metavar="NAME", help="a preset of data/models/ (see kvlab plan --list)")
    config = (
        "a Hugging Face config.json, or a folder holding one (read offline; needs kvlab[models])"
    )
    add("--config", type=Path, metavar="PATH", help=config)
    walk_example = "a deployment of the walk: issue-21470, rtx5080-4mib, pr-17261"
    add("--example", metavar="NAME", help=walk_example)
    if listing:
        add("--list", action="store_true", help="list the model, GPU and example presets")
    add = parser.add_mutually_exclusive_group().add_argument
    add("--gpu", choices=sorted(GPUS), help="a GPU preset")
    add("--gpu-gib", type=float, help="the GPU's total memory, GiB")
    for flag, (kind, text) in PLAN_OPTIONS.items():
        parser.add_argument(flag, type=kind, default=None, help=text)
    for flag, text in PLAN_SWITCHES.items():
        parser.add_argument(flag, action="store_true", default=None, help=text)


#: ``kvlab plan``'s valued options: flag -> (type, help), each setting the Deployment field of
#: the flag's name; unset ones keep the example's value, or Deployment's default.
PLAN_OPTIONS = {
    "--weights-gib": (float, "weights per rank, GiB (default: parameters x dtype / (tp x pp))"),
    "--weights-dtype": (
        str,
        "dtype to derive the weights in; fp8 and nvfp4 keep the embeddings, routers and norms in "
        "the model's dtype (default: the checkpoint's quantization, else the model's dtype)",
    ),
    "--workspace-gib": (float, "persistent workspace per rank, GiB (default 0)"),
    "--workspace-skew-gib": (float, "extra workspace growing to the last rank, GiB"),
    "--activations-gib": (float, "activation peak per rank, GiB (default 0)"),
    "--non-torch-gib": (float, "NCCL, CUDA graphs, context: GiB (default 0)"),
    "--free-gpu-memory-fraction": (float, "default 0.9"),
    "--kv-quota-gib": (float, "kv_cache_config.max_gpu_total_bytes, in GiB"),
    "--tp-size": (int, "tensor parallelism (default 1)"),
    "--pp-size": (int, "pipeline parallelism (default 1)"),
    "--ranks": (int, "ranks that build a pool; must be tp x pp (the default)"),
    "--max-seq-len": (
        int,
        "default, and upper bound: what the executor infers from the config "
        "(max_position_embeddings x the rope factor)",
    ),
    "--max-batch-size": (int, "default 2048"),
    "--max-new-tokens": (int, "new tokens per request (default 64)"),
    "--max-num-tokens": (int, "token budget per pass (default 8192)"),
    "--tokens-per-block": (int, "default 32"),
    "--kv-dtype": (
        str,
        "KV cache dtype (default: the checkpoint's KV quantization, else the model's dtype)",
    ),
    "--mamba-ssm-dtype": (
        str,
        "hybrids' SSM state dtype (default: the model's dtype, as mamba_ssm_cache_dtype='auto')",
    ),
    "--host-cache-gib": (
        float,
        "host tier per rank, GiB (default: none under V1, an automatic tier under V2)",
    ),
    "--manager": (
        str,
        "KV cache manager: auto (the default: V2 only for the architectures that declare it), "
        "v1 or v2",
    ),
    "--max-beam-width": (int, "beam width (default 1; above 1 V2 falls back to V1)"),
    "--spec-mode": (str, "speculative decoding: mtp or eagle3 (default none)"),
    "--max-draft-len": (int, "draft tokens per step with --spec-mode"),
}
#: ``kvlab plan``'s switches: flag -> help; unset ones keep the example's value or the default.
PLAN_SWITCHES = {
    "--attention-dp": "attention data parallelism (KV heads not split)",
    "--chunked-prefill": "chunked prefill (default off)",
    "--disable-overlap-scheduler": "the overlap scheduler off (on by default: the KV manager's "
    "max_seq_len is 1 + max_draft_len more)",
    "--allow-long-max-model-len": "keep a --max-seq-len past the model's own limit "
    "(TLLM_ALLOW_LONG_MAX_MODEL_LEN)",
}


def _deployment(args, parser):
    """The Deployment the flags describe (kvlab plan's and kvlab replay's)."""
    import dataclasses

    from kvlab.analysis.deployment import Deployment, example_deployments
    from kvlab.analysis.gpus import GPUS
    from kvlab.analysis.models import load_model, read_config

    fields = [flag[2:].replace("-", "_") for flag in [*PLAN_OPTIONS, *PLAN_SWITCHES]]
    given = {f: getattr(args, f) for f in fields if getattr(args, f) is not None}
    if args.gpu is not None or args.gpu_gib is not None:
        given["gpu_gib"] = GPUS[args.gpu].gib if args.gpu is not None else args.gpu_gib
    if args.example is not None:
        examples = example_deployments()
        if args.example not in examples:
            parser.error(f"--example must be one of {sorted(examples)}, got {args.example!r}")
        return dataclasses.replace(examples[args.example], **given)
    if "gpu_gib" not in given:
        parser.error("--gpu or --gpu-gib is needed with --model or --config")
    model = load_model(args.model) if args.model is not None else read_config(args.config)
    return Deployment(model=model, **given)


def _plan(args, parser) -> int:
    import json

    from kvlab.analysis.deployment import example_deployments, plan_deployment
    from kvlab.analysis.gpus import GPUS
    from kvlab.analysis.models import ConfigError, model_names

    if args.list:
        print("models:   " + ", ".join(model_names()))
        print("GPUs:\n" + "\n".join(f"  {n}: {g.describe()}" for n, g in GPUS.items()))
        print("examples: " + ", ".join(example_deployments()))
        return 0
    with _usage_errors(parser, ConfigError, ImportError, ValueError, TypeError):
        plan = plan_deployment(_deployment(args, parser))
    print(json.dumps(plan.to_dict(), indent=2) if args.json else plan.explain())
    return plan.exit_code


def _replay(args, parser) -> int:
    import json

    from kvlab.analysis.deployment import plan_deployment
    from kvlab.analysis.models import ConfigError
    from kvlab.analysis.replay import ENGINE_POLICIES, replay_trace

    engines = list(ENGINE_POLICIES) if args.engine == "all" else [args.engine]
    with _usage_errors(parser, ConfigError, ImportError, ValueError, TypeError):
        plan = plan_deployment(_deployment(args, parser))
        if args.plot is not None and args.plot.suffix.lower() != ".html":
            parser.error(f"--plot must name an .html file, got {str(args.plot)!r:.80}")
        steps = {} if args.max_steps is None else {"max_steps": args.max_steps}
        real = None
        if args.real:
            from kvlab.backends.engines import ENGINES

            real = {name: backend for name, (backend, _) in ENGINES.items()}
        result = replay_trace(
            args.trace,
            plan,
            engines,
            args.policy,
            args.seconds_per_iteration,
            real=real,
            limit=args.limit,
            **steps,
        )
    if args.plot is not None:
        from kvlab.notebook.viz.replay import replay_figure

        try:
            replay_figure(result).write_html(args.plot, include_plotlyjs=True)
        except OSError as exc:
            parser.error(f"--plot cannot write {str(args.plot)!r:.80}: {exc.strerror}")
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.explain())
    return result.exit_code


def _repro(args, parser) -> int:
    from kvlab.analysis.repro import run_repro

    with _usage_errors(parser, ValueError, TypeError, MemoryError):
        result = run_repro(
            pool_mib=args.pool_mib,
            context=args.context,
            policy=POLICIES[args.policy][1],
            tokens_per_block=args.tokens_per_block,
            max_seq_len=args.max_seq_len,
            device=args.device,
        )
    print(result.explain())
    return REPRO_EXIT_CODES[result.outcome]


def _notebooks(args, parser, default_dir, listing) -> tuple[Path, list[Path]]:
    """``--notebook-dir``'s folder (or a usage error) and its notebooks that ``--only`` selects."""
    folder = Path(args.notebook_dir or default_dir)
    try:
        found = folder.is_dir()
    except OSError:  # a name too long for the file system
        found = False
    if not found:
        text = str(folder)
        shown = text if len(text) <= 200 else f"{text[:60]}... ({len(text):,} characters)"
        parser.error(f"--notebook-dir {shown} is not a folder")
    chosen = [p for p in listing(folder) if any(p.name.startswith(o) for o in args.only or [""])]
    return folder, chosen


def _walkthrough(args, parser) -> int:
    from kvlab.notebook import walkthrough as wt
    from kvlab.run.signals import Stopped

    notebook_dir, notebooks = _notebooks(args, parser, wt.NOTEBOOK_DIR, wt.walkthrough_notebooks)
    if not notebooks and not args.only:
        parser.error(f"--notebook-dir {notebook_dir} holds no notebook named NN_*.ipynb")
    if not notebooks:
        parser.error(f"no notebook matches --only {args.only}")
    parameters = dict(args.parameter) | ({"SMOKE": True} if args.smoke else {})
    with _usage_errors(parser, ValueError, TypeError):
        wt.check_parameters(parameters, notebooks)
    try:
        (args.build_dir / "notebooks").mkdir(parents=True, exist_ok=True)
        (args.build_dir / "html").mkdir(exist_ok=True)
    except OSError as exc:
        parser.error(f"--build-dir {args.build_dir} cannot hold the output folders: {exc.strerror}")
    runs, interrupted, signum = [], None, int(signal.SIGINT)
    with wt.stop_signals(), wt.private_files(), wt.image_server():
        for path in notebooks:
            print(f"running {path.name} ...", flush=True)
            try:
                runs.append(wt.run_notebook(path, args.build_dir, parameters))
            except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: say what ran and what not
                interrupted = path
                signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
                break
    print(f"\n{wt.summary_table(runs)}")
    if interrupted is not None:
        left = ", ".join(p.name for p in notebooks[len(runs) :])
        how = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        stopped = f"\nstopped by {how} while running {interrupted.name}; not run: {left}"
        print(stopped, file=sys.stderr)
        return 128 + signum
    print(f"\nexecuted notebooks: {args.build_dir / 'notebooks'}   HTML: {args.build_dir / 'html'}")
    if (failure := wt.image_failure()) is not None:
        print(f"figures: not rendered as images ({failure}); the HTML says so in their place")
    return 1 if any(run.error for run in runs) else 0


def _doctor(args, parser) -> int:
    from kvlab.doctor import as_json, ready, report, run_checks

    results = run_checks()
    print(as_json(results) if args.json else report(results))
    return 0 if ready(results) else 1


def _slides(args, parser) -> int:
    from kvlab.core.paths import NOTEBOOK_DIR
    from kvlab.slides import build_deck, build_index, deck_notebooks

    notebook_dir, notebooks = _notebooks(args, parser, NOTEBOOK_DIR, deck_notebooks)
    if not notebooks and not args.only:
        parser.error(f"--notebook-dir {notebook_dir} holds no notebook")
    if not notebooks:
        parser.error(f"no notebook in {notebook_dir} matches --only {args.only}")
    try:
        with _usage_errors(parser, ValueError):
            decks = [build_deck(path, args.out, args.executed_dir) for path in notebooks]
        index = build_index(decks, args.out)
    except OSError as exc:
        parser.error(f"--out {args.out} cannot hold the decks: {exc.strerror or exc}")
    for deck in decks:
        figures = sum(s.figure is not None for s in deck.slides)
        print(f"{deck.path}: {len(deck.slides)} slides, {figures} figures ({deck.note})")
    print(
        f"open {index} in a browser: arrow keys move between slides, N shows the "
        "speaker notes under the slide, S in a window of their own"
    )
    return 0


def _scenario(args, parser) -> int:
    from kvlab.analysis.sentences import explain_run
    from kvlab.run.distributed import run_ranks
    from kvlab.run.rank_config import scenario_config
    from kvlab.run.scenarios import ScenarioError, load_scenario

    with _usage_errors(parser, ScenarioError, ValueError, TypeError, MemoryError):
        scenario = load_scenario(args.name)
        config = scenario_config(scenario, args.ranks, args.policy)
        assert scenario.deployment is not None  # scenario_config refuses a scenario without one
        reported, ranks = scenario.deployment.ranks, config.world_size
        changed = f" (the scenario's {reported} ranks changed to {ranks})"
        print(f"{scenario.title}{changed if ranks != reported else ''}", flush=True)
        print(f"{scenario.gpu} x {ranks}, policy {args.policy}", flush=True)
        result = run_ranks(
            config,
            backend=args.backend,
            in_process=args.in_process,
            timeout_s=args.timeout,
            deadline_s=args.deadline,
        )
    print(explain_run(result))
    unfinished = result.unrouted or any(
        s in UNFINISHED_STATUSES for r in result.ranks for s in r.status.values()
    )
    ended = "unfinished" if result.ended == "completed" and unfinished else result.ended
    return SCENARIO_EXIT_CODES[ended]


#: What every command imports first, whole: a stop raised inside their imports (a signal
#: under load, a second after the start) was lost in numpy's C code and left it half loaded
#: for the command to trip over ("cannot load module more than once", "no attribute 'matrix'").
PRELOADED = ("numpy", "torch", "yaml")


def main(argv: list[str] | None = None) -> int:
    """The command; SIGTERM and SIGHUP raise as Ctrl-C does while it runs (then 128 + n)."""
    from kvlab.run.signals import RunStopped, Stopped, signals_held, stopped_by_term_and_hup

    with stopped_by_term_and_hup():
        try:
            with signals_held():  # a signal meanwhile stops the command once they are whole
                for name in PRELOADED:
                    importlib.import_module(name)
            args = build_parser().parse_args(argv)  # the parser's choices load kvlab, torch too
            code = args.handler(args, args.subparser)
            sys.stdout.flush()  # a full disk shows here, not in the interpreter's last flush
            return code
        except RunStopped as stopped:  # every rank is already stopped and reaped
            print(f"kvlab: {stopped}", file=sys.stderr)
            assert isinstance(stopped.code, int)  # RunStopped exits with 128 + its signal
            return stopped.code
        except KeyboardInterrupt as exc:  # a signal outside a run's own stop (starting, printing)
            number = exc.signum if isinstance(exc, Stopped) else int(signal.SIGINT)
            print(f"kvlab: stopped by {signal.Signals(number).name}", file=sys.stderr)
            return 128 + number
        except BrokenPipeError:  # the reader went away (`kvlab plan ... | head`): stop quietly
            _drop_stdout()
            return 128 + signal.SIGPIPE
        except OSError as exc:
            if exc.errno not in OUTPUT_ERRNOS:
                raise
            _drop_stdout()
            print(f"kvlab: cannot write the output: {exc.strerror}", file=sys.stderr)
            return OUTPUT_ERROR_EXIT


def run() -> None:
    """The ``kvlab`` command (and ``python -m kvlab``): :func:`main`, then exit with its code.
    Once main() has returned the work is done and said, so a signal arriving while Python shuts
    down (torch's teardown takes a moment) is ignored rather than killing the process."""
    code = main()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    sys.exit(code)


def _drop_stdout() -> None:
    """What is left in stdout's buffer goes nowhere: no second error at exit's flush."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":  # pragma: no cover
    run()
