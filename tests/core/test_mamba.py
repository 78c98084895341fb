"""Recurrent-state residency (docs/REFERENCE.md §5): MambaGeometry's slot arithmetic,
MambaHybridCacheManager's merged residency (the default: the real ValueError, no cap), the two
proposals (PR #17261's clamp, closed without merging, with the scheduler's first-chunk gate;
PR #18985's feasible max_batch_size default and quota message, open), and the clamp review's
three findings, each failing with its switch set to the buggy behaviour."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import (
    KVCacheManager,
    KVGeometry,
    MambaGeometry,
    MambaHybridCacheManager,
    Request,
    Scheduler,
    SchedulerDeadlock,
    StateSlotsExhausted,
    plan_residency,
    qwen3_5_27b_attention,
    qwen3_5_27b_mamba,
    simulate,
)
from kvlab.case_studies import BreakOnCapScheduler, DisaggBypassScheduler, NoneFirstManager
from kvlab.core.mamba import (
    GENERIC_MAX_BATCH_SIZE,
    QUOTA_TOO_SMALL,
    cache_size_per_token,
    proposed_quota_error,
)
from kvlab.run.comm import ThreadComm, TorchComm, in_threads
from kvlab.run.supervisor import free_port

GIB = 2**30
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# A tiny hybrid model: 2816-byte slots, 128-byte attention pages of 4 tokens.
SMALL_MAMBA = MambaGeometry(
    num_mamba_layers=2,
    mamba_num_heads=4,
    mamba_head_dim=8,
    d_state=8,
    n_groups=2,
    d_conv=4,
    conv_dtype="bfloat16",
    ssm_dtype="float32",
)
SMALL_ATTN = KVGeometry(
    num_layers=1, num_kv_heads=1, head_dim=8, dtype="float16", tokens_per_block=4
)
SLOT = SMALL_MAMBA.bytes_per_slot
PAGE = SMALL_ATTN.bytes_per_block


def quota_for(resident: int, pages: int, dummies: int = 1) -> int:
    """``resident`` resident slots + dummies + ``pages`` attention pages; pages stay below one
    slot's bytes so that the quota affords exactly ``resident`` (the clamp leaves the
    attention pool what remains after the slots, at least one page)."""
    assert 1 <= pages and pages * PAGE < SLOT
    return (resident + dummies) * SLOT + pages * PAGE


def manager(resident_affordable: int, max_batch_size: int, pages: int = 20, **kwargs):
    """A manager whose quota affords ``resident_affordable`` sequences (merged residency unless
    ``residency`` is given: it raises when that is below ``max_batch_size``)."""
    return MambaHybridCacheManager(
        SMALL_ATTN,
        SMALL_MAMBA,
        quota_for(resident_affordable, pages),
        max_seq_len=pages * SMALL_ATTN.tokens_per_block,
        max_batch_size=max_batch_size,
        **kwargs,
    )


# --- slot arithmetic ----------------------------------------------------------------------


def independent_slot_bytes(g: MambaGeometry) -> int:
    """The state tensors' sizes, from their shapes (meta tensors: nothing is allocated)."""
    conv_channels = (g.mamba_num_heads * g.mamba_head_dim + 2 * g.n_groups * g.d_state) // g.tp_size
    conv = torch.empty(
        (g.num_mamba_layers, conv_channels, g.d_conv - 1),
        dtype=TORCH_DTYPES[g.conv_dtype],
        device="meta",
    )
    ssm = torch.empty(
        (g.num_mamba_layers, g.mamba_num_heads // g.tp_size, g.mamba_head_dim, g.d_state),
        dtype=TORCH_DTYPES[g.ssm_dtype],
        device="meta",
    )
    return conv.numel() * conv.element_size() + ssm.numel() * ssm.element_size()


geometries = st.builds(
    # heads: whole groups of heads_per_group each, both split over tp
    lambda layers, heads_per_group, head_dim, d_state, groups_per, d_conv, cd, sd, tp: (
        MambaGeometry(
            layers,
            heads_per_group * groups_per * tp,
            head_dim,
            d_state,
            groups_per * tp,
            d_conv,
            cd,
            sd,
            tp,
        )
    ),
    st.integers(0, 64),
    st.integers(1, 4),
    st.integers(1, 256),
    st.integers(1, 256),
    st.integers(1, 8),
    st.integers(2, 8),
    st.sampled_from(list(TORCH_DTYPES)),
    st.sampled_from(list(TORCH_DTYPES)),
    st.sampled_from([1, 2, 4, 8]),
)


@settings(max_examples=200, deadline=None)
@given(geometries)
def test_slot_bytes_match_the_state_tensors(g):
    assert g.bytes_per_slot == independent_slot_bytes(g)
    assert g.bytes_per_slot == g.num_mamba_layers * (g.conv_bytes + g.ssm_bytes)


@settings(max_examples=200, deadline=None)
@given(geometries)
def test_slot_bytes_split_evenly_over_tp(g):
    whole = MambaGeometry(
        g.num_mamba_layers,
        g.mamba_num_heads,
        g.mamba_head_dim,
        g.d_state,
        g.n_groups,
        g.d_conv,
        g.conv_dtype,
        g.ssm_dtype,
        tp_size=1,
    )
    assert g.bytes_per_slot * g.tp_size == whole.bytes_per_slot


def test_small_geometry_by_hand():
    assert SMALL_MAMBA.conv_dim == 4 * 8 + 2 * 2 * 8 == 64
    assert SMALL_MAMBA.conv_bytes == 64 * 3 * 2
    assert SMALL_MAMBA.ssm_bytes == 4 * 8 * 8 * 4
    assert SLOT == 2 * (384 + 1024) == 2816


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(num_mamba_layers=-1), ValueError, "num_mamba_layers"),
        (dict(mamba_num_heads=0), ValueError, "mamba_num_heads"),
        (dict(d_conv=1), ValueError, "d_conv"),
        (dict(ssm_dtype="fp8"), ValueError, "ssm_dtype"),
        (dict(conv_dtype="int8"), ValueError, "conv_dtype"),
        (dict(tp_size=3), ValueError, "divisible by tp_size=3"),
        (dict(d_state=2.5), TypeError, "d_state"),
    ],
)
def test_geometry_arguments_are_validated(kwargs, error, text):
    args = dict(
        num_mamba_layers=2, mamba_num_heads=4, mamba_head_dim=8, d_state=8, n_groups=2, d_conv=4
    )
    args.update(kwargs)
    with pytest.raises(error, match=text):
        MambaGeometry(**args)


