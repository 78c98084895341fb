"""kvlab's vLLM peer against the real vLLM 0.34.0, on every conformance workload: the stored runs
(data/measurements/vllm-0.34.0.json) are of today's workloads, and the peer gives each request
the status, start step, finish step and preemptions vLLM gave it, the same rejection messages,
and, where the stored run kept them, the same free blocks, queues and tokens at every step.
tests/analysis/test_backend_vllm.py holds the stored runs to a live vLLM."""

from __future__ import annotations

import pytest
from peers import vllm_comparisons

from kvlab.analysis.peer_conformance import vllm_workloads
from kvlab.backends.vllm import VLLM

NAMES = [workload.name for workload in vllm_workloads()]
#: The step-record fields the real driver reports.
STEP_FIELDS = ("step", "free_blocks", "running", "waiting", "num_context", "num_generation",
               "tokens_scheduled", "num_recompute_paused", "rejected_total", "finished_total")


def test_the_stored_runs_are_of_todays_workloads():
    stored = VLLM.stored_records()
    assert list(stored) == NAMES
    for workload in vllm_workloads():
        record = stored[workload.name]
        assert VLLM.driver_input(record.workload) == VLLM.driver_input(workload), (
            f"{workload.name}: its definition changed since the runs were stored; rerun "
            "python benchmarks/peer_conformance.py --engine vllm --record")


def test_enough_workloads_of_every_kind():
    assert len(NAMES) >= 20
    for kind in ("nb04/", "shrunk/", "azure-", "mooncake-"):
        assert any(name.startswith(kind) for name in NAMES), kind
    workloads = vllm_workloads()
    assert {w.args.enable_chunked_prefill for w in workloads} == {True, False}


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_peer_does_what_vllm_did(name):
    comparison = vllm_comparisons()[name]
    real, peer = comparison["real"], comparison["peer"]
    assert comparison["differences"] == [], comparison["differences"][:5]
    assert type(peer.error) is type(real.error) and str(peer.error) == str(real.error)
    rejected = real.ids_with_status("rejected")
    assert {i: peer.reasons[i] for i in rejected} == {i: real.reasons[i] for i in rejected}
    assert (peer.end_step, peer.iterations) == (real.end_step, real.iterations)
    if real.trace.steps:  # the stored run kept its step rows
        columns = [(real.trace.column(f), peer.trace.column(f)) for f in STEP_FIELDS]
        assert all(theirs == ours for theirs, ours in columns), [
            f for f, (theirs, ours) in zip(STEP_FIELDS, columns) if theirs != ours]
        # the statuses read back from vLLM's events agree with its own last step row
        last = real.trace.steps[-1]
        assert (len(real.ids_with_status("running")), len(real.ids_with_status("waiting"))) == (
            last.running, last.waiting)
