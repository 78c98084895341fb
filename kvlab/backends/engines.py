"""The real engines kvlab holds its peers to, by name, each with its conformance workloads."""

from __future__ import annotations

from kvlab.analysis.peer_conformance import sglang_workloads, vllm_workloads
from kvlab.backends.sglang import SGLANG
from kvlab.backends.vllm import VLLM

#: name -> (the engine's backend, its conformance workloads)
ENGINES = {"vllm": (VLLM, vllm_workloads), "sglang": (SGLANG, sglang_workloads)}

__all__ = ["ENGINES"]
