"""The workloads on which kvlab's peers are held to the real engines (docs/CONFORMANCE.md), and
the comparison; ``kvlab.backends`` runs them on the real schedulers and stores their answers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from kvlab.analysis.compare import (
    PEERS,
    EngineConfig,
    long_and_small,
    not_yet_and_never,
    run_engine,
    sglang_args,
)
from kvlab.analysis.presets import seed_geometry
from kvlab.core.checks import check_instance, check_int, check_items
from kvlab.core.geometry import KVGeometry
from kvlab.core.request import Request
from kvlab.run.simulation import SimulationResult
from kvlab.run.workload import LogNormal, azure_trace, mooncake_trace, poisson_workload
from kvlab.sched.base import check_plain_request
from kvlab.sched.sglang import DEFAULT_CHUNKED_PREFILL_SIZE, SglangServerArgs
from kvlab.sched.vllm import VllmEngineArgs, estimated_max_model_len

#: What :func:`differences` compares, per request.
COMPARED = ("status", "first_scheduled_step", "end_step", "num_recomputes")


@dataclass(frozen=True)
class PeerWorkload:
    """``requests`` on an engine of arguments ``args`` (one of :data:`PEERS`' types), for at
    most ``max_steps`` steps."""

    name: str
    args: VllmEngineArgs | SglangServerArgs
    requests: Sequence[Request]  # kept as a tuple
    max_steps: int = 100_000

    def __post_init__(self):
        assert type(self.args) in PEERS, type(self.args)
        object.__setattr__(self, "requests", tuple(self.requests))
        ids = [r.request_id for r in self.requests]
        if len(set(ids)) != len(ids):
            twice = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(
                f"requests must have distinct request_ids; given more than once: {twice}"
            )
        for request in self.requests:
            check_plain_request(request, PEERS[type(self.args)][2])
        check_int("max_steps", self.max_steps, low=1, high=1 << 30)

    def run_peer(self) -> SimulationResult:
        """kvlab's peer of the engine on this workload (:func:`kvlab.analysis.compare.run_engine`)."""
        return run_engine(self.args, self.requests, self.max_steps)


def differences(peer: SimulationResult, real: SimulationResult) -> list[dict]:
    """One row per request and field of :data:`COMPARED` where the two runs differ."""
    check_instance("peer", peer, SimulationResult)
    check_instance("real", real, SimulationResult)
    rows = []
    for request_id, real_request in real.requests.items():
        peer_request = peer.requests.get(request_id)
        for field in COMPARED:
            if field == "status":
                theirs, ours = real.status[request_id], peer.status.get(request_id)
            else:
                theirs = getattr(real_request, field)
                ours = None if peer_request is None else getattr(peer_request, field)
            if theirs != ours:
                rows.append(dict(request_id=request_id, field=field, real=theirs, kvlab=ours))
    rows += [
        dict(request_id=request_id, field="status", real=None, kvlab=status)
        for request_id, status in peer.status.items()
        if request_id not in real.requests
    ]
    return rows


# --- the workloads --------------------------------------------------------------------------------

#: vLLM's defaults turned off: a vLLM workload's name says which it turns back on
#: ("/prefix-caching", "/async"); with both, the engine runs as vLLM 0.34 ships.
CACHING_AND_ASYNC_OFF = dict(enable_prefix_caching=False, async_scheduling=False)

#: Notebook 04's engine as vLLM: the seed's 64 blocks of 32 tokens, 4 sequences, no chunking,
#: and the max_model_len vLLM's start-up refusal prints (what an operator then sets).
NOTEBOOK_04 = VllmEngineArgs(
    seed_geometry(),
    64,
    estimated_max_model_len(seed_geometry(), 64),
    max_num_seqs=4,
    max_num_batched_tokens=8192,
    enable_chunked_prefill=False,
    **CACHING_AND_ASYNC_OFF,
)
CHUNKED_512 = dict(enable_chunked_prefill=True, max_num_batched_tokens=512)
#: The same engine with its pool swapped to 40 blocks after start-up (max_model_len stays 2,016).
SHRUNK = NOTEBOOK_04.replace(num_gpu_blocks=40, startup_num_gpu_blocks=64)


def _mixed(rate: float, seed: int = 0) -> list[Request]:
    """Notebook 04's mixed workload: 150 Poisson arrivals, log-normal prompts and outputs."""
    return poisson_workload(
        150,
        rate=rate,
        prompt_len=LogNormal(256, 1.0, 16, 8192),
        max_new_tokens=LogNormal(64, 0.8, 1, 512),
        seed=seed,
    )


def _mixed_workloads(engine, chunked) -> list[PeerWorkload]:
    """The mixed workloads on notebook 04's ``engine``, and its ``chunked`` form, up to seed 1."""
    workloads = []
    for rate in (0.04, 0.05, 0.1):
        mixed = _mixed(rate)
        workloads += [
            PeerWorkload(f"nb04/mixed-rate-{rate:g}", engine, mixed, 100_000),
            PeerWorkload(f"nb04/mixed-rate-{rate:g}/chunked", chunked, mixed, 100_000),
        ]
    seed_1 = PeerWorkload("nb04/mixed-rate-0.05/seed-1", engine, _mixed(0.05, seed=1), 100_000)
    return [*workloads, seed_1]


def _trace_workloads(engine) -> list[PeerWorkload]:
    """Azure's and Mooncake's traces on ``engine(pages of 32 tokens, sequences, chunked)``."""
    code, conversation = azure_trace("code", minutes=10), mooncake_trace("conversation", minutes=3)
    specs = [
        ("azure-code-10min", 256, 16, True, code),
        ("azure-code-10min/shrunk", 224, 16, True, code),
        ("azure-code-10min/no-chunking", 256, 16, False, code),
        ("azure-conv-10min", 512, 16, True, azure_trace("conv", minutes=10)),
        ("mooncake-conversation-3min", 2048, 32, True, conversation),
        ("mooncake-conversation-3min/shrunk", 1024, 32, True, conversation),
        ("mooncake-conversation-3min/no-chunking", 2048, 32, False, conversation),
        ("mooncake-synthetic-1min", 2048, 32, True, mooncake_trace("synthetic", minutes=1)),
    ]
    return [PeerWorkload(name, engine(*spec), requests) for name, *spec, requests in specs]


def _shared(
    request_id: str, prompt_len: int, arrival_step: int, hashes: tuple[int, ...], outputs: int = 1
) -> Request:
    """A request whose prompt is the 8-token blocks ``hashes`` name."""
    return Request(
        request_id, prompt_len, outputs, arrival_step, prefix_hashes=hashes, tokens_per_hash=8
    )


def _prefix_caching_workloads() -> list[PeerWorkload]:
    """vLLM's prefix cache on: small cases of 4-token blocks, each named for what it shows, then
    notebook 04's mixed traffic (no prompt shares a block: only a preempted request hits) and the
    Mooncake conversation slices (every prompt shares its first 512-token block, follow-up
    turns their history), on the trace engines' pools from roomy to small."""
    toy = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=4)

    def tiny(blocks: int, **changes) -> VllmEngineArgs:
        return VllmEngineArgs(
            toy,
            blocks,
            (blocks - 1) * 4,
            max_num_seqs=4,
            max_num_batched_tokens=64,
            async_scheduling=False,
        ).replace(**changes)

    repeats = [  # exactly 4 blocks: a repeat hits 3; a longer prompt hits all 4
        _shared("a", 16, 0, (1, 2)),
        _shared("repeat", 16, 4, (1, 2)),
        _shared("longer", 20, 4, (1, 2, 3)),
        _shared("repeat-at-once", 16, 4, (1, 2)),  # admitted in the same step as "repeat"
    ]
    free_hit = [  # a's 4 cached blocks are free, yet count as taken: "b" waits for "r"
        _shared("a", 16, 0, (1, 2)),
        Request("r", 8, 8, 1),
        _shared("b", 24, 2, (1, 2, 3)),
    ]
    eviction = [  # "z" evicts x's blocks, the deepest first, and none of y's
        _shared("x", 16, 0, (1, 2)),
        _shared("y", 16, 1, (3, 4)),
        Request("z", 22, 1, 2),
        _shared("y-probe", 17, 3, (3, 4, 5)),
        _shared("x-probe", 17, 3, (1, 2, 5)),
    ]
    chunked_twice = [  # "b" hits what "a" has so far and computes copies of a's next blocks
        _shared("a", 40, 0, (1, 2, 3, 4, 5)),
        _shared("b", 40, 1, (1, 2, 3, 4, 5)),
        Request("c", 30, 12, 1),
        _shared("d", 40, 12, (1, 2, 3, 4, 5)),
    ]
    finish_order = [  # "d" decodes its last token before "p" runs its one: d's go first
        _shared("d", 8, 0, (1,), outputs=4),
        _shared("p", 8, 3, (2,)),
        Request("z", 16, 1, 4),
        _shared("p-probe", 9, 5, (2, 9)),
        _shared("d-probe", 9, 5, (1, 9)),
    ]
    conversation = mooncake_trace("conversation", minutes=3)
    return [
        PeerWorkload("tiny/prefix-caching/repeats", tiny(16), repeats, 1_000),
        PeerWorkload("tiny/prefix-caching/free-hit-counts", tiny(8), free_hit, 1_000),
        PeerWorkload("tiny/prefix-caching/eviction-order", tiny(12), eviction, 1_000),
        PeerWorkload(
            "tiny/prefix-caching/preempted-returns",
            tiny(9, scheduler_reserve_full_isl=False),
            [Request("a", 8, 20), Request("b", 8, 12)],
            1_000,
        ),
        PeerWorkload(
            "tiny/prefix-caching/computed-twice",
            tiny(24, max_num_batched_tokens=16),
            chunked_twice,
            1_000,
        ),
        PeerWorkload("tiny/prefix-caching/finish-order", tiny(7), finish_order, 1_000),
        PeerWorkload(
            "nb04/mixed-rate-0.1/prefix-caching",
            NOTEBOOK_04.replace(enable_prefix_caching=True),
            _mixed(0.1),
            100_000,
        ),
        *(
            PeerWorkload(
                f"mooncake-conversation-3min/{name}prefix-caching",
                _vllm_trace_engine(blocks, 32, chunked).replace(enable_prefix_caching=True),
                conversation,
            )
            for name, blocks, chunked in [
                ("", 2048, True),
                ("no-chunking/", 2048, False),
                ("shrunk/", 1024, True),
                ("small/", 512, True),
            ]
        ),
    ]


