"""No rank outlives its parent, whatever signal either gets: the parent turns SIGINT, SIGTERM
and SIGHUP into an orderly stop (every rank killed and reaped, then exit 128 + the signal's
number), and each rank ties itself to its parent. kvlab's own; torch.distributed's elastic agent
and Ray do the same for theirs."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

#: Exit code of a rank process that finds its parent gone (see :func:`tie_to_parent`).
PARENT_GONE_EXIT_CODE = 18
#: Seconds between a rank's checks that its parent is still there.
PARENT_POLL_S = 0.5
#: The signals that stop a run in order: every rank killed and reaped, then RunStopped.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class RunStopped(SystemExit):
    """A signal stopped a process-mode run after every rank was killed and reaped; its code is
    128 + the signal's number, so that, uncaught, it ends a program with no traceback."""

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


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, as Ctrl-C raises KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_stopped(signum: int, frame: FrameType | None) -> None:
    """The handler that makes SIGTERM and SIGHUP a :class:`Stopped`."""
    raise Stopped(signum)


@contextmanager
def stopped_by_term_and_hup() -> Iterator[None]:
    """While inside (on the main thread), SIGTERM and SIGHUP left at their default raise
    :class:`Stopped`, as Ctrl-C raises KeyboardInterrupt; their handlers are put back after."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:
                previous[signum] = signal.signal(signum, raise_stopped)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class StopOnSignal:
    """While a run's ranks are alive, STOP_SIGNALS left at Python's default (or at
    :func:`raise_stopped`) only record the signal; the parent's loop sees it, stops every rank, then :meth:`raise_if_signalled`.
    Ignored signals and a caller's own handlers are left alone; off the main thread it does
    nothing."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._pid = os.getpid()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) in (
                    signal.SIG_DFL,
                    signal.default_int_handler,
                    raise_stopped,
                ):
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:  # a rank forked before it reset its handlers
            os._exit(128 + signum)
        if self.signum is None:
            self.signum = signum

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def raise_if_signalled(self, ranks: int) -> None:
        if self.signum is not None:
            kind = RunInterrupted if self.signum == signal.SIGINT else RunStopped
            raise kind(self.signum, ranks)


@contextmanager
def signals_held() -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP (where left to Python) are held, so that a
    clean-up runs whole (kaleido's browser stopped half way made its own exit hook fail); the
    first one held is raised on leaving, as it would have been: KeyboardInterrupt or Stopped."""
    with StopOnSignal() as held:
        yield
    if held.signum == signal.SIGINT:
        raise KeyboardInterrupt
    if held.signum is not None:
        raise Stopped(held.signum)


def tie_to_parent(parent_pid: int) -> None:
    """End this process (a rank) with its parent: Linux's parent-death signal (as
    torch.distributed.elastic and Ray set it) and a thread watching ``os.getppid()``. SIGTERM
    and SIGHUP end it at once; SIGINT is ignored (a terminal's Ctrl-C reaches the whole group,
    and the parent stops its ranks itself)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            args = [ctypes.c_ulong(signal.SIGKILL)] + [ctypes.c_ulong(0)] * 3
            ctypes.CDLL(None, use_errno=True).prctl(1, *args)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # no libc prctl: the thread below still watches
            pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(PARENT_GONE_EXIT_CODE)

    if os.getppid() != parent_pid:
        os._exit(PARENT_GONE_EXIT_CODE)
    threading.Thread(target=watch, name="kvlab-parent-watch", daemon=True).start()
