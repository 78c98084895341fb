"""Block reuse in the manager: committed pages, holders, eviction, partial matches, rebasing."""

import pytest
import torch

from kvlab import KVCacheManager, KVGeometry, Request
from kvlab.core.prefix_cache import chain_hashes, prefix_key

T = 4  # tokens per page


def manager(num_blocks=16, **kwargs):
    geometry = KVGeometry(
        num_layers=1, num_kv_heads=1, head_dim=2, dtype="float16", tokens_per_block=T
    )
    kwargs.setdefault("host_cache_size", 0)
    return KVCacheManager.expecting_clamp(
        geometry,
        quota_bytes=num_blocks * geometry.bytes_per_block,
        max_seq_len=num_blocks * T,
        max_batch_size=8,
        **kwargs,
    )


def request(rid, tokens, **kwargs):
    return Request(
        rid, len(tokens), 4, prefix_hashes=chain_hashes(tokens), tokens_per_hash=1, **kwargs
    )


def run_context(mgr, req):
    """prepare, resize for the rest of the context, run it, commit: what a scheduled context does."""
    assert mgr.prepare_context(req)
    cache = mgr.get_cache(req)
    assert mgr.resize_context(req, req.context_remaining_length)
    req.context_current_position = req.context_len
    mgr.update_context(req)
    mgr.check_invariants()
    return cache


def test_chain_hashes_stand_for_the_whole_prefix():
    a, b = chain_hashes([1, 2, 3, 4]), chain_hashes([9, 2, 3, 4])
    assert len(a) == 4 and all(x != y for x, y in zip(a, b))
    assert chain_hashes([1, 2, 3, 4, 5], 2) == chain_hashes([1, 2, 3, 4, 5], 2)
    assert len(chain_hashes(range(5), 2)) == 3
    assert prefix_key(a, 1, 3) == (a[2], 3)


def test_second_prompt_reuses_the_committed_prefix_and_computes_its_last_token():
    mgr = manager()
    first = request("a", list(range(10)))
    cache_a = run_context(mgr, first)
    assert cache_a.committed == 3  # two full pages and the partial last one (10 = 4 + 4 + 2)
    second = request("b", list(range(8)) + [50, 51, 52])
    assert mgr.prepare_context(second)
    cache_b = mgr.get_cache(second)
    assert second.prepopulated_prompt_len == second.context_current_position == 8
    assert cache_b.pages == cache_a.pages[:2] and cache_b.committed == 2
    assert cache_b.capacity == cache_b.history_length == 8
    assert second.is_first_context_chunk and not second.is_started
    mgr.check_invariants()
    # the same prompt again: prompt[:-1] is matched, so the last token is computed (one whole
    # page, then three tokens of the next copied)
    again = request("c", list(range(8)))
    mgr.prepare_context(again)
    assert again.context_current_position == 7


def test_partial_match_copies_the_shared_tokens_into_a_page_of_its_own(device):
    mgr = manager(device=device)
    cache_a = run_context(mgr, request("a", list(range(8))))
    mgr.pool.storage[cache_a.pages[1]] = 7
    other = request("b", [0, 1, 2, 3, 4, 5, 99, 98, 97])  # shares 6 tokens: 1 page + 2
    assert mgr.prepare_context(other)
    cache_b = mgr.get_cache(other)
    assert other.context_current_position == 6
    assert cache_b.pages[0] == cache_a.pages[0] and cache_b.committed == 1
    assert cache_b.pages[1] not in cache_a.pages
    assert torch.equal(mgr.pool.storage[cache_b.pages[1]], mgr.pool.storage[cache_a.pages[1]])
    mgr.check_invariants()


def test_partial_reuse_off_takes_whole_pages_only():
    mgr = manager(enable_partial_reuse=False)
    run_context(mgr, request("a", list(range(8))))
    other = request("b", [0, 1, 2, 3, 4, 5, 99, 98, 97])
    mgr.prepare_context(other)
    assert other.context_current_position == 4


def test_reuse_off_matches_and_commits_nothing():
    mgr = manager(enable_block_reuse=False)
    run_context(mgr, request("a", list(range(10))))
    assert mgr.prefix_cache.committed_blocks == 0
    other = request("b", list(range(10)))
    mgr.prepare_context(other)
    assert other.context_current_position == 0