# --- the PR's numbers ----------------------------------------------------------------------


def test_qwen3_5_27b_geometry():
    g = qwen3_5_27b_mamba()
    assert (
        g.num_mamba_layers,
        g.mamba_num_heads,
        g.mamba_head_dim,
        g.d_state,
        g.n_groups,
        g.d_conv,
        g.conv_dtype,
        g.ssm_dtype,
    ) == (48, 48, 128, 128, 16, 4, "bfloat16", "float32")
    assert g.conv_dim == 128 * 48 + 2 * 16 * 128 == 10240
    a = qwen3_5_27b_attention()
    assert (a.num_layers, a.num_kv_heads, a.head_dim, a.dtype) == (16, 4, 256, "bfloat16")
    assert a.bytes_per_block == 16 * 2 * 4 * 256 * 2 * 32 == 2 * 2**20


def test_pr_37_5_gib_implies_bf16_ssm_state():
    """513 slots (512 sequences + 1 dummy) need 37.48 GiB only with a bfloat16 SSM state; the
    config's float32 would need 73.55 GiB."""
    bf16 = 513 * qwen3_5_27b_mamba(ssm_dtype="bfloat16").bytes_per_slot
    fp32 = 513 * qwen3_5_27b_mamba(ssm_dtype="float32").bytes_per_slot
    assert qwen3_5_27b_mamba(ssm_dtype="bfloat16").bytes_per_slot == 78_446_592
    assert round(bf16 / GIB, 2) == 37.48
    assert round(fp32 / GIB, 2) == 73.55
    plan = plan_residency(
        qwen3_5_27b_mamba(ssm_dtype="bfloat16"),
        qwen3_5_27b_attention(),
        int(24.86 * GIB),
        max_batch_size=512,
    )
    assert plan.requested + plan.dummies == 513