#: The workloads that run again with vLLM's AsyncScheduler, each as its name + "/async":
#: caching off and on, small ones whose step rows are compared, and Mooncake slices.
ASYNC_AGAIN = (
    "front-door",
    "tiny/one-token-recompute-chunk",
    "shrunk/head-of-line/chunked",
    "shrunk/self-preemption/ends-running",
    "nb04/mixed-rate-0.1",
    "nb04/mixed-rate-0.05/chunked",
    "mooncake-conversation-3min/shrunk",
    "tiny/prefix-caching/repeats",
    "tiny/prefix-caching/free-hit-counts",
    "tiny/prefix-caching/eviction-order",
    "tiny/prefix-caching/preempted-returns",
    "tiny/prefix-caching/computed-twice",
    "tiny/prefix-caching/finish-order",
    "nb04/mixed-rate-0.1/prefix-caching",
    "mooncake-conversation-3min/prefix-caching",
    "mooncake-conversation-3min/no-chunking/prefix-caching",
    "mooncake-conversation-3min/shrunk/prefix-caching",
    "mooncake-conversation-3min/small/prefix-caching",
)


def _async_workloads(workloads: list[PeerWorkload]) -> list[PeerWorkload]:
    """vLLM's AsyncScheduler on: :data:`ASYNC_AGAIN`, then three small cases of 4-token blocks
    named for what they show (the last batch is processed after the next is scheduled)."""
    toy = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=4)
    small = VllmEngineArgs(
        toy, 16, 60, max_num_seqs=1, max_num_batched_tokens=64, enable_prefix_caching=False
    )
    again = [
        PeerWorkload(
            f"{w.name}/async", w.args.replace(async_scheduling=True), w.requests, w.max_steps
        )
        for w in workloads
        if w.name in ASYNC_AGAIN
    ]
    return [
        *again,
        PeerWorkload(  # a's slot is still held at schedule(2): b starts at step 3
            "tiny/slot-held-one-batch-longer/async",
            small.replace(async_scheduling=True),
            [Request("a", 8, 2), Request("b", 8, 2)],
            1_000,
        ),
        PeerWorkload(  # the run stops with a's last token in flight: a is still running
            "tiny/stops-as-the-last-token-samples/async",
            small.replace(async_scheduling=True),
            [Request("a", 8, 2), Request("b", 8, 2)],
            2,
        ),
        PeerWorkload(  # a needs a block at step 4 while b's last token is in flight
            "tiny/preempted-as-it-finishes/async",
            small.replace(
                num_gpu_blocks=5, max_model_len=16, max_num_seqs=4, async_scheduling=True
            ),
            [Request("a", 5, 9), Request("b", 4, 4)],
            1_000,
        ),
    ]


