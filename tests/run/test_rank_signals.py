"""kvlab.run.supervisor: no rank process outlives the process that started it, whatever signal
that process gets. Each test runs the real ``kvlab scenario`` command (``kvlab.cli.main``) in a
child Python process, with a Fault that hangs rank 1 so that the run lasts until its timeout (60 s),
signals that process mid-run, and looks for its rank processes in /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from bounds import HANG_S

from kvlab.run.signals import PARENT_GONE_EXIT_CODE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc"),
]

RANKS = 4
# the real CLI, with the run's config given a Fault that hangs rank 1 at step 2
CLI_WITH_A_HUNG_RANK = textwrap.dedent(f"""
    import sys
    from kvlab import cli
    from kvlab.run import rank_config as D
    made = D.scenario_config
    D.scenario_config = lambda *a, **k: made(*a, fault=D.Fault(1, 2, "hang"), **k)
    sys.exit(cli.main(["scenario", "issue-21470", "--ranks", "{RANKS}", "--timeout", "60"]))
""")


def _stat(pid: int):
    """(ppid, state) of ``pid`` from /proc, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0]


def _children(pid: int):
    """The live (not zombie) children of ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] == pid and stat[1] != "Z":
                out.append(int(entry.name))
    return out


def _running(pids):
    return [p for p in pids if (s := _stat(p)) is not None and s[1] != "Z"]


def _ranks_of(proc, timeout_s: float = 40.0):
    """The rank processes of ``proc`` once all RANKS have started and the run is under way."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ranks = _children(proc.pid)
        if len(ranks) >= RANKS:
            time.sleep(2.0)  # past init_process_group: rank 1 hangs at step 2, the others wait
            return _children(proc.pid)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    pytest.fail(f"the run never started its {RANKS} ranks (exit code {proc.poll()})")


def _signal_the_cli(signum, tmp_path):
    """Start the CLI, signal it mid-run; return (returncode, stderr, its ranks still running
    5 s later). Its output goes to files (orphaned ranks would hold a pipe open). Kills whatever
    is left, whatever the outcome."""
    err_path = tmp_path / "stderr.txt"
    with open(tmp_path / "stdout.txt", "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", CLI_WITH_A_HUNG_RANK], stdout=out, stderr=err
        )
    ranks = []
    try:
        ranks = _ranks_of(proc)
        assert len(ranks) == RANKS
        os.kill(proc.pid, signum)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 5
        while _running(ranks) and time.monotonic() < deadline:
            time.sleep(0.05)
        return proc.returncode, err_path.read_text(), _running(ranks)
    finally:
        for pid in [proc.pid] + ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_the_cli_stops_every_rank_and_exits_128_plus_signal(signum, tmp_path):
    """SIGTERM/SIGHUP (the default action ends the parent at once) and SIGINT: the command
    stops and reaps every rank, then exits 128 + the signal's number, with no traceback."""
    start = time.monotonic()
    code, err, left = _signal_the_cli(signum, tmp_path)
    assert left == [], f"rank processes outlived `kvlab scenario` after {signum.name}: {left}"
    assert code == 128 + signum, (code, err)
    assert "Traceback" not in err, err
    assert time.monotonic() - start < 50


def test_a_killed_parent_takes_every_rank_with_it(tmp_path):
    """SIGKILL cannot be caught: the ranks' parent-death signal (and their watch on the parent
    pid) ends them within a second or two instead of at the gloo timeout."""
    code, _, left = _signal_the_cli(signal.SIGKILL, tmp_path)
    assert code == -signal.SIGKILL
    assert left == [], f"rank processes outlived their SIGKILLed parent: {left}"


