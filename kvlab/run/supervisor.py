"""Rank processes and their supervision: :func:`run_processes` starts one process per rank with
torch's ``start_processes(..., join=False)`` on 127.0.0.1 and a free port ("fork" for gloo: the
parent never initialises a process group or CUDA; "spawn" for nccl: one GPU per rank), collects
every rank's :class:`~kvlab.run.rank.RankResult`, and accounts for the ranks that cannot report
one. A rank that raises (a kvlab bug) leaves its traceback in torch's error file, which the
parent raises as a RuntimeError. The watching is kvlab's own, not ``ProcessContext.join``: join
stops every rank at the first death, while the others' results still wait in the queue unread,
and it knows nothing of progress, hangs or deadlines.

**Watchdog.** A run is hung when no rank has made progress (stepped, entered or left a
collective, sent a message) for ``timeout_s``: slow ranks that keep stepping are never called
hung. A rank seen dead gives the others ``DEATH_GRACE_S`` to report. ``deadline_s`` (optional)
bounds the whole run: past it, every rank is stopped and the run says it passed its deadline
(its requests "lost", with that reason). Stopping: 1 s to exit, then terminate, then kill; no
process outlives the run, a failure or an interrupt.

**Failures.** The ranks keep a :class:`~kvlab.run.monitor.RunMonitor` in shared memory, which
outlives a rank that dies. From it the parent names the rank that died or hung, its step and
the time (:class:`~kvlab.run.run_result.RankFailure`; a hung rank is the one not waiting in the
all_gather, the ranks waiting for it "shut down"), and gives every request a status and a
reason: "lost: rank 2 died at step 3, ..." on the failed rank, the same cause on the others.
The survivors' error names the failed rank, not gloo's message. A Fault whose step the run never
reached is reported as not fired. kvlab's own: the real executor leaves logs.

**Signals.** Each rank ties itself to the parent (:func:`~kvlab.run.signals.tie_to_parent`), so
none outlives it. While the ranks run, SIGTERM, SIGHUP and SIGINT to the parent stop the run in
order: every rank killed and reaped, then :class:`~kvlab.run.signals.RunStopped`.
"""

from __future__ import annotations

import os
import pickle
import queue as queue_mod
import signal
import socket
import time
from dataclasses import replace
from datetime import timedelta

import torch
from torch.multiprocessing import start_processes

from kvlab.core.request import UNFINISHED_STATUSES
from kvlab.run.comm import CollectiveFailed, TorchComm
from kvlab.run.monitor import RunMonitor
from kvlab.run.progress import rank_progress
from kvlab.run.rank import FAULT_EXIT_CODE, RankResult, RankRunner, not_reported, rank_loop
from kvlab.run.rank_config import RunConfig
from kvlab.run.run_result import DistributedResult, RankFailure, ending, unrouted_reasons
from kvlab.run.signals import StopOnSignal, tie_to_parent

