"""KVCacheManager: the seed's tables, docs/DESIGN.md's contract, the clamp, resize_context, free."""

import warnings

import pytest
import torch

import kvlab
from kvlab import (
    PAGE_INDEX_TOO_SHORT_MESSAGE,
    KVCache,
    KVCacheManager,
    KVGeometry,
    MaxSeqLenClampWarning,
    PageIndexTooShort,
    Request,
)
from kvlab.analysis.presets import seed_geometry

# -- docs/DESIGN.md's public contract, verbatim -----------------------------------------------------


def test_design_contract_snippet_clamped(recwarn):
    # docs/DESIGN.md "The public contract", line for line, with each commented value asserted.
    from kvlab import KVCacheManager, PageIndexTooShort

    geo = KVGeometry(
        num_layers=2, num_kv_heads=2, head_dim=128, dtype="float16", tokens_per_block=32
    )
    geo.bytes_per_token  # 2048
    assert geo.bytes_per_token == 2048
    mgr = KVCacheManager(
        geo,
        quota_bytes=4 * 2**20,
        max_seq_len=8192,
        max_batch_size=1,
        page_index_policy="clamped",  # or "configured" (the one-line fix)
        device="cpu",
    )  # or "cuda": the pool is a real tensor there
    assert any(issubclass(w.category, MaxSeqLenClampWarning) for w in recwarn.list)
    mgr.total_blocks, mgr.free_blocks  # 64, 64
    assert (mgr.total_blocks, mgr.free_blocks) == (64, 64)
    mgr.max_seq_len  # 2048 (clamped); mgr.configured_max_seq_len == 8192
    assert mgr.max_seq_len == 2048 and mgr.configured_max_seq_len == 8192
    mgr.max_blocks_per_seq  # 68 ("clamped") or 260 ("configured")
    assert mgr.max_blocks_per_seq == 68
    cache = mgr.create_cache("req-0")  # a KVCache
    assert isinstance(cache, KVCache)
    with pytest.raises(PageIndexTooShort) as info:
        cache.resize(8192)  # "clamped": raises PageIndexTooShort (a ValueError) with
        #   the native message
    assert isinstance(info.value, ValueError)
    assert str(info.value) == "User-provided base page indices is too short"
    assert cache.capacity == 0 and mgr.free_blocks == 64
    cache.resize(32)  # True; mgr.free_blocks == 63
    assert mgr.free_blocks == 63


def test_design_contract_snippet_configured(recwarn):
    from kvlab import KVCacheManager

    geo = KVGeometry(
        num_layers=2, num_kv_heads=2, head_dim=128, dtype="float16", tokens_per_block=32
    )
    geo.bytes_per_token  # 2048
    assert geo.bytes_per_token == 2048
    mgr = KVCacheManager(
        geo,
        quota_bytes=4 * 2**20,
        max_seq_len=8192,
        max_batch_size=1,
        page_index_policy="configured",  # the one-line fix
        device="cpu",
    )  # or "cuda": the pool is a real tensor there
    assert any(issubclass(w.category, MaxSeqLenClampWarning) for w in recwarn.list)
    mgr.total_blocks, mgr.free_blocks  # 64, 64
    assert (mgr.total_blocks, mgr.free_blocks) == (64, 64)
    mgr.max_seq_len  # 2048 (clamped); mgr.configured_max_seq_len == 8192
    assert mgr.max_seq_len == 2048 and mgr.configured_max_seq_len == 8192
    mgr.max_blocks_per_seq  # 68 ("clamped") or 260 ("configured")
    assert mgr.max_blocks_per_seq == 260
    cache = mgr.create_cache("req-0")  # a KVCache
    assert isinstance(cache, KVCache)
    result = cache.resize(8192)  # "configured": returns False,
    #   cache.capacity and mgr.free_blocks unchanged
    assert result is False
    assert cache.capacity == 0 and mgr.free_blocks == 64
    result = cache.resize(32)  # True; mgr.free_blocks == 63
    assert result is True and mgr.free_blocks == 63


def test_public_names_exist():
    for name in (
        "KVGeometry",
        "KVCacheManager",
        "PageIndexTooShort",
        "Request",
        "KVCache",
        "MaxSeqLenClampWarning",
        "MemoryBudget",
        "PagePool",
        "PageIndexTable",
        "max_blocks_per_seq",
        "PAGE_INDEX_TOO_SHORT_MESSAGE",
    ):
        assert hasattr(kvlab, name), name
    assert issubclass(PageIndexTooShort, ValueError)
    assert PAGE_INDEX_TOO_SHORT_MESSAGE == "User-provided base page indices is too short"