def _vllm_trace_engine(num_gpu_blocks: int, max_num_seqs: int, chunked: bool) -> VllmEngineArgs:
    """The seed's geometry, ``max_model_len`` at vLLM's estimate, a token budget of 8,192 (of
    max_model_len without chunking)."""
    max_model_len = estimated_max_model_len(seed_geometry(), num_gpu_blocks)
    return VllmEngineArgs(
        seed_geometry(),
        num_gpu_blocks,
        max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=8192 if chunked else max(8192, max_model_len),
        enable_chunked_prefill=chunked,
        **CACHING_AND_ASYNC_OFF,
    )


def _sglang_trace_engine(pages: int, max_running_requests: int, chunked: bool) -> SglangServerArgs:
    """The same pool in one-token pages, a context length of the pool's, SGLang's default
    chunk (none without chunking) and prefill budget, the radix cache and overlap loop off."""
    return SglangServerArgs(
        seed_geometry(tokens_per_block=1),
        32 * pages,
        32 * pages,
        max_running_requests=max_running_requests,
        chunked_prefill_size=DEFAULT_CHUNKED_PREFILL_SIZE if chunked else -1,
        **BOTH_OFF,
    )


def vllm_workloads() -> list[PeerWorkload]:
    """The workloads of docs/CONFORMANCE.md's vLLM table (module docstring)."""
    nb04_small = long_and_small()
    hog = not_yet_and_never(EngineConfig(max_seq_len=NOTEBOOK_04.max_model_len))
    chunked = NOTEBOOK_04.replace(**CHUNKED_512)
    shrunk_small = long_and_small(context=1800)
    self_preempting = SHRUNK.replace(**CHUNKED_512, scheduler_reserve_full_isl=False)
    front_door = [
        Request("no-output", 64, 0, 0),
        Request("prompt-at-max-model-len", 2016, 4, 0),
        Request("prompt-over-max-model-len", 2017, 4, 0),
        Request("stops-at-max-model-len", 1990, 100, 1),
        Request("fits", 100, 10, 2),
    ]
    tiny = VllmEngineArgs(
        KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=4),
        9,
        32,
        max_num_seqs=4,
        max_num_batched_tokens=14,
        **CACHING_AND_ASYNC_OFF,
    )
    workloads = [
        PeerWorkload("nb04/long-and-small", NOTEBOOK_04, nb04_small, 20_000),
        PeerWorkload("nb04/long-and-small/chunked", chunked, nb04_small, 20_000),
        PeerWorkload("nb04/not-yet-and-never", NOTEBOOK_04, hog, 20_000),
        PeerWorkload("front-door", NOTEBOOK_04, front_door, 1_000),
        PeerWorkload("startup-refused", NOTEBOOK_04.replace(max_model_len=2048), nb04_small, 1_000),
        PeerWorkload("shrunk/head-of-line", SHRUNK, shrunk_small, 3_000),
        PeerWorkload(
            "shrunk/head-of-line/chunked", SHRUNK.replace(**CHUNKED_512), shrunk_small, 3_000
        ),
        PeerWorkload("shrunk/self-preemption", self_preempting, shrunk_small, 300),
        PeerWorkload("shrunk/self-preemption/ends-running", self_preempting, shrunk_small, 301),
        PeerWorkload(
            "tiny/one-token-recompute-chunk",
            tiny,
            [Request("a", 14, 10), Request("b", 14, 10)],
            1_000,
        ),
        *_mixed_workloads(NOTEBOOK_04, chunked),
        PeerWorkload(
            "nb04/mixed-rate-0.05/watermark",
            NOTEBOOK_04.replace(watermark=0.1),
            _mixed(0.05),
            100_000,
        ),
        *_trace_workloads(_vllm_trace_engine),
        *_prefix_caching_workloads(),
    ]
    return [*workloads, *_async_workloads(workloads)]


