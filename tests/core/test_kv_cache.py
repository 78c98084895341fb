"""KVCache.resize in the native check order (docs/REFERENCE.md §3), shrink, suspend and resume."""

import pytest
import torch

from kvlab import PAGE_INDEX_TOO_SHORT_MESSAGE, PageIndexTooShort
from kvlab.core.kv_cache import HISTORY_ABOVE_CAPACITY_MESSAGE, HISTORY_DECREASED_MESSAGE


def snapshot(mgr, cache):
    """Everything a refused resize must leave alone."""
    return dict(
        capacity=cache.capacity,
        history=cache.history_length,
        pages=list(cache.pages),
        free=mgr.free_blocks,
        free_list=mgr.pool.free_pages(),
        table=mgr.page_index.table.clone(),
        storage=mgr.pool.storage.clone(),
    )


def assert_unchanged(mgr, cache, before):
    after = snapshot(mgr, cache)
    for key in ("capacity", "history", "pages", "free", "free_list"):
        assert after[key] == before[key], key
    assert torch.equal(after["table"], before["table"])
    assert torch.equal(after["storage"], before["storage"])


def fill_pool(mgr, request_id="hog"):
    """Give every free page to another cache."""
    hog = mgr.create_cache(request_id)
    assert hog.resize(mgr.free_blocks * mgr.tokens_per_block)
    assert mgr.free_blocks == 0
    return hog


# -- 1. history errors come first ------------------------------------------------------------


def test_history_above_capacity_raises_plain_valueerror_before_index_check(seed_manager):
    mgr = seed_manager("clamped")
    cache = mgr.create_cache("r")
    before = snapshot(mgr, cache)
    # 8192 would need 256 entries of a 68-wide row, yet the history error wins
    with pytest.raises(ValueError) as info:
        cache.resize(8192, history_length=9000)
    assert not isinstance(info.value, PageIndexTooShort)
    assert str(info.value) == HISTORY_ABOVE_CAPACITY_MESSAGE
    assert HISTORY_ABOVE_CAPACITY_MESSAGE == "History length cannot exceed capacity"  # native text
    assert_unchanged(mgr, cache, before)


def test_history_may_not_shrink(seed_manager):
    mgr = seed_manager("clamped")
    cache = mgr.create_cache("r")
    assert cache.resize(64, history_length=40)
    before = snapshot(mgr, cache)
    with pytest.raises(ValueError) as info:
        cache.resize(64, history_length=39)
    assert str(info.value) == HISTORY_DECREASED_MESSAGE
    assert HISTORY_DECREASED_MESSAGE == "History length cannot be decreased"  # native text
    with pytest.raises(ValueError) as info:
        cache.resize(32)  # below the 40 tokens of history already held
    assert str(info.value) == HISTORY_ABOVE_CAPACITY_MESSAGE
    with pytest.raises(ValueError) as info:
        cache.resize(32, history_length=39)  # both wrong: the native order checks the shrink first
    assert str(info.value) == HISTORY_DECREASED_MESSAGE
    with pytest.raises(ValueError) as info:
        cache.resize(8192, history_length=10)  # shrinking history beats the index check
    assert str(info.value) == HISTORY_DECREASED_MESSAGE
    assert not isinstance(info.value, PageIndexTooShort)
    assert_unchanged(mgr, cache, before)


# -- 2. same number of blocks: True ----------------------------------------------------------


def test_same_blocks_is_true_even_with_an_empty_pool(seed_manager):
    mgr = seed_manager("clamped", max_batch_size=2)
    cache = mgr.create_cache("r")
    assert cache.resize(20)
    pages = list(cache.pages)
    fill_pool(mgr)
    assert cache.resize(32)  # still one block
    assert cache.resize(1)
    assert cache.capacity == 1 and cache.pages == pages
    assert mgr.free_blocks == 0
    mgr.check_invariants()


# -- 3. the index check runs before allocation -----------------------------------------------


def test_index_check_raises_even_when_the_pool_is_empty(seed_manager, device):
    mgr = seed_manager("clamped", max_batch_size=2, device=device)
    fill_pool(mgr)
    cache = mgr.create_cache("r")
    before = snapshot(mgr, cache)
    failed = mgr.pool.counters.failed_allocations
    with pytest.raises(PageIndexTooShort) as info:
        cache.resize(8192)
    assert str(info.value) == PAGE_INDEX_TOO_SHORT_MESSAGE
    assert info.value.needed_entries == 256 and info.value.available_entries == 68
    assert mgr.pool.counters.failed_allocations == failed  # no allocation was tried
    assert_unchanged(mgr, cache, before)


