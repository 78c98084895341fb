"""A per-rank memory budget and the KV-cache quota it leaves.

Mirrors ``KvCacheCreator._cal_max_memory`` (tensorrt_llm/_torch/pyexecutor/_util.py),
REFERENCE.md §1::

    available = (total_gpu_memory - peak_memory + already_allocated_kv) * free_gpu_memory_fraction

capped by the user's ``max_gpu_total_bytes``. ``peak_memory`` is the torch peak after the
warm-up (weights, persistent workspaces such as the MoE workspace, activations) plus memory
torch does not see (NCCL, CUDA graphs). A bigger workspace therefore shrinks the KV pool:
that is how the pool of issue #21470 shrank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ._validate import MAX_COUNT, check_float, check_int

#: Binary units, the ones GPU memory is reported in.
MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class MemoryBudget:
    """What one rank's GPU memory goes to, in bytes."""

    total_bytes: int
    weights_bytes: int = 0
    workspace_bytes: int = 0
    activation_peak_bytes: int = 0
    non_torch_bytes: int = 0
    free_gpu_memory_fraction: float = 0.9
    max_gpu_total_bytes: Optional[int] = None
    already_allocated_kv_bytes: int = 0

    def __post_init__(self):
        check_int("total_bytes", self.total_bytes, low=1, high=MAX_COUNT)
        for name in ("weights_bytes", "workspace_bytes", "activation_peak_bytes",
                     "non_torch_bytes", "already_allocated_kv_bytes"):
            check_int(name, getattr(self, name), low=0, high=MAX_COUNT)
        check_float("free_gpu_memory_fraction", self.free_gpu_memory_fraction,
                    low=0.0, high=1.0, low_open=True)
        if self.max_gpu_total_bytes is not None:
            check_int("max_gpu_total_bytes", self.max_gpu_total_bytes, low=1, high=MAX_COUNT)

    @property
    def peak_memory_bytes(self) -> int:
        """Torch peak after warm-up plus non-torch memory, as the creator measures it."""
        return (self.weights_bytes + self.workspace_bytes + self.activation_peak_bytes
                + self.non_torch_bytes)

    @property
    def available_bytes(self) -> int:
        """(total - peak + already allocated KV) * fraction, never below zero."""
        free = self.total_bytes - self.peak_memory_bytes + self.already_allocated_kv_bytes
        return max(0, int(free * self.free_gpu_memory_fraction))

    @property
    def kv_quota_bytes(self) -> int:
        """The KV-cache quota: available bytes capped by max_gpu_total_bytes."""
        if self.max_gpu_total_bytes is None:
            return self.available_bytes
        return min(self.available_bytes, self.max_gpu_total_bytes)

    def breakdown(self) -> dict:
        """Bytes per use, for a stacked budget figure; the parts add up to total_bytes."""
        parts = {
            "weights": self.weights_bytes,
            "workspace": self.workspace_bytes,
            "activations": self.activation_peak_bytes,
            "non-torch": self.non_torch_bytes,
            "KV pool": self.kv_quota_bytes,
        }
        parts["unused"] = max(0, self.total_bytes - sum(parts.values()))
        return parts