def test_a_rank_ends_itself_when_its_parent_is_gone():
    """The rank-side guard on its own: a process whose recorded parent is not its parent exits
    at once (the race where the parent dies before PR_SET_PDEATHSIG is set)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kvlab.run.signals import tie_to_parent; tie_to_parent(1); "
            "import time; time.sleep(30)",
        ],
        timeout=20,
    )
    assert proc.returncode == PARENT_GONE_EXIT_CODE


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize(
    "where",
    [
        # before any rank starts: while the scenario's configuration is made
        "from kvlab.run import rank_config as M; name = 'scenario_config'",
        # after every rank is reaped: while the run is put into words
        "from kvlab.analysis import sentences as M; name = 'explain_run'",
    ],
)
def test_a_signal_outside_the_run_exits_128_plus_signal_with_one_line(where, signum):
    """A signal outside the run's own stop (no rank alive) ends the command with 128 + n and
    one line, not a traceback or death by the signal."""
    child = textwrap.dedent(f"""
        import os, signal, sys
        from kvlab import cli
        {where}
        made = getattr(M, name)
        def interrupted(*a, **k):
            os.kill(os.getpid(), {int(signum)})
            return made(*a, **k)
        setattr(M, name, interrupted)
        sys.exit(cli.main(["scenario", "issue-21470", "--ranks", "2", "--timeout", "60"]))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 128 + signum, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"kvlab: stopped by {signum.name}", proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_command_imports_torch_exits_128_plus_signal(signum):
    """``import kvlab.cli`` is light (the package loads its names lazily), so the command's
    handlers are in place before torch's import, the slow second of its start."""
    child = textwrap.dedent(f"""
        import importlib.abc, os, sys
        from kvlab import cli
        assert "torch" not in sys.modules, "import kvlab.cli imported torch"
        class SignalAtTorch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "torch":
                    sys.meta_path.remove(self)
                    os.kill(os.getpid(), {int(signum)})
                return None
        sys.meta_path.insert(0, SignalAtTorch())
        sys.exit(cli.main(["plan", "--example", "issue-21470"]))
    """)
    proc = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 128 + signum, proc.stderr
    assert proc.stderr.strip() == f"kvlab: stopped by {signum.name}", proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_inside_numpys_import_waits_until_numpy_is_whole(signum):
    """Under load the hostile corpus's signals fell inside numpy's own import: raised there, the
    stop was lost in its C code and the command went on with numpy half loaded ("no attribute
    'matrix'", "cannot load module more than once"). The first imports are held: numpy loads
    whole, then the command stops."""
    child = textwrap.dedent(f"""
        import importlib.abc, os, sys
        from kvlab import cli
        class SignalInsideNumpy(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "numpy.linalg":  # numpy/__init__.py is half way
                    sys.meta_path.remove(self)
                    os.kill(os.getpid(), {int(signum)})
                return None
        sys.meta_path.insert(0, SignalInsideNumpy())
        code = cli.main(["plan", "--example", "issue-21470"])
        import numpy
        print(numpy.matrix.__name__, numpy.linalg.__name__)
        sys.exit(code)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=HANG_S
    )
    assert proc.returncode == 128 + signum, proc.stderr
    assert proc.stdout == "matrix numpy.linalg\n", proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"kvlab: stopped by {signum.name}", proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_command_shuts_down_leaves_its_exit_code(signum):
    """Once main() has returned, a signal (here from an atexit hook, while Python shuts down)
    leaves the command's own exit code: the hostile corpus saw `kvlab plan` die by it."""
    child = textwrap.dedent(f"""
        import atexit, os, sys, time
        from kvlab import cli
        atexit.register(lambda: (os.kill(os.getpid(), {int(signum)}), time.sleep(0.2)))
        sys.argv = ["kvlab", "repro"]
        cli.run()
    """)
    proc = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 4, proc.stderr  # repro's "crash", the seed's ValueError
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signals_held_lets_a_clean_up_finish_then_raises_the_signal(signum):
    from kvlab.run.signals import Stopped, signals_held

    finished = False
    with pytest.raises(KeyboardInterrupt) as raised:
        with signals_held():
            os.kill(os.getpid(), signum)
            time.sleep(0.05)  # the handler has run by now: held, not raised here
            finished = True
    assert finished
    assert isinstance(raised.value, Stopped) == (signum != signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