def test_freed_pages_stay_cached_evictable_and_count_as_free():
    mgr = manager(num_blocks=6)
    first = request("a", list(range(9)))  # 3 pages, all committed at the end of its context
    run_context(mgr, first)
    mgr.free(first)
    assert mgr.pool.free_blocks == 3 and mgr.prefix_cache.evictable_blocks == 3
    assert mgr.free_blocks == 6
    mgr.check_invariants()
    # a later prompt with the same prefix finds it
    again = request("b", list(range(9)) + [7])
    mgr.prepare_context(again)
    assert again.context_current_position == 9
    assert mgr.prefix_cache.evictable_blocks == 1  # the partial last page is copied, not held
    mgr.check_invariants()


def test_eviction_takes_the_least_recently_released_and_a_caches_last_page_first():
    mgr = manager(num_blocks=6)
    old = request("old", list(range(8)))
    new = request("new", list(range(100, 108)))
    run_context(mgr, old)
    run_context(mgr, new)
    old_pages, new_pages = list(mgr.get_cache(old).pages), list(mgr.get_cache(new).pages)
    mgr.free(old)
    mgr.free(new)
    stranger = request("x", list(range(200, 209)))  # 3 pages: 2 free, 1 evicted
    mgr.prepare_context(stranger)
    assert mgr.resize_context(stranger, 9)
    assert mgr.prefix_cache.evicted_blocks == 1
    assert old_pages[1] in mgr.get_cache(stranger).pages  # old's last page went first
    # old's first page is still matched; its second is gone
    probe = request("p", list(range(8)) + [1])
    mgr.prepare_context(probe)
    assert probe.context_current_position == 4
    assert all(mgr.prefix_cache.is_committed(p) for p in new_pages)
    mgr.check_invariants()


def test_a_refused_allocation_evicts_nothing():
    mgr = manager(num_blocks=4)
    cached = request("a", list(range(8)))
    run_context(mgr, cached)
    mgr.free(cached)
    big = request("b", list(range(300, 320)))  # 5 pages > 4
    mgr.prepare_context(big)
    failed = mgr.pool.counters.failed_allocations
    assert not mgr.resize_context(big, 20)
    assert mgr.prefix_cache.evictable_blocks == 2 and mgr.prefix_cache.evicted_blocks == 0
    assert mgr.pool.counters.failed_allocations == failed + 1


def test_a_page_computed_twice_is_given_up_for_the_committed_one():
    mgr = manager()
    a, b = request("a", list(range(9))), request("b", list(range(9)))
    assert mgr.prepare_context(a) and mgr.prepare_context(b)  # nothing cached yet
    cache_a, cache_b = mgr.get_cache(a), mgr.get_cache(b)
    for req in (a, b):
        assert mgr.resize_context(req, 9)
    free = mgr.pool.free_blocks
    for req in (a, b):
        req.context_current_position = 9
        mgr.update_context(req)
    assert cache_b.pages[:2] == cache_a.pages[:2]  # rebased onto a's pages
    assert cache_b.pages[2] != cache_a.pages[2]  # the partial last page stays b's own
    assert mgr.pool.free_blocks == free + 2
    assert mgr.get_cache(b).page_indices.tolist()[:3] == cache_b.pages
    mgr.check_invariants()


def test_the_probe_starts_past_the_caches_own_pages_and_answers_as_from_the_first():
    """probe_first_new_block_key walks on from a context's own committed pages (they stay in
    the tree while it holds them); the tree may hold more of its prompt, committed by another."""
    mgr = manager()
    tokens = list(range(16))
    a = request("a", tokens)
    assert mgr.prepare_context(a) and mgr.resize_context(a, 4)
    a.context_current_position = 4
    mgr.update_context(a)
    assert mgr.get_cache(a).committed == 1
    run_context(mgr, request("b", tokens[:13]))  # reuses a's page, commits those to 12 and 13
    expected = prefix_key(a.scoped_hashes, 1, 16)
    assert mgr.probe_first_new_block_key(a) == mgr.prefix_cache.first_new_key(a) == expected
    assert mgr.prefix_cache.first_new_key(a, known=3) == expected


