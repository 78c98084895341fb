"""``kvlab doctor``: is this laptop ready for the workshop? One line per check (ok, warn, or
FAIL with its fix); ready when no check FAILs. ``--json`` for an instructor collecting a room's
results."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import shutil
import sys
import sysconfig
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from kvlab.core.paths import NOTEBOOK_DIR, REPOSITORY

OK, WARN, FAIL = "ok", "warn", "FAIL"
MIN_PYTHON, MIN_TORCH = (3, 11), (2, 4)  # pyproject.toml's requires-python and torch
#: what the notebooks need beyond kvlab's own imports (the ``notebooks`` extra and plotly)
NOTEBOOK_PACKAGES = ("jupyterlab", "ipywidgets", "anywidget", "plotly", "papermill", "ipykernel")
WALK, EXERCISES = ("01", "02", "03", "04", "05", "06"), ("ex1", "ex2", "ex3", "ex4")
REPRO_BUDGET_S = 1.0  # one resize on a 4 MiB pool: slower means a very slow or busy machine
#: free disk below which build/ may not fit (FAIL), and below which the day gets tight (warn)
DISK_FAIL_BYTES, DISK_WARN_BYTES = 200 * 2**20, 2 * 2**30
SETUP = "bash scripts/setup.sh notebooks"
MAKE_VENV = "python3 -m venv .venv && . .venv/bin/activate"
#: set to 1 to let setup.sh install into a system Python anyway (a throwaway container)
ALLOW_SYSTEM_PYTHON = "KVLAB_ALLOW_SYSTEM_PYTHON"


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, ok / warn / FAIL, what was found, the fix."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f"  -> fix: {self.fix}" if self.status != OK and self.fix else ""
        return f"{self.status:<4}  {self.name:<10}  {self.detail}{fix}"


def check_python() -> Check:
    found = platform.python_version()
    if sys.version_info[:2] >= MIN_PYTHON:
        return Check("python", OK, f"{found} on {platform.system()} {platform.machine()}")
    need = ".".join(map(str, MIN_PYTHON))
    fix = f"install Python {need}+ (python.org, pyenv or conda), then {SETUP}"
    return Check("python", FAIL, f"{found}; kvlab needs {need} or newer", fix)


def python_environment() -> tuple[str, str]:
    """(kind, where) of this Python: "venv" or "conda" (an environment of its own), "system"
    (the operating system's: marked externally managed as PEP 668 says, or living in /usr or
    macOS's own folders), or "user" (a Python installed for the user: pyenv, python.org)."""
    if sys.prefix != sys.base_prefix:
        return "venv", sys.prefix
    if (Path(sys.prefix) / "conda-meta").is_dir():
        return "conda", sys.prefix
    managed = (Path(sysconfig.get_path("stdlib")) / "EXTERNALLY-MANAGED").exists()
    os_folders = ("/System/", "/Library/Developer/", "/Applications/Xcode")
    if managed or sys.prefix == "/usr" or sys.prefix.startswith(os_folders):
        return "system", sys.executable
    return "user", sys.prefix


def install_refusal() -> str | None:
    """Why scripts/setup.sh must not install here, in one line, or None: never into the
    system's Python (pip refuses an externally managed one; elsewhere about 100 packages would
    land among the system's), unless ALLOW_SYSTEM_PYTHON is 1."""
    kind, where = python_environment()
    if kind != "system" or os.environ.get(ALLOW_SYSTEM_PYTHON) == "1":
        return None
    return (
        f"setup.sh: {where} is the system's Python; make a virtual environment first: "
        f"{MAKE_VENV}, then run this again"
    )


def check_environment() -> Check:
    kind, where = python_environment()
    if kind in ("venv", "conda"):
        return Check("env", OK, f"the {kind} environment {where}")
    if kind == "user":
        found = f"no virtual environment: kvlab's packages went into {where} itself"
        return Check("env", WARN, found, f"{MAKE_VENV}, then {SETUP}")
    return Check("env", FAIL, f"the system's Python {where}", f"{MAKE_VENV}, then {SETUP}")


def check_kvlab() -> Check:
    import kvlab

    missing = [name for name in kvlab.__all__ if not hasattr(kvlab, name)]
    if missing:
        fix = f"update the checkout (git pull), then {SETUP}"
        return Check("kvlab", FAIL, f"public names missing: {', '.join(missing)}", fix)
    try:
        where = f"{importlib.metadata.version('kvlab')} from {REPOSITORY}"
    except importlib.metadata.PackageNotFoundError:
        return Check("kvlab", FAIL, f"imported from {REPOSITORY} but not installed", SETUP)
    if shutil.which("kvlab") is None:
        fix = "use `python -m kvlab`, or activate the environment that ran setup.sh"
        return Check("kvlab", WARN, f"{where}; the `kvlab` command is not on PATH", fix)
    return Check("kvlab", OK, where)


def check_torch() -> Check:
    try:
        import torch
    except ImportError as exc:
        return Check("torch", FAIL, f"does not import: {exc}", SETUP)
    if tuple(map(int, re.findall(r"\d+", torch.__version__)[:2])) < MIN_TORCH:
        need = ".".join(map(str, MIN_TORCH))
        return Check("torch", FAIL, f"{torch.__version__}; kvlab needs {need}+", SETUP)
    device = "cpu (every notebook runs on the CPU)"
    if torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)})"
    return Check("torch", OK, f"{torch.__version__}, device {device}")