# -- the seed's tables -------------------------------------------------------------------------


def test_seed_clamp_warning_with_the_numbers():
    with pytest.warns(MaxSeqLenClampWarning) as record:
        mgr = KVCacheManager(
            seed_geometry(), quota_bytes=4 * 2**20, max_seq_len=8192, max_batch_size=1
        )
    message = str(record[0].message)
    assert (
        "max_seq_len=8,192 is larger" in message
        and "2,048 tokens in 64 blocks" in message
        and message.endswith("to 2,048")
    )
    assert mgr.max_num_tokens == 2048
    assert mgr.max_seq_len == 2048
    assert mgr.configured_max_seq_len == 8192


def test_no_warning_when_the_pool_holds_max_seq_len():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mgr = KVCacheManager(
            seed_geometry(),
            quota_bytes=4 * 2**20,
            max_seq_len=2048,
            max_batch_size=1,
            page_index_policy="configured",
        )
    assert mgr.max_seq_len == mgr.configured_max_seq_len == 2048
    assert mgr.max_blocks_per_seq == 68  # both policies agree without a clamp


@pytest.mark.parametrize("policy, width", [("clamped", 68), ("configured", 260)])
def test_seed_table(seed_manager, policy, width):
    mgr = seed_manager(policy)
    assert mgr.geometry.bytes_per_token == 2048
    assert mgr.total_blocks == mgr.free_blocks == 64
    assert mgr.pool.nbytes == 4 * 2**20
    assert mgr.max_seq_len == 2048
    assert mgr.max_blocks_per_seq == width
    assert mgr.page_index.width == width
    assert mgr.page_index.slots == 2  # batch 1 + the CUDA-graph dummy
    assert mgr.page_index.nbytes == 2 * 2 * width * 4
    assert mgr.page_index_policy == policy


def test_seed_clamped_raises_native_valueerror(seed_manager, device):
    mgr = seed_manager("clamped", device=device)
    cache = mgr.create_cache("req-0")
    with pytest.raises(ValueError) as info:
        cache.resize(8192)
    assert str(info.value) == "User-provided base page indices is too short"
    assert isinstance(info.value, PageIndexTooShort) and info.value.request_id == "req-0"
    assert info.value.needed_entries == 256
    assert info.value.available_entries == 68


def test_seed_configured_false_preserves_state_then_retry(seed_manager, device):
    mgr = seed_manager("configured", device=device)
    cache = mgr.create_cache("req-0")
    row_before = cache.page_indices.clone()
    table_before = mgr.page_index.table.clone()
    storage_before = mgr.pool.storage.clone()
    pages_before = list(cache.pages)
    assert cache.resize(8192) is False
    assert cache.capacity == 0
    assert cache.pages == pages_before == []
    assert mgr.free_blocks == 64
    assert torch.equal(cache.page_indices, row_before)
    assert torch.equal(mgr.page_index.table, table_before)
    assert torch.equal(mgr.pool.storage, storage_before)
    mgr.check_invariants()
    # the manual 32-token retry
    assert cache.resize(32) is True
    assert mgr.free_blocks == 63
    assert cache.capacity == 32 and cache.num_blocks == 1
    page = cache.pages[0]
    assert int(cache.page_indices[0]) == page
    assert mgr.pool.is_allocated(page)
    assert set(cache.page_indices[1:].tolist()) == {-1}
    mgr.check_invariants()


# -- resize_context ----------------------------------------------------------------------------


