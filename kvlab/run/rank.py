"""One rank of a multi-rank run (:class:`RankRunner`, :func:`rank_loop`), the same code in
processes and threads:

1. **Budget.** The rank's own :class:`~kvlab.core.memory.MemoryBudget` gives its KV quota
   (``KvCacheCreator._cal_max_memory``, tensorrt_llm/_torch/pyexecutor/_util.py) and so its
   local token capacity: whole blocks of the model's geometry.
2. **MIN all-reduce.** The token capacity is all-reduced with MIN (``_util.py``: "allreduce(MIN)
   must never increase the local quota"); every rank builds its KVCacheManager from the
   smallest capacity, and asserts that it did not grow.
3. **Lockstep.** Each iteration starts with an all_gather of every rank's status (live
   requests, their prompt tokens, the error that stopped its engine), as the attention-DP
   executor all-gathers its ranks' request counts every iteration
   (``PyExecutor._fetch_and_activate_new_requests``, tensorrt_llm/_torch/pyexecutor/py_executor.py).
   Then each rank routes this step's arrivals (:mod:`kvlab.run.routing`: the same rule on the
   same gathered numbers, so every rank agrees) and runs one iteration of its own Engine.
4. **Failure.** An engine error (PageIndexTooShort, SchedulerDeadlock) is not caught by the
   executor loop: the real ``_event_loop_wrapper`` logs "Error in event loop", re-raises and
   cleans up, and the deployment goes down with it. kvlab models the observable end: the next
   all_gather carries the error, the raising rank reports ``"raised"`` and every other rank
   ``"shut down"`` with the reason. With admission control ("capacity", PR #21720) the request
   is rejected on its rank at arrival and every rank finishes its work.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from kvlab.core.geometry import KVGeometry
from kvlab.core.manager import KVCacheManager
from kvlab.core.memory import MemoryBudget
from kvlab.core.request import LIVE_STATES, UNFINISHED_STATUSES
from kvlab.run.monitor import RunMonitor
from kvlab.run.rank_config import STORAGE_BYTES_PER_TOKEN, Fault, RunConfig
from kvlab.run.routing import route
from kvlab.run.simulation import Engine
from kvlab.sched.policies import POLICIES
from kvlab.sched.scheduler import Scheduler

#: Exit code of a rank process that a Fault(kind="die") ends.
FAULT_EXIT_CODE = 17


@dataclass(frozen=True)
class RankStatus:
    """What a rank all-gathers each iteration."""

    rank: int
    live: int
    active_tokens: int
    error: str | None  # "ValueError: <message>" once its engine has stopped


@dataclass(frozen=True)
class RankResult:
    """One rank's run: its pool before and after the MIN, its outcome and its requests."""

    rank: int
    outcome: str  # "finished", "raised", "shut down", "died", "hung", "stopped" (deadline)
    error: str | None  # why it stopped, if it did not finish
    traceback: str | None  # the raising rank's traceback, trimmed to kvlab frames
    budget: MemoryBudget
    local_quota_bytes: int
    local_blocks: int  # before the MIN
    blocks: int  # after the MIN: the pool it built
    capacity_tokens: int  # after the MIN (the all-reduced token capacity)
    quota_bytes: int  # the quota its pool uses after the MIN (model bytes)
    max_seq_len: int  # clamped
    max_blocks_per_seq: int
    status: dict[str, str]  # id -> waiting, running, finished, rejected, lost (its rank died/hung)
    reasons: dict[str, str]
    iterations: int
    end_step: int

    @property
    def workspace_bytes(self) -> int:
        return self.budget.workspace_bytes


def not_reported(rank: int, outcome: str, why: str, config: RunConfig) -> RankResult:
    """The result of a rank that could not report one (died, hung, or lost a collective):
    its budget and local pool, nothing after the MIN."""
    budget = config.budgets[rank]
    quota = budget.kv_quota_bytes
    return RankResult(
        rank,
        outcome,
        why,
        None,
        budget,
        quota,
        config.geometry.blocks_in(quota),
        0,
        0,
        0,
        0,
        0,
        {},
        {},
        0,
        0,
    )


