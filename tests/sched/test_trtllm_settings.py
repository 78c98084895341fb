"""kvlab.sched.trtllm_settings: TensorRT-LLM's own configuration builds the manager and the
Scheduler a caller would build by hand from the same arguments, and checks its fields at the
door with the messages of the doors it feeds."""

from __future__ import annotations

import numpy as np
import pytest

from kvlab import KVCacheManager, Request, Scheduler, TrtllmSettings, simulate
from kvlab.analysis.presets import seed_geometry
from kvlab.sched.admission import CapacityAdmission, NoAdmission

SEED = seed_geometry()  # 2,048 B a token, 32-token blocks: 4 MiB is 64 pages, 2,048 tokens
MIB = 1 << 20

#: Every field away from its default; max_seq_len beyond the pool, so the clamp happens.
FIELDS = dict(
    page_index_policy="configured",
    host_cache_size=0,
    enable_block_reuse=False,
    max_num_tokens=4096,
    stall_limit=7,
    enable_chunked_prefill=True,
    admission="capacity",
)


def by_hand(**fields) -> Scheduler:
    manager = KVCacheManager.expecting_clamp(
        SEED,
        4 * MIB,
        8192,
        max_batch_size=3,
        page_index_policy=fields["page_index_policy"],
        host_cache_size=fields["host_cache_size"],
        enable_block_reuse=fields["enable_block_reuse"],
    )
    return Scheduler(
        manager,
        admission=fields["admission"],
        max_num_tokens=fields["max_num_tokens"],
        max_batch_size=3,
        stall_limit=fields["stall_limit"],
        chunked_prefill=fields["enable_chunked_prefill"],
    )


def workload() -> list[Request]:
    return [Request("long", 3000, 16, 0)] + [Request(f"s{i}", 256, 32, i) for i in range(6)]


def manager_fields(manager: KVCacheManager) -> tuple:
    return (
        manager.geometry,
        manager.quota_bytes,
        manager.total_blocks,
        manager.max_seq_len,
        manager.configured_max_seq_len,
        manager.max_blocks_per_seq,
        manager.max_batch_size,
        manager.page_index_policy,
        manager.host_tier.num_blocks,
        manager.has_cache_tier_below_gpu,
        manager.enable_block_reuse,
        repr(manager),
    )


def scheduler_fields(scheduler: Scheduler) -> tuple:
    return (
        type(scheduler.admission),
        scheduler.max_num_tokens,
        scheduler.max_num_requests,
        scheduler.max_batch_size,
        scheduler.stall_limit,
        scheduler.chunked_prefill,
        scheduler.max_context_length,
        scheduler.chunk_unit_size,
        repr(scheduler),
        manager_fields(scheduler.manager),
    )


def outcome(scheduler: Scheduler) -> tuple:
    result = simulate(scheduler, workload(), max_steps=400)
    error = None if result.error is None else (type(result.error), str(result.error))
    return (
        result.summary(),
        result.status,
        result.reasons,
        error,
        result.end_step,
        result.trace.steps,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {
            **FIELDS,
            "page_index_policy": "clamped",
            "host_cache_size": None,
            "enable_block_reuse": True,
            "max_num_tokens": 8192,
            "stall_limit": 1000,
            "enable_chunked_prefill": False,
            "admission": "none",
        },
        FIELDS,
    ],
    ids=["defaults", "every-field-set"],
)
def test_the_settings_build_the_scheduler_and_manager_built_by_hand(fields):
    settings = TrtllmSettings(SEED, 4 * MIB, 8192, 3, **fields)
    hand = by_hand(**fields)
    assert manager_fields(settings.manager()) == manager_fields(hand.manager)
    assert scheduler_fields(settings.scheduler()) == scheduler_fields(hand)
    assert outcome(settings.scheduler()) == outcome(by_hand(**fields))


def test_the_defaults_are_the_doors_defaults():
    settings = TrtllmSettings(SEED, 4 * MIB, 8192, 3)
    scheduler = settings.scheduler()
    plain = Scheduler(scheduler.manager, max_batch_size=3)
    assert isinstance(scheduler.admission, NoAdmission)
    assert (scheduler.max_num_tokens, scheduler.stall_limit, scheduler.chunked_prefill) == (
        plain.max_num_tokens,
        plain.stall_limit,
        plain.chunked_prefill,
    )
    assert scheduler.manager.page_index_policy == "clamped"
    door = KVCacheManager.expecting_clamp(SEED, 4 * MIB, 8192, max_batch_size=3)
    assert scheduler.manager.host_tier.num_blocks == door.host_tier.num_blocks  # automatic
    assert scheduler.manager.enable_block_reuse


def test_each_build_is_fresh_and_an_admission_policy_object_is_taken_as_is():
    policy = CapacityAdmission()
    settings = TrtllmSettings(SEED, 4 * MIB, 8192, 3, admission=policy)
    first, second = settings.scheduler(), settings.scheduler()
    assert first.manager is not second.manager and first.admission is policy
    assert (
        TrtllmSettings(SEED, 4 * MIB, 8192, 3, max_num_tokens=None).scheduler().max_num_tokens
        is None
    )


def test_numpy_fields_are_stored_as_plain_ints():
    settings = TrtllmSettings(
        SEED, np.int64(4 * MIB), np.int32(8192), np.int64(3), stall_limit=np.int64(5)
    )
    assert all(
        type(value) is int
        for value in (
            settings.quota_bytes,
            settings.max_seq_len,
            settings.max_batch_size,
            settings.stall_limit,
        )
    )


@pytest.mark.parametrize(
    "change, error, words",
    [
        (dict(geometry=None), TypeError, "geometry must be a KVGeometry"),
        (dict(quota_bytes=0), ValueError, "quota_bytes must be in [1, "),
        (dict(max_seq_len=2.5), TypeError, "max_seq_len must be an int in [1, "),
        (dict(max_batch_size=True), TypeError, "max_batch_size must be an int in [1, "),
        (dict(max_num_tokens=0), ValueError, "max_num_tokens must be in [1, "),
        (dict(stall_limit=0), ValueError, "stall_limit must be in [1, "),
        (dict(host_cache_size=-1), ValueError, "host_cache_size must be in [0, "),
        (dict(page_index_policy="wide"), ValueError, "page_index_policy must be one of ['clamped'"),
        (dict(enable_block_reuse=1), TypeError, "enable_block_reuse must be a bool"),
        (dict(enable_chunked_prefill="yes"), TypeError, "enable_chunked_prefill must be a bool"),
        (dict(admission="fifo"), ValueError, "admission must be one of ['capacity', 'none']"),
        (dict(admission="vllm"), ValueError, "vLLM's scheduler is a loop of its own"),
    ],
)
def test_bad_fields_are_refused_at_the_door_with_the_doors_messages(change, error, words):
    fields = dict(geometry=SEED, quota_bytes=4 * MIB, max_seq_len=8192, max_batch_size=3)
    with pytest.raises(error) as info:
        TrtllmSettings(**{**fields, **change})
    assert words in str(info.value)
