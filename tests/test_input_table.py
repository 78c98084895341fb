"""Bad input at every public door gets a clear error, and docs/BAD_INPUTS.md's table says which.

Doors: the library's constructors, the ``kvlab`` command (``main(argv)``: exit 2, a usage line,
no traceback), scenario YAML files (written to a temporary folder), papermill parameters (the
walkthrough's check, and a notebook's own check in a real kernel) and the widget panels
(constructor arguments and control values). Each case names the words its error must contain:
the parameter and the accepted range. The table of every case and what it got must equal the
part of docs/BAD_INPUTS.md between ``<!-- bad-inputs:begin -->`` and ``<!-- bad-inputs:end -->``;
``KVLAB_WRITE_DOCS=1 pytest tests/test_input_table.py`` rewrites that part.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvlab import (
    KVCacheManager,
    KVGeometry,
    MambaGeometry,
    MaxSeqLenClampWarning,
    MemoryBudget,
    PageIndexTable,
    PagePool,
    Request,
    Scheduler,
    TrtllmSettings,
    VllmEngineArgs,
    VllmScheduler,
    simulate,
)
from kvlab.analysis.compare import outcome_table, run_policies
from kvlab.analysis.mamba_residency import dtype_rows
from kvlab.analysis.phase import phase_diagram
from kvlab.analysis.presets import engine_outcome, seed_geometry
from kvlab.analysis.repro import run_repro, sweep_repro
from kvlab.analysis.reuse import replay_with_reuse
from kvlab.backends.vllm import VLLM
from kvlab.cli import main
from kvlab.core.mamba import ResidencyPlan, plan_residency
from kvlab.run.rank_config import Fault, scenario_config
from kvlab.run.scenarios import load_scenario
from kvlab.run.simulation import Engine
from kvlab.run.workload import fixed, poisson_workload

ROOT = Path(__file__).resolve().parent.parent
TABLE_DOC = ROOT / "docs" / "BAD_INPUTS.md"
BEGIN, END = "<!-- bad-inputs:begin -->", "<!-- bad-inputs:end -->"
RTX = ROOT / "data" / "scenarios" / "rtx5080-4mib.yaml"
GB300 = ROOT / "data" / "scenarios" / "issue_21470_16x_gb300.yaml"
#: Longest message the table shows (the test checks the whole message).
SHOWN_CHARS = 230


@dataclass(frozen=True)
class Case:
    """One bad input: where it goes in, how it is shown, how to try it, and what its error
    must be (the exception's type name, or "exit 2") and contain."""

    door: str
    shown: str
    attempt: Callable[[Path], tuple[str, str]]
    kind: str
    words: tuple[str, ...]


def raises(fn: Callable[[], object]) -> Callable[[Path], tuple[str, str]]:
    def attempt(_tmp):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MaxSeqLenClampWarning)
            try:
                fn()
            except Exception as exc:  # the error is the result
                return type(exc).__name__, str(exc)
        return "no error", ""

    return attempt


def cli(*argv) -> Callable[[Path], tuple[str, str]]:
    """``kvlab ARGV`` in this process; ``{tmp}`` in an argument is the temporary folder."""

    def attempt(tmp):
        err, out = io.StringIO(), io.StringIO()
        args = [a.format(tmp=tmp) for a in argv]
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main(args)
            except SystemExit as exc:
                code = exc.code
        text = err.getvalue()
        assert "Traceback" not in text, text
        if code == 2:
            assert text.startswith("usage: kvlab"), text
        lines = text.strip().splitlines()
        return f"exit {code}", lines[-1] if lines else out.getvalue().strip()[-200:]

    return attempt


def scenario_data(edit, stem: str = "rtx5080-4mib"):
    """The seed's scenario file as data, edited by ``edit(dict)``, written and loaded."""

    def attempt(tmp):
        data = yaml.safe_load(RTX.read_text())
        edit(data)
        return _load(tmp, stem, yaml.safe_dump(data, sort_keys=False))

    return attempt


def scenario_text(edit, stem: str = "rtx5080-4mib"):
    """The seed's scenario file as text, edited by ``edit(str) -> str``, written and loaded."""
    return lambda tmp: _load(tmp, stem, edit(RTX.read_text()))


def _load(tmp: Path, stem: str, text: str):
    path = tmp / f"{stem}.yaml"
    path.write_text(text)
    return raises(lambda: load_scenario(path))(tmp)


def _set(path: str, value):
    """Set the field at ``path`` (dotted; a number indexes a list) to ``value``."""

    def edit(data):
        *parents, leaf = [int(p) if p.isdigit() else p for p in path.split(".")]
        for part in parents:
            data = data[part]
        data[leaf] = value

    return edit


def _drop(path: str):
    def edit(data):
        *parents, leaf = path.split(".")
        for part in parents:
            data = data[part]
        del data[leaf]

    return edit


def _replace(*pairs):
    def edit(text):
        for old, new in zip(pairs[::2], pairs[1::2]):
            assert old in text
            text = text.replace(old, new, 1)
        return text

    return edit


def papermill_run(notebook: str, **parameters):
    """Execute a walkthrough notebook with papermill; its first code cell checks the
    parameters."""

    def attempt(tmp):
        import papermill

        from kvlab.notebook.walkthrough import execute

        path = ROOT / "notebooks" / notebook
        try:
            execute(path, tmp / notebook, parameters)
        except papermill.PapermillExecutionError as exc:
            return "PapermillExecutionError", f"{exc.ename}: {exc.evalue}"
        return "no error", ""

    return attempt


def widget_value(panel: str, **values):
    def attempt(_tmp):
        from kvlab.notebook import widgets

        built = getattr(widgets, panel)(wait_s=0.0)
        try:
            built.set(**values)
        except Exception as exc:
            return type(exc).__name__, str(exc)
        return "accepted", ", ".join(
            f"{name} is now {built.controls[name].value!r}" for name in values
        )

    return attempt


def panel(name: str, **kwargs):
    from kvlab.notebook import widgets

    return getattr(widgets, name)(**kwargs)


def _geo(**kw):
    args = dict(num_layers=2, num_kv_heads=2, head_dim=128)
    args.update(kw)
    return KVGeometry(**args)


def _manager(**kw):
    args = dict(geometry=_geo(), quota_bytes=4 << 20, max_seq_len=8192, max_batch_size=1)
    args.update(kw)
    return KVCacheManager(**args)


def _tiny_geometry(data):
    data["parameters"].update(num_layers=1, num_kv_heads=1, head_dim=1, kv_dtype="fp8")
    del data["assumptions"]


def _huge_table(data):
    data["parameters"].update(tokens_per_block=1, max_batch_size=65536)
    del data["assumptions"]


def _one_token_pages(data):
    data["parameters"].update(
        num_layers=1, num_kv_heads=1, head_dim=128, kv_dtype="fp8", tokens_per_block=1
    )
    data["deployment"]["chunked_prefill"] = False
    del data["assumptions"]


def _small_token_budget(data):
    data["deployment"]["max_num_tokens"] = 16
    del data["assumptions"]


def _file_with(text: str):
    """``kvlab scenario FILE`` on a file of ``text`` only."""

    def attempt(tmp):
        (tmp / "bad.yaml").write_text(text)
        return cli("scenario", "{tmp}/bad.yaml")(tmp)

    return attempt


def _config_with(config):
    """``kvlab plan --config FILE --gpu h200`` on a config.json of ``config`` (a dict, or text)."""

    def attempt(tmp):
        (tmp / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
        return cli("plan", "--config", "{tmp}/config.json", "--gpu", "h200")(tmp)

    return attempt


def _trace_with(text: str, *argv: str):
    """``kvlab replay --trace FILE --model llama-3.1-8b --gpu h100-80gb ARGV`` on ``text``."""

    def attempt(tmp):
        (tmp / "trace.csv").write_text(text)
        replay = ("replay", "--trace", "{tmp}/trace.csv", "--model", "llama-3.1-8b")
        return cli(*replay, "--gpu", "h100-80gb", "--engine", "trtllm", *argv)(tmp)

    return attempt


_LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 4,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}


