"""No rank outlives its parent, whatever signal either gets: the parent turns SIGINT, SIGTERM
and SIGHUP into an orderly stop (every rank killed and reaped, then exit 128 + the signal's
number, no traceback), and each rank ties itself to its parent (Linux's parent-death signal,
and a watch on its parent's pid). kvlab's own, for its rank processes; torch.distributed's
elastic agent and Ray do the same for theirs."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

from kvlab.core.checks import check_int

#: Exit code of a rank process that finds its parent gone (see :func:`tie_to_parent`).
PARENT_GONE_EXIT_CODE = 18
#: Seconds between a rank's checks that its parent is still there.
PARENT_POLL_S = 0.5
#: The signals that stop a run in an orderly way: every rank killed and reaped, then
#: :class:`RunStopped` (exit status 128 + the signal's number).
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class RunStopped(SystemExit):
    """A signal stopped a process-mode run after every rank process was killed and reaped: a
    SystemExit whose code is 128 + the signal's number (as a shell reports a process a signal
    ended), so that, uncaught, it ends a program with that status and no traceback."""

    def __init__(self, signum: int, ranks: int):
        super().__init__(128 + signum)
        self.signum = signum
        self.message = (
            f"{signal.Signals(signum).name}: run stopped; its {ranks} rank "
            "process(es) were killed and reaped"
        )

    def __str__(self) -> str:
        return self.message


class RunInterrupted(RunStopped, KeyboardInterrupt):
    """SIGINT's RunStopped (exit status 130); a KeyboardInterrupt too, for code catching one."""


class StopOnSignal:
    """While a run's ranks are alive, STOP_SIGNALS whose handler is Python's default (SIGINT's
    KeyboardInterrupt; SIGTERM and SIGHUP end the process at once, leaving its ranks behind)
    only record the signal: the parent's loop sees it, stops every rank and then raises
    RunStopped. Ignored signals (``nohup``) and a caller's own handlers are left alone; outside
    the main thread (where handlers cannot be set) it does nothing."""

    def __init__(self):
        self.signum: int | None = None
        self._pid = os.getpid()
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if os.getpid() != self._pid:  # a rank forked before it reset its handlers
            os._exit(128 + signum)
        if self.signum is None:
            self.signum = signum

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def raise_if_signalled(self, ranks: int) -> None:
        if self.signum is not None:
            kind = RunInterrupted if self.signum == signal.SIGINT else RunStopped
            raise kind(self.signum, ranks)


def tie_to_parent(parent_pid: int) -> None:
    """Make this process (a rank) end with its parent ``parent_pid``: Linux's parent-death signal
    (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, as torch.distributed.elastic and Ray do), plus a
    daemon thread that checks ``os.getppid()`` every PARENT_POLL_S (where prctl is missing, or
    the parent left before it was set); either ends the process with PARENT_GONE_EXIT_CODE or
    SIGKILL. SIGTERM and SIGHUP get their default (end at once); SIGINT is ignored: a terminal's
    Ctrl-C reaches the whole process group, and the parent stops its ranks itself."""
    check_int("parent_pid", parent_pid, low=1, high=(1 << 31) - 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(
                ctypes.c_int(1),
                ctypes.c_ulong(signal.SIGKILL),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
            )  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # no libc prctl: the thread below still watches
            pass
    if os.getppid() != parent_pid:
        os._exit(PARENT_GONE_EXIT_CODE)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent_pid:
                os._exit(PARENT_GONE_EXIT_CODE)

    threading.Thread(target=watch, name="kvlab-parent-watch", daemon=True).start()


__all__ = [
    "PARENT_GONE_EXIT_CODE",
    "PARENT_POLL_S",
    "RunInterrupted",
    "RunStopped",
    "STOP_SIGNALS",
    "StopOnSignal",
    "tie_to_parent",
]
