"""The key checks with device="cuda": the pool is a real tensor on the GPU. Skipped without one.

The last tests run everywhere: asking for CUDA where torch sees none is a clear ValueError.
"""

import pytest
import torch

import kvlab.pool
from kvlab import KVCacheManager, PageIndexTooShort, PagePool

from conftest import make_seed_manager, seed_geometry

_skip_without_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="torch.cuda.is_available() is False: no CUDA GPU on this machine")


def _gpu(fn):
    """Mark a test as a GPU test, skipped with a clear reason where torch sees no CUDA GPU."""
    return pytest.mark.gpu(_skip_without_cuda(fn))


@pytest.fixture
def cuda_seed():
    def make(policy, **kw):
        return make_seed_manager(policy, device="cuda", **kw)
    return make


@_gpu
def test_pool_storage_is_on_cuda_with_exact_size(cuda_seed):
    mgr = cuda_seed("clamped")
    storage = mgr.pool.storage
    assert storage.is_cuda and mgr.device.type == "cuda"
    assert storage.dtype == torch.uint8
    assert tuple(storage.shape) == (64, 65536)
    assert mgr.pool.nbytes == 4 * 2**20
    assert storage.untyped_storage().nbytes() == 4 * 2**20


@_gpu
def test_page_index_table_is_pinned_host_int32(cuda_seed):
    mgr = cuda_seed("configured")
    table = mgr.page_index.table
    assert table.device.type == "cpu"
    assert table.is_pinned()
    assert table.dtype == torch.int32
    assert mgr.page_index.nbytes == 2 * 2 * 260 * 4


@_gpu
def test_clamped_raises_native_error_on_cuda(cuda_seed):
    mgr = cuda_seed("clamped")
    cache = mgr.create_cache("req-0")
    with pytest.raises(PageIndexTooShort) as info:
        cache.resize(8192)
    assert isinstance(info.value, ValueError)
    assert str(info.value) == "User-provided base page indices is too short"
    assert info.value.needed_entries == 256 and info.value.available_entries == 68
    assert cache.capacity == 0 and mgr.free_blocks == 64


@_gpu
def test_configured_false_preserves_state_then_retry_on_cuda(cuda_seed):
    mgr = cuda_seed("configured")
    cache = mgr.create_cache("req-0")
    table_before = mgr.page_index.table.clone()
    storage_before = mgr.pool.storage.clone()
    assert cache.resize(8192) is False
    assert cache.capacity == 0 and cache.pages == [] and mgr.free_blocks == 64
    assert torch.equal(mgr.page_index.table, table_before)
    assert torch.equal(mgr.pool.storage, storage_before)
    assert cache.resize(32) is True
    assert mgr.free_blocks == 63
    assert int(cache.page_indices[0]) == cache.pages[0]
    mgr.check_invariants()


@_gpu
def test_suspend_resume_round_trips_bytes_on_cuda(cuda_seed):
    mgr = cuda_seed("configured", max_batch_size=2)
    cache = mgr.create_cache("r")
    assert cache.resize(96)
    gen = torch.Generator().manual_seed(1)
    pattern = torch.randint(0, 256, (3, mgr.pool.bytes_per_block), dtype=torch.uint8,
                            generator=gen).cuda()
    mgr.pool.storage[cache.pages] = pattern
    old_pages = list(cache.pages)
    cache.suspend()
    assert cache.suspended and mgr.free_blocks == 64
    thief = mgr.create_cache("thief")
    assert thief.resize(2048)
    mgr.pool.storage.fill_(0xAB)
    assert cache.resume() is False
    thief.resize(32 * 32)
    assert set(old_pages) <= set(thief.pages)
    assert cache.resume() is True
    assert not set(cache.pages) & set(old_pages)
    assert torch.equal(mgr.pool.storage[cache.pages], pattern)
    mgr.check_invariants()


@_gpu
def test_explicit_cuda_index_and_out_of_range_index():
    pool = PagePool(2, 16, device="cuda:0")
    assert pool.storage.device == torch.device("cuda", 0)
    with pytest.raises(ValueError, match="index must be in"):
        PagePool(2, 16, device=f"cuda:{torch.cuda.device_count()}")


# -- everywhere --------------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_a_clear_valueerror(monkeypatch, device):
    monkeypatch.setattr(kvlab.pool.torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"needs a CUDA GPU.*device='cpu'"):
        KVCacheManager(seed_geometry(), quota_bytes=4 * 2**20, max_seq_len=2048,
                       max_batch_size=1, device=device)
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        PagePool(4, 16, device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_on_this_cpu_machine_is_a_clear_valueerror():
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        make_seed_manager("clamped", device="cuda")
