"""One way to run a JupyterLab server for the browser test and benchmarks/browser_latency.py:
on 127.0.0.1, a free port, a random token, its own config and runtime folders, in its own
process group so that stopping it stops its kernels too."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kvlab.run.supervisor import free_port


def _wait_for_server(url: str, proc: subprocess.Popen, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer within {timeout_s} s")


def start_lab(tmp: Path, root: Path):
    """JupyterLab over the folder ``root`` (its log in ``tmp/lab.log``), answering; returns
    (process, base URL, token)."""
    port, token = free_port(), secrets.token_hex(16)
    env = dict(
        os.environ, JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime")
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.expose_app_in_browser=True",
            "--ServerApp.open_browser=False",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "lab.log").open("w"),
        env=env,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(f"{base}/api/status?token={token}", proc)
    except BaseException:
        stop_lab(proc)
        raise
    return proc, base, token


def stop_lab(proc: subprocess.Popen) -> None:
    """Stop the server and everything it started (its process group)."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
