"""The three engines as they ship, prefix caching on and off (notebook 04 §8b). Each engine's
caching and scheduling defaults are its configuration type's own defaults, by the engine's own
switch names; :func:`as_shipped` builds an engine's configuration from it, :func:`defaults_label`
says in words which of those defaults a configuration has on (every figure and table that shows
an engine carries it), :func:`shipped_runs` replays requests on each engine with caching on and
off, and :func:`caching_rows` tabulates what caching changed: prompt tokens served from the
cache, waits, time to first token, preemptions, rejections. :func:`conversation_slice` takes
whole conversations out of Mooncake's conversation trace, and :func:`shared_prefix_runs` runs
the shared-prefix story of :func:`kvlab.analysis.reuse.shared_prefix_story` on each engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kvlab.analysis.compare import EngineConfig, engine_args, run_engine
from kvlab.analysis.reuse import MOONCAKE_ENGINE, ReuseCeiling, shared_prefix_story
from kvlab.core.checks import check_bools, check_choice, check_instance, check_int, check_items
from kvlab.core.memory import MIB
from kvlab.core.request import Request, RequestState
from kvlab.run.simulation import SimulationResult
from kvlab.sched.sglang import SGLANG_VERSION, SglangServerArgs
from kvlab.sched.trtllm_settings import TrtllmSettings
from kvlab.sched.vllm import VLLM_VERSION, VllmEngineArgs

#: The engines, in the order the tables and figures show them.
SHIPPED_ENGINES = ("TensorRT-LLM", "vLLM", "SGLang")

#: Each engine's caching switch and the value that turns caching on.
CACHING_SWITCHES: dict[str, tuple[str, bool]] = {
    "TensorRT-LLM": ("enable_block_reuse", True),
    "vLLM": ("enable_prefix_caching", True),
    "SGLang": ("disable_radix_cache", False),
}

#: The policy (kvlab.sched.policies.POLICIES) each engine runs here: TensorRT-LLM under PR
#: #21720's admission control (a proposal; upstream has none), the peers under their own loops.
SHIPPED_POLICIES: dict[str, str] = {"TensorRT-LLM": "capacity", "vLLM": "vllm", "SGLang": "sglang"}

EngineArgs = TrtllmSettings | VllmEngineArgs | SglangServerArgs


def as_shipped(
    engine: str, config: EngineConfig | None = None, *, caching: bool = True
) -> EngineArgs:
    """``engine``'s configuration for the deployment ``config`` (kvlab.analysis.compare's
    mapping) with its defaults as shipped, which are its configuration type's own defaults
    (``TrtllmSettings.enable_block_reuse``, ``VllmEngineArgs``' caching and async scheduling,
    ``SglangServerArgs``' radix cache and overlap schedule), its caching switch turned off
    where ``caching`` is False."""
    check_choice("engine", engine, SHIPPED_ENGINES)
    config = EngineConfig() if config is None else check_instance("config", config, EngineConfig)
    check_bools(caching=caching)
    switch, on = CACHING_SWITCHES[engine]
    args = engine_args(SHIPPED_POLICIES[engine], config)
    changes: dict[str, Any] = {switch: on if caching else not on}
    return dataclasses.replace(args, **changes)


def engine_name(args: EngineArgs) -> str:
    """The engine a configuration is for."""
    for name, kind in zip(SHIPPED_ENGINES, (TrtllmSettings, VllmEngineArgs, SglangServerArgs)):
        if isinstance(args, kind):
            return name
    raise TypeError(
        "args must be a TrtllmSettings, VllmEngineArgs or SglangServerArgs, got "
        f"{type(args).__name__}"
    )


def caching_on(args: EngineArgs) -> bool:
    """Whether ``args`` has its engine's prefix cache on."""
    switch, on = CACHING_SWITCHES[engine_name(args)]
    return getattr(args, switch) == on


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def defaults_label(args: EngineArgs, admission: bool = True) -> str:
    """Which of its engine's shipped defaults ``args`` has on, in words: the cache, and the
    scheduling that overlaps one step's CPU work with the last one's GPU work (vLLM's async
    scheduling, SGLang's overlap schedule; TensorRT-LLM's overlap scheduler, which kvlab does
    not model), with what kvlab does not model said so; TensorRT-LLM's admission policy too
    unless ``admission`` is False."""
    name = engine_name(args)
    if isinstance(args, TrtllmSettings):
        policy = args.admission if isinstance(args.admission, str) else "custom"
        return f"TensorRT-LLM: block reuse {_on(args.enable_block_reuse)}, overlap scheduler " + (
            f"not modelled; admission {policy}" if admission else "not modelled"
        )
    if isinstance(args, VllmEngineArgs):
        return (
            f"{name} {VLLM_VERSION}: prefix caching {_on(args.enable_prefix_caching)}, "
            f"async scheduling {_on(args.async_scheduling)}"
        )
    return (
        f"{name} {SGLANG_VERSION}: radix cache {_on(not args.disable_radix_cache)}, "
        f"overlap schedule {_on(not args.disable_overlap_schedule)}"
    )


def policies_label(policies: Iterable[str], config: EngineConfig) -> str:
    """:func:`defaults_label` of each engine that runs one of ``policies``
    (kvlab.sched.policies) on ``config``, once an engine: a figure's line for what was on."""
    labels = [defaults_label(engine_args(p, config), admission=False) for p in policies]
    return "; ".join(dict.fromkeys(labels))


@dataclass(frozen=True)
class ShippedRun:
    """One engine's run: its configuration and what it did."""

    engine: str
    args: EngineArgs
    result: SimulationResult

    @property
    def caching(self) -> bool:
        return caching_on(self.args)

    @property
    def label(self) -> str:
        return defaults_label(self.args)


def shipped_runs(
    requests: Sequence[Request],
    config: EngineConfig | None = None,
    engines: Iterable[str] = SHIPPED_ENGINES,
    caching: Iterable[bool] = (True, False),
    max_steps: int = 1_000_000,
) -> dict[tuple[str, bool], ShippedRun]:
    """``requests`` on each of ``engines`` as shipped, with caching on and off (``caching``):
    {(engine, caching): ShippedRun}, each on a fresh engine."""
    requests = check_items("requests", requests, "Requests")
    for request in requests:
        check_instance("requests[...]", request, Request)
    config = EngineConfig() if config is None else check_instance("config", config, EngineConfig)
    engines = [check_choice("engines[...]", e, SHIPPED_ENGINES) for e in engines]
    switches = list(caching)
    check_bools(**{f"caching[{i}]": on for i, on in enumerate(switches)})
    max_steps = check_int("max_steps", max_steps, low=1, high=1 << 40)
    runs = {}
    for engine in engines:
        for on in switches:
            args = as_shipped(engine, config, caching=on)
            runs[engine, on] = ShippedRun(engine, args, run_engine(args, requests, max_steps))
    return runs


def waited(result: SimulationResult) -> list[str]:
    """The requests that started later than the step they arrived ("not yet" for a while)."""
    return [
        r.request_id
        for r in result.requests.values()
        if r.first_scheduled_step is not None and r.first_scheduled_step > r.arrival_step
    ]


@dataclass(frozen=True)
class CachingEffect:
    """What caching changed for one engine's requests: those that waited with it off and
    started as they arrived with it on ("not yet" became "now"), those that waited only with
    it on, and those rejected with it on and with it off ("never")."""

    now: tuple[str, ...]
    later: tuple[str, ...]
    never_on: tuple[str, ...]
    never_off: tuple[str, ...]


def caching_effect(runs: dict[tuple[str, bool], ShippedRun], engine: str) -> CachingEffect:
    """:class:`CachingEffect` of ``engine``'s runs with caching on and off in ``runs``."""
    on, off = runs[engine, True].result, runs[engine, False].result
    waited_on, waited_off = set(waited(on)), set(waited(off))
    return CachingEffect(
        tuple(sorted(waited_off - waited_on)),
        tuple(sorted(waited_on - waited_off)),
        tuple(sorted(on.ids_with_status(RequestState.REJECTED))),
        tuple(sorted(off.ids_with_status(RequestState.REJECTED))),
    )


def caching_rows(
    runs: dict[tuple[str, bool], ShippedRun], ceiling: ReuseCeiling | None = None
) -> list[dict]:
    """A row a run: the engine, whether caching was on, its defaults in words, outcome counts,
    prompt tokens served from the cache (and their share of all prompt tokens, and of
    ``ceiling``'s), the requests that waited, mean wait and time to first token in steps, and
    preemptions."""
    rows = []
    for key, run in runs.items():
        check_instance(f"runs[{key!r}]", run, ShippedRun)
        result = run.result
        summary = result.summary()
        tokens = sum(r.prompt_len for r in result.requests.values())
        reused = summary["reused_tokens"]
        row = dict(
            engine=run.engine,
            caching=run.caching,
            defaults=run.label,
            finished=summary["finished"],
            rejected=summary["rejected"],
            unfinished=summary["waiting"] + summary["running"],
            reused_tokens=reused,
            reused_share=reused / tokens if tokens else 0.0,
            hit_requests=sum(r.prepopulated_prompt_len > 0 for r in result.requests.values()),
            waited=len(waited(result)),
            mean_wait_steps=summary["mean_wait_steps"],
            mean_ttft_steps=summary["mean_ttft_steps"],
            preemptions=summary["suspensions"] + summary["recomputes"],
        )
        if ceiling is not None:
            cached = ceiling.cached_tokens
            row["of_ceiling"] = reused / cached if cached else 0.0
        rows.append(row)
    return rows


#: The pools §8b replays its slice on, in 32-token pages: "roomy" holds several conversations'
#: prompts at once, "tight" fewer than the slice's longest prompt.
SLICE_POOL_PAGES: dict[str, int] = {"roomy": 6_000, "tight": 1_200}


def slice_engine(pages: int) -> EngineConfig:
    """:data:`~kvlab.analysis.reuse.MOONCAKE_ENGINE` (4 B a token, 128 sequences, chunked
    prefill of 8,192 tokens) on a pool of ``pages`` 32-token pages, max_seq_len the pool (as
    an operator sizes it after vLLM's start-up check)."""
    pages = check_int("pages", pages, low=16, high=1 << 24)
    pool_mib = pages * MOONCAKE_ENGINE.geometry.bytes_per_block / MIB
    engine = dataclasses.replace(MOONCAKE_ENGINE, pool_mib=pool_mib)
    return dataclasses.replace(engine, max_seq_len=engine.pool_tokens)


def conversation_slice(
    requests: Sequence[Request], conversations: int, *, min_turns: int = 3, key_blocks: int = 2
) -> list[Request]:
    """The requests of the first ``conversations`` conversations with at least ``min_turns``
    turns among ``requests`` (Mooncake's), in arrival order, arrival steps as recorded. A
    conversation is the requests whose first ``key_blocks`` block hashes agree: in Mooncake's
    conversation trace every prompt starts with the same block (a shared system prompt), and a
    conversation's turns repeat its first turn's blocks."""
    requests = check_items("requests", requests, "Requests")
    conversations = check_int("conversations", conversations, low=1, high=1 << 20)
    min_turns = check_int("min_turns", min_turns, low=1, high=1 << 20)
    key_blocks = check_int("key_blocks", key_blocks, low=1, high=1 << 20)
    threads: dict[tuple[int, ...], list[Request]] = {}
    for request in requests:
        hashes = check_instance("requests[...]", request, Request).prefix_hashes
        if len(hashes) >= key_blocks:
            threads.setdefault(tuple(hashes[:key_blocks]), []).append(request)
    chosen = [turns for turns in threads.values() if len(turns) >= min_turns][:conversations]
    if len(chosen) < conversations:
        raise ValueError(
            f"only {len(chosen)} conversations of at least {min_turns} turns among "
            f"{len(requests)} requests, {conversations} asked for"
        )
    return sorted((r for turns in chosen for r in turns), key=lambda r: r.arrival_step)


def shared_prefix_runs(
    config: EngineConfig | None = None, engines: Iterable[str] = SHIPPED_ENGINES
) -> dict[tuple[str, bool], ShippedRun]:
    """:func:`~kvlab.analysis.reuse.shared_prefix_story` on ``config``'s pool on each engine
    as shipped, caching on and off. The story's max_seq_len is the pool, so that each engine
    turns "too-long" away at its front door or admission (as an operator sizes a deployment
    after vLLM's start-up check)."""
    config = EngineConfig() if config is None else check_instance("config", config, EngineConfig)
    config = dataclasses.replace(config, max_seq_len=config.pool_tokens)
    return shipped_runs(shared_prefix_story(config), config, engines, max_steps=20_000)


def story_rows(runs: dict[tuple[str, bool], ShippedRun]) -> list[dict]:
    """A row a request a run of :func:`shared_prefix_runs`: the engine, caching, its defaults
    in words, when the request arrived and started, its status, and the prompt tokens it found
    cached."""
    rows = []
    for (engine, on), run in runs.items():
        for r in run.result.requests.values():
            rows.append(
                dict(
                    engine=engine,
                    caching=on,
                    defaults=run.label,
                    request_id=r.request_id,
                    prompt_len=r.prompt_len,
                    arrival=r.arrival_step,
                    started=r.first_scheduled_step,
                    status=str(RequestState(run.result.status[r.request_id]).value),
                    reused_tokens=r.prepopulated_prompt_len,
                )
            )
    return rows


__all__ = [
    "CACHING_SWITCHES",
    "SLICE_POOL_PAGES",
    "SHIPPED_ENGINES",
    "SHIPPED_POLICIES",
    "CachingEffect",
    "ShippedRun",
    "as_shipped",
    "caching_effect",
    "caching_on",
    "caching_rows",
    "conversation_slice",
    "defaults_label",
    "engine_name",
    "policies_label",
    "shared_prefix_runs",
    "shipped_runs",
    "slice_engine",
    "story_rows",
    "waited",
]
