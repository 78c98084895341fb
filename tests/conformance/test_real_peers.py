"""kvlab's peers against the real engines, vLLM 0.34.0 and SGLang 0.5.23, on every conformance
workload: the stored runs (data/measurements/) are of today's workloads, and the peer gives each
request the status, start step, finish step and preemptions the engine gave it, the same
rejection messages, and, where the stored run kept them, the same free blocks, queues, prefill
and decode rows and tokens at every step. tests/analysis/test_backend_*.py hold the stored runs
to the live engines."""

from __future__ import annotations

import pytest
from peers import ENGINES, comparisons

from kvlab.core.request import RequestState

CASES = [
    (engine, workload.name)
    for engine, (_, workloads) in ENGINES.items()
    for workload in workloads()
]
#: The step-record fields the real drivers report.
STEP_FIELDS = (
    "step",
    "free_blocks",
    "running",
    "waiting",
    "num_context",
    "num_generation",
    "tokens_scheduled",
    "num_recompute_paused",
    "rejected_total",
    "finished_total",
)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_the_stored_runs_are_of_todays_workloads(engine):
    backend, workloads = ENGINES[engine]
    stored = backend.stored_records()
    assert list(stored) == [w.name for w in workloads()]
    for workload in workloads():
        record = stored[workload.name]
        assert backend.driver_input(record.workload) == backend.driver_input(workload), (
            f"{workload.name}: its definition changed since the runs were stored; rerun "
            f"python benchmarks/peer_conformance.py --engine {engine} --record"
        )


@pytest.mark.parametrize("engine", list(ENGINES))
def test_enough_workloads_of_every_kind(engine):
    names = [w.name for w in ENGINES[engine][1]()]
    assert len(names) >= 20
    for kind in ("nb04/", "front-door", "startup-refused", "azure-", "mooncake-"):
        assert any(name.startswith(kind) for name in names), kind


def test_vllm_is_held_to_its_prefix_cache_on_shared_prefixes():
    cached = [w for w in ENGINES["vllm"][1]() if w.args.enable_prefix_caching]
    assert len(cached) >= 10
    assert any(w.name.startswith("mooncake-") for w in cached)
    assert any(w.name.startswith("tiny/") for w in cached)  # whose step rows are compared


def test_vllm_is_held_to_its_async_scheduler_with_caching_off_and_on():
    held = [w for w in ENGINES["vllm"][1]() if w.args.async_scheduling]
    assert len(held) >= 10
    for caching in (False, True):
        mine = [w for w in held if w.args.enable_prefix_caching is caching]
        assert any(w.name.startswith("mooncake-") for w in mine), caching
        assert any(w.name.startswith("tiny/") for w in mine), caching  # step rows compared


def test_sglang_is_held_to_its_overlap_loop_with_the_radix_cache_off_and_on():
    held = [w for w in ENGINES["sglang"][1]() if not w.args.disable_overlap_schedule]
    assert len(held) >= 10
    for cache in (False, True):
        mine = [w for w in held if w.args.disable_radix_cache is not cache]
        assert any(w.name.startswith("mooncake-") for w in mine), cache
        assert any(w.name.startswith("tiny/") for w in mine), cache  # step rows compared
    # loaded pools: the stored runs retract under the overlap loop
    stored = ENGINES["sglang"][0].stored_results()
    assert any(stored[w.name].summary()["recomputes"] for w in held if w.name.startswith("tiny/"))


@pytest.mark.slow
@pytest.mark.parametrize("engine, name", CASES)
def test_the_peer_does_what_the_engine_did(engine, name):
    comparison = comparisons(engine)[name]
    real, peer = comparison["real"], comparison["peer"]
    assert comparison["differences"] == [], comparison["differences"][:5]
    assert type(peer.error) is type(real.error) and str(peer.error) == str(real.error)
    rejected = real.ids_with_status(RequestState.REJECTED)
    # the engine's own words: the peer's front door or abort, the real engine's rejection
    assert {i: peer.reasons[i].message for i in rejected} == {
        i: real.reasons[i].message for i in rejected
    }
    assert (peer.end_step, peer.iterations) == (real.end_step, real.iterations)
    if real.trace.steps:  # the stored run kept its step rows
        columns = [(real.trace.column(f), peer.trace.column(f)) for f in STEP_FIELDS]
        assert all(theirs == ours for theirs, ours in columns), [
            f for f, (theirs, ours) in zip(STEP_FIELDS, columns) if theirs != ours
        ]
        # the statuses read back from the engine's events agree with its own last step row
        last = real.trace.steps[-1]
        assert (
            len(real.ids_with_status(RequestState.RUNNING)),
            len(real.ids_with_status(RequestState.WAITING)),
        ) == (
            last.running,
            last.waiting,
        )