def test_resize_context_target_arithmetic():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxSeqLenClampWarning)
        mgr = KVCacheManager(
            seed_geometry(),
            quota_bytes=4 * 2**20,
            max_seq_len=8192,
            max_batch_size=2,
            num_extra_kv_tokens=5,
        )
    req = Request("r", prompt_len=1000, max_new_tokens=10)
    mgr.prepare_context(req)
    assert mgr.resize_context(req, 100) is True
    cache = mgr.get_cache(req)
    assert cache.capacity == 0 + 100 + 5
    req.context_current_position = 100
    assert mgr.resize_context(req, 200) is True
    assert cache.capacity == 100 + 200 + 5
    assert cache.num_blocks == -(-305 // 32)
    # a target below the capacity keeps the capacity (max(capacity, target))
    req.context_current_position = 10
    assert mgr.resize_context(req, 1) is True
    assert cache.capacity == 305
    mgr.check_invariants()


def test_resize_context_raises_page_index_too_short_uncaught(seed_manager):
    mgr = seed_manager("clamped")
    req = Request("big", prompt_len=8192, max_new_tokens=16)
    mgr.prepare_context(req)
    with pytest.raises(PageIndexTooShort):
        mgr.resize_context(req, 8192)
    cache = mgr.get_cache("big")
    assert not cache.suspended and cache.capacity == 0 and mgr.free_blocks == 64


def test_resize_context_first_chunk_is_suspended_on_false(seed_manager):
    mgr = seed_manager("configured")
    req = Request("big", prompt_len=8192, max_new_tokens=16)
    assert mgr.prepare_context(req)
    cache = mgr.get_cache(req)
    assert mgr.resize_context(req, 8192) is False
    assert cache.suspended
    assert mgr.free_blocks == 64 and cache.capacity == 0


def test_resize_context_later_chunk_is_not_suspended_on_false(seed_manager):
    mgr = seed_manager("configured")
    req = Request("big", prompt_len=8192, max_new_tokens=16)
    assert mgr.prepare_context(req)
    cache = mgr.get_cache(req)
    assert mgr.resize_context(req, 1024) is True
    req.context_current_position = 1024
    assert mgr.resize_context(req, 2048) is False
    assert not cache.suspended
    assert cache.capacity == 1024 and cache.num_blocks == 32 and mgr.free_blocks == 32
    mgr.check_invariants()


def test_prepare_context_is_idempotent_and_answers_for_the_slot(seed_manager):
    mgr = seed_manager("clamped")
    req = Request("r", prompt_len=10, max_new_tokens=1)
    assert mgr.prepare_context(req) is True
    cache = mgr.get_cache(req)
    assert mgr.prepare_context(req) is True and mgr.get_cache("r") is cache
    while mgr.free_slots:
        mgr.create_cache(f"filler-{mgr.free_slots}")
    assert mgr.prepare_context(Request("late", prompt_len=10, max_new_tokens=1)) is False


# -- caches: create, free, suspend, resume -----------------------------------------------------


def test_create_cache_errors(seed_manager):
    mgr = seed_manager("clamped")
    mgr.create_cache("a")
    with pytest.raises(ValueError, match="already has a cache"):
        mgr.create_cache("a")
    with pytest.raises(RuntimeError, match="slots"):  # batch 1: one slot
        mgr.create_cache("b")
    for bad in ("", None, 3):
        with pytest.raises(ValueError, match="request_id"):
            mgr.create_cache(bad)
    with pytest.raises(KeyError, match="nope"):
        mgr.get_cache("nope")


def test_free_returns_everything(seed_manager):
    mgr = seed_manager("clamped", max_batch_size=3)
    a, b, c = (mgr.create_cache(x) for x in "abc")
    assert a.resize(320) and b.resize(640) and c.resize(96)
    b.suspend()
    assert mgr.free_blocks == 64 - 10 - 20 - 3  # b's pages stay held while suspended
    taken = mgr.allocate_pages(64 - 10 - 3)  # ... until an allocation moves them down
    assert taken is not None and b.suspended_blocks == 20 and mgr.free_blocks == 0
    mgr.pool.free(taken)
    mgr.free("a")
    mgr.free(Request("b", prompt_len=1, max_new_tokens=0))  # the suspended one
    mgr.free(c)
    assert mgr.free_blocks == 64 and mgr.caches == {}
    assert mgr.page_index.free_slots == 3
    assert bool((mgr.page_index.table == -1).all())
    mgr.check_invariants()
    # the slots and pages are usable again
    d = mgr.create_cache("d")
    assert d.resize(2048) and mgr.free_blocks == 0


def test_free_of_a_stale_cache_object_leaves_other_caches_alone(seed_manager):
    mgr = seed_manager("clamped", max_batch_size=2)
    a = mgr.create_cache("a")
    mgr.free(a)
    b = mgr.create_cache("b")  # takes a's old slot
    assert b.slot == a.slot
    assert b.resize(64)
    with pytest.raises(KeyError):
        mgr.free(a)
    assert b.page_indices.tolist()[:2] == b.pages
    c = mgr.create_cache("c")
    assert c.slot != b.slot
    mgr.check_invariants()


def test_manager_suspend_resume(seed_manager):
    mgr = seed_manager("clamped")
    cache = mgr.create_cache("r")
    cache.resize(100)
    mgr.suspend("r")
    assert cache.suspended and not mgr.is_request_active("r") and mgr.free_blocks == 60
    assert mgr.resume("r") is True and mgr.is_request_active("r")
    assert cache.num_blocks == 4 and mgr.free_blocks == 60


def test_pages_held_back_are_outside_every_cache_and_never_free(seed_manager):
    mgr = seed_manager("clamped")
    assert mgr.hold_back(1) == [0]  # the pool hands out page 0 first (vLLM's null block)
    assert mgr.free_blocks == 63 and mgr.pool.is_allocated(0) and not mgr.caches
    assert mgr.page_index.free_slots == 1  # no page-index row
    mgr.check_invariants()  # conserved: held back counts with the owned pages
    cache = mgr.create_cache("r")
    assert cache.resize(63 * 32) and 0 not in cache.pages
    assert not cache.resize(64 * 32)  # the held-back page is not there to take
    mgr.free(cache)
    assert mgr.free_blocks == 63
    mgr.check_invariants()
    with pytest.raises(ValueError, match=r"count must be in \[0, 63\], got 64"):
        mgr.hold_back(64)
    mgr.pool.free([0])  # a held-back page given back behind the manager's back
    with pytest.raises(AssertionError):
        mgr.check_invariants()


def test_pages_held_back_go_back_to_the_pool_only_when_released(seed_manager):
    """SGLang's radix cache holds its tokens outside every request and evicts some later."""
    mgr = seed_manager("clamped")
    mgr.hold_back(5)
    mgr.release_held_back(2)
    assert mgr.free_blocks == 61
    mgr.check_invariants()
    with pytest.raises(ValueError, match=r"count must be in \[0, 3\]"):
        mgr.release_held_back(4)
    mgr.release_held_back(3)
    assert mgr.free_blocks == 64
    mgr.check_invariants()


def test_a_hand_over_leaves_the_pool_as_a_shrink_then_a_hold_back(seed_manager):
    """SGLang's tree takes over the KV a request computed: the pages it keeps stay taken (held
    back), the others go back, exactly as a shrink then a hold_back leave them."""
    ends = []
    for handed in (True, False):
        mgr = seed_manager("clamped")
        cache = mgr.create_cache("r")
        assert cache.resize(10 * 32) and cache.num_blocks == 10
        if handed:
            mgr.hand_over(cache, 4, 3)
        else:
            mgr.shrink(cache, 4)
            mgr.hold_back(3)
        mgr.check_invariants()
        ends.append((cache.pages, mgr.pool.free_pages(), list(mgr._held_back), cache.page_indices))
    (pages, free, held, row), before = ends
    assert len(pages) == 4 and len(held) == 3 and len(free) == 64 - 7
    assert (pages, free, held) == before[:3] and torch.equal(row, before[3])


def test_check_invariants_catches_a_corrupted_row(seed_manager):
    mgr = seed_manager("clamped", max_batch_size=2)
    a, b = mgr.create_cache("a"), mgr.create_cache("b")
    a.resize(64)
    b.resize(64)
    mgr.check_invariants()
    mgr.page_index.table[0, a.slot, 0, 1] = b.pages[0]  # a's row now names b's page
    with pytest.raises(AssertionError, match="disagrees"):
        mgr.check_invariants()
    mgr.page_index.table[0, a.slot, 0, 1] = a.pages[1]
    mgr.check_invariants()
    mgr.page_index.table[0, a.slot, 0, 5] = 9  # a stale entry past the owned pages
    with pytest.raises(AssertionError, match="stale"):
        mgr.check_invariants()


def test_check_invariants_catches_a_page_owned_twice_and_a_leak(seed_manager):
    mgr = seed_manager("clamped", max_batch_size=2)
    a, b = mgr.create_cache("a"), mgr.create_cache("b")
    a.resize(64)
    b.resize(32)
    b.pages.append(a.pages[0])
    with pytest.raises(AssertionError):
        mgr.check_invariants()
    b.pages.pop()
    mgr.check_invariants()
    mgr.pool.allocate(1)  # a page nobody owns
    with pytest.raises(AssertionError, match="not conserved"):
        mgr.check_invariants()


def test_pp_size_and_disaggregated_slots():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxSeqLenClampWarning)
        mgr = KVCacheManager(
            seed_geometry(),
            quota_bytes=4 * 2**20,
            max_seq_len=8192,
            max_batch_size=4,
            pp_size=2,
            disaggregated=True,
        )
    assert mgr.page_index.slots == 4 * 2 * 2 + 1