def test_pr_quota_raw_error_and_clamp():
    """24.86 GiB: merged residency (the default) refuses to build; PR #17261's clamp would leave
    339 resident sequences (340 slots with the dummy); a float32 state would leave 172."""
    quota = int(24.86 * GIB)
    mamba, attn = qwen3_5_27b_mamba(ssm_dtype="bfloat16"), qwen3_5_27b_attention()
    plan = plan_residency(mamba, attn, quota, max_batch_size=512)
    need = 513 * 78_446_592 + 2 * 2**20
    assert plan.raw_need_bytes == need
    with pytest.raises(ValueError) as info:  # raised before anything is allocated
        MambaHybridCacheManager(
            attn, mamba, quota, max_seq_len=4096, max_batch_size=512, residency="raw"
        )
    assert str(info.value) == QUOTA_TOO_SMALL.format(got=quota, need=need)
    with pytest.raises(ValueError) as default:  # the default is merged residency
        MambaHybridCacheManager(attn, mamba, quota, max_seq_len=4096, max_batch_size=512)
    assert str(default.value) == str(info.value)
    assert str(info.value) == (
        "The V2 Mamba GPU cache quota is too small for live recurrent "
        f"states and attention pages: got {quota} bytes, need at least "
        f"{need} bytes."
    )
    assert plan.affordable == plan.local_cap == 339
    assert (
        (339 + 1) * mamba.bytes_per_slot + 2 * 2**20
        <= quota
        < ((339 + 2) * mamba.bytes_per_slot + 2 * 2**20)
    )
    # the config's float32 state would leave 172
    assert plan_residency(qwen3_5_27b_mamba(), attn, quota, max_batch_size=512).local_cap == 172
    # no free_gpu_memory_fraction helps: the floor is 12.6 GiB above the whole quota
    assert plan.raw_need_bytes - quota > 12 * GIB


# --- merged residency (the default) --------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    affordable=st.integers(1, 10), batch=st.integers(1, 10), pp=st.integers(1, 3), adp=st.booleans()
)
def test_merged_residency_builds_every_requested_slot_or_raises(affordable, batch, pp, adp):
    dummies = 1 + int(adp)
    quota = quota_for(affordable, 3, dummies=dummies)
    kwargs = dict(max_seq_len=12, max_batch_size=batch, pp_size=pp, attention_dp=adp)
    if batch * pp > affordable:
        with pytest.raises(ValueError) as info:
            MambaHybridCacheManager(SMALL_ATTN, SMALL_MAMBA, quota, **kwargs)
        need = (batch * pp + dummies) * SLOT + PAGE
        assert str(info.value) == QUOTA_TOO_SMALL.format(got=quota, need=need)
        return
    m = MambaHybridCacheManager(SMALL_ATTN, SMALL_MAMBA, quota, **kwargs)
    assert m.residency == "raw" and m.max_resident_sequences() is None
    assert m.state_slots.num_slots == batch * pp + dummies
    assert m.state_slots.nbytes + m.pool.nbytes <= quota


def test_merged_residency_takes_no_comm():
    with pytest.raises(ValueError, match="residency='clamped'"):
        manager(4, 4, comm=FixedComm(4))


def test_merged_residency_keeps_warmup_batch_sizes():
    assert manager(8, 8, warmup_batch_sizes=[1, 8]).warmup_batch_sizes == (1, 8)


def test_state_indices_follow_the_callers_order():
    m = manager(3, 3)
    for rid in ("a", "b", "c"):
        m.create_cache(rid)
    assert m.get_state_indices(["c", "a"]) == [m.state_slot("c"), m.state_slot("a")]
    with pytest.raises(KeyError):
        m.get_state_indices(["zz"])
    attention_only = MambaHybridCacheManager(
        SMALL_ATTN, None, 64 * PAGE, max_seq_len=64, max_batch_size=2
    )
    attention_only.create_cache("a")
    assert attention_only.get_state_indices(["a", "b"]) == [0, 0]


def test_cache_size_per_token_is_attention_slope_plus_live_and_dummy_slots():
    assert cache_size_per_token(SMALL_MAMBA, SMALL_ATTN, 4) == (
        SMALL_ATTN.bytes_per_token,
        5 * SLOT,
    )
    assert cache_size_per_token(SMALL_MAMBA, SMALL_ATTN, 4, 2, attention_dp=True) == (
        SMALL_ATTN.bytes_per_token,
        10 * SLOT,
    )
    assert cache_size_per_token(None, SMALL_ATTN, 4) == (SMALL_ATTN.bytes_per_token, 0)


