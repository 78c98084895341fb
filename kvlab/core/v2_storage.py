"""How KVCacheManagerV2's storage manager turns a rank's GPU quota into slots (pages) per pool
group, to the block: ``cache_tier_granularity`` and ``_compute_slot_count_for_level``
(tensorrt_llm/runtime/kv_cache_manager_v2/_storage_manager.py at 00f6bd61),
``ratio_to_slot_count_list``, ``_grains_to_slots`` and ``_grains_for_slots``
(``_storage/_core.py`` at d73c2cd7, called the same way from 00f6bd61).

A pool group holds the pages of one life cycle (full attention; a hybrid's recurrent state).
Its pools, one per distinct buffer size, allocate in mirror: K and V of every layer coalesce
into one pool (a page of all layers), NVFP4's block scales form a second, SSM and conv states
one each. Every pool is cut in whole granules (2 MiB, doubled per doubling of the quota past
1 GiB, at most 32 MiB), and the quota is rounded UP to whole granules first, so a pool may hold
a few pages more than ``quota // page bytes``. The groups share the granules by a ratio, the
smaller share first (``round`` of its part), each group at least its floor of slots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvlab.core.arith import div_ceil
from kvlab.core.geometry import KVGeometry
from kvlab.core.memory import MIB

STORAGE_PAGE_BYTES = 2 * MIB


def gpu_granularity(quota_bytes: int) -> int:
    """The GPU tier's granule for a quota (``cache_tier_granularity``; upstream's own
    ``math.log(x, 2)``, kept: it can differ from log2 by one ulp at a power of two)."""
    doublings = int(math.log(quota_bytes / (STORAGE_PAGE_BYTES * 512), 2))
    return STORAGE_PAGE_BYTES << min(4, max(0, doublings))


def grains_for(slots: int, pool_bytes: Sequence[int], granule: int) -> int:
    """Granules ``slots`` slots take in a group whose pools' slots are ``pool_bytes``."""
    return sum(div_ceil(slots * size, granule) for size in pool_bytes)


def slots_in(grains: int, pool_bytes: Sequence[int], granule: int) -> tuple[int, int]:
    """The most slots ``grains`` granules hold in a group, and the granules they take (0, 0
    below one granule a pool). Upstream guesses from a split of the granules by pool size,
    then gallops to the same answer: the largest count that fits."""
    if grains < sum(div_ceil(size, granule) for size in pool_bytes):
        return 0, 0
    total = sum(pool_bytes)
    low = max(0, (grains - len(pool_bytes)) * granule // total)  # fits: ceil adds < 1 a pool
    high = grains * granule // total + 1  # does not fit
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (
            (middle, high)
            if grains_for(middle, pool_bytes, granule) <= grains
            else (
                low,
                middle,
            )
        )
    return low, grains_for(low, pool_bytes, granule)


def slot_counts(
    quota_bytes: int,
    groups: Sequence[Sequence[int]],
    ratio: Sequence[float],
    min_slots: Sequence[int],
) -> list[int]:
    """Slots per pool group from a GPU quota (``_compute_slot_count_for_level``): the quota
    rounded up to granules (at least the floors'), shared by ``ratio`` (smallest first, each
    ``round(budget x its part)`` granules), a group at or under its floor pinned to it and the
    rest shared again, then each group given the slots its granules hold."""
    assert len(groups) == len(ratio) == len(min_slots) and all(r > 0 for r in ratio)
    granule = gpu_granularity(quota_bytes)
    floor_bytes = sum(
        div_ceil(least * size, granule) * granule
        for least, pools in zip(min_slots, groups)
        for size in pools
    )
    left = max(floor_bytes, div_ceil(quota_bytes, granule) * granule) // granule
    counts = [0] * len(groups)
    active = list(range(len(groups)))
    while active:
        budget, given = left, {}
        for position, group in enumerate(sorted(active, key=lambda g: ratio[g])):
            rest = sorted(active, key=lambda g: ratio[g])[position:]
            part = ratio[group] / sum(ratio[g] for g in rest)
            given[group] = slots_in(round(budget * part), groups[group], granule)
            budget -= given[group][1]
        pinned = [g for g in active if given[g][0] <= min_slots[g]]
        if not pinned:
            for group in active:
                counts[group] = given[group][0]
            break
        for group in pinned:
            counts[group], used = slots_in(
                grains_for(min_slots[group], groups[group], granule), groups[group], granule
            )
            left -= used
        active = [g for g in active if g not in pinned]
        if active and left <= 0:
            raise ValueError("Insufficient quota to satisfy min_slots constraints")
    for group, pools in enumerate(groups):  # a count the granules it takes hold one more of
        taken = grains_for(counts[group], pools, granule)
        while grains_for(counts[group] + 1, pools, granule) <= taken:
            counts[group] += 1
    return counts


def dense_pages(quota_bytes: int, geometry: KVGeometry) -> int:
    """Pages a quota gives a model whose every layer is full attention: one pool group, floor
    one page (no typical step or constraint unless ``avg_seq_len`` is set: ``_build_base_config``,
    kv_cache_manager_v2.py at 00043967). [kvlab] Under one page's bytes, which the storage would
    round up to one page, is no pool: what the executor does there is not modelled."""
    if quota_bytes < geometry.bytes_per_block:
        return 0
    return slot_counts(quota_bytes, [geometry.pool_bytes], [1.0], [1])[0]
