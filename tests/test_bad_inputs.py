"""Bad arguments at the public boundary raise ValueError/TypeError naming the parameter and the
accepted range (docs/DESIGN.md, "Conventions")."""

from __future__ import annotations

import math
import re
import warnings

import pytest

from kvlab import (
    KVCacheManager,
    KVGeometry,
    MaxSeqLenClampWarning,
    MemoryBudget,
    PageIndexTable,
    PagePool,
    Request,
    max_blocks_per_seq,
)
from kvlab.analysis.presets import seed_geometry

HUGE = 1 << 60  # beyond every accepted range


def _manager(**kw):
    args = dict(geometry=seed_geometry(), quota_bytes=4 * 2**20, max_seq_len=2048, max_batch_size=1)
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaxSeqLenClampWarning)
        return KVCacheManager(**args)


def _geometry(**kw):
    args = dict(num_layers=2, num_kv_heads=2, head_dim=128)
    args.update(kw)
    return KVGeometry(**args)


def _budget(**kw):
    args = dict(total_bytes=80 * 2**30)
    args.update(kw)
    return MemoryBudget(**args)


def _pool(**kw):
    args = dict(num_blocks=4, bytes_per_block=64)
    args.update(kw)
    return PagePool(**args)


def _table(**kw):
    args = dict(max_batch_size=1, width=68)
    args.update(kw)
    return PageIndexTable(**args)


def _request(**kw):
    args = dict(request_id="r", prompt_len=10, max_new_tokens=5)
    args.update(kw)
    return Request(**args)


def _width(**kw):
    args = dict(max_seq_len=2048, tokens_per_block=32)
    args.update(kw)
    return max_blocks_per_seq(**args)


# (constructor, integer parameter, lowest accepted value)
INT_PARAMS = [
    (_geometry, "num_layers", 1),
    (_geometry, "num_kv_heads", 1),
    (_geometry, "head_dim", 1),
    (_geometry, "tokens_per_block", 1),
    (_geometry, "tp_size", 1),
    (_budget, "total_bytes", 1),
    (_budget, "weights_bytes", 0),
    (_budget, "workspace_bytes", 0),
    (_budget, "activation_peak_bytes", 0),
    (_budget, "non_torch_bytes", 0),
    (_budget, "already_allocated_kv_bytes", 0),
    (_budget, "max_gpu_total_bytes", 1),
    (_pool, "num_blocks", 1),
    (_pool, "bytes_per_block", 1),
    (_table, "max_batch_size", 1),
    (_table, "width", 1),
    (_table, "pp_size", 1),
    (_table, "num_pools", 1),
    (_table, "beam_width", 1),
    (_manager, "quota_bytes", 1),
    (_manager, "max_seq_len", 1),
    (_manager, "max_batch_size", 1),
    (_manager, "pp_size", 1),
    (_manager, "num_extra_kv_tokens", 0),
    (_manager, "reserved_draft_tokens", 0),
    (_request, "prompt_len", 1),
    (_request, "max_new_tokens", 0),
    (_request, "arrival_step", 0),
    (_request, "context_current_position", 0),
    (_request, "num_generated", 0),
    (_width, "max_seq_len", 1),
    (_width, "tokens_per_block", 1),
    (_width, "num_extra_kv_tokens", 0),
    (_width, "reserved_draft_tokens", 0),
]


def _bad_values(low):
    below = [("zero", 0)] if low >= 1 else []
    return below + [("negative", -1), ("very negative", -(1 << 40)), ("huge", HUGE)]


RANGE = re.compile(r"\[-?\d+, \d+\]")


def _id(ctor, name):
    return f"{ctor.__name__.strip('_')}.{name}"


@pytest.mark.parametrize(
    "ctor, name, low, label, value",
    [
        pytest.param(ctor, name, low, label, value, id=f"{_id(ctor, name)}={label}")
        for ctor, name, low in INT_PARAMS
        for label, value in _bad_values(low)
    ],
)
def test_out_of_range_int_is_valueerror_naming_param_and_range(ctor, name, low, label, value):
    with pytest.raises(ValueError) as info:
        ctor(**{name: value})
    message = str(info.value)
    assert name in message
    assert RANGE.search(message), message
    assert str(value) in message


