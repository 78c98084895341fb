"""PagePool: the KV pool as one real torch tensor of ``num_blocks * bytes_per_block`` bytes,
a compact free stack and counters (the V2 manager's page pools,
cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/). Allocation is all or nothing: too few
free pages gives ``None`` and changes nothing (REFERENCE.md §3 step 4).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from kvlab.core.checks import check_int


def resolve_device(device: str | torch.device) -> torch.device:
    """Turn "cpu"/"cuda"/"cuda:N" (or a torch.device) into a device, with a clear error when
    CUDA is asked for but absent."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError, OverflowError):
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r:.60}") from None
    if dev.type not in ("cpu", "cuda") or (dev.type == "cpu" and dev.index):
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} needs a CUDA GPU, and torch sees none; use device='cpu'"
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(
            f"device={device!r}: torch sees {torch.cuda.device_count()} CUDA GPU(s), "
            f"so the index must be in [0, {torch.cuda.device_count() - 1}]"
        )
    return dev


#: Integer words a page's bytes are moved in, widest first.
_WORDS = (torch.int64, torch.int32, torch.int16, torch.uint8)


def as_words(pages: torch.Tensor) -> torch.Tensor:
    """Page bytes (a uint8 tensor, a row a page) viewed as the widest integer words a row
    divides into: torch gathers and scatters rows of bytes element by element (100 pages of
    64 KiB: ~200 ms in bytes, ~1 ms in 8-byte words, on the busy 2-core machine)."""
    assert pages.dtype == torch.uint8, "page bytes are uint8"
    width = pages.shape[-1]
    dtype = next(dtype for dtype in _WORDS if width % dtype.itemsize == 0)
    return pages.view(dtype)


def take_pages(storage: torch.Tensor, pages: Sequence[int]) -> torch.Tensor:
    """A copy of rows ``pages`` of ``storage`` (page bytes, a row a page), in that order, on
    the host. [kvlab] On the CPU numpy gathers them in place of torch, whose gather waits on
    its worker threads when the cores are busy (0.6 ms against 5.5 ms for 100 pages of
    64 KiB under a load of 6): the same bytes of the same tensor."""
    words = as_words(storage)
    if words.device.type == "cpu":
        taken = torch.from_numpy(words.numpy()[np.asarray(pages, dtype=np.int64)])
    else:
        taken = words.index_select(0, torch.tensor(pages, device=words.device)).cpu()
    return taken.view(torch.uint8)


def put_pages(storage: torch.Tensor, pages: Sequence[int], rows: torch.Tensor) -> None:
    """Write ``rows`` (page bytes, on the host) into rows ``pages`` of ``storage``, in order:
    :func:`take_pages` backwards."""
    words, source = as_words(storage), as_words(rows)
    if words.device.type == "cpu":
        words.numpy()[np.asarray(pages, dtype=np.int64)] = source.numpy()
    else:
        index = torch.tensor(pages, device=words.device)
        words.index_copy_(0, index, source.to(words.device))


@dataclass
class PoolCounters:
    """Running totals since the pool was built."""

    allocations: int = 0
    failed_allocations: int = 0
    pages_allocated: int = 0


#: The most pages one pool may have: 2**24 (16,777,216). The bookkeeping costs 5 bytes a page
#: (an int32 free stack and an owner byte), 80 MiB at the limit; real pools have tens of
#: thousands of pages (a GB300's ~200 GB at 32 tokens x 160 KiB a token: ~40,000).
MAX_POOL_BLOCKS = 1 << 24


def check_page(name: str, page: object) -> int:
    """A page number as given to ``free`` or ``is_allocated``: an int, never a bool or a float."""
    if type(page) is int:
        return page
    if isinstance(page, bool) or not isinstance(page, numbers.Integral):
        raise TypeError(
            f"{name} must hold page numbers (ints), got {page!r} ({type(page).__name__})"
        )
    return int(page)


