"""The size of the host page-index table (kvlab.core.page_index): its slots, its bytes, and
kvlab's own limit (not the real one's): a table above ``MAX_TABLE_BYTES`` is refused, naming
max_batch_size and the width, before torch is asked for the memory."""

from __future__ import annotations

from typing import Any

#: The largest host table kvlab builds (1 GiB of int32): a configured width times a large batch
#: would otherwise ask torch for tens of GiB. The real table of a 1M-token row (tokens_per_block
#: 32) for 2048 sequences takes 0.5 GiB.
MAX_TABLE_BYTES = 1 << 30


def num_slots(
    max_batch_size: int,
    pp_size: int = 1,
    disaggregated: bool = False,
    overlap_scheduler: bool = False,
    num_reserved: int = 1,
) -> int:
    """Rows of the table: max_batch_size * pp_size, twice over when disaggregated or (at
    pp_size 1) under the overlap scheduler, plus the reserved slots."""
    doubled = disaggregated or (overlap_scheduler and pp_size == 1)
    return max_batch_size * pp_size * (2 if doubled else 1) + num_reserved


def table_nbytes(
    max_batch_size: int,
    width: int,
    pp_size: int = 1,
    disaggregated: bool = False,
    num_pools: int = 1,
    beam_width: int = 1,
    **slot_options: Any,
) -> int:
    """Bytes of the int32 table ``[num_pools, slots * beam_width, 2, width]``."""
    slots = num_slots(max_batch_size, pp_size, disaggregated, **slot_options)
    return num_pools * slots * beam_width * 2 * width * 4


def check_table_size(
    max_batch_size: int,
    width: int,
    pp_size: int = 1,
    disaggregated: bool = False,
    num_pools: int = 1,
    beam_width: int = 1,
    **slot_options: Any,
) -> int:
    """The table's bytes; ValueError naming the parameters when they exceed MAX_TABLE_BYTES."""
    nbytes = table_nbytes(
        max_batch_size, width, pp_size, disaggregated, num_pools, beam_width, **slot_options
    )
    if nbytes > MAX_TABLE_BYTES:
        slots = num_slots(max_batch_size, pp_size, disaggregated, **slot_options)
        raise ValueError(
            f"the page-index table would take {nbytes} bytes, more than MAX_TABLE_BYTES="
            f"{MAX_TABLE_BYTES} (1 GiB): max_batch_size={max_batch_size} (slots={slots}) x "
            f"width={width} entries (max_blocks_per_seq) x num_pools={num_pools} x "
            f"beam_width={beam_width} x 2 planes x 4 bytes; lower max_batch_size or max_seq_len, "
            "or raise tokens_per_block"
        )
    return nbytes