# --- proposal, PR #18985 (open): a feasible max_batch_size default, the quota error in GiB ---


@settings(max_examples=300, deadline=None)
@given(
    quota=st.integers(1, 10**6),
    pp=st.integers(1, 4),
    graph=st.booleans(),
    adp=st.booleans(),
    cap=st.integers(1, 3000),
)
def test_feasible_max_batch_size_fits_and_is_maximal(quota, pp, graph, adp, cap):
    b = plan_residency(
        SMALL_MAMBA, SMALL_ATTN, quota, 1, pp, cuda_graph_padding=graph, attention_dp=adp
    ).feasible_max_batch_size(cap)
    assert 0 <= b <= cap

    def fits(batch):
        return plan_residency(
            SMALL_MAMBA, SMALL_ATTN, quota, batch, pp, cuda_graph_padding=graph, attention_dp=adp
        ).raw_fits

    if b:
        assert fits(b)
    if b < cap:
        assert not fits(b + 1)


def test_feasible_default_builds_and_one_more_raises():
    quota = quota_for(5, 10)
    b = plan_residency(SMALL_MAMBA, SMALL_ATTN, quota, 1).feasible_max_batch_size()
    assert b == 5
    assert manager(5, b).state_slots.num_slots == b + 1
    with pytest.raises(ValueError, match="too small"):
        manager(5, b + 1)
    # a quota that affords more than the generic default pins the generic default
    big = quota_for(3000, 10)
    assert (
        plan_residency(SMALL_MAMBA, SMALL_ATTN, big, 1).feasible_max_batch_size()
        == GENERIC_MAX_BATCH_SIZE
        == 2048
    )
    # no state slots: only the attention page bounds it
    assert plan_residency(None, SMALL_ATTN, PAGE, 1).feasible_max_batch_size() == 2048
    assert plan_residency(SMALL_MAMBA, SMALL_ATTN, PAGE, 1).feasible_max_batch_size() == 0


def test_pr18985_quota_message_is_in_gib_and_names_the_settings():
    quota = int(24.86 * GIB)
    mamba, attn = qwen3_5_27b_mamba(ssm_dtype="bfloat16"), qwen3_5_27b_attention()
    with pytest.raises(ValueError) as info:
        MambaHybridCacheManager(
            attn, mamba, quota, max_seq_len=4096, max_batch_size=512, quota_message="pr18985"
        )
    text = str(info.value)
    plan = plan_residency(mamba, attn, quota, 512)
    assert text == proposed_quota_error(plan)
    assert text.startswith("The V2 Mamba GPU cache quota is too small for live recurrent states")
    assert "got 24.86 GiB, need at least 37.48 GiB" in text
    assert "512 resident sequences (max_batch_size 512 x pp_size 1) + 1 reserved slot of" in text
    assert "lower max_batch_size (at most 339 fits this quota)" in text
    assert "free_gpu_memory_fraction" in text
    tiny = plan_residency(mamba, attn, 3 * 2**20, 1)
    assert "not even max_batch_size=1 fits" in proposed_quota_error(tiny)


def test_pr18985_generic_default_arithmetic():
    """PR #18985: a ~25.1 MiB slot at the generic default of 2048 needs ~50.3 GiB (2049 slots)."""
    slot = 25.1 * 2**20
    assert round((GENERIC_MAX_BATCH_SIZE + 1) * slot / GIB, 1) == 50.2
    assert round((GENERIC_MAX_BATCH_SIZE + 1) * 25.125 * 2**20 / GIB, 1) == 50.3


# --- proposal, PR #17261 (closed without merging): the clamp ---------------------------------