def test_extra_and_draft_tokens_widen_the_row():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxSeqLenClampWarning)
        mgr = KVCacheManager(
            seed_geometry(),
            quota_bytes=4 * 2**20,
            max_seq_len=8192,
            max_batch_size=1,
            num_extra_kv_tokens=40,
            reserved_draft_tokens=24,
        )
    # clamped 2048 + 40 + 24 + 1 = 2113 -> 67 -> 68
    assert mgr.max_blocks_per_seq == 68
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxSeqLenClampWarning)
        mgr = KVCacheManager(
            seed_geometry(),
            quota_bytes=4 * 2**20,
            max_seq_len=8192,
            max_batch_size=1,
            num_extra_kv_tokens=100,
            reserved_draft_tokens=28,
            page_index_policy="configured",
        )
    # configured 8192 + 100 + 28 + 1 = 8321 -> 261 -> 264
    assert mgr.max_blocks_per_seq == 264


def test_quota_that_holds_no_page_is_an_error():
    geo = seed_geometry()
    with pytest.raises(ValueError, match="quota_bytes"):
        KVCacheManager(geo, quota_bytes=geo.bytes_per_block - 1, max_seq_len=32, max_batch_size=1)
    mgr = KVCacheManager(geo, quota_bytes=geo.bytes_per_block, max_seq_len=32, max_batch_size=1)
    assert mgr.total_blocks == 1