def test_per_request_policy_commits_at_the_end_of_the_context_only():
    for policy, committed in (("all_reusable", 1), ("per_request", 0)):
        mgr = manager(block_reuse_policy=policy)
        req = request("a", list(range(10)))
        mgr.prepare_context(req)
        assert mgr.resize_context(req, 5)
        req.context_current_position = 5  # a first chunk ran
        mgr.update_context(req)
        assert mgr.get_cache(req).committed == committed


def test_generated_and_unhashed_tokens_are_never_committed():
    mgr = manager()
    req = Request("a", 10, 4, prefix_hashes=chain_hashes(range(6)), tokens_per_hash=1)
    run_context(mgr, req)
    assert mgr.get_cache(req).committed == 1  # the hashes cover 6 tokens: one whole page
    plain = Request("p", 10, 4)
    run_context(mgr, plain)
    assert mgr.get_cache(plain).committed == 0


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="block_reuse_policy"):
        manager(block_reuse_policy="sometimes")
    with pytest.raises(TypeError, match="enable_block_reuse"):
        manager(enable_block_reuse=1)
    with pytest.raises(ValueError, match="tokens_per_hash"):
        Request("a", 4, 1, tokens_per_hash=0)


def test_a_partial_match_in_a_full_pool_does_not_evict_the_page_it_copies():
    mgr = manager(num_blocks=3)
    first = request("a", list(range(6)))  # a whole page and a partial one (2 tokens)
    run_context(mgr, first)
    mgr.free(first)
    filler = Request("f", 4, 1)  # takes the last free page
    assert mgr.prepare_context(filler) and mgr.resize_context(filler, 4)
    source = mgr.prefix_cache._pages[prefix_key(first.prefix_hashes, 1, 6)]
    again = request("b", list(range(6)) + [50])
    assert mgr.prepare_context(again)
    # the only page an allocation could evict is the one to copy from: no copy, the whole page only
    assert again.context_current_position == 4
    assert mgr.prefix_cache.is_committed(source) and mgr.prefix_cache.evicted_blocks == 0
    mgr.check_invariants()
    # with a free page, the copy is made
    mgr.free(filler)
    later = request("c", list(range(6)) + [60])
    mgr.pool.storage[source] = 9
    assert mgr.prepare_context(later) and later.context_current_position == 6
    copy = mgr.get_cache(later).pages[1]
    assert copy != source and bool((mgr.pool.storage[copy] == 9).all())
    mgr.check_invariants()


@pytest.mark.parametrize("reuse", [True, False])
def test_update_context_advances_the_history_by_chunk(reuse):
    mgr = manager(enable_block_reuse=reuse)
    req = request("a", list(range(10)))
    assert mgr.prepare_context(req) and mgr.resize_context(req, 4)
    req.context_current_position = 4
    mgr.update_context(req)
    cache = mgr.get_cache(req)
    assert cache.history_length == 4 and cache.committed == (1 if reuse else 0)
    assert mgr.resize_context(req, 6)
    req.context_current_position = 10
    mgr.update_context(req)
    assert cache.history_length == 10 and cache.capacity == 10
    with pytest.raises(ValueError, match="History length cannot exceed capacity"):
        cache.resize(8)  # the computed context cannot be given back


# -- upstream's partial-block rules (_block_radix_tree.py, Block.__init__) -------------------


def test_a_partial_page_whose_tokens_a_sibling_holds_is_not_committed():
    mgr = manager()
    run_context(mgr, request("a", list(range(10))))  # its last page holds tokens 8 and 9
    committed = mgr.prefix_cache.committed_blocks
    shorter = run_context(mgr, request("b", list(range(9))))  # its last page holds token 8
    assert shorter.committed == 2  # the two whole pages (rebased); the partial one stays its own
    assert mgr.prefix_cache.committed_blocks == committed
    assert shorter.pages[2] not in mgr.prefix_cache._pages.values()


