"""The scheduler's fast paths decide exactly as its full paths do.

Two shortcuts keep a pass cheap (kvlab.sched.shortcuts): a generation step that grows within
the pages its cache holds and a pending first chunk that is certainly refused. Each run here is
made twice, once as shipped and once with their one switch off so that every request takes the
full path, and everything observable must agree: the engine's error, every request's status,
steps and counters, and the trace of events and steps. (A shortcut that passes a request on to
the full path where it need not only costs time and cannot fail here; one that decides
otherwise than the full path does.)
"""

import random
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import KVCacheManager, KVGeometry, Request, Scheduler, simulate
from kvlab.sched import scheduler as scheduler_module
from kvlab.sched import shortcuts
from kvlab.sched.admission import ADMISSION_POLICIES
from kvlab.sched.shortcuts import CertainRefusal


def _observed(result):
    return (
        type(result.error).__name__ if result.error else None,
        result.status,
        {
            i: (
                r.end_step,
                r.first_scheduled_step,
                r.first_token_step,
                r.num_generated,
                r.num_suspensions,
                r.num_recomputes,
                r.num_refusals,
                r.reason,
            )
            for i, r in result.requests.items()
        },
        [(e.step, e.kind, e.request_id, e.reason) for e in result.trace.events],
        result.trace.steps,
    )


def _boundary_run(prompt: int, drafts: int, chunked: bool, max_num_tokens: int):
    """A hog holds 40 of 64 pages (16 tokens each) for 30 steps; a second request arrives at
    step 1 with a prompt near the 24 free pages' 384 tokens, where one token, a draft token or
    the rounding of a chunk decides whether its first chunk is refused."""
    geometry = KVGeometry(1, 1, 4, tokens_per_block=16)
    manager = KVCacheManager(
        geometry, quota_bytes=64 * geometry.bytes_per_block, max_seq_len=1024, max_batch_size=4
    )
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
    return _observed(simulate(scheduler, requests, max_steps=2000))


def _random_run(seed: int):
    rng = random.Random(seed)
    tpb = rng.choice([4, 16, 32])
    geometry = KVGeometry(1, 1, 4, tokens_per_block=tpb)
    requests = [
        Request(
            f"r{i}",
            rng.randint(1, tpb * 12),
            rng.randint(0, 40),
            rng.randint(0, 30),
            num_draft_tokens=rng.choice([0, 0, 0, 2]),
            beam_width=rng.choice([1, 1, 1, 2]),
        )
        for i in range(rng.randint(5, 50))
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager = KVCacheManager(
            geometry,
            quota_bytes=rng.randint(8, 200) * geometry.bytes_per_block,
            max_seq_len=tpb * 16,
            max_batch_size=rng.choice([2, 4, 8]),
            host_cache_size=rng.choice([None, 0, 1 << 15]),
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
        )
    except ValueError as exc:  # vLLM's start-up check refuses a pool this small
        return str(exc)
    return _observed(simulate(scheduler, requests, max_steps=3000))


def _switch_off_the_shortcuts(patch):
    """Every step and every pending chunk takes the full path."""
    patch.setattr(shortcuts, "ENABLED", False)


@pytest.mark.parametrize("seed", range(400))
def test_fast_paths_decide_as_the_full_paths(seed, monkeypatch):
    fast = _random_run(seed)
    _switch_off_the_shortcuts(monkeypatch)
    assert _random_run(seed) == fast


@settings(max_examples=150, deadline=None)
@given(
    prompt=st.integers(378, 390) | st.integers(391, 420),
    drafts=st.integers(0, 3),
    chunked=st.booleans(),
    max_num_tokens=st.integers(384, 408) | st.sampled_from([400, 1024]),
)
def test_fast_paths_decide_as_the_full_paths_at_the_edge(prompt, drafts, chunked, max_num_tokens):
    fast = _boundary_run(prompt, drafts, chunked, max_num_tokens)
    with pytest.MonkeyPatch.context() as patch:
        _switch_off_the_shortcuts(patch)
        assert _boundary_run(prompt, drafts, chunked, max_num_tokens) == fast


def test_the_shortcuts_are_taken(monkeypatch):
    """Not vacuous: on a workload with a pending pile both shortcuts fire."""
    calls = {"grow": 0, "refused": 0}
    grow, refuses = shortcuts.grows_within_pages, CertainRefusal.refuses_first_chunk

    def counting_grow(cache, num_tokens, tokens_per_block):
        answer = grow(cache, num_tokens, tokens_per_block)
        calls["grow"] += answer
        return answer

    def counting_refuses(bound, request):
        answer = refuses(bound, request)
        calls["refused"] += answer
        return answer

    monkeypatch.setattr(scheduler_module, "grows_within_pages", counting_grow)
    monkeypatch.setattr(CertainRefusal, "refuses_first_chunk", counting_refuses)
    geometry = KVGeometry(1, 1, 4, tokens_per_block=16)
    manager = KVCacheManager(
        geometry, quota_bytes=64 * geometry.bytes_per_block, max_seq_len=1024, max_batch_size=16
    )
    scheduler = Scheduler(manager, admission="capacity", max_batch_size=16, chunked_prefill=True)
    requests = [Request(f"r{i}", 300, 40, 0) for i in range(16)]
    result = simulate(scheduler, requests, max_steps=10_000)
    assert result.summary()["finished"] == 16
    assert calls["grow"] > 0 and calls["refused"] > 0
