"""kvlab.backends.trtllm: the 4 MiB repro on a real TensorRT-LLM, compared with kvlab's.

The first tests run everywhere: the module imports without tensorrt_llm, ``available()`` says
why it cannot run, runs raise BackendUnavailable naming what is needed, and the version and
availability logic is checked against faked ``tensorrt_llm`` modules. The last ones run the real
comparison and skip, with ``available()``'s reason, where tensorrt_llm>=1.3 or CUDA is missing.
"""

import dataclasses
import subprocess
import sys
import types

import pytest
import torch

from kvlab.analysis.repro import run_repro
from kvlab.backends.trtllm import (
    BackendUnavailable,
    Comparison,
    TrtllmReproResult,
    available,
    compare_with_kvlab,
    parse_version,
    run_trtllm_repro,
)


@pytest.fixture
def no_trtllm(monkeypatch):
    """Make ``import tensorrt_llm`` fail, whatever is installed."""
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)


@pytest.fixture
def fake_trtllm(monkeypatch):
    """Factory: a faked ``tensorrt_llm`` of a given version, and whether torch sees CUDA."""

    def install(version, cuda=True):
        module = types.ModuleType("tensorrt_llm")
        if version is not None:
            module.__version__ = version
        monkeypatch.setitem(sys.modules, "tensorrt_llm", module)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)

    return install


def test_import_does_not_import_tensorrt_llm():
    code = (
        "import sys, kvlab.backends.trtllm; "
        "assert 'tensorrt_llm' not in sys.modules, 'tensorrt_llm was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_available_says_why_not(no_trtllm):
    ok, reason = available()
    assert ok is False
    assert "tensorrt_llm cannot be imported" in reason


@pytest.mark.parametrize("run", [run_trtllm_repro, compare_with_kvlab])
def test_runs_raise_backend_unavailable_saying_what_is_needed(no_trtllm, run):
    with pytest.raises(BackendUnavailable) as info:
        run()
    message = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert info.value.reason in message
    assert "tensorrt_llm>=1.3 with a CUDA GPU" in message
    assert "NVIDIA's package index" in message and "kvlab[trtllm]" in message


@pytest.mark.parametrize(
    "version, expected",
    [
        ("1.3.0", (1, 3)),
        ("1.4.0rc1", (1, 4)),
        ("1.3.0.dev2026010100", (1, 3)),
        ("1.4.0rc3.dev202610300406", (1, 4)),
        ("1.10.0", (1, 10)),
        ("1.2.0", (1, 2)),
    ],
)
def test_parse_version(version, expected):
    assert parse_version(version) == expected


@pytest.mark.parametrize("version", ["", "abc", "v1.3", None, 1.3])
def test_parse_version_refuses_what_has_no_major_minor(version):
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        parse_version(version)


@pytest.mark.parametrize("version", ["1.3.0", "1.4.0rc1", "1.3.0.dev2026010100", "1.10.0", "2.0.0"])
def test_available_accepts_1_3_and_later(fake_trtllm, version):
    fake_trtllm(version)
    assert available() == (True, f"tensorrt_llm {version} with a CUDA GPU")


@pytest.mark.parametrize("version", ["1.2.0", "1.2.99", "1.2.0rc5", "0.21.0"])
def test_available_refuses_older_than_1_3(fake_trtllm, version):
    fake_trtllm(version)
    ok, reason = available()
    assert not ok and version in reason and "older than 1.3" in reason


def test_available_refuses_a_version_it_cannot_read(fake_trtllm):
    fake_trtllm(None)
    ok, reason = available()
    assert not ok and "no usable version" in reason


def test_available_needs_cuda(fake_trtllm):
    fake_trtllm("1.4.0", cuda=False)
    ok, reason = available()
    assert not ok and "torch.cuda.is_available() is False" in reason
    with pytest.raises(BackendUnavailable, match="CUDA GPU"):
        run_trtllm_repro()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"policy": "wide"}, "policy"),
        ({"context": 0}, "context"),
        ({"retry_tokens": 0}, "retry_tokens"),
    ],
)
def test_bad_arguments_are_named_before_the_backend_is_needed(no_trtllm, kwargs, name):
    with pytest.raises(ValueError, match=name):
        run_trtllm_repro(**kwargs)


def test_comparison_names_the_fields_that_differ():
    model = run_repro(policy="clamped")
    real = TrtllmReproResult(
        tensorrt_llm_version="1.4.0rc3",
        kv_cache_class="_KVCache",
        policy="clamped",
        context=8192,
        capacity_tokens=2048,
        configured_max_seq_len=8192,
        max_blocks_per_seq=68,
        outcome="crash",
        error=model.error,
        state_preserved=None,
        retry_tokens=32,
        retry_ok=None,
    )
    assert Comparison(model, real).agree
    refused = dataclasses.replace(real, outcome="refused", error=None)
    assert Comparison(model, refused).differences == {
        "outcome": ("crash", "refused"),
        "error": (model.error, None),
    }


# --- against the real TensorRT-LLM ---------------------------------------------------------------

_AVAILABLE, _REASON = available()
_real = pytest.mark.skipif(not _AVAILABLE, reason=f"needs the real TensorRT-LLM: {_REASON}")


@pytest.mark.gpu
@_real
@pytest.mark.parametrize("policy, outcome", [("clamped", "crash"), ("configured", "refused")])
def test_real_manager_agrees_with_kvlab(policy, outcome):
    comparison = compare_with_kvlab("rtx5080-4mib", policy=policy)
    assert comparison.agree, comparison.differences
    assert comparison.trtllm.outcome == outcome
    if outcome == "crash":
        assert comparison.trtllm.error == "User-provided base page indices is too short"
    else:
        assert comparison.trtllm.state_preserved and comparison.trtllm.retry_ok


@pytest.mark.gpu
@_real
def test_real_manager_reports_the_seed_numbers():
    result = run_trtllm_repro("rtx5080-4mib")
    assert (result.capacity_tokens, result.max_blocks_per_seq) == (2048, 68)