#: Seconds the other ranks get to report once one rank has died.
DEATH_GRACE_S = 3.0


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(
    rank: int,
    config: RunConfig,
    backend: str,
    port: int,
    timeout_s: float,
    out,
    parent_pid: int,
    monitor: RunMonitor,
) -> None:
    """A rank process: tie it to its parent, init_process_group, rank_loop, send the result,
    destroy the group. What it raises, torch's wrapper writes to the rank's error file."""
    import torch.distributed as dist

    tie_to_parent(parent_pid)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    # the group's own timeout outlasts the parent's deadline: the parent decides "hung"
    dist.init_process_group(
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
        result = rank_loop(runner, TorchComm(device), on_step)
        peer_lost = False
    except CollectiveFailed as exc:  # a peer left: this rank goes down too (the parent
        peer_lost = True  # names the peer and replaces this text)
        if runner.engine is None:
            result = not_reported(rank, "shut down", f"shut down: {exc}", config)
        else:
            runner.outcome, runner.stop_reason = "shut down", f"shut down: {exc}"
            result = runner.result()
    out.put(("result", rank, (result, peer_lost)))
    dist.destroy_process_group()


def _raised(context) -> dict[int, str]:
    """The traceback of each rank that raised, from torch's error files (then removed)."""
    raised = {}
    for rank, path in enumerate(context.error_files if context is not None else ()):
        try:
            with open(path, "rb") as handle:
                raised[rank] = pickle.load(handle)
            os.unlink(path)
        except FileNotFoundError:  # the rank raised nothing
            pass
    return raised


def run_processes(
    config: RunConfig, backend: str, timeout_s: float, deadline_s: float | None, progress: bool
) -> DistributedResult:
    """Run every rank in its own process under the watchdog (module docstring)."""
    import torch.multiprocessing as mp

    method = "spawn" if backend == "nccl" else "fork"
    ctx = mp.get_context(method)
    out = ctx.Queue()
    port = free_port()
    world = config.world_size
    monitor = RunMonitor(ctx, config)
    start = time.monotonic()
    procs, context = [], None
    killed: set = set()
    results: dict[int, tuple[RankResult, bool]] = {}
    ready: dict[int, float] = {}
    exited: dict[int, float] = {}  # rank -> when it was seen to have exited
    stopped_by: str | None = None  # "hang" or "deadline" when the watchdog ended the run
    bar = rank_progress(progress, world)

    def take(kind: str, rank: int, payload) -> None:
        if kind == "ready":
            ready[rank] = payload
        elif kind == "step":
            if bar is not None:
                bar.update(payload - bar.n)
        else:
            results[rank] = payload

    with StopOnSignal() as stop:
        try:
            if stop.signum is None:
                context = start_processes(
                    _worker,
                    (config, backend, port, timeout_s, out, os.getpid(), monitor),
                    nprocs=world,
                    join=False,
                    daemon=True,
                    start_method=method,
                )
                procs = context.processes
                for rank, p in enumerate(procs):
                    p.name = f"kvlab-rank-{rank}"  # torch leaves them "Process-N"
            heard = time.monotonic()  # the last sign of progress
            deadline = None if deadline_s is None else start + deadline_s
            grace_end = None  # DEATH_GRACE_S after the first death seen
            while stop.signum is None and len(results) < world:
                now = time.monotonic()
                heard = max(heard, monitor.last_heard())
                if grace_end is not None and now >= grace_end:
                    break
                if now - heard >= timeout_s:
                    stopped_by = "hang"
                    break
                if deadline is not None and now >= deadline:
                    stopped_by = "deadline"
                    break
                try:
                    message = out.get(timeout=0.2)
                except queue_mod.Empty:
                    for rank, p in enumerate(procs):
                        if p.exitcode is not None and rank not in exited:
                            exited[rank] = time.monotonic()
                            if rank not in results and grace_end is None:
                                grace_end = exited[rank] + DEATH_GRACE_S  # one died
                    if len(exited) == world:
                        break
                    continue
                heard = time.monotonic()
                take(*message)
            # a rank that ended on its own sent its result first: read what is there for it
            while any(p.exitcode == 0 and r not in results for r, p in enumerate(procs)):
                try:
                    take(*out.get(timeout=0.2))
                except queue_mod.Empty:
                    break
            if len(results) == world:
                stopped_by = None  # every rank had reported: nothing was cut short
            end = time.monotonic()
        finally:
            killed = _stop(procs, grace_s=1.0 if stop.signum is None else 0.0)
            if bar is not None:
                bar.close()
            out.close()
            out.join_thread()
            raised = _raised(context)
    stop.raise_if_signalled(len(procs))
    if raised:
        rank, text = sorted(raised.items())[0]
        raise RuntimeError(f"rank {rank} failed with a kvlab error:\n{text}")
    if stopped_by == "deadline" and len(results) < world:
        final, failures = _at_deadline(config, results, killed, monitor, deadline_s), []
    else:
        final, failures = _account(
            config, procs, results, exited, killed, monitor, start, end, timeout_s
        )
    ended, reason = ending(final)
    unrouted = unrouted_reasons(config, final, failures[0].describe() if failures else reason)
    fault, fired = config.fault, None
    if fault is not None:
        fired = monitor.fired
        if not fired:
            reason += (
                f"; {fault!r} did not fire: rank {fault.rank} never "
                f"ran step {fault.step} (the run ended at step "
                f"{max(r.end_step for r in final)})"
            )
    startup = (max(ready.values()) - start) if len(ready) == world else end - start
    return DistributedResult(
        tuple(final),
        ended,
        reason,
        "process",
        backend,
        config.policy,
        end - start,
        startup,
        end - start - startup,
        tuple(p.pid for p in procs),
        timeout_s,
        tuple(failures),
        unrouted,
        fault,
        fired,
        deadline_s,
    )


def _at_deadline(
    config: RunConfig, results, killed, monitor: RunMonitor, deadline_s: float
) -> list[RankResult]:
    """Every rank's result when the run passed its deadline while its ranks were still making
    progress: the ranks that had reported keep their results; the others were stopped, and
    their live requests are lost, with the deadline as the reason."""
    final = []
    for rank in range(config.world_size):
        if rank in results:
            final.append(results[rank][0])
            continue
        step = monitor.step(rank)
        why = f"stopped at step {step}: the run passed its deadline_s={deadline_s:g}"
        final.append(
            _from_monitor(config, monitor, rank, "stopped", why, f"lost: {why}", lost=True)
        )
    return final


def _exit_text(exitcode: int, fault_fired_here: bool) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"exit code {exitcode}: {signal.Signals(-exitcode).name}"
        except ValueError:
            pass
    if exitcode == FAULT_EXIT_CODE and fault_fired_here:
        return f"exit code {exitcode}: its Fault"
    return f"exit code {exitcode}"


def _account(
    config: RunConfig,
    procs,
    results,
    exited,
    killed,
    monitor: RunMonitor,
    start: float,
    end: float,
    timeout_s: float,
) -> tuple[list[RankResult], list[RankFailure]]:
    """Every rank's result, and the ranks that failed (deaths first, by time; then hangs).
    A rank killed while it waited in a collective was waiting for the one that failed: it
    "shut down" (all were waiting: none can be named, all "hung"). The requests of a failed
    rank are "lost"; those of the other ranks that went down keep their status, with a reason
    naming the failed rank."""
    fault = config.fault
    died = sorted(
        (r for r in range(len(procs)) if r not in results and r not in killed),
        key=lambda r: (exited.get(r, end), r),
    )
    failures = [
        RankFailure(
            r,
            "died",
            monitor.step(r),
            exited.get(r, end) - start,
            _exit_text(procs[r].exitcode, fault is not None and fault.rank == r and monitor.fired),
        )
        for r in died
    ]
    stopped = sorted(r for r in killed if r not in results)
    waiting = [r for r in stopped if monitor.is_waiting(r)]
    hung = [r for r in stopped if r not in waiting]
    if not hung and not died:
        hung, waiting = waiting, []
    why = (
        f"no progress for timeout_s={timeout_s:g} s; killed"
        if not died
        else f"no answer {DEATH_GRACE_S:g} s after rank {died[0]} died; killed"
    )
    for r in hung:
        heard = monitor.heard(r)
        failures.append(RankFailure(r, "hung", monitor.step(r), (heard or end) - start, why))
    by_rank = {f.rank: f for f in failures}
    cause = failures[0].describe() if failures else None
    final = []
    for rank in range(len(procs)):
        if rank in results:
            result, peer_lost = results[rank]
            final.append(_blamed(result, cause) if peer_lost and cause else result)
        elif rank in by_rank:
            failure = by_rank[rank]
            final.append(
                _from_monitor(
                    config,
                    monitor,
                    rank,
                    failure.kind,
                    failure.what(),
                    f"lost: {failure.describe()}",
                    lost=True,
                )
            )
        else:  # killed while waiting in a collective for the failed rank
            step = monitor.step(rank)
            final.append(
                _from_monitor(
                    config,
                    monitor,
                    rank,
                    "shut down",
                    f"shut down: {cause}; killed waiting for it at step {step}",
                    f"shut down: {cause} (at step {step})",
                    lost=False,
                )
            )
    return final, failures


def _blamed(result: RankResult, cause: str) -> RankResult:
    """A rank that lost a peer in a collective: its error and its live requests' reasons name
    the rank that failed, instead of the transport's message."""
    text = f"shut down: {cause}"
    reasons = dict(result.reasons)
    for request_id, status in result.status.items():
        if status in UNFINISHED_STATUSES:
            reasons[request_id] = f"{text} (at step {result.end_step})"
    return replace(result, error=text, reasons=reasons)


def _from_monitor(
    config: RunConfig,
    monitor: RunMonitor,
    rank: int,
    outcome: str,
    error: str,
    live_reason: str,
    lost: bool,
) -> RankResult:
    """The result of a rank that could not report one, from the shared record: its pool, and
    each request routed to it with its last state; live ones get ``live_reason`` (and the status
    "lost" when ``lost``)."""
    blocks, capacity, max_seq_len, width = monitor.pool(rank)
    status, reasons = {}, {}
    for request in config.requests:
        routed, state, step = monitor.request(request.request_id)
        if routed != rank:
            continue
        rid = request.request_id
        state = state or "waiting"
        if state == "finished":
            status[rid], reasons[rid] = state, f"finished at step {step}"
        elif state == "rejected":
            status[rid], reasons[rid] = (
                state,
                (f"rejected at step {step} (its reason was lost with rank {rank})"),
            )
        else:
            status[rid], reasons[rid] = ("lost" if lost else state), live_reason
    base = not_reported(rank, outcome, error, config)
    return replace(
        base,
        blocks=blocks,
        capacity_tokens=capacity,
        quota_bytes=blocks * config.geometry.bytes_per_block,
        max_seq_len=max_seq_len,
        max_blocks_per_seq=width,
        status=status,
        reasons=reasons,
        end_step=monitor.step(rank),
    )


def _stop(procs, grace_s: float = 1.0) -> set:
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
