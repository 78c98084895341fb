"""kvlab.backends.sglang.SGLANG: the real SGLang 0.5.23 scheduler as a subprocess (the process's
edges, shared with vLLM's, are tested in test_backend_vllm.py). Live (marked ``sglang``, needs
``bash scripts/setup.sh sglang``, which the README's test command runs): SGLang gives today
what data/measurements/sglang-0.5.23.json stored, and its own words at its doors."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from pathlib import Path

import pytest

from kvlab import Request
from kvlab.analysis.peer_conformance import SGLANG_NOTEBOOK_04, PeerWorkload, sglang_workloads
from kvlab.backends.real_engine import EngineUnavailable, RunRecord
from kvlab.backends.sglang import SGLANG
from kvlab.core.cause import Cause, Reason

live = pytest.mark.skipif(
    not SGLANG.is_available(),
    reason="SGLang's environment is not set up: bash scripts/setup.sh sglang",
)


@pytest.mark.sglang
@pytest.mark.slow
@live
def test_live_sglang_gives_what_is_stored():
    stored = SGLANG.stored_document()
    keep = {w["name"]: w["steps"] is not None for w in stored["workloads"]}
    records = SGLANG.records(sglang_workloads(), timeout_s=1800)
    assert [r.workload.name for r in records] == [w["name"] for w in stored["workloads"]]
    for record, expected in zip(records, stored["workloads"]):
        assert record.to_json(keep[record.workload.name]) == expected, record.workload.name


@pytest.mark.sglang
@live
def test_live_sglang_refuses_to_start_and_at_its_doors_with_its_own_words():
    refused, served = SGLANG.run_workloads(
        [
            PeerWorkload(
                "refused", SGLANG_NOTEBOOK_04.replace(max_total_tokens=1), [Request("a", 8, 4)]
            ),
            PeerWorkload(
                "served",
                SGLANG_NOTEBOOK_04,
                [Request("long", 8192, 4), Request("big", 2042, 4), Request("fits", 8, 2)],
            ),
        ]
    )
    assert str(refused.error) == "max_running_request is zero"
    assert refused.status == {"a": "rejected"}
    assert served.reasons["long"] == Reason(
        Cause.REJECTED_BY_ENGINE,
        message="The input (8192 tokens) is longer than the model's context length (8192 tokens).",
    )
    assert served.reasons["big"].message.startswith(
        "Input length (2042 tokens) exceeds the maximum allowed length (2042 tokens)."
    )
    assert served.status == {"long": "rejected", "big": "rejected", "fits": "finished"}


@pytest.mark.sglang
@live
def test_live_sglang_runs_its_radix_cache_as_the_args_set_it():
    """Two prompts sharing their first 64 tokens (kvlab.core.prompt_tokens), the second arriving
    after the first finished: with the radix cache on it computes only the 36 tokens past the
    shared ones (prefix hits never cover the last token), and the finished request's tokens stay
    in the tree, unlocked; with it off both compute all 100."""
    shared = dict(prefix_hashes=(11, 12), tokens_per_hash=32)
    requests = [Request("a", 100, 4, 0, **shared), Request("b", 100, 4, 10, **shared)]
    on = PeerWorkload("on", SGLANG_NOTEBOOK_04.replace(disable_radix_cache=False), requests, 100)
    off = PeerWorkload("off", SGLANG_NOTEBOOK_04, requests, 100)
    cached, uncached = SGLANG.records([on, off])
    prefill = {row[0]: row[6] for row in cached.rows if row[4]}
    assert prefill == {0: 100, 10: 36}
    assert {row[0]: row[6] for row in uncached.rows if row[4]} == {0: 100, 10: 100}
    # [step, free, ..., evictable, protected]: a's 103 tokens (100 + 4 outputs - 1) unlocked
    # after its finish; then b locks the 64 it shares and holds its own 36 prompt tokens
    rows = {row[0]: row for row in cached.rows}
    assert rows[3][1:] == [2048 - 103, 0, 0, 0, 1, 1, 0, 103, 0]
    assert rows[10][8:] == [103 - 64, 64 + 36]
    assert all(row[8:] == [0, 0] for row in uncached.rows)


@pytest.mark.sglang
@live
def test_live_sglang_runs_its_overlap_loop_as_the_args_set_it():
    """One running request at most: the overlap loop processes a's last batch only after it
    has scheduled the next, so b is admitted a step later than under event_loop_normal, and a
    trailing iteration processes b's last batch. Both count a's finish in the step that ran its
    last token, as the peer does."""
    one = SGLANG_NOTEBOOK_04.replace(max_running_requests=1, disable_radix_cache=True)
    requests = [Request("a", 8, 2), Request("b", 8, 2)]
    overlap, normal = SGLANG.run_workloads(
        [
            PeerWorkload("overlap", one.replace(disable_overlap_schedule=False), requests, 100),
            PeerWorkload("normal", one.replace(disable_overlap_schedule=True), requests, 100),
        ]
    )
    assert SGLANG.processes_late(one.replace(disable_overlap_schedule=False))
    assert not SGLANG.processes_late(one.replace(disable_overlap_schedule=True))
    for result, b_starts in ((overlap, 3), (normal, 2)):
        assert result.status == {"a": "finished", "b": "finished"}
        assert (result.requests["a"].end_step, result.requests["b"].first_scheduled_step) == (
            1,
            b_starts,
        )
    assert [s.finished_total for s in overlap.trace] == [0, 0, 1, 1, 1, 2]
    assert [s.finished_total for s in normal.trace] == [0, 1, 1, 2]


def test_without_the_environment_it_names_the_setup_command(tmp_path, monkeypatch):
    monkeypatch.setenv("KVLAB_SGLANG_ENV", str(tmp_path / "missing"))
    assert not SGLANG.is_available()
    with pytest.raises(EngineUnavailable, match="bash scripts/setup.sh sglang"):
        SGLANG.run(SGLANG_NOTEBOOK_04, [Request("a", 8, 4)])


def test_an_abort_is_read_and_stored_and_read_back(tmp_path):
    """SGLang's "aborted" (a started request given up: no workload of the stored runs has one)
    through the reader, to_json and from_json, with a stand-in driver (no SGLang needed)."""
    script = tmp_path / "driver.py"
    script.write_text(
        textwrap.dedent("""\
        import json, sys
        json.load(sys.stdin)
        def emit(**fields):
            print(json.dumps(fields), flush=True)
        emit(kind="hello", sglang="0.5.23", torch="x")
        emit(kind="start", run=0)
        for request_id, event in (("a", "started"), ("a", "first_token"), ("b", "started")):
            emit(kind="event", run=0, step=0, id=request_id, event=event)
        emit(kind="event", run=0, step=1, id="a", event="aborted", message="Out of memory")
        emit(kind="event", run=0, step=2, id="b", event="finished", finish_reason="length",
             num_output_tokens=2, cause="max_new_tokens")
        emit(kind="steps", run=0, rows=[[0, 10, 2, 0, 2, 0, 16, 0], [1, 20, 1, 0, 0, 1, 1, 0],
                                        [2, 30, 0, 0, 0, 1, 1, 0]])
        emit(kind="end", run=0, end_step=3, iterations=3)
    """)
    )
    engine = dataclasses.replace(SGLANG, driver=script, python=Path(sys.executable))
    workload = PeerWorkload("w", SGLANG_NOTEBOOK_04, [Request("a", 8, 4), Request("b", 8, 2)], 10)
    (record,) = engine.records([workload])
    again = RunRecord.from_json(engine, record.to_json())
    for result in (record.result(), again.result()):
        assert result.status == {"a": "rejected", "b": "finished"}
        assert result.reasons["a"] == Reason(Cause.REJECTED_BY_ENGINE, message="Out of memory")
        assert (1, "aborted", "a") in [(e.step, e.kind, e.request_id) for e in result.trace.events]
        assert result.trace.column("rejected_total") == [0, 1, 1]
    assert record.to_json()["requests"][0][4] == "aborted"
