"""What only a CUDA device has: an explicit device index, measured device memory, the pool
against a growing workspace on the device (skipped without a GPU); the page-index table pinned
for a GPU. The tests of the pool, the caches and the manager take the ``device`` fixture
(tests/conftest.py), so they run on the CPU and, with ``pytest -m gpu``, on a GPU. The last
tests run everywhere: asking for CUDA where torch sees none is a clear ValueError.
"""

import gc

import pytest
import torch

import kvlab.core.pool
from kvlab import KVCacheManager, KVGeometry, PagePool
from kvlab.analysis.presets import seed_geometry
from kvlab.core.memory import GIB, MIB, DeviceMemory, pool_vs_workspace

_skip_without_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="torch.cuda.is_available() is False: no CUDA GPU on this machine",
)


def _gpu(fn):
    """Mark a test as a GPU test, skipped with a clear reason where torch sees no CUDA GPU."""
    return pytest.mark.gpu(_skip_without_cuda(fn))


def test_page_index_table_is_host_int32_pinned_for_a_gpu(seed_manager, device):
    mgr = seed_manager("configured", device=device)
    table = mgr.page_index.table
    assert table.device.type == "cpu"
    assert table.is_pinned() == (device == "cuda")
    assert table.dtype == torch.int32
    assert mgr.page_index.nbytes == 2 * 2 * 260 * 4


@_gpu
def test_explicit_cuda_index_and_out_of_range_index():
    pool = PagePool(2, 16, device="cuda:0")
    assert pool.storage.device == torch.device("cuda", 0)
    with pytest.raises(ValueError, match="index must be in"):
        PagePool(2, 16, device=f"cuda:{torch.cuda.device_count()}")


@_gpu
def test_device_memory_measures_what_was_allocated():
    gc.collect()
    before = torch.cuda.memory_allocated()  # what earlier tests still hold counts as "model"
    mem = DeviceMemory("cuda").load_weights(2 * GIB).warm_up(3 * GIB, activation_bytes=1 * GIB)
    try:
        b = mem.budget(free_gpu_memory_fraction=0.9)
        slack = 64 * MIB  # the caching allocator's rounding
        assert (b.weights_bytes, b.workspace_bytes) == (2 * GIB, 3 * GIB)
        # freed, yet in the peak (with whatever earlier tests still hold)
        assert 1 * GIB <= b.activation_peak_bytes < 1 * GIB + before + slack
        assert b.peak_memory_bytes - b.non_torch_bytes == torch.cuda.max_memory_allocated()
        assert b.total_bytes == torch.cuda.mem_get_info()[1]
        free = torch.cuda.mem_get_info()[0]
        # the creator's formula, with the activation peak counted although it is free again
        assert b.kv_quota_bytes == int((b.total_bytes - b.peak_memory_bytes) * 0.9)
        assert b.kv_quota_bytes < free
    finally:
        mem.release()
    assert torch.cuda.memory_allocated() == before


@_gpu
def test_the_pool_shrinks_as_the_workspace_grows_on_the_device():
    geo = KVGeometry(
        num_layers=8, num_kv_heads=8, head_dim=128, dtype="bfloat16", tokens_per_block=32
    )
    rows = pool_vs_workspace(geo, 4 * GIB, [0, 8 * GIB, 16 * GIB], max_seq_len=1 << 22)
    blocks = [r["pool_blocks"] for r in rows]
    assert blocks[0] > blocks[1] > blocks[2]
    per_block = geo.bytes_per_block
    # 8 GiB more workspace costs 0.9 * 8 GiB of pool, give or take the allocator's rounding
    lost = (blocks[0] - blocks[1]) * per_block
    assert abs(lost - 0.9 * 8 * GIB) < 128 * MIB
    for r in rows:
        assert r["pool_bytes_allocated"] >= r["pool_blocks"] * per_block  # a real tensor on the GPU
        assert r["max_seq_len"] == min(1 << 22, r["pool_blocks"] * 32)


# -- everywhere --------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_a_clear_valueerror(monkeypatch, device):
    monkeypatch.setattr(kvlab.core.pool.torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"needs a CUDA GPU.*device='cpu'"):
        KVCacheManager(
            seed_geometry(),
            quota_bytes=4 * 2**20,
            max_seq_len=2048,
            max_batch_size=1,
            device=device,
        )
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        PagePool(4, 16, device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_on_this_cpu_machine_is_a_clear_valueerror(seed_manager):
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        seed_manager("clamped", device="cuda")


def test_device_memory_wants_a_cuda_device():
    with pytest.raises(ValueError, match="device must be a CUDA device"):
        DeviceMemory("cpu")
