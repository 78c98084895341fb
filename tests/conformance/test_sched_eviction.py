"""Eviction under MAX_UTILIZATION: victims from the tail, self-eviction, what is evictable.

Mirrors ``TestEviction`` of NVIDIA/TensorRT-LLM
tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py, read at commit
0046b12caeb6c565d87675ced31951b62b9abd25.

Upstream scripts ``try_allocate_generation``'s answers (fail, then succeed after an eviction);
here a generation request's step really needs one new page (:func:`generations`) and an
outside tenant holds every free page. A retry that must succeed after an eviction needs the
victim's pages really freed, which kvlab's suspension does only into a tier below the GPU: those
tests give the bench a host tier (``can_evict``).
"""

import contextlib
import inspect

import pytest
from support import Bench, ids

from kvlab import Scheduler
from kvlab.host_tier import HostTier

# -- local stopgap while support.Bench trails kvlab (delete once support.py is updated) ----
# support.Bench hands ``host_cache_blocks`` to the Scheduler, which no longer takes it (the
# tier below the GPU is ``KVCacheManager(host_cache_size=...)`` now), and its set-up passes
# widen ``max_batch_size``, no longer the request budget (``max_num_requests``). While that is
# so, this fixture gives Bench the tier on the manager and widens the request budget too.

def _support_is_stale():
    try:
        Bench(num_blocks=1)
    except TypeError as exc:
        if "host_cache_blocks" not in str(exc):
            raise
        return True, "max_num_requests" not in inspect.getsource(Bench._budget)
    return False, "max_num_requests" not in inspect.getsource(Bench._budget)


_STALE_INIT, _STALE_BUDGET = _support_is_stale()


@pytest.fixture(autouse=True)
def _support_bench_follows_kvlab(monkeypatch):
    import support

    if _STALE_INIT:
        def scheduler(manager, *args, host_cache_blocks=0, **kwargs):
            if host_cache_blocks == 0:  # no tier below the GPU
                manager.host_tier = HostTier(0)
            return Scheduler(manager, *args, **kwargs)

        monkeypatch.setattr(support, "Scheduler", scheduler)
    if _STALE_BUDGET:
        budget = Bench._budget

        @contextlib.contextmanager
        def widened(self, max_num_tokens, max_batch_size):
            saved = self.scheduler.max_num_requests
            self.scheduler.max_num_requests = max_batch_size
            try:
                with budget(self, max_num_tokens, max_batch_size):
                    yield
            finally:
                self.scheduler.max_num_requests = saved

        monkeypatch.setattr(Bench, "_budget", widened)
    yield


NOT_MODELLED = {
    "TestEviction::test_unknown_state_not_evictable":
        "no_schedule_until/after_state filters: an UNKNOWN-state request outside the "
        "scheduler's state window has no kvlab counterpart (every live request is waiting, "
        "running or suspended)",
}


def step_pages(bench, request):
    """New pages the request's next generation step needs (one token plus its drafts)."""
    cache = bench.manager.get_cache(request)
    geometry = bench.manager.geometry
    return geometry.blocks_for_tokens(cache.capacity + 1 + request.num_draft_tokens) - cache.num_blocks


def generations(bench, *request_ids, drafts=None):
    """Generation requests built in order, each with exactly one full page when the test's
    pass comes, so that its step there needs one new page (two with 64 draft tokens): a
    request is stepped once by each build after it."""
    drafts = drafts or {}
    tokens_per_block = bench.manager.tokens_per_block
    n = len(request_ids)
    return [bench.generation(rid, tokens_per_block - (n - 1 - i),
                             draft=drafts.get(rid, 0))
            for i, rid in enumerate(request_ids)]


def started_behind_generations(bench, request_id, length, first_chunk):
    """``Bench.started_context`` on a bench whose generation requests step in the same set-up
    pass: its token budget is the first chunk plus their steps."""
    scheduler = bench.scheduler
    steps = sum(1 + r.num_draft_tokens for r in scheduler.active_requests if r.is_context_finished)
    saved = scheduler.max_num_tokens
    scheduler.max_num_tokens = first_chunk + steps
    try:
        request = bench.context(request_id, length)
        batch = bench.schedule()
    finally:
        scheduler.max_num_tokens = saved
    assert any(r is request for r in batch.context_requests)
    assert request.context_current_position == first_chunk
    return request


@pytest.mark.upstream("TestEviction::test_evict_gen_from_tail",
                      adaptation="kvlab's suspension frees device pages only into a tier below "
                                 "the GPU, so the bench has a host tier (can_evict) where "
                                 "upstream's mock scripts the retry's success")
def test_evict_gen_from_tail():
    bench = Bench(max_num_tokens=100, can_evict=True)
    generations(bench, "0", "99")  # 99: in generation, at the tail: evictable
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert ids(batch.paused_requests) == ["99"]


@pytest.mark.upstream("TestEviction::test_evict_nonfirst_ctx_chunk",
                      adaptation="kvlab's suspension frees device pages only into a tier below "
                                 "the GPU, so the bench has a host tier (can_evict) where "
                                 "upstream's mock scripts the retry's success; a context past its"
                                 " first chunk needs a chunked scheduler in kvlab (its first "
                                 "64-token chunk really ran)")
