"""PagePool: the KV pool as one real torch tensor, a free list and counters.

The storage is exactly ``num_blocks * bytes_per_block`` bytes on the chosen device, like the
page pools the TensorRT-LLM V2 manager allocates (cpp/tensorrt_llm/batch_manager/
kv_cache_manager_v2/). Allocation is all-or-nothing: a request for more pages than are free
gets ``None`` and changes nothing, which is what lets ``KVCache.resize`` return False with no
side effects (docs/REFERENCE.md §3 step 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from kvlab.core.checks import MAX_COUNT, check_int


def resolve_device(device) -> torch.device:
    """Turn "cpu"/"cuda"/"cuda:N" (or a torch.device) into a device, with a clear error when
    CUDA is asked for but absent."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}") from exc
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} needs a CUDA GPU, and torch sees none; use device='cpu'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device={device!r}: torch sees {torch.cuda.device_count()} CUDA GPU(s), "
                         f"so the index must be in [0, {torch.cuda.device_count() - 1}]")
    return dev


@dataclass
class PoolCounters:
    """Running totals since the pool was built."""

    allocations: int = 0
    failed_allocations: int = 0
    pages_allocated: int = 0
    pages_freed: int = 0
    peak_used: int = 0


class PagePool:
    """``num_blocks`` pages of ``bytes_per_block`` bytes each, backed by one uint8 tensor."""

    def __init__(self, num_blocks: int, bytes_per_block: int, device="cpu"):
        check_int("num_blocks", num_blocks, low=1, high=MAX_COUNT)
        check_int("bytes_per_block", bytes_per_block, low=1, high=MAX_COUNT)
        self.device = resolve_device(device)
        self.num_blocks = num_blocks
        self.bytes_per_block = bytes_per_block
        self.storage = torch.empty((num_blocks, bytes_per_block), dtype=torch.uint8, device=self.device)
        # Pop from the end: page 0 is handed out first, so small runs read naturally.
        self._free: List[int] = list(range(num_blocks - 1, -1, -1))
        self._owned = bytearray(num_blocks)  # 1 where a page is handed out
        self.counters = PoolCounters()

    @property
    def nbytes(self) -> int:
        """Bytes of real storage: num_blocks * bytes_per_block."""
        return self.storage.numel() * self.storage.element_size()

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def allocate(self, count: int) -> Optional[List[int]]:
        """Hand out ``count`` pages, or return None and change nothing if fewer are free."""
        check_int("count", count, low=0, high=MAX_COUNT)
        if count > len(self._free):
            self.counters.failed_allocations += 1
            return None
        pages = [self._free.pop() for _ in range(count)]
        for page in pages:
            self._owned[page] = 1
        self.counters.allocations += 1
        self.counters.pages_allocated += count
        self.counters.peak_used = max(self.counters.peak_used, self.used_blocks)
        return pages

    def free(self, pages: Sequence[int]) -> None:
        """Return pages to the free list; freeing a page that is not handed out is an error."""
        if len(set(pages)) != len(pages):
            raise ValueError(f"pages to free must be distinct, got {list(pages)}")
        for page in pages:
            if not (0 <= page < self.num_blocks) or not self._owned[page]:
                raise ValueError(f"page {page} is not allocated from this pool "
                                 f"(pages are 0..{self.num_blocks - 1})")
        for page in pages:
            self._owned[page] = 0
            self._free.append(page)
        self.counters.pages_freed += len(pages)

    def is_allocated(self, page: int) -> bool:
        return 0 <= page < self.num_blocks and bool(self._owned[page])
