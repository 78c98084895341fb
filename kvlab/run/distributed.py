"""Ranks over torch.distributed: per-rank memory budgets, the MIN all-reduce of KV capacity,
attention-DP routing, lockstep iterations, and one rank's exception taking every rank down.

This is the 16-GPU deployment of TensorRT-LLM issue #21470 in miniature. Every rank (a real
process, or a thread of the in-process mode) runs the same code, :class:`RankRunner`:

1. **Budget.** The rank's own :class:`~kvlab.core.memory.MemoryBudget` gives its KV quota
   (``KvCacheCreator._cal_max_memory``, tensorrt_llm/_torch/pyexecutor/_util.py) and so its
   local token capacity: whole blocks of the model's geometry.
2. **MIN all-reduce.** The token capacity is all-reduced with MIN
   (``_util.py``: "allreduce(MIN) must never increase the local quota"); every rank builds its
   KVCacheManager from the smallest capacity, and asserts that it did not grow.
3. **Lockstep.** Each iteration starts with an all_gather of every rank's status (live
   requests, their prompt tokens, and the error that stopped its engine, if any), as the
   attention-DP executor all-gathers its ranks' request counts every iteration
   (``PyExecutor._fetch_and_activate_new_requests``, tensorrt_llm/_torch/pyexecutor/py_executor.py).
   Then each rank routes the arrivals of this step (the same rule on every rank, from the same
   gathered numbers, so they agree without further messages), and runs one iteration of its
   own :class:`~kvlab.run.simulation.Engine`.
4. **Failure.** An engine error (PageIndexTooShort from resize, SchedulerDeadlock) is not
   caught by the executor loop: the real ``_event_loop_wrapper`` logs "Error in event loop",
   re-raises and cleans up, and the deployment goes down with it. kvlab models the observable
   end: the next all_gather carries the error, the raising rank reports ``"raised"`` and every
   other rank ``"shut down"`` with the reason ("rank 0 raised ValueError: User-provided base
   page indices is too short"). With admission control ("capacity", PR #21720) the request
   is rejected on its rank at arrival and every rank finishes its work.

**Routing** (attention DP, ``schedule_attention_dp_requests`` and
``balance_requests_across_ranks``, tensorrt_llm/_torch/pyexecutor/request_utils.py): a request
pinned to a rank (``SchedulingParams.attention_dp_rank``, not relaxed) goes to that rank. The
others, longest prompt first, go one by one to the rank with the fewest active prompt tokens
(ties: fewest active requests, then lowest rank) among the ranks below the expected load
``max(ceil((active + new) / ranks), max(active per rank))``. kvlab always honours a pin (the
real one waits while the pinned rank has ``max_num_active_requests``).

**Storage.** The page arithmetic (blocks, clamp, row widths, resizes) uses the model's
geometry; the pages themselves are stored at one byte per token
(:data:`STORAGE_BYTES_PER_TOKEN`), because a GB300's 170 GiB pool cannot be allocated 16 times
on a laptop. Every count a learner reads (blocks, tokens, entries, quota bytes) is the model's.
A :class:`RunConfig` whose ranks would store more than :data:`MAX_RANK_STORAGE_BYTES`, hold no
page, or build a page-index table over ``page_index.MAX_TABLE_BYTES`` is refused when it is
made, before any rank starts.

**Processes.** :func:`run_ranks` starts ``ranks`` processes with torch.multiprocessing on
127.0.0.1 and a free port: "fork" for gloo (the parent never initialises a process group or
CUDA), "spawn" for nccl (one GPU per rank, required). The parent collects every rank's
:class:`RankResult`; a rank that dies or hangs ends the run within ``timeout_s`` with every rank
accounted for ("died", "hung"), and no process outlives the run, a failure or an interrupt;
the result states the ``timeout_s`` it was held to. The deadline: ``timeout_s`` from the start
(or ``DEATH_GRACE_S`` after a rank is seen dead), then 1 s to exit, then terminate, then kill.

``in_process=True`` runs the same RankRunner in threads that meet at a barrier
(:class:`ThreadComm`, the same ``all_reduce_min``/``all_gather`` as :class:`TorchComm`): the
same per-rank results, without starting processes (notebooks and widgets).

**Failures.** The ranks keep a :class:`RunMonitor` in shared memory (where each request was
routed, its last state, each rank's step, whether it waits in a collective), which outlives a
rank that dies. From it the parent names the rank that died or hung, the step and the time
(:class:`RankFailure`; a hung rank is the one not waiting in the all_gather, the ranks waiting
for it "shut down"), and gives every request a status and a reason: "lost: rank 2 died at step
3, ..." on the failed rank, the same cause on the others, "not routed" for the ones that never
arrived. The survivors' error names the failed rank, not gloo's message. A :class:`Fault` whose
step the run never reached is reported as not fired. kvlab's own: the real executor leaves logs.

**Signals.** Each rank ties itself to the parent (:func:`tie_to_parent`: Linux's
``PR_SET_PDEATHSIG``, and a watch on ``os.getppid()``), so none outlives it, whatever ends it.
While the ranks run, SIGTERM, SIGHUP and SIGINT to the parent (where Python's default handles
them) stop the run in order: every rank killed and reaped, then :class:`RunStopped` (a
SystemExit of 128 + the signal; SIGINT's is also a KeyboardInterrupt), which ends a program
without a traceback.
"""

from __future__ import annotations

