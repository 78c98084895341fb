"""Seeded workload generators: determinism, shapes, bounds and argument errors."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kvlab import Request
from kvlab.run.workload import (
    STANDARD_MIXED,
    Constant,
    LogNormal,
    Uniform,
    fixed,
    poisson_arrivals,
    poisson_workload,
    standard_mixed_workload,
)


def test_fixed_names_requests_in_order():
    requests = fixed([(8192, 16), (256, 32, 3)], id_prefix="q")
    assert requests == [Request("q0", 8192, 16), Request("q1", 256, 32, 3)]
    with pytest.raises(ValueError, match=r"specs\[0\] must be \(prompt_len, max_new_tokens"):
        fixed([(1,)])


def test_same_seed_same_requests_other_seed_other_requests():
    def make(seed):
        return poisson_workload(200, 0.5, LogNormal(256, 1.0), Uniform(1, 64), seed=seed)

    assert make(5) == make(5)
    assert make(5) != make(6)


def test_poisson_arrivals_start_at_zero_and_match_the_rate():
    arrivals = poisson_arrivals(20_000, rate=0.25, seed=1)
    assert arrivals[0] == 0 and np.all(np.diff(arrivals) >= 0)
    assert arrivals[-1] / len(arrivals) == pytest.approx(4.0, rel=0.05)
    assert len(poisson_arrivals(0, rate=1.0, seed=1)) == 0


def test_distributions_respect_their_bounds():
    rng = np.random.default_rng(0)
    assert set(Constant(7).sample(rng, 10)) == {7}
    uniform = Uniform(3, 5).sample(rng, 1000)
    assert uniform.min() == 3 and uniform.max() == 5
    lognormal = LogNormal(median=100, sigma=2.0, low=10, high=500).sample(rng, 5000)
    assert lognormal.min() == 10 and lognormal.max() == 500
    assert np.median(LogNormal(median=100, sigma=0.5).sample(rng, 5000)) == pytest.approx(
        100, rel=0.05
    )


def test_prompts_are_at_least_one_token_and_ints_mean_constants():
    requests = poisson_workload(50, 1.0, prompt_len=Uniform(1, 3), max_new_tokens=9, seed=2)
    assert min(r.prompt_len for r in requests) == 1
    assert {r.max_new_tokens for r in requests} == {9}
    for empty in (0, Uniform(0, 3), LogNormal(100, 1.0, low=0)):  # refused, not raised to 1
        with pytest.raises(ValueError, match="prompt_len must draw lengths of at least 1"):
            poisson_workload(5, 1.0, prompt_len=empty, max_new_tokens=9)


def test_standard_mixed_workload_is_the_stated_one():
    requests = standard_mixed_workload(seed=0)
    assert len(requests) == STANDARD_MIXED["num_requests"] == 2000
    assert all(16 <= r.prompt_len <= 8192 and 1 <= r.max_new_tokens <= 2048 for r in requests)
    assert requests == standard_mixed_workload(seed=0)


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda: poisson_workload(-1, 1.0, 8, 8), ValueError, "num_requests must be in [0, "),
        (lambda: poisson_workload(5, 0.0, 8, 8), ValueError, "rate must be in (0.0, "),
        (
            lambda: poisson_workload(5, 1.0, "long", 8),
            TypeError,
            "prompt_len must be an int or a LengthDistribution",
        ),
        (lambda: poisson_workload(5, 1.0, 8, 8, seed=-1), ValueError, "seed must be in [0, "),
        (lambda: Uniform(5, 3), ValueError, "high must be in [5, "),
        (lambda: LogNormal(median=0, sigma=1), ValueError, "median must be in (0.0, "),
        (lambda: Constant(-1), ValueError, "value must be in [0, "),
        (lambda: poisson_workload(5, 1.0, 10**30, 8), ValueError, "prompt_len must be in [0, "),
        (lambda: poisson_workload(5, 1.0, -1, 8), ValueError, "prompt_len must be in [0, "),
        (lambda: poisson_workload(5, 1.0, 8, -1), ValueError, "max_new_tokens must be in [0, "),
        (
            lambda: poisson_workload(5, 1.0, 8, 8, id_prefix=None),
            TypeError,
            "id_prefix must be a str",
        ),
        (
            lambda: poisson_workload(5, 1.0, 8, 8, id_prefix=-1),
            TypeError,
            "id_prefix must be a str",
        ),
        (lambda: fixed([(8, 8)], id_prefix=float("nan")), TypeError, "id_prefix must be a str"),
    ],
)
def test_bad_workload_arguments_name_the_parameter(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)


# -- the real hour -------------------------------------------------------------------------------


def test_azure_trace_has_every_request_with_its_recorded_lengths():
    from kvlab.run.workload import azure_trace

    conv = azure_trace("conv")
    assert len(conv) == 19_366 and len(azure_trace("code")) == 8_819
    # the first rows of the file, as recorded (data/traces/AzureLLMInferenceTrace_conv.csv)
    assert [(r.request_id, r.prompt_len, r.max_new_tokens, r.arrival_step) for r in conv[:2]] == [
        ("conv-0", 374, 44, 0),
        ("conv-1", 396, 109, int((50.995169 - 46.68059) // 0.05)),
    ]
    assert (
        max(r.prompt_len for r in conv) == 14_050 and max(r.max_new_tokens for r in conv) == 1_000
    )
    steps = [r.arrival_step for r in conv]
    assert steps == sorted(steps) and steps[-1] == int(
        (3600 + 14 * 60 + 8.402527 - (46.68059 + 15 * 60)) // 0.05
    )


def test_azure_trace_maps_seconds_to_steps_and_limits():
    from kvlab.run.workload import azure_trace

    coarse = azure_trace("conv", seconds_per_iteration=1.0, limit=3)
    assert [r.arrival_step for r in coarse] == [0, 4, 4]  # 18:15:46.68, :50.99, :51.22
    assert len(azure_trace("code", limit=10)) == 10
    first_minutes = azure_trace("code", seconds_per_iteration=1.0, minutes=10)
    assert 0 < len(first_minutes) < 8_819
    assert max(r.arrival_step for r in first_minutes) < 600  # one step a second: 10 minutes
    assert azure_trace("code", seconds_per_iteration=1.0)[len(first_minutes)].arrival_step >= 600


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        (dict(service="chat"), ValueError, "service must be one of"),
        (dict(seconds_per_iteration=0), ValueError, "seconds_per_iteration must be in"),
        (dict(limit=0), ValueError, "limit must be in [1, "),
        (dict(minutes=0), ValueError, "minutes must be in (0"),
    ],
)
def test_azure_trace_bad_arguments_name_the_parameter(kwargs, error, text):
    from kvlab.run.workload import azure_trace

    with pytest.raises(error) as info:
        azure_trace(**kwargs)
    assert text in str(info.value)


# -- malformed trace files: a clear error naming the file and the line --------------------------

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "the header must be"),
        (AZURE_HEADER, "no requests"),
        ("when,prompt,output\n", "the header must be"),
        (AZURE_HEADER + "2023-11-16 18:17:03.97,4808\n", "line 2: 3 fields expected, got 2"),
        (AZURE_HEADER + "2023-11-16 99:17:03.97,4808,10\n", "line 2: TIMESTAMP"),
        (AZURE_HEADER + "yesterday,4808,10\n", "line 2: TIMESTAMP"),
        (
            AZURE_HEADER + "2023-11-16 18:17:03.97,many,10\n",
            "line 2: ContextTokens must be a whole number",
        ),
        (
            AZURE_HEADER + "2023-11-16 18:17:03.97,0,10\n",
            "line 2: ContextTokens must be an int in [1, ",
        ),
        (
            AZURE_HEADER + "2023-11-16 18:17:03.97,5,nan\n",
            "line 2: GeneratedTokens must be a whole number",
        ),
        (
            AZURE_HEADER + "2023-11-16 18:17:03.97,5,-1\n",
            "line 2: GeneratedTokens must be an int in [0, ",
        ),
    ],
)
def test_a_malformed_azure_trace_is_refused_by_line(tmp_path, monkeypatch, text, message):
    from kvlab.run import workload

    (tmp_path / workload.AZURE_TRACES["code"]).write_text(text, encoding="utf-8")
    monkeypatch.setattr(workload, "TRACE_DIR", tmp_path)
    with pytest.raises(workload.TraceFormatError, match=re.escape(message)) as caught:
        workload.azure_trace("code")
    assert workload.AZURE_TRACES["code"] in str(caught.value)


def test_an_azure_trace_across_midnight_keeps_its_order_and_a_bom_is_read(tmp_path, monkeypatch):
    from kvlab.run import workload

    (tmp_path / workload.AZURE_TRACES["conv"]).write_bytes(
        (
            "\ufeff" + AZURE_HEADER + "2023-11-16 23:59:59.5,10,1\n2023-11-17 00:00:00.5,20,2\n"
        ).encode("utf-8")
    )
    monkeypatch.setattr(workload, "TRACE_DIR", tmp_path)
    first, second = workload.azure_trace("conv", seconds_per_iteration=0.5)
    assert (first.arrival_step, second.arrival_step) == (0, 2)
    (tmp_path / workload.AZURE_TRACES["conv"]).write_text(  # offsets are honoured: 1 h apart, not 0
        AZURE_HEADER + "2023-11-16 10:00:00+00:00,10,1\n2023-11-16 12:00:00+01:00,20,2\n",
        encoding="utf-8",
    )
    first, second = workload.azure_trace("conv", seconds_per_iteration=60)
    assert (first.arrival_step, second.arrival_step) == (0, 60)
    (tmp_path / workload.AZURE_TRACES["conv"]).write_text(
        AZURE_HEADER + "2023-11-16 10:00:01,10,1\n2023-11-16 10:00:00,20,2\n", encoding="utf-8"
    )
    with pytest.raises(
        workload.TraceFormatError, match="line 3: TIMESTAMP .* is earlier than the row before"
    ):
        workload.azure_trace("conv")
    (tmp_path / workload.AZURE_TRACES["conv"]).write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(workload.TraceFormatError, match="not a CSV or JSON-lines file in UTF-8"):
        workload.azure_trace("conv")


@pytest.mark.parametrize(
    "line, message",
    [
        ("not json", "line 1: not JSON (Expecting value"),
        ("[1, 2]", "line 1: not a JSON object, got list"),
        ('{"timestamp": 0, "input_length": 5}', "line 1: missing output_length, hash_ids"),
        (
            '{"timestamp": -5, "input_length": 5, "output_length": 1, "hash_ids": []}',
            "timestamp must be",
        ),
        (
            '{"timestamp": 0, "input_length": 5.5, "output_length": 1, "hash_ids": []}',
            "input_length must be an int",
        ),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}',
            "hash_ids must be a list of ints",
        ),
        (
            '{"timestamp": 0, "input_length": "5", "output_length": 1, "hash_ids": []}',
            "input_length must be a JSON number",
        ),
    ],
)
def test_a_malformed_mooncake_trace_is_refused_by_line(tmp_path, monkeypatch, line, message):
    from kvlab.run import workload

    folder = tmp_path / "mooncake-fast25"
    folder.mkdir()
    (folder / workload.MOONCAKE_TRACES["synthetic"]).write_text(line + "\n", encoding="utf-8")
    monkeypatch.setattr(workload, "TRACE_DIR", tmp_path)
    with pytest.raises(workload.TraceFormatError, match=re.escape(message)):
        workload.mooncake_trace("synthetic")
