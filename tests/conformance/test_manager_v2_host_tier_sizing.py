"""TensorRT-LLM's tests of KVCacheManagerV2's automatic host tier, ported onto kvlab.

Upstream: NVIDIA/TensorRT-LLM, ``tests/unittest/_torch/executor/kv_cache/test_kvv2_host_tier_sizing.py``
at commit 505d7c1bb4cc08ebffd7018973fb255d5893fdf2 (inventory:
``inventory/manager_v2_host_tier_sizing.txt``).

Upstream calls ``_compute_auto_host_tier_quota(quota, local_ranks, mem_available, memlock_limit,
shares_device_memory=False)`` and ``_sync_host_tier_quota(local_quota, mapping)``; kvlab's
counterparts are :func:`kvlab.core.host_tier.auto_host_tier_bytes` (``gpu_quota_bytes``,
``local_ranks``, ``host_available_bytes``, ``memlock_limit_bytes``, ``shares_device_memory``;
``float("inf")`` is an unknown limit, as the real readers answer) and
:func:`kvlab.core.host_tier.sync_host_tier_quota` (``local_quota``, ``world_size``, ``comm``). The
cross-rank sync runs on kvlab's in-process communicator (:class:`kvlab.run.comm.ThreadComm`,
threads on the CPU) instead of an MPI pool.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kvlab.core.host_tier import auto_host_tier_bytes, sync_host_tier_quota
from kvlab.run.comm import ThreadComm

GiB = 1 << 30
INF = float("inf")

NOT_MODELLED = {}  # every upstream test of this file is ported

#: The adaptation of the sync tests: upstream's Mapping becomes a world size and a communicator.
THREADS = "two ranks as threads on kvlab's ThreadComm (CPU) instead of an MPI pool"


class TestComputeAutoHostTierQuota:
    @pytest.mark.upstream(
        "TestComputeAutoHostTierQuota::test_single_rank_uses_device_quota_when_memory_is_ample"
    )
    def test_single_rank_uses_device_quota_when_memory_is_ample(self):
        # 1 rank, 440 GiB available: cap = 220 GiB > quota -> quota wins.
        assert (
            auto_host_tier_bytes(
                173 * GiB,
                local_ranks=1,
                host_available_bytes=float(440 * GiB),
                memlock_limit_bytes=INF,
            )
            == 173 * GiB
        )

    @pytest.mark.upstream(
        "TestComputeAutoHostTierQuota::test_colocated_ranks_divide_node_memory_budget"
    )
    def test_colocated_ranks_divide_node_memory_budget(self):
        assert auto_host_tier_bytes(
            173 * GiB, local_ranks=4, host_available_bytes=float(440 * GiB), memlock_limit_bytes=INF
        ) == int(440 * GiB / 4 * 0.5)

    @pytest.mark.upstream(
        "TestComputeAutoHostTierQuota::test_aggregate_across_ranks_stays_within_available_memory"
    )
    def test_aggregate_across_ranks_stays_within_available_memory(self):
        local_ranks = 4
        mem_available = float(440 * GiB)
        per_rank = auto_host_tier_bytes(
            173 * GiB,
            local_ranks=local_ranks,
            host_available_bytes=mem_available,
            memlock_limit_bytes=INF,
        )
        assert per_rank * local_ranks <= mem_available

    @pytest.mark.upstream(
        "TestComputeAutoHostTierQuota::test_integrated_gpu_charges_device_quota_against_budget"
    )
    def test_integrated_gpu_charges_device_quota_against_budget(self):
        quota = 81 * GiB
        mem_available = float(93 * GiB)
        host_quota = auto_host_tier_bytes(
            quota,
            local_ranks=1,
            host_available_bytes=mem_available,
            memlock_limit_bytes=INF,
            shares_device_memory=True,
        )
        assert host_quota == int((93 - 81) * GiB / 1 * 0.5)
        assert quota + host_quota <= mem_available

    @pytest.mark.upstream(
        "TestComputeAutoHostTierQuota::test_integrated_gpu_without_headroom_provisions_no_tier"
    )
    def test_integrated_gpu_without_headroom_provisions_no_tier(self):
        assert (
            auto_host_tier_bytes(
                95 * GiB,
                local_ranks=1,
                host_available_bytes=float(93 * GiB),
                memlock_limit_bytes=INF,
                shares_device_memory=True,
            )
            == 0
        )

    @pytest.mark.upstream("TestComputeAutoHostTierQuota::test_memlock_limit_caps_quota")
    def test_memlock_limit_caps_quota(self):
        assert auto_host_tier_bytes(
            173 * GiB, local_ranks=1, host_available_bytes=INF, memlock_limit_bytes=float(10 * GiB)
        ) == int(10 * GiB * 0.8)

    @pytest.mark.upstream(
        "TestComputeAutoHostTierQuota::test_unknown_limits_fall_back_to_device_quota"
    )
    def test_unknown_limits_fall_back_to_device_quota(self):
        assert (
            auto_host_tier_bytes(
                173 * GiB, local_ranks=8, host_available_bytes=INF, memlock_limit_bytes=INF
            )
            == 173 * GiB
        )

    @pytest.mark.upstream(
        "TestComputeAutoHostTierQuota::test_non_positive_result_falls_back_to_device_quota"
    )
    @pytest.mark.parametrize("memlock_limit", [0.0, float(1)])
    def test_non_positive_result_falls_back_to_device_quota(self, memlock_limit):
        assert (
            auto_host_tier_bytes(
                173 * GiB,
                local_ranks=4,
                host_available_bytes=float(440 * GiB),
                memlock_limit_bytes=memlock_limit,
            )
            == 173 * GiB
        )

    @pytest.mark.upstream("TestComputeAutoHostTierQuota::test_result_is_always_positive")
    def test_result_is_always_positive(self):
        assert (
            auto_host_tier_bytes(
                173 * GiB, local_ranks=4, host_available_bytes=0.0, memlock_limit_bytes=INF
            )
            > 0
        )


class _NoCollectives:
    """A communicator that fails the test if any collective is called."""

    def all_reduce_min(self, value):
        raise AssertionError("a single rank must not touch the collective layer")


class TestSyncHostTierQuota:
    @pytest.mark.upstream(
        "TestSyncHostTierQuota::test_single_rank_is_a_noop",
        adaptation="upstream's Mapping(world_size=1) becomes world_size=1 and a communicator "
        "whose collectives fail the test",
    )
    def test_single_rank_is_a_noop(self):
        quota = 173 * GiB
        assert sync_host_tier_quota(quota, 1, _NoCollectives()) == quota

    @pytest.mark.upstream(
        "TestSyncHostTierQuota::test_multi_rank_syncs_to_fleet_min", adaptation=THREADS
    )
    def test_multi_rank_syncs_to_fleet_min(self):
        world_size = 2
        per_rank_mem_gib = [440, 880]
        comm = ThreadComm(world_size, timeout_s=5.0)

        def worker(rank):
            local_quota = auto_host_tier_bytes(
                1024 * GiB,
                local_ranks=1,
                host_available_bytes=float(per_rank_mem_gib[rank] * GiB),
                memlock_limit_bytes=INF,
            )
            try:
                synced = sync_host_tier_quota(local_quota, world_size, comm.for_rank(rank))
            except BaseException:
                comm.abort()
                raise
            return {"rank": rank, "local_quota": local_quota, "synced_quota": synced}

        with ThreadPoolExecutor(world_size) as pool:
            results = [f.result() for f in [pool.submit(worker, r) for r in range(world_size)]]

        local_quotas = [r["local_quota"] for r in results]
        synced_quotas = [r["synced_quota"] for r in results]
        assert local_quotas[0] != local_quotas[1], local_quotas
        assert len(set(synced_quotas)) == 1, synced_quotas
        assert synced_quotas[0] == min(local_quotas)
        assert synced_quotas[0] == local_quotas[0]
