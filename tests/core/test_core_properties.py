"""Property tests (hypothesis): random geometries against the closed-form arithmetic, and random
operation sequences on a manager that must keep pages conserved, never hand a page out twice,
and leave everything untouched when a resize or resume is refused."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, rule

from kvlab import KVCacheManager, KVGeometry, MaxSeqLenClampWarning, PageIndexTooShort, PagePool

DTYPE_ELEMENT_BYTES_X16 = {"float32": 64, "float16": 32, "bfloat16": 32, "fp8": 16, "nvfp4": 9}


def closed_form_bytes_per_token(layers, heads, head_dim, dtype, tp, kv_factor, attention_dp):
    tp = 1 if attention_dp else tp
    per_elem_x16 = DTYPE_ELEMENT_BYTES_X16[dtype]  # nvfp4: 8 payload + 1 scale per 16 elements
    head_bytes = head_dim * per_elem_x16 // 16
    assert head_dim * per_elem_x16 % 16 == 0
    return layers * kv_factor * -(-heads // tp) * head_bytes


geometries = st.fixed_dictionaries(
    dict(
        num_layers=st.integers(1, 8),
        num_kv_heads=st.integers(1, 16),
        head_dim=st.sampled_from([16, 32, 64, 80, 128, 256]),
        dtype=st.sampled_from(sorted(DTYPE_ELEMENT_BYTES_X16)),
        tokens_per_block=st.sampled_from([1, 2, 8, 16, 32, 64]),
        tp_size=st.integers(1, 8),
        kv_factor=st.sampled_from([1, 2]),
        attention_dp=st.booleans(),
    )
)

# smaller shapes for the state machine, which clones the pool's storage at every step
small_geometries = st.fixed_dictionaries(
    dict(
        num_layers=st.integers(1, 2),
        num_kv_heads=st.integers(1, 4),
        head_dim=st.sampled_from([16, 32, 64]),
        dtype=st.sampled_from(sorted(DTYPE_ELEMENT_BYTES_X16)),
        tokens_per_block=st.sampled_from([1, 2, 4, 8, 16]),
        tp_size=st.integers(1, 4),
        kv_factor=st.sampled_from([1, 2]),
        attention_dp=st.booleans(),
    )
)


@settings(deadline=None, max_examples=80)
@given(
    geo_args=geometries,
    blocks=st.integers(1, 48),
    slack=st.integers(0, 10**6),
    max_seq_len=st.integers(1, 1 << 16),
    batch=st.integers(1, 4),
    policy=st.sampled_from(["clamped", "configured"]),
    extra=st.integers(0, 64),
    draft=st.integers(0, 8),
)
def test_random_geometry_agrees_with_closed_form(
    geo_args, blocks, slack, max_seq_len, batch, policy, extra, draft
):
    geo = KVGeometry(**geo_args)
    bpt = closed_form_bytes_per_token(
        geo_args["num_layers"],
        geo_args["num_kv_heads"],
        geo_args["head_dim"],
        geo_args["dtype"],
        geo_args["tp_size"],
        geo_args["kv_factor"],
        geo_args["attention_dp"],
    )
    tpb = geo_args["tokens_per_block"]
    assert geo.bytes_per_token == bpt
    assert geo.bytes_per_block == bpt * tpb
    page = bpt * tpb
    quota = blocks * page + slack % page  # some bytes that do not make a whole page
    if blocks * tpb <= extra:  # the pool holds no more than the extra tokens: refused by name
        with pytest.raises(ValueError, match="num_extra_kv_tokens"):
            KVCacheManager(
                geo,
                quota_bytes=quota,
                max_seq_len=max_seq_len,
                max_batch_size=batch,
                num_extra_kv_tokens=extra,
            )
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mgr = KVCacheManager(
            geo,
            quota_bytes=quota,
            max_seq_len=max_seq_len,
            max_batch_size=batch,
            page_index_policy=policy,
            num_extra_kv_tokens=extra,
            reserved_draft_tokens=draft,
        )
    clamped = [w for w in caught if issubclass(w.category, MaxSeqLenClampWarning)]
    assert mgr.total_blocks == quota // page == blocks
    assert mgr.pool.nbytes == blocks * page
    assert mgr.max_num_tokens == blocks * tpb - extra  # get_num_available_tokens
    assert mgr.max_seq_len == min(max_seq_len, blocks * tpb - extra)
    assert bool(clamped) == (max_seq_len > blocks * tpb - extra)
    sized_from = mgr.max_seq_len if policy == "clamped" else max_seq_len
    width = 4 * math.ceil(math.ceil((sized_from + extra + draft + 1) / tpb) / 4)
    assert mgr.max_blocks_per_seq == width
    assert mgr.page_index.table.shape == (1, batch + 1, 2, width)
    assert mgr.page_index.nbytes == (batch + 1) * 2 * width * 4


@settings(deadline=None, max_examples=60)
@given(
    num_blocks=st.integers(1, 32),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=40),
)
def test_pool_random_ops_conserve_pages(num_blocks, ops):
    pool = PagePool(num_blocks, 8)
    held: list[list[int]] = []
    for is_alloc, n in ops:
        if is_alloc or not held:
            free_before = pool.free_blocks
            pages = pool.allocate(n)
            if n > free_before:
                assert pages is None and pool.free_blocks == free_before
            else:
                assert len(pages) == n
                held.append(pages)
        else:
            pool.free(held.pop(n % len(held)))
        owned = [p for run in held for p in run]
        assert len(owned) == len(set(owned))
        assert pool.free_blocks + pool.used_blocks == num_blocks
        assert pool.used_blocks == len(owned)
        assert sorted(owned + pool.free_pages()) == list(range(num_blocks))
        assert all(pool.is_allocated(p) for p in owned)


class ManagerMachine(RuleBasedStateMachine):
    """Random create / resize / suspend / resume / free on a small manager."""

    caches = Bundle("caches")

    @initialize(
        geo_args=small_geometries,
        blocks=st.integers(1, 24),
        max_seq_len=st.integers(1, 2048),
        batch=st.integers(1, 4),
        policy=st.sampled_from(["clamped", "configured"]),
        extra=st.integers(0, 8),
        host=st.sampled_from([None, 0]),
    )
    def build(self, geo_args, blocks, max_seq_len, batch, policy, extra, host):
        geo = KVGeometry(**geo_args)
        blocks = max(blocks, extra // geo.tokens_per_block + 1)  # more than the extra tokens
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MaxSeqLenClampWarning)
            self.mgr = KVCacheManager(
                geo,
                quota_bytes=blocks * geo.bytes_per_block,
                max_seq_len=max_seq_len,
                max_batch_size=batch,
                page_index_policy=policy,
                num_extra_kv_tokens=extra,
                host_cache_size=host,
            )
        self.counter = 0
        self.model = {}  # request_id -> (capacity, history)

    # -- helpers ---------------------------------------------------------------------------
    def snapshot(self):
        mgr = self.mgr
        return (
            mgr.free_blocks,
            mgr.pool.free_pages(),
            mgr.page_index.table.clone(),
            {
                rid: (c.capacity, c.history_length, list(c.pages), c.suspended, c.suspended_blocks)
                for rid, c in mgr.caches.items()
            },
            mgr.pool.storage.clone(),
        )

    def assert_same(self, before):
        after = self.snapshot()
        assert after[0] == before[0] and after[1] == before[1] and after[3] == before[3]
        assert torch.equal(after[2], before[2]) and torch.equal(after[4], before[4])

    # -- rules -----------------------------------------------------------------------------
    @rule(target=caches)
    def create(self):
        if self.mgr.page_index.free_slots == 0:
            with pytest.raises(RuntimeError):
                self.mgr.create_cache("overflow")
            return None
        rid = f"r{self.counter}"
        self.counter += 1
        self.mgr.create_cache(rid)
        self.model[rid] = (0, 0)
        return rid

    @rule(
        rid=caches,
        cap_seed=st.integers(0, 1 << 20),
        hist_pct=st.integers(0, 100),
        history_mode=st.sampled_from(["keep", "grow", "grow", "shrink"]),
    )
    def resize(self, rid, cap_seed, hist_pct, history_mode):
        if rid is None or rid not in self.mgr.caches:
            return
        cache = self.mgr.caches[rid]
        if cache.suspended:
            return
        span = self.mgr.page_index_span_tokens
        capacity = cap_seed % (span + span // 4 + 2)  # up to a quarter past the row's span
        old_cap, old_hist = self.model[rid]
        history = {
            "keep": None,
            "grow": old_hist + max(0, capacity - old_hist) * hist_pct // 100,
            "shrink": old_hist - 1 - hist_pct % max(1, old_hist),
        }[history_mode]
        before = self.snapshot()
        free_before = self.mgr.free_blocks
        movable = self.mgr.host_tier.movable_blocks  # suspended pages a growth may move down
        tpb = self.mgr.tokens_per_block
        need = -(-capacity // tpb)
        if capacity < old_hist or (history is not None and history < old_hist):
            # native step 1: history errors come before everything, PageIndexTooShort included
            with pytest.raises(ValueError) as info:
                cache.resize(capacity, history)
            assert not isinstance(info.value, PageIndexTooShort)
            self.assert_same(before)
            return
        if need != cache.num_blocks and need > self.mgr.max_blocks_per_seq:
            with pytest.raises(PageIndexTooShort) as info:
                cache.resize(capacity, history)
            assert info.value.needed_entries == need
            self.assert_same(before)
            return
        ok = cache.resize(capacity, history)
        grow = need - len(before[3][rid][2])
        if grow <= free_before:
            assert ok
        elif grow > free_before + movable:
            assert not ok
        if ok:
            self.model[rid] = (capacity, old_hist if history is None else history)
            assert cache.num_blocks == need
            if grow <= free_before:
                assert self.mgr.free_blocks == free_before - grow
        else:
            self.assert_same(before)

    @rule(rid=caches)
    def suspend(self, rid):
        if rid is None or rid not in self.mgr.caches:
            return
        cache = self.mgr.caches[rid]
        held = cache.num_blocks
        free_before = self.mgr.free_blocks
        was = cache.suspended
        cache.suspend()
        assert cache.suspended
        if not was:  # the pages stay on the GPU until an allocation needs them
            assert self.mgr.free_blocks == free_before and cache.num_blocks == held
            assert cache.suspended_blocks == 0

    @rule(rid=caches)
    def resume(self, rid):
        if rid is None or rid not in self.mgr.caches:
            return
        cache = self.mgr.caches[rid]
        if not cache.suspended:
            assert cache.resume() is True
            return
        mgr = self.mgr
        need, held = cache.suspended_blocks, cache.num_blocks
        util_ok = mgr.pool.used_blocks <= mgr.max_util_for_resume * mgr.total_blocks
        movable = mgr.host_tier.movable_blocks
        before = self.snapshot()
        ok = cache.resume()
        if not util_ok or need > before[0] + movable:
            assert not ok
        elif need <= before[0]:
            assert ok
        if ok:
            assert cache.num_blocks == need + held and not cache.suspended
        else:
            self.assert_same(before)

    @rule(rid=consumes(caches))
    def free(self, rid):
        if rid is None or rid not in self.mgr.caches:
            return
        slots = self.mgr.page_index.free_slots
        self.mgr.free(rid)
        del self.model[rid]
        assert self.mgr.page_index.free_slots == slots + 1

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def pages_conserved_and_unique(self):
        mgr = self.mgr
        mgr.check_invariants()
        owned = [p for c in mgr.caches.values() for p in c.pages]
        assert len(owned) == len(set(owned))
        assert mgr.free_blocks + len(owned) == mgr.total_blocks
        assert mgr.pool.free_blocks + mgr.pool.used_blocks == mgr.pool.num_blocks
        assert sorted(owned + mgr.pool.free_pages()) == list(range(mgr.total_blocks))

    @invariant()
    def model_agrees(self):
        for rid, (capacity, history) in self.model.items():
            cache = self.mgr.caches[rid]
            assert (cache.capacity, cache.history_length) == (capacity, history)
            if not cache.suspended:
                assert cache.num_blocks == -(-capacity // self.mgr.tokens_per_block)
        slots = {c.slot for c in self.mgr.caches.values()}
        assert len(slots) == len(self.mgr.caches)
        assert self.mgr.page_index.dummy_slot not in slots


TestManagerMachine = ManagerMachine.TestCase
TestManagerMachine.settings = settings(
    deadline=None,
    max_examples=60,
    stateful_step_count=30,
    suppress_health_check=[HealthCheck.too_slow],
)