#: SGLang's radix cache and overlap scheduler off (``--disable-radix-cache
#: --disable-overlap-schedule``), as the SGLang workloads run unless their names say otherwise
#: (``/radix``: the cache on, ``/overlap``: the overlap loop on).
BOTH_OFF = dict(disable_radix_cache=True, disable_overlap_schedule=True)
#: Notebook 04's engine as SGLang: the same 2,048 tokens (4 MiB of the seed's geometry, one
#: token a page), context length 8,192, 4 running requests, no chunking (compare.sglang_args),
#: the radix cache and the overlap scheduler off.
SGLANG_NOTEBOOK_04 = sglang_args(EngineConfig()).replace(**BOTH_OFF)


def _mooncake_slice(
    trace: str, start_minute: int, minutes: int, seconds_per_iteration: float = 0.05
) -> list[Request]:
    """Mooncake's ``trace`` from ``start_minute`` for ``minutes``, the slice's start at step 0."""
    start = int(start_minute * 60 / seconds_per_iteration)
    requests = mooncake_trace(trace, seconds_per_iteration, minutes=start_minute + minutes)
    return [
        dataclasses.replace(r, arrival_step=r.arrival_step - start)
        for r in requests
        if r.arrival_step >= start
    ]


def _radix_workloads(small: SglangServerArgs, chunked: SglangServerArgs) -> list[PeerWorkload]:
    """The radix cache on (``disable_radix_cache`` False): Mooncake's conversations, whose
    prompts share 512-token blocks (``Request.prefix_hashes``, kvlab.core.prompt_tokens), other
    traffic that shares nothing, and small workloads of one behaviour each on ``small``."""
    on = dict(disable_radix_cache=False)
    conversation = mooncake_trace("conversation", minutes=3)
    specs = [
        ("mooncake-conversation-3min/radix", 2048, 32, True, conversation),
        ("mooncake-conversation-3min/shrunk/radix", 1024, 32, True, conversation),
        ("mooncake-conversation-3min/no-chunking/radix", 2048, 32, False, conversation),
        (
            "mooncake-conversation-minute-30/radix",
            2048,
            32,
            True,
            _mooncake_slice("conversation", 30, 2),
        ),
        ("mooncake-synthetic-1min/radix", 2048, 32, True, mooncake_trace("synthetic", minutes=1)),
        ("azure-code-10min/radix", 256, 16, True, azure_trace("code", minutes=10)),
    ]
    traces = [
        PeerWorkload(name, _sglang_trace_engine(pages, running, chunked).replace(**on), requests)
        for name, pages, running, chunked, requests in specs
    ]
    mixed = _mixed(0.05)

    def shared(request_id, prompt_len, max_new_tokens, arrival, hashes=(1, 2)):
        return Request(
            request_id,
            prompt_len,
            max_new_tokens,
            arrival,
            prefix_hashes=hashes,
            tokens_per_hash=16,
        )

    tiny = small.replace(**on)
    # twelve prompts from three families of prefixes, the pool too small to keep them all
    families = [(1, 2, 3), (4, 5, 6), (7, 8)]
    evicting = [
        shared(f"e{i}", 40 + 7 * (i % 3), 30 + 11 * (i % 4), 6 * i, families[i % 3])
        for i in range(12)
    ]
    # 29 one-token outputs make the 33rd prefill pass the second that touches the waiting
    # requests' paths: w's prefix, behind x that does not fit, is kept from eviction so
    touching = [Request(f"f{i}", 4, 1, i) for i in range(29)] + [
        shared("a", 48, 1, 29, (1, 2, 3)),
        shared("b", 48, 1, 30, (4, 5, 6)),
        Request("r", 20, 200, 31),
        Request("x", 100, 150, 32),
        shared("w", 56, 2, 32, (1, 2, 3)),
    ]
    return [
        *traces,
        PeerWorkload("nb04/mixed-rate-0.05/radix", SGLANG_NOTEBOOK_04.replace(**on), mixed),
        PeerWorkload("nb04/mixed-rate-0.05/chunked/radix", chunked.replace(**on), mixed),
        PeerWorkload(
            "tiny/radix/two-share-a-prefix",
            tiny.replace(max_total_tokens=2000),
            [shared("a", 40, 4, 0), shared("b", 50, 4, 10), shared("c", 32, 2, 20)],
            1_000,
        ),
        PeerWorkload(
            "tiny/radix/a-prompt-enters-at-its-prefill",
            tiny.replace(max_total_tokens=2000),
            [shared("a", 40, 50, 0), shared("b", 40, 2, 1)],
            1_000,
        ),
        PeerWorkload(
            "tiny/radix/retraction-returns-to-cached-prefix",
            tiny,
            [shared(f"r{i}", 20, 400, i, hashes=(1,)) for i in range(8)],
            5_000,
        ),
        PeerWorkload(
            "tiny/radix/eviction-under-a-full-pool",
            tiny.replace(max_total_tokens=200),
            evicting,
            5_000,
        ),
        PeerWorkload(
            "tiny/radix/every-32nd-pass-touches-the-waiting",
            tiny.replace(max_total_tokens=300),
            touching,
            2_000,
        ),
        PeerWorkload(
            "tiny/radix/ignore-eos",
            tiny.replace(max_total_tokens=1100, ignore_eos=True),
            [Request("a", 100, 100), Request("b", 100, 900)],
            5_000,
        ),
    ]


