"""Rank processes and their watchdog, kvlab's own (the real executor leaves logs): one process
per rank from torch's ``start_processes``; a run is hung after ``timeout_s`` without progress, a
death gives the others ``DEATH_GRACE_S`` to report, ``deadline_s`` stops every rank; the ranks
that cannot report are accounted for from their shared :class:`~kvlab.run.monitor.RunMonitor`."""

from __future__ import annotations

import dataclasses
import os
import pickle
import queue as queue_mod
import signal
import socket
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import start_processes

from kvlab.core.cause import Cause, Reason
from kvlab.core.request import RequestState
from kvlab.run.comm import CollectiveFailed, TorchComm
from kvlab.run.monitor import RunMonitor
from kvlab.run.progress import rank_progress
from kvlab.run.rank import FAULT_EXIT_CODE, RankResult, RankRunner, rank_loop
from kvlab.run.rank_config import RunConfig
from kvlab.run.run_result import (
    DistributedResult,
    Outcome,
    RankFailure,
    not_routed,
    rank_result,
)
from kvlab.run.signals import StopOnSignal, tie_to_parent

#: Seconds the other ranks get to report once one rank has died.
DEATH_GRACE_S = 3.0


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(
    rank: int,
    config: RunConfig,
    backend: str,
    port: int,
    timeout_s: float,
    out: Any,
    parent_pid: int,
    monitor: RunMonitor,
) -> None:
    """A rank process: tie it to its parent, init_process_group, rank_loop, send the result."""
    tie_to_parent(parent_pid)
    torch.set_num_threads(1)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(  # its own timeout outlasts the parent's: the parent decides "hung"
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=config.world_size,
        timeout=timedelta(seconds=timeout_s + 30),
    )
    out.put(("ready", rank, time.monotonic()))
    on_step = (lambda step: out.put(("step", rank, step))) if rank == 0 else None
    runner = RankRunner(rank, config, device)
    runner.monitor = monitor
    try:
        result, peer_lost = rank_loop(runner, TorchComm(device), on_step), False
    except CollectiveFailed as exc:  # a peer left: the parent names it in place of this text
        runner.outcome, runner.stop_reason = Outcome.SHUT_DOWN, f"shut down: {exc}"
        result = (
            runner.result()
            if runner.built
            else rank_result(config, rank, outcome=Outcome.SHUT_DOWN, error=runner.stop_reason)
        )
        peer_lost = True
    out.put(("result", rank, (result, peer_lost)))
    dist.destroy_process_group()