def check_packages() -> Check:
    found, missing = [], []
    for name in NOTEBOOK_PACKAGES:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        return Check("packages", FAIL, f"missing: {', '.join(missing)}", SETUP)
    return Check("packages", OK, ", ".join(found))


def check_kernel() -> Check:
    try:
        from jupyter_client.kernelspec import KernelSpecManager
    except ImportError:
        return Check("kernel", FAIL, "jupyter_client is not installed", SETUP)
    if "python3" in KernelSpecManager().find_kernel_specs():
        return Check("kernel", OK, "python3 (the kernel the notebooks name) is registered")
    fix = f"{SETUP} (it registers the kernel)"
    return Check("kernel", FAIL, "no Jupyter kernel named python3", fix)


def check_notebooks() -> Check:
    workshop = NOTEBOOK_DIR / "workshop"
    missing = [n for n in WALK if not any(NOTEBOOK_DIR.glob(f"{n}_*.ipynb"))]
    missing += [n for n in EXERCISES if not any(workshop.glob(f"{n}_*.ipynb"))]
    if missing:
        fix = "use a full clone of the repository (git clone), not an installed wheel"
        return Check("notebooks", FAIL, f"{NOTEBOOK_DIR} lacks {', '.join(missing)}", fix)
    found = f"{len(WALK)} notebooks and {len(EXERCISES)} exercises in {NOTEBOOK_DIR}"
    return Check("notebooks", OK, found)


def check_seed_repro() -> Check:
    from kvlab.analysis.repro import run_repro

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the manager warns that it clamps max_seq_len: the point
        result = run_repro(pool_mib=4, context=8192, policy="clamped")
    seconds = time.perf_counter() - start
    found = (
        f"{result.pool_bytes // 2**20} MiB pool: {result.total_blocks} blocks, row "
        f"{result.max_blocks_per_seq} entries, outcome {result.outcome}, {seconds * 1000:.0f} ms"
    )
    if (result.total_blocks, result.max_blocks_per_seq, result.outcome) != (64, 68, "crash"):
        fix = f"reinstall from a clean checkout (git status shows local edits?), then {SETUP}"
        return Check("seed repro", FAIL, f"{found}; expected 64 blocks, 68 entries, crash", fix)
    if seconds > REPRO_BUDGET_S:
        fix = "close other programs; the notebooks will be slow on this machine"
        return Check("seed repro", WARN, f"{found} (over {REPRO_BUDGET_S:g} s)", fix)
    return Check("seed repro", OK, found)


def check_disk() -> Check:
    free = shutil.disk_usage(REPOSITORY).free
    found = f"{free / 2**30:.1f} GiB free where build/ goes"
    fix = f"free at least {DISK_WARN_BYTES // 2**30} GiB"
    if free < DISK_FAIL_BYTES:
        return Check("disk", FAIL, found, fix)
    if free < DISK_WARN_BYTES:
        return Check("disk", WARN, found, fix)
    return Check("disk", OK, found)


def check_browser() -> Check:
    """Optional: kaleido draws the static report's figures with a Chromium-based browser."""
    try:
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        return Check(
            "browser", WARN, "kaleido is not installed: the static report has no images", SETUP
        )
    path = Chromium.find_browser(skip_local=False)
    if path is None:
        found = (
            "no Chromium or Chrome found: the walkthrough's HTML report will show no figure "
            "images (JupyterLab is not affected)"
        )
        fix = "install Chromium or Google Chrome (Linux: apt-get install chromium)"
        return Check("browser", WARN, found, fix)
    return Check("browser", OK, f"{path} (figures of the static report)")


CHECKS: Sequence[Callable[[], Check]] = (
    check_python,
    check_environment,
    check_kvlab,
    check_torch,
    check_packages,
    check_kernel,
    check_notebooks,
    check_seed_repro,
    check_disk,
    check_browser,
)


def run_checks() -> list[Check]:
    """Every check of :data:`CHECKS`, in order; one that raises is a FAIL naming why."""
    results = []
    for check in CHECKS:
        try:
            results.append(check())
        except Exception as exc:  # a broken install shows up here: say so, check the rest
            name = check.__name__.removeprefix("check_").replace("_", " ")
            results.append(Check(name, FAIL, f"{type(exc).__name__}: {exc}", SETUP))
    return results


def ready(results: Sequence[Check]) -> bool:
    return all(r.status != FAIL for r in results)


def report(results: Sequence[Check]) -> str:
    failed = sum(r.status == FAIL for r in results)
    warned = sum(r.status == WARN for r in results)
    verdict = (
        f"ready for the workshop ({warned} warning{'s' * (warned != 1)})"
        if not failed
        else f"NOT ready: {failed} check{'s' * (failed != 1)} failed; fix and run `kvlab doctor` again"
    )
    return "\n".join([r.line() for r in results] + [verdict])


def as_json(results: Sequence[Check]) -> str:
    return json.dumps(
        {
            "ready": ready(results),
            "host": platform.node(),
            "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
            "checks": [asdict(r) for r in results],
        },
        indent=2,
    )