#: The SGLang workloads that run again with the overlap loop on, each as its name + "/overlap":
#: the radix cache off and on, small ones whose step rows are compared (retractions among
#: them), notebook 04's mixed traffic and Mooncake slices whose prompts share prefixes.
OVERLAP_AGAIN = (
    "nb04/long-and-small",
    "front-door",
    "tiny/retractions",
    "tiny/retractions/ends-running",
    "tiny/ignore-eos-stall",
    "nb04/mixed-rate-0.05",
    "mooncake-conversation-3min/shrunk",
    "mooncake-conversation-3min/radix",
    "mooncake-conversation-3min/shrunk/radix",
    "mooncake-conversation-minute-30/radix",
    "nb04/mixed-rate-0.05/radix",
    "tiny/radix/two-share-a-prefix",
    "tiny/radix/a-prompt-enters-at-its-prefill",
    "tiny/radix/retraction-returns-to-cached-prefix",
    "tiny/radix/eviction-under-a-full-pool",
    "tiny/radix/every-32nd-pass-touches-the-waiting",
    "tiny/radix/ignore-eos",
)


def _overlap_workloads(workloads: list[PeerWorkload], tiny: SglangServerArgs) -> list[PeerWorkload]:
    """SGLang's overlap loop on (``disable_overlap_schedule`` False): :data:`OVERLAP_AGAIN`,
    then small cases named for what they show (a batch's results are processed after the next
    batch is scheduled)."""
    on = dict(disable_overlap_schedule=False)
    again = [
        PeerWorkload(f"{w.name}/overlap", w.args.replace(**on), w.requests, w.max_steps)
        for w in workloads
        if w.name in OVERLAP_AGAIN
    ]
    one = tiny.replace(max_running_requests=1, **on)
    aborted = [Request("fits", 100, 6, 0), Request("big", 2042, 4, 1)]  # big: a one-token abort
    return [
        *again,
        PeerWorkload(  # a's slot is still held when step 2 is scheduled: b starts at step 3
            "tiny/slot-held-one-batch-longer/overlap",
            one,
            [Request("a", 8, 2), Request("b", 8, 2)],
            1_000,
        ),
        PeerWorkload(  # the same with the radix cache: b's prompt hits a's, entered a step late
            "tiny/radix/slot-held-one-batch-longer/overlap",
            one.replace(disable_radix_cache=False),
            [
                Request("a", 40, 2, prefix_hashes=(1, 2), tokens_per_hash=16),
                Request("b", 40, 2, 1, prefix_hashes=(1, 2), tokens_per_hash=16),
            ],
            1_000,
        ),
        *(
            PeerWorkload(  # big joins the running batch before its result: it decodes at step 2
                f"tiny/{cache}abort-decodes-once/overlap",
                SGLANG_NOTEBOOK_04.replace(disable_radix_cache=not cache, **on),
                aborted,
                1_000,
            )
            for cache in ("", "radix/")
        ),
    ]