class _Watch:
    """One process-mode run: the rank processes, what they sent, and when each was seen to exit."""

    def __init__(self, config: RunConfig, backend: str, timeout_s: float, progress: bool):
        self.config, self.backend, self.timeout_s = config, backend, timeout_s
        self.method = "spawn" if backend == "nccl" else "fork"
        ctx = mp.get_context(self.method)
        self.out = ctx.Queue()
        self.monitor = RunMonitor(ctx, config.requests, config.world_size)
        self.bar = rank_progress(progress, config.world_size)
        self.procs: list[Any] = []
        self.context: Any = None
        self.results: dict[int, tuple[RankResult, bool]] = {}  # rank -> (result, lost a peer)
        self.ready: dict[int, float] = {}
        self.exited: dict[int, float] = {}  # rank -> when it was seen to have exited
        self.start = self.end = time.monotonic()

    def launch(self) -> None:
        cfg, world = self.config, self.config.world_size
        args = (cfg, self.backend, free_port(), self.timeout_s, self.out, os.getpid(), self.monitor)
        self.context = start_processes(  # type: ignore[no-untyped-call]
            _worker, args, nprocs=world, join=False, daemon=True, start_method=self.method
        )
        self.procs = self.context.processes
        for rank, p in enumerate(self.procs):
            p.name = f"kvlab-rank-{rank}"  # torch leaves them "Process-N"

    def take(self, kind: str, rank: int, payload: Any) -> None:
        if kind == "ready":
            self.ready[rank] = payload
        elif kind == "result":
            self.results[rank] = payload
        elif self.bar is not None:
            self.bar.update(payload - self.bar.n)

    def wait(self, stop: StopOnSignal, deadline_s: float | None) -> Outcome | None:
        """Collect results until every rank reported, one died and the others had
        DEATH_GRACE_S, or the watchdog fired: then HUNG or DEADLINE."""
        heard, grace_end, world = time.monotonic(), None, self.config.world_size
        while stop.signum is None and len(self.results) < world:
            now = time.monotonic()
            heard = max(heard, self.monitor.last_heard())
            if grace_end is not None and now >= grace_end:
                return None
            if now - heard >= self.timeout_s:
                return Outcome.HUNG
            if deadline_s is not None and now >= self.start + deadline_s:
                return Outcome.DEADLINE
            try:
                self.take(*self.out.get(timeout=0.2))
                heard = time.monotonic()
            except queue_mod.Empty:
                for rank, p in enumerate(self.procs):
                    if p.exitcode is not None and rank not in self.exited:
                        self.exited[rank] = time.monotonic()
                        if rank not in self.results and grace_end is None:
                            grace_end = self.exited[rank] + DEATH_GRACE_S  # one died
                if len(self.exited) == world:
                    return None
        return None

    def drain(self) -> None:
        """A rank that ended on its own sent its result first: read what is there for it."""
        while any(p.exitcode == 0 and r not in self.results for r, p in enumerate(self.procs)):
            try:
                self.take(*self.out.get(timeout=0.2))
            except queue_mod.Empty:
                return

    def close(self, grace_s: float) -> tuple[set[int], dict[int, str]]:
        """Stop every rank; (the ranks it had to stop, the tracebacks of those that raised)."""
        killed = _stop(self.procs, grace_s)
        if self.bar is not None:
            self.bar.close()
        self.out.close()
        self.out.join_thread()
        raised = {}  # torch writes the traceback of a rank that raised to a file
        for rank, path in enumerate(self.context.error_files if self.context else ()):
            if os.path.exists(path):
                with open(path, "rb") as handle:
                    raised[rank] = pickle.load(handle)
                os.unlink(path)
        return killed, raised

    def from_monitor(self, rank: int, outcome: Outcome, error: str) -> RankResult:
        """The result of a rank that could not report one, from the shared record: its pool and
        each request routed to it in its last recorded state."""
        requests = []
        for request in self.config.requests:
            routed, state, step = self.monitor.request(request.request_id)
            if routed == rank:
                copy = dataclasses.replace(request)
                copy.state = state or RequestState.WAITING
                if state is RequestState.FINISHED:
                    copy.reason = Reason(Cause.FINISHED, dict(step=step))
                elif state is RequestState.REJECTED:
                    copy.reason = Reason(Cause.ENDED_ON_A_LOST_RANK, dict(step=step, rank=rank))
                requests.append(copy)
        pool, step = self.monitor.pool(rank), self.monitor.step(rank)
        return rank_result(
            self.config,
            rank,
            outcome=outcome,
            error=error,
            pool=pool,
            requests=requests,
            end_step=step,
        )

    def account(self, killed: set[int]) -> tuple[list[RankResult], list[RankFailure]]:
        """Every rank's result, and the ranks that failed (deaths first, by time; then hangs). A
        rank killed while it waited in a collective was waiting for the one that failed: it
        "shut down" (when all were waiting, none can be named: all "hung")."""
        monitor, results, end, fault = self.monitor, self.results, self.end, self.config.fault
        ranks = range(len(self.procs))
        died = sorted(
            (r for r in ranks if r not in results and r not in killed),
            key=lambda r: (self.exited.get(r, end), r),
        )
        failures = []
        for r in died:
            fired = fault is not None and fault.rank == r and monitor.fired
            detail = _exit_text(self.procs[r].exitcode, fired)
            at = self.exited.get(r, end) - self.start
            failures.append(
                RankFailure(rank=r, kind=Outcome.DIED, step=monitor.step(r), at_s=at, detail=detail)
            )
        stopped = sorted(r for r in killed if r not in results)
        waiting = [r for r in stopped if monitor.is_waiting(r)]
        hung = [r for r in stopped if r not in waiting]
        if not hung and not died:
            hung, waiting = waiting, []
        why = (
            f"no answer {DEATH_GRACE_S:g} s after rank {died[0]} died; killed"
            if died
            else f"no progress for timeout_s={self.timeout_s:g} s; killed"
        )
        for r in hung:
            at = (monitor.heard(r) or end) - self.start
            failures.append(
                RankFailure(rank=r, kind=Outcome.HUNG, step=monitor.step(r), at_s=at, detail=why)
            )
        by_rank = {f.rank: f for f in failures}
        cause = failures[0].describe() if failures else None
        final = []
        for rank in ranks:
            if rank in results:
                result, peer_lost = results[rank]
                if peer_lost and cause is not None:
                    result = dataclasses.replace(result, error=f"shut down: {cause}")
                final.append(result)
            elif rank in by_rank:
                failure = by_rank[rank]
                final.append(self.from_monitor(rank, failure.kind, failure.what()))
            else:  # killed while waiting in a collective for the failed rank
                error = f"shut down: {cause}; killed waiting for it"
                final.append(self.from_monitor(rank, Outcome.SHUT_DOWN, error))
        return final, failures


