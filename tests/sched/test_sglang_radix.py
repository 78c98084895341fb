"""kvlab.sched.sglang_radix: SGLang 0.5.23's radix tree (match, insert, locks, LRU eviction)
and the SGLang peer with the radix cache on. The expected steps of the peer tests are what the
real SGLang did on the same workloads (kvlab/backends/sglang_driver.py, radix cache on)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab import KVGeometry, Request, simulate
from kvlab.core.prompt_tokens import prompt_token_ids
from kvlab.sched import sglang
from kvlab.sched.sglang import SglangScheduler, SglangServerArgs
from kvlab.sched.sglang_radix import RadixTree

TOKEN = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=1)


def cached(max_total_tokens=2000, **kwargs):
    """The radix cache under event_loop_normal (the overlap loop's tests are in test_sglang.py)."""
    fields = dict(
        chunked_prefill_size=512, disable_radix_cache=False, disable_overlap_schedule=True
    )
    fields.update(kwargs)
    return SglangServerArgs(TOKEN, max_total_tokens, 4096, **fields)


def shared(request_id, prompt_len, max_new_tokens, arrival=0, hashes=(1, 2)):
    """A request whose prompt starts with the blocks of ``hashes`` (16 tokens each)."""
    return Request(
        request_id,
        prompt_len,
        max_new_tokens,
        arrival,
        prefix_hashes=tuple(hashes),
        tokens_per_hash=16,
    )


# --- the tree ----------------------------------------------------------------------------------


def test_a_match_splits_the_node_it_ends_in_and_finds_only_whole_tokens():
    tree = RadixTree()
    leaf, duplicates, new = tree.insert([1, 2, 3, 4], 0)
    assert (duplicates, new, tree.evictable_size) == (0, 4, 4)
    length, node = tree.match([1, 2, 9])
    assert length == 2 and node.key == (1, 2) and node.children[3] is leaf
    assert leaf.key == (3, 4) and leaf.parent is node
    assert tree.match([5])[0] == 0 and tree.match([])[0] == 0
    tree.check_invariants()


def test_an_insert_counts_the_tokens_the_tree_held_beyond_what_the_request_read():
    tree = RadixTree()
    tree.insert([1, 2, 3, 4], 0)
    # the request read [1, 2] from the tree, computed 3, 4, 5 itself: 3 and 4 it frees
    _, duplicates, new = tree.insert([1, 2, 3, 4, 5], 2)
    assert (duplicates, new, tree.evictable_size) == (2, 1, 5)
    tree.check_invariants()


def test_locks_protect_a_path_and_eviction_takes_unlocked_leaves_by_lru():
    tree = RadixTree()
    a, _, _ = tree.insert([1, 2, 3], 0)
    b, _, _ = tree.insert([1, 2, 7, 8], 0)  # splits [1, 2, 3]: [1, 2] -> [3], [7, 8]
    tree.lock(b)
    assert (tree.evictable_size, tree.protected_size) == (1, 4)
    assert tree.evict(10) == 1 and a.parent is not None and 3 not in a.parent.children
    tree.unlock(b)
    c, _, _ = tree.insert([5, 6], 0)
    tree.match([1, 2, 7, 8])  # b's path is now newer than c
    assert tree.evict(1) == 2 and 5 not in tree.root.children  # c, the least recent, whole
    assert tree.evict(3) == 4 and not tree.root.children  # b, then its parent, now a leaf
    assert (tree.evictable_size, tree.protected_size) == (0, 0)
    tree.check_invariants()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.integers(1, 3), max_size=8), min_size=1, max_size=12))
def test_random_inserts_matches_locks_and_evictions_keep_the_books(keys):
    tree, locked = RadixTree(), []
    for i, key in enumerate(keys):
        length, node = tree.match(key)
        assert key[:length] == key[: len(key)][:length]
        node, _, _ = tree.insert(key, length)
        if i % 2:
            tree.lock(node)
            locked.append(node)
        tree.evict(i % 4)
        tree.check_invariants()
    for node in locked:
        tree.unlock(node)
    tree.evict(1 << 20)
    assert (tree.evictable_size, tree.protected_size, tree.root.children) == (0, 0, {})