def sglang_workloads() -> list[PeerWorkload]:
    """The workloads of docs/CONFORMANCE.md's SGLang table: vLLM's kinds on SGLang's engines,
    the requests' ``ignore_eos`` off (SGLang guesses each output with its decaying new-token
    ratio and retracts when the guess falls short) but for one mixed run; then the same kinds
    and shared-prefix ones with the radix cache on; then some of both with the overlap loop on.
    The first ones keep both switches off (:data:`BOTH_OFF`); SGLang, and SglangServerArgs,
    default both on."""
    small = long_and_small()
    chunked = SGLANG_NOTEBOOK_04.replace(chunked_prefill_size=512, max_prefill_tokens=512)
    front_door = [
        Request("prompt-at-context-length", 8192, 4, 0),
        Request("prompt-plus-output-over-context-length", 8000, 400, 0),
        Request("prompt-over-the-pool", 2042, 4, 1),
        Request("output-clipped-to-the-pool", 1000, 2000, 2),
        Request("fits", 100, 10, 3),
    ]
    tiny = SglangServerArgs(
        KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=1),
        600,
        4096,
        max_running_requests=8,
        chunked_prefill_size=128,
        max_prefill_tokens=128,
        **BOTH_OFF,
    )
    retracted = [Request(f"r{i}", 20, 400, i) for i in range(8)]
    stalled = [Request("a", 300, 900, 0), Request("b", 300, 900, 0)]
    refusing = SGLANG_NOTEBOOK_04.replace(max_total_tokens=1)
    workloads = [
        PeerWorkload("nb04/long-and-small", SGLANG_NOTEBOOK_04, small, 20_000),
        PeerWorkload("nb04/long-and-small/chunked", chunked, small, 20_000),
        PeerWorkload("nb04/not-yet-and-never", SGLANG_NOTEBOOK_04, not_yet_and_never(), 20_000),
        PeerWorkload("front-door", SGLANG_NOTEBOOK_04, front_door, 5_000),
        PeerWorkload("startup-refused", refusing, small, 1_000),
        PeerWorkload("tiny/retractions", tiny, retracted, 5_000),
        PeerWorkload("tiny/retractions/ends-running", tiny, retracted, 2_100),  # one admitted again
        PeerWorkload(
            "tiny/ignore-eos-stall",
            tiny.replace(max_total_tokens=1000, ignore_eos=True),
            stalled,
            500,
        ),
        *_mixed_workloads(SGLANG_NOTEBOOK_04, chunked),
        PeerWorkload(
            "nb04/mixed-rate-0.05/ignore-eos",
            SGLANG_NOTEBOOK_04.replace(ignore_eos=True),
            _mixed(0.05),
            100_000,
        ),
        *_trace_workloads(_sglang_trace_engine),
        *_radix_workloads(tiny, chunked),
    ]
    return [*workloads, *_overlap_workloads(workloads, tiny)]


def by_name(workloads: list[PeerWorkload]) -> dict[str, PeerWorkload]:
    """``workloads`` keyed by their names."""
    workloads = check_items("workloads", workloads, "PeerWorkloads")
    return {
        check_instance(f"workloads[{i}]", workload, PeerWorkload).name: workload
        for i, workload in enumerate(workloads)
    }
