"""Construction and configuration of the scheduler.

Mirrors ``TestConstruction`` of NVIDIA/TensorRT-LLM
tests/unittest/_torch/executor/kv_cache/test_kv_cache_v2_scheduler.py, read at commit
0046b12caeb6c565d87675ced31951b62b9abd25.
"""

from unittest.mock import Mock

import pytest
from support import Bench

from kvlab import Scheduler

NOT_MODELLED = {}


@pytest.mark.upstream("TestConstruction::test_valid_construction")
def test_valid_construction():
    scheduler = Bench().scheduler
    assert scheduler.max_num_tokens == 1024
    assert scheduler.max_num_requests == 100


@pytest.mark.upstream(
    "TestConstruction::test_reject_non_v2_manager",
    adaptation="kvlab raises TypeError naming KVCacheManager where upstream "
    "asserts (AssertionError naming KVCacheManagerV2)",
)
def test_reject_non_v2_manager():
    with pytest.raises(TypeError, match="KVCacheManager"):
        Scheduler(Mock(), max_batch_size=10, max_num_tokens=100)


@pytest.mark.upstream("TestConstruction::test_scheduler_capacity_overrides")
def test_scheduler_capacity_overrides():
    scheduler = Bench(max_batch_size=100, scheduler_capacity=5).scheduler
    assert scheduler.max_num_requests == 5


@pytest.mark.upstream(
    "TestConstruction::test_chunk_unit_no_alignment",
    adaptation="ctx_chunk_config=(None, 100) is chunked_prefill=True, chunk_unit_size=100",
)
def test_chunk_unit_no_alignment():
    scheduler = Bench(tokens_per_block=64, chunked_prefill=True, chunk_unit_size=100).scheduler
    # used as given: no alignment to tokens_per_block
    assert scheduler.chunk_unit_size == 100


@pytest.mark.upstream(
    "TestConstruction::test_chunk_unit_already_aligned",
    adaptation="ctx_chunk_config=(None, 128) is chunked_prefill=True, chunk_unit_size=128",
)
def test_chunk_unit_already_aligned():
    scheduler = Bench(tokens_per_block=64, chunked_prefill=True, chunk_unit_size=128).scheduler
    assert scheduler.chunk_unit_size == 128


@pytest.mark.upstream("TestConstruction::test_max_num_tokens_none")
def test_max_num_tokens_none():
    scheduler = Bench(max_num_tokens=None).scheduler
    assert scheduler.max_num_tokens is None
