"""kvlab replay (kvlab.analysis.replay, kvlab.run.trace_files): a user's trace on plan's pool.
Streaming gives what one simulate() over the whole trace gives; memory stays bounded by what is
in flight; the formats are told apart by content and a bad row is named by line and field."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tracemalloc
from collections import Counter

import pytest
from bounds import HANG_S

from kvlab.analysis import replay as replay_module
from kvlab.analysis.compare import EngineConfig, run_engine
from kvlab.analysis.deployment import Deployment, example_deployments, plan_deployment
from kvlab.analysis.gpus import GPUS
from kvlab.analysis.models import load_model
from kvlab.analysis.replay import Tally, _engine_args, _run, replay_config, replay_trace
from kvlab.cli import main
from kvlab.core.request import RequestState
from kvlab.run.trace_files import (
    TraceFormatError,
    conversation_hashes,
    trace_format,
    trace_requests,
    trace_rows,
)
from kvlab.run.workload import mooncake_trace

LLAMA = plan_deployment(Deployment(model=load_model("llama-3.1-8b"), gpu_gib=GPUS["h100-80gb"].gib))
THREE_ROWS = "arrival_s,prompt_tokens,output_tokens\n0,1000,50\n0.5,200000,10\n1.0,3000,100\n"


def write(tmp_path, text, name="trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def tally_of(result):
    """What a Tally keeps, from a whole run's result: where an error stopped the engine, the
    requests it still held (or had yet to receive) are lost with it, not tallied."""
    tally, lost = Tally(), 0
    for request in result.requests.values():
        if result.error is not None and request.end_step is None:
            lost += 1
            continue
        tally.add(request, result.status[request.request_id])
    return tally, lost


@pytest.mark.parametrize("policy", ["none/clamped", "capacity", "vllm", "sglang"])
def test_streaming_gives_what_one_run_over_the_whole_trace_gives(policy, monkeypatch):
    """Mooncake's first 300 conversation requests on a tight pool (waits, preemptions, cache
    hits), fed 7 requests at a time and released as they end, against simulate() on all."""
    monkeypatch.setattr(replay_module, "FEED", 7)
    requests = mooncake_trace("conversation", seconds_per_iteration=0.5, limit=300)
    config = EngineConfig(pool_mib=96.0, max_seq_len=32768, max_batch_size=16, chunked_prefill=True)
    engine = "trtllm" if policy in ("none/clamped", "capacity") else policy
    args = _engine_args(engine, policy, config)
    whole, lost = tally_of(run_engine(args, requests, 10**7))
    streamed = _run(engine, policy, args, iter(requests), 10**7, lambda n: None)
    assert dataclasses.asdict(streamed.tally) == dataclasses.asdict(whole)
    assert streamed.crashed == lost and streamed.tally.waits
    assert sum(streamed.tally.statuses.values()) + lost == 300  # every request counted


def test_a_replay_keeps_only_what_is_in_flight(tmp_path, monkeypatch):
    """Four times the rows, about the same peak memory: ended requests are released (and
    at most FEED requests are read ahead)."""
    monkeypatch.setattr(replay_module, "FEED", 256)

    def peak(rows):
        text = "arrival_s,prompt_tokens,output_tokens\n" + "".join(
            f"{i * 0.05:.2f},{200 + i % 300},{20 + i % 7}\n" for i in range(rows)
        )
        path = write(tmp_path, text, f"t{rows}.csv")
        tracemalloc.start()
        result = replay_trace(path, LLAMA, ["trtllm"], ["capacity"])
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert result.runs[0].tally.statuses[RequestState.FINISHED] == rows
        return size

    small, large = peak(2000), peak(8000)
    assert large < 1.5 * small, (small, large)


def test_three_rows_of_ones_own_print_the_table_and_valid_json(tmp_path, capsys):
    path = write(tmp_path, THREE_ROWS)
    argv = ["replay", "--trace", str(path), "--model", "llama-3.1-8b", "--gpu", "h100-80gb"]
    assert main([*argv, "--engine", "trtllm"]) == 0
    out = capsys.readouterr().out
    assert "TensorRT-LLM capacity" in out and "line-3" in out  # the 200,000-token prompt
    assert main([*argv, "--engine", "trtllm", "--json", "--seconds-per-iteration", "0.1"]) == 0
    data = json.loads(capsys.readouterr().out)
    runs = {r["policy"]: r for r in data["runs"]}
    assert set(runs) == {"none/clamped", "none/configured", "capacity"}
    assert all((r["finished"], r["rejected"]) == (2, 1) for r in runs.values())
    assert runs["capacity"]["wait_s_p50"] == 0.0 and data["requests"] == 3


def test_a_bad_row_exits_2_naming_its_line_and_field_without_a_traceback(tmp_path):
    path = write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,abc,10\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvlab",
            "replay",
            "--trace",
            str(path),
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-80gb",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env={**os.environ, "TQDM_DISABLE": "1"},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "trace.csv, line 3: prompt_tokens must be a whole number, got 'abc'" in proc.stderr


def test_a_crash_under_current_code_exits_4_and_names_the_request(tmp_path, capsys):
    """Issue #21470's deployment: a 1,000,000-token context crashes none/clamped (rank 0's
    ValueError), capacity rejects it; the plot is written."""
    path = write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n0,4000,8\n0.1,1000000,8\n")
    plot = tmp_path / "waits.html"
    argv = ["replay", "--trace", str(path), "--example", "issue-21470", "--engine", "trtllm"]
    assert main([*argv, "--plot", str(plot)]) == 4
    out = capsys.readouterr().out
    assert "TensorRT-LLM none/clamped: crashed on line-3" in out
    assert "User-provided base page indices is too short" in out
    assert "plotly" in plot.read_text()[:100_000].lower()


def test_the_pool_is_plans_to_the_block():
    plan = plan_deployment(example_deployments()["issue-21470"])
    config = replay_config(plan)
    assert config.total_blocks == plan.blocks == 29962
    assert config.max_seq_len == plan.deployment.kv_max_seq_len


@pytest.mark.parametrize(
    "text, kind",
    [
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,374,44\n", "azure"),
        ('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n', "mooncake"),
        ("prompt_tokens,arrival_s,output_tokens,hash_ids\n5,0,1,7\n", "kvlab-csv"),
        ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n', "kvlab-jsonl"),
    ],
)
def test_the_format_is_told_by_content(tmp_path, text, kind):
    assert trace_format(write(tmp_path, text, "anything.txt")) == kind
    assert len(list(trace_rows(tmp_path / "anything.txt"))) == 1


def test_own_rows_carry_hashes_or_a_conversations_blocks(tmp_path):
    text = (
        "arrival_s,prompt_tokens,output_tokens,hash_ids,conversation_id\n"
        "0,1100,5,1 2 3,\n0.2,1100,5,,chat-a\n0.4,1700,5,,chat-a\n"
    )
    rows = list(trace_rows(write(tmp_path, text)))
    assert rows[0].hashes == (1, 2, 3)
    assert rows[1].hashes == conversation_hashes("chat-a", 1100) and len(rows[1].hashes) == 2
    assert rows[2].hashes[:2] == rows[1].hashes and len(rows[2].hashes) == 3  # the turn grows
    steps = [r.arrival_step for r in trace_requests(iter(rows), 0.1)]
    assert steps == [0, 2, 4]


@pytest.mark.parametrize(
    "text, named",
    [
        (
            "arrival_s,prompt_tokens,output_tokens\n1,5,1\n0,5,1\n",
            "line 3: arrival_s at 0 s is earlier",
        ),
        ("arrival_s,prompt_tokens,output_token\n0,5,1\n", "line 1: unknown column 'output_token'"),
        ("arrival_s,prompt_tokens,output_tokens\n0,5\n", "line 2: 3 fields expected, got 2"),
        ("arrival_s,prompt_tokens,output_tokens\n-1,5,1\n", "line 2: arrival_s must be a number"),
        ("arrival_s,prompt_tokens,output_tokens\nnan,5,1\n", "line 2: arrival_s must be a number"),
        (
            '{"arrival_s": 0, "prompt_tokens": 5, "prompt_tokens": 6, "output_tokens": 1}\n',
            "line 1: the key 'prompt_tokens' is given twice",
        ),
        (
            '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "hash_ids": [1, 2]}\n',
            "line 1: hash_ids holds 2 hashes",
        ),
        ("when,how,much\n1,2,3\n", "line 1: not a trace kvlab reads"),
        ("", "empty"),
    ],
)
def test_a_bad_file_is_named_by_line_and_field(tmp_path, text, named):
    with pytest.raises(TraceFormatError, match=named.replace("(", r"\(").replace(")", r"\)")):
        list(trace_rows(write(tmp_path, text)))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    with pytest.raises(TraceFormatError, match="not a regular file"):
        trace_format(fifo)


def test_engines_and_policies_pick_the_runs():
    assert replay_module.replay_runs(["trtllm"], ["capacity"]) == [("trtllm", "capacity")]
    assert Counter(e for e, _ in replay_module.replay_runs()) == Counter(trtllm=3, vllm=1, sglang=1)
    with pytest.raises(ValueError, match="no run"):
        replay_module.replay_runs(["vllm"], ["capacity"])


def test_a_run_stopped_by_max_steps_counts_what_it_held_and_what_had_not_arrived(tmp_path):
    """Every row ends in a stated status: one finished, one still running at the stop, one the
    run stopped before (it arrives at 100 s, iteration 2,000)."""
    path = write(
        tmp_path, "arrival_s,prompt_tokens,output_tokens\n0,1000,500\n0.5,2000,10\n100,30,1\n"
    )
    run = replay_trace(path, LLAMA, ["trtllm"], ["capacity"], max_steps=50).runs[0]
    assert run.tally.statuses[RequestState.FINISHED] == 1
    assert run.unfinished == 2 and run.crashed == 0 and run.outcome == "stall"


def test_rows_never_read_before_max_steps_are_counted_not_arrived(tmp_path, monkeypatch):
    """With one request read ahead at a time, the third row is still in the file when the run
    stops: it is counted, as not arrived."""
    monkeypatch.setattr(replay_module, "FEED", 1)
    path = write(
        tmp_path, "arrival_s,prompt_tokens,output_tokens\n0,1000,500\n0.5,2000,10\n100,30,1\n"
    )
    run = replay_trace(path, LLAMA, ["trtllm"], ["capacity"], max_steps=50).runs[0]
    assert run.tally.statuses[replay_module.NOT_ARRIVED] == 1 and run.unfinished == 2


def test_a_host_tier_in_gib_holds_the_models_pages():
    plan = plan_deployment(
        dataclasses.replace(example_deployments()["issue-21470"], host_cache_gib=2.0)
    )
    config = replay_config(plan)
    pages = 2 * 2**30 // plan.bytes_per_block
    assert config.host_cache_size == pages * config.geometry.bytes_per_block