@pytest.mark.parametrize("shorter_still_held", [False, True])
def test_a_longer_partial_page_replaces_the_shorter_sibling_it_extends(shorter_still_held):
    mgr = manager()
    short = request("a", list(range(9)))
    short_page = run_context(mgr, short).pages[2]
    short_key = prefix_key(short.prefix_hashes, 1, 9)
    if not shorter_still_held:
        mgr.free(short)
    free = mgr.pool.free_blocks
    longer = request("b", list(range(10)))
    cache = run_context(mgr, longer)  # copies token 8 from a's page, computes token 9
    assert cache.committed == 3
    assert short_key not in mgr.prefix_cache._pages
    assert mgr.prefix_cache._pages[prefix_key(longer.prefix_hashes, 1, 10)] == cache.pages[2]
    assert not mgr.prefix_cache.is_committed(short_page)
    if shorter_still_held:  # orphaned: its cache keeps it until it lets go
        assert mgr.prefix_cache.orphaned_blocks == 1
        assert mgr.pool.is_allocated(short_page) and mgr.pool.free_blocks == free - 1
        mgr.free(short)
    # the page b copied into is made up for by the replaced page going back to the pool
    assert mgr.prefix_cache.orphaned_blocks == 0
    assert not mgr.pool.is_allocated(short_page) and mgr.pool.free_blocks == free
    mgr.check_invariants()


@pytest.mark.parametrize("children, expected", [(31, 5), (32, 4)])
def test_partial_matching_is_skipped_under_a_node_of_32_children(children, expected):
    mgr = manager(num_blocks=48)
    for i in range(children):  # each leaves a partial page of its own under the first page
        run_context(mgr, request(f"r{i}", [0, 1, 2, 3, 100 + i, 50]))
        mgr.free(f"r{i}")
    probe = request("probe", [0, 1, 2, 3, 105, 7, 8])
    assert mgr.prepare_context(probe)
    assert probe.context_current_position == expected  # 4 + the token shared with r5's page
    mgr.check_invariants()


def test_prompts_share_pages_only_within_their_cache_salt():
    mgr = manager()
    run_context(mgr, request("a", list(range(9)), cache_salt="tenant-1"))
    for rid, salt, reused in (("b", "tenant-1", 8), ("c", "tenant-2", 0), ("d", None, 0)):
        again = request(rid, list(range(9)), cache_salt=salt)
        assert mgr.prepare_context(again)
        assert again.context_current_position == reused, salt
    unsalted = request("e", list(range(9)))
    assert unsalted.scoped_hashes is unsalted.prefix_hashes  # no salt: the hashes as they are
    mgr.check_invariants()
    with pytest.raises(TypeError, match="cache_salt must be a str or None"):
        request("f", [1], cache_salt=7)


@pytest.mark.parametrize("suspended_first", [True, False])
def test_cached_pages_and_suspended_caches_leave_in_one_lru_order(suspended_first):
    # upstream's eviction controller queues a suspended cache's pages with the cached pages no
    # cache holds (_storage_manager.py is_evictable): the least recent goes first, either kind
    page_bytes = manager(num_blocks=1).geometry.bytes_per_block
    mgr = manager(num_blocks=8, host_cache_size=2 * page_bytes)
    suspended = Request("s", 8, 4)

    def suspend():
        assert mgr.prepare_context(suspended) and mgr.resize_context(suspended, 8)
        mgr.suspend(suspended)

    def cache_pages():
        run_context(mgr, request("a", list(range(8))))
        mgr.free("a")

    for step in (suspend, cache_pages) if suspended_first else (cache_pages, suspend):
        step()
    assert mgr.pool.free_blocks == 4 and mgr.prefix_cache.evictable_blocks == 2
    big = Request("big", 24, 1)
    assert mgr.prepare_context(big) and mgr.resize_context(big, 24)  # 6 pages: 2 more needed
    cache = mgr.get_cache(suspended)
    if suspended_first:  # the older suspension moves down; the cached pages stay
        assert cache.suspended_blocks == 2 and mgr.prefix_cache.evicted_blocks == 0
    else:  # the older cached pages are evicted; the suspended cache stays on the GPU
        assert cache.num_blocks == 2 and mgr.prefix_cache.evicted_blocks == 2
    mgr.check_invariants()