def test_repr_mentions_the_numbers(seed_manager):
    text = repr(seed_manager("configured"))
    assert (
        "64 blocks x 65,536 B" in text
        and "max_seq_len=2,048" in text
        and "(configured 8,192)" in text
        and "260" in text
    )


def test_grow_each_takes_one_allocation_all_or_none(seed_manager):
    mgr = seed_manager("configured", max_batch_size=3)
    caches = [mgr.create_cache(f"r{i}") for i in range(3)]
    for cache, tokens in zip(caches, (32, 40, 64)):
        assert cache.resize(tokens)
    allocations = mgr.pool.counters.allocations
    assert mgr.grow_each(caches)  # 33 and 41 need a page, 65 too
    assert [c.capacity for c in caches] == [33, 41, 65] and [c.num_blocks for c in caches] == [
        2,
        2,
        3,
    ]
    assert mgr.pool.counters.allocations == allocations + 1
    mgr.check_invariants()
    assert caches[0].resize(mgr.free_blocks * 32 + 33)  # the pool is full now
    assert not mgr.grow_each(caches[1:], 32) and [c.capacity for c in caches[1:]] == [41, 65]
    mgr.check_invariants()
    mgr.free(caches[2])
    with pytest.raises(ValueError, match="'r2' is not an active cache of this manager"):
        mgr.grow_each(caches)


# -- the allocation steps the scheduler asks for -------------------------------------------------


def test_prepare_then_resize_context_as_the_scheduler_asks(seed_manager):
    mgr = seed_manager("configured", max_batch_size=1)  # 64 pages of 32 tokens, one row
    first = Request("a", 8192, 1)
    assert mgr.prepare_context(first) and mgr.resize_context(first, 1000)
    assert mgr.get_cache(first).capacity == 1000 and mgr.is_request_active(first)
    # no free row for a second request: prepare fails, nothing is created
    assert not mgr.prepare_context(Request("b", 10, 1)) and "b" not in mgr.caches
    mgr.free(first)
    # more than the pool, within the row: refused, the first chunk's cache left suspended
    second = Request("c", 8192, 1)
    assert mgr.prepare_context(second) and not mgr.resize_context(second, 64 * 32 + 1)
    assert mgr.get_cache(second).suspended and mgr.free_blocks == 64
    mgr.check_invariants()


def test_try_allocate_generation_resumes_then_grows(seed_manager):
    mgr = seed_manager("configured", max_batch_size=2, host_cache_size=4 * 2**20)
    request = Request("a", 64, 8)
    assert mgr.prepare_context(request) and mgr.resize_context(request, 64)
    mgr.suspend(request)
    assert not mgr.is_request_active(request)
    assert mgr.try_allocate_generation(request)
    assert mgr.is_request_active(request) and mgr.get_cache(request).capacity == 65
    mgr.check_invariants()


def test_prepare_disagg_gen_init_frees_what_it_could_not_fill(seed_manager):
    mgr = seed_manager("configured", max_batch_size=2)
    fits = Request("a", 1000, 4, disagg_generation_init=True)
    assert mgr.prepare_disagg_gen_init(fits) and mgr.get_cache(fits).history_length == 1000
    too_big = Request("b", 2000, 4, disagg_generation_init=True)  # 1,048 tokens left
    assert not mgr.prepare_disagg_gen_init(too_big)
    assert "b" not in mgr.caches and mgr.free_slots == 1
    with pytest.raises(PageIndexTooShort) as info:
        mgr.prepare_disagg_gen_init(Request("c", 9000, 4, disagg_generation_init=True))
    assert info.value.request_id == "c" and "c" not in mgr.caches
    mgr.check_invariants()
