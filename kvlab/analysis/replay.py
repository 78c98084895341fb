"""Your traffic on your deployment (``kvlab replay``, notebook 06 "your traffic"): a trace file
(kvlab.run.trace_files) replayed on the pool :func:`~kvlab.analysis.deployment.plan_deployment`
gives the rank that matters (the smallest after the MIN), under each engine's policies, and
what each did: finished, rejected, unfinished, crashed; the first request that crashed or
stalled the engine and why; goodput, waits and time to first token, preemptions, prompt tokens
found cached.

Composed of what exists: plan's pool, :mod:`kvlab.analysis.compare`'s engine configurations
(the peers as they ship, caching and async/overlap on), the schedulers, the executor loop.
Requests stream in as the clock reaches them and leave once ended
(:meth:`kvlab.run.simulation.Engine.release_ended`), so memory is bounded by the requests in
flight and the longest wait, not by the file's length. [kvlab] One TensorRT-LLM scheduler is
modelled (KVCacheV2Scheduler's loop): on a deployment that gets the V1 manager it runs on V1's
pool; a hybrid's recurrent-state slots are not replayed, its attention pool alone is.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvlab.analysis.compare import ENGINES, EngineConfig, engine_args
from kvlab.analysis.deployment import DeploymentPlan
from kvlab.analysis.sentences import sentence
from kvlab.analysis.shipped import SHIPPED_ENGINES, as_shipped, defaults_label
from kvlab.core.checks import MAX_COUNT, check_choice, check_float, check_instance, check_int
from kvlab.core.kv_cache import PageIndexTooShort
from kvlab.core.memory import GIB, MIB
from kvlab.core.request import Request, RequestState
from kvlab.run.progress import progress
from kvlab.run.rank_config import storage_geometry
from kvlab.run.simulation import Engine, SimulationResult
from kvlab.run.trace_files import trace_format, trace_requests, trace_rows
from kvlab.sched.deadlock import SchedulerDeadlock
from kvlab.sched.policies import PEER_POLICIES, TRTLLM_POLICIES
from kvlab.sched.sglang import SglangServerArgs
from kvlab.sched.vllm import VllmEngineArgs

#: Each engine's policies (kvlab.sched.policies), and its name in the tables.
ENGINE_POLICIES = {"trtllm": TRTLLM_POLICIES, **{peer: (peer,) for peer in PEER_POLICIES}}
ENGINE_TITLES = dict(zip(ENGINE_POLICIES, SHIPPED_ENGINES, strict=True))
#: The exit codes, as kvlab plan's: every request served, one stalled or left unfinished, the
#: engine crashed, most requests rejected.
REPLAY_EXIT_CODES = {"ok": 0, "stall": 3, "crash": 4, "mostly rejected": 5}
NOT_ARRIVED = "not arrived"  # the status of a request the run stopped before (unfinished)
FEED = 1024  # requests read ahead of the engine's clock at most
MAX_BINS = 200  # the waits-over-time figure's bins (their width doubles as the trace goes on)


def replay_config(plan: DeploymentPlan) -> EngineConfig:
    """The engine configuration of ``plan``'s pool after the MIN, to the block: max_seq_len,
    batch, token budget, chunking and host tier as deployed. [kvlab] Its pages are stored at one
    byte per token (:func:`kvlab.run.rank_config.storage_geometry`, as the rank processes store
    them): the counts are the model's, the tensor fits a laptop; a host tier given in GiB holds
    the model's pages it would hold."""
    check_instance("plan", plan, DeploymentPlan)
    d = plan.deployment
    if not plan.blocks:
        raise ValueError("the deployment's pool holds no page (see kvlab plan): nothing to replay")
    storage = storage_geometry(d.tokens_per_block)
    host = d.host_cache_gib
    return EngineConfig(
        pool_mib=plan.blocks * storage.bytes_per_block / MIB,  # exact: a power-of-two divisor
        max_seq_len=d.kv_max_seq_len,
        geometry=storage,
        max_batch_size=d.max_batch_size,
        max_num_tokens=d.max_num_tokens,
        host_cache_size=(0 if d.resolved_manager == "v1" else None)
        if host is None
        else int(host * GIB) // plan.bytes_per_block * storage.bytes_per_block,
        chunked_prefill=d.chunked_prefill,
    )


