"""One rank of a multi-rank run, the same code in processes and threads: budget -> KV quota
(``KvCacheCreator._cal_max_memory``, tensorrt_llm/_torch/pyexecutor/_util.py) -> MIN all-reduce
-> lockstep iterations that all-gather every rank's status, as the attention-DP executor does
(``PyExecutor._fetch_and_activate_new_requests``). An engine error takes every rank down."""

from __future__ import annotations

import bisect
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import PurePath

import torch

from kvlab.core.manager import KVCacheManager
from kvlab.core.request import LIVE_STATES
from kvlab.core.v2_storage import dense_pages
from kvlab.run.comm import ThreadComm, TorchComm
from kvlab.run.monitor import RunMonitor
from kvlab.run.rank_config import Fault, RunConfig, storage_geometry
from kvlab.run.routing import route
from kvlab.run.run_result import Outcome, RankResult, rank_result
from kvlab.run.simulation import Engine
from kvlab.sched.policies import POLICIES
from kvlab.sched.scheduler import Scheduler

__all__ = ["FAULT_EXIT_CODE", "RankResult", "RankRunner", "RankStatus", "rank_loop"]

#: Exit code of a rank process that a Fault(kind="die") ends.
FAULT_EXIT_CODE = 17
ARRIVAL_STEP = attrgetter("arrival_step")


@dataclass(frozen=True, kw_only=True)
class RankStatus:
    """What a rank all-gathers each iteration."""

    rank: int
    live: int
    active_tokens: int
    error: str | None  # "ValueError: <message>" once its engine has stopped


def error_name(exc: BaseException) -> str:
    """An engine error as the real system names it: its first built-in class, then the message."""
    builtin = next(c for c in type(exc).__mro__ if c.__module__ == "builtins")
    return f"{builtin.__name__}: {exc}"


def kvlab_traceback(exc: BaseException) -> str:
    """``exc``'s traceback keeping only kvlab's frames, with paths from the package down."""
    te = traceback.TracebackException.from_exception(exc)
    frames = []
    for frame in te.stack:
        parts = PurePath(frame.filename).parts
        if "kvlab" in parts:
            short = "/".join(parts[len(parts) - 1 - parts[::-1].index("kvlab") :])
            frames.append(traceback.FrameSummary(short, frame.lineno, frame.name, line=frame.line))
    te.stack = traceback.StackSummary.from_list(frames)
    return "".join(te.format())


