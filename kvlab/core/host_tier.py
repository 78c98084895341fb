"""The cache tier below the GPU: how large it is, and which suspended caches' pages go there.

Mirrors the tier set-up of ``KVCacheManagerV2.__init__``
(tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py at 0004396720, REFERENCE.md
§4a): ``host_cache_size`` None provisions the automatic host tier, 0 none; a disk tier is one more
level. A suspended cache keeps its pages on the GPU until an allocation needs them; then they
move down while the tier has room, in one least-recently-used order with the cached pages no
cache holds (which are evicted): upstream's ``PerLevelEvictionController`` queues both kinds
(tensorrt_llm/runtime/kv_cache_manager_v2/_storage_manager.py ``is_evictable``, read at commit
00f6bd61f297eaefd98fcabd562d3a8e3df12a96). Cached pages evicted from the GPU take the room
suspended caches leave (kvlab.core.prefix_cache keeps them) and make way for them. Simplified:
the tier is a count of pages (host and disk as one), a cache moves all together, nothing is
written to disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from kvlab.core.checks import check_int, check_param

if TYPE_CHECKING:  # pragma: no cover
    from kvlab.core.kv_cache import KVCache

#: What the real readers answer for a limit they could not find (as None does).
UNKNOWN = float("inf")


def auto_host_tier_bytes(
    gpu_quota_bytes: int,
    local_ranks: int = 1,
    host_available_bytes: float | None = None,
    memlock_limit_bytes: float | None = None,
    shares_device_memory: bool = False,
) -> int:
    """The automatic host tier's size (the real ``_compute_auto_host_tier_quota``): the GPU
    quota, capped by half the available host memory per co-located rank and by 80 % of the
    memlock limit; a non-positive cap falls back to the GPU quota. On an integrated GPU
    (``shares_device_memory``) the device quota is charged against the host memory first, and
    with no headroom left there is no tier (0)."""
    candidates = [gpu_quota_bytes]
    if host_available_bytes is not None and host_available_bytes != UNKNOWN:
        budget = host_available_bytes
        if shares_device_memory:
            budget -= gpu_quota_bytes
            if budget <= 0:
                return 0
        candidates.append(int(budget / local_ranks * 0.5))
    if memlock_limit_bytes is not None and memlock_limit_bytes != UNKNOWN:
        candidates.append(int(memlock_limit_bytes * 0.8))
    quota = min(candidates)
    return quota if quota > 0 else gpu_quota_bytes


class MinAllReduce(Protocol):
    """What a rank's collectives offer the tier sizing (kvlab.run.comm)."""

    def all_reduce_min(self, value: int) -> int: ...


def sync_host_tier_quota(
    local_quota: int, world_size: int, comm: MinAllReduce | None = None
) -> int:
    """Every rank's host tier becomes the smallest (the real ``_sync_host_tier_quota``, MIN
    all-reduce, PR #17717); one rank touches no collective. ``comm``: anything with
    ``all_reduce_min(int) -> int`` (kvlab.run.comm)."""
    if world_size <= 1:
        return local_quota
    assert comm is not None, "more than one rank needs a comm"
    return comm.all_reduce_min(local_quota)


def lower_tier_bytes(
    host_cache_size: int | None, disk_cache_size: int | None, gpu_quota_bytes: int
) -> int:
    """Bytes below the GPU: the host tier (``host_cache_size``; None: automatic, 0: none)
    plus the disk tier (``disk_cache_size``; None or 0: none)."""
    if host_cache_size is None:
        host_cache_size = auto_host_tier_bytes(gpu_quota_bytes)
    disk = 0 if disk_cache_size is None else check_int("disk_cache_size", disk_cache_size)
    return check_param("host_cache_size", host_cache_size) + disk


class HostTier:
    """``num_blocks`` pages below the GPU (``used_blocks`` of them hold suspended caches'
    pages), and the suspended caches whose pages are still on the GPU, oldest first, each with
    the tick of the eviction clock it was suspended at."""

    __slots__ = ("num_blocks", "used_blocks", "blocks_on_gpu", "_on_gpu")

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.used_blocks = 0
        #: GPU pages the tracked caches hold (a suspended cache's pages do not change)
        self.blocks_on_gpu = 0
        #: id(cache) -> (tick, cache), in suspension order
        self._on_gpu: dict[int, tuple[int, KVCache]] = {}

    @property
    def free_blocks(self) -> int:
        return self.num_blocks - self.used_blocks

    def track(self, cache: KVCache, tick: int) -> None:
        """``cache`` was suspended at ``tick`` with its pages on the GPU: they may move down."""
        self._on_gpu[id(cache)] = (tick, cache)
        self.blocks_on_gpu += cache.num_blocks

    def untrack(self, cache: KVCache) -> None:
        """``cache`` resumed, was freed or moved down: call before its pages go."""
        if self._on_gpu.pop(id(cache), None) is not None:
            self.blocks_on_gpu -= cache.num_blocks

    @property
    def movable_blocks(self) -> int:
        """At most this many GPU pages could move down now."""
        return min(self.free_blocks, self.blocks_on_gpu)

    def check_invariants(self) -> None:
        caches = [cache for _, cache in self._on_gpu.values()]
        assert self.blocks_on_gpu == sum(c.num_blocks for c in caches), (
            f"{self!r} counts {self.blocks_on_gpu} pages on the GPU"
        )
        assert all(c.suspended for c in caches), "a tracked cache is active"
        ticks = [tick for tick, _ in self._on_gpu.values()]
        assert ticks == sorted(ticks), "suspension order and ticks disagree"

    def choose(self, shortfall: int, released: Iterator[int], pinned: int) -> list[KVCache] | None:
        """The suspended caches to move down (oldest first, each while the tier has room for
        it, but for ``pinned`` pages) so that they and the cached pages to evict free
        ``shortfall`` GPU pages, least recently suspended or released first (``released``: the
        cached pages' release ticks, oldest first); None when even all of them cannot."""
        movers, freed, room = [], 0, self.free_blocks - pinned
        caches = iter(self._on_gpu.values())
        cache_at = next(caches, None)
        cached_at = next(released, None)
        while freed < shortfall:
            while cache_at is not None and not 0 < cache_at[1].num_blocks <= room:
                cache_at = next(caches, None)  # this one cannot move down (or frees nothing)
            if cache_at is not None and (cached_at is None or cache_at[0] < cached_at):
                cache = cache_at[1]
                movers.append(cache)
                freed += cache.num_blocks
                room -= cache.num_blocks
                cache_at = next(caches, None)
            elif cached_at is not None:
                freed += 1  # a cached page is evicted
                cached_at = next(released, None)
            else:
                return None
        return movers

    def take(self, cache: KVCache) -> None:
        """``cache``'s pages move down (call before they leave the GPU)."""
        self.untrack(cache)
        self.used_blocks += cache.num_blocks

    def give_back(self, count: int) -> None:
        assert 0 <= count <= self.used_blocks, (
            f"giving back {count} of {self.used_blocks} host pages"
        )
        self.used_blocks -= count

    def __repr__(self) -> str:
        return (
            f"HostTier({self.used_blocks} of {self.num_blocks} pages used, "
            f"{len(self._on_gpu)} suspended cache(s) still on the GPU)"
        )
