"""A per-rank memory budget and the KV-cache quota it leaves (``KvCacheCreator._cal_max_memory``,
tensorrt_llm/_torch/pyexecutor/_util.py; REFERENCE.md §1)::

    available = (total_gpu_memory - peak_memory + already_allocated_kv) * free_gpu_memory_fraction

capped by ``max_gpu_total_bytes``: a bigger workspace shrinks the pool, as in issue #21470.
:class:`DeviceMemory` measures the same budget from real CUDA allocations, and
:func:`pool_vs_workspace` shows the pool shrink on the device.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any

import torch

from kvlab.core.checks import MAX_COUNT, check_float, check_int, store_checked

if TYPE_CHECKING:  # pragma: no cover
    from kvlab.core.geometry import KVGeometry

#: Binary units, the ones GPU memory is reported in.
MIB = 1 << 20
GIB = 1 << 30


def readout_mib(mib: float) -> str:
    """``mib`` to 4 significant digits with thousands separated, rounding a tie up as the panels'
    pool slider does (JavaScript's toPrecision), not to even as Python's format does."""
    exact = Decimal(mib)
    if not exact:
        return "0"
    digits = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 3), rounding=ROUND_HALF_UP)
    return f"{float(digits):,.4g}"


@dataclass(frozen=True)
class MemoryBudget:
    """What one rank's GPU memory goes to, in bytes."""

    total_bytes: int
    weights_bytes: int = 0
    workspace_bytes: int = 0
    activation_peak_bytes: int = 0
    non_torch_bytes: int = 0
    free_gpu_memory_fraction: float = 0.9
    max_gpu_total_bytes: int | None = None
    already_allocated_kv_bytes: int = 0

    def __post_init__(self) -> None:
        store_checked(self, "total_bytes", check_int, low=1, high=MAX_COUNT)
        for name in (
            "weights_bytes",
            "workspace_bytes",
            "activation_peak_bytes",
            "non_torch_bytes",
            "already_allocated_kv_bytes",
        ):
            store_checked(self, name, check_int, low=0, high=MAX_COUNT)
        store_checked(
            self, "free_gpu_memory_fraction", check_float, low=0.0, high=1.0, low_open=True
        )
        if self.max_gpu_total_bytes is not None:
            store_checked(self, "max_gpu_total_bytes", check_int, low=1, high=MAX_COUNT)

    @property
    def peak_memory_bytes(self) -> int:
        """Torch peak after warm-up plus non-torch memory, as the creator measures it."""
        return (
            self.weights_bytes
            + self.workspace_bytes
            + self.activation_peak_bytes
            + self.non_torch_bytes
        )

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

    def breakdown(self) -> dict[str, int]:
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


class DeviceMemory:
    """What an executor holds on one CUDA GPU before its KV pool, as real tensors: the weights
    (:meth:`load_weights`), then a warm-up (:meth:`warm_up`) that leaves a persistent MoE
    workspace and a transient activation peak. :meth:`budget` then measures like
    ``KvCacheCreator.configure_kv_cache_capacity`` (tensorrt_llm/_torch/pyexecutor/_util.py):
    ``peak_memory = torch peak + (used on the device - used by torch)``."""

    def __init__(self, device: str | torch.device = "cuda") -> None:
        from kvlab.core.pool import resolve_device

        self.device = resolve_device(device)
        if self.device.type != "cuda":
            raise ValueError(
                f"device must be a CUDA device (memory is measured with "
                f"torch.cuda.mem_get_info), got {device!r}"
            )
        self.tensors: list[torch.Tensor] = []
        self.weights_bytes = self.workspace_bytes = 0
        gc.collect()  # tensors of dead Python objects would be freed mid-measurement otherwise
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)

    def _allocate(self, name: str, nbytes: int) -> torch.Tensor:
        free, _ = torch.cuda.mem_get_info(self.device)
        nbytes = check_int(name, nbytes, low=0, high=free)  # the range: what the device has free
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def load_weights(self, nbytes: int) -> DeviceMemory:
        """Allocate ``nbytes`` of model weights; they stay until :meth:`release`."""
        self.tensors.append(self._allocate("weights_bytes", nbytes))
        self.weights_bytes += nbytes
        return self

    def warm_up(self, workspace_bytes: int, activation_bytes: int = 0) -> DeviceMemory:
        """The warm-up: a persistent workspace (kept) and activations (freed again)."""
        self.tensors.append(self._allocate("workspace_bytes", workspace_bytes))
        self.workspace_bytes += workspace_bytes
        activations = self._allocate("activation_bytes", activation_bytes)
        activations.fill_(0)
        del activations
        return self

    def budget(
        self, free_gpu_memory_fraction: float = 0.9, max_gpu_total_bytes: int | None = None
    ) -> MemoryBudget:
        """The budget as measured now; its ``kv_quota_bytes`` is what the creator would give."""
        torch.cuda.synchronize(self.device)
        torch_peak = torch.cuda.max_memory_allocated(self.device)
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(self.device)
        torch_used = torch.cuda.memory_allocated(self.device)
        extra_cost = max(total - free - torch_used, 0)
        return MemoryBudget(
            total_bytes=total,
            weights_bytes=self.weights_bytes,
            workspace_bytes=self.workspace_bytes,
            activation_peak_bytes=torch_peak - self.weights_bytes - self.workspace_bytes,
            non_torch_bytes=extra_cost,
            free_gpu_memory_fraction=free_gpu_memory_fraction,
            max_gpu_total_bytes=max_gpu_total_bytes,
        )

    def release(self) -> None:
        """Free everything this object allocated."""
        self.tensors.clear()
        torch.cuda.empty_cache()


def pool_vs_workspace(
    geometry: KVGeometry,
    weights_bytes: int,
    workspace_bytes: Sequence[int],
    *,
    max_seq_len: int,
    activation_bytes: int = 0,
    free_gpu_memory_fraction: float = 0.9,
    device: str | torch.device = "cuda",
) -> list[dict[str, Any]]:
    """For each workspace size: real weights and workspace on the GPU, the measured budget, and
    a real KVCacheManager built from its quota; one row of the measured numbers a size."""
    from kvlab.core.manager import KVCacheManager

    rows = []
    for ws in workspace_bytes:
        mem = DeviceMemory(device).load_weights(weights_bytes).warm_up(ws, activation_bytes)
        try:
            budget = mem.budget(free_gpu_memory_fraction)
            before = torch.cuda.memory_allocated(mem.device)
            manager = KVCacheManager.expecting_clamp(
                geometry, budget.kv_quota_bytes, max_seq_len, max_batch_size=1, device=mem.device
            )
            torch.cuda.synchronize(mem.device)
            rows.append(
                dict(
                    workspace_bytes=ws,
                    total_bytes=budget.total_bytes,
                    weights_bytes=budget.weights_bytes,
                    measured_workspace_bytes=budget.workspace_bytes,
                    activation_peak_bytes=budget.activation_peak_bytes,
                    non_torch_bytes=budget.non_torch_bytes,
                    kv_quota_bytes=budget.kv_quota_bytes,
                    pool_blocks=manager.total_blocks,
                    pool_bytes_allocated=torch.cuda.memory_allocated(mem.device) - before,
                    max_seq_len=manager.max_seq_len,
                    max_blocks_per_seq=manager.max_blocks_per_seq,
                )
            )
            del manager
        finally:
            mem.release()
    return rows
