"""kvlab.backends.vllm.VLLM (a kvlab.backends.real_engine.RealEngine): the real vLLM scheduler as a
subprocess. Live (marked ``vllm``, needs
``bash scripts/setup.sh vllm``, which the README's test command runs): vLLM gives today what
data/measurements/vllm-0.34.0.json stored. Without vLLM: a missing environment names the setup
command, and a driver that dies, hangs or prints garbage loses no request."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kvlab import KVGeometry, Request, VllmEngineArgs
from kvlab.analysis.peer_conformance import NOTEBOOK_04, PeerWorkload, differences, vllm_workloads
from kvlab.backends import real_engine
from kvlab.backends.real_engine import EngineProcessError, EngineUnavailable
from kvlab.backends.vllm import VLLM
from kvlab.core.cause import Cause, Reason

live = pytest.mark.skipif(
    not VLLM.is_available(), reason="vLLM's environment is not set up: bash scripts/setup.sh vllm"
)
REQUESTS = [
    Request("done", 8, 2),
    Request("started", 8, 50),
    Request("queued", 8, 4, arrival_step=1),
]


@pytest.mark.vllm
@pytest.mark.slow
@live
def test_live_vllm_gives_what_is_stored():
    workloads = vllm_workloads()
    stored = VLLM.stored_document()
    keep = {w["name"]: w["steps"] is not None for w in stored["workloads"]}
    records = VLLM.records(workloads, timeout_s=1800)
    assert [r.workload.name for r in records] == [w["name"] for w in stored["workloads"]]
    for record, expected in zip(records, stored["workloads"]):
        assert record.to_json(keep[record.workload.name]) == expected, record.workload.name


@pytest.mark.vllm
@live
def test_live_vllm_refuses_to_start_and_at_the_front_door_with_its_own_words():
    refused, served = VLLM.run_workloads(
        [
            PeerWorkload("refused", NOTEBOOK_04.replace(max_model_len=2048), REQUESTS),
            PeerWorkload("served", NOTEBOOK_04, [Request("zero", 8, 0), Request("fits", 8, 2)]),
        ]
    )
    assert isinstance(refused.error, ValueError)
    assert "the estimated maximum model length is 2016" in str(refused.error)
    assert set(refused.status.values()) == {"rejected"}
    assert served.reasons["zero"] == Reason(
        Cause.REJECTED_BY_ENGINE,
        message="max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
    )
    assert served.status == {"zero": "rejected", "fits": "finished"} and served.error is None


TINY = VllmEngineArgs(
    KVGeometry(num_layers=1, num_kv_heads=1, head_dim=8, tokens_per_block=4),
    16,
    60,
    max_num_seqs=4,
    max_num_batched_tokens=64,
)


@pytest.mark.vllm
@live
@pytest.mark.parametrize("caching", [False, True])
def test_live_vllm_hits_its_prefix_cache_only_with_caching_on(caching):
    """b repeats a's 16-token prompt after a finished: with caching on it computes only the
    last block (a hit stops one token short of the prompt), else all 16 tokens."""
    prompt = dict(prefix_hashes=(1, 2), tokens_per_hash=8)
    requests = [Request("a", 16, 2, 0, **prompt), Request("b", 16, 2, 4, **prompt)]
    result = VLLM.run(TINY.replace(enable_prefix_caching=caching), requests)
    assert result.status == {"a": "finished", "b": "finished"}
    start = result.requests["b"].first_scheduled_step
    assert result.trace.steps[0].tokens_scheduled == 16
    rows = {row.step: row for row in result.trace.steps}
    assert rows[start].tokens_scheduled == (4 if caching else 16)


@pytest.mark.vllm
@live
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_live_vllm_frees_a_finished_request_one_batch_later_with_async_scheduling(
    async_scheduling,
):
    """One sequence at a time: a's last token is sampled at step 1; with the AsyncScheduler a
    keeps its slot through schedule(2), an empty batch, and b starts at step 3, not 2."""
    requests = [Request("a", 8, 2), Request("b", 8, 2)]
    args = TINY.replace(max_num_seqs=1, async_scheduling=async_scheduling)
    result = VLLM.run(args, requests)
    assert result.requests["a"].end_step == 1
    assert result.requests["b"].first_scheduled_step == (3 if async_scheduling else 2)
    tokens = [row.tokens_scheduled for row in result.trace.steps]
    assert tokens == ([8, 1, 0, 8, 1, 0] if async_scheduling else [8, 1, 8, 1])


def random_cached_workload(seed: int) -> PeerWorkload:
    """A small engine with prefix caching on (4-token blocks, 6-40 of them, chunked or not) and
    up to 12 requests whose prompts share all, some or none of their 8-token blocks."""
    rng = random.Random(seed)
    blocks = rng.randint(6, 40)
    max_model_len, seqs, chunked = (blocks - 1) * 4, rng.randint(1, 6), rng.random() < 0.7
    args = TINY.replace(
        num_gpu_blocks=blocks,
        max_model_len=max_model_len,
        max_num_seqs=seqs,
        enable_chunked_prefill=chunked,
        max_num_batched_tokens=rng.randint(max(seqs, 4), 64) if chunked else max_model_len,
        scheduler_reserve_full_isl=rng.random() < 0.5,
        enable_prefix_caching=True,
    )
    shared = [tuple(range(1, 21)), (1, 2, *range(30, 48))]
    requests = []
    for i in range(rng.randint(2, 12)):
        prompt = rng.randint(1, max_model_len // 2)
        hashes = rng.choice([*shared, tuple(range(100 * i, 100 * i + 20))])[: -(-prompt // 8)]
        requests.append(
            Request(
                f"r{i}",
                prompt,
                rng.randint(1, max_model_len // 3),
                rng.randint(0, 20),
                prefix_hashes=hashes[: rng.randint(0, len(hashes))]
                if rng.random() < 0.2
                else hashes,
                tokens_per_hash=8,
            )
        )
    return PeerWorkload(f"random-{seed}", args, requests, 3_000)


@pytest.mark.vllm
@pytest.mark.slow
@live
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_live_vllm_and_the_peer_agree_on_random_workloads_with_prefix_caching(async_scheduling):
    """Beyond the stored workloads: the peer does what vLLM does, request by request and step by
    step, on 100 random small cached workloads, with the AsyncScheduler and without (a wider
    search of this kind found the order in which a step's finished requests free their blocks,
    and that async scheduling caches a decode's block one step later)."""
    workloads = [
        dataclasses.replace(w, args=w.args.replace(async_scheduling=async_scheduling))
        for w in map(random_cached_workload, range(100))
    ]
    fields = ("free_blocks", "running", "waiting", "tokens_scheduled", "num_recompute_paused")
    for workload, real in zip(workloads, VLLM.run_workloads(workloads, timeout_s=600)):
        peer = workload.run_peer()
        assert real.error is None and differences(peer, real) == [], workload.name
        for field in fields:
            assert peer.trace.column(field) == real.trace.column(field), (workload.name, field)


def test_without_the_environment_it_names_the_setup_command(tmp_path, monkeypatch):
    monkeypatch.setenv("KVLAB_VLLM_ENV", str(tmp_path / "missing"))
    assert not VLLM.is_available()
    with pytest.raises(EngineUnavailable, match="bash scripts/setup.sh vllm"):
        VLLM.run(NOTEBOOK_04, REQUESTS)


def fake_driver(tmp_path, body: str, version: str = "0.34.0"):
    """VLLM with a stand-in for vllm_driver.py (this Python, no vLLM) that prints the driver's
    first lines for REQUESTS, then does ``body``."""
    script = tmp_path / "driver.py"
    script.write_text(
        textwrap.dedent("""\
        import json, os, signal, sys, time
        json.load(sys.stdin)
        def emit(**fields):
            print(json.dumps(fields), flush=True)
        emit(kind="hello", vllm="VERSION", torch="x")
        emit(kind="start", run=0, num_gpu_blocks=64, free_blocks=63, max_model_len=2016)
        for request_id, event in (("done", "started"), ("done", "first_token"),
                                  ("started", "started"), ("started", "first_token")):
            emit(kind="event", run=0, step=0, id=request_id, event=event)
        emit(kind="event", run=0, step=1, id="done", event="finished", finish_reason="length",
             num_output_tokens=2, cause="max_tokens")
        emit(kind="steps", run=0, rows=[[0, 61, 2, 0, 2, 0, 16, 0], [1, 61, 1, 1, 1, 2, 3, 0]])
        sys.stderr.write("the driver's last words\\n")
        sys.stderr.flush()
    """).replace("VERSION", version)
        + textwrap.dedent(body)
    )
    return dataclasses.replace(VLLM, driver=script, python=Path(sys.executable))


def assert_nothing_lost(result, error_words):
    assert isinstance(result.error, EngineProcessError)
    for word in error_words:
        assert word in str(result.error), str(result.error)
    assert result.status == {"done": "finished", "started": "running", "queued": "waiting"}
    done = result.reasons["done"]
    assert done.cause is Cause.FINISHED and (done.numbers["step"], done.numbers["generated"]) == (
        1,
        2,
    )
    for request_id in ("started", "queued"):
        reason = result.reasons[request_id]
        assert reason.cause is Cause.ENGINE_PROCESS_STOPPED, reason
        assert (reason.numbers["engine"], reason.numbers["step"]) == ("vLLM", 1), reason
        assert reason.message == str(result.error)
    assert [step.step for step in result.trace.steps] == [0, 1]


@pytest.mark.parametrize(
    "how, words",
    [
        ("sys.exit(3)", ("exit code 3", "the driver's last words")),
        ("os.kill(os.getpid(), signal.SIGKILL)", ("signal 9",)),
        (
            "print('Traceback (most recent call last):', flush=True)",
            ("not its protocol", "Traceback"),
        ),
    ],
)
def test_a_driver_that_dies_or_babbles_loses_no_request(tmp_path, how, words):
    assert_nothing_lost(fake_driver(tmp_path, how + "\n").run(NOTEBOOK_04, REQUESTS), words)


@pytest.mark.parametrize(
    "hang",
    [
        "time.sleep(60)",
        # a child that holds the driver's stdout open: killed with it
        "import subprocess; subprocess.Popen(['sleep', '60']); time.sleep(60)",
    ],
)
def test_a_driver_that_hangs_is_killed_at_the_timeout(tmp_path, hang):
    engine = fake_driver(tmp_path, hang + "\n")
    start = time.monotonic()
    assert_nothing_lost(engine.run(NOTEBOOK_04, REQUESTS, timeout_s=3), ("ran past timeout_s=3 s",))
    assert time.monotonic() - start < 20


@pytest.mark.parametrize(
    "line, words",
    [
        ('{"kind": "end", "run": 0, "end_step": "x", "iterations": 2}', "end_step must be an int"),
        ('{"kind": "end", "run": 0, "end_step": -1, "iterations": 2}', "end_step must be an int"),
        ('{"kind": "steps", "run": 0, "rows": [[2, 61]]}', "rows must be a list of rows"),
        ('{"kind": "steps", "run": 0, "rows": [[2, 61, 1, 1, 1, 2, 3, "x"]]}', "rows must be"),
        (
            '{"kind": "event", "run": 0, "step": 1e308, "id": "queued", "event": "started"}',
            "step must be an int",
        ),
        (
            '{"kind": "event", "run": 0, "step": 2, "id": ["x"], "event": "started"}',
            "id must be one of the run's request ids",
        ),
        (
            '{"kind": "event", "run": 0, "step": 2, "id": "queued", "event": "rejected", '
            '"message": 7}',
            "message must be a string",
        ),
        (
            '{"kind": "event", "run": 0, "step": 2, "id": "started", "event": "finished", '
            '"num_output_tokens": -5, "cause": "max_tokens"}',
            "num_output_tokens must be an int",
        ),
        ("[" * 100_000, "not its protocol"),
    ],
)
def test_a_driver_line_of_the_wrong_type_is_a_protocol_error(tmp_path, line, words):
    """Every value is checked as it is read: the run ends in an EngineProcessError naming the
    field, and no request is lost (none of it escapes later as a TypeError)."""
    engine = fake_driver(tmp_path, f"print({line!r}, flush=True)\n")
    result = engine.run(NOTEBOOK_04, REQUESTS)
    assert_nothing_lost(result, ("not its protocol", words))


def test_an_engine_python_that_cannot_run_is_unavailable(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")  # there, but not executable
    engine = dataclasses.replace(VLLM, python=python)
    with pytest.raises(EngineUnavailable, match="cannot be started .*Permission denied"):
        engine.run(NOTEBOOK_04, REQUESTS)


def test_every_run_has_a_timeout():
    with pytest.raises(TypeError, match="timeout_s must be"):
        VLLM.run(NOTEBOOK_04, REQUESTS, timeout_s=None)


def test_a_driver_of_another_vllm_is_refused(tmp_path):
    result = fake_driver(tmp_path, "", version="0.35.0").run(NOTEBOOK_04, REQUESTS)
    assert "the environment runs vLLM 0.35.0, not 0.34.0" in str(result.error)
    assert set(result.status.values()) == {"waiting"}


def test_what_the_driver_cannot_give_vllm_is_refused_before_it_starts():
    mla = VllmEngineArgs(KVGeometry(4, 1, 576, kv_factor=1), 64, 2016)
    with pytest.raises(ValueError, match="kv_factor 2"):
        VLLM.run(mla, REQUESTS)
    with pytest.raises(ValueError, match="no draft tokens"):
        VLLM.run(NOTEBOOK_04, [Request("d", 8, 4, num_draft_tokens=1)])
    with pytest.raises(TypeError, match="PeerWorkload"):
        VLLM.run_workloads([NOTEBOOK_04])
    with pytest.raises(ValueError, match=r"distinct request_ids; given more than once: \['r'\]"):
        VLLM.run(NOTEBOOK_04, [Request("r", 8, 4), Request("r", 8, 4)])


def _tampered(document: dict, how: str) -> str:
    """The stored runs with one edit ``how``, as text."""
    runs = document["workloads"]
    row = runs[0]["requests"][0]
    if how == "another version":
        document["version"] = "0.35.0"
    elif how == "another engine":
        document["engine"] = "sglang"
    elif how == "a negative step":
        row[7] = -3
    elif how == "an unknown state":
        row[4] = "suspended"
    elif how == "a short row":
        runs[0]["requests"][0] = row[:5]
    elif how == "a workload twice":
        runs.append(runs[0])
    elif how == "a string end_step":
        runs[0]["end_step"] = "x"
    elif how == "a list document":
        return json.dumps([document])
    elif how == "a key twice":
        return json.dumps(document)[:-1] + ', "version": "0.34.0"}'
    return json.dumps(document)


@pytest.mark.parametrize(
    "how, words",
    [
        ("another version", "holds the runs of engine 'vllm' version '0.35.0', not"),
        ("another engine", "holds the runs of engine 'sglang'"),
        ("a negative step", "a request row must be"),
        ("an unknown state", "a request row must be"),
        ("a short row", "vLLM's stored runs"),
        ("a workload twice", "is stored twice"),
        ("a string end_step", "end_step must be an int"),
        ("a list document", "must hold a JSON object, got list"),
        ("a key twice", "the key 'version' is given twice"),
    ],
)
def test_a_tampered_stored_file_is_refused_naming_it(tmp_path, monkeypatch, how, words):
    document = VLLM.stored_document()
    monkeypatch.setattr(real_engine, "DATA_DIR", tmp_path)
    (tmp_path / "measurements").mkdir()
    VLLM.stored_path.write_text(_tampered(document, how))
    with pytest.raises(ValueError, match="vllm-0.34.0.json") as error:
        VLLM.stored_records()
    assert words in str(error.value)


def test_a_stored_file_that_is_a_fifo_is_refused_without_opening_it(tmp_path, monkeypatch):
    monkeypatch.setattr(real_engine, "DATA_DIR", tmp_path)
    (tmp_path / "measurements").mkdir()
    os.mkfifo(VLLM.stored_path)
    with pytest.raises(ValueError, match="not a regular file"):
        VLLM.stored_records()