# --- the peer with the cache on ------------------------------------------------------------------


def test_a_shared_prefix_is_computed_once_and_the_last_token_always():
    """The second request computes only its tokens past the 32 shared ones; the third, the
    first's prompt again, computes its last token only."""
    requests = [shared("a", 40, 4), shared("b", 50, 4, 10), shared("c", 40, 2, 20)]
    assert prompt_token_ids(requests[2]) != prompt_token_ids(requests[0])  # own tails
    same = shared("c", 32, 2, 20)
    result = simulate(SglangScheduler(cached(), debug=True), [*requests[:2], same])
    prefill = [(s.step, s.tokens_scheduled) for s in result.trace.steps if s.num_context]
    assert prefill == [(0, 40), (10, 50 - 32), (20, 1)]
    off = simulate(SglangScheduler(cached(disable_radix_cache=True)), [*requests[:2], same])
    assert [s.tokens_scheduled for s in off.trace.steps if s.num_context] == [40, 50, 32]


def test_a_prompt_enters_the_tree_as_its_prefill_result_is_processed():
    """b arrives while a decodes: a's prompt is in the tree (locked by a) already, so b computes
    only its own 8 tokens; the free tokens count a's prompt once."""
    requests = [shared("a", 40, 50), shared("b", 40, 2, 1)]
    result = simulate(SglangScheduler(cached(), debug=True), requests)
    steps = {s.step: s for s in result.trace.steps}
    assert steps[1].tokens_scheduled == 8 and steps[1].num_context == 1
    assert steps[1].free_blocks == 2000 - 40 - 8


def test_finished_requests_stay_evictable_and_are_evicted_when_the_pool_runs_short():
    """As SGLang did: a's 43 tokens (prompt + outputs - 1) stay in the tree after it finishes,
    so the free tokens do not come back; b, sharing nothing, takes them by eviction."""
    requests = [Request("a", 40, 4), Request("b", 90, 2, 10)]
    result = simulate(SglangScheduler(cached(100), debug=True), requests)
    free = {s.step: s.free_blocks for s in result.trace.steps}
    assert free[3] == 100 - 43
    assert free[10] == 100 - 90  # a evicted whole, b's 90 allocated
    assert result.status == {"a": "finished", "b": "finished"}


def test_a_retracted_request_returns_to_the_cached_prefix():
    """Eight requests sharing their first 16 tokens over-commit a 600-token pool (the decaying
    new-token ratio) and SGLang retracts; each one retracted comes back computing its prompt
    and outputs but the 16 shared tokens, which stayed in the tree. (The tokens past them went
    with the tree's eviction after the retraction.)"""
    requests = [shared(f"r{i}", 20, 400, i, hashes=(1,)) for i in range(8)]
    args = cached(600, max_running_requests=8, chunked_prefill_size=128)
    result = simulate(SglangScheduler(args, debug=True), requests)
    steps = {s.step: s for s in result.trace.steps}
    retractions = [
        (e.step, e.request_id) for e in result.trace.events if e.kind == "recompute_paused"
    ]
    assert retractions == [(690, "r2"), (1491, "r5"), (2207, "r7")]
    # r2 kept 289 outputs: 20 + 289 - 16 tokens again, in chunks of 128, from step 2003
    assert [steps[s].tokens_scheduled for s in (2003, 2004, 2005)] == [
        128,
        128,
        20 + 289 - 16 - 256,
    ]
    assert result.requests["r2"].num_recomputes == 1
    assert set(result.status.values()) == {"finished"}


