"""The page-index table and its width formula (docs/REFERENCE.md §2)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import PageIndexTable, max_blocks_per_seq
from kvlab.core.page_index import BAD_PAGE_INDEX, num_slots, width_seq_len


@pytest.mark.parametrize(
    "max_seq_len, tpb, extra, draft, width",
    [
        (2048, 32, 0, 0, 68),  # the seed, clamped: 2049 -> 65 -> 68
        (8192, 32, 0, 0, 260),  # the seed, configured: 8193 -> 257 -> 260
        (2047, 32, 0, 0, 64),  # 2048 -> 64 -> 64 (already a multiple of 4)
        (2016, 32, 0, 0, 64),  # 2017 -> 64
        (2015, 32, 0, 0, 64),  # 2016 -> 63 -> 64
        (2048, 32, 31, 0, 68),  # 2080 -> 65 -> 68
        (2048, 32, 0, 63, 68),  # 2112 -> 66 -> 68
        (2048, 32, 64, 64, 72),  # 2177 -> 69 -> 72
        (1, 1, 0, 0, 4),  # 2 -> 2 -> 4
        (127, 1, 0, 0, 128),  # 128 -> 128
        (128, 1, 0, 0, 132),  # 129 -> 132
        (8192, 64, 0, 3, 132),  # 8196 -> 129 -> 132
        (4096, 16, 2, 1, 260),  # 4100 -> 257 -> 260
    ],
)
def test_width_table(max_seq_len, tpb, extra, draft, width):
    assert max_blocks_per_seq(max_seq_len, tpb, extra, draft) == width
    assert width % 4 == 0


def independent_width(max_seq_len, tpb, extra, draft):
    tokens = max_seq_len + extra + draft + 1
    blocks = math.ceil(tokens / tpb)
    return 4 * math.ceil(blocks / 4)


@settings(deadline=None, max_examples=200)
@given(st.integers(1, 1 << 24), st.integers(1, 1024), st.integers(0, 4096), st.integers(0, 64))
def test_width_matches_closed_form(max_seq_len, tpb, extra, draft):
    width = max_blocks_per_seq(max_seq_len, tpb, extra, draft)
    assert width == independent_width(max_seq_len, tpb, extra, draft)
    assert width % 4 == 0
    # the row spans at least the longest sequence plus the decode token, and wastes < 4 + 1 pages
    assert width * tpb >= max_seq_len + extra + draft + 1
    assert (width - 4) * tpb < max_seq_len + extra + draft + 1


def test_width_policies():
    assert width_seq_len("clamped", 8192, 2048) == 2048
    assert width_seq_len("configured", 8192, 2048) == 8192
    with pytest.raises(ValueError, match="page_index_policy"):
        width_seq_len("bounded-ish", 8192, 2048)


@pytest.mark.parametrize(
    "batch, pp, disagg, slots",
    [
        (1, 1, False, 2),
        (8, 1, False, 9),
        (8, 2, False, 17),
        (8, 1, True, 17),
        (4, 2, True, 17),
    ],
)
def test_slots(batch, pp, disagg, slots):
    assert num_slots(batch, pp, disagg) == slots
    table = PageIndexTable(batch, 68, pp_size=pp, disaggregated=disagg)
    assert table.slots == slots
    assert table.table.shape == (1, slots, 2, 68)
    assert table.free_slots == slots - 1  # the dummy is never handed out


def test_real_int32_tensor_full_of_unused_entries():
    table = PageIndexTable(2, 68)
    assert isinstance(table.table, torch.Tensor)
    assert table.table.dtype == torch.int32
    assert bool((table.table == BAD_PAGE_INDEX).all())
    assert BAD_PAGE_INDEX == -1
    assert table.nbytes == 1 * 3 * 2 * 68 * 4
    assert table.nbytes == table.table.numel() * 4


def test_shape_with_pools_and_beams():
    table = PageIndexTable(3, 12, num_pools=2, beam_width=4)
    assert table.table.shape == (2, 4 * 4, 2, 12)
    assert table.nbytes == 2 * 16 * 2 * 12 * 4


def test_nbytes_grows_linearly_with_width_and_batch():
    def nbytes(batch, width):
        return PageIndexTable(batch, width).nbytes

    assert nbytes(1, 68) == 2 * 2 * 68 * 4 == 1088
    assert nbytes(1, 260) == 2 * 2 * 260 * 4 == 4160
    widths = [4, 8, 68, 260, 1024]
    per_entry = {nbytes(1, w) / w for w in widths}
    assert per_entry == {2 * 2 * 4}  # slots * planes * int32 bytes per unit of width
    for w in (68, 260):
        sizes = [nbytes(b, w) for b in range(1, 9)]
        steps = {b - a for a, b in zip(sizes, sizes[1:])}
        assert steps == {2 * w * 4}  # one more slot per unit of batch


def test_row_is_a_zero_copy_view():
    table = PageIndexTable(2, 8)
    slot = table.acquire_slot()
    row = table.row(slot)
    table.write(slot, 0, [5, 6, 7])
    assert row.tolist()[:4] == [5, 6, 7, -1]
    assert row.data_ptr() == table.table[0, slot, 0].data_ptr()
    # both planes get the ids
    assert table.table[0, slot, 1].tolist()[:3] == [5, 6, 7]
    table.clear(slot, 1)
    assert row.tolist() == [5] + [-1] * 7


def test_slot_exhaustion_and_release():
    table = PageIndexTable(2, 8)
    a, b = table.acquire_slot(), table.acquire_slot()
    assert {a, b} == {0, 1} and table.dummy_slot == 2
    with pytest.raises(RuntimeError, match="slots are in use"):
        table.acquire_slot()
    table.write(a, 0, [1, 2])
    table.release_slot(a)
    assert table.row(a).tolist() == [-1] * 8
    assert table.acquire_slot() == a


def test_release_slot_twice_is_an_error():
    table = PageIndexTable(2, 8)
    a = table.acquire_slot()
    table.release_slot(a)
    with pytest.raises(ValueError, match="slot"):
        table.release_slot(a)
    with pytest.raises(ValueError, match="slot"):
        table.release_slot(table.dummy_slot)
    assert table.free_slots == 2


def test_only_acquired_rows_are_written_and_only_inside_the_row():
    table = PageIndexTable(2, 8)  # slots 0 and 1 for caches, slot 2 the CUDA-graph dummy
    slot = table.acquire_slot()
    table.write(slot, 6, [1, 2])
    assert table.row(slot).tolist()[6:] == [1, 2]
    for bad_slot in (table.dummy_slot, 99, 1 - slot, True):
        with pytest.raises(ValueError, match="not an acquired page-index slot"):
            table.write(bad_slot, 0, [3])
    for start in (-3, 7, 2.0):
        with pytest.raises(ValueError, match=r"start must be in \[0, 6\]"):
            table.write(slot, start, [4, 5])
    with pytest.raises(ValueError, match=r"start must be in \[0, 8\]"):
        table.clear(slot, -1)
    assert table.row(slot).tolist()[6:] == [1, 2]  # nothing written by a refused call