@pytest.mark.parametrize("host_pages, reused", [(2, 8), (1, 4), (0, 0)])
def test_an_evicted_page_moves_to_the_host_tier_keeping_its_key(host_pages, reused, device):
    # upstream's eviction migrates a page to the next cache level; the radix tree keeps its
    # block, and a later match brings it back to the GPU (_storage_manager.py); the bytes go
    # down in one copy and come back up
    page_bytes = manager(num_blocks=1).geometry.bytes_per_block
    mgr = manager(num_blocks=4, host_cache_size=host_pages * page_bytes, device=device)
    first = request("a", list(range(8)))
    pages = list(run_context(mgr, first).pages)
    for value, page in zip((5, 6), pages):
        mgr.pool.storage[page] = value
    mgr.free(first)  # both pages evictable, the first released last
    filler = Request("f", 16, 1)
    assert mgr.prepare_context(filler) and mgr.resize_context(filler, 16)  # evicts both
    assert mgr.prefix_cache.evicted_blocks == 2
    assert mgr.prefix_cache.host_blocks == mgr.prefix_cache.committed_blocks == host_pages
    mgr.check_invariants()
    mgr.free(filler)
    probe = request("p", list(range(8)) + [9])
    assert mgr.prepare_context(probe)
    assert probe.context_current_position == reused
    cache = mgr.get_cache(probe)
    for value, page in zip((5, 6), cache.pages[: reused // T]):  # the bytes came back up
        assert bool((mgr.pool.storage[page] == value).all())
    assert mgr.prefix_cache.host_blocks == 0
    mgr.check_invariants()


def test_a_suspended_cache_moving_down_drops_cached_pages_below():
    # suspended caches' pages must be accepted by the last level; its droppable (cached) pages
    # make room (_storage_manager.py _prepare_free_slots)
    page_bytes = manager(num_blocks=1).geometry.bytes_per_block
    mgr = manager(num_blocks=4, host_cache_size=4 * page_bytes, max_util_for_resume=1.0)
    first = request("a", list(range(8)))
    run_context(mgr, first)
    mgr.free(first)
    filler = Request("f", 16, 1)
    assert mgr.prepare_context(filler) and mgr.resize_context(filler, 16)
    assert mgr.prefix_cache.host_blocks == 2  # a's pages moved down
    mgr.suspend(filler)
    other = Request("o", 4, 1)
    assert mgr.prepare_context(other) and mgr.resize_context(other, 4)  # needs 1 page
    assert mgr.get_cache(filler).suspended_blocks == 4  # moved down, displacing a's pages
    assert mgr.prefix_cache.host_blocks == mgr.prefix_cache.committed_blocks == 0
    mgr.check_invariants()


def test_a_page_computed_again_replaces_its_copy_below_and_partial_copies_come_from_below():
    page_bytes = manager(num_blocks=1).geometry.bytes_per_block
    mgr = manager(num_blocks=6, host_cache_size=2 * page_bytes)
    late = request("b", [0, 1, 2, 3, 9])
    assert mgr.prepare_context(late)  # nothing cached yet: it will compute its first page
    first = request("a", [0, 1, 2, 3, 7, 8])
    cache_a = run_context(mgr, first)
    mgr.pool.storage[cache_a.pages[1]] = 4
    mgr.free(first)
    filler = Request("f", 24, 1)
    assert mgr.prepare_context(filler) and mgr.resize_context(filler, 24)  # a's pages go below
    assert mgr.prefix_cache.host_blocks == 2
    mgr.free(filler)
    key = prefix_key(late.scoped_hashes, 1, 4)
    assert mgr.prefix_cache.is_below(mgr.prefix_cache._pages[key])
    cache_b = run_context(mgr, late)  # commits the key of a page below: its page replaces it
    assert mgr.prefix_cache._pages[key] == cache_b.pages[0] and cache_b.committed == 2
    assert mgr.prefix_cache.host_blocks == 1
    # a partial match on a's second page (below) copies its bytes into a page of its own
    copier = request("c", [0, 1, 2, 3, 7, 50])
    assert mgr.prepare_context(copier) and copier.context_current_position == 5
    assert bool((mgr.pool.storage[mgr.get_cache(copier).pages[1]] == 4).all())
    assert mgr.prefix_cache.host_blocks == 1  # copied from, not brought up
    mgr.check_invariants()
