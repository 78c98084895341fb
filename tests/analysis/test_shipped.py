"""kvlab.analysis.shipped: each engine as it ships has its engine's own defaults and the label
says which are on; caching turns the shared-prefix story's "not yet" into "now" (SGLang's
overlap loop keeps it "not yet") and its "never" into nothing; a Mooncake conversation slice keeps whole conversations; on a pool
smaller than its longest prompts the same requests are rejected with caching on and off."""

from __future__ import annotations

import dataclasses

import pytest

from kvlab.analysis.compare import EngineConfig, run_engine
from kvlab.analysis.reuse import reuse_ceiling, shared_prefix_story
from kvlab.analysis.shipped import (
    SHIPPED_ENGINES,
    SLICE_POOL_PAGES,
    as_shipped,
    caching_effect,
    caching_on,
    caching_rows,
    conversation_slice,
    defaults_label,
    shared_prefix_runs,
    shipped_runs,
    slice_engine,
    story_rows,
)
from kvlab.core.request import Request
from kvlab.run.workload import mooncake_trace
from kvlab.sched.sglang import SglangServerArgs
from kvlab.sched.trtllm_settings import TrtllmSettings
from kvlab.sched.vllm import VllmEngineArgs


def test_as_shipped_sets_each_engines_defaults_and_caching_flips_only_its_switch():
    trt, vllm, sglang = (as_shipped(e) for e in SHIPPED_ENGINES)
    assert isinstance(trt, TrtllmSettings) and trt.enable_block_reuse
    assert trt.admission == "capacity"
    assert isinstance(vllm, VllmEngineArgs)
    assert vllm.enable_prefix_caching and vllm.async_scheduling
    assert isinstance(sglang, SglangServerArgs) and not sglang.disable_radix_cache
    assert not sglang.disable_overlap_schedule  # SGLang ships its overlap scheduler on
    assert all(caching_on(a) for a in (trt, vllm, sglang))
    for engine in SHIPPED_ENGINES:
        on, off = as_shipped(engine), as_shipped(engine, caching=False)
        assert not caching_on(off)
        differing = {
            f.name for f in dataclasses.fields(on) if getattr(on, f.name) != getattr(off, f.name)
        }
        assert len(differing) == 1, (engine, differing)  # the caching switch, nothing else
    # the deployment's numbers reach each engine's own configuration
    small = EngineConfig(pool_mib=2.0)
    assert as_shipped("vLLM", small).num_gpu_blocks == small.total_blocks
    assert as_shipped("SGLang", small).max_total_tokens == small.pool_tokens


def test_the_label_says_which_defaults_are_on():
    assert defaults_label(as_shipped("vLLM")) == (
        "vLLM 0.34.0: prefix caching on, async scheduling on"
    )
    assert defaults_label(as_shipped("vLLM", caching=False)).startswith(
        "vLLM 0.34.0: prefix caching off, async scheduling on"
    )
    no_async = as_shipped("vLLM").replace(async_scheduling=False)
    assert defaults_label(no_async).endswith("async scheduling off")
    assert defaults_label(as_shipped("TensorRT-LLM", caching=False)).startswith(
        "TensorRT-LLM: block reuse off"
    )
    assert defaults_label(as_shipped("SGLang")) == (
        "SGLang 0.5.23: radix cache on, overlap schedule on"
    )
    no_overlap = as_shipped("SGLang", caching=False).replace(disable_overlap_schedule=True)
    assert defaults_label(no_overlap) == "SGLang 0.5.23: radix cache off, overlap schedule off"
    with pytest.raises(TypeError, match="args must be"):
        defaults_label(EngineConfig())  # type: ignore[arg-type]