@settings(max_examples=300, deadline=None)
@given(
    quota=st.integers(1, 10**7),
    batch=st.integers(1, 600),
    pp=st.integers(1, 4),
    graph=st.booleans(),
    adp=st.booleans(),
)
def test_clamp_fits_and_is_maximal(quota, batch, pp, graph, adp):
    plan = plan_residency(
        SMALL_MAMBA, SMALL_ATTN, quota, batch, pp, cuda_graph_padding=graph, attention_dp=adp
    )
    assert plan.dummies == int(graph) + int(adp)
    cap = plan.local_cap
    assert cap <= batch * pp
    if cap >= 1:
        assert (cap + plan.dummies) * SLOT + PAGE <= quota
    if cap < batch * pp:  # one more resident sequence would not fit
        assert (cap + 1 + plan.dummies) * SLOT + PAGE > quota
    assert (plan.raw_need_bytes <= quota) == (cap == batch * pp)


@settings(max_examples=40, deadline=None)
@given(affordable=st.integers(1, 12), batch=st.integers(1, 12), pages=st.integers(1, 21))
def test_clamped_manager_sizes_its_pools(affordable, batch, pages):
    m = manager(affordable, batch, pages=pages, residency="clamped")
    cap = min(affordable, batch)
    assert m.max_resident_sequences() == (None if cap == batch else cap)
    assert m.state_slots.num_slots == cap + 1
    assert m.state_slots.storage.shape == (cap + 1, SLOT)
    assert m.state_slots.storage.dtype == torch.uint8
    assert m.state_slots.nbytes + m.pool.nbytes <= m.hybrid_quota_bytes
    assert m.total_blocks >= pages


def test_clamped_manager_errors_when_not_even_one_sequence_fits():
    quota = 1 * SLOT + PAGE  # the dummy and a page, no resident slot
    with pytest.raises(ValueError) as info:
        MambaHybridCacheManager(
            SMALL_ATTN, SMALL_MAMBA, quota, max_seq_len=64, max_batch_size=4, residency="clamped"
        )
    assert str(info.value) == QUOTA_TOO_SMALL.format(got=quota, need=2 * SLOT + PAGE)


def test_raw_mode_builds_when_it_fits_and_reports_no_cap():
    m = manager(4, 4, residency="raw")
    assert m.max_resident_sequences() is None and m.state_slots.num_slots == 5
    with pytest.raises(ValueError, match="too small for live recurrent states"):
        manager(3, 4, residency="raw")


def test_attention_dp_adds_a_dummy_and_pp_multiplies_residency():
    m = MambaHybridCacheManager(
        SMALL_ATTN,
        SMALL_MAMBA,
        quota_for(8, 16, dummies=2),
        max_seq_len=64,
        max_batch_size=2,
        pp_size=4,
        attention_dp=True,
        residency="raw",
    )
    assert m.plan.requested == 8 and m.state_slots.num_slots == 10


def test_plain_attention_manager_is_unbounded():
    plain = KVCacheManager(SMALL_ATTN, 64 * PAGE, max_seq_len=64, max_batch_size=2)
    assert plain.max_resident_sequences() is None
    attention_only = MambaHybridCacheManager(
        SMALL_ATTN, None, 64 * PAGE, max_seq_len=64, max_batch_size=2
    )
    assert attention_only.max_resident_sequences() is None
    assert attention_only.state_slots.num_slots == 0


def test_warmup_batch_sizes_truncated_to_the_clamp():
    m = manager(3, 8, warmup_batch_sizes=[1, 2, 4, 8], residency="clamped")
    assert m.max_resident_sequences() == 3
    assert m.warmup_batch_sizes == (1, 2, 3)
    assert manager(8, 8, warmup_batch_sizes=[1, 8], residency="clamped").warmup_batch_sizes == (
        1,
        8,
    )


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(residency="lazy"), ValueError, "residency"),
        (dict(comm=object()), TypeError, "all_reduce_min"),
        (dict(attention_dp=1), TypeError, "attention_dp"),
        (dict(warmup_batch_sizes=[0]), ValueError, "warmup_batch_sizes"),
        (dict(warmup_batch_sizes=2**63), TypeError, "warmup_batch_sizes must be a sequence"),
        (dict(warmup_batch_sizes=""), TypeError, "warmup_batch_sizes must be a sequence"),
        (dict(warmup_batch_sizes={}), TypeError, "warmup_batch_sizes must be a sequence"),
        (dict(quota_message="pr17261"), ValueError, "quota_message"),
    ],
)
def test_manager_arguments_are_validated(kwargs, error, text):
    with pytest.raises(error, match=text):
        manager(2, 2, **kwargs)


