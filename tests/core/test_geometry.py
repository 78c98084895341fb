"""KVGeometry: bytes per token / block by docs/REFERENCE.md §1."""

import math

import pytest

from kvlab import KVGeometry
from kvlab.core.geometry import element_bytes


def test_seed_bytes_per_token_is_2048():
    # 2 layers x 2 (K and V) x 2 KV heads x 128 dims x 2 bytes (fp16)
    geo = KVGeometry(
        num_layers=2, num_kv_heads=2, head_dim=128, dtype="float16", tokens_per_block=32
    )
    assert geo.bytes_per_token == 2 * 2 * 2 * 128 * 2 == 2048
    assert geo.layer_bytes_per_token == 1024
    assert geo.bytes_per_block == 2048 * 32 == 65536
    # 4 MiB / 64 KiB pages = 64 pages = 2048 tokens
    assert geo.blocks_in(4 * 2**20) == 64
    assert geo.blocks_in(4 * 2**20) * geo.tokens_per_block == 2048


@pytest.mark.parametrize(
    "dtype, per_head_token",
    [
        ("float32", 128 * 4),
        ("float16", 128 * 2),
        ("bfloat16", 128 * 2),
        ("fp8", 128 * 1),
        ("nvfp4", 128 // 2 + 128 // 16),  # 64 B of 4-bit payload + 8 fp8 scale bytes = 72
    ],
)
def test_dtype_bytes(dtype, per_head_token):
    geo = KVGeometry(num_layers=3, num_kv_heads=4, head_dim=128, dtype=dtype, tokens_per_block=16)
    assert geo.layer_bytes_per_token == 2 * 4 * per_head_token
    assert geo.bytes_per_token == 3 * 2 * 4 * per_head_token
    assert geo.bytes_per_block == 16 * geo.bytes_per_token


def test_nvfp4_scale_bytes():
    # 0.5 B per element plus one scale byte per 16 elements
    assert element_bytes("nvfp4", 16) == 8 + 1
    assert element_bytes("nvfp4", 64) == 32 + 4
    assert element_bytes("nvfp4", 256) == 128 + 16
    assert element_bytes("fp8", 256) == 256
    geo = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=64, dtype="nvfp4", kv_factor=1)
    assert geo.bytes_per_token == 36


def test_nvfp4_head_dim_must_fill_scale_blocks():
    with pytest.raises(ValueError, match="head_dim"):
        KVGeometry(num_layers=1, num_kv_heads=1, head_dim=24, dtype="nvfp4")


@pytest.mark.parametrize(
    "heads, tp, per_rank",
    [
        (8, 1, 8),
        (8, 2, 4),
        (8, 8, 1),
        (8, 3, 3),
        (2, 4, 1),
        (5, 2, 3),
        (1, 16, 1),
    ],
)
def test_tp_size_splits_heads_with_ceil(heads, tp, per_rank):
    geo = KVGeometry(num_layers=2, num_kv_heads=heads, head_dim=64, dtype="float16", tp_size=tp)
    assert geo.kv_heads_per_rank == per_rank == math.ceil(heads / tp)
    assert geo.layer_bytes_per_token == 2 * per_rank * 64 * 2
    assert geo.bytes_per_token == 2 * 2 * per_rank * 64 * 2


def test_attention_dp_forces_tp_1():
    split = KVGeometry(num_layers=2, num_kv_heads=8, head_dim=128, tp_size=4)
    dp = KVGeometry(num_layers=2, num_kv_heads=8, head_dim=128, tp_size=4, attention_dp=True)
    assert split.effective_tp_size == 4 and split.kv_heads_per_rank == 2
    assert dp.effective_tp_size == 1 and dp.kv_heads_per_rank == 8
    assert dp.bytes_per_token == 4 * split.bytes_per_token
    assert (
        dp.bytes_per_token == KVGeometry(num_layers=2, num_kv_heads=8, head_dim=128).bytes_per_token
    )


def test_kv_factor_1_for_mla_halves_bytes():
    kv = KVGeometry(num_layers=4, num_kv_heads=1, head_dim=576, dtype="bfloat16")
    mla = KVGeometry(num_layers=4, num_kv_heads=1, head_dim=576, dtype="bfloat16", kv_factor=1)
    assert mla.bytes_per_token == 4 * 1 * 576 * 2
    assert kv.bytes_per_token == 2 * mla.bytes_per_token


def test_blocks_for_tokens_is_ceil():
    geo = KVGeometry(num_layers=2, num_kv_heads=2, head_dim=128, tokens_per_block=32)
    assert [geo.blocks_for_tokens(n) for n in (0, 1, 31, 32, 33, 64, 8192)] == [
        0,
        1,
        1,
        1,
        2,
        2,
        256,
    ]


def test_blocks_in_is_floor():
    geo = KVGeometry(num_layers=2, num_kv_heads=2, head_dim=128, tokens_per_block=32)
    page = geo.bytes_per_block
    assert geo.blocks_in(page - 1) == 0
    assert geo.blocks_in(page) == 1
    assert geo.blocks_in(3 * page + page - 1) == 3


def test_geometry_is_frozen():
    geo = KVGeometry(num_layers=2, num_kv_heads=2, head_dim=128)
    with pytest.raises(AttributeError):
        geo.num_layers = 4
