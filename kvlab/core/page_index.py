"""The host page-index table and its width policies (REFERENCE.md §2): the int32 tensor
``KVCacheManagerV2`` builds (tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at
0004396720), one row per sequence slot; a cache's row is its "user-provided base page indices".
The width policy picks the max_seq_len the row is sized from: "clamped" (since PR #12306; 2049
-> 65 -> 68 entries in the seed) or "configured" (the one-line fix; 8193 -> 257 -> 260).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from kvlab.core.arith import div_ceil
from kvlab.core.checks import check_bools, check_choice, check_param
from kvlab.core.table_size import check_table_size, num_slots

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    import numpy.typing as npt

#: Value of an unused entry (the real table's BAD_PAGE_INDEX).
BAD_PAGE_INDEX = -1
#: Rows are padded to a multiple of this for the copy_block_offsets kernel.
WIDTH_ALIGNMENT = 4


def max_blocks_per_seq(
    max_seq_len: int,
    tokens_per_block: int,
    num_extra_kv_tokens: int = 0,
    reserved_draft_tokens: int = 0,
) -> int:
    """Width of one page-index row (REFERENCE.md §2): ``round_up_to_multiple_of_4(ceil((max_seq_len
    + extra + drafts + 1) / tokens_per_block))``; +1 the decode token, 4 for copy_block_offsets."""
    max_seq_len = check_param("max_seq_len", max_seq_len)
    tokens_per_block = check_param("tokens_per_block", tokens_per_block)
    num_extra_kv_tokens = check_param("num_extra_kv_tokens", num_extra_kv_tokens)
    reserved_draft_tokens = check_param("reserved_draft_tokens", reserved_draft_tokens)
    tokens = max_seq_len + num_extra_kv_tokens + reserved_draft_tokens + 1
    return div_ceil(div_ceil(tokens, tokens_per_block), WIDTH_ALIGNMENT) * WIDTH_ALIGNMENT


#: Width policies: which max_seq_len sizes the table.
WIDTH_POLICIES = {
    "clamped": "the memory-clamped max_seq_len (historical, since PR #12306)",
    "configured": "the configured max_seq_len (the one-line fix)",
}


def width_seq_len(policy: str, configured_max_seq_len: int, clamped_max_seq_len: int) -> int:
    """The max_seq_len a width policy sizes the table from."""
    check_choice("page_index_policy", policy, WIDTH_POLICIES)
    return clamped_max_seq_len if policy == "clamped" else configured_max_seq_len


class PageIndexTable:
    """The table ``[num_pools, slots * beam_width, 2, width]``: a real int32 tensor. The last
    ``num_reserved`` slots (the CUDA-graph dummy last) are never handed out; page ids go to both
    the K and V planes (the real per-plane offsets differ by a constant for one pool)."""

    def __init__(
        self,
        max_batch_size: int,
        width: int,
        pp_size: int = 1,
        disaggregated: bool = False,
        num_pools: int = 1,
        beam_width: int = 1,
        pin_memory: bool = False,
        overlap_scheduler: bool = False,
        num_reserved: int = 1,
    ):
        max_batch_size = check_param("max_batch_size", max_batch_size)
        width = check_param("max_blocks_per_seq", width, "width (max_blocks_per_seq)")
        pp_size = check_param("pp_size", pp_size)
        num_pools = check_param("num_pools", num_pools)
        beam_width = check_param("beam_width", beam_width)
        check_bools(
            disaggregated=disaggregated, overlap_scheduler=overlap_scheduler, pin_memory=pin_memory
        )
        num_reserved = check_param("num_reserved_index_slots", num_reserved)
        sizes = (max_batch_size, width, pp_size, disaggregated, num_pools, beam_width)
        check_table_size(*sizes, overlap_scheduler=overlap_scheduler, num_reserved=num_reserved)
        self.slots = num_slots(
            max_batch_size, pp_size, disaggregated, overlap_scheduler, num_reserved
        )
        self.width = width
        self.beam_width = beam_width
        shape = (num_pools, self.slots * beam_width, 2, width)
        pin = pin_memory and torch.cuda.is_available()
        self.table = torch.full(shape, BAD_PAGE_INDEX, dtype=torch.int32, pin_memory=pin)
        self._array = self.table.numpy()  # the same memory; a numpy slice write is cheaper
        self.dummy_slot = self.slots - 1
        #: slots a cache may take (the rest are reserved)
        self.cache_slots = self.slots - num_reserved
        self._free_slots = list(range(self.cache_slots - 1, -1, -1))
        self._acquired: set[int] = set()
        self._ends = np.zeros(self.slots, dtype=np.int64)  # per slot: entries from here unused

    @property
    def nbytes(self) -> int:
        """Bytes of the host table: the metadata cost a wider row multiplies."""
        return self.table.nbytes

    @property
    def free_slots(self) -> int:
        return len(self._free_slots)

    def acquire_slot(self) -> int:
        """Take a free row for a new cache."""
        if not self._free_slots:
            raise RuntimeError(
                f"all {self.cache_slots} page-index slots are in use "
                "(max_batch_size * pp_size sequences)"
            )
        slot = self._free_slots.pop()
        self._acquired.add(slot)
        return slot

    def release_slot(self, slot: int) -> None:
        """Give a row back (a slot not handed out is an error: two caches would share it)."""
        self._check_acquired(slot)
        self.clear(slot, 0)
        self._acquired.discard(slot)
        self._free_slots.append(slot)

    def _check_acquired(self, slot: object) -> None:
        if type(slot) is not int or slot not in self._acquired:
            raise ValueError(
                f"slot {slot!r} is not an acquired page-index slot (slots are "
                f"0..{self.cache_slots - 1}; the reserved ones are never handed out)"
            )

    def _rows(self, slot: int) -> npt.NDArray[np.int32]:
        """The slot's rows, every pool and beam (a numpy view of the table)."""
        return self._array[:, slot * self.beam_width : (slot + 1) * self.beam_width]

    def row(self, slot: int) -> torch.Tensor:
        """A cache's base page indices: a zero-copy view, pool 0, beam 0, K plane."""
        return self.table[0, slot * self.beam_width, 0]

    def write(self, slot: int, start: int, pages: Sequence[int]) -> None:
        """Write page ids into entries [start, start + len(pages)) of an acquired slot's row."""
        self._check_acquired(slot)
        if type(start) is not int or not 0 <= start <= self.width - len(pages):
            raise ValueError(
                f"start must be in [0, {self.width - len(pages)}] to write "
                f"{len(pages)} entries into a row of {self.width}, got {start!r}"
            )
        self._rows(slot)[..., start : start + len(pages)] = np.asarray(pages, dtype=np.int32)
        self._ends[slot] = max(int(self._ends[slot]), start + len(pages))

    def write_runs(
        self, slots: Sequence[int], starts: Sequence[int], counts: Sequence[int], pages: list[int]
    ) -> None:
        """Write ``counts[i]`` of ``pages``, in order, into slot ``slots[i]``'s row from entry
        ``starts[i]``: many caches' growth in one scattered write (slots acquired, distinct)."""
        slots_, counts_ = np.asarray(slots, dtype=np.int64), np.asarray(counts, dtype=np.int64)
        ends = np.asarray(starts, dtype=np.int64) + counts_
        self._ends[slots_] = np.maximum(self._ends[slots_], ends)
        # a page's entry: its run's last entry, less the pages after it in the run
        columns = np.repeat(ends - np.cumsum(counts_), counts_) + np.arange(len(pages))
        by_beam = self._array.reshape(-1, self.slots, self.beam_width, 2, self.width)
        values = np.asarray(pages, dtype=np.int32)[:, None, None, None]
        by_beam[:, np.repeat(slots_, counts_), :, :, columns] = values  # every pool, beam, plane

    def clear(self, slot: int, start: int) -> None:
        """Mark entries from ``start`` to the end of an acquired slot's row unused."""
        self._check_acquired(slot)
        if type(start) is not int or not 0 <= start <= self.width:
            raise ValueError(f"start must be in [0, {self.width}], got {start!r}")
        end = int(self._ends[slot])
        self._rows(slot)[..., start:end] = BAD_PAGE_INDEX
        self._ends[slot] = min(start, end)