def test_slot_ownership_create_suspend_free():
    m = manager(2, 2)
    a = m.create_cache("a")
    m.create_cache("b")
    assert {m.state_slot("a"), m.state_slot("b")} == {1, 2}  # slot 0 is the dummy
    assert m.resident_sequences == 2
    a.resize(8)
    m.suspend("a")
    assert m.resident_sequences == 2 and m.state_slot("a") is not None  # kept while suspended
    m.check_invariants()
    m.free("a")
    assert m.resident_sequences == 1 and m.state_slot("a") is None
    m.create_cache("c")
    m.check_invariants()


def test_overcommitting_slots_raises_clearly():
    m = manager(1, 4, residency="clamped")
    m.create_cache("a")
    free_rows = m.page_index.free_slots
    with pytest.raises(StateSlotsExhausted, match="no free recurrent-state slot for 'b'"):
        m.create_cache("b")
    assert "b" not in m.caches and m.page_index.free_slots == free_rows
    m.check_invariants()


class FixedComm:
    """A one-rank stand-in for a communicator whose peers afford ``peer_cap``."""

    def __init__(self, peer_cap):
        self.peer_cap = peer_cap
        self.seen = []

    def all_reduce_min(self, value):
        self.seen.append(value)
        return min(value, self.peer_cap)


def test_min_reduction_lowers_the_cap_and_resizes_the_pool():
    comm = FixedComm(2)
    m = manager(6, 8, comm=comm, residency="clamped")
    assert comm.seen == [6] and m.max_resident_sequences() == 2
    assert m.state_slots.num_slots == 3
    assert manager(6, 8, comm=FixedComm(100), residency="clamped").max_resident_sequences() == 6


# --- the scheduler's gate (PR #17261's proposal) ------------------------------------------


def test_cap_bounds_resident_sequences_and_everything_finishes():
    m = manager(2, 6, pages=21, residency="clamped")
    sched = Scheduler(
        m, max_num_tokens=64, max_batch_size=6, chunked_prefill=True, chunk_unit_size=4, debug=True
    )
    requests = [Request(f"r{i}", prompt_len=20, max_new_tokens=5) for i in range(6)]
    peak = []
    original = sched.schedule

    def schedule():
        batch = original()
        peak.append(m.resident_sequences)
        return batch

    sched.schedule = schedule
    result = simulate(sched, requests, max_steps=500)
    assert result.error is None and result.summary()["finished"] == 6
    assert max(peak) == 2


class CapOne(KVCacheManager):
    """Any manager reporting a cap of one resident sequence."""

    def max_resident_sequences(self):
        return 1


def disagg_requests():
    return [
        Request(f"d{i}", prompt_len=8, max_new_tokens=4, disagg_generation_init=True)
        for i in range(2)
    ]


@pytest.mark.parametrize("scheduler_class, admitted", [(Scheduler, 1), (DisaggBypassScheduler, 2)])
def test_finding_2_disagg_generation_init_is_gated(scheduler_class, admitted):
    m = CapOne(SMALL_ATTN, 64 * PAGE, max_seq_len=64, max_batch_size=4)
    sched = scheduler_class(m)
    for r in disagg_requests():
        sched.submit(r)
    batch = sched.schedule()
    assert len(batch.fitting_disagg_gen_init_requests) == admitted


@pytest.mark.parametrize("scheduler_class", [Scheduler, DisaggBypassScheduler])
def test_finding_2_on_the_hybrid_manager(scheduler_class):
    """With the bug, the second init takes a state slot the clamp never allocated."""
    m = manager(1, 4, residency="clamped")
    sched = scheduler_class(m)
    for r in disagg_requests():
        sched.submit(r)
    if scheduler_class is DisaggBypassScheduler:
        with pytest.raises(StateSlotsExhausted):
            sched.schedule()
    else:
        assert len(sched.schedule().fitting_disagg_gen_init_requests) == 1
        result = simulate(Scheduler(manager(1, 4, residency="clamped")), disagg_requests())
        assert result.error is None and result.summary()["finished"] == 2