class RankRunner:
    """One rank: budget -> local capacity -> (MIN) -> manager, scheduler and engine; then one
    lockstep iteration per :meth:`iterate`."""

    def __init__(self, rank: int, config: RunConfig, device: torch.device | str = "cpu"):
        self.rank, self.config, self.device = rank, config, device
        geo = config.geometry
        local_blocks = dense_pages(config.budgets[rank].kv_quota_bytes, geo)
        self.local_capacity_tokens = local_blocks * geo.tokens_per_block
        self.monitor: RunMonitor | None = None  # the process mode's shared record
        self.built = False
        self.exception: BaseException | None = None
        self.stop_reason: str | None = None
        self.outcome = Outcome.FINISHED
        self.step = 0
        self._arrivals = sorted(config.requests, key=ARRIVAL_STEP)
        self._next = 0

    def build(self, capacity_tokens: int) -> None:
        """Build the pool from the all-reduced token capacity, which must not exceed ours."""
        assert capacity_tokens <= self.local_capacity_tokens, (
            f"rank {self.rank}: allreduce(MIN) raised the local capacity from "
            f"{self.local_capacity_tokens} to {capacity_tokens} tokens"
        )
        cfg, geo = self.config, self.config.geometry
        self.capacity_tokens = capacity_tokens
        self.blocks = capacity_tokens // geo.tokens_per_block  # RunConfig checked it is > 0
        storage = storage_geometry(geo.tokens_per_block)
        admission, page_policy = POLICIES[cfg.policy]
        self.manager = KVCacheManager.expecting_clamp(
            storage,
            quota_bytes=self.blocks * storage.bytes_per_block,
            max_seq_len=cfg.max_seq_len,
            max_batch_size=cfg.max_batch_size,
            page_index_policy=page_policy,
            device=self.device,
        )
        self.engine = Engine(
            Scheduler(
                self.manager,
                admission=admission,
                max_num_tokens=cfg.max_num_tokens,
                max_batch_size=cfg.max_batch_size,
                stall_limit=cfg.stall_limit,
                chunked_prefill=cfg.chunked_prefill,
            )
        )
        self.built = True
        if self.monitor is not None:
            self.monitor.built(self.rank, self.pool())

    def pool(self) -> tuple[int, int, int, int]:
        """(blocks, capacity tokens, clamped max_seq_len, max_blocks_per_seq) after the MIN."""
        m = self.manager
        return self.blocks, self.capacity_tokens, m.max_seq_len, m.max_blocks_per_seq

    def status(self) -> RankStatus:
        live = [r for r in self.engine.requests if r.state in LIVE_STATES]
        error = None if self.engine.error is None else error_name(self.engine.error)
        tokens = sum(r.prompt_len for r in live)
        return RankStatus(rank=self.rank, live=len(live), active_tokens=tokens, error=error)

    def iterate(self, statuses: Sequence[RankStatus]) -> bool:
        """One lockstep iteration after the all_gather of ``statuses``; False when the run is
        over (the same answer on every rank)."""
        cfg, monitor = self.config, self.monitor
        failed = next((s for s in statuses if s.error is not None), None)
        if failed is not None:
            if failed.rank == self.rank:
                self.outcome, self.stop_reason = Outcome.RAISED, failed.error
            else:
                self.outcome = Outcome.SHUT_DOWN
                self.stop_reason = f"shut down: rank {failed.rank} raised {failed.error}"
            return False
        if not any(s.live for s in statuses):
            if self._next == len(self._arrivals):
                return False
            self.step = max(self.step, self._arrivals[self._next].arrival_step)
        if self.step >= cfg.max_steps:
            self.stop_reason = f"max_steps={cfg.max_steps} reached"
            return False
        if monitor is not None:
            monitor.at_step(self.rank, self.step)
        fault = cfg.fault
        if fault is not None and (fault.rank, fault.step) == (self.rank, self.step):
            if monitor is not None:
                monitor.fault_fired()
            _inject(fault)
        start = self._next
        self._next = bisect.bisect_right(self._arrivals, self.step, start, key=ARRIVAL_STEP)
        new = self._arrivals[start : self._next]
        if new:
            live, tokens = [s.live for s in statuses], [s.active_tokens for s in statuses]
            assignment = route(new, live, tokens, cfg.pins)
            if monitor is not None:
                monitor.routed(assignment)
            self.engine.add_requests([r for r in new if assignment[r.request_id] == self.rank])
        self.engine.advance_to(self.step)
        self.engine.iterate()
        if monitor is not None:
            monitor.states(self.rank, self.engine.requests, self.step)
        if self.engine.error is not None and self.exception is None:
            self.exception = self.engine.error
        self.step += 1
        return True

    def result(self) -> RankResult:
        """This rank's result; the engine's result gives its unfinished requests their reasons."""
        sim = self.engine.result(self.config.max_steps)
        return rank_result(
            self.config,
            self.rank,
            outcome=self.outcome,
            error=self.stop_reason,
            pool=self.pool(),
            requests=sim.requests.values(),
            traceback=None if self.exception is None else kvlab_traceback(self.exception),
            iterations=sim.iterations,
            end_step=self.step,
        )


def _inject(fault: Fault) -> None:
    if fault.kind == "die":
        os._exit(FAULT_EXIT_CODE)
    while True:  # hang: stop answering; the parent's timeout ends the run
        time.sleep(3600)


def gather_statuses(comm: TorchComm | ThreadComm, status: RankStatus) -> list[RankStatus]:
    """Every rank's (live, active tokens, failed) as ints; the errors' text only when one failed."""
    rows = comm.all_gather_ints([status.live, status.active_tokens, status.error is not None])
    errors = comm.all_gather(status.error) if any(row[2] for row in rows) else [None] * len(rows)
    return [
        RankStatus(rank=rank, live=live, active_tokens=tokens, error=str(error) if error else None)
        for rank, ((live, tokens, _), error) in enumerate(zip(rows, errors, strict=True))
    ]


def rank_loop(
    runner: RankRunner, comm: TorchComm | ThreadComm, on_step: Callable[[int], None] | None = None
) -> RankResult:
    """The per-rank program: MIN all-reduce, build, then lockstep iterations. With a monitor,
    the rank marks when it waits in a collective (the parent names a hung rank by it)."""
    monitor = runner.monitor

    def wait(waiting: bool) -> None:
        if monitor is not None:
            monitor.waiting(runner.rank, waiting)

    wait(True)
    capacity = comm.all_reduce_min(runner.local_capacity_tokens)
    wait(False)
    runner.build(capacity)
    while True:
        wait(True)
        statuses = gather_statuses(comm, runner.status())
        wait(False)
        if not runner.iterate(statuses):
            return runner.result()
        if on_step is not None:
            on_step(runner.step)