def _quantile(counts: Counter[int], share: float) -> int | None:
    """The smallest value with at least ``share`` of ``counts`` at or under it."""
    total = sum(counts.values())
    if not total:
        return None
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= share * total:
            return value
    raise AssertionError("unreachable")


@dataclass
class Tally:
    """What a replay keeps of each ended request: counts, the waits' distribution (one count
    per distinct wait), reasons by cause, and the waits over arrival time in bins whose width
    doubles whenever there would be more than MAX_BINS."""

    statuses: Counter[str] = field(default_factory=Counter)
    waits: Counter[int] = field(default_factory=Counter)
    ttfts: Counter[int] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)  # rejections by cause
    examples: dict[str, str] = field(default_factory=dict)  # a cause's first rejection, in words
    generated: int = 0
    preemptions: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0
    reuse_hits: int = 0
    bin_steps: int = 1
    bins: dict[int, list[int]] = field(default_factory=dict)  # [arrived, waited sum, max, rejected]

    def add(self, request: Request, status: str) -> None:
        self.statuses[status] += 1
        self.prompt_tokens += request.prompt_len
        self.reused_tokens += request.prepopulated_prompt_len
        self.reuse_hits += request.prepopulated_prompt_len > 0
        self.preemptions += request.num_suspensions + request.num_recomputes
        if status == RequestState.FINISHED:
            self.generated += request.num_generated
        elif status == RequestState.REJECTED and request.reason is not None:
            cause = str(request.reason.cause)
            self.reasons[cause] += 1
            if cause not in self.examples:  # worded once a cause, not once a rejection
                self.examples[cause] = f"{request.request_id}: {sentence(request.reason)}"
        wait = None
        if request.first_scheduled_step is not None:
            wait = request.first_scheduled_step - request.arrival_step
            self.waits[wait] += 1
        if request.first_token_step is not None:
            self.ttfts[request.first_token_step - request.arrival_step] += 1
        while request.arrival_step // self.bin_steps >= MAX_BINS * 2 and len(self.bins) >= MAX_BINS:
            self._widen()
        row = self.bins.setdefault(request.arrival_step // self.bin_steps, [0, 0, 0, 0])
        row[0] += 1
        row[3] += status == RequestState.REJECTED
        if wait is not None:
            row[1] += wait
            row[2] = max(row[2], wait)

    def _widen(self) -> None:
        merged: dict[int, list[int]] = {}
        for index, (arrived, total, most, rejected) in self.bins.items():
            row = merged.setdefault(index // 2, [0, 0, 0, 0])
            row[0] += arrived
            row[1] += total
            row[2] = max(row[2], most)
            row[3] += rejected
        self.bins, self.bin_steps = merged, self.bin_steps * 2


@dataclass(frozen=True)
class ReplayRun:
    """One engine under one policy on the trace."""

    engine: str
    policy: str
    label: str  # which of the engine's defaults were on (kvlab.analysis.shipped)
    tally: Tally
    iterations: int
    end_step: int
    #: "crash", "stall", "refused to start", or "not run" (kvlab cannot build it); None: it ran
    stopped: str | None
    failure: str  # the first request that crashed or stalled it, and why
    crashed: int  # requests lost with the engine when it stopped

    @property
    def outcome(self) -> str:
        """One of :data:`REPLAY_EXIT_CODES`, or "not run"."""
        if self.stopped == "not run":
            return "not run"
        count = self.tally.statuses
        total = sum(count.values()) + self.crashed
        if self.stopped == "crash":
            return "crash"
        if self.stopped == "stall" or self.unfinished:
            return "stall"
        return "mostly rejected" if count[RequestState.REJECTED] * 2 > total else "ok"

    @property
    def unfinished(self) -> int:
        return sum(
            n
            for status, n in self.tally.statuses.items()
            if status not in (RequestState.FINISHED, RequestState.REJECTED)
        )

    def row(self, seconds_per_iteration: float | None = None) -> dict[str, Any]:
        """The run's line of the table (and of the JSON)."""
        t = self.tally
        row: dict[str, Any] = dict(
            engine=ENGINE_TITLES[self.engine],
            policy=self.policy,
            finished=t.statuses[RequestState.FINISHED],
            rejected=t.statuses[RequestState.REJECTED],
            unfinished=self.unfinished,
            crashed=self.crashed,
            outcome=self.outcome,
            wait_p50=_quantile(t.waits, 0.5),
            wait_p99=_quantile(t.waits, 0.99),
            ttft_p50=_quantile(t.ttfts, 0.5),
            ttft_p99=_quantile(t.ttfts, 0.99),
            preemptions=t.preemptions,
            goodput_tokens_per_iteration=round(t.generated / self.iterations, 3)
            if self.iterations
            else 0.0,
            reused_tokens=t.reused_tokens,
            reuse_hits=t.reuse_hits,
            reused_share=round(t.reused_tokens / t.prompt_tokens, 4) if t.prompt_tokens else 0.0,
            iterations=self.iterations,
            failure=self.failure,
            rejections={
                cause: (n, t.examples.get(cause, "")) for cause, n in t.reasons.most_common()
            },
            defaults=self.label,
        )
        if seconds_per_iteration is not None:
            for key in ("wait_p50", "wait_p99", "ttft_p50", "ttft_p99"):
                steps = row[key]
                row[key.replace("_p", "_s_p")] = (
                    None if steps is None else round(steps * seconds_per_iteration, 3)
                )
        return row

    def timeline(self, seconds_per_iteration: float) -> list[dict[str, float]]:
        """The waits over arrival time, one row per bin: its start in seconds, requests
        arrived, mean and longest wait in seconds, rejections."""
        t, spi = self.tally, seconds_per_iteration
        return [
            dict(
                start_s=index * t.bin_steps * spi,
                arrived=arrived,
                mean_wait_s=total / arrived * spi,
                max_wait_s=most * spi,
                rejected=rejected,
            )
            for index, (arrived, total, most, rejected) in sorted(t.bins.items())
        ]


def _run(
    name: str,
    policy: str,
    args,
    requests: Iterator[Request],
    max_steps: int,
    advance: Callable[[int], object],
) -> ReplayRun:
    """``requests`` (in arrival order) streamed through a fresh engine of ``args``."""
    build, startup_check, _ = ENGINES[type(args)]
    tally = Tally()
    refusal = startup_check(args)
    if refusal is not None:
        for _ in requests:
            tally.statuses[RequestState.REJECTED] += 1
            advance(1)
        tally.reasons["engine refused to start"] += tally.statuses[RequestState.REJECTED]
        tally.examples["engine refused to start"] = "every request"
        return ReplayRun(
            name, policy, defaults_label(args), tally, 0, 0, "refused to start", refusal, 0
        )
    try:
        engine = Engine(build(args))
    except ValueError as exc:  # kvlab's own bounds (a page-index table over MAX_TABLE_BYTES)
        advance(sum(1 for _ in requests))
        return ReplayRun(name, policy, defaults_label(args), tally, 0, 0, "not run", str(exc), 0)
    upcoming = next(requests, None)
    while True:
        batch: list[Request] = []
        while upcoming is not None and len(batch) < FEED:
            batch.append(upcoming)
            upcoming = next(requests, None)
        engine.add_requests(batch)
        engine.execute_until(
            max_steps if upcoming is None else min(upcoming.arrival_step, max_steps)
        )
        for request in engine.release_ended():
            tally.add(request, request.state.status)
        advance(len(batch))
        if engine.error is not None or upcoming is None or engine.step >= max_steps:
            break
    result = engine.result(max_steps)
    never = (upcoming is not None) + sum(1 for _ in requests)  # the engine stopped first
    advance(never)
    return _ended(name, policy, args, tally, result, never)


def _ended(name, policy, args, tally, result: SimulationResult, never: int) -> ReplayRun:
    """The run's record once the engine has stopped or the trace ended: requests still held
    are unfinished, or lost with the engine when an error stopped it."""
    error = result.error
    crashed = never if error is not None else 0
    if error is None and never:  # the run stopped at max_steps before they arrived
        tally.statuses[NOT_ARRIVED] += never
    for request in result.requests.values():
        if error is not None and request.state.status != RequestState.REJECTED:
            crashed += request.end_step is None
            if request.end_step is None:
                continue
        tally.add(request, result.status[request.request_id])
    stopped, failure = None, ""
    if isinstance(error, (PageIndexTooShort, SchedulerDeadlock)):
        stopped = "crash" if isinstance(error, PageIndexTooShort) else "stall"
        culprit = getattr(error, "request_id", "") or "a request"
        failure = (
            f"{culprit} at iteration {result.end_step - 1:,}: {type(error).__name__}: "
            f"{str(error).split(' - ')[0]}"
        )
    label = defaults_label(args)
    return ReplayRun(
        name, policy, label, tally, result.iterations, result.end_step, stopped, failure, crashed
    )


@dataclass(frozen=True)
class Replay:
    """A trace replayed on a deployment: the runs, and what they ran on."""

    trace: str
    trace_format: str
    requests: int
    seconds_per_iteration: float
    seconds_given: bool  # whether waits are also said in seconds
    plan: DeploymentPlan
    config: EngineConfig
    runs: tuple[ReplayRun, ...]

    @property
    def exit_code(self) -> int:
        """The worst run's (:data:`REPLAY_EXIT_CODES`); "mostly rejected" only if every run."""
        outcomes = {run.outcome for run in self.runs} - {"not run"}
        for worst in ("crash", "stall"):
            if worst in outcomes:
                return REPLAY_EXIT_CODES[worst]
        if outcomes == {"mostly rejected"}:
            return REPLAY_EXIT_CODES["mostly rejected"]
        return 0

    def rows(self) -> list[dict[str, Any]]:
        spi = self.seconds_per_iteration if self.seconds_given else None
        return [run.row(spi) for run in self.runs]

    def to_dict(self) -> dict[str, Any]:
        return dict(
            trace=self.trace,
            format=self.trace_format,
            requests=self.requests,
            seconds_per_iteration=self.seconds_per_iteration,
            deployment=self.plan.explain().splitlines()[0],
            pool_blocks=self.config.total_blocks,
            pool_tokens=self.config.pool_tokens,
            runs=self.rows(),
            timelines={
                f"{ENGINE_TITLES[r.engine]} {r.policy}": r.timeline(self.seconds_per_iteration)
                for r in self.runs
            },
            exit_code=self.exit_code,
        )

    def explain(self) -> str:
        """The table, and the first failure and the rejections' reasons under it."""
        c = self.config
        lines = [
            f"Trace: {self.trace} ({self.trace_format}), {self.requests:,} requests, arriving at "
            f"{self.seconds_per_iteration:g} s per scheduler iteration",
            f"Deployment: {self.plan.explain().splitlines()[0]}",
            f"Pool of the rank that matters: {c.total_blocks:,} blocks = {c.pool_tokens:,} tokens; "
            f"max_seq_len {c.max_seq_len:,}; up to {c.max_batch_size:,} sequences; "
            f"{c.max_num_tokens:,} tokens a pass"
            + ("; chunked prefill" if c.chunked_prefill else ""),
        ]
        if self.plan.manager == "v1":
            lines.append(
                "Note: the deployment gets the V1 manager; kvlab replays TensorRT-LLM's V2 "
                "scheduler loop on V1's pool (V1's scheduler is not modelled)"
            )
        seconds = self.seconds_given
        unit = "s" if seconds else "it"
        head = (
            f"{'engine':<13}{'policy':<16}{'finished':>9}{'rejected':>9}{'unfinished':>11}"
            f"{'crashed':>8}  {'wait p50/p99':>14}  {'TTFT p50/p99':>14}{'preempt':>9}"
            f"{'goodput':>9}{'cached':>8}"
        )
        lines += ["", head, "-" * len(head)]

        def pair(row: dict[str, Any], key: str) -> str:
            k = key.replace("_p", "_s_p") if seconds else key
            low, high = row[f"{k}50"], row[f"{k}99"]
            return "-" if low is None else f"{low:,g}/{high:,g} {unit}"

        for row in self.rows():
            lines.append(
                f"{row['engine']:<13}{row['policy']:<16}{row['finished']:>9,}{row['rejected']:>9,}"
                f"{row['unfinished']:>11,}{row['crashed']:>8,}  {pair(row, 'wait_p'):>14}  "
                f"{pair(row, 'ttft_p'):>14}{row['preemptions']:>9,}"
                f"{row['goodput_tokens_per_iteration']:>9,.1f}{row['reused_share']:>8.1%}"
            )
        lines.append("")
        lines.append(
            "goodput: finished requests' tokens per iteration; cached: prompt tokens served from "
            f"the prefix cache; {'seconds' if seconds else 'it = scheduler iterations'}"
        )
        for run in self.runs:
            name = f"{ENGINE_TITLES[run.engine]} {run.policy}"
            if run.failure:
                what = {"crash": "crashed", "stall": "stalled", "not run": "not run"}.get(
                    run.stopped or "", "refused to start"
                )
                lines.append(f"{name}: {what} on {run.failure}"[:400])
            for cause, n in run.tally.reasons.most_common(3):
                example = run.tally.examples.get(cause, "")
                lines.append(f"{name}: {n:,} rejected ({cause}), e.g. {example}"[:300])
        labels = (
            defaults_label(_engine_args(r.engine, r.policy, self.config), False) for r in self.runs
        )
        lines.append("Defaults: " + "; ".join(dict.fromkeys(labels)))
        return "\n".join(lines)


def replay_runs(engines: Iterable[str] = tuple(ENGINE_POLICIES), policies: Sequence[str] = ()):
    """The (engine, policy) pairs to run: each engine's policies, those in ``policies`` only
    where given."""
    pairs = [
        (engine, policy)
        for engine in engines
        for policy in ENGINE_POLICIES[check_choice("engine", engine, ENGINE_POLICIES)]
        if not policies or policy in policies
    ]
    if not pairs:
        raise ValueError(
            f"no run: policies {list(policies)} belong to none of the engines {list(engines)} "
            f"(their policies: {ENGINE_POLICIES})"
        )
    return pairs


def replay_trace(
    trace: Path | str,
    plan: DeploymentPlan,
    engines: Iterable[str] = tuple(ENGINE_POLICIES),
    policies: Sequence[str] = (),
    seconds_per_iteration: float | None = None,
    max_steps: int = MAX_COUNT,
    real: Mapping[str, Any] | None = None,
    limit: int | None = None,
) -> Replay:
    """Replay the trace file ``trace`` on ``plan``'s pool under each (engine, policy) of
    :func:`replay_runs`; ``seconds_per_iteration`` places arrivals (default 0.05 s, an
    assumption) and, when given, says the waits in seconds too; ``real``: engine name -> its
    real scheduler (a kvlab.backends RealEngine, in its own environment; it reads the whole
    trace at once) to run instead of kvlab's peer; ``limit``: the first that many rows only."""
    path = Path(trace)
    kind = trace_format(path)
    spi = 0.05 if seconds_per_iteration is None else seconds_per_iteration
    spi = check_float("seconds_per_iteration", spi, low=0.0, high=3600.0, low_open=True)
    max_steps = check_int("max_steps", max_steps, low=1, high=MAX_COUNT)
    if limit is not None:
        limit = check_int("limit", limit, low=1, high=MAX_COUNT)
    config = replay_config(plan)
    pairs = replay_runs(list(engines), list(policies))
    rows = sum(1 for _ in trace_rows(path, limit, kind))  # every row checked before any run

    def requests() -> Iterator[Request]:
        return trace_requests(trace_rows(path, limit, kind), spi)

    runs = []
    with progress(total=rows * len(pairs), desc="replay", unit="req") as bar:
        for engine, policy in pairs:
            args = _engine_args(engine, policy, config)
            if real and engine in real:
                result = real[engine].run(args, list(requests()), max_steps, timeout_s=3600.0)
                run = _ended(engine, policy, args, Tally(), result, 0)
                runs.append(dataclasses.replace(run, label=run.label + " (the real scheduler)"))
                bar.update(rows)
            else:
                runs.append(_run(engine, policy, args, requests(), max_steps, bar.update))
    return Replay(
        path.name, kind, rows, spi, seconds_per_iteration is not None, plan, config, tuple(runs)
    )


def _engine_args(engine: str, policy: str, config: EngineConfig):
    """TensorRT-LLM's configuration under ``policy`` as deployed; a peer's as it ships, with its
    own chunked-prefill default (the deployment's switch is TensorRT-LLM's, off by default)."""
    if engine == "trtllm":
        return engine_args(policy, config)
    args = as_shipped(ENGINE_TITLES[engine], config)
    if isinstance(args, VllmEngineArgs):
        return dataclasses.replace(
            args, enable_chunked_prefill=VllmEngineArgs.enable_chunked_prefill
        )
    assert isinstance(args, SglangServerArgs)
    return dataclasses.replace(args, chunked_prefill_size=SglangServerArgs.chunked_prefill_size)


__all__ = [
    "ENGINE_POLICIES",
    "REPLAY_EXIT_CODES",
    "Replay",
    "ReplayRun",
    "replay_config",
    "replay_runs",
    "replay_trace",
]