@pytest.mark.parametrize("scheduler_class", [Scheduler, BreakOnCapScheduler])
def test_finding_3_non_first_chunk_behind_a_capped_first_chunk(scheduler_class):
    """B is mid-prefill and holds the only slot; A, a first chunk, sits ahead of B in
    active_requests (as after the real scheduler's priority sort or a recompute pause).
    ``break`` on A's cap stops the scan: B never advances and the stall detector fires."""
    m = manager(1, 2, pages=21, residency="clamped")
    sched = scheduler_class(
        m,
        max_num_tokens=16,
        max_batch_size=4,
        chunked_prefill=True,
        chunk_unit_size=4,
        stall_limit=5,
    )
    b = Request("B", prompt_len=40, max_new_tokens=2)
    sched.submit(b)
    first = sched.schedule()
    assert first.context_requests == [b] and b.context_chunk_size == 16
    b.context_current_position += b.context_chunk_size  # the executor ran B's first chunk
    a = Request("A", prompt_len=8, max_new_tokens=2)
    sched.submit(a)
    sched._active.sort(key=lambda r: r.request_id)  # A ahead of B
    assert [r.request_id for r in sched.active_requests] == ["A", "B"]
    if scheduler_class is BreakOnCapScheduler:
        with pytest.raises(SchedulerDeadlock):
            for _ in range(5):
                assert sched.schedule().context_requests == []
    else:
        batch = sched.schedule()
        assert batch.context_requests == [b]  # A skipped, B's second chunk scheduled
        assert a.state == "waiting" and a.request_id not in m.caches


# --- finding 1: a mixed pipeline, MIN across ranks (PR #17261's clamp) ------------------------------------------


def build_rank(rank: int, comm, manager_class):
    """Rank 0 holds the Mamba layers (its quota affords 3 of 8); rank 1 is attention-only."""
    mamba = SMALL_MAMBA if rank == 0 else None
    quota = quota_for(3, 20) if rank == 0 else 64 * PAGE
    return manager_class(
        SMALL_ATTN, mamba, quota, max_seq_len=64, max_batch_size=8, residency="clamped", comm=comm
    )


@pytest.mark.parametrize(
    "manager_class, caps", [(MambaHybridCacheManager, [3, 3]), (NoneFirstManager, [3, None])]
)
def test_finding_1_threads(manager_class, caps):
    comm = ThreadComm(2, timeout_s=30)
    out = [None, None]

    def run(rank):
        out[rank] = build_rank(rank, comm.for_rank(rank), manager_class).max_resident_sequences()

    in_threads(comm, run)
    assert out == caps


def _gloo_rank(rank, port, manager_class, queue):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        m = build_rank(rank, TorchComm(torch.device("cpu")), manager_class)
        queue.put((rank, m.max_resident_sequences()))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "manager_class, caps",
    [(MambaHybridCacheManager, {0: 3, 1: 3}), (NoneFirstManager, {0: 3, 1: None})],
)
def test_finding_1_two_gloo_processes(manager_class, caps):
    """Two real processes over gloo: with the bug the attention-only rank reports None while
    the Mamba rank reports 3, so the ranks would admit different batches."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_gloo_rank, args=(r, port, manager_class, queue), daemon=True)
        for r in range(2)
    ]
    for p in procs:
        p.start()
    try:
        got = dict(queue.get(timeout=60) for _ in range(2))
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    assert got == caps
    assert all(p.exitcode == 0 for p in procs)


# --- on a GPU ------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_qwen3_5_27b_clamp_allocates_on_the_gpu():
    """The PR's case for real under its clamp (a proposal): 24.86 GiB on the GPU, 340 state slots
    of 78 MB, the rest pages."""
    quota = int(24.86 * GIB)
    m = MambaHybridCacheManager(
        qwen3_5_27b_attention(),
        qwen3_5_27b_mamba(ssm_dtype="bfloat16"),
        quota,
        max_seq_len=4096,
        max_batch_size=512,
        device="cuda",
        residency="clamped",
    )
    try:
        assert m.state_slots.storage.is_cuda and m.pool.storage.is_cuda
        assert m.max_resident_sequences() == 339 and m.state_slots.num_slots == 340
        assert m.state_slots.nbytes + m.pool.nbytes <= quota
        assert m.total_blocks >= 1
    finally:
        del m
        torch.cuda.empty_cache()