WRONG_TYPES = [
    ("float", 1.5),
    ("integral float", 2.0),
    ("str", "3"),
    ("bool", True),
    ("None", None),
]


@pytest.mark.parametrize(
    "ctor, name, low, label, value",
    [
        pytest.param(ctor, name, low, label, value, id=f"{_id(ctor, name)}={label}")
        for ctor, name, low in INT_PARAMS
        for label, value in WRONG_TYPES
        # None means "no cap" for max_gpu_total_bytes
        if not (name == "max_gpu_total_bytes" and value is None)
    ],
)
def test_wrong_type_int_is_typeerror_naming_param_and_range(ctor, name, low, label, value):
    with pytest.raises(TypeError) as info:
        ctor(**{name: value})
    message = str(info.value)
    assert name in message
    assert RANGE.search(message), message


def test_accepted_edges_are_accepted():
    # the lowest value of every parameter whose low is 0 or 1 is fine
    for ctor, name, low in INT_PARAMS:
        if name in ("quota_bytes",):  # one byte holds no page: its own error below
            continue
        ctor(**{name: max(low, 1) if name != "width" else 4})


@pytest.mark.parametrize("value", [0, 0.0, -0.1, 1.01, 2, math.nan, math.inf, -math.inf])
def test_free_gpu_memory_fraction_range(value):
    with pytest.raises(ValueError, match=r"free_gpu_memory_fraction must be in \(0\.0, 1\.0\]"):
        _budget(free_gpu_memory_fraction=value)


@pytest.mark.parametrize("value", ["0.9", None, True, [0.9]])
def test_free_gpu_memory_fraction_type(value):
    with pytest.raises(
        TypeError, match=r"free_gpu_memory_fraction must be a number in \(0\.0, 1\.0\]"
    ):
        _budget(free_gpu_memory_fraction=value)


def test_fraction_one_and_tiny_are_accepted():
    assert _budget(free_gpu_memory_fraction=1).kv_quota_bytes == 80 * 2**30
    assert _budget(free_gpu_memory_fraction=1e-9).kv_quota_bytes >= 0


# -- choices -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["int4", "FP16", "fp16", "half", "", None, 16])
def test_unknown_dtype(value):
    with pytest.raises(ValueError) as info:
        _geometry(dtype=value)
    message = str(info.value)
    assert "dtype" in message
    for known in ("float32", "float16", "bfloat16", "fp8", "nvfp4"):
        assert known in message


@pytest.mark.parametrize("value", ["bounded-ish", "Clamped", "", None, 1])
def test_unknown_page_index_policy(value):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a bad policy is refused before any clamp warning
        with pytest.raises(ValueError) as info:
            KVCacheManager(
                seed_geometry(),
                quota_bytes=4 * 2**20,
                max_seq_len=8192,
                max_batch_size=1,
                page_index_policy=value,
            )
    message = str(info.value)
    assert "page_index_policy" in message and "clamped" in message and "configured" in message


@pytest.mark.parametrize("value", [0, 3, -2, HUGE])
def test_kv_factor_value(value):
    with pytest.raises(ValueError, match=r"kv_factor must be 2 \(K and V\) or 1 \(MLA\)"):
        _geometry(kv_factor=value)


@pytest.mark.parametrize("value", [2.0, 1.0, True, "2", None])
def test_kv_factor_type(value):
    with pytest.raises(TypeError, match=r"kv_factor must be the int 2 \(K and V\) or 1 \(MLA\)"):
        _geometry(kv_factor=value)


@pytest.mark.parametrize(
    "ctor, name",
    [
        (_geometry, "attention_dp"),
        (_table, "disaggregated"),
        (_manager, "disaggregated"),
    ],
)
@pytest.mark.parametrize("value", [1, "yes", None, 0.0])
def test_bool_flags(ctor, name, value):
    with pytest.raises(TypeError, match=rf"{name} must be a bool"):
        ctor(**{name: value})


@pytest.mark.parametrize("ctor", [_manager, _pool])
@pytest.mark.parametrize(
    "value", ["tpu", "gpu", "CPU", "cuda:x", "cuda:-1", "", None, 3.5, True, -1]
)
def test_bad_device(ctor, value):
    with pytest.raises(ValueError, match=r"device must be 'cpu' or 'cuda\[:N\]'") as info:
        ctor(device=value)
    assert repr(value) in str(info.value)


