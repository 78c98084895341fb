"""Fast-forward (kvlab.run.fast_forward) gives the results stepping gives.

Each run here is made twice, stepped pass by pass on the teaching path and fast-forwarded (its
stretches, its phase 1 kept from pass to pass, its step within a page and its certain
refusal), and everything observable must agree: the engine's error, every request's status,
steps and counters, the trace of events and steps, the pool's counters (but failed
allocations) and the page-index table. Random workloads vary the pool, the page size,
chunking, the token budget, the host tier, block reuse and shared prefixes, beams and draft
tokens, recompute pause, every admission policy, the executor's limit and max_steps; for the
vLLM and SGLang peers, their switches (prefix caching or the radix cache, async or overlap
scheduling) and limits.
"""

import dataclasses
import random
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import (
    KVCacheManager,
    KVGeometry,
    Request,
    Scheduler,
    SglangScheduler,
    SglangServerArgs,
    VllmEngineArgs,
    VllmScheduler,
    simulate,
)
from kvlab.core.prefix_cache import chain_hashes
from kvlab.run import fast_forward
from kvlab.sched.admission import ADMISSION_POLICIES


def _observed(result, manager):
    """The run's outcome, and what it left in the manager."""
    return (
        dataclasses.replace(manager.pool.counters, failed_allocations=0),  # stepped passes only
        manager.page_index.table.tolist(),
        result.iterations,
        result.end_step,
        result.outcome(),
    )


def _pages_of_16(pages: int, max_batch_size: int) -> KVCacheManager:
    """A pool of ``pages`` pages of 16 tokens (stored at a few bytes each), max_seq_len 1,024."""
    geometry = KVGeometry(1, 1, 4, tokens_per_block=16)
    return KVCacheManager(
        geometry,
        quota_bytes=pages * geometry.bytes_per_block,
        max_seq_len=1024,
        max_batch_size=max_batch_size,
    )


def _boundary_run(prompt: int, drafts: int, chunked: bool, max_num_tokens: int, fast: bool):
    """A hog holds 40 of 64 pages (16 tokens each) for 30 steps; a second request arrives at
    step 1 with a prompt near the 24 free pages' 384 tokens, where one token, a draft token or
    the rounding of a chunk decides whether its first chunk is refused."""
    manager = _pages_of_16(64, max_batch_size=4)
    scheduler = Scheduler(
        manager,
        admission="none",
        max_num_tokens=max_num_tokens,
        max_batch_size=4,
        chunked_prefill=chunked,
        chunk_unit_size=16,
    )
    requests = [
        Request("hog", 40 * 16 - 30, 30, 0),
        Request("edge", prompt, 4, 1, num_draft_tokens=drafts),
    ]
    return _observed(simulate(scheduler, requests, max_steps=2000, fast_forward=fast), manager)