def test_a_one_token_abort_leaves_its_token_in_the_tree():
    """An input over max_req_input_len (94 of a 100-token pool) is prefilled as the one token
    0 and finished with an abort, which inserts that token like any finish: one token stays in
    the tree, and a second abort finds it there."""
    requests = [Request("long", 95, 4), Request("again", 95, 4, 1), Request("ok", 10, 2, 2)]
    result = simulate(SglangScheduler(cached(100), debug=True), requests)
    assert result.status == {"long": "rejected", "again": "rejected", "ok": "finished"}
    assert [s.free_blocks for s in result.trace.steps] == [99, 99, 89, 99 - 11]


def test_every_32nd_prefill_pass_touches_the_waiting_requests_paths(monkeypatch):
    """29 one-token outputs make the pass at step 32 the second that touches: w waits behind x
    (which does not fit), so only the touch makes w's cached prefix newer than b's prompt, and
    r's decode evicts b, not it. w then computes 8 tokens, as SGLang did; without the touch, 56."""
    requests = [Request(f"f{i}", 4, 1, i) for i in range(29)] + [
        shared("a", 48, 1, 29, (1, 2, 3)),
        shared("b", 48, 1, 30, (4, 5, 6)),
        Request("r", 20, 200, 31),
        Request("x", 100, 150, 32),
        shared("w", 56, 2, 32, (1, 2, 3)),
    ]
    args = cached(300, max_running_requests=8, chunked_prefill_size=128, max_prefill_tokens=128)

    def last_two_prefills():
        result = simulate(SglangScheduler(args, debug=True), requests)
        return [(s.step, s.tokens_scheduled) for s in result.trace.steps if s.num_context][-2:]

    assert last_two_prefills() == [(231, 100), (232, 8)]
    monkeypatch.setattr(sglang, "WAITING_PREFIX_REFRESH_INTERVAL", 1 << 30)  # the first only
    assert last_two_prefills() == [(231, 100), (232, 56)]


def test_ignore_eos_takes_the_ordinary_admission_with_the_cache_on():
    """With the cache off, ignore_eos admits b beside a, counting on a's tokens coming back when
    it finishes first (add_one_req_ignore_eos); with it on, SGLang skips that path, and b waits
    until a's output reserve has shrunk."""
    requests = [Request("a", 100, 100), Request("b", 100, 900)]
    off = cached(1100, ignore_eos=True, disable_radix_cache=True)
    on = cached(1100, ignore_eos=True)
    started = [
        simulate(SglangScheduler(args), requests).requests["b"].first_scheduled_step
        for args in (off, on)
    ]
    assert started == [1, 100]


@pytest.mark.parametrize("seed", range(3))
def test_random_shared_prefix_workloads_keep_the_invariants(seed):
    rng = random.Random(seed)
    requests = []
    for i in range(20):
        prompt_len = rng.randint(1, 80)
        hashes = [rng.randint(1, 3) for _ in range(min(rng.randint(0, 4), -(-prompt_len // 16)))]
        requests.append(shared(f"r{i}", prompt_len, rng.randint(1, 60), rng.randint(0, 30), hashes))
    result = simulate(SglangScheduler(cached(400, chunked_prefill_size=32), debug=True), requests)
    assert result.error is None and set(result.status.values()) == {"finished"}


@pytest.mark.parametrize("mismatch", [None, 0, 1, 255, 256, 257, 700, 999])
def test_a_long_key_matches_up_to_its_first_differing_id(mismatch):
    # the match compares slices of 256 ids before ids one by one: a difference on either side
    # of a slice's edge, or none, must give the same lengths as comparing id by id
    tree = RadixTree()
    stored = list(range(1000))
    tree.insert(stored, 0)
    probe = list(stored)
    if mismatch is not None:
        probe[mismatch] = -1
    assert tree.match(probe)[0] == (1000 if mismatch is None else mismatch)
    assert tree.match(probe[:300])[0] == (300 if mismatch is None else min(mismatch, 300))