def test_meta_device_is_refused():
    with pytest.raises(ValueError, match="device"):
        _pool(device="meta")


@pytest.mark.parametrize("value", ["", None, 7, b"r"])
def test_request_id(value):
    with pytest.raises(ValueError, match="request_id must be a non-empty str"):
        _request(request_id=value)


@pytest.mark.parametrize("value", [None, "geo", {"num_layers": 2}])
def test_manager_geometry_type(value):
    with pytest.raises(TypeError, match="geometry must be a KVGeometry"):
        _manager(geometry=value)


def test_quota_below_one_page():
    with pytest.raises(ValueError, match=r"quota_bytes=65535 holds no page.*65536 bytes"):
        _manager(quota_bytes=65535)


def test_nvfp4_head_dim():
    with pytest.raises(ValueError, match=r"head_dim must be a multiple of 16 for nvfp4, got 72"):
        _geometry(dtype="nvfp4", head_dim=72)


# -- methods at the boundary -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, exc",
    [
        (-1, ValueError),
        (HUGE, ValueError),
        (1.5, TypeError),
        ("32", TypeError),
        (True, TypeError),
        (None, TypeError),
    ],
)
def test_resize_capacity(value, exc, seed_manager):
    mgr = seed_manager("clamped")
    cache = mgr.create_cache("r")
    with pytest.raises(exc, match=r"capacity.*\[0, \d+\]"):
        cache.resize(value)
    assert cache.capacity == 0 and mgr.free_blocks == 64


@pytest.mark.parametrize(
    "value, exc", [(-1, ValueError), (1.5, TypeError), ("1", TypeError), (False, TypeError)]
)
def test_resize_history_length(value, exc, seed_manager):
    cache = seed_manager("clamped").create_cache("r")
    with pytest.raises(exc, match=r"history_length.*\[0, \d+\]"):
        cache.resize(32, value)


@pytest.mark.parametrize(
    "value, exc", [(-1, ValueError), (HUGE, ValueError), (2.5, TypeError), (None, TypeError)]
)
def test_resize_context_num_tokens(value, exc, seed_manager):
    mgr = seed_manager("configured")
    req = Request("r", prompt_len=100, max_new_tokens=1)
    mgr.prepare_context(req)
    with pytest.raises(exc, match=r"num_tokens.*\[0, \d+\]"):
        mgr.resize_context(req, value)
    assert not mgr.get_cache(req).suspended and mgr.free_blocks == 64


@pytest.mark.parametrize(
    "value, exc", [(-1, ValueError), (HUGE, ValueError), (1.0, TypeError), (None, TypeError)]
)
def test_pool_allocate_count(value, exc):
    pool = _pool()
    with pytest.raises(exc, match=r"count.*\[0, \d+\]"):
        pool.allocate(value)
    assert pool.free_blocks == 4


# -- sizes the machine cannot hold --------------------------------------------------------------


def test_page_index_table_size_limit_is_exact():
    """MAX_TABLE_BYTES is accepted, four bytes per row and plane more is refused, before torch
    is asked for the memory."""
    from kvlab.core.table_size import MAX_TABLE_BYTES, check_table_size

    width = MAX_TABLE_BYTES // (4 * 2 * 4)  # max_batch_size 3: 4 slots x 2 planes x 4 bytes
    assert check_table_size(3, width) == MAX_TABLE_BYTES
    with pytest.raises(
        ValueError,
        match=rf"would take {MAX_TABLE_BYTES + 32} bytes, more than "
        rf"MAX_TABLE_BYTES={MAX_TABLE_BYTES}.*max_batch_size=3 "
        rf"\(slots=4\) x width={width + 1}",
    ):
        _table(max_batch_size=3, width=width + 1)


def test_configured_width_times_batch_is_refused_by_the_manager():
    geo = _geometry(tokens_per_block=1)
    with pytest.raises(
        ValueError,
        match=r"MAX_TABLE_BYTES=1073741824 .*max_batch_size=4096 .* "
        r"width=1048580 ",
    ):
        _manager(
            geometry=geo,
            quota_bytes=64 * geo.bytes_per_block,
            max_seq_len=1 << 20,
            max_batch_size=4096,
            page_index_policy="configured",
        )