def _random_run(seed: int, fast: bool):
    rng = random.Random(seed)
    tpb = rng.choice([4, 16, 32])
    geometry = KVGeometry(1, 1, 4, tokens_per_block=tpb)
    shared = rng.choice([0, 0, 3])  # requests share one of ``shared`` prompt prefixes

    def request(i: int) -> Request:
        prompt = rng.randint(1, tpb * 12)
        hashes = ()
        if shared:
            tokens = [rng.randrange(shared)] * prompt + list(range(rng.randrange(prompt)))
            hashes = chain_hashes(tokens[:prompt], tpb)
        return Request(
            f"r{i}",
            prompt,
            rng.randint(0, 40),
            rng.randint(0, 30),
            num_draft_tokens=rng.choice([0, 0, 0, 2]),
            beam_width=rng.choice([1, 1, 1, 2]),
            prefix_hashes=hashes,
            tokens_per_hash=tpb,
        )

    requests = [request(i) for i in range(rng.randint(5, 50))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager = KVCacheManager(
            geometry,
            quota_bytes=rng.randint(8, 200) * geometry.bytes_per_block,
            max_seq_len=tpb * 16,
            max_batch_size=rng.choice([2, 4, 8]),
            host_cache_size=rng.choice([None, 0, 1 << 15]),
            enable_block_reuse=rng.choice([True, False]),
            enable_partial_reuse=rng.choice([True, False]),
        )
    try:
        scheduler = Scheduler(
            manager,
            admission=rng.choice(sorted(ADMISSION_POLICIES)),
            max_num_tokens=rng.choice([None, 64, 256, 1024]),
            max_batch_size=rng.choice([2, 4, 8]),
            chunked_prefill=rng.choice([True, False]),
            stall_limit=50,
            enable_recompute_pause=rng.choice([True, True, False]),
            enable_prefix_aware_scheduling=rng.choice([True, False]),
        )
    except ValueError as exc:  # a chunk that never fits the budget
        return str(exc)
    result = simulate(
        scheduler,
        requests,
        max_steps=rng.choice([3000, rng.randint(1, 200)]),
        max_num_active_requests=rng.choice([None, rng.randint(1, 8)]),
        fast_forward=fast,
    )
    return _observed(result, manager)


@pytest.mark.parametrize("seed", range(600))
def test_fast_forward_gives_what_stepping_gives(seed):
    assert _random_run(seed, fast=True) == _random_run(seed, fast=False)


def _peer_workload(rng: random.Random, tokens_per_hash: int) -> list[Request]:
    """Prompts that share a few prefixes, cut at random lengths (so caches hit, and a running
    request's first output can complete a block the head's prompt holds: a block's tokens count
    up past its key, and the output is one of them), arrivals in bursts and gaps, outputs long
    enough for stretches."""
    shared = rng.choice([0, 1, 2, 4])
    requests = []
    step = 0
    for i in range(rng.randint(4, 40)):
        step += rng.choice([0, 0, 1, rng.randint(2, 30)])
        prompt = rng.randint(1, tokens_per_hash * rng.choice([1, 4]))
        hashes: tuple[int, ...] = ()
        if shared:
            key = rng.randrange(shared)  # one of ``shared`` prompts, cut at random lengths
            hashes = tuple(key * 100 + j for j in range(-(-prompt // tokens_per_hash)))
        requests.append(
            Request(
                f"r{i}",
                prompt,
                rng.randint(1, 60),
                step,
                prefix_hashes=hashes,
                tokens_per_hash=tokens_per_hash,
            )
        )
    return requests


def _random_peer_run(peer: str, seed: int, fast: bool):
    rng = random.Random(seed)
    if peer == "vllm":
        tpb = rng.choice([1, 4, 4, 16])
        blocks = rng.randint(12, 160)
        geometry = KVGeometry(1, 1, 4, tokens_per_block=tpb)
        args = VllmEngineArgs(
            geometry,
            blocks,
            (blocks - 1) * tpb,
            max_num_seqs=rng.choice([2, 4, 16]),
            max_num_batched_tokens=rng.choice([16, 64, 512]),
            enable_prefix_caching=rng.choice([True, False]),
            async_scheduling=rng.choice([True, True, False]),
            watermark=rng.choice([0.0, 0.0, 0.05]),
            scheduler_reserve_full_isl=rng.choice([True, True, False]),
        )
        scheduler = VllmScheduler(args)
    else:
        tokens = rng.randint(64, 2000)
        args = SglangServerArgs(
            KVGeometry(1, 1, 4, tokens_per_block=1),
            tokens,
            rng.choice([tokens, 4096]),
            max_running_requests=rng.choice([2, 4, 16]),
            chunked_prefill_size=rng.choice([-1, 64, 256]),
            max_prefill_tokens=rng.choice([256, 1024, 16384]),
            disable_radix_cache=rng.choice([True, False]),
            disable_overlap_schedule=rng.choice([True, False, False]),
            ignore_eos=rng.choice([True, False]),
        )
        try:
            scheduler = SglangScheduler(args)
        except ValueError as exc:  # SGLang refuses to start
            return str(exc)
    requests = _peer_workload(rng, rng.choice([16, 32]))
    result = simulate(
        scheduler, requests, max_steps=rng.choice([5000, rng.randint(1, 300)]), fast_forward=fast
    )
    return _observed(result, scheduler.manager)


@pytest.mark.parametrize("seed", range(300))
@pytest.mark.parametrize("peer", ["vllm", "sglang"])
def test_fast_forward_gives_what_stepping_gives_for_the_peers(peer, seed):
    assert _random_peer_run(peer, seed, fast=True) == _random_peer_run(peer, seed, fast=False)


@settings(max_examples=150, deadline=None)
@given(
    prompt=st.integers(378, 390) | st.integers(391, 420),
    drafts=st.integers(0, 3),
    chunked=st.booleans(),
    max_num_tokens=st.integers(384, 408) | st.sampled_from([400, 1024]),
)
def test_fast_forward_gives_what_stepping_gives_at_the_edge(
    prompt, drafts, chunked, max_num_tokens
):
    args = (prompt, drafts, chunked, max_num_tokens)
    assert _boundary_run(*args, fast=True) == _boundary_run(*args, fast=False)


def test_stretches_are_skipped(monkeypatch):
    """Not vacuous: on a workload with a pending pile most passes are skipped, refusals
    included; ``FastForward.skipped`` counts the passes applied in stretches and no other."""
    stepped = []
    iterate = fast_forward.FastForward.advance

    def counting(self, max_steps):
        before, skipped = self.engine.iterations, self.skipped
        iterate(self, max_steps)
        stepped.append((self.engine.iterations - before, self.skipped - skipped))

    monkeypatch.setattr(fast_forward.FastForward, "advance", counting)
    manager = _pages_of_16(64, max_batch_size=16)
    scheduler = Scheduler(manager, admission="capacity", max_batch_size=16, chunked_prefill=True)
    requests = [Request(f"r{i}", 300, 40, 0) for i in range(16)]
    result = simulate(scheduler, requests, max_steps=10_000)
    assert result.summary()["finished"] == 16
    assert sum(r.num_refusals for r in result.requests.values()) > 0
    passes = [count for count, _ in stepped]
    assert max(passes) > 1 and sum(passes) > 2 * len(passes)
    assert all(skipped in (0, count) and count >= 1 for count, skipped in stepped)
    assert 2 * sum(skipped for _, skipped in stepped) > result.iterations


def test_phase_one_is_kept_from_pass_to_pass(monkeypatch):
    """Not vacuous: what phase 1 found outlives the finishes, the arrivals, the contexts that
    finish and the stretches of a steady stream; it is found anew only at the first pass and
    where a decoder stops running (here: never), and the run is the stepped one."""
    found = []

    class Counted(fast_forward._Head):
        def __init__(self) -> None:
            super().__init__()
            found.append(self)

    def run(fast: bool):
        manager = _pages_of_16(512, max_batch_size=16)
        scheduler = Scheduler(manager, admission="capacity", max_batch_size=16)
        rng = random.Random(7)
        requests = [
            Request(f"r{i}", rng.randint(20, 200), rng.randint(5, 60), 3 * i) for i in range(150)
        ]
        result = simulate(scheduler, requests, fast_forward=fast)
        return result.summary()["finished"], _observed(result, manager)

    monkeypatch.setattr(fast_forward, "_Head", Counted)
    fast = run(True)
    assert fast == run(False)
    assert fast[0] == 150
    assert len(found) == 1


def test_a_pass_whose_crossings_outnumber_the_free_pages_is_stepped(monkeypatch):
    """Three decoders cross into a fifth page in the same pass with two pages free: the stretch
    takes none of that pass's crossings and ends before it (taking two would grow the wrong
    caches), the pass is stepped (one decoder is paused), and the run is the stepped one."""
    cuts = []
    plan = fast_forward._TrtllmStretch.plan

    def recorded(self, limit):
        free = self.scheduler._room_for_growth()
        passes = plan(self, limit)
        cuts.append(passes < limit and free > len(self._crossings))  # pages were left
        return passes

    def run(fast: bool):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # max_seq_len is clamped to the 14 pages
            manager = _pages_of_16(14, max_batch_size=4)
        scheduler = Scheduler(manager, admission="none", max_batch_size=4)
        requests = [Request(f"r{i}", 60, 40, 0) for i in range(3)]  # 4 pages each, 2 free
        result = simulate(scheduler, requests, max_steps=2000, fast_forward=fast)
        return result.summary()["suspensions"], _observed(result, manager)

    monkeypatch.setattr(fast_forward._TrtllmStretch, "plan", recorded)
    fast = run(True)
    assert fast == run(False)
    assert fast[0] == 1 and cuts[0]


def test_the_scheduler_is_a_plain_scheduler_again_after_the_run():
    manager = _pages_of_16(64, max_batch_size=4)
    scheduler = Scheduler(manager, max_batch_size=4)
    result = simulate(scheduler, [Request("a", 100, 40)], max_steps=1000)
    assert result.status == {"a": "finished"} and type(scheduler) is Scheduler


def test_the_outcome_compared_sees_one_refusal_more():
    """Not vacuous: the outcome both paths are held to changes with one request's counter."""

    def run():
        manager = _pages_of_16(64, max_batch_size=4)
        return simulate(Scheduler(manager, max_batch_size=4), [Request("a", 100, 8)])

    first, second = run(), run()
    assert first.outcome() == second.outcome()
    second.requests["a"].num_refusals += 1
    assert first.outcome() != second.outcome()
