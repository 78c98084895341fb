"""kvlab.analysis.sentences: the learner-facing sentences, golden, from reasons real runs record.
Other tests assert causes and numbers; these keep the words."""

from __future__ import annotations

import pytest

from kvlab import KVGeometry, Request, Scheduler, VllmEngineArgs, VllmScheduler, simulate
from kvlab.analysis.presets import seed_geometry
from kvlab.analysis.sentences import SENTENCES, sentence, where
from kvlab.core.cause import Cause, Reason
from kvlab.core.manager import KVCacheManager

SMALL = [Request(f"s{i}", prompt_len=256, max_new_tokens=32, arrival_step=i) for i in range(3)]


def seed_run(policy: str, admission: str, requests, max_steps=5000, stall_limit=20):
    """The seed's 4 MiB pool (max_seq_len 8192) under TensorRT-LLM's scheduler."""
    manager = KVCacheManager.expecting_clamp(
        seed_geometry(), 4 << 20, 8192, max_batch_size=8, page_index_policy=policy
    )
    scheduler = Scheduler(
        manager, admission=admission, max_num_tokens=8192, max_batch_size=8, stall_limit=stall_limit
    )
    return simulate(scheduler, requests, max_steps=max_steps)


def test_every_cause_has_its_sentence():
    assert set(SENTENCES) == set(Cause)
    assert sentence(None) == ""


def test_a_rejection_for_capacity_states_the_numbers():
    result = seed_run("configured", "capacity", [Request("big", 8192, 16), *SMALL])
    assert sentence(result.reasons["big"]) == (
        "Request requires 257 KV cache blocks to complete, which exceeds the total capacity of 64 "
        "blocks (8,192 prompt + 16 new tokens at 32 tokens per block)"
    )
    assert sentence(result.reasons["s0"]) == (
        "finished at step 31: 32 tokens generated after a 256-token prompt"
    )


def test_a_crash_names_the_request_that_raised_it_and_where_the_others_were():
    requests = [Request("s0", 256, 32), Request("big", 8192, 16), Request("s1", 256, 32, 40)]
    result = seed_run("clamped", "none", requests)
    assert sentence(result.reasons["big"]) == (
        "engine stopped at step 32 by PageIndexTooShort raised by this request (refused in 32 "
        "scheduling passes; its context of 8,192 tokens needs 256 pages, the pool has 64, 64 of "
        "them free when the run ended): User-provided base page indices is too short"
    )
    assert where(result.reasons["big"], passes=False).startswith("its context of 8,192 tokens")
    assert sentence(result.reasons["s1"]) == (
        "engine stopped at step 32 by PageIndexTooShort (it arrives at step 40): User-provided "
        "base page indices is too short"
    )


def test_a_request_the_engine_stopped_at_once_was_refused_by_no_pass():
    result = seed_run("clamped", "none", [Request("big", 8192, 16)], max_steps=50)
    assert sentence(result.reasons["big"]).startswith(
        "engine stopped at step 0 by PageIndexTooShort raised by this request (not refused by "
        "any scheduling pass before the run ended; its context of 8,192 tokens"
    )


def test_unfinished_requests_say_where_they_were_when_the_run_ended():
    geometry = KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=16)
    manager = KVCacheManager.expecting_clamp(
        geometry, 64 * geometry.bytes_per_block, 1024, max_batch_size=16
    )
    requests = [Request("early", 64, 8), Request("late", 64, 8, arrival_step=50)]
    result = simulate(Scheduler(manager), requests, max_steps=5)
    assert sentence(result.reasons["early"]) == (
        "still running when the run ended at max_steps=5: 5 of 8 tokens generated"
    )
    assert sentence(result.reasons["late"]) == (
        "not submitted: it arrives at step 50, and the run ended at max_steps=5"
    )


def test_a_sequence_stopped_by_vllms_length_limit_says_so():
    args = VllmEngineArgs(seed_geometry(), 64, 2016, max_num_seqs=4, max_num_batched_tokens=8192)
    result = simulate(VllmScheduler(args), [Request("r", 2000, 100)])
    assert sentence(result.reasons["r"]) == (
        "finished at step 15: 16 tokens generated after a 2,000-token prompt, stopped short of "
        "max_new_tokens=100 by the engine's length limit at 2,016 tokens (finish reason 'length')"
    )


@pytest.mark.parametrize(
    "reason, words",
    [
        (Reason(Cause.FRONT_DOOR, message="The input is too long."), "The input is too long."),
        (
            Reason(Cause.ENGINE_REFUSED_TO_START, message="no room"),
            "the engine refused to start: no room",
        ),
        (
            Reason(Cause.ENDED_ON_A_LOST_RANK, dict(step=7, rank=3)),
            "rejected at step 7 (its reason was lost with rank 3)",
        ),
        (
            Reason(Cause.NOT_ROUTED, dict(end_step=9, arrival_step=12), "died at step 4"),
            "not routed: the run ended at step 9 (died at step 4); it arrives at step 12",
        ),
    ],
)
def test_an_engines_words_are_kept_and_a_runs_causes_are_written(reason, words):
    assert sentence(reason) == words