def test_index_boundary_is_the_row_width(seed_manager):
    mgr = seed_manager("clamped")
    cache = mgr.create_cache("r")
    span = mgr.max_blocks_per_seq * mgr.tokens_per_block  # 68 * 32 = 2176
    assert span == mgr.page_index_span_tokens == 2176
    # 2176 tokens fit the row (68 entries) but not the 64-page pool: False
    assert cache.resize(span) is False
    # one token more needs 69 entries: the native error
    with pytest.raises(PageIndexTooShort) as info:
        cache.resize(span + 1)
    assert info.value.needed_entries == 69
    assert cache.capacity == 0 and mgr.free_blocks == 64


# -- 4. not enough pages: False with no side effects -----------------------------------------


def test_false_has_no_side_effects(seed_manager):
    mgr = seed_manager("configured", max_batch_size=2)
    other = mgr.create_cache("other")
    assert other.resize(100)
    other_pages = list(other.pages)
    cache = mgr.create_cache("r")
    assert cache.resize(64, history_length=10)
    before = snapshot(mgr, cache)
    assert cache.resize(8192) is False
    assert_unchanged(mgr, cache, before)
    assert other.pages == other_pages
    mgr.check_invariants()


def test_grow_exactly_to_the_pool(seed_manager):
    mgr = seed_manager("configured")
    cache = mgr.create_cache("r")
    assert cache.resize(2048) is True
    assert mgr.free_blocks == 0 and cache.num_blocks == 64
    assert sorted(cache.pages) == list(range(64))
    assert cache.resize(2049) is False
    assert cache.capacity == 2048
    mgr.check_invariants()


# -- 5. allocate: the row holds the real page ids ----------------------------------------------


def test_grow_in_steps_writes_real_page_ids(seed_manager):
    mgr = seed_manager("clamped", max_batch_size=2)
    a, b = mgr.create_cache("a"), mgr.create_cache("b")
    assert a.resize(32) and b.resize(64) and a.resize(100)
    assert a.num_blocks == 4 and b.num_blocks == 2
    assert not set(a.pages) & set(b.pages)
    for cache in (a, b):
        row = cache.page_indices.tolist()
        assert row[: cache.num_blocks] == cache.pages
        assert set(row[cache.num_blocks :]) == {-1}
        assert all(mgr.pool.is_allocated(p) for p in cache.pages)
    mgr.check_invariants()


def test_shrink_frees_tail_pages(seed_manager):
    mgr = seed_manager("clamped")
    cache = mgr.create_cache("r")
    assert cache.resize(160)  # 5 pages
    pages = list(cache.pages)
    assert cache.resize(64)  # 2 pages
    assert cache.pages == pages[:2]
    assert mgr.free_blocks == 62
    assert all(not mgr.pool.is_allocated(p) for p in pages[2:])
    assert cache.page_indices.tolist()[:6] == pages[:2] + [-1] * 4
    assert cache.resize(0) and cache.num_blocks == 0 and mgr.free_blocks == 64
    mgr.check_invariants()


# -- suspend / resume --------------------------------------------------------------------------


def test_suspend_resume_round_trips_page_bytes(seed_manager, device):
    mgr = seed_manager("configured", max_batch_size=2, device=device)
    cache = mgr.create_cache("r")
    assert cache.resize(96, history_length=90)  # 3 pages
    gen = torch.Generator().manual_seed(0)
    pattern = torch.randint(
        0, 256, (3, mgr.pool.bytes_per_block), dtype=torch.uint8, generator=gen
    ).to(mgr.device)
    for i, page in enumerate(cache.pages):
        mgr.pool.storage[page] = pattern[i]
    old_pages = list(cache.pages)

    cache.suspend()  # the pages stay on the GPU, held, until an allocation needs them
    assert cache.suspended and cache.num_blocks == 3 and cache.suspended_blocks == 0
    assert mgr.free_blocks == 61
    mgr.check_invariants()

    # another cache needs every page: the suspended cache's pages move to the host tier
    thief = mgr.create_cache("thief")
    assert thief.resize(64 * 32)
    assert cache.num_blocks == 0 and cache.suspended_blocks == 3 == mgr.host_tier.used_blocks
    assert set(cache.page_indices.tolist()) == {-1}
    assert (cache.capacity, cache.history_length) == (96, 90)  # kept
    assert set(old_pages) <= set(thief.pages)
    mgr.pool.storage[thief.pages] = 0xAB
    assert cache.resume() is False and cache.suspended  # utilization 100 % > 0.95
    thief.resize(32 * 32)  # give back its tail; it keeps the old pages (handed out first)
    assert set(old_pages) <= set(thief.pages)
    mgr.pool.storage.zero_()

    assert cache.resume() is True
    assert not cache.suspended and cache.num_blocks == 3 and cache.suspended_blocks == 0
    assert not set(cache.pages) & set(old_pages)  # new pages: the bytes really were copied
    assert cache.page_indices.tolist()[:4] == cache.pages + [-1]
    for i, page in enumerate(cache.pages):
        assert torch.equal(mgr.pool.storage[page], pattern[i]), f"page {i} bytes differ"
    mgr.check_invariants()


