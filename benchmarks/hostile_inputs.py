"""Hostile inputs against kvlab's public doors, kept as a corpus that can be re-run; JSON lines.

The corpus is generated, not listed: (a) the command line, every option of every subcommand given
each of CLI_VALUES (empty, negative, zero, nan, inf, 1e309, 10**30, 5,000 digits, text, a folder,
/dev/zero, a missing file, garbage, a 10 MB file, unicode), ``kvlab plan --config`` on a preset's
config.json with one field mutated (or removed) at a time, ``kvlab scenario`` on each
data/scenarios/*.yaml with one field mutated at a time, every door that reads a file (the three
trace formats, config.json, a scenario, an executed notebook) given special files (a FIFO, a
folder, a dangling link, /dev/zero) and tampered ones (cut short, empty, a BOM, UTF-16, NUL
bytes, nested deep, a key twice, 5,000 digits), ``plan`` and ``replay`` with 2 to 4 numeric
options set at once from edge values, and a few commands sent SIGINT, SIGTERM or SIGHUP at a
random moment (exit 128 + n with no traceback is clean, a finish first accepted); (b) the
library: each parameter of each callable in ``kvlab.__all__`` and of each kvlab function the
notebooks import (``from kvlab...``, ``viz.X``, ``workshop.X``) given each of API_VALUES, the
other parameters at a known good value; (c) the real-engine protocol: the backend fed a fake
driver whose output is a valid run with one line changed (a field replaced, a key dropped, cut
short, doubled, nested deep), clean when it ends in an EngineProcessError keeping every request.

Bounds: each input runs in its own process group (a fork, which execs ``python -m kvlab`` for
the command line), under RLIMIT_AS of 4 GiB and RLIMIT_FSIZE of 256 MiB, with a wall-clock limit
of 20 s (CLI; 60 s for ``walkthrough``, which starts a kernel) or 10 s (API), after which the
group is killed. Each input is classified: clean (CLI exit 2 with a short message; API a
TypeError, ValueError, KeyError or kvlab error naming the parameter), traceback, raw-error
(another exception, or one that does not name the parameter), accepted (no error: for a human
to judge), hang, memory (MemoryError or killed by a signal under the bound), leak (files left in
the input's TMPDIR, new entries in the repository's top level or notebooks/, or processes left
in its group), undocumented-exit (CLI) and long-message (an error over 4 KiB). New entries in
/tmp while an input ran are shown (``tmp_new``) but not counted: other users share /tmp. One
JSON line per non-clean input (or one with ``tmp_new``), then a summary line. A full corpus
(about 9,400 inputs) takes hours on two cores: ``--seconds`` bounds a run, on a shuffled order.
``--load N`` runs N busy loops beside it (the summary gives the load average): a door that
holds only on a quiet machine is a defect too.

    python benchmarks/hostile_inputs.py [--only cli|api|protocol] [--match TEXT] [--limit N] [--jobs J]
                                        [--seconds S] [--out FILE] [--load N]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import importlib
import inspect
import json
import math
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
MEMORY_BOUND = 4 << 30
FILE_BOUND = 256 << 20
CLI_SECONDS, WALKTHROUGH_SECONDS, API_SECONDS = 20.0, 60.0, 10.0
LONG_MESSAGE = 4096
COMBINATIONS = 400  # option combinations of plan and replay in the corpus
SIGNAL_CASES = 10  # signals at random moments, per command of SIGNAL_COMMANDS
PROTOCOL_CASES = 200  # fake real-engine drivers, each a valid run with one line changed
CLASSES = (
    "clean",
    "traceback",
    "raw-error",
    "accepted",
    "hang",
    "memory",
    "leak",
    "undocumented-exit",
    "long-message",
)

#: Exit codes each subcommand documents besides 2 (bad arguments).
DOCUMENTED_EXITS = {
    "repro": {0, 3, 4},
    "walkthrough": {0, 1},
    "scenario": {0, 3, 4, 5, 6},
    "plan": {0, 3, 4, 5},
    "replay": {0, 3, 4, 5},
    "doctor": {0, 1},
    "slides": {0},
}

#: Hostile option values; a callable gets the fixtures folder.
CLI_VALUES = {
    "empty": "",
    "negative": "-1",
    "zero": "0",
    "nan": "nan",
    "inf": "inf",
    "1e309": "1e309",
    "10**30": str(10**30),
    "huge-int": "9" * 5000,
    "text": "x",
    "folder": lambda fx: str(fx),
    "dev-zero": "/dev/zero",
    "missing-file": lambda fx: str(fx / "missing.json"),
    "garbage-file": lambda fx: str(fx / "garbage.bin"),
    "10mb-file": lambda fx: str(fx / "ten_mb.txt"),
    "unicode": "ü€😀\u202e",
}

#: Hostile Python values: factories, so each input gets a fresh generator.
API_VALUES = {
    "None": lambda: None,
    "nan": lambda: math.nan,
    "inf": lambda: math.inf,
    "-1": lambda: -1,
    "0": lambda: 0,
    "2**63": lambda: 2**63,
    "10**30": lambda: 10**30,
    "''": lambda: "",
    "'x'": lambda: "x",
    "[]": lambda: [],
    "{}": lambda: {},
    "generator": lambda: (i for i in range(3)),
    "ndarray-2d": lambda: __import__("numpy").zeros((2, 2)),
    "True": lambda: True,
}

#: Hostile values written into config.json and scenario YAML fields; DELETE removes the field.
DELETE = object()
FIELD_VALUES = {
    "null": None,
    "-1": -1,
    "0": 0,
    "nan": math.nan,
    "inf": math.inf,
    "10**30": 10**30,
    "'x'": "x",
    "''": "",
    "[]": [],
    "{}": {},
    "true": True,
    "deleted": DELETE,
}


# ---------------------------------------------------------------- fixtures and the CLI corpus


def make_fixtures(root: Path) -> Path:
    fx = root / "fixtures"
    (fx / "notebooks").mkdir(parents=True)
    (fx / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,4\n0.1,200,4\n")
    (fx / "garbage.bin").write_bytes(bytes(random.Random(0).randrange(256) for _ in range(4096)))
    (fx / "ten_mb.txt").write_bytes(b"9" * (10 << 20))
    cell = {
        "cell_type": "code",
        "metadata": {"tags": ["parameters"]},
        "execution_count": None,
        "outputs": [],
        "source": "SMOKE: bool = False\npool_mib: float = 4.0\n",
    }
    title = {"cell_type": "markdown", "metadata": {}, "source": "# tiny"}
    notebook = {
        "cells": [title, cell],
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    }
    (fx / "notebooks" / "00_tiny.ipynb").write_text(json.dumps(notebook))
    return fx


def cli_options():
    """(subcommand, option, takes a value, base arguments) for every option of every subcommand."""
    from kvlab.cli import build_parser

    bases = {
        "repro": [],
        "doctor": [],
        "slides": ["--only", "02"],
        "walkthrough": ["--only", "00", "--notebook-dir", "{fx}/notebooks"],
        "scenario": ["issue-21470", "--in-process"],
        "plan": ["--model", "llama-3.1-8b"],
        "replay": [
            *("--trace", "{fx}/trace.csv", "--model", "llama-3.1-8b", "--gpu", "h100-80gb"),
            *("--engine", "trtllm", "--policy", "capacity"),
        ],
    }
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, subparser in sub.choices.items():
        for action in subparser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            option = action.option_strings[-1] if action.option_strings else None
            base = list(bases[name])
            if option in base:  # the hostile value replaces the base's value for this option
                i = base.index(option)
                del base[i : i + 2]
            if option is None and name == "scenario":
                base = ["--in-process"]
            if option in ("--model", "--config", "--example", "--list"):
                base = []
            yield name, option, action.nargs != 0, base


def cli_corpus(fx: Path):
    cases = []
    for name, option, takes_value, base in cli_options():
        values = CLI_VALUES.items() if takes_value else [("text", "x")]
        for label, value in values:
            value = value(fx) if callable(value) else value
            hostile = [value] if option is None else [f"{option}={value}"]
            if option == "--parameter":  # NAME=VALUE: hostile as the whole and as the value
                cases.append(_cli(name, option, f"whole {label}", base + hostile, fx))
                hostile = [f"{option}=pool_mib={value}"]
            cases.append(_cli(name, option, label, base + hostile, fx))
    cases += config_corpus(fx)
    cases += scenario_corpus(fx)
    cases += files_corpus(fx)
    for case in combination_corpus(COMBINATIONS) + signal_corpus(SIGNAL_CASES):
        case["argv"] = [a.replace("{fx}", str(fx)) for a in case["argv"]]
        cases.append(case)
    return cases


def _cli(sub, target, label, argv, fx):
    argv = [a.replace("{fx}", str(fx)) for a in [sub, *argv]]
    return {"door": "cli", "target": f"{sub} {target or 'NAME'}", "label": label, "argv": argv}


def _leaves(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, path + (key,))
    elif isinstance(node, list) and node:
        for i, value in enumerate(node):
            yield from _leaves(value, path + (i,))
    if path:
        yield path


def _mutated(doc, path, value):
    doc = copy.deepcopy(doc)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def config_corpus(fx: Path):
    """``kvlab plan --config`` on presets' config.json, one field mutated at a time, and whole
    files that are not a config at all."""
    from kvlab.analysis.models import load_preset

    cases, folder = [], fx / "configs"
    folder.mkdir()
    for preset in ("llama-3.1-8b", "qwen3.5-27b"):
        config = load_preset(preset)["config"]
        for path in _leaves(config):
            if len(path) > 2:
                continue
            for label, value in FIELD_VALUES.items():
                file = folder / f"{preset}-{len(cases)}.json"
                file.write_text(json.dumps(_mutated(config, path, value)))
                cases.append(
                    {
                        "door": "cli",
                        "target": f"plan --config {preset}:{'.'.join(map(str, path))}",
                        "label": label,
                        "argv": ["plan", "--config", str(file), "--gpu", "h200"],
                    }
                )
    wholes = {
        "empty": "",
        "list": "[]",
        "nested-100k": "[" * 100_000 + "]" * 100_000,
        "number": "1e309",
        "not-json": "{'a': 1}",
        "bom": "\ufeff{}",
    }
    for label, text in wholes.items():
        file = folder / f"whole-{label}.json"
        file.write_text(text)
        cases.append(
            {
                "door": "cli",
                "target": "plan --config <whole file>",
                "label": label,
                "argv": ["plan", "--config", str(file), "--gpu", "h200"],
            }
        )
    return cases


def scenario_corpus(fx: Path):
    """``kvlab scenario`` on each shipped scenario with one field mutated (or removed) at a time
    (of ``assumptions``, only the first entry's fields and each entry whole)."""
    cases, folder = [], fx / "scenarios"
    folder.mkdir()
    for source in sorted((REPO / "data" / "scenarios").glob("*.yaml")):
        doc = yaml.safe_load(source.read_text())
        first = next(iter(doc.get("assumptions", {})), None)
        for path in _leaves(doc):
            if path[0] == "assumptions" and len(path) > 2 and path[1] != first:
                continue
            for label, value in FIELD_VALUES.items():
                file = folder / str(len(cases)) / source.name  # the stem is the scenario's name
                file.parent.mkdir()
                file.write_text(yaml.safe_dump(_mutated(doc, path, value), allow_unicode=True))
                cases.append(
                    {
                        "door": "cli",
                        "target": f"scenario {source.stem}:{'.'.join(map(str, path))}",
                        "label": label,
                        "argv": ["scenario", str(file), "--in-process"],
                    }
                )
    return cases


def _special_files(folder: Path, good: str, suffix: str) -> dict[str, str]:
    """Files that are not what a door reads, next to a good one's text: special files (a
    FIFO, a folder, a dangling link, a device), and tampered copies (cut short, empty, a BOM,
    UTF-16, NUL bytes, nested deep, a key twice, a 5,000-digit number). Label -> path."""
    folder.mkdir(parents=True)
    files = {"fifo": folder / f"fifo{suffix}", "folder": folder / f"folder{suffix}"}
    os.mkfifo(files["fifo"])
    files["folder"].mkdir()
    files["dangling-link"] = folder / f"link{suffix}"
    files["dangling-link"].symlink_to(folder / "gone")
    texts = {
        "cut-short": good[: len(good) // 2],
        "empty": "",
        "bom": "\ufeff" + good,
        "nul-bytes": good.replace("\n", "\n\0", 1),
        "nested-deep": "[" * 50_000 + "]" * 50_000,
        "digits-5000": good.replace("1", "9" * 5000, 1),
    }
    if good.lstrip().startswith("{"):
        texts["key-twice"] = good.replace("{", '{"a": 1, "a": 2, ', 1)
    for label, text in texts.items():
        files[label] = folder / f"{label}{suffix}"
        files[label].write_text(text, encoding="utf-8")
    files["utf-16"] = folder / f"utf16{suffix}"
    files["utf-16"].write_text(good, encoding="utf-16")
    return {label: str(path) for label, path in files.items()} | {"dev-zero": "/dev/zero"}


def files_corpus(fx: Path):
    """Each door that reads a file given special and tampered files (:func:`_special_files`):
    a trace (Azure's, Mooncake's and kvlab's own), a config.json, a scenario, an executed
    notebook for the slides."""
    traces = REPO / "data" / "traces"
    mooncake = next((traces / "mooncake-fast25").glob("*.jsonl"))
    goods = {
        "replay --trace azure": ((traces / "AzureLLMInferenceTrace_code.csv"), ".csv"),
        "replay --trace mooncake": (mooncake, ".jsonl"),
        "replay --trace kvlab": (fx / "trace.csv", ".csv"),
        "plan --config": (REPO / "data" / "models" / "llama-3.1-8b.json", ".json"),
        "scenario": (REPO / "data" / "scenarios" / "rtx5080-4mib.yaml", ".yaml"),
    }
    argv = {
        "replay --trace": lambda f: [
            *("replay", "--trace", f, "--model", "llama-3.1-8b", "--gpu", "h100-80gb"),
            *("--engine", "trtllm", "--policy", "capacity", "--limit", "50"),
        ],
        "plan --config": lambda f: ["plan", "--config", f, "--gpu", "h200"],
        "scenario": lambda f: ["scenario", f, "--in-process"],
    }
    cases = []
    for target, (source, suffix) in goods.items():
        with open(source, encoding="utf-8") as handle:
            good = "".join(handle.readline() for _ in range(200))  # the first rows will do
        if target == "plan --config":
            good = json.dumps(json.loads(source.read_text())["config"], indent=1)
        folder = fx / "files" / target.replace(" ", "_").replace("-", "")
        for label, path in _special_files(folder, good, suffix).items():
            make = next(v for k, v in argv.items() if target.startswith(k))
            cases.append({"door": "cli", "target": target, "label": label, "argv": make(path)})
    ran = fx / "files" / "executed"
    notebook = (REPO / "notebooks" / "02_single_gpu_repro_4mib.ipynb").read_text()
    for label, path in _special_files(ran, notebook, ".ipynb").items():
        executed = ran / label
        executed.mkdir()
        target = executed / "02_single_gpu_repro_4mib.ipynb"
        if Path(path).is_file():
            shutil.copy(path, target)
        elif label == "fifo":
            os.mkfifo(target)
        cases.append(
            {
                "door": "cli",
                "target": "slides --executed-dir",
                "label": label,
                "argv": ["slides", "--only", "02", "--executed-dir", str(executed)],
            }
        )
    return cases


#: Values an option combination draws from: edges that are valid alone, and hostile ones.
COMBINATION_VALUES = ("0", "1", "2", "31", "32", "33", "64", "0.5", "1e-9", "4096", "-1", "x")


def combination_corpus(count: int, seed: int = 0):
    """``kvlab plan`` and ``kvlab replay`` with 2 to 4 of their numeric options set at once
    from :data:`COMBINATION_VALUES` (where each alone may be fine, together they may not)."""
    rng = random.Random(seed)
    options = {
        name: [opt for sub, opt, takes, _ in cli_options() if sub == name and takes and opt]
        for name in ("plan", "replay")
    }
    numeric = {
        "--gpu-gib",
        "--weights-gib",
        "--workspace-gib",
        "--workspace-skew-gib",
        "--activations-gib",
        "--non-torch-gib",
        "--free-gpu-memory-fraction",
        "--kv-quota-gib",
        "--tp-size",
        "--pp-size",
        "--ranks",
        "--max-seq-len",
        "--max-batch-size",
        "--max-new-tokens",
        "--max-num-tokens",
        "--tokens-per-block",
        "--host-cache-gib",
        "--max-beam-width",
        "--max-draft-len",
        "--seconds-per-iteration",
        "--limit",
        "--max-steps",
    }
    flags = ["--attention-dp", "--chunked-prefill", "--disable-overlap-scheduler"]
    cases = []
    for _ in range(count):
        sub = rng.choice(("plan", "replay"))
        chosen = rng.sample([o for o in options[sub] if o in numeric], rng.randint(2, 4))
        argv = [f"{o}={rng.choice(COMBINATION_VALUES)}" for o in chosen]
        argv += [f for f in flags if rng.random() < 0.3]
        base = (
            ["--example", "issue-21470"]
            if sub == "plan"
            else [*("--trace", "{fx}/trace.csv", "--example", "issue-21470", "--engine", "trtllm")]
        )
        label = " ".join(argv)
        cases.append(
            {
                "door": "cli",
                "target": f"{sub} combination",
                "label": label,
                "argv": [sub, *base, *argv],
            }
        )
    return cases


#: Commands a signal is sent to at a random moment (their start-up, their work, their end).
SIGNAL_COMMANDS = (
    ["scenario", "issue-21470", "--ranks", "4"],
    ["scenario", "issue-21470", "--in-process"],
    ["plan", "--example", "issue-21470"],
    [
        *("replay", "--trace", "{fx}/trace.csv", "--example", "issue-21470"),
        *("--engine", "all"),
    ],
    ["walkthrough", "--only", "00", "--notebook-dir", "{fx}/notebooks"],
    ["doctor"],
)
SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def signal_corpus(per_command: int, seed: int = 0):
    """Each of SIGNAL_COMMANDS sent one of SIGNALS at a random moment in its first 8 s: it must
    exit 128 + the signal's number (or finish first) with no traceback and nothing left."""
    rng = random.Random(seed)
    cases = []
    for argv in SIGNAL_COMMANDS:
        for _ in range(per_command):
            name, after = rng.choice(SIGNALS), round(rng.uniform(0.05, 8.0), 2)
            cases.append(
                {
                    "door": "cli",
                    "target": f"{argv[0]} under a signal",
                    "label": f"{name} after {after} s: {' '.join(argv[1:3])}",
                    "argv": argv,
                    "signal": name,
                    "after_s": after,
                }
            )
    return cases


def _protocol_transcript() -> list[dict]:
    """A vLLM driver's output for three requests (one finished, one started, one queued), as
    a fake driver prints it (protocol: docs/ENGINES.md)."""
    from kvlab.backends.vllm import VLLM

    run = [dict(kind="hello", vllm=VLLM.version, torch="x")]
    run.append(dict(kind="start", run=0, num_gpu_blocks=64, free_blocks=63, max_model_len=2016))
    for request_id, event in (("done", "started"), ("done", "first_token"), ("started", "started")):
        run.append(dict(kind="event", run=0, step=0, id=request_id, event=event))
    run.append(
        dict(
            kind="event",
            run=0,
            step=1,
            id="done",
            event="finished",
            finish_reason="length",
            num_output_tokens=2,
            cause="max_tokens",
        )
    )
    run.append(
        dict(kind="steps", run=0, rows=[[0, 61, 2, 0, 2, 0, 16, 0], [1, 61, 1, 1, 1, 2, 3, 0]])
    )
    run.append(dict(kind="end", run=0, end_step=2, iterations=2))
    return run


#: What a field of a driver line is replaced with.
PROTOCOL_VALUES = ("x", -1, 1e308, None, [], {}, 10**30, [[1]], True, "", "\u202e")


def protocol_corpus(count: int, seed: int = 0):
    """The real-engine backend fed a fake driver whose output is a valid run with one line
    changed: a field replaced (PROTOCOL_VALUES), a key dropped, the line cut short, doubled or
    nested deep. Clean: the run ends in an EngineProcessError (or in a result) with every
    request given a status and a reason; anything raised is raw."""
    rng = random.Random(seed)
    transcript = _protocol_transcript()
    cases = []
    for _ in range(count):
        lines = [json.dumps(line) for line in transcript]
        at = rng.randrange(len(transcript))
        line = dict(transcript[at])
        how = rng.choice(("field", "field", "field", "drop", "cut", "twice", "deep"))
        if how == "field":
            key = rng.choice(sorted(line))
            value = rng.choice(PROTOCOL_VALUES)
            line[key] = value
            lines[at], label = json.dumps(line), f"{line['kind']}.{key} = {value!r:.20}"
        elif how == "drop":
            key = rng.choice(sorted(line))
            del line[key]
            lines[at], label = json.dumps(line), f"{transcript[at]['kind']} without {key}"
        elif how == "cut":
            lines[at], label = lines[at][: len(lines[at]) // 2], f"{line['kind']} cut short"
        elif how == "twice":
            lines.insert(at, lines[at])
            label = f"{line['kind']} twice"
        else:
            lines[at], label = "[" * 100_000, f"{line['kind']} nested deep"
        cases.append(
            {"door": "protocol", "target": "vLLM driver output", "label": label, "lines": lines}
        )
    return cases


def call_protocol(case, case_dir: Path):
    """Run the backend on a fake driver printing ``case["lines"]``; what happened, as a dict."""
    from kvlab.analysis.peer_conformance import NOTEBOOK_04
    from kvlab.backends.vllm import VLLM
    from kvlab.core.request import Request

    driver = case_dir / "driver.py"
    driver.write_text(f"import sys\nfor line in {case['lines']!r}:\n    print(line, flush=True)\n")
    engine = dataclasses.replace(VLLM, driver=driver, python=Path(sys.executable))
    requests = [Request(i, 64, 4, 0) for i in ("done", "started", "queued")]
    try:
        result = engine.run(NOTEBOOK_04, requests, timeout_s=API_SECONDS)
        kept = set(result.status) == {r.request_id for r in requests} and all(
            result.reasons.get(i) is not None for i in result.status
        )
        result.summary(), result.outcome()  # what a reader of the result computes
    except BaseException as exc:  # the classification needs every kind
        return {
            "outcome": "raised",
            "type": type(exc).__name__,
            "message": str(exc)[:300],
            "where": _where(exc),
        }
    error = result.error
    return {
        "outcome": "error" if error is not None else "returned",
        "type": type(error).__name__ if error is not None else None,
        "message": str(error)[:300] if error is not None else "",
        "kept": kept,
    }


# ---------------------------------------------------------------- the API corpus


def notebook_imports():
    """Qualified names of the kvlab callables the notebooks use."""
    names = set()
    for file in sorted((REPO / "notebooks").glob("*.py")) + sorted(
        (REPO / "notebooks" / "workshop").glob("*.py")
    ):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kvlab"):
                names.update(f"{node.module}:{a.name}" for a in node.names)
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("viz", "workshop")
            ):
                module = {"viz": "kvlab.notebook.viz", "workshop": "kvlab.workshop"}[node.value.id]
                names.add(f"{module}:{node.attr}")
    return names


def resolve(qualname):
    module, name = qualname.split(":")
    obj = getattr(importlib.import_module(module), name, None)
    return obj if obj is not None else importlib.import_module(f"{module}.{name}")


def api_targets():
    import kvlab

    names = {f"kvlab:{n}" for n in kvlab.__all__} | notebook_imports()
    for qualname in sorted(names):
        obj = resolve(qualname)
        if (
            callable(obj)
            and not inspect.ismodule(obj)
            and not (isinstance(obj, type) and issubclass(obj, BaseException))
        ):
            yield qualname, obj


def good_values(fx: Path):
    """A known good value per parameter name; ``callable:param`` keys override for one callable."""
    from kvlab import (
        KVCacheManager,
        Request,
        Scheduler,
        SglangServerArgs,
        VllmEngineArgs,
        run_ranks,
        simulate,
    )
    from kvlab.analysis.compare import long_and_small, run_policies
    from kvlab.analysis.deployment import example_deployments, plan_deployment
    from kvlab.analysis.mamba_residency import qwen_plan, scaled_qwen3_5_27b
    from kvlab.analysis.measurements import load_measurements
    from kvlab.analysis.models import load_model, load_preset, read_config
    from kvlab.analysis.peer_conformance import vllm_workloads
    from kvlab.analysis.presets import seed_geometry
    from kvlab.analysis.repro import run_repro, sweep_repro
    from kvlab.analysis.reuse import replay_with_reuse, reuse_ceiling, shared_prefix_story
    from kvlab.notebook.findings import Finding
    from kvlab.notebook.widgets import ranks_model
    from kvlab.run.rank_config import scenario_config
    from kvlab.run.scenarios import load_scenario
    from kvlab.sched.admission import CapacityAdmission

    measurements = REPO / "data" / "measurements" / "h200.json"
    config_file = fx / "config.json"
    config_file.write_text(json.dumps(load_preset("llama-3.1-8b")["config"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        geometry = seed_geometry()
        attention, mamba = scaled_qwen3_5_27b()
        manager = KVCacheManager(geometry, 4 << 20, 2048, 1)
        requests = [Request("r", 10, 5)]
        result = simulate(Scheduler(KVCacheManager(geometry, 4 << 20, 2048, 1)), requests)
        scenario = load_scenario("issue-21470")
        config = scenario_config(scenario, 2)
        distributed = run_ranks(config, in_process=True, progress=False)
        deployment = example_deployments()["rtx5080-4mib"]
        policies = run_policies(long_and_small(num_small=1), policies=("capacity",))
        story = shared_prefix_story()
        plan = qwen_plan()
        read_config(config_file)  # also loads transformers once, before the forks
        good = {
            "geometry": geometry,
            "attention": attention,
            "mamba": mamba,
            "quota_bytes": 4 << 20,
            "max_seq_len": 2048,
            "request_id": "r",
            "prompt_len": 10,
            "max_new_tokens": 5,
            "num_blocks": 4,
            "bytes_per_block": 64,
            "width": 68,
            "max_batch_size": 1,
            "total_bytes": 80 << 30,
            "needed_entries": 256,
            "available_entries": 68,
            "num_generation": 1,
            "num_context": 1,
            "stalled_passes": 1,
            "rank": 0,
            "step": 1,
            "kind": "die",
            "admitted": True,
            "manager": manager,
            "requests": requests,
            "scheduler": Scheduler(manager),
            "args": VllmEngineArgs(geometry, 64, 2016, 4, 8192, False),
            "SglangScheduler:args": SglangServerArgs(seed_geometry(tokens_per_block=1), 2048, 2048),
            "num_gpu_blocks": 64,
            "max_model_len": 2016,
            "max_total_tokens": 2048,
            "context_length": 2048,
            "config": config,
            "model": load_model("llama-3.1-8b"),
            "gpu_gib": 80.0,
            "deployment": deployment,
            "plan": plan,
            "plan_ranges_figure:plan": plan_deployment(deployment),
            "result": result,
            "repro_page_map:result": run_repro(),
            "repro_index_row:result": run_repro(),
            "results": policies,
            "outcome_map_figure:results": sweep_repro([4], [8192]),
            "reuse_table:results": replay_with_reuse(story, policies=("capacity",), reuse=(True,)),
            "ceiling": reuse_ceiling(story),
            "workloads": vllm_workloads(),
            "peer": result,
            "real": result,
            "exc": ValueError("x"),
            "findings": [Finding("s", "p", "o", "n")],
            "scenario": scenario,
            "ranks": 16,
            "name": "llama-3.1-8b",
            "load_scenario:name_or_path": "rtx5080-4mib",
            "path": measurements,
            "fractions": [0.5],
            "median": 100.0,
            "sigma": 0.5,
            "num_requests": 5,
            "rate": 0.5,
            "pool_blocks": [64],
            "context_lens": [2048],
            "phase_scenario:pool_blocks": 64,
            "context_len": 2048,
            "regime": "capacity",
            "policy": "capacity",
            "width_seq_len:policy": "clamped",
            "configured_max_seq_len": 8192,
            "clamped_max_seq_len": 2048,
            "max_seq_lens": [8192],
            "batch_sizes": [1],
            "pool_mibs": [4],
            "contexts": [8192],
            "pool_mib": 4.0,
            "request": Request("r", 10, 5),
            "admission": "capacity",
            "data": [{"a": 1}],
            "is_first_context_chunk": True,
            "check_admission_policy:policy": CapacityAdmission(),
            "rank_budget:ranks": 16,
            "distributed": distributed,
            "rank_budget_figure:ranks": distributed.ranks,
            "review_findings_figure:runs": [],
            "predictions": {},
            "classify": lambda request, manager: ("fits_now", ""),
            "SglangServerArgs:geometry": seed_geometry(tokens_per_block=1),
            "tokens_per_block": 32,
            "Finding:scenario": "s",
            "Finding:policy": "p",
            "Finding:outcome": "o",
            "Finding:numbers": "n",
            "ranks_run_html:model": ranks_model(
                {"workspace_gib": 28.0, "context": 1_000_000}, ranks=2
            ),
            "ranks_run_html:result": distributed,
            "context": 8192,
            "needed": 256,
            "total_blocks": 64,
            "info": load_measurements(measurements)["device"],
            "read_config:path": config_file,
        }
        for cls, instance in (
            ("RunConfig", config),
            ("DistributedResult", distributed),
            ("RankResult", distributed.ranks[0]),
            ("SimulationResult", result),
            ("Deployment", deployment),
            ("ResidencyPlan", plan),
            ("KVGeometry", geometry),
            ("MambaGeometry", mamba),
        ):
            for field in dataclasses.fields(instance):
                good.setdefault(f"{cls}:{field.name}", getattr(instance, field.name))
    return good


def api_corpus(good):
    cases, skipped = [], {}
    for qualname, obj in api_targets():
        short = qualname.split(":")[1]
        try:
            params = [
                p
                for p in inspect.signature(obj).parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
        except (TypeError, ValueError):
            continue
        missing = [
            p.name
            for p in params
            if p.default is p.empty and f"{short}:{p.name}" not in good and p.name not in good
        ]
        if missing:
            skipped[qualname] = missing
            continue
        for p in params:
            for label in API_VALUES:
                cases.append(
                    {
                        "door": "api",
                        "target": f"{qualname}({p.name})",
                        "label": label,
                        "callable": qualname,
                        "param": p.name,
                    }
                )
    return cases, skipped


def call_case(case, good):
    """Run one API input in this (forked) process; returns what happened, as a dict."""
    obj = resolve(case["callable"])
    short = case["callable"].split(":")[1]
    kwargs, args = {}, []
    for p in inspect.signature(obj).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name == case["param"]:
            value = API_VALUES[case["label"]]()
        elif f"{short}:{p.name}" in good or (p.default is p.empty and p.name in good):
            value = good.get(f"{short}:{p.name}", good.get(p.name))
        else:
            continue
        (args.append(value) if p.kind is p.POSITIONAL_ONLY else kwargs.__setitem__(p.name, value))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            returned = obj(*args, **kwargs)
        return {"outcome": "returned", "repr": repr(returned)[:200]}
    except BaseException as exc:  # the classification needs every kind
        return {
            "outcome": "raised",
            "type": type(exc).__name__,
            "kvlab_error": type(exc).__module__.startswith("kvlab"),
            "family": [c.__name__ for c in type(exc).__mro__],
            "message": str(exc)[: LONG_MESSAGE + 1],
            "where": _where(exc),
        }


def _where(exc):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/kvlab/" in f.filename]
    frame = frames[-1] if frames else (traceback.extract_tb(exc.__traceback__) or [None])[-1]
    return f"{os.path.relpath(frame.filename, REPO)}:{frame.lineno}" if frame else None


# ---------------------------------------------------------------- running and classifying


def _listing():
    tmp = set(os.listdir("/tmp"))
    repo = set(os.listdir(REPO))
    notebooks = {str(p.relative_to(REPO)) for p in (REPO / "notebooks").rglob("*")}
    return tmp, repo | notebooks


def start(case, case_dir: Path, good):
    """Fork the input's process (its own group, bounded); returns its pid."""
    (case_dir / "tmp").mkdir(parents=True)
    (case_dir / "work").mkdir()
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BOUND, MEMORY_BOUND))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BOUND, FILE_BOUND))
        os.chdir(case_dir / "work")
        os.environ["TMPDIR"] = str(case_dir / "tmp")
        tempfile.tempdir = None
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(case_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        if case["door"] == "cli":
            os.execv(sys.executable, [sys.executable, "-m", "kvlab", *case["argv"]])
        result = (
            call_protocol(case, case_dir) if case["door"] == "protocol" else call_case(case, good)
        )
        (case_dir / "result.json").write_text(json.dumps(result))
    finally:
        os._exit(0)


def _tail(path: Path, size=LONG_MESSAGE * 4):
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - size))
        return f.read().decode("utf-8", "replace")


def classify(case, case_dir: Path, status, timed_out, left, stray):
    """The input's class and what to show a human."""
    record = {k: case[k] for k in ("door", "target", "label")}
    if case["door"] == "cli":
        record["argv"] = [
            a if len(a) < 200 else a[:60] + f"...({len(a)} chars)" for a in case["argv"]
        ]
    err = _tail(case_dir / "stderr")
    out = _tail(case_dir / "stdout")
    sent = signal.Signals[case["signal"]] if "signal" in case else None
    if timed_out:
        kind = "hang"
    elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == sent:
        kind, record["signal"] = "undocumented-exit", os.WTERMSIG(status)  # died by it
    elif os.WIFSIGNALED(status):
        kind, record["signal"] = "memory", os.WTERMSIG(status)
    elif case["door"] == "cli":
        code = os.WEXITSTATUS(status)
        record["exit"] = code
        lines = [line for line in (err or out).splitlines() if line.strip()]
        record["message"] = lines[-1][:300] if lines else ""
        if "MemoryError" in err:
            kind = "memory"
        elif "Traceback (most recent call last)" in err + out:
            kind = "traceback"
            record["where"] = _cli_where(err + out)
        elif code == 2 or (sent is not None and code == 128 + sent):
            kind = (
                "long-message" if (case_dir / "stderr").stat().st_size > LONG_MESSAGE else "clean"
            )
        elif code in DOCUMENTED_EXITS[case["argv"][0]]:
            kind = "accepted"
        else:
            kind = "undocumented-exit"
    elif case["door"] == "protocol":
        path = case_dir / "result.json"
        result = json.loads(path.read_text()) if path.exists() else {"outcome": "none"}
        record.update({k: result[k] for k in ("type", "message", "where") if k in result})
        if result["outcome"] == "error":
            clean = result["type"] == "EngineProcessError" and result["kept"]
            kind = "clean" if clean else "raw-error"
        elif result["outcome"] == "returned":
            kind = "accepted" if result["kept"] else "raw-error"
        else:
            kind = "raw-error"
    else:
        path = case_dir / "result.json"
        if not path.exists():
            kind, record["exit"] = "raw-error", os.WEXITSTATUS(status)
            record["message"] = err.strip()[-300:]
        else:
            result = json.loads(path.read_text())
            record.update(
                {k: v for k, v in result.items() if k not in ("outcome", "family", "kvlab_error")}
            )
            if "message" in record:
                record["message"] = record["message"][:300]
            kind = _api_class(case["param"], result)
    if left or stray:
        record["left"] = sorted(left)[:10] + (["processes left in the group"] if stray else [])
        if kind in ("clean", "accepted"):
            kind = "leak"
    record["class"] = kind
    return record


def _api_class(param, result):
    if result["outcome"] == "returned":
        return "accepted"
    if "MemoryError" in result["family"]:
        return "memory"
    message = result["message"]
    if len(message) > LONG_MESSAGE:
        return "long-message"
    expected = result["kvlab_error"] or {"TypeError", "ValueError", "KeyError"} & set(
        result["family"]
    )
    named = any(n in message for n in (param, param.replace("_", " "), param.replace("_", "-")))
    return "clean" if expected and named else "raw-error"


def _cli_where(text):
    frames = [line.strip() for line in text.splitlines() if line.strip().startswith("File ")]
    kvlab_frames = [f for f in frames if "/kvlab/" in f]
    frame = (kvlab_frames or frames or [""])[-1]
    last = [line for line in text.splitlines() if line.strip()][-1:]
    return f"{frame.replace(str(REPO) + '/', '')} -> {last[0][:200] if last else ''}"


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def run(cases, jobs, seconds, good, root: Path, report):
    """Run the cases, ``jobs`` at a time, until done or ``seconds`` have passed."""
    counts = dict.fromkeys(CLASSES, 0)
    by_door = {door: dict.fromkeys(CLASSES, 0) for door in ("cli", "api", "protocol")}
    queue, running, started = list(enumerate(cases)), {}, time.monotonic()
    signals: dict[int, tuple[float, signal.Signals]] = {}  # pid -> (when, which) to send
    stopped_early = False
    while queue or running:
        while queue and len(running) < jobs:
            if seconds is not None and time.monotonic() - started > seconds:
                stopped_early, queue = True, []
                break
            index, case = queue.pop(0)
            case_dir = root / f"case-{index}"
            before = _listing()
            limit = (
                API_SECONDS
                if case["door"] != "cli"
                else (WALKTHROUGH_SECONDS if case["argv"][0] == "walkthrough" else CLI_SECONDS)
            )
            pid = start(case, case_dir, good)
            running[pid] = (case, case_dir, time.monotonic() + limit, before, False)
            if "signal" in case:
                signals[pid] = (time.monotonic() + case["after_s"], signal.Signals[case["signal"]])
        if not running:
            continue
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for child, (when, signum) in list(signals.items()):
                if now >= when:  # as `kill -SIG PID` would, to the command's own process
                    os.kill(child, signum)
                    del signals[child]
            for child, (case, case_dir, deadline, before, killed) in list(running.items()):
                if now > deadline and not killed:
                    _kill_group(child)
                    running[child] = (case, case_dir, deadline, before, True)
            time.sleep(0.01)
            continue
        if pid not in running:
            continue
        case, case_dir, _, before, timed_out = running.pop(pid)
        signals.pop(pid, None)
        stray = _group_alive(pid)
        _kill_group(pid)
        after = _listing()
        left = {f"TMPDIR/{p.relative_to(case_dir / 'tmp')}" for p in (case_dir / "tmp").rglob("*")}
        left |= {f"repo/{n}" for n in after[1] - before[1]}
        record = classify(case, case_dir, status, timed_out, left, stray and not timed_out)
        if after[0] - before[0]:  # /tmp is shared with other users: shown, not counted
            record["tmp_new"] = sorted(after[0] - before[0])[:10]
        counts[record["class"]] += 1
        by_door[case["door"]][record["class"]] += 1
        if record["class"] != "clean" or "tmp_new" in record:
            report(record)
        shutil.rmtree(case_dir, ignore_errors=True)
    return counts, by_door, stopped_early, time.monotonic() - started


def _kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU while the block runs (a parallel load)."""
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("cli", "api", "protocol"), help="one door only")
    parser.add_argument(
        "--limit", type=int, help="run only the first N inputs of the shuffled corpus"
    )
    parser.add_argument("--jobs", type=int, default=1, help="inputs at a time (default 1)")
    parser.add_argument("--seconds", type=float, help="stop starting new inputs after S seconds")
    parser.add_argument("--out", type=Path, help="also write the JSON lines to FILE")
    parser.add_argument(
        "--seed", type=int, default=0, help="the corpus order's shuffle (default 0)"
    )
    parser.add_argument("--match", help="only inputs whose target contains this text")
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        help="busy loops run beside the corpus, a parallel CPU load (default 0)",
    )
    args = parser.parse_args()
    if args.jobs < 1 or (args.limit is not None and args.limit < 0) or args.load < 0:
        parser.error("--jobs must be >= 1, --limit >= 0 and --load >= 0")
    # Children are forks of this process: a thread pool started here (OpenMP's, torch's) would
    # leave its locks held in them and hang them, so it stays one thread.
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    import torch

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="kvlab-hostile-"))
    out = open(args.out, "w", buffering=1) if args.out else None

    def report(record):
        line = json.dumps(record, ensure_ascii=True)
        print(line, flush=True)
        if out:
            out.write(line + "\n")

    try:
        fx = make_fixtures(root)
        cases, skipped, good = [], {}, {}
        if args.only in (None, "cli"):
            cases += cli_corpus(fx)
        if args.only in (None, "api"):
            good = good_values(fx)
            api_cases, skipped = api_corpus(good)
            cases += api_cases
        if args.only in (None, "protocol"):
            cases += protocol_corpus(PROTOCOL_CASES)
        corpus = len(cases)
        cases = [c for c in cases if args.match is None or args.match in c["target"]]
        random.Random(args.seed).shuffle(cases)
        cases = cases[: args.limit] if args.limit is not None else cases
        with busy_loops(args.load):
            counts, by_door, stopped_early, elapsed = run(
                cases, args.jobs, args.seconds, good, root / "cases", report
            )
            load_average = os.getloadavg()[1]
        summary = {
            "benchmark": "hostile_inputs",
            "corpus": corpus,
            "inputs": sum(counts.values()),
            **counts,
            "by_door": by_door,
            "stopped_by_seconds": stopped_early,
            "seconds": round(elapsed, 1),
            "jobs": args.jobs,
            "busy_loops": args.load,
            "load_average_5min": round(load_average, 1),
            "memory_bound_gib": MEMORY_BOUND / 2**30,
            "skipped_callables": len(skipped),
            "skipped": skipped,
        }
        report(summary)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if out:
            out.close()


if __name__ == "__main__":
    main()