def error_name(exc: BaseException) -> str:
    """The real system's name for an engine error: its first built-in class (PageIndexTooShort
    is a ValueError, SchedulerDeadlock a RuntimeError), then the message."""
    builtin = next(c for c in type(exc).__mro__ if c.__module__ == "builtins")
    return f"{builtin.__name__}: {exc}"


def kvlab_traceback(exc: BaseException) -> str:
    """``traceback.format_exception`` of ``exc`` keeping only kvlab's frames, with paths from
    the package down (``kvlab/core/kv_cache.py``), notes included."""
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
    lockstep iteration per ``iterate`` call. The same code in processes and threads."""

    def __init__(self, rank: int, config: RunConfig, device="cpu"):
        self.rank = rank
        self.config = config
        self.device = device
        self.budget = config.budgets[rank]
        geo = config.geometry
        self.local_quota_bytes = self.budget.kv_quota_bytes
        self.local_blocks = geo.blocks_in(self.local_quota_bytes)
        self.engine: Engine | None = None
        self.monitor: RunMonitor | None = None  # the process mode's shared record
        self.exception: BaseException | None = None
        self.stop_reason: str | None = None
        self.outcome = "finished"
        self.step = 0
        self._arrivals = sorted(config.requests, key=lambda r: r.arrival_step)
        self._next = 0

    @property
    def local_capacity_tokens(self) -> int:
        return self.local_blocks * self.config.geometry.tokens_per_block

    def build(self, capacity_tokens: int) -> None:
        """Build the pool from the all-reduced token capacity, which must not exceed ours."""
        assert capacity_tokens <= self.local_capacity_tokens, (
            f"rank {self.rank}: allreduce(MIN) raised the local capacity from "
            f"{self.local_capacity_tokens} to {capacity_tokens} tokens"
        )
        cfg, geo = self.config, self.config.geometry
        self.capacity_tokens = capacity_tokens
        self.blocks = capacity_tokens // geo.tokens_per_block
        if self.blocks == 0:
            raise ValueError(
                f"rank {self.rank}: the all-reduced KV capacity holds no page "
                f"(local quota {self.local_quota_bytes} B, {self.local_blocks} blocks)"
            )
        storage = KVGeometry(
            num_layers=1,
            num_kv_heads=1,
            head_dim=STORAGE_BYTES_PER_TOKEN,
            dtype="fp8",
            tokens_per_block=geo.tokens_per_block,
            kv_factor=1,
        )
        admission, page_policy = POLICIES[cfg.policy]
        manager = KVCacheManager.expecting_clamp(
            storage,
            quota_bytes=self.blocks * storage.bytes_per_block,
            max_seq_len=cfg.max_seq_len,
            max_batch_size=cfg.max_batch_size,
            page_index_policy=page_policy,
            device=self.device,
        )
        scheduler = Scheduler(
            manager,
            admission=admission,
            max_num_tokens=cfg.max_num_tokens,
            max_batch_size=cfg.max_batch_size,
            stall_limit=cfg.stall_limit,
            chunked_prefill=cfg.chunked_prefill,
        )
        self.engine = Engine(scheduler)
        if self.monitor is not None:
            self.monitor.built(
                self.rank,
                self.blocks,
                capacity_tokens,
                manager.max_seq_len,
                manager.max_blocks_per_seq,
            )

    def status(self) -> RankStatus:
        engine = self.engine
        live = [r for r in engine.requests if r.state in LIVE_STATES]
        error = None if engine.error is None else error_name(engine.error)
        return RankStatus(self.rank, len(live), sum(r.prompt_len for r in live), error)

    def iterate(self, statuses: Sequence[RankStatus]) -> bool:
        """One lockstep iteration after the all_gather of ``statuses``; False when the run is
        over (the same answer on every rank)."""
        cfg = self.config
        failed = next((s for s in statuses if s.error is not None), None)
        if failed is not None:
            if failed.rank == self.rank:
                self.outcome, self.stop_reason = "raised", failed.error
            else:
                self.outcome = "shut down"
                self.stop_reason = f"shut down: rank {failed.rank} raised {failed.error}"
            return False
        busy = any(s.live for s in statuses)
        if not busy:
            if self._next == len(self._arrivals):
                return False
            self.step = max(self.step, self._arrivals[self._next].arrival_step)
        if self.step >= cfg.max_steps:
            self.stop_reason = f"max_steps={cfg.max_steps} reached"
            return False
        monitor = self.monitor
        if monitor is not None:
            monitor.at_step(self.rank, self.step)
        if cfg.fault is not None and cfg.fault.rank == self.rank and cfg.fault.step == self.step:
            if monitor is not None:
                monitor.fault_fired()
            _inject(cfg.fault)
        new = []
        while (
            self._next < len(self._arrivals)
            and self._arrivals[self._next].arrival_step <= self.step
        ):
            new.append(self._arrivals[self._next])
            self._next += 1
        if new:
            assignment = route(
                new, [s.live for s in statuses], [s.active_tokens for s in statuses], cfg.pins
            )
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
        engine = self.engine
        sim = engine.result(self.config.max_steps)
        reasons = dict(sim.reasons)
        if self.outcome == "shut down":
            for request_id, status in sim.status.items():
                if status in UNFINISHED_STATUSES:
                    reasons[request_id] = f"{self.stop_reason} (at step {self.step})"
        manager = engine.scheduler.manager
        geo = self.config.geometry
        return RankResult(
            rank=self.rank,
            outcome=self.outcome,
            error=self.stop_reason,
            traceback=None if self.exception is None else kvlab_traceback(self.exception),
            budget=self.budget,
            local_quota_bytes=self.local_quota_bytes,
            local_blocks=self.local_blocks,
            blocks=self.blocks,
            capacity_tokens=self.capacity_tokens,
            quota_bytes=self.blocks * geo.bytes_per_block,
            max_seq_len=manager.max_seq_len,
            max_blocks_per_seq=manager.max_blocks_per_seq,
            status=dict(sim.status),
            reasons=reasons,
            iterations=sim.iterations,
            end_step=self.step,
        )


def _inject(fault: Fault) -> None:
    if fault.kind == "die":
        os._exit(FAULT_EXIT_CODE)
    while True:  # "hang": stop answering; the parent's timeout ends the run
        time.sleep(3600)


def gather_statuses(comm, status: RankStatus) -> list[RankStatus]:
    """The per-iteration collective: every rank's (live, active tokens, failed) as ints, and
    only when some rank failed, a second all_gather with the errors' text."""
    rows = comm.all_gather_ints([status.live, status.active_tokens, status.error is not None])
    errors = comm.all_gather(status.error) if any(row[2] for row in rows) else [None] * len(rows)
    return [
        RankStatus(rank, live, tokens, error)
        for rank, ((live, tokens, _), error) in enumerate(zip(rows, errors))
    ]


def rank_loop(runner: RankRunner, comm, on_step=None) -> RankResult:
    """The per-rank program: MIN all-reduce, build, then lockstep iterations. With a monitor,
    the rank marks when it waits in a collective (the parent names a hung rank by it)."""
    monitor = runner.monitor
    wait = (
        (lambda waiting: None)
        if monitor is None
        else (lambda waiting: monitor.waiting(runner.rank, waiting))
    )
    wait(True)
    capacity = comm.all_reduce_min(runner.local_capacity_tokens)
    wait(False)
    runner.build(capacity)
    while True:
        wait(True)
        statuses = gather_statuses(comm, runner.status())
        wait(False)
        if not runner.iterate(statuses):
            break
        if on_step is not None:
            on_step(runner.step)
    return runner.result()
