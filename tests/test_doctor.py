"""kvlab doctor: the pre-day check. Every check passes on the test machine's set-up, a failing
check is a FAIL line with its fix and exit 1, a warning alone keeps exit 0, --json carries the
same, and a check that raises is reported, not a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bounds import HANG_S

from kvlab import doctor
from kvlab.cli import main
from kvlab.core.paths import REPOSITORY
from kvlab.doctor import FAIL, OK, WARN, Check


def _replace(monkeypatch, name: str, result: Check) -> None:
    """CHECKS with the check called ``check_<name>`` replaced by one returning ``result``."""
    checks = tuple((lambda: result) if c.__name__ == f"check_{name}" else c for c in doctor.CHECKS)
    assert checks != doctor.CHECKS, name
    monkeypatch.setattr(doctor, "CHECKS", checks)


def test_every_check_passes_here_and_the_command_exits_0(capsys):
    """The test extras and Chromium are what setup.sh installs for the tests: all ok."""
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(doctor.CHECKS) + 1
    # outside a virtual environment (a CI machine's own pyenv Python) the env line warns
    outside = doctor.python_environment()[0] == "user"
    assert all(
        line.startswith("ok ") or (outside and line.startswith("warn  env ")) for line in lines[:-1]
    ), lines
    assert lines[-1] == f"ready for the workshop ({int(outside)} warning{'' if outside else 's'})"
    seed = next(line for line in lines if "seed repro" in line)
    assert "4 MiB pool: 64 blocks, row 68 entries, outcome crash" in seed


def test_the_seed_repro_runs_well_under_a_second():
    check = doctor.check_seed_repro()
    assert check.status == OK, check
    assert int(check.detail.rsplit(", ", 1)[1].removesuffix(" ms")) < 1000 * doctor.REPRO_BUDGET_S


def test_a_failing_check_is_a_FAIL_line_with_its_fix_and_exit_1(monkeypatch, capsys):
    _replace(
        monkeypatch,
        "torch",
        Check(
            "torch",
            FAIL,
            "does not import: No module named 'torch'",
            "bash scripts/setup.sh notebooks",
        ),
    )
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL  torch       does not import: No module named 'torch'  -> fix: bash scripts/setup.sh "
        "notebooks"
    ) in out.splitlines()
    assert out.splitlines()[-1].startswith("NOT ready: 1 check failed")


def test_a_warning_alone_keeps_exit_0(monkeypatch, capsys):
    _replace(monkeypatch, "environment", Check("env", OK, "the venv environment /tmp/.venv"))
    _replace(
        monkeypatch,
        "browser",
        Check("browser", WARN, "no Chromium or Chrome found", "install Chromium"),
    )
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "warn  browser     no Chromium or Chrome found  -> fix: install Chromium" in out
    assert out.splitlines()[-1] == "ready for the workshop (1 warning)"


def test_a_check_that_raises_is_a_FAIL_not_a_traceback(monkeypatch, capsys):
    def check_notebooks():
        raise PermissionError("notebooks/ is not readable")

    monkeypatch.setattr(doctor, "CHECKS", (doctor.check_python, check_notebooks))
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  notebooks   PermissionError: notebooks/ is not readable" in out


def test_json_carries_every_check_and_the_verdict(monkeypatch, capsys):
    _replace(
        monkeypatch,
        "disk",
        Check("disk", FAIL, "0.1 GiB free where build/ goes", "free at least 2 GiB"),
    )
    assert main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ready"] is False and report["host"] and report["platform"]
    assert [c["name"] for c in report["checks"]] == [
        "python",
        "env",
        "kvlab",
        "torch",
        "packages",
        "kernel",
        "notebooks",
        "seed repro",
        "disk",
        "browser",
    ]
    disk = next(c for c in report["checks"] if c["name"] == "disk")
    assert disk == {
        "name": "disk",
        "status": "FAIL",
        "detail": "0.1 GiB free where build/ goes",
        "fix": "free at least 2 GiB",
    }


@pytest.mark.parametrize(
    "version, below", [((3, 10, 14), True), ((3, 11, 0), False), ((3, 13, 1), False)]
)
def test_python_below_3_11_fails(monkeypatch, version, below):
    monkeypatch.setattr(sys, "version_info", version)
    assert doctor.check_python().status == (FAIL if below else OK)


def test_a_seed_repro_that_no_longer_crashes_fails(monkeypatch):
    from kvlab.analysis import repro

    real = repro.run_repro
    monkeypatch.setattr(repro, "run_repro", lambda **kw: real(**{**kw, "policy": "configured"}))
    check = doctor.check_seed_repro()
    assert check.status == FAIL and "row 260 entries, outcome refused" in check.detail


def test_missing_notebook_packages_and_kernel_fail(monkeypatch):
    import importlib.metadata

    real = importlib.metadata.version

    def version(name):
        if name == "papermill":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    check = doctor.check_packages()
    assert check.status == FAIL and check.detail == "missing: papermill"

    from jupyter_client.kernelspec import KernelSpecManager

    monkeypatch.setattr(KernelSpecManager, "find_kernel_specs", lambda self: {"julia": "/k"})
    assert doctor.check_kernel().status == FAIL


def test_low_disk_warns_then_fails(monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    for free, status in ((10 * 2**30, OK), (2**30, WARN), (50 * 2**20, FAIL)):
        monkeypatch.setattr(shutil, "disk_usage", lambda path, free=free: usage(0, 0, free))
        assert doctor.check_disk().status == status, free


def test_the_command_runs_as_a_participant_types_it():
    proc = subprocess.run(
        [sys.executable, "-m", "kvlab", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["ready"] is True


@pytest.mark.parametrize(
    "prefix, base, marked, kind, status",
    [
        ("/home/a/kvlab/.venv", "/usr", True, "venv", OK),
        ("/home/a/.pyenv/versions/3.11.7", None, False, "user", WARN),
        ("/usr", None, False, "system", FAIL),
        (
            "/opt/homebrew/opt/python@3.12/Frameworks/Python.framework/Versions/3.12",
            None,
            True,
            "system",
            FAIL,
        ),
        (
            "/Library/Developer/CommandLineTools/Library/Frameworks/Python3.framework/Versions/3.9",
            None,
            False,
            "system",
            FAIL,
        ),
    ],
)
def test_the_environment_check_tells_a_virtual_environment_from_the_systems_python(
    monkeypatch, tmp_path, prefix, base, marked, kind, status
):
    stdlib = tmp_path / "lib"
    stdlib.mkdir()
    if marked:  # PEP 668: the distribution's "externally managed" marker beside the stdlib
        (stdlib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    monkeypatch.setattr(sys, "prefix", prefix)
    monkeypatch.setattr(sys, "base_prefix", base or prefix)
    monkeypatch.setattr(doctor.sysconfig, "get_path", lambda name: str(stdlib))
    monkeypatch.delenv(doctor.ALLOW_SYSTEM_PYTHON, raising=False)
    assert doctor.python_environment()[0] == kind
    assert doctor.check_environment().status == status
    refusal = doctor.install_refusal()
    assert (refusal is not None) == (kind == "system")
    if refusal:
        assert refusal.endswith(
            "make a virtual environment first: python3 -m venv .venv && "
            ". .venv/bin/activate, then run this again"
        )
        monkeypatch.setenv(doctor.ALLOW_SYSTEM_PYTHON, "1")
        assert doctor.install_refusal() is None


def _externally_managed_python():
    """The operating system's python3 if it is marked externally managed (Debian 12 is)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        probe = "import sys, sysconfig, pathlib; sys.exit(not (pathlib.Path(sysconfig.get_path('stdlib')) / 'EXTERNALLY-MANAGED').exists() or sys.prefix != sys.base_prefix)"
        if Path(candidate).exists() and subprocess.run([candidate, "-c", probe]).returncode == 0:
            return candidate
    return None


@pytest.mark.skipif(_externally_managed_python() is None, reason="no externally managed python3")
def test_setup_sh_outside_a_venv_on_an_externally_managed_python_stops_with_one_line(tmp_path):
    """The issue's test: scripts/setup.sh run by the system's python3 installs nothing and
    says in one line what to run instead."""
    (tmp_path / "python3").symlink_to(_externally_managed_python())
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    env.pop(doctor.ALLOW_SYSTEM_PYTHON, None)
    proc = subprocess.run(
        ["bash", str(REPOSITORY / "scripts" / "setup.sh"), "notebooks"],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("setup.sh: ")
    assert (
        "is the system's Python; make a virtual environment first: python3 -m venv .venv"
        in proc.stderr
    )