class PagePool:
    """``num_blocks`` pages of ``bytes_per_block`` bytes each, backed by one uint8 tensor.

    The free pages are a compact stack (an int32 array and its height), not a list of Python
    ints, so the bookkeeping stays at 5 bytes a page whatever the pool's size."""

    def __init__(
        self, num_blocks: int, bytes_per_block: int, device: str | torch.device = "cpu"
    ) -> None:
        num_blocks = check_int("num_blocks", num_blocks, low=1, high=MAX_POOL_BLOCKS)
        bytes_per_block = check_int("bytes_per_block", bytes_per_block, low=1)
        self.device = resolve_device(device)
        self.num_blocks = num_blocks
        self.bytes_per_block = bytes_per_block
        self.storage = torch.empty(
            (num_blocks, bytes_per_block), dtype=torch.uint8, device=self.device
        )
        # Pop from the top: page 0 is handed out first, so small runs read naturally.
        self._stack = np.arange(num_blocks - 1, -1, -1, dtype=np.int32)
        self._top = num_blocks  # pages free: self._stack[:self._top]
        self._owned = np.zeros(num_blocks, dtype=np.bool_)  # True where a page is handed out
        self.counters = PoolCounters()

    @property
    def nbytes(self) -> int:
        """Bytes of real storage: num_blocks * bytes_per_block."""
        return self.storage.nbytes

    @property
    def free_blocks(self) -> int:
        return self._top

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self._top

    def allocate(self, count: int) -> list[int] | None:
        """Hand out ``count`` pages, or return None and change nothing if fewer are free."""
        count = check_int("count", count)
        if count > self._top:
            self.counters.failed_allocations += 1
            return None
        self._top -= count
        taken = self._stack[self._top : self._top + count][::-1]
        self._owned[taken] = True
        self.counters.allocations += 1
        self.counters.pages_allocated += count
        pages: list[int] = taken.tolist()
        return pages

    def free(self, pages: Sequence[int]) -> None:
        """Return pages to the free list; freeing a page that is not handed out is an error."""
        if not isinstance(pages, (list, tuple, np.ndarray)):
            raise TypeError(
                f"pages must be a list of page ids, got {pages!r:.80} ({type(pages).__name__})"
            )
        pages = [check_page("pages", page) for page in pages]
        try:
            taken = np.asarray(pages, dtype=np.int64)
        except OverflowError:  # an id past int64
            raise ValueError(
                f"pages: page ids are 0..{self.num_blocks - 1}, got {max(pages, key=abs)}"
            ) from None
        if len(np.unique(taken)) != len(taken):
            raise ValueError(f"pages must be distinct, got {len(taken)} with repeats")
        inside = (taken >= 0) & (taken < self.num_blocks)
        if not (inside.all() and self._owned[taken].all()):
            page = next(int(p) for p, ok in zip(taken, inside) if not ok or not self._owned[p])
            raise ValueError(
                f"pages: page {page} is not allocated from this pool "
                f"(pages are 0..{self.num_blocks - 1})"
            )
        self.give_back(taken)

    def give_back(self, pages: Sequence[int] | np.ndarray) -> None:
        """:meth:`free` without its checks, for the manager, which gives back only pages it took."""
        taken = np.asarray(pages, dtype=np.int64)
        count = len(taken)
        assert self._owned[taken].all(), "a page given back was not handed out"
        self._owned[taken] = False
        self._stack[self._top : self._top + count] = taken
        self._top += count

    def free_pages(self) -> list[int]:
        """The free pages, the next to be handed out last."""
        pages: list[int] = self._stack[: self._top].tolist()
        return pages

    def is_allocated(self, page: int) -> bool:
        page = check_page("page", page)
        return 0 <= page < self.num_blocks and bool(self._owned[page])


def pool_blocks(quota_bytes: int, bytes_per_block: int, tokens_per_block: int) -> int:
    """The pages ``quota_bytes`` holds; ValueError naming quota_bytes when none or more than
    MAX_POOL_BLOCKS (checked before anything is allocated)."""
    blocks = quota_bytes // bytes_per_block
    if blocks == 0:
        raise ValueError(
            f"quota_bytes={quota_bytes} holds no page: one page of "
            f"{tokens_per_block} tokens takes {bytes_per_block} bytes"
        )
    if blocks > MAX_POOL_BLOCKS:
        raise ValueError(
            f"quota_bytes={quota_bytes} holds {blocks} pages of {bytes_per_block} bytes; a pool "
            f"may have at most MAX_POOL_BLOCKS={MAX_POOL_BLOCKS}: lower quota_bytes or raise "
            "tokens_per_block"
        )
    return blocks
