"""PagePool: a real tensor of exactly blocks x page bytes, a free list, all-or-nothing."""

import pytest
import torch

from kvlab import PagePool
from kvlab.core.pool import as_words, put_pages, take_pages


def test_storage_is_a_real_tensor_of_exact_size(device):
    pool = PagePool(64, 65536, device=device)
    assert isinstance(pool.storage, torch.Tensor)
    assert pool.storage.dtype == torch.uint8
    assert tuple(pool.storage.shape) == (64, 65536)
    assert pool.storage.device.type == device
    assert pool.nbytes == 64 * 65536 == 4 * 2**20
    assert pool.storage.untyped_storage().nbytes() == 64 * 65536


def test_fresh_pool_counts():
    pool = PagePool(10, 128)
    assert (pool.num_blocks, pool.free_blocks, pool.used_blocks) == (10, 10, 0)
    assert not any(pool.is_allocated(p) for p in range(10))


def test_allocate_hands_out_distinct_pages_in_range():
    pool = PagePool(10, 128)
    a = pool.allocate(4)
    b = pool.allocate(6)
    assert len(a) == 4 and len(b) == 6
    assert sorted(a + b) == list(range(10))
    assert pool.free_blocks == 0 and pool.used_blocks == 10
    assert all(pool.is_allocated(p) for p in a + b)
    assert a == [0, 1, 2, 3]  # page 0 first: small runs read naturally


def test_all_or_nothing():
    pool = PagePool(8, 128)
    held = pool.allocate(5)
    free_before = pool.free_pages()
    assert pool.allocate(4) is None
    assert pool.free_blocks == 3 and pool.free_pages() == free_before
    assert all(not pool.is_allocated(p) for p in range(8) if p not in held)
    assert pool.counters.failed_allocations == 1
    assert pool.allocate(3) is not None and pool.free_blocks == 0


def test_allocate_zero_is_empty_and_changes_nothing():
    pool = PagePool(4, 16)
    assert pool.allocate(0) == []
    assert pool.free_blocks == 4


def test_free_returns_pages_and_they_are_reused():
    pool = PagePool(4, 16)
    pages = pool.allocate(4)
    pool.free(pages[1:3])
    assert pool.free_blocks == 2
    assert not pool.is_allocated(pages[1]) and pool.is_allocated(pages[0])
    again = pool.allocate(2)
    assert sorted(again) == sorted(pages[1:3])


def test_double_free_is_an_error_and_changes_nothing():
    pool = PagePool(4, 16)
    pages = pool.allocate(2)
    pool.free([pages[0]])
    with pytest.raises(ValueError, match="not allocated"):
        pool.free([pages[0]])
    assert pool.free_blocks == 3
    # a batch with one bad page frees none of them
    with pytest.raises(ValueError):
        pool.free([pages[1], pages[0]])
    assert pool.free_blocks == 3 and pool.is_allocated(pages[1])


@pytest.mark.parametrize("page", [-1, 4, 100])
def test_free_foreign_page_is_an_error(page):
    pool = PagePool(4, 16)
    pool.allocate(4)
    with pytest.raises(ValueError, match="not allocated from this pool"):
        pool.free([page])
    assert pool.free_blocks == 0


def test_free_never_allocated_page_is_an_error():
    pool = PagePool(4, 16)
    pool.allocate(1)
    with pytest.raises(ValueError):
        pool.free([3])
    assert pool.free_blocks == 3


def test_free_duplicates_is_an_error():
    pool = PagePool(4, 16)
    pages = pool.allocate(2)
    with pytest.raises(ValueError, match="distinct"):
        pool.free([pages[0], pages[0]])
    assert pool.free_blocks == 2 and pool.is_allocated(pages[0])


def test_counters():
    pool = PagePool(6, 16)
    a = pool.allocate(2)
    b = pool.allocate(3)
    assert pool.allocate(2) is None
    pool.free(a)
    c = pool.allocate(1)
    pool.free(b + c)
    k = pool.counters
    assert k.allocations == 3
    assert k.failed_allocations == 1
    assert k.pages_allocated == 6
    assert pool.free_blocks == 6


def test_pages_are_independent_rows_of_storage():
    pool = PagePool(4, 32)
    pages = pool.allocate(2)
    pool.storage[pages[0]] = 7
    pool.storage[pages[1]] = 9
    assert int(pool.storage[pages[0]].sum()) == 7 * 32
    assert int(pool.storage[pages[1]].sum()) == 9 * 32


@pytest.mark.parametrize(
    ("width", "dtype"), [(64, torch.int64), (12, torch.int32), (6, torch.int16), (3, torch.uint8)]
)
def test_page_bytes_move_in_the_widest_words_a_page_divides_into(width, dtype):
    pages = torch.arange(4 * width, dtype=torch.uint8).reshape(4, width)
    words = as_words(pages)
    assert words.dtype == dtype and words.shape == (4, width // dtype.itemsize)
    gathered = words.index_select(0, torch.tensor([3, 1])).view(torch.uint8)
    assert torch.equal(gathered, pages[[3, 1]])  # the same bytes, in the pages asked for


def test_pages_taken_and_put_back_are_the_same_bytes(device):
    pool = PagePool(8, 24, device=device)  # 24-byte pages: 8-byte words
    pool.storage.copy_(torch.arange(8 * 24, dtype=torch.uint8).reshape(8, 24))
    before = pool.storage.clone()
    taken = take_pages(pool.storage, [5, 2, 7])
    assert taken.device.type == "cpu" and torch.equal(taken, before[[5, 2, 7]].cpu())
    pool.storage.zero_()
    put_pages(pool.storage, [1, 0, 3], taken)
    assert torch.equal(pool.storage[[1, 0, 3]], before[[5, 2, 7]])
    assert not pool.storage[[2, 4, 5, 6, 7]].any()  # no other page written