def test_resume_false_when_pages_are_short_changes_nothing(seed_manager):
    mgr = seed_manager("clamped", max_batch_size=2)
    cache = mgr.create_cache("r")
    assert cache.resize(128)
    cache.suspend()
    hog = mgr.create_cache("hog")
    assert hog.resize(62 * 32)
    assert mgr.free_blocks == 2
    assert cache.resume() is False
    assert cache.suspended and cache.suspended_blocks == 4 and cache.num_blocks == 0
    assert mgr.free_blocks == 2
    hog.resize(60 * 32)
    assert cache.resume() is True and cache.num_blocks == 4 and mgr.free_blocks == 0
    mgr.check_invariants()


def test_resize_while_suspended_is_an_error(seed_manager):
    mgr = seed_manager("clamped")
    cache = mgr.create_cache("r")
    cache.resize(64)
    cache.suspend()
    with pytest.raises(RuntimeError, match="suspended"):
        cache.resize(128)
    assert cache.suspended and mgr.free_blocks == 62  # held on the GPU while suspended


def test_suspend_and_resume_are_idempotent(seed_manager):
    mgr = seed_manager("clamped")
    cache = mgr.create_cache("r")
    assert cache.resume() is True  # not suspended: nothing to do
    cache.resize(64)
    cache.suspend()
    cache.suspend()
    assert cache.num_blocks == 2 and cache.suspended_blocks == 0  # held in place
    assert cache.resume() and cache.resume() and cache.num_blocks == 2 and mgr.free_blocks == 62


def test_without_a_tier_below_the_gpu_a_suspended_cache_frees_nothing(seed_manager):
    mgr = seed_manager("clamped", max_batch_size=2, host_cache_size=0)
    assert not mgr.can_evict and mgr.host_tier.num_blocks == 0
    cache = mgr.create_cache("r")
    assert cache.resize(32 * 32)
    cache.suspend()
    other = mgr.create_cache("other")
    assert other.resize(33 * 32) is False  # 32 free; the held 32 never move
    assert cache.num_blocks == 32 and cache.suspended_blocks == 0
    assert cache.resume() is True  # utilization 0.5: allowed
    mgr.check_invariants()


def test_resume_is_refused_above_max_util_for_resume(seed_manager):
    mgr = seed_manager("clamped", max_batch_size=2, max_util_for_resume=0.5)
    cache = mgr.create_cache("r")
    assert cache.resize(33 * 32)
    cache.suspend()
    assert cache.resume() is False and cache.suspended  # 33/64 > 0.5
    other = mgr.create_cache("other")
    assert other.resize(32 * 32) and cache.num_blocks == 0  # r's pages moved down
    other.resize(0)
    assert cache.resume() is True and cache.num_blocks == 33


def test_release_returns_device_and_host_pages(seed_manager):
    mgr = seed_manager("clamped")
    cache = mgr.create_cache("r")
    cache.resize(64, history_length=3)
    cache.release()
    assert (cache.capacity, cache.history_length, cache.num_blocks) == (0, 0, 0)
    assert mgr.free_blocks == 64
    cache.resize(64)
    cache.suspend()
    cache.release()
    assert not cache.suspended and cache.suspended_blocks == 0


@pytest.mark.parametrize("act", ["resize", "grow", "suspend", "release", "resume", "row"])
def test_a_freed_handle_raises_and_leaves_the_slots_new_owner_alone(seed_manager, act):
    """After free("a") and a new cache in the same slot, the old handle may not take pages or
    touch the row (it used to write pages no live cache owns into the new cache's row)."""
    mgr = seed_manager("configured")
    stale = mgr.create_cache("a")
    assert stale.resize(64)
    mgr.free("a")
    new = mgr.create_cache("b")
    assert new.slot == stale.slot and new.resize(96)
    before = snapshot(mgr, new)
    calls = {
        "resize": lambda: stale.resize(20),
        "grow": lambda: stale.grow_within_pages(1),
        "suspend": stale.suspend,
        "release": stale.release,
        "resume": stale.resume,
        "row": lambda: stale.page_indices,
    }
    with pytest.raises(RuntimeError, match="'a' was freed .*KVCacheManager.free"):
        calls[act]()
    assert_unchanged(mgr, new, before)
    mgr.check_invariants()