def test_caching_turns_not_yet_into_now_on_every_engine_but_never_stays_never():
    runs = shared_prefix_runs()
    rows = {(r["engine"], r["caching"], r["request_id"]): r for r in story_rows(runs)}
    for engine in SHIPPED_ENGINES:
        first = rows[engine, True, "first"]
        follow_on, follow_off = rows[engine, True, "follow-up"], rows[engine, False, "follow-up"]
        if engine == "SGLang":  # overlap loop: first's prompt enters the tree a step late
            assert follow_on["started"] == follow_off["started"] > follow_on["arrival"]
        else:
            assert follow_on["started"] == follow_on["arrival"] == 1, engine  # on first's pages
        assert follow_on["reused_tokens"] == first["prompt_len"], engine
        assert follow_off["started"] > first["arrival"] + 16, engine  # not yet: after first
        for on in (True, False):
            assert rows[engine, on, "too-long"]["status"] == "rejected", (engine, on)
        effect = caching_effect(runs, engine)
        assert ("follow-up" in effect.now) is (engine != "SGLang")
        assert effect.never_on == effect.never_off == ("too-long",)


def test_sglang_without_its_overlap_loop_starts_the_follow_up_on_arrival():
    # the real SGLang 0.5.23 does the same on this story: follow-up at step 1 with the overlap
    # loop off, at step 65 (after first) with it on
    config = EngineConfig()
    config = dataclasses.replace(config, max_seq_len=config.pool_tokens)
    args = as_shipped("SGLang", config).replace(disable_overlap_schedule=True)
    result = run_engine(args, shared_prefix_story(config), 20_000)
    assert result.requests["follow-up"].first_scheduled_step == 1
    assert result.requests["follow-up"].prepopulated_prompt_len == 1280


def test_a_conversation_slice_keeps_whole_conversations_in_arrival_order():
    def turn(rid, hashes, arrival):
        return Request(rid, 512 * len(hashes), 1, arrival, prefix_hashes=tuple(hashes))

    requests = [
        turn("a1", (0, 1), 0),
        turn("b1", (0, 2), 1),
        turn("a2", (0, 1, 3), 5),
        turn("c1", (0, 4), 6),
        turn("b2", (0, 2, 5), 7),
        turn("a3", (0, 1, 3, 6), 9),
        turn("b3", (0, 2, 5, 7), 10),
    ]
    assert [r.request_id for r in conversation_slice(requests, 1)] == ["a1", "a2", "a3"]
    both = conversation_slice(requests, 2)
    assert [r.request_id for r in both] == ["a1", "b1", "a2", "b2", "a3", "b3"]
    assert [r.request_id for r in conversation_slice(requests, 3, min_turns=1)][-1] == "b3"
    with pytest.raises(ValueError, match="only 2 conversations of at least 3 turns"):
        conversation_slice(requests, 3)
    with pytest.raises(ValueError, match="conversations must be"):
        conversation_slice(requests, 0)


@pytest.fixture(scope="module")
def tight_runs():
    requests = conversation_slice(mooncake_trace("conversation", minutes=10.0), 12)
    return requests, shipped_runs(requests, slice_engine(SLICE_POOL_PAGES["tight"]))


def test_on_a_tight_pool_caching_shortens_waits_and_never_stays_never(tight_runs):
    requests, runs = tight_runs
    longest = max(r.prompt_len for r in requests)
    assert longest > slice_engine(SLICE_POOL_PAGES["tight"]).pool_tokens  # some never fit
    rows = {(r["engine"], r["caching"]): r for r in caching_rows(runs, reuse_ceiling(requests))}
    for engine in SHIPPED_ENGINES:
        on, off = rows[engine, True], rows[engine, False]
        effect = caching_effect(runs, engine)
        assert effect.never_on == effect.never_off and effect.never_on  # never: either way
        assert on["rejected"] == off["rejected"] and on["unfinished"] == off["unfinished"] == 0
        assert off["reused_tokens"] == 0 < on["reused_tokens"], engine
        assert 0 < on["of_ceiling"] < 1, engine  # the pool forgets some of what could be reused
        assert on["mean_ttft_steps"] < off["mean_ttft_steps"], engine
        assert effect.now, engine  # some waited without caching only
        assert on["defaults"] == defaults_label(runs[engine, True].args)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="engine must be one of"):
        as_shipped("TGI")
    with pytest.raises(TypeError, match="caching"):
        as_shipped("vLLM", caching="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pages must be"):
        slice_engine(0)