import heapq
import os
import queue as queue_mod
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import PurePath
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from kvlab.core.checks import check_choice, check_float, check_int, store_checked
from kvlab.core.geometry import KVGeometry
from kvlab.core.manager import KVCacheManager
from kvlab.core.memory import GIB, MemoryBudget
from kvlab.core.page_index import check_table_size, max_blocks_per_seq, width_seq_len
from kvlab.core.pool import MAX_POOL_BLOCKS
from kvlab.core.request import Request
from kvlab.run.progress import progress as progress_bar
from kvlab.run.monitor import RunMonitor
from kvlab.run.signals import StopOnSignal, tie_to_parent
from kvlab.run.simulation import Engine, STATUS_OF_STATE
from kvlab.sched.policies import POLICIES, RANK_POLICIES
from kvlab.sched.scheduler import Scheduler

BACKENDS = ("gloo", "nccl")
MAX_RANKS = 128
FAULT_KINDS = ("die", "hang")
#: Bytes each page stores per token (see "Storage" in the module docstring).
STORAGE_BYTES_PER_TOKEN = 1
#: Exit code of a rank process that a Fault(kind="die") ends.
FAULT_EXIT_CODE = 17
#: Seconds the other ranks get to report once one rank has died.
DEATH_GRACE_S = 3.0
#: The most page storage one rank allocates (see "Storage" in the module docstring): 1 GiB.
MAX_RANK_STORAGE_BYTES = 1 << 30


@dataclass(frozen=True)
class Fault:
    """Make ``rank`` die (exit without a result) or hang (stop answering) at ``step``:
    robustness checks of the process mode."""

    rank: int
    step: int
    kind: str

    def __post_init__(self):
        check_int("fault.rank", self.rank, low=0, high=MAX_RANKS - 1)
        check_int("fault.step", self.step, low=0, high=1 << 30)
        check_choice("fault.kind", self.kind, FAULT_KINDS)


@dataclass(frozen=True)
class RunConfig:
    """Everything every rank needs (picklable): the model's KV geometry, one memory budget per
    rank, the manager and scheduler settings, the policy and the workload. ``pins`` maps a
    request id to the rank it is pinned to."""

    geometry: KVGeometry
    budgets: Tuple[MemoryBudget, ...]
    policy: str
    max_seq_len: int
    max_batch_size: int
    max_num_tokens: int
    chunked_prefill: bool
    stall_limit: int
    max_steps: int
    requests: Tuple[Request, ...]
    pins: Mapping[str, int] = field(default_factory=dict)
    fault: Optional[Fault] = None

    def __post_init__(self):
        if not isinstance(self.geometry, KVGeometry):
            raise TypeError(f"geometry must be a KVGeometry, got {type(self.geometry).__name__}")
        check_int("ranks", len(self.budgets), low=1, high=MAX_RANKS)
        if not all(isinstance(b, MemoryBudget) for b in self.budgets):
            raise TypeError("budgets must hold one MemoryBudget per rank")
        check_choice("policy", self.policy, RANK_POLICIES)
        store_checked(self, "max_steps", check_int, low=1, high=1 << 30)
        ids = [r.request_id for r in self.requests]
        if len(set(ids)) != len(ids):
            raise ValueError("requests must have distinct request ids")
        for request_id, rank in self.pins.items():
            if request_id not in ids:
                raise ValueError(f"pins names {request_id!r}, which is not among the requests")
            check_int(f"pins[{request_id!r}]", rank, low=0, high=self.world_size - 1)
        if self.fault is not None and self.fault.rank >= self.world_size:
            raise ValueError(f"fault.rank must be in [0, {self.world_size - 1}], got {self.fault.rank}")
        store_checked(self, "max_seq_len", check_int, low=1, high=1 << 30)
        store_checked(self, "max_batch_size", check_int, low=1, high=1 << 20)
        store_checked(self, "max_num_tokens", check_int, low=1, high=1 << 30)
        store_checked(self, "stall_limit", check_int, low=1, high=1 << 30)
        self._check_sizes()

    def pool_plan(self) -> Tuple[Tuple[int, ...], int, int]:
        """What the ranks will build, known before any starts: each rank's own blocks (from its
        budget's KV quota), the token capacity after allreduce(MIN), and the page-index width
        from it (0 when the MIN leaves no page). RankRunner and KVCacheManager compute the same
        when they run; kvlab.analysis.rank_plan builds on it."""
        geo = self.geometry
        blocks = tuple(geo.blocks_in(b.kv_quota_bytes) for b in self.budgets)
        tokens = min(blocks) * geo.tokens_per_block
        if tokens == 0:
            return blocks, 0, 0
        width_policy = POLICIES[RANK_POLICIES[self.policy]][1]
        width = max_blocks_per_seq(width_seq_len(width_policy, self.max_seq_len,
                                                 min(self.max_seq_len, tokens)),
                                   geo.tokens_per_block)
        return blocks, tokens, width

    def _check_sizes(self) -> None:
        """What every rank will build, checked here, before any rank starts: a pool after the
        MIN (at least one page, at most MAX_POOL_BLOCKS pages and MAX_RANK_STORAGE_BYTES stored)
        and its page-index table (at most page_index.MAX_TABLE_BYTES)."""
        geo = self.geometry
        blocks, tokens, width = self.pool_plan()
        if tokens == 0:
            rank = blocks.index(0)
            raise ValueError(f"rank {rank}'s KV quota of {self.budgets[rank].kv_quota_bytes} bytes "
                             f"holds no page of {geo.bytes_per_block} bytes, so after the MIN "
                             "all-reduce no rank has a pool: lower the workspace, activations or "
                             "weights, or raise gpu_memory_gib")
        if tokens * STORAGE_BYTES_PER_TOKEN > MAX_RANK_STORAGE_BYTES:
            raise ValueError(f"each rank's pool would hold {tokens} tokens, stored at "
                             f"{STORAGE_BYTES_PER_TOKEN} byte per token: more than "
                             f"MAX_RANK_STORAGE_BYTES={MAX_RANK_STORAGE_BYTES}; the KV geometry "
                             f"({geo.bytes_per_token} bytes per token) is too small for the "
                             "memory budget")
        pages = tokens // geo.tokens_per_block
        if pages > MAX_POOL_BLOCKS:
            raise ValueError(f"each rank's pool would have {pages} pages of {geo.tokens_per_block} "
                             f"token(s), more than MAX_POOL_BLOCKS={MAX_POOL_BLOCKS}: raise "
                             "tokens_per_block or lower the memory budget")
        check_table_size(self.max_batch_size, width)

    @property
    def world_size(self) -> int:
        return len(self.budgets)