def _llama_with(**fields):
    """A small llama config.json with ``fields`` changed (its raw text when given ``raw``)."""
    return _config_with({**_LLAMA, **fields})


def _notebook_dir_with(text: str, command: str = "walkthrough"):
    """``kvlab walkthrough`` (or ``slides``) ``--notebook-dir DIR`` on a folder of one file,
    01_x.ipynb, of ``text``."""
    out = ("--build-dir", "{tmp}/b") if command == "walkthrough" else ("--out", "{tmp}/out")

    def attempt(tmp):
        (tmp / "nb").mkdir()
        (tmp / "nb" / "01_x.ipynb").write_text(text)
        return cli(command, "--notebook-dir", "{tmp}/nb", *out)(tmp)

    return attempt


def _stale_handle():
    """A cache handle after ``free``, its slot taken by a new cache."""
    manager = _manager(max_batch_size=1)
    stale = manager.create_cache("a")
    manager.free("a")
    manager.create_cache("b").resize(32)
    return stale


def _hostile_deployment(edit, stem):
    """A deployment scenario the loader accepts field by field, whose ranks would not fit."""

    def attempt(tmp):
        data = yaml.safe_load(GB300.read_text())
        edit(data)
        data["name"] = stem
        del data["expected"]  # the file's numbers; these edits change them
        (tmp / f"{stem}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        return cli("scenario", f"{{tmp}}/{stem}.yaml", "--ranks", "1")(tmp)

    return attempt


CONSTRUCTOR, COMMAND, SCENARIO, PAPERMILL, WIDGET, VLLM_DOOR = (
    "constructor",
    "`kvlab` command",
    "scenario file",
    "papermill parameter",
    "widget",
    "vLLM backend",
)


def _without_vllm_environment(tmp: Path) -> tuple[str, str]:
    """The backend asked to run where vLLM's environment was never made (an empty folder)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KVLAB_VLLM_ENV", str(tmp / "no-vllm"))
        return raises(
            lambda: VLLM.run(VllmEngineArgs(seed_geometry(), 64, 2016), [Request("r", 8, 4)])
        )(tmp)


CASES = [
    # -- the library's constructors ------------------------------------------------------------
    Case(
        CONSTRUCTOR,
        "KVGeometry(num_layers=0, ...)",
        raises(lambda: _geo(num_layers=0)),
        "ValueError",
        ("num_layers", "[1, "),
    ),
    Case(
        CONSTRUCTOR,
        "KVGeometry(..., dtype='int4')",
        raises(lambda: _geo(dtype="int4")),
        "ValueError",
        ("dtype", "float16"),
    ),
    Case(
        CONSTRUCTOR,
        "KVGeometry(..., head_dim=128.0)",
        raises(lambda: _geo(head_dim=128.0)),
        "TypeError",
        ("head_dim", "int in [1, "),
    ),
    Case(
        CONSTRUCTOR,
        "KVCacheManager(..., quota_bytes=-1)",
        raises(lambda: _manager(quota_bytes=-1)),
        "ValueError",
        ("quota_bytes", "[1, "),
    ),
    Case(
        CONSTRUCTOR,
        "KVCacheManager(..., page_index_policy='wide')",
        raises(lambda: _manager(page_index_policy="wide")),
        "ValueError",
        ("page_index_policy", "'clamped', 'configured'"),
    ),
    Case(
        CONSTRUCTOR,
        "KVCacheManager(..., device='tpu')",
        raises(lambda: _manager(device="tpu")),
        "ValueError",
        ("device", "'cpu' or 'cuda[:N]'"),
    ),
    Case(
        CONSTRUCTOR,
        "KVCacheManager(..., block_reuse_policy='sometimes')",
        raises(lambda: _manager(block_reuse_policy="sometimes")),
        "ValueError",
        ("block_reuse_policy", "'all_reusable', 'per_request'"),
    ),
    Case(
        CONSTRUCTOR,
        "KVCacheManager(..., enable_block_reuse='yes')",
        raises(lambda: _manager(enable_block_reuse="yes")),
        "TypeError",
        ("enable_block_reuse", "bool"),
    ),
    Case(
        CONSTRUCTOR,
        "Scheduler(manager, enable_prefix_aware_scheduling=None)",
        raises(lambda: Scheduler(_manager(), enable_prefix_aware_scheduling=None)),
        "TypeError",
        ("enable_prefix_aware_scheduling", "bool"),
    ),
    Case(
        CONSTRUCTOR,
        "Request('r', 1000, 1, prefix_hashes=(1, 2, 3))",
        raises(lambda: Request("r", 1000, 1, prefix_hashes=(1, 2, 3))),
        "ValueError",
        ("prefix_hashes", "at most 2 hashes"),
    ),
    Case(
        CONSTRUCTOR,
        "Request('r', 8, 1, prefix_hashes=(1.5,))",
        raises(lambda: Request("r", 8, 1, prefix_hashes=(1.5,))),
        "TypeError",
        ("prefix_hashes", "tuple of ints"),
    ),
    Case(
        CONSTRUCTOR,
        "Request('r', 8, 1, tokens_per_hash=0)",
        raises(lambda: Request("r", 8, 1, tokens_per_hash=0)),
        "ValueError",
        ("tokens_per_hash", "[1, "),
    ),
    Case(
        CONSTRUCTOR,
        "Request('r', 8, 1, cache_salt=42)",
        raises(lambda: Request("r", 8, 1, cache_salt=42)),
        "TypeError",
        ("cache_salt", "str or None"),
    ),
    Case(
        CONSTRUCTOR,
        "KVCacheManager(..., max_seq_len=2**26, max_batch_size=2**12, "
        "page_index_policy='configured')",
        raises(
            lambda: _manager(
                max_seq_len=1 << 26, max_batch_size=1 << 12, page_index_policy="configured"
            )
        ),
        "ValueError",
        ("max_batch_size=4096", "width=2097156", "MAX_TABLE_BYTES=1073741824"),
    ),
    Case(
        CONSTRUCTOR,
        "KVCacheManager(..., quota_bytes=2**40)  (a 1 TiB pool)",
        raises(lambda: _manager(quota_bytes=1 << 40)),
        "MemoryError",
        ("quota_bytes=1099511627776", "cannot be allocated"),
    ),
    Case(
        CONSTRUCTOR,
        "KVCacheManager(<1-byte pages>, quota_bytes=2**30)  (a billion pages)",
        raises(
            lambda: _manager(
                geometry=_geo(
                    num_layers=1,
                    num_kv_heads=1,
                    head_dim=1,
                    dtype="fp8",
                    tokens_per_block=1,
                    kv_factor=1,
                ),
                quota_bytes=1 << 30,
            )
        ),
        "ValueError",
        ("quota_bytes=1073741824", "MAX_POOL_BLOCKS=16777216"),
    ),
    Case(
        CONSTRUCTOR,
        "PagePool(4, 64, device=2**63)",
        raises(lambda: PagePool(4, 64, device=2**63)),
        "ValueError",
        ("device must be 'cpu' or 'cuda[:N]'",),
    ),
    Case(
        CONSTRUCTOR,
        "PagePool(4, 64, device='cpu:1')",
        raises(lambda: PagePool(4, 64, device="cpu:1")),
        "ValueError",
        ("device must be 'cpu' or 'cuda[:N]'", "'cpu:1'"),
    ),
    Case(
        CONSTRUCTOR,
        "KVCacheManager(...).get_cache(None)",
        raises(lambda: _manager().get_cache(None)),
        "TypeError",
        ("request must be a Request or a request id",),
    ),
    Case(
        CONSTRUCTOR,
        "PagePool(4, 64).free([2**63])",
        raises(lambda: PagePool(4, 64).free([2**63])),
        "ValueError",
        ("pages: page ids are 0..3",),
    ),
    Case(
        CONSTRUCTOR,
        "PageIndexTable(4, 8, pin_memory='4')",
        raises(lambda: PageIndexTable(4, 8, pin_memory="4")),
        "TypeError",
        ("pin_memory must be a bool",),
    ),
    Case(
        CONSTRUCTOR,
        "Engine(None)",
        raises(lambda: Engine(None)),
        "TypeError",
        ("scheduler must be a Scheduler",),
    ),
    Case(
        CONSTRUCTOR,
        "ResidencyPlan(512, 1, 10, 10, 100, pp_size=0)",
        raises(lambda: ResidencyPlan(512, 1, 10, 10, 100, pp_size=0)),
        "ValueError",
        ("pp_size must be in [1, 1024]",),
    ),
    Case(
        CONSTRUCTOR,
        "sweep_repro([4], [8], policy='bogus')",
        raises(lambda: sweep_repro([4], [8], policy="bogus")),
        "ValueError",
        ("policy must be one of", "'clamped'"),
    ),
    Case(
        CONSTRUCTOR,
        "phase_diagram(np.array([[4, 8]]), [8])",
        raises(lambda: phase_diagram(np.array([[4, 8]]), [8])),
        "ValueError",
        ("pool_blocks must be one-dimensional",),
    ),
    Case(
        CONSTRUCTOR,
        "PagePool(4, 64).free([True])",
        raises(lambda: PagePool(4, 64).free([True])),
        "TypeError",
        ("pages", "ints", "bool"),
    ),
    Case(
        CONSTRUCTOR,
        "PagePool(4, 64).free([1.0])",
        raises(lambda: PagePool(4, 64).free([1.0])),
        "TypeError",
        ("pages", "ints", "float"),
    ),
    Case(
        CONSTRUCTOR,
        "cache.resize(20)  (cache: a handle after manager.free)",
        raises(lambda: _stale_handle().resize(20)),
        "RuntimeError",
        ("was freed", "KVCacheManager.free"),
    ),
    Case(
        CONSTRUCTOR,
        "Scheduler(manager, max_num_tokens=16, chunked_prefill=True, "
        "max_context_length=64)  (32-token pages)",
        raises(
            lambda: Scheduler(
                _manager(), max_num_tokens=16, chunked_prefill=True, max_context_length=64
            )
        ),
        "ValueError",
        ("max_num_tokens must be at least chunk_unit_size=32", "got 16"),
    ),
    Case(
        CONSTRUCTOR,
        "PageIndexTable(max_batch_size=2**20, width=2**26)",
        raises(lambda: PageIndexTable(1 << 20, 1 << 26)),
        "ValueError",
        ("max_batch_size=1048576", "MAX_TABLE_BYTES"),
    ),
    Case(
        CONSTRUCTOR,
        "Request('r', prompt_len=0, max_new_tokens=8)",
        raises(lambda: Request("r", prompt_len=0, max_new_tokens=8)),
        "ValueError",
        ("prompt_len", "[1, "),
    ),
    Case(
        CONSTRUCTOR,
        "Request('r', prompt_len=8, max_new_tokens=1.5)",
        raises(lambda: Request("r", prompt_len=8, max_new_tokens=1.5)),
        "TypeError",
        ("max_new_tokens", "[0, "),
    ),
    Case(
        CONSTRUCTOR,
        "Request('r', 8, 4, context_current_position=9)",
        raises(lambda: Request("r", 8, 4, context_current_position=9)),
        "ValueError",
        ("context_current_position", "[0, prompt_len=8]"),
    ),
    Case(
        CONSTRUCTOR,
        "Request('r', 8, 1, num_generated=9)",
        raises(lambda: Request("r", 8, 1, num_generated=9)),
        "ValueError",
        ("num_generated", "[0, max_new_tokens=1]"),
    ),
    Case(
        CONSTRUCTOR,
        "PageIndexTable(4, 8).write(99, 0, [1])",
        raises(lambda: PageIndexTable(4, 8).write(99, 0, [1])),
        "ValueError",
        ("slot 99 is not an acquired page-index slot",),
    ),
    Case(
        CONSTRUCTOR,
        "phase_diagram(['64'], [100])",
        raises(lambda: phase_diagram(["64"], [100])),
        "TypeError",
        ("pool_blocks[0]", "[1, "),
    ),
    Case(
        CONSTRUCTOR,
        "sweep_repro(['4'], [8])",
        raises(lambda: sweep_repro(["4"], [8])),
        "TypeError",
        ("pool_mibs[0]", "(0.0, "),
    ),
    Case(
        CONSTRUCTOR,
        "sweep_repro(None, [8])",
        raises(lambda: sweep_repro(None, [8])),
        "TypeError",
        ("pool_mibs must be a sequence",),
    ),
    Case(
        CONSTRUCTOR,
        "run_repro(geometry='seed')",
        raises(lambda: run_repro(geometry="seed")),
        "TypeError",
        ("geometry must be a KVGeometry",),
    ),
    Case(
        CONSTRUCTOR,
        "plan_residency('x', geometry, 100, 1)",
        raises(lambda: plan_residency("x", seed_geometry(), 100, 1)),
        "TypeError",
        ("mamba must be a MambaGeometry",),
    ),
    Case(
        CONSTRUCTOR,
        "PagePool(4, 16).free(None)",
        raises(lambda: PagePool(4, 16).free(None)),
        "TypeError",
        ("pages must be a list",),
    ),
    Case(CONSTRUCTOR, "fixed(None)", raises(lambda: fixed(None)), "TypeError", ("specs must be",)),
    Case(
        CONSTRUCTOR,
        "Engine(scheduler).advance_to(-1)",
        raises(lambda: Engine(Scheduler(_manager())).advance_to(-1)),
        "ValueError",
        ("step", "[0, "),
    ),
    Case(
        CONSTRUCTOR,
        "run_policies(None)",
        raises(lambda: run_policies(None)),
        "TypeError",
        ("requests must be a sequence of Request",),
    ),
    Case(
        CONSTRUCTOR,
        "scenario_config(issue-21470, context_length=0)",
        raises(lambda: scenario_config(load_scenario("issue-21470"), context_length=0)),
        "ValueError",
        ("context_length", "[1, "),
    ),
    Case(
        CONSTRUCTOR,
        "scenario_config(issue-21470, workspace_gib=nan)",
        raises(lambda: scenario_config(load_scenario("issue-21470"), workspace_gib=float("nan"))),
        "ValueError",
        ("workspace_gib", "[0.0, "),
    ),
    Case(
        CONSTRUCTOR,
        "Scheduler(manager, admission='fifo')",
        raises(lambda: Scheduler(_manager(), admission="fifo")),
        "ValueError",
        ("admission", "'capacity', 'none'"),
    ),
    Case(
        CONSTRUCTOR,
        "TrtllmSettings(geometry, 4 MiB, max_seq_len=8192, max_batch_size=4, admission='vllm')",
        raises(lambda: TrtllmSettings(seed_geometry(), 1 << 22, 8192, 4, admission="vllm")),
        "ValueError",
        ("admission", "'capacity', 'none'", "kvlab.sched.vllm"),
    ),
    Case(
        CONSTRUCTOR,
        "VllmEngineArgs(geometry, num_gpu_blocks=0, max_model_len=2048)",
        raises(lambda: VllmEngineArgs(seed_geometry(), 0, 2048)),
        "ValueError",
        ("num_gpu_blocks", "[1, "),
    ),
    Case(
        CONSTRUCTOR,
        "VllmEngineArgs(..., watermark=1.0)",
        raises(lambda: VllmEngineArgs(seed_geometry(), 64, 2016, watermark=1.0)),
        "ValueError",
        ("watermark", "[0.0, 1.0)"),
    ),
    Case(
        CONSTRUCTOR,
        "VllmScheduler(VllmEngineArgs(<64 blocks of 32 tokens>, max_model_len=2048))",
        raises(lambda: VllmScheduler(VllmEngineArgs(seed_geometry(), 64, 2048))),
        "ValueError",
        ("max seq len (2048)", "estimated maximum model length is 2016"),
    ),
    Case(
        CONSTRUCTOR,
        "VllmScheduler(..., enable_chunked_prefill=False, max_num_batched_tokens=1024)",
        raises(
            lambda: VllmScheduler(
                VllmEngineArgs(
                    seed_geometry(),
                    64,
                    2016,
                    enable_chunked_prefill=False,
                    max_num_batched_tokens=1024,
                )
            )
        ),
        "ValueError",
        ("max_num_batched_tokens (1024)", "max_model_len (2016)"),
    ),
    Case(
        CONSTRUCTOR,
        "VllmScheduler(...).submit(Request('r', 8, 4, num_draft_tokens=2))",
        raises(
            lambda: VllmScheduler(VllmEngineArgs(seed_geometry(), 64, 2016)).submit(
                Request("r", 8, 4, num_draft_tokens=2)
            )
        ),
        "ValueError",
        ("num_draft_tokens=0", "vLLM peer"),
    ),
    Case(
        VLLM_DOOR,
        "VLLM.run(args, requests) without `bash scripts/setup.sh vllm`",
        lambda tmp: _without_vllm_environment(tmp),
        "EngineUnavailable",
        ("bash scripts/setup.sh vllm",),
    ),
    Case(
        VLLM_DOOR,
        "VLLM.run(VllmEngineArgs(<an MLA geometry>, ...), requests)",
        raises(
            lambda: VLLM.run(
                VllmEngineArgs(KVGeometry(4, 1, 576, kv_factor=1), 64, 2016), [Request("r", 8, 4)]
            )
        ),
        "ValueError",
        ("kv_factor 2", "kv_factor=1"),
    ),
    Case(
        VLLM_DOOR,
        "VLLM.run(args, requests, timeout_s=0)",
        raises(
            lambda: VLLM.run(
                VllmEngineArgs(seed_geometry(), 64, 2016), [Request("r", 8, 4)], timeout_s=0
            )
        ),
        "ValueError",
        ("timeout_s", "(0.0, 86400.0]"),
    ),
    Case(
        CONSTRUCTOR,
        "Scheduler(manager, max_num_tokens=0)",
        raises(lambda: Scheduler(_manager(), max_num_tokens=0)),
        "ValueError",
        ("max_num_tokens", "[1, "),
    ),
    Case(
        CONSTRUCTOR,
        "Scheduler(manager, stall_limit=True)",
        raises(lambda: Scheduler(_manager(), stall_limit=True)),
        "TypeError",
        ("stall_limit", "[1, "),
    ),
    Case(
        CONSTRUCTOR,
        "simulate(scheduler, requests, max_steps=0)",
        raises(lambda: simulate(Scheduler(_manager()), [], max_steps=0)),
        "ValueError",
        ("max_steps", "[1, "),
    ),
    Case(
        CONSTRUCTOR,
        "MemoryBudget(total_bytes=2**36, free_gpu_memory_fraction=1.5)",
        raises(lambda: MemoryBudget(1 << 36, free_gpu_memory_fraction=1.5)),
        "ValueError",
        ("free_gpu_memory_fraction", "(0.0, 1.0]"),
    ),
    Case(
        CONSTRUCTOR,
        "MambaGeometry(..., d_conv=1)",
        raises(
            lambda: MambaGeometry(
                num_mamba_layers=2,
                mamba_num_heads=4,
                mamba_head_dim=8,
                d_state=8,
                n_groups=2,
                d_conv=1,
            )
        ),
        "ValueError",
        ("d_conv", "[2, "),
    ),
    Case(
        CONSTRUCTOR,
        "MambaGeometry(..., mamba_num_heads=4, n_groups=3)",
        raises(
            lambda: MambaGeometry(
                num_mamba_layers=2,
                mamba_num_heads=4,
                mamba_head_dim=8,
                d_state=8,
                n_groups=3,
                d_conv=4,
            )
        ),
        "ValueError",
        ("mamba_num_heads=4 must be a multiple of n_groups=3",),
    ),
    Case(
        CONSTRUCTOR,
        "poisson_workload(3, rate=1e-300, ...)",
        raises(lambda: poisson_workload(3, rate=1e-300, prompt_len=8, max_new_tokens=8)),
        "ValueError",
        ("rate=1e-300", "raise rate"),
    ),
    Case(
        CONSTRUCTOR,
        "poisson_workload(10, rate=0, ...)",
        raises(lambda: poisson_workload(10, rate=0, prompt_len=8, max_new_tokens=8)),
        "ValueError",
        ("rate", "(0.0, "),
    ),
    Case(
        CONSTRUCTOR,
        "scenario_config(load_scenario('issue-21470'), ranks=0)",
        raises(lambda: scenario_config(load_scenario("issue-21470"), 0)),
        "ValueError",
        ("ranks", "[1, 128]"),
    ),
    Case(
        CONSTRUCTOR,
        "Fault(rank=0, step=1, kind='explode')",
        raises(lambda: Fault(0, 1, "explode")),
        "ValueError",
        ("fault.kind", "'die', 'hang'"),
    ),
    # -- the kvlab command -------------------------------------------------------------------------
    Case(COMMAND, "kvlab", cli(), "exit 2", ("required",)),
    Case(COMMAND, "kvlab frobnicate", cli("frobnicate"), "exit 2", ("invalid choice", "repro")),
    Case(
        COMMAND,
        "kvlab repro --pool-mib 0",
        cli("repro", "--pool-mib", "0"),
        "exit 2",
        ("pool_mib", "(0.0, 1048576]"),
    ),
    Case(
        COMMAND,
        "kvlab repro --pool-mib nan",
        cli("repro", "--pool-mib", "nan"),
        "exit 2",
        ("pool_mib", "(0.0, 1048576]"),
    ),
    Case(
        COMMAND,
        "kvlab repro --context -1",
        cli("repro", "--context", "-1"),
        "exit 2",
        ("context", "[1, 1073741824]"),
    ),
    Case(
        COMMAND,
        "kvlab repro --context 8k",
        cli("repro", "--context", "8k"),
        "exit 2",
        ("--context", "invalid int value"),
    ),
    Case(
        COMMAND,
        "kvlab repro --policy wide",
        cli("repro", "--policy", "wide"),
        "exit 2",
        ("--policy", "'none/clamped', 'none/configured'"),
    ),
    Case(
        COMMAND,
        "kvlab repro --tokens-per-block 0",
        cli("repro", "--tokens-per-block", "0"),
        "exit 2",
        ("tokens_per_block", "[1, 65536]"),
    ),
    Case(
        COMMAND,
        "kvlab repro --device tpu",
        cli("repro", "--device", "tpu"),
        "exit 2",
        ("device", "'cpu' or 'cuda[:N]'"),
    ),
    Case(
        COMMAND,
        "kvlab repro --max-seq-len 1073741824 --tokens-per-block 1 --policy none/configured",
        cli(
            "repro",
            "--max-seq-len",
            "1073741824",
            "--tokens-per-block",
            "1",
            "--policy",
            "none/configured",
        ),
        "exit 2",
        ("max_blocks_per_seq", "[1, 67108864]"),
    ),
    Case(
        COMMAND,
        "kvlab scenario issue-21470 --ranks 0",
        cli("scenario", "issue-21470", "--ranks", "0"),
        "exit 2",
        ("ranks", "[1, 128]"),
    ),
    Case(
        COMMAND,
        "kvlab scenario issue-21470 --timeout 0",
        cli("scenario", "issue-21470", "--timeout", "0"),
        "exit 2",
        ("timeout_s", "[1.0, 86400.0]"),
    ),
    Case(
        COMMAND,
        "kvlab scenario issue-21470 --deadline -1",
        cli("scenario", "issue-21470", "--deadline", "-1"),
        "exit 2",
        ("deadline_s", "(0.0, 604800.0]"),
    ),
    Case(
        COMMAND,
        "kvlab scenario issue-21470 --in-process --deadline 5",
        cli("scenario", "issue-21470", "--in-process", "--deadline", "5"),
        "exit 2",
        ("deadline_s needs the process mode",),
    ),
    Case(
        COMMAND,
        "kvlab scenario issue-21470 --backend mpi",
        cli("scenario", "issue-21470", "--backend", "mpi"),
        "exit 2",
        ("--backend", "'gloo', 'nccl'"),
    ),
    Case(
        COMMAND,
        "kvlab scenario no-such",
        cli("scenario", "no-such"),
        "exit 2",
        ("no scenario named 'no-such'", "known scenarios"),
    ),
    Case(
        COMMAND,
        "kvlab scenario rtx5080-4mib",
        cli("scenario", "rtx5080-4mib"),
        "exit 2",
        ("has no deployment block",),
    ),
    Case(
        COMMAND,
        "kvlab scenario FILE --ranks 1  (FILE: the 16 x GB300 file, 1-byte KV per token)",
        _hostile_deployment(_tiny_geometry, "tiny-kv"),
        "exit 2",
        ("MAX_RANK_STORAGE_BYTES", "bytes per token"),
    ),
    Case(
        COMMAND,
        "kvlab scenario FILE --ranks 1  (FILE: the 16 x GB300 file, tokens_per_block 1, "
        "max_batch_size 65536)",
        _hostile_deployment(_huge_table, "huge-table"),
        "exit 2",
        ("max_batch_size=65536", "MAX_TABLE_BYTES"),
    ),
    Case(
        COMMAND,
        "kvlab walkthrough -p SMOK=True",
        cli("walkthrough", "-p", "SMOK=True"),
        "exit 2",
        ("'SMOK'", "SMOKE: bool"),
    ),
    Case(
        COMMAND,
        "kvlab walkthrough -p context=8k",
        cli("walkthrough", "-p", "context=8k"),
        "exit 2",
        ("context", "must be int"),
    ),
    Case(
        COMMAND,
        "kvlab walkthrough -p not-a-pair",
        cli("walkthrough", "-p", "not-a-pair"),
        "exit 2",
        ("NAME=VALUE",),
    ),
    Case(
        COMMAND,
        "kvlab walkthrough --only 99",
        cli("walkthrough", "--only", "99"),
        "exit 2",
        ("no notebook matches",),
    ),
    Case(
        COMMAND,
        "kvlab walkthrough --build-dir /dev/null",
        cli("walkthrough", "--build-dir", "/dev/null"),
        "exit 2",
        ("--build-dir /dev/null", "Not a directory"),
    ),
    Case(
        COMMAND,
        "kvlab walkthrough -p x=------...1  (100,000 minus signs)",
        cli("walkthrough", "-p", "x=" + "-" * 100_000 + "1"),
        "exit 2",
        ("the value of x", "at most 200 characters"),
    ),
    Case(
        COMMAND,
        "kvlab scenario aaa...a  (a 300-character name)",
        cli("scenario", "a" * 300),
        "exit 2",
        ("a scenario name is 1 to 100", "a str of 300 character(s)"),
    ),
    Case(
        COMMAND,
        "kvlab scenario FILE  (FILE: holds a NUL byte)",
        _file_with("\x00"),
        "exit 2",
        ("not valid YAML", "#x0000"),
    ),
    Case(
        COMMAND,
        "kvlab scenario FILE --ranks 1  (FILE: the 16 x GB300 file, 256 B a token, 1-token pages)",
        _hostile_deployment(_one_token_pages, "one-token-pages"),
        "exit 2",
        ("766377984 pages", "MAX_POOL_BLOCKS=16777216"),
    ),
    Case(
        COMMAND,
        "kvlab scenario FILE --ranks 1  (FILE: the 16 x GB300 file, max_num_tokens 16)",
        _hostile_deployment(_small_token_budget, "small-budget"),
        "exit 2",
        ("deployment.max_num_tokens", "chunk_unit_size"),
    ),
    Case(
        COMMAND,
        "kvlab replay --trace FILE ...  (FILE: a prompt_tokens of abc on line 3)",
        _trace_with("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,abc,10\n"),
        "exit 2",
        ("trace.csv, line 3", "prompt_tokens must be a whole number"),
    ),
    Case(
        COMMAND,
        "kvlab replay --trace FILE ...  (FILE: rows out of time order)",
        _trace_with("arrival_s,prompt_tokens,output_tokens\n5,100,10\n1,100,10\n"),
        "exit 2",
        ("line 3", "earlier than the row before"),
    ),
    Case(
        COMMAND,
        "kvlab replay --trace FILE ... --limit 0",
        _trace_with("arrival_s,prompt_tokens,output_tokens\n0,100,10\n", "--limit", "0"),
        "exit 2",
        ("limit", "[1, "),
    ),
    Case(
        COMMAND,
        "kvlab replay --trace FILE ... --plot waits.png",
        _trace_with("arrival_s,prompt_tokens,output_tokens\n0,100,10\n", "--plot", "w.png"),
        "exit 2",
        ("--plot must name an .html file",),
    ),
    Case(
        COMMAND,
        "kvlab replay --trace missing.csv ...",
        cli("replay", "--trace", "{tmp}/missing.csv", "--model", "llama-3.1-8b", "--gpu", "h200"),
        "exit 2",
        ("missing.csv", "cannot read a trace"),
    ),
    Case(
        COMMAND,
        "kvlab plan --model llama-3.1-8b --gpu h200 --tp-size 0",
        cli("plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--tp-size", "0"),
        "exit 2",
        ("tp_size", "[1, 4096]"),
    ),
    Case(
        COMMAND,
        "kvlab plan --model llama-3.1-8b --gpu-gib nan",
        cli("plan", "--model", "llama-3.1-8b", "--gpu-gib", "nan"),
        "exit 2",
        ("gpu_gib",),
    ),
    Case(
        COMMAND,
        "kvlab plan --model llama-3.1-8b --gpu h200 --kv-dtype int4",
        cli("plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--kv-dtype", "int4"),
        "exit 2",
        ("kv_dtype", "bfloat16"),
    ),
    Case(
        COMMAND,
        "kvlab plan --model gpt-5 --gpu h200",
        cli("plan", "--model", "gpt-5", "--gpu", "h200"),
        "exit 2",
        ("model must be one of", "llama-3.1-8b"),
    ),
    Case(
        COMMAND,
        "kvlab plan --model llama-3.1-8b  (no GPU)",
        cli("plan", "--model", "llama-3.1-8b"),
        "exit 2",
        ("--gpu or --gpu-gib",),
    ),
    Case(
        COMMAND,
        "kvlab plan --example issue-21470 --max-seq-len 0",
        cli("plan", "--example", "issue-21470", "--max-seq-len", "0"),
        "exit 2",
        ("max_seq_len", "[1, 1073741824]"),
    ),
    Case(
        COMMAND,
        "kvlab plan --example issue-21470 --max-num-tokens 31  (chunked, 32-token pages)",
        cli("plan", "--example", "issue-21470", "--max-num-tokens", "31"),
        "exit 2",
        ("max_num_tokens must be at least chunk_unit_size=32", "got 31"),
    ),
    Case(
        COMMAND,
        "kvlab replay --trace FILE --example issue-21470 --max-num-tokens 31  (Azure's code hour)",
        cli(
            "replay",
            "--trace",
            str(Path(__file__).parents[1] / "data" / "traces" / "AzureLLMInferenceTrace_code.csv"),
            "--example",
            "issue-21470",
            "--max-num-tokens",
            "31",
        ),
        "exit 2",
        ("max_num_tokens must be at least chunk_unit_size=32", "got 31"),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: not JSON)",
        _config_with("{not json"),
        "exit 2",
        ("config.json: not JSON (Expecting property name", "line 1"),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: a pure Mamba-2 model)",
        _config_with({"model_type": "mamba2", "num_hidden_layers": 64}),
        "exit 2",
        ("mamba2 has no attention layer",),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: llama without num_attention_heads)",
        _config_with({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": None}),
        "exit 2",
        ("transformers cannot read it", "num_attention_heads"),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: an unknown model_type)",
        _config_with({"model_type": "no-such-arch", "num_hidden_layers": 2}),
        "exit 2",
        ("transformers cannot read it", "no-such-arch"),
    ),
    Case(
        COMMAND,
        "kvlab plan --model llama-3.1-8b --gpu h200 --max-seq-len 1073741824 "
        "--tokens-per-block 1 --allow-long-max-model-len",
        cli(
            "plan",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h200",
            "--max-seq-len",
            "1073741824",
            "--tokens-per-block",
            "1",
            "--allow-long-max-model-len",
        ),
        "exit 2",
        ("(max_seq_len + max_new_tokens) / tokens_per_block must be at most 4,194,304 blocks",),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: num_hidden_layers 10**9)",
        _config_with({"model_type": "llama", "num_hidden_layers": 10**9}),
        "exit 2",
        ("num_hidden_layers must be an int in [1, 4096]",),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: llama with num_key_value_heads 7 for 32 heads)",
        _llama_with(num_key_value_heads=7),
        "exit 2",
        ("num_key_value_heads must divide num_attention_heads (32)", "got 7"),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: llama with head_dim 0)",
        _llama_with(head_dim=0),
        "exit 2",
        ("head_dim must be an int in [1, 16384]",),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: llama with vocab_size 10**15)",
        _llama_with(vocab_size=10**15),
        "exit 2",
        ("vocab_size must be an int in [1, 16777216]",),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: llama with max_position_embeddings -5)",
        _llama_with(max_position_embeddings=-5),
        "exit 2",
        ("max_position_embeddings must be an int in [1, 1073741824]",),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: llama with a rope_scaling factor of NaN)",
        _llama_with(rope_scaling={"type": "linear", "factor": float("nan")}),
        "exit 2",
        ("rope_scaling must be an object whose factor is a finite number > 0",),
    ),
    Case(
        COMMAND,
        'kvlab plan --config FILE --gpu h200  (FILE: llama with quant_algo ["FP8"])',
        _llama_with(quantization_config={"quant_algo": ["FP8"]}),
        "exit 2",
        ("quant_algo must be an algorithm's name",),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: num_hidden_layers of 5,000 digits)",
        _config_with('{"model_type": "llama", "num_hidden_layers": ' + "9" * 5000 + "}"),
        "exit 2",
        ("num_hidden_layers is an integer of 5,000 digits (at most 30)",),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: a list nested 100,000 deep)",
        _config_with('{"model_type": "llama", "x": ' + "[" * 100000 + "]" * 100000 + "}"),
        "exit 2",
        ("nested deeper than 32 levels",),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: qwen3-next with full_attention_interval 0)",
        _config_with(
            {"model_type": "qwen3_next", "num_hidden_layers": 8, "full_attention_interval": 0}
        ),
        "exit 2",
        ("full_attention_interval must be an int in [1, 4096]",),
    ),
    Case(
        COMMAND,
        "kvlab plan --config FILE --gpu h200  (FILE: nemotron_h, a 55-layer pattern for 56 layers)",
        _config_with(
            {
                "model_type": "nemotron_h",
                "num_hidden_layers": 56,
                "hybrid_override_pattern": "M*" * 27 + "M",
            }
        ),
        "exit 2",
        ("hybrid_override_pattern must be num_hidden_layers (56) characters",),
    ),
    Case(
        COMMAND,
        "kvlab walkthrough --notebook-dir DIR  (DIR: a notebook of JSON nested 100,000 deep)",
        _notebook_dir_with('{"cells": ' + "[" * 100000 + "]" * 100000 + "}"),
        "exit 2",
        ("01_x.ipynb is not a notebook papermill can read",),
    ),
    Case(
        COMMAND,
        "kvlab walkthrough --notebook-dir DIR  (DIR: a notebook that is a JSON list)",
        _notebook_dir_with("[1, 2]"),
        "exit 2",
        ("01_x.ipynb is not a notebook papermill can read",),
    ),
    Case(
        COMMAND,
        "kvlab walkthrough --notebook-dir /no/such/folder",
        cli("walkthrough", "--notebook-dir", "/no/such/folder"),
        "exit 2",
        ("--notebook-dir /no/such/folder is not a folder",),
    ),
    Case(
        COMMAND,
        "kvlab scenario FILE --ranks 1  (FILE: the 16 x GB300 file, a request arriving at step 2**20)",
        _hostile_deployment(_set("deployment.requests.0.arrival_step", 1 << 20), "late"),
        "exit 2",
        ("deployment.requests[0].arrival_step must be in [0, 4999]",),
    ),
    Case(
        COMMAND,
        "kvlab plan --model llama-3.1-8b --gpu h200 --max-seq-len 999...9  (5,000 digits)",
        cli("plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--max-seq-len", "9" * 5000),
        "exit 2",
        ("argument --max-seq-len: invalid int value", "(cut: 5,045 characters)"),
    ),
    Case(
        COMMAND,
        "kvlab slides --notebook-dir 999...9  (a name of 5,000 characters)",
        cli("slides", "--notebook-dir", "9" * 5000),
        "exit 2",
        ("is not a folder",),
    ),
    Case(
        COMMAND,
        "kvlab slides --notebook-dir DIR  (DIR: 01_x.ipynb cut short)",
        _notebook_dir_with('{"cells": [{"cell_type": "markdown", "sou', "slides"),
        "exit 2",
        ("01_x.ipynb is not a notebook nbformat can read: Notebook does not appear to be JSON",),
    ),
    Case(
        CONSTRUCTOR,
        "load_scenario(None)",
        raises(lambda: load_scenario(None)),
        "TypeError",
        ("name_or_path must be a str or PathLike, got None",),
    ),
    Case(
        SCENARIO,
        "expected.total_blocks: 65  (the parameters give 64)",
        scenario_data(_set("expected.total_blocks", 65)),
        "ScenarioError",
        ("expected.total_blocks is 65, but the parameters give 64",),
    ),
    Case(
        CONSTRUCTOR,
        "seed_geometry().blocks_for_tokens(float('nan'))",
        raises(lambda: seed_geometry().blocks_for_tokens(float("nan"))),
        "TypeError",
        ("num_tokens must be an int in [0, ",),
    ),
    Case(
        CONSTRUCTOR,
        "seed_geometry().blocks_in(-1)",
        raises(lambda: seed_geometry().blocks_in(-1)),
        "ValueError",
        ("quota_bytes must be in [0, ",),
    ),
    Case(
        CONSTRUCTOR,
        "cache.grow_within_pages(-5)",
        raises(lambda: _manager().create_cache("r").grow_within_pages(-5)),
        "ValueError",
        ("num_tokens must be in [0, ",),
    ),
    Case(
        CONSTRUCTOR,
        "poisson_workload(5, 1.0, prompt_len=0, max_new_tokens=8)",
        raises(lambda: poisson_workload(5, 1.0, prompt_len=0, max_new_tokens=8)),
        "ValueError",
        ("prompt_len must draw lengths of at least 1",),
    ),
    Case(
        CONSTRUCTOR,
        "outcome_table({})",
        raises(lambda: outcome_table({})),
        "ValueError",
        ("results must be a non-empty mapping (policy -> SimulationResult)",),
    ),
    Case(
        CONSTRUCTOR,
        "engine_outcome(None)",
        raises(lambda: engine_outcome(None)),
        "TypeError",
        ("result must be a SimulationResult, got None",),
    ),
    Case(
        CONSTRUCTOR,
        "replay_with_reuse(requests, policies='capacity')",
        raises(lambda: replay_with_reuse([Request("r", 8, 4)], policies="capacity")),
        "TypeError",
        ("policies must be a sequence of TensorRT-LLM policy names, got 'capacity'",),
    ),
    Case(
        CONSTRUCTOR,
        "replay_with_reuse(requests, policies=('vllm',))",
        raises(lambda: replay_with_reuse([Request("r", 8, 4)], policies=("vllm",))),
        "ValueError",
        ("policies", "'vllm'", "none/clamped"),
    ),
    Case(
        CONSTRUCTOR,
        "dtype_rows(ssm_dtypes='bfloat16')",
        raises(lambda: dtype_rows(ssm_dtypes="bfloat16")),
        "TypeError",
        ("ssm_dtypes must be a sequence of dtype names, got 'bfloat16'",),
    ),
    Case(
        CONSTRUCTOR,
        "simulate(scheduler, [Request('r', 8, 4, context_current_position=8)])",
        raises(
            lambda: run_policies([Request("r", 8, 4, context_current_position=8)], ["capacity"])
        ),
        "ValueError",
        ("context_current_position", "must be 0"),
    ),
    Case(
        CONSTRUCTOR,
        "sweep_repro(itertools.repeat(4.0), [8])  (an endless iterator)",
        raises(lambda: sweep_repro(itertools.repeat(4.0), [8])),
        "ValueError",
        ("pool_mibs must hold at most 1,048,576 numbers",),
    ),
    Case(
        CONSTRUCTOR,
        "phase_diagram(range(1, 8001), range(1, 8001))",
        raises(lambda: phase_diagram(range(1, 8001), range(1, 8001))),
        "ValueError",
        ("at most 4,194,304 cells",),
    ),
    Case(
        COMMAND,
        "kvlab plan --model llama-3.1-8b --gpu h200 --ranks 3 --tp-size 2",
        cli("plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--ranks", "3", "--tp-size", "2"),
        "exit 2",
        ("ranks must be tp_size x pp_size = 2",),
    ),
    Case(
        COMMAND,
        "kvlab plan --model llama-3.1-70b --gpu h200 --tp-size 3",
        cli("plan", "--model", "llama-3.1-70b", "--gpu", "h200", "--tp-size", "3"),
        "exit 2",
        ("tp_size must divide num_attention_heads (64)",),
    ),
    Case(
        COMMAND,
        "kvlab plan --model llama-3.1-8b --gpu h200 --manager v3",
        cli("plan", "--model", "llama-3.1-8b", "--gpu", "h200", "--manager", "v3"),
        "exit 2",
        ("manager must be one of", "'auto'"),
    ),
    Case(
        COMMAND,
        "kvlab plan --model qwen3.5-27b --gpu h200 --manager v1",
        cli("plan", "--model", "qwen3.5-27b", "--gpu", "h200", "--manager", "v1"),
        "exit 2",
        ("MambaHybridCacheManager", "manager must be"),
    ),
    Case(
        COMMAND,
        "kvlab plan --model llama-3.1-8b --gpu h200 --spec-mode mtp --max-draft-len 2",
        cli(
            "plan",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h200",
            "--spec-mode",
            "mtp",
            "--max-draft-len",
            "2",
        ),
        "exit 2",
        ("spec_mode 'mtp'", "num_nextn_predict_layers"),
    ),
    # -- scenario files ------------------------------------------------------------------------------
    Case(
        SCENARIO,
        "parameters.pool_mib: four",
        scenario_data(_set("parameters.pool_mib", "four")),
        "ScenarioError",
        ("parameters.pool_mib", "[1, 1048576]"),
    ),
    Case(
        SCENARIO,
        "parameters.num_layers: 2.5",
        scenario_data(_set("parameters.num_layers", 2.5)),
        "ScenarioError",
        ("parameters.num_layers", "[1, 16384]"),
    ),
    Case(
        SCENARIO,
        "parameters.num_layers: true",
        scenario_data(_set("parameters.num_layers", True)),
        "ScenarioError",
        ("parameters.num_layers", "[1, 16384]"),
    ),
    Case(
        SCENARIO,
        "parameters.max_batch_size: -1",
        scenario_data(_set("parameters.max_batch_size", -1)),
        "ScenarioError",
        ("parameters.max_batch_size", "[1, 65536]"),
    ),
    Case(
        SCENARIO,
        "parameters.pool_mib: 10**30",
        scenario_data(_set("parameters.pool_mib", 10**30)),
        "ScenarioError",
        ("parameters.pool_mib", "[1, 1048576]"),
    ),
    Case(
        SCENARIO,
        "parameters.pool_mib: (a 5,000-digit integer)",
        scenario_text(_replace("pool_mib: 4 ", "pool_mib: " + "9" * 5000 + " ")),
        "ScenarioError",
        ("parameters.pool_mib", "5000 characters"),
    ),
    Case(
        SCENARIO,
        "parameters.kv_dtype: int4",
        scenario_data(_set("parameters.kv_dtype", "int4")),
        "ScenarioError",
        ("parameters.kv_dtype", "float16"),
    ),
    Case(
        SCENARIO,
        "colour: red  (an unknown key)",
        scenario_data(_set("colour", "red")),
        "ScenarioError",
        ("colour is not a known field", "parameters"),
    ),
    Case(
        SCENARIO,
        "parameters.pool_gib: 4  (an unknown key)",
        scenario_data(_set("parameters.pool_gib", 4)),
        "ScenarioError",
        ("parameters.pool_gib is not a known field", "pool_mib"),
    ),
    Case(
        SCENARIO,
        "(no parameters.head_dim)",
        scenario_data(_drop("parameters.head_dim")),
        "ScenarioError",
        ("parameters.head_dim is missing", "[1, 16384]"),
    ),
    Case(
        SCENARIO,
        "parameters.pool_mib: !!python/object/apply:os.system [...]",
        scenario_text(
            _replace("pool_mib: 4", "pool_mib: !!python/object/apply:os.system ['true']")
        ),
        "ScenarioError",
        ("parameters.pool_mib", "YAML tag"),
    ),
    Case(
        SCENARIO,
        "title: 2024-01-01  (a YAML date)",
        scenario_text(_replace('title: "Issue', 'title: 2024-01-01\nx: "Issue')),
        "ScenarioError",
        ("title", "timestamp"),
    ),
    Case(
        SCENARIO,
        "num_layers: &n 2 ... num_kv_heads: *n  (an alias)",
        scenario_text(
            _replace("num_layers: 2", "num_layers: &n 2", "num_kv_heads: 2", "num_kv_heads: *n")
        ),
        "ScenarioError",
        ("parameters.num_kv_heads", "alias"),
    ),
    Case(
        SCENARIO,
        "head_dim given twice",
        scenario_text(_replace("head_dim: 128", "head_dim: 128\n  head_dim: 64")),
        "ScenarioError",
        ("parameters.head_dim", "given twice"),
    ),
    Case(
        SCENARIO,
        "[[[[ ... ]]]]  (nested 20,000 deep)",
        scenario_text(lambda _: "[" * 20000 + "]" * 20000),
        "ScenarioError",
        ("nested too deeply",),
    ),
    Case(
        SCENARIO,
        "- a list\\n- not a mapping",
        scenario_text(lambda _: "- a list\n- not a mapping\n"),
        "ScenarioError",
        ("the document must be a mapping", "parameters"),
    ),
    Case(SCENARIO, "(an empty file)", scenario_text(lambda _: ""), "ScenarioError", ("empty",)),
    Case(
        SCENARIO,
        "(a file of passwd-like lines)",
        scenario_text(lambda _: "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/:/bin/sh\n"),
        "ScenarioError",
        ("the document must be a mapping", "got a str of 55 character(s)"),
    ),
    Case(
        SCENARIO,
        "parameters.pool_mib: 010  (YAML 1.1 octal: 8)",
        scenario_text(_replace("pool_mib: 4 ", "pool_mib: 010 ")),
        "ScenarioError",
        ("parameters.pool_mib is written 010", "base-8 or base-60"),
    ),
    Case(
        SCENARIO,
        "parameters.max_batch_size: 1:00  (YAML 1.1 base 60: 60)",
        scenario_text(_replace("max_batch_size: 1", "max_batch_size: 1:00")),
        "ScenarioError",
        ("parameters.max_batch_size is written 1:00", "base-8 or base-60"),
    ),
    Case(
        SCENARIO,
        "(a 2 MiB file)",
        scenario_text(lambda _: "# padding\n" * (1 << 18)),
        "ScenarioError",
        ("MAX_FILE_BYTES=1048576",),
    ),
    Case(
        SCENARIO,
        "(a folder named x.yaml)",
        lambda tmp: raises(lambda: load_scenario((tmp / "x.yaml").mkdir() or tmp / "x.yaml"))(tmp),
        "ScenarioError",
        ("not a regular file",),
    ),
    Case(
        SCENARIO,
        "name: other  (in rtx5080-4mib.yaml)",
        scenario_data(_set("name", "other")),
        "ScenarioError",
        ("name must equal the file's stem", "'rtx5080-4mib'"),
    ),
    # -- papermill parameters --------------------------------------------------------------------------
    Case(
        PAPERMILL,
        "02_single_gpu_repro_4mib.ipynb -p pool_mib -1.0",
        papermill_run("02_single_gpu_repro_4mib.ipynb", pool_mib=-1.0),
        "PapermillExecutionError",
        ("pool_mib", "(0.0, 1048576]"),
    ),
    Case(
        PAPERMILL,
        "05_mamba_residency.ipynb -p ssm_dtype int8",
        papermill_run("05_mamba_residency.ipynb", ssm_dtype="int8"),
        "PapermillExecutionError",
        ("ssm_dtype", "'bfloat16', 'float32'"),
    ),
    Case(
        PAPERMILL,
        "05_mamba_residency.ipynb -p SMOKE 1",
        papermill_run("05_mamba_residency.ipynb", SMOKE=1),
        "PapermillExecutionError",
        ("SMOKE must be a bool",),
    ),
    # -- widgets ---------------------------------------------------------------------------------------
    Case(
        WIDGET,
        "repro_panel(pool_mib=0)",
        raises(lambda: panel("repro_panel", pool_mib=0)),
        "ValueError",
        ("pool_mib", "(0.0, 1048576]"),
    ),
    Case(
        WIDGET,
        "admission_panel(policy='fifo')",
        raises(lambda: panel("admission_panel", policy="fifo")),
        "ValueError",
        ("policy", "'capacity'"),
    ),
    Case(
        WIDGET,
        "ranks_panel(workspace_gib=100.0)",
        raises(lambda: panel("ranks_panel", workspace_gib=100.0)),
        "ValueError",
        ("workspace_gib", "[0.0, 64.0]"),
    ),
    Case(
        WIDGET,
        "mamba_panel(max_batch_size=0)",
        raises(lambda: panel("mamba_panel", max_batch_size=0)),
        "ValueError",
        ("max_batch_size", "[1, 1048576]"),
    ),
    Case(
        WIDGET,
        "repro_panel().set(context=12345)",
        widget_value("repro_panel", context=12345),
        "ValueError",
        ("context must be one of the control's values", "from 32 to 131072", "12345"),
    ),
    Case(
        WIDGET,
        "repro_panel().set(policy='wide')",
        widget_value("repro_panel", policy="wide"),
        "ValueError",
        ("policy must be one of the control's values", "'configured'", "'wide'"),
    ),
    Case(
        WIDGET,
        "repro_panel().set(pool_mib=1e9)",
        widget_value("repro_panel", pool_mib=1e9),
        "ValueError",
        ("pool_mib must be a number in [0.015625, 1024]",),
    ),
    Case(
        WIDGET,
        "ranks_panel().set(workspace_gib='28')",
        widget_value("ranks_panel", workspace_gib="28"),
        "ValueError",
        ("workspace_gib must be a number in [0, 64], got '28'",),
    ),
    Case(
        WIDGET,
        "repro_panel().set(pool_mib=8)",
        widget_value("repro_panel", pool_mib=8),
        "accepted",
        ("pool_mib is now 8.0",),
    ),
]


def _scrub(text: str, tmp: Path) -> str:
    """The message with the temporary folder and the repository root made portable."""
    return text.replace(str(tmp), "tmp").replace(str(ROOT), ".")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    results = []
    for i, case in enumerate(CASES):
        tmp = tmp_path_factory.mktemp(f"case{i}")
        kind, text = case.attempt(tmp)
        results.append((kind, _scrub(text, tmp)))
    return results


@pytest.mark.parametrize(
    "index", range(len(CASES)), ids=[f"{c.door.strip('`')}: {c.shown[:50]}" for c in CASES]
)
def test_bad_input_gets_a_clear_error(outcomes, index):
    case = CASES[index]
    kind, text = outcomes[index]
    assert kind == case.kind, f"{case.shown}: expected {case.kind}, got {kind}: {text}"
    for word in case.words:
        assert word in text, f"{case.shown}: {word!r} not in {text!r}"


def _cell(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def render_table(results) -> str:
    lines = [
        BEGIN,
        "Generated by `tests/test_input_table.py` from the inputs it tries; "
        "`KVLAB_WRITE_DOCS=1 pytest tests/test_input_table.py` rewrites it.",
        "",
        "| door | input | what it gets |",
        "|---|---|---|",
    ]
    for case, (kind, text) in zip(CASES, results):
        got = kind if kind.startswith("exit") else f"`{kind}`"
        lines.append(f"| {case.door} | `{_cell(case.shown)}` | {got}: {_cell(text)} |")
    lines.append(END)
    return "\n".join(lines)


def test_the_docs_table_is_the_one_these_inputs_give(outcomes):
    table = render_table(outcomes)
    text = TABLE_DOC.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1, (
        f"docs/BAD_INPUTS.md needs one {BEGIN} ... {END}"
    )
    start, end = text.index(BEGIN), text.index(END) + len(END)
    if os.environ.get("KVLAB_WRITE_DOCS") == "1":
        TABLE_DOC.write_text(text[:start] + table + text[end:], encoding="utf-8")
    current = TABLE_DOC.read_text(encoding="utf-8")
    assert current[start : current.index(END) + len(END)] == table, (
        "docs/BAD_INPUTS.md's table is out of date: regenerate it with "
        "KVLAB_WRITE_DOCS=1 pytest tests/test_input_table.py"
    )


def test_every_door_is_tried():
    assert {case.door for case in CASES} == {
        CONSTRUCTOR,
        COMMAND,
        SCENARIO,
        PAPERMILL,
        WIDGET,
        VLLM_DOOR,
    }