def run_processes(
    config: RunConfig, backend: str, timeout_s: float, deadline_s: float | None, progress: bool
) -> DistributedResult:
    """Run every rank in its own process under the watchdog (module docstring)."""
    run = _Watch(config, backend, timeout_s, progress)
    stopped_by = None
    with StopOnSignal() as stop:
        try:
            if stop.signum is None:
                run.launch()
            stopped_by = run.wait(stop, deadline_s)
            run.drain()
            run.end = time.monotonic()
        finally:
            killed, raised = run.close(grace_s=1.0 if stop.signum is None else 0.0)
    stop.raise_if_signalled(len(run.procs))
    if raised:
        rank, text = sorted(raised.items())[0]
        raise RuntimeError(f"rank {rank} failed with a kvlab error:\n{text}")
    world, results = config.world_size, run.results
    failures: list[RankFailure] = []
    if stopped_by is Outcome.DEADLINE and len(results) < world:
        final = [
            results[r][0]
            if r in results
            else run.from_monitor(
                r,
                Outcome.STOPPED,
                f"stopped at step {run.monitor.step(r)}: the run passed its deadline_s={deadline_s:g}",
            )
            for r in range(world)
        ]
    else:
        final, failures = run.account(killed)
    end, start = run.end, run.start
    startup = (max(run.ready.values()) - start) if len(run.ready) == world else end - start
    return DistributedResult(
        ranks=tuple(final),
        mode="process",
        backend=backend,
        policy=config.policy,
        wall_s=end - start,
        startup_s=startup,
        pids=tuple(p.pid for p in run.procs),
        timeout_s=timeout_s,
        deadline_s=deadline_s,
        failures=tuple(failures),
        not_routed=not_routed(config, final),
        fault=config.fault,
        fault_fired=None if config.fault is None else run.monitor.fired,
    )


def _exit_text(exitcode: int | None, fault_fired_here: bool) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"exit code {exitcode}: {signal.Signals(-exitcode).name}"
        except ValueError:
            pass
    if exitcode == FAULT_EXIT_CODE and fault_fired_here:
        return f"exit code {exitcode}: its Fault"
    return f"exit code {exitcode}"


def _stop(procs: list[Any], grace_s: float = 1.0) -> set[int]:
    """Join every rank process for up to ``grace_s``; terminate, then (after 1 s) kill, the
    ones still running. Returns the ranks it had to stop."""
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    stopped = {r for r, p in enumerate(procs) if p.is_alive()}
    for r in stopped:
        procs[r].terminate()
    for r in stopped:
        procs[r].join(1.0)
        if procs[r].is_alive():
            procs[r].kill()
            procs[r].join()
    return stopped