# --- the scenario file -> a RunConfig ------------------------------------------------------------

def ramped_workspace_gib(base_gib: float, skew_gib: float, rank: int, ranks: int) -> float:
    """Rank ``rank``'s workspace when it grows linearly from ``base_gib`` on rank 0 to
    ``base_gib + skew_gib`` on the last (per-rank MoE workspaces differ with expert load)."""
    return base_gib + (skew_gib * rank / (ranks - 1) if ranks > 1 else 0.0)


def rank_budget(scenario, rank: int, ranks: int, workspace_gib: Optional[float] = None) -> MemoryBudget:
    """Rank ``rank``'s memory budget in a deployment scenario: weights, MoE workspace (``base +
    skew * rank / (ranks - 1)``), activation peak and non-torch memory, as
    ``KvCacheCreator._cal_max_memory`` counts them. ``workspace_gib`` overrides the base."""
    dep = scenario.deployment
    base = dep.workspace_gib if workspace_gib is None else workspace_gib
    workspace = ramped_workspace_gib(base, dep.workspace_skew_gib, rank, ranks)
    return MemoryBudget(total_bytes=round(dep.gpu_memory_gib * GIB),
                        weights_bytes=scenario.parameters.model_weights_bytes,
                        workspace_bytes=round(workspace * GIB),
                        activation_peak_bytes=round(dep.activations_gib * GIB),
                        non_torch_bytes=round(dep.non_torch_gib * GIB),
                        free_gpu_memory_fraction=dep.free_gpu_memory_fraction)


def scenario_geometry(scenario) -> KVGeometry:
    """The KV geometry of a scenario's parameters (attention DP: heads are not split)."""
    p = scenario.parameters
    attention_dp = bool(scenario.deployment and scenario.deployment.attention_dp)
    return KVGeometry(num_layers=p.num_layers, num_kv_heads=p.num_kv_heads, head_dim=p.head_dim,
                      dtype=p.kv_dtype, tokens_per_block=p.tokens_per_block,
                      attention_dp=attention_dp)


