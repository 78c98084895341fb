"""What prefix reuse could save on a trace, and replays with it on and off. Prompts with chained
block hashes (``Request.prefix_hashes``; Mooncake's traces) say what a never-evicting prefix cache
would hold: the ceiling any real reuse stays under. :func:`replay_with_reuse` replays a trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kvlab.analysis.compare import EngineConfig, run_policy
from kvlab.analysis.presets import check_names
from kvlab.core.checks import check_instance, check_items, check_mapping, check_param
from kvlab.core.geometry import KVGeometry
from kvlab.core.memory import MIB
from kvlab.core.prefix_cache import chain_hashes
from kvlab.core.request import Request
from kvlab.run.progress import progress
from kvlab.run.simulation import SimulationResult
from kvlab.sched.policies import TRTLLM_POLICIES


@dataclass(frozen=True)
class ReuseCeiling:
    """The prompts' blocks and tokens, and how many a never-evicting cache would hold when they
    arrive (less each prompt's last token, which ``prepare_context`` always computes)."""

    blocks: int
    cached: int
    tokens: int = 0
    cached_tokens: int = 0

    @property
    def hit_ratio(self) -> float:
        return self.cached / self.blocks if self.blocks else 0.0


def reuse_ceiling(requests: Iterable[Request]) -> ReuseCeiling:
    """The ceiling over ``requests`` in arrival order; their hashes must be prefix-chained."""
    seen, blocks, cached, tokens, cached_tokens = set(), 0, 0, 0, 0
    for request in check_items("requests", requests, "Requests"):
        hashes = check_instance("requests[...]", request, Request).prefix_hashes
        hits = next((i for i, h in enumerate(hashes) if h not in seen), len(hashes))
        if any(h in seen for h in hashes[hits:]):
            raise ValueError(
                f"prefix_hashes of request {request.request_id!r} are not prefix-"
                "chained: a cached block follows an uncached one"
            )
        blocks += len(hashes)
        cached += hits
        tokens += request.prompt_len
        cached_tokens += min(hits * request.tokens_per_hash, request.prompt_len - 1)
        seen.update(hashes)
    return ReuseCeiling(blocks, cached, tokens, cached_tokens)


#: Pages of 32 tokens eight 80 GB GPUs keep for Llama-3.1-70B's fp16 KV cache (327,680 B a
#: token) after its fp16 weights at ``free_gpu_memory_fraction`` 0.9.
MOONCAKE_POOL_PAGES = 42_800
_TINY = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=1, dtype="float16", tokens_per_block=32)
#: Mooncake's replay engine: that pool in a tiny geometry (4 B a token: scheduling reads the
#: page count only), Llama-3.1's max_seq_len, 128 sequences, 8,192-token chunks.
MOONCAKE_ENGINE = EngineConfig(
    pool_mib=MOONCAKE_POOL_PAGES * _TINY.bytes_per_block / MIB,
    max_seq_len=131_072,
    geometry=_TINY,
    max_batch_size=128,
    max_num_tokens=8192,
    chunked_prefill=True,
)
_SEED_ENGINE = EngineConfig()


def shared_prefix_story(
    engine: EngineConfig = _SEED_ENGINE, max_new_tokens: int = 16
) -> list[Request]:
    """ "Not yet" and "never" when prompts share a prefix (a pool of at least 16 pages, a hash a
    page): "first" (5/8 of the pool); "follow-up" repeats it plus 1/8, fitting only on first's
    cached pages; "too-long" adds more than the pool; "stranger" (5/8, unrelated) evicts them
    once both are done; "late" repeats follow-up's prompt and finds what survived."""
    check_instance("engine", engine, EngineConfig)
    max_new_tokens = check_param("max_new_tokens", max_new_tokens)
    tpb, blocks = engine.geometry.tokens_per_block, engine.total_blocks
    if blocks < 16:
        raise ValueError(f"the example needs a pool of at least 16 pages, got {blocks}")
    first = list(range(blocks * 5 // 8 * tpb))
    own = list(range(10**6, 10**6 + blocks // 8 * tpb))

    def request(request_id, tokens, max_new, arrival):
        return Request(
            request_id,
            len(tokens),
            max_new,
            arrival,
            prefix_hashes=chain_hashes(tokens, tpb),
            tokens_per_hash=tpb,
        )

    done = 8 * max_new_tokens + 8  # "first" and "follow-up" have finished by then
    return [
        request("first", first, 4 * max_new_tokens, 0),
        request("follow-up", first + own, max_new_tokens, 1),
        request(
            "too-long", first + list(range(2 * 10**6, 2 * 10**6 + blocks * tpb)), max_new_tokens, 2
        ),
        request(
            "stranger", list(range(3 * 10**6, 3 * 10**6 + len(first))), 4 * max_new_tokens, done
        ),
        request("late", first + own, max_new_tokens, done + 2),
    ]


def replay_with_reuse(
    requests: Sequence[Request],
    policies: Sequence[str] = TRTLLM_POLICIES,
    engine: EngineConfig = MOONCAKE_ENGINE,
    reuse: Sequence[bool] = (True, False),
    max_steps: int = 1_000_000,
) -> dict[tuple[str, bool], SimulationResult]:
    """Each of TensorRT-LLM's ``policies`` with block reuse on and off (``reuse``):
    {(policy, reuse): result}. The peers' caches have switches of their own
    (:func:`kvlab.analysis.shipped.shipped_runs` turns them)."""
    requests = check_items("requests", requests, "Requests")
    policies = check_names("policies", policies, TRTLLM_POLICIES, "TensorRT-LLM policy names")
    reuse = [
        check_instance(f"reuse[{i}]", on, bool)
        for i, on in enumerate(check_items("reuse", reuse, "bools"))
    ]
    check_instance("engine", engine, EngineConfig)
    runs = [(policy, on) for policy in policies for on in reuse]
    return {
        (policy, on): run_policy(
            policy, requests, dataclasses.replace(engine, enable_block_reuse=on), max_steps
        )
        for policy, on in progress(runs, desc="replays, reuse on and off", unit="run")
    }


def reuse_table(
    results: dict[tuple[str, bool], SimulationResult], ceiling: ReuseCeiling
) -> list[dict]:
    """One row a run: outcome counts, latencies in steps, and the prompt tokens a cached prefix
    served, as a share of all and of the ceiling's."""
    check_mapping("results", results, SimulationResult, "(policy, reuse) -> SimulationResult")
    check_instance("ceiling", ceiling, ReuseCeiling)
    rows = []
    for key, result in results.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise TypeError(
                f"results must be keyed by (policy, reuse) pairs (replay_with_reuse's), "
                f"got the key {key!r:.60}"
            )
        policy, on = key
        summary = result.summary()
        reused = summary["reused_tokens"]
        rows.append(
            dict(
                policy=policy,
                block_reuse=on,
                finished=summary["finished"],
                rejected=summary["rejected"],
                unfinished=summary["waiting"] + summary["running"],
                error=summary["error"],
                mean_ttft_steps=summary["mean_ttft_steps"],
                mean_latency_steps=summary["mean_latency_steps"],
                suspensions=summary["suspensions"],
                recomputes=summary["recomputes"],
                reused_tokens=reused,
                reused_share=reused / ceiling.tokens if ceiling.tokens else 0.0,
                of_ceiling=reused / ceiling.cached_tokens if ceiling.cached_tokens else 0.0,
            )
        )
    return rows
