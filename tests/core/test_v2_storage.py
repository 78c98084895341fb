"""The V2 storage manager's arithmetic (kvlab.core.v2_storage), against cases worked by hand."""

import pytest

from kvlab.core.geometry import KVGeometry
from kvlab.core.v2_storage import dense_pages, gpu_granularity, slot_counts

MIB, GIB = 1 << 20, 1 << 30


@pytest.mark.parametrize(
    "quota, granule",
    [
        (4 * MIB, 2 * MIB),
        (GIB, 2 * MIB),
        (2 * GIB, 4 * MIB),
        (5 * GIB, 8 * MIB),
        (64 * GIB, 32 * MIB),
    ],
)
def test_the_granule_doubles_with_the_quota_past_one_gib_up_to_32_mib(quota, granule):
    assert gpu_granularity(quota) == granule


def test_a_dense_quota_is_rounded_up_to_whole_granules_before_pages_are_cut():
    """5 GiB + 1 B: granules of 8 MiB, so 5 GiB + 8 MiB, 1,282 pages of 4 MiB (not 1,280)."""
    geometry = KVGeometry(32, 8, 128, "bfloat16")  # a 4 MiB page of 32 tokens
    assert geometry.bytes_per_block == 4 * MIB
    assert dense_pages(5 * GIB + 1, geometry) == 1282
    assert dense_pages(5 * GIB, geometry) == 1280  # already whole granules
    assert dense_pages(4 * MIB - 1, geometry) == 0  # under one page: no pool


def test_nvfp4_scales_are_a_second_pool_of_the_same_group():
    geometry = KVGeometry(32, 8, 128, "nvfp4")
    data, scales = geometry.pool_bytes
    assert data + scales == geometry.bytes_per_block and data == 8 * scales  # 8 B data, 1 B scale
    quota = 3 * GIB + 5 * MIB  # granules of 4 MiB: 3 GiB + 8 MiB
    pages = dense_pages(quota, geometry)
    whole = (3 * GIB + 8 * MIB) // 4 // MIB  # 770 granules
    assert pages == max(
        n
        for n in range(pages - 8, pages + 8)
        if -(-n * data // (4 * MIB)) + -(-n * scales // (4 * MIB)) <= whole
    )


def test_two_groups_share_granules_by_ratio_the_smaller_share_first():
    """8 GiB in 512 granules of 16 MiB; the state group (pools of 3 and 1 MiB) takes
    round(512 x 0.25) = 128 granules, 512 slots; attention (1 MiB pages) the other 384."""
    groups = [[MIB], [3 * MIB, MIB]]
    assert slot_counts(8 * GIB, groups, [0.75, 0.25], [1, 40]) == [6144, 512]


def test_a_group_at_or_under_its_floor_is_pinned_to_it_and_the_rest_shared_again():
    """Floor 600 states: 151 granules hold 602 of them (ceil(3n/16) + ceil(n/16) <= 151);
    attention gets the other 361 granules."""
    groups = [[MIB], [3 * MIB, MIB]]
    assert slot_counts(8 * GIB, groups, [0.75, 0.25], [1, 600]) == [361 * 16, 602]