def scenario_requests(scenario, context_length: Optional[int] = None) -> Tuple[List[Request], Dict[str, int]]:
    """The deployment's requests (background ones generated deterministically) and their pins.
    ``context_length`` replaces the prompt of the request of ``parameters.context_length``."""
    dep = scenario.deployment
    requests, pins = [], {}
    bg = dep.background
    if bg is not None:
        for i in range(bg.count):
            span = bg.prompt_len_max - bg.prompt_len_min
            prompt = bg.prompt_len_min + (span * i // (bg.count - 1) if bg.count > 1 else 0)
            requests.append(Request(f"bg-{i:03d}", prompt_len=prompt, max_new_tokens=bg.max_new_tokens,
                                    arrival_step=i // bg.per_step))
    for spec in dep.requests:
        prompt = spec.prompt_len
        if context_length is not None and spec.prompt_len == scenario.parameters.context_length:
            prompt = context_length
        requests.append(Request(spec.id, prompt_len=prompt, max_new_tokens=spec.max_new_tokens,
                                arrival_step=spec.arrival_step))
        if spec.rank is not None:
            pins[spec.id] = spec.rank
    return requests, pins


def scenario_config(scenario, ranks: Optional[int] = None, policy: str = "clamped", *,
                    workspace_gib: Optional[float] = None, context_length: Optional[int] = None,
                    stall_limit: Optional[int] = None, fault: Optional[Fault] = None) -> RunConfig:
    """A RunConfig from a deployment scenario (``kvlab.run.scenarios.load_scenario``), for
    ``ranks`` ranks (default: the deployment's). The keyword overrides serve the widget
    (workspace, context length) and fast tests (stall_limit)."""
    dep = getattr(scenario, "deployment", None)
    if dep is None:
        raise ValueError(f"scenario {getattr(scenario, 'name', scenario)!r} has no deployment block")
    ranks = dep.ranks if ranks is None else check_int("ranks", ranks, low=1, high=MAX_RANKS)
    check_choice("policy", policy, RANK_POLICIES)
    if workspace_gib is not None:
        workspace_gib = check_float("workspace_gib", workspace_gib, low=0.0, high=1 << 20)
    if context_length is not None:
        context_length = check_int("context_length", context_length, low=1, high=1 << 30)
    requests, pins = scenario_requests(scenario, context_length)
    for request_id, rank in pins.items():
        if rank >= ranks:
            raise ValueError(f"request {request_id!r} is pinned to rank {rank}, which a world of "
                             f"ranks={ranks} lacks")
    p = scenario.parameters
    return RunConfig(
        geometry=scenario_geometry(scenario),
        budgets=tuple(rank_budget(scenario, r, ranks, workspace_gib) for r in range(ranks)),
        policy=policy, max_seq_len=p.configured_max_seq_len, max_batch_size=p.max_batch_size,
        max_num_tokens=dep.max_num_tokens, chunked_prefill=dep.chunked_prefill,
        stall_limit=dep.stall_limit if stall_limit is None else stall_limit,
        max_steps=dep.max_steps, requests=tuple(requests), pins=pins, fault=fault)


# --- routing -------------------------------------------------------------------------------------

def route(new: Sequence[Request], active_requests: Sequence[int], active_tokens: Sequence[int],
          pins: Mapping[str, int]) -> Dict[str, int]:
    """Attention-DP routing of the requests arriving now (module docstring): request id ->
    rank. ``active_requests``/``active_tokens``: each rank's live requests and their prompt
    tokens, as all-gathered."""
    ranks = len(active_requests)
    counts, tokens = list(active_requests), list(active_tokens)
    assignment: Dict[str, int] = {}
    free = []
    for request in new:
        rank = pins.get(request.request_id)
        if rank is None:
            free.append(request)
            continue
        assignment[request.request_id] = rank
        counts[rank] += 1
        tokens[rank] += request.prompt_len
    if not free:
        return assignment
    expected = max(-(-(sum(counts) + len(free)) // ranks), max(counts))
    heap = [(tokens[r], counts[r], r) for r in range(ranks) if counts[r] < expected]
    heapq.heapify(heap)
    for request in sorted(free, key=lambda r: r.prompt_len, reverse=True):  # stable on ties
        rank_tokens, rank_count, rank = heapq.heappop(heap)
        assignment[request.request_id] = rank
        if rank_count + 1 < expected:
            heapq.heappush(heap, (rank_tokens + request.prompt_len, rank_count + 1, rank))
    return assignment


# --- communicators -------------------------------------------------------------------------------

class TorchComm:
    """torch.distributed collectives of one rank: MIN all-reduce of an int, all_gather of a
    few ints (one int64 tensor: the per-iteration status, cheap) and of a picklable object
    (only to spread an error's text)."""

    def __init__(self, device: torch.device):
        self.device = device

    def all_reduce_min(self, value: int) -> int:
        import torch.distributed as dist

        tensor = torch.tensor([value], dtype=torch.int64, device=self.device)
        try:
            dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
        except RuntimeError as exc:
            raise CollectiveFailed(f"all_reduce(MIN) failed: {str(exc).splitlines()[0]}") from exc
        return int(tensor.item())

    def all_gather_ints(self, values: Sequence[int]) -> List[List[int]]:
        import torch.distributed as dist

        tensor = torch.tensor(list(values), dtype=torch.int64, device=self.device)
        gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        try:
            dist.all_gather(gathered, tensor)
        except RuntimeError as exc:
            raise CollectiveFailed(f"all_gather failed: {str(exc).splitlines()[0]}") from exc
        return [t.tolist() for t in gathered]

    def all_gather(self, obj) -> list:
        import torch.distributed as dist

        gathered = [None] * dist.get_world_size()
        try:
            dist.all_gather_object(gathered, obj)
        except RuntimeError as exc:
            raise CollectiveFailed(f"all_gather failed: {str(exc).splitlines()[0]}") from exc
        return gathered


class ThreadComm:
    """The same collectives for ranks that are threads of one process: they meet at a barrier.
    ``for_rank(r)`` is rank r's handle. A barrier that times out or is aborted (a rank failed)
    raises CollectiveFailed in every waiting rank."""

    def __init__(self, world_size: int, timeout_s: float, on_gather=None):
        self.world_size = world_size
        self._slots: list = [None] * world_size
        self._barrier = threading.Barrier(world_size, timeout=timeout_s)
        self._on_gather = on_gather

    def for_rank(self, rank: int) -> "_ThreadRankComm":
        return _ThreadRankComm(self, rank)

    def abort(self) -> None:
        self._barrier.abort()

    def _gather(self, rank: int, obj) -> list:
        self._slots[rank] = obj
        try:
            if self._barrier.wait() == 0 and self._on_gather is not None:
                self._on_gather()
            gathered = list(self._slots)
            self._barrier.wait()  # nobody overwrites a slot before everyone has read it
        except threading.BrokenBarrierError:
            raise CollectiveFailed("the in-process ranks did not all meet at the barrier "
                                   "(a rank failed, or the timeout passed)") from None
        return gathered


class _ThreadRankComm:
    def __init__(self, comm: ThreadComm, rank: int):
        self._comm, self._rank = comm, rank

    def all_reduce_min(self, value: int) -> int:
        return min(self._comm._gather(self._rank, value))

    def all_gather_ints(self, values: Sequence[int]) -> List[List[int]]:
        return self._comm._gather(self._rank, [int(v) for v in values])

    def all_gather(self, obj) -> list:
        return self._comm._gather(self._rank, obj)


# --- one rank ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankStatus:
    """What a rank all-gathers each iteration."""

    rank: int
    live: int
    active_tokens: int
    error: Optional[str]  # "ValueError: <message>" once its engine has stopped


@dataclass(frozen=True)
class RankResult:
    """One rank's run: its pool before and after the MIN, its outcome and its requests."""

    rank: int
    outcome: str  # "finished", "raised", "shut down", "died", "hung"
    error: Optional[str]  # why it stopped, if it did not finish
    traceback: Optional[str]  # the raising rank's traceback, trimmed to kvlab frames
    budget: MemoryBudget
    local_quota_bytes: int
    local_blocks: int  # before the MIN
    blocks: int  # after the MIN: the pool it built
    capacity_tokens: int  # after the MIN (the all-reduced token capacity)
    quota_bytes: int  # the quota its pool uses after the MIN (model bytes)
    max_seq_len: int  # clamped
    max_blocks_per_seq: int
    status: Dict[str, str]  # id -> waiting, running, finished, rejected, lost (its rank died/hung)
    reasons: Dict[str, str]
    iterations: int
    end_step: int

    @property
    def workspace_bytes(self) -> int:
        return self.budget.workspace_bytes


def _not_reported(rank: int, outcome: str, why: str, config: RunConfig) -> RankResult:
    """The result of a rank that could not report one (died, hung, or lost a collective):
    its budget and local pool, nothing after the MIN."""
    budget = config.budgets[rank]
    quota = budget.kv_quota_bytes
    return RankResult(rank, outcome, why, None, budget, quota, config.geometry.blocks_in(quota),
                      0, 0, 0, 0, 0, {}, {}, 0, 0)


class CollectiveFailed(RuntimeError):
    """A collective did not complete: a peer died, hung past the timeout, or failed."""


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
            short = "/".join(parts[len(parts) - 1 - parts[::-1].index("kvlab"):])
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
        self.engine: Optional[Engine] = None
        self.monitor: Optional[RunMonitor] = None  # the process mode's shared record
        self.exception: Optional[BaseException] = None
        self.stop_reason: Optional[str] = None
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
            f"{self.local_capacity_tokens} to {capacity_tokens} tokens")
        cfg, geo = self.config, self.config.geometry
        self.capacity_tokens = capacity_tokens
        self.blocks = capacity_tokens // geo.tokens_per_block
        if self.blocks == 0:
            raise ValueError(f"rank {self.rank}: the all-reduced KV capacity holds no page "
                             f"(local quota {self.local_quota_bytes} B, {self.local_blocks} blocks)")
        storage = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=STORAGE_BYTES_PER_TOKEN,
                             dtype="fp8", tokens_per_block=geo.tokens_per_block, kv_factor=1)
        admission, page_policy = POLICIES[RANK_POLICIES[cfg.policy]]
        manager = KVCacheManager.expecting_clamp(
            storage, quota_bytes=self.blocks * storage.bytes_per_block, max_seq_len=cfg.max_seq_len,
            max_batch_size=cfg.max_batch_size, page_index_policy=page_policy, device=self.device)
        scheduler = Scheduler(manager, admission=admission, max_num_tokens=cfg.max_num_tokens,
                              max_batch_size=cfg.max_batch_size, stall_limit=cfg.stall_limit,
                              chunked_prefill=cfg.chunked_prefill)
        self.engine = Engine(scheduler)
        if self.monitor is not None:
            self.monitor.built(self.rank, self.blocks, capacity_tokens, manager.max_seq_len,
                               manager.max_blocks_per_seq)

    def status(self) -> RankStatus:
        engine = self.engine
        live = [r for r in engine.requests if STATUS_OF_STATE[r.state] in ("waiting", "running")]
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
        while self._next < len(self._arrivals) and self._arrivals[self._next].arrival_step <= self.step:
            new.append(self._arrivals[self._next])
            self._next += 1
        if new:
            assignment = route(new, [s.live for s in statuses], [s.active_tokens for s in statuses],
                               cfg.pins)
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
                if status in ("waiting", "running"):
                    reasons[request_id] = f"{self.stop_reason} (at step {self.step})"
        manager = engine.scheduler.manager
        geo = self.config.geometry
        return RankResult(
            rank=self.rank, outcome=self.outcome, error=self.stop_reason,
            traceback=None if self.exception is None else kvlab_traceback(self.exception),
            budget=self.budget, local_quota_bytes=self.local_quota_bytes,
            local_blocks=self.local_blocks, blocks=self.blocks, capacity_tokens=self.capacity_tokens,
            quota_bytes=self.blocks * geo.bytes_per_block, max_seq_len=manager.max_seq_len,
            max_blocks_per_seq=manager.max_blocks_per_seq, status=dict(sim.status), reasons=reasons,
            iterations=sim.iterations, end_step=self.step)


def _inject(fault: Fault) -> None:
    if fault.kind == "die":
        os._exit(FAULT_EXIT_CODE)
    while True:  # "hang": stop answering; the parent's timeout ends the run
        time.sleep(3600)


def gather_statuses(comm, status: RankStatus) -> List[RankStatus]:
    """The per-iteration collective: every rank's (live, active tokens, failed) as ints, and
    only when some rank failed, a second all_gather with the errors' text."""
    rows = comm.all_gather_ints([status.live, status.active_tokens, status.error is not None])
    errors = comm.all_gather(status.error) if any(row[2] for row in rows) else [None] * len(rows)
    return [RankStatus(rank, live, tokens, error)
            for rank, ((live, tokens, _), error) in enumerate(zip(rows, errors))]


def rank_loop(runner: RankRunner, comm, on_step=None) -> RankResult:
    """The per-rank program: MIN all-reduce, build, then lockstep iterations. With a monitor,
    the rank marks when it waits in a collective (the parent names a hung rank by it)."""
    monitor = runner.monitor
    wait = (lambda waiting: None) if monitor is None else (
        lambda waiting: monitor.waiting(runner.rank, waiting))
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


# --- the whole run -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankFailure:
    """A rank that ended the run without a result: it "died" (its process exited) or "hung"
    (it stopped answering and was killed), the last step it reached, and when."""

    rank: int
    kind: str  # "died" or "hung"
    step: int  # the last step the rank reached
    at_s: float  # seconds into the run: its exit seen (died), or last heard from (hung)
    detail: str  # "exit code -9: SIGKILL", "no answer by timeout_s=4; killed", ...

    def what(self) -> str:
        return f"{self.kind} at step {self.step}, {self.at_s:.1f} s into the run ({self.detail})"

    def describe(self) -> str:
        return f"rank {self.rank} {self.what()}"


@dataclass(frozen=True)
class DistributedResult:
    """Every rank's result and how the run ended: "completed" (every rank finished), "shut
    down" (a rank raised; every rank went down), "died" (a rank process exited without a
    result) or "hung" (ranks still running at the timeout were killed). ``failures``: the
    ranks that died or hung, with the step and time. ``unrouted``: request id -> why no rank
    received it. ``fault_fired``: whether ``fault`` fired (None without one)."""

    ranks: Tuple[RankResult, ...]
    ended: str
    reason: str
    mode: str  # "process" or "in-process"
    backend: Optional[str]
    policy: str
    wall_s: float
    startup_s: float  # process start + init_process_group (0 in-process)
    work_s: float
    pids: Tuple[int, ...] = ()  # the rank processes (all ended when run_ranks returns)
    timeout_s: Optional[float] = None  # the deadline the run was held to
    failures: Tuple[RankFailure, ...] = ()
    unrouted: Mapping[str, str] = field(default_factory=dict)
    fault: Optional[Fault] = None
    fault_fired: Optional[bool] = None

    @property
    def failure(self) -> Optional[RankFailure]:
        """The failure that ended the run (the first death, else the first hang), if any."""
        return self.failures[0] if self.failures else None

    def request_outcomes(self) -> Dict[str, Tuple[Optional[int], str, str]]:
        """Every request of the run: id -> (rank it was routed to or None, status, reason)."""
        outcomes: Dict[str, Tuple[Optional[int], str, str]] = {}
        for r in self.ranks:
            for request_id, status in r.status.items():
                outcomes[request_id] = (r.rank, status, r.reasons.get(request_id, ""))
        for request_id, why in self.unrouted.items():
            outcomes[request_id] = (None, "not routed", why)
        return outcomes

    @property
    def engine_down(self) -> bool:
        return self.ended != "completed"

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def rank_rows(self) -> List[dict]:
        """One dict per rank: its workspace, its own pool, the pool after the MIN, the row
        width, its requests by status and how it ended (the notebooks show these as a table)."""
        rows = []
        for r in self.ranks:
            counts: Dict[str, int] = {}
            for status in r.status.values():
                counts[status] = counts.get(status, 0) + 1
            rows.append({"rank": r.rank, "workspace (GiB)": r.workspace_bytes / GIB,
                         "own pool (pages)": r.local_blocks,
                         "own quota (GiB)": r.local_quota_bytes / GIB,
                         "pool after MIN (pages)": r.blocks, "pool after MIN (tokens)": r.capacity_tokens,
                         "row (entries)": r.max_blocks_per_seq,
                         "requests": " ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "-",
                         "outcome": _outcome_text(r)})
        return rows

    def table(self) -> str:
        """:meth:`rank_rows` as text, one line per rank (the command's report)."""
        lines = [f"{'rank':>4} {'workspace':>10} {'local pool':>22} {'pool after MIN':>24} "
                 f"{'row':>6}  requests  outcome"]
        for row in self.rank_rows():
            lines.append(
                f"{row['rank']:>4} {row['workspace (GiB)']:>7.1f} GiB "
                f"{row['own pool (pages)']:>7} blk {row['own quota (GiB)']:>7.1f} GiB "
                f"{row['pool after MIN (pages)']:>7} blk = {row['pool after MIN (tokens)']:>9} tok "
                f"{row['row (entries)']:>6}  {row['requests']}  {_outcome_text_cut(row['outcome'])}")
        return "\n".join(lines)

    @property
    def headline(self) -> str:
        """How the run ended, in one line."""
        return (f"{self.world_size} ranks ({self.mode}{', ' + self.backend if self.backend else ''}), "
                f"policy {self.policy}: {self.ended} - {self.reason}")

    def explain(self) -> str:
        head = self.headline
        timing = f"wall {self.wall_s:.2f} s (startup {self.startup_s:.2f} s, work {self.work_s:.2f} s)"
        if self.timeout_s is not None:
            timing += f", timeout_s={self.timeout_s:g}"
        counts: Dict[str, int] = {}
        for _, status, _ in self.request_outcomes().values():
            counts[status] = counts.get(status, 0) + 1
        lines = [head, self.table(),
                 f"requests: {sum(counts.values())} ("
                 + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")"]
        lines += [f"  {request_id}: {why}" for request_id, why in sorted(self.unrouted.items())][:5]
        if self.fault is not None:
            lines.append(f"fault: {self.fault!r} " + ("fired" if self.fault_fired else
                                                       "did not fire (the run never reached it)"))
        return "\n".join(lines + [timing])


def _outcome_text(r: RankResult) -> str:
    if not r.error:
        return r.outcome
    return r.error if r.error.startswith(r.outcome) else f"{r.outcome}: {r.error}"


def _outcome_text_cut(text: str, width: int = 100) -> str:
    """``text`` in at most ``width`` characters, cut between words."""
    if len(text) <= width:
        return text
    return text[:width - 3].rsplit(" ", 1)[0] + "..."


def check_run_arguments(config: RunConfig, backend: str, in_process: bool, timeout_s: float) -> None:
    """Clear errors at the boundary: a RunConfig, a known backend, GPUs for nccl."""
    if not isinstance(config, RunConfig):
        raise TypeError(f"config must be a RunConfig, got {type(config).__name__}")
    check_choice("backend", backend, BACKENDS)
    if not isinstance(in_process, bool):
        raise TypeError(f"in_process must be a bool, got {in_process!r}")
    check_float("timeout_s", timeout_s, low=0.0, high=24 * 3600.0, low_open=True)
    if in_process and config.fault is not None:
        raise ValueError("fault needs the process mode (in_process=False): a thread cannot die alone")
    if backend == "nccl" and not in_process:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus < config.world_size:
            raise ValueError(f"backend='nccl' needs one CUDA GPU per rank: ranks={config.world_size}, "
                             f"torch sees {gpus} GPU(s); use backend='gloo'")


def run_ranks(config: RunConfig, *, backend: str = "gloo", in_process: bool = False,
              timeout_s: float = 60.0, progress: bool = True) -> DistributedResult:
    """Run every rank of ``config`` (module docstring) and return their results. ``progress``
    shows a tqdm bar of lockstep iterations on runs longer than a second."""
    check_run_arguments(config, backend, in_process, timeout_s)
    if in_process:
        return _run_threads(config, timeout_s, progress)
    return _run_processes(config, backend, timeout_s, progress)


def _progress_bar(enabled: bool, world_size: int):
    if not enabled:
        return None
    return progress_bar(desc=f"{world_size} ranks, lockstep iterations", unit="it")


def _ended(results: Sequence[RankResult]) -> Tuple[str, str]:
    raised = [r for r in results if r.outcome == "raised"]
    if raised:
        return "shut down", f"rank {raised[0].rank} raised {raised[0].error}; every rank shut down"
    failed = ([r for r in results if r.outcome == "died"] + [r for r in results if r.outcome == "hung"])
    if failed:
        return failed[0].outcome, "; ".join(f"rank {r.rank} {r.error}" for r in failed)
    shut = [r for r in results if r.outcome == "shut down"]
    if shut:  # a peer failed a collective
        return "shut down", shut[0].error or "shut down"
    unfinished = sum(1 for r in results for s in r.status.values() if s in ("waiting", "running"))
    if unfinished:
        return "completed", f"{unfinished} request(s) unfinished: {results[0].error}"
    return "completed", "every rank finished its work"


def in_threads(comm: ThreadComm, target: Callable[[int], None]) -> None:
    """Run ``target(rank)`` for every rank of ``comm``, each in its own thread, and wait for
    all. A rank that raises aborts ``comm``, so that the others' collectives fail instead of
    waiting; the first error is raised once every thread has stopped, a rank's own error before
    the CollectiveFailed it caused elsewhere."""
    errors: List[BaseException] = []

    def run(rank: int) -> None:
        try:
            target(rank)
        except BaseException as exc:
            errors.append(exc)
            comm.abort()

    threads = [threading.Thread(target=run, args=(r,), name=f"kvlab-rank-{r}", daemon=True)
               for r in range(comm.world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise next((e for e in errors if not isinstance(e, CollectiveFailed)), errors[0])


def _run_threads(config: RunConfig, timeout_s: float, progress: bool) -> DistributedResult:
    start = time.monotonic()
    bar = _progress_bar(progress, config.world_size)
    comm = ThreadComm(config.world_size, timeout_s, on_gather=None if bar is None else bar.update)
    results: List[Optional[RankResult]] = [None] * config.world_size

    def run(rank: int) -> None:
        results[rank] = rank_loop(RankRunner(rank, config), comm.for_rank(rank))

    try:
        in_threads(comm, run)
    except CollectiveFailed as exc:  # no rank failed on its own: a collective timed out
        raise TimeoutError(f"{exc} (timeout_s={timeout_s})") from None
    finally:
        if bar is not None:
            bar.close()
    wall = time.monotonic() - start
    ended, reason = _ended(results)
    return DistributedResult(tuple(results), ended, reason, "in-process", None, config.policy,
                             wall, 0.0, wall, timeout_s=timeout_s,
                             unrouted=_unrouted(config, results, reason))


def _unrouted(config: RunConfig, ranks: Sequence[RankResult], cause: str) -> Dict[str, str]:
    """Why each request that no rank received was not routed: the run ended first."""
    routed = {request_id for r in ranks for request_id in r.status}
    end = max((r.end_step for r in ranks), default=0)
    return {r.request_id: f"not routed: the run ended at step {end} ({cause}); it arrives at step "
                          f"{r.arrival_step}"
            for r in config.requests if r.request_id not in routed}


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, config: RunConfig, backend: str, port: int, timeout_s: float, out,
            parent_pid: int, monitor: RunMonitor) -> None:
    """A rank process: tie it to its parent, init_process_group, rank_loop, send the result,
    destroy the group."""
    import torch.distributed as dist

    tie_to_parent(parent_pid)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    try:
        # the group's own timeout outlasts the parent's deadline: the parent decides "hung"
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=config.world_size,
                                timeout=timedelta(seconds=timeout_s + 30))
        out.put(("ready", rank, time.monotonic()))
        on_step = (lambda step: out.put(("step", rank, step))) if rank == 0 else None
        runner = RankRunner(rank, config, device)
        runner.monitor = monitor
        try:
            result = rank_loop(runner, TorchComm(device), on_step)
            peer_lost = False
        except CollectiveFailed as exc:  # a peer left: this rank goes down too (the parent
            peer_lost = True             # names the peer and replaces this text)
            if runner.engine is None:
                result = _not_reported(rank, "shut down", f"shut down: {exc}", config)
            else:
                runner.outcome, runner.stop_reason = "shut down", f"shut down: {exc}"
                result = runner.result()
        out.put(("result", rank, (result, peer_lost)))
        dist.destroy_process_group()
    except BaseException as exc:  # a kvlab bug: report it rather than dying silently
        out.put(("crash", rank, "".join(traceback.format_exception(exc))))


def _run_processes(config: RunConfig, backend: str, timeout_s: float, progress: bool) -> DistributedResult:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn" if backend == "nccl" else "fork")
    out = ctx.Queue()
    port = free_port()
    world = config.world_size
    monitor = RunMonitor(ctx, config)
    start = time.monotonic()
    procs = []
    killed: set = set()
    results: Dict[int, Tuple[RankResult, bool]] = {}
    crashes: Dict[int, str] = {}
    ready: Dict[int, float] = {}
    exited: Dict[int, float] = {}  # rank -> when it was seen to have exited
    bar = _progress_bar(progress, world)
    with StopOnSignal() as stop:
        try:
            for rank in range(world):
                if stop.signum is not None:
                    break
                p = ctx.Process(target=_worker, name=f"kvlab-rank-{rank}", daemon=True,
                                args=(rank, config, backend, port, timeout_s, out, os.getpid(),
                                      monitor))
                p.start()
                procs.append(p)
            deadline = start + timeout_s
            while stop.signum is None and len(results) + len(crashes) < world:
                now = time.monotonic()
                if now >= deadline:
                    break
                try:
                    kind, rank, payload = out.get(timeout=min(0.2, deadline - now))
                except queue_mod.Empty:
                    for rank, p in enumerate(procs):
                        if p.exitcode is not None and rank not in exited:
                            exited[rank] = time.monotonic()
                            if rank not in results and rank not in crashes:  # one died
                                deadline = min(deadline, exited[rank] + DEATH_GRACE_S)
                    if len(exited) == world:
                        break
                    continue
                if kind == "ready":
                    ready[rank] = payload
                elif kind == "step":
                    if bar is not None:
                        bar.update(payload - bar.n)
                elif kind == "result":
                    results[rank] = payload
                else:
                    crashes[rank] = payload
            end = time.monotonic()
        finally:
            killed = _stop(procs, grace_s=1.0 if stop.signum is None else 0.0)
            if bar is not None:
                bar.close()
            out.close()
            out.join_thread()
    stop.raise_if_signalled(len(procs))
    if crashes:
        rank, text = sorted(crashes.items())[0]
        raise RuntimeError(f"rank {rank} failed with a kvlab error:\n{text}")
    final, failures = _account(config, procs, results, exited, killed, monitor, start, end, timeout_s)
    ended, reason = _ended(final)
    unrouted = _unrouted(config, final, failures[0].describe() if failures else reason)
    fault, fired = config.fault, None
    if fault is not None:
        fired = monitor.fired
        if not fired:
            reason += (f"; {fault!r} did not fire: rank {fault.rank} never "
                       f"ran step {fault.step} (the run ended at step "
                       f"{max(r.end_step for r in final)})")
    startup = (max(ready.values()) - start) if len(ready) == world else end - start
    return DistributedResult(tuple(final), ended, reason, "process", backend, config.policy,
                             end - start, startup, end - start - startup,
                             tuple(p.pid for p in procs), timeout_s, tuple(failures), unrouted,
                             fault, fired)


def _exit_text(exitcode: int, fault_fired_here: bool) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"exit code {exitcode}: {signal.Signals(-exitcode).name}"
        except ValueError:
            pass
    if exitcode == FAULT_EXIT_CODE and fault_fired_here:
        return f"exit code {exitcode}: its Fault"
    return f"exit code {exitcode}"


def _account(config: RunConfig, procs, results, exited, killed, monitor: RunMonitor,
             start: float, end: float, timeout_s: float) -> Tuple[List[RankResult], List[RankFailure]]:
    """Every rank's result, and the ranks that failed (deaths first, by time; then hangs).
    A rank killed while it waited in a collective was waiting for the one that failed: it
    "shut down" (all were waiting: none can be named, all "hung"). The requests of a failed
    rank are "lost"; those of the other ranks that went down keep their status, with a reason
    naming the failed rank."""
    fault = config.fault
    died = sorted((r for r in range(len(procs)) if r not in results and r not in killed),
                  key=lambda r: (exited.get(r, end), r))
    failures = [RankFailure(r, "died", monitor.step(r), exited.get(r, end) - start,
                            _exit_text(procs[r].exitcode, fault is not None and fault.rank == r
                                       and monitor.fired)) for r in died]
    stopped = sorted(r for r in killed if r not in results)
    waiting = [r for r in stopped if monitor.is_waiting(r)]
    hung = [r for r in stopped if r not in waiting]
    if not hung and not died:
        hung, waiting = waiting, []
    why = (f"no answer by timeout_s={timeout_s:g}; killed" if not died else
           f"no answer {DEATH_GRACE_S:g} s after rank {died[0]} died; killed")
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
            final.append(_from_monitor(config, monitor, rank, failure.kind, failure.what(),
                                       f"lost: {failure.describe()}", lost=True))
        else:  # killed while waiting in a collective for the failed rank
            step = monitor.step(rank)
            final.append(_from_monitor(config, monitor, rank, "shut down",
                                       f"shut down: {cause}; killed waiting for it at step {step}",
                                       f"shut down: {cause} (at step {step})", lost=False))
    return final, failures


def _blamed(result: RankResult, cause: str) -> RankResult:
    """A rank that lost a peer in a collective: its error and its live requests' reasons name
    the rank that failed, instead of the transport's message."""
    text = f"shut down: {cause}"
    reasons = dict(result.reasons)
    for request_id, status in result.status.items():
        if status in ("waiting", "running"):
            reasons[request_id] = f"{text} (at step {result.end_step})"
    return replace(result, error=text, reasons=reasons)


def _from_monitor(config: RunConfig, monitor: RunMonitor, rank: int, outcome: str, error: str,
                  live_reason: str, lost: bool) -> RankResult:
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
            status[rid], reasons[rid] = state, (f"rejected at step {step} (its reason was lost "
                                                f"with rank {rank})")
        else:
            status[rid], reasons[rid] = ("lost" if lost else state), live_reason
    base = _not_reported(rank, outcome, error, config)
    return replace(base, blocks=blocks, capacity_tokens=capacity,
                   quota_bytes=blocks * config.geometry.bytes_per_block, max_seq_len=max_seq_len,
                   max_blocks_per_seq=width, status=status, reasons=reasons,
                   end_step=monitor.step(rank))


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
