"""Shared fixtures for the kvlab test suite.

``seed_manager(policy)`` builds the RTX 5080 experiment of the seed (issue #21470 reduced to one
GPU): 2 layers, 2 KV heads, head_dim 128, fp16, 32 tokens per block, a 4 MiB pool, configured
max_seq_len 8192, batch size 1.
"""

from __future__ import annotations

import signal

import pytest
import torch

from kvlab import KVCacheManager
from kvlab.analysis.presets import seed_geometry

SEED_QUOTA_BYTES = 4 * 2**20
SEED_MAX_SEQ_LEN = 8192

_MARKERS = {
    "gpu": "needs a CUDA GPU",
    "vllm": "runs the real vLLM scheduler in its own environment (bash scripts/setup.sh vllm)",
    "sglang": "runs the real SGLang scheduler in its own environment (bash scripts/setup.sh sglang)",
    "ui": "drives JupyterLab in a real browser",
    "notebook": "executes a notebook with papermill",
    "slow": "takes more than a few seconds",
    "upstream": "names the upstream TensorRT-LLM test a conformance test mirrors "
    "(tests/conformance/test_catalogue.py reads it)",
}


def pytest_configure(config):
    # pyproject.toml declares these; add only the ones missing so that a run from another
    # root (or an ini without them) still knows them under --strict-markers.
    declared = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    for name, text in _MARKERS.items():
        if name not in declared:
            config.addinivalue_line("markers", f"{name}: {text}")


@pytest.fixture(
    params=[
        "cpu",
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(
                    not torch.cuda.is_available(),
                    reason="torch.cuda.is_available() is False: no CUDA GPU on this machine",
                ),
            ],
        ),
    ]
)
def device(request) -> str:
    """A test that takes ``device`` runs on the CPU and, with ``pytest -m gpu`` where there is
    one, on a CUDA GPU: one test, its logic checked by CPU CI."""
    return request.param


@pytest.fixture
def seed_manager():
    """Factory: ``seed_manager("clamped")`` or ``seed_manager("configured", max_batch_size=2)``:
    the seed's manager, without the clamp warning it always emits (tests that check the warning
    build the manager themselves)."""

    def make(
        policy: str = "clamped", device: str = "cpu", max_batch_size: int = 1, **kwargs
    ) -> KVCacheManager:
        return KVCacheManager.expecting_clamp(
            seed_geometry(),
            quota_bytes=SEED_QUOTA_BYTES,
            max_seq_len=SEED_MAX_SEQ_LEN,
            max_batch_size=max_batch_size,
            page_index_policy=policy,
            device=device,
            **kwargs,
        )

    return make


@pytest.fixture(autouse=True)
def ctrl_c_as_in_a_terminal():
    """SIGINT as a terminal's Ctrl-C finds it. A pytest started in the background (a script's
    ``&``, nohup) inherits SIGINT ignored, and so would every command a test starts, which by
    design leaves an ignored signal alone: the Ctrl-C tests then failed with the rank tests
    "under load" (the load script ran them in the background)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