def test_evict_nonfirst_ctx_chunk():
    bench = Bench(max_num_tokens=100, can_evict=True, chunked_prefill=True)
    gen0 = bench.generation("0", 63)  # stepped by the next set-up pass
    # a non-first context chunk is evictable: 100 tokens remain after its first chunk
    started_behind_generations(bench, "99", 164, first_chunk=64)
    assert step_pages(bench, gen0) == 1
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert ids(batch.paused_requests) == ["99"]


@pytest.mark.upstream("TestEviction::test_first_chunk_ctx_not_evictable")
def test_first_chunk_ctx_not_evictable():
    bench = Bench(max_num_tokens=100)
    generations(bench, "0")
    bench.context("99", 100)  # first chunk: not evictable
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert len(batch.generation_requests) == 0
    # gen0 self-evicts; the break stops the loop before ctx99
    assert ids(batch.paused_requests) == ["0"]
    assert len(batch.context_requests) == 0


@pytest.mark.upstream("TestEviction::test_evicted_in_paused_requests",
                      adaptation="kvlab's suspension frees device pages only into a tier below "
                                 "the GPU, so the bench has a host tier (can_evict) where "
                                 "upstream's mock scripts the retry's success")
def test_evicted_in_paused_requests():
    bench = Bench(max_num_tokens=100, can_evict=True)
    _, victim = generations(bench, "0", "99")
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert victim in batch.paused_requests


@pytest.mark.upstream("TestEviction::test_suspend_called_on_victim",
                      adaptation="kvlab's suspension frees device pages only into a tier below "
                                 "the GPU, so the bench has a host tier (can_evict) where "
                                 "upstream's mock scripts the retry's success; suspend_request's "
                                 "single call is the victim's state and suspension count")
def test_suspend_called_on_victim():
    bench = Bench(max_num_tokens=100, can_evict=True)
    _, victim = generations(bench, "0", "99")
    bench.hold_all_but(0)
    bench.schedule()
    assert victim.state == "suspended" and victim.num_suspensions == 1
    assert not bench.manager.is_request_active(victim)


@pytest.mark.upstream("TestEviction::test_eviction_clears_request_runtime_state",
                      adaptation="kvlab keeps no per-batch index (py_batch_idx) on a request; "
                                 "the port checks the self-eviction and that the request left "
                                 "the batch (not stepped)")
def test_eviction_clears_request_runtime_state():
    bench = Bench(max_num_tokens=100)
    (request,) = generations(bench, "0")
    generated = request.num_generated
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.paused_requests) == ["0"]
    assert request.state == "suspended" and request.num_generated == generated


@pytest.mark.upstream("TestEviction::test_multiple_evictions_order",
                      adaptation="kvlab's suspension frees device pages only into a tier below "
                                 "the GPU, so the bench has a host tier (can_evict) where "
                                 "upstream's mock scripts the retry's success; gen0 carries 64 "
                                 "draft tokens, so its step needs two pages and each one-page "
                                 "victim frees one")
def test_multiple_evictions_order():
    """v2 (the tail) is evicted first, the retry fails, v1 is evicted, the retry succeeds."""
    bench = Bench(max_num_tokens=100, can_evict=True)
    gen0, v1, v2 = generations(bench, "0", "98", "99", drafts={"0": 64})
    assert step_pages(bench, gen0) == 2
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert len(batch.paused_requests) == 2
    # v2 evicted first (higher index), then v1
    assert v2 in batch.paused_requests
    assert v1 in batch.paused_requests
    assert ids(batch.paused_requests) == ["99", "98"]


@pytest.mark.upstream("TestEviction::test_req_it_end_shrinks_after_eviction",
                      adaptation="kvlab's suspension frees device pages only into a tier below "
                                 "the GPU, so the bench has a host tier (can_evict) where "
                                 "upstream's mock scripts the retry's success")
def test_req_it_end_shrinks_after_eviction():
    """After an eviction, requests beyond the victim's index are not visited."""
    bench = Bench(max_num_tokens=100, can_evict=True)
    generations(bench, "0", "5")  # 5: at index 1, evictable
    # index 2: a first-chunk context is not evictable, so the search finds 5 instead
    bench.context("6", 100)
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert ids(batch.generation_requests) == ["0"]
    assert ids(batch.paused_requests) == ["5"]
    assert batch.context_requests == []  # 6 was beyond the new end


@pytest.mark.upstream("TestEviction::test_self_eviction_on_alloc_fail")
def test_self_eviction_on_alloc_fail():
    """A generation request suspends itself when its step fails and no victim exists."""
    bench = Bench(max_num_tokens=100)
    generations(bench, "0")
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert len(batch.generation_requests) == 0
    assert ids(batch.paused_requests) == ["0"]


@pytest.mark.upstream("TestEviction::test_self_eviction_no_started_in_range")
def test_self_eviction_no_started_in_range():
    """It suspends itself when everything behind it is a first-chunk context."""
    bench = Bench(max_num_tokens=200)
    generations(bench, "0")
    bench.context("1", 50)
    bench.context("2", 50)
    bench.hold_all_but(0)
    batch = bench.schedule()
    assert len(batch.generation_requests) == 0
    # gen0 self-evicts; the break stops the loop before ctx1 and ctx2
    assert ids(batch.paused_requests) == ["0"]
    assert len(batch.context_requests) == 0