def test_a_pool_torch_cannot_allocate_is_a_memory_error_naming_quota_bytes():
    with pytest.raises(
        MemoryError,
        match=r"quota_bytes=1099511627776: the pool of "
        r"16777216 pages x 65536 B .*cannot be allocated",
    ):
        _manager(quota_bytes=1 << 40)  # 1 TiB in MAX_POOL_BLOCKS pages: beyond this machine


def test_pages_per_pool_are_bounded_before_anything_is_allocated():
    """1-byte pages and a 1 GiB quota would be a billion pages of bookkeeping."""
    from kvlab.core.pool import MAX_POOL_BLOCKS

    tiny = KVGeometry(
        num_layers=1, num_kv_heads=1, head_dim=1, dtype="fp8", tokens_per_block=1, kv_factor=1
    )
    assert tiny.bytes_per_block == 1
    with pytest.raises(
        ValueError,
        match=rf"quota_bytes=1073741824 holds 1073741824 pages of 1 "
        rf"bytes; a pool may have at most MAX_POOL_BLOCKS={MAX_POOL_BLOCKS}",
    ):
        KVCacheManager(tiny, quota_bytes=1 << 30, max_seq_len=8, max_batch_size=1)
    with pytest.raises(ValueError, match=r"num_blocks must be in \[1, 16777216\]"):
        PagePool(MAX_POOL_BLOCKS + 1, 1)


def test_other_runtime_errors_of_the_pool_are_not_disguised(monkeypatch):
    import kvlab.core.manager as manager_module

    def broken(*args):
        raise RuntimeError("something else")

    monkeypatch.setattr(manager_module, "PagePool", broken)
    with pytest.raises(RuntimeError, match="something else"):
        _manager()


def test_numpy_integers_are_stored_as_the_plain_ints_the_checks_return(seed_manager):
    """np.uint64 and np.int8 pass the checks; what is kept must be the checked int, or the
    arithmetic wraps (10 prompt tokens once demanded 13,835,058,055,282,163,716 blocks)."""
    import numpy as np

    from kvlab.sched.admission import CapacityAdmission, demand_blocks

    mgr = seed_manager("clamped", max_batch_size=2)
    wide = Request("a", np.uint64(10), np.uint64(5))
    assert type(wide.prompt_len) is int and type(wide.max_new_tokens) is int
    assert demand_blocks(wide, mgr) == 1
    small, plain = Request("b", np.int8(100), np.int8(100)), Request("b", 100, 100)
    policy = CapacityAdmission()
    assert policy.classify(small, mgr) == policy.classify(plain, mgr)
    geometry = KVGeometry(num_layers=np.int64(2), num_kv_heads=np.int16(2), head_dim=np.uint8(128))
    assert geometry == KVGeometry(num_layers=2, num_kv_heads=2, head_dim=128)
    assert all(
        type(getattr(geometry, f)) is int for f in ("num_layers", "num_kv_heads", "head_dim")
    )
    budget = MemoryBudget(
        np.int64(1 << 36),
        weights_bytes=np.uint32(1 << 30),
        free_gpu_memory_fraction=np.float32(0.5),
    )
    assert type(budget.weights_bytes) is int and type(budget.free_gpu_memory_fraction) is float
    manager = KVCacheManager.expecting_clamp(
        seed_geometry(),
        quota_bytes=np.int64(4 << 20),
        max_seq_len=np.int16(8192),
        max_batch_size=np.int8(2),
    )
    assert all(
        type(v) is int
        for v in (manager.quota_bytes, manager.configured_max_seq_len, manager.max_batch_size)
    )


def test_a_scenario_error_never_quotes_the_file_it_refuses(tmp_path):
    from kvlab.run.scenarios import ScenarioError, load_scenario

    secret = "root:x:0:0:root:/root:/bin/bash"
    for text in (
        f"{secret}\n",
        f"name: x\n{secret}: 1\n",
        f"name: x\ntitle: [{secret}]\n",
        f'name: "{secret}"\n',
    ):
        path = tmp_path / "x.yaml"
        path.write_text(text)
        with pytest.raises(ScenarioError) as info:
            load_scenario(path)
        assert "root:x" not in str(info.value) and "bin/bash" not in str(info.value), str(
            info.value
        )
