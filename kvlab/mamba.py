"""MambaHybridCacheManager: attention pages plus a pool of fixed-size recurrent-state slots.

Mirrors ``MambaHybridCacheManagerV2`` (tensorrt_llm/_torch/pyexecutor/mamba_cache_manager.py)
before and after PR #17261, REFERENCE.md §5:

- ``residency="raw"`` (before): ``max_batch_size * pp_size`` resident slots plus the dummy
  slots (one for CUDA-graph padding, one more under attention DP) are carved out of the quota
  first; when they and one attention page do not fit, construction raises the real ValueError.
- ``residency="clamped"`` (the fix): residency is bounded by what the quota affords after one
  attention page, MIN-reduced across ranks through ``comm`` (anything with
  ``all_reduce_min(int) -> int``: kvlab.distributed's TorchComm or ThreadComm handles), and
  exposed through ``max_resident_sequences()`` (None when every requested sequence fits), which
  the Scheduler gates first context chunks on. ``warmup_batch_sizes`` are truncated to it.

A sequence takes a slot when its cache is created (its first context chunk or its
DISAGG_GENERATION_INIT is admitted), keeps it while suspended, and gives it back on free.
``residency_bugs={"attention_only_returns_none_first"}`` restores the review's first finding:
a rank with no local Mamba layers answers None before reading the all-reduced cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Iterable, List, Optional, Sequence, Tuple

import torch

from ._validate import check_choice, check_int
from .geometry import KVGeometry, MambaGeometry
from .kv_cache import KVCache
from .manager import KVCacheManager
from .pool import resolve_device

RESIDENCY_MODES = ("raw", "clamped")
#: The review finding this manager can reproduce (the scheduler holds the other two).
MANAGER_RESIDENCY_BUGS = ("attention_only_returns_none_first",)
QUOTA_TOO_SMALL = ("The V2 Mamba GPU cache quota is too small for live recurrent states and "
                   "attention pages: got {got} bytes, need at least {need} bytes.")


class StateSlotsExhausted(RuntimeError):
    """A sequence needed a recurrent-state slot and none was free (the cap was bypassed)."""


def num_dummy_slots(cuda_graph_padding: bool = True, attention_dp: bool = False) -> int:
    """Reserved slots no sequence owns: one for CUDA-graph padding, one more under attention DP."""
    return int(cuda_graph_padding) + int(attention_dp)


@dataclass(frozen=True)
class ResidencyPlan:
    """The slot arithmetic of one rank, computed without allocating anything."""

    requested: int          # max_batch_size * pp_size
    dummies: int
    slot_bytes: int
    page_bytes: int         # one attention page
    quota_bytes: int

    @property
    def raw_need_bytes(self) -> int:
        """(requested + dummies) * slot_bytes + one attention page: the raw mode's floor."""
        return (self.requested + self.dummies) * self.slot_bytes + self.page_bytes

    @property
    def affordable(self) -> Optional[int]:
        """Resident sequences the quota affords after one page and the dummies; None when
        slots cost nothing (no local Mamba layers)."""
        if self.slot_bytes == 0:
            return None
        return (self.quota_bytes - self.page_bytes) // self.slot_bytes - self.dummies

    @property
    def local_cap(self) -> int:
        """min(requested, affordable): what this rank alone would allow."""
        affordable = self.affordable
        return self.requested if affordable is None else min(self.requested, affordable)


def plan_residency(mamba: Optional[MambaGeometry], attention: KVGeometry, quota_bytes: int,
                   max_batch_size: int, pp_size: int = 1, *, cuda_graph_padding: bool = True,
                   attention_dp: bool = False) -> ResidencyPlan:
    """The plan for ``MambaHybridCacheManager``'s arguments (``mamba=None``: attention-only)."""
    check_int("quota_bytes", quota_bytes, low=1)
    check_int("max_batch_size", max_batch_size, low=1, high=1 << 20)
    check_int("pp_size", pp_size, low=1, high=1024)
    slot_bytes = 0 if mamba is None else mamba.bytes_per_slot
    dummies = num_dummy_slots(cuda_graph_padding, attention_dp) if slot_bytes else 0
    return ResidencyPlan(max_batch_size * pp_size, dummies, slot_bytes, attention.bytes_per_block,
                         quota_bytes)


class StateSlotPool:
    """``num_slots`` recurrent-state slots of ``slot_bytes`` each, one real uint8 tensor; the
    first ``num_dummies`` are reserved (CUDA-graph padding) and never handed out."""

    def __init__(self, num_slots: int, slot_bytes: int, num_dummies: int, device="cpu"):
        check_int("num_slots", num_slots, low=0)
        check_int("slot_bytes", slot_bytes, low=0)
        check_int("num_dummies", num_dummies, low=0, high=num_slots)
        self.slot_bytes = slot_bytes
        self.num_dummies = num_dummies
        self.storage = torch.empty((num_slots, slot_bytes), dtype=torch.uint8,
                                   device=resolve_device(device))
        self._free: List[int] = list(range(num_slots - 1, num_dummies - 1, -1))

    @property
    def num_slots(self) -> int:
        return self.storage.shape[0]

    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def nbytes(self) -> int:
        return self.storage.numel()

    def acquire(self) -> Optional[int]:
        return self._free.pop() if self._free else None

    def release(self, slot: int) -> None:
        if not self.num_dummies <= slot < self.num_slots or slot in self._free:
            raise ValueError(f"state slot {slot} is not handed out by this pool")
        self._free.append(slot)


class MambaHybridCacheManager(KVCacheManager):
    """A hybrid model's rank: attention pages (the KVCacheManager) plus recurrent-state slots.

    ``mamba=None`` (or zero layers) is an attention-only pipeline rank: no slots, yet in
    "clamped" mode it takes part in the MIN all-reduce and adopts the reduced cap.
    """

    def __init__(self, attention: KVGeometry, mamba: Optional[MambaGeometry], quota_bytes: int,
                 max_seq_len: int, max_batch_size: int, *, pp_size: int = 1,
                 residency: str = "clamped", comm=None, cuda_graph_padding: bool = True,
                 attention_dp: bool = False, warmup_batch_sizes: Sequence[int] = (),
                 residency_bugs: Iterable[str] = frozenset(), device="cpu", **kwargs):
        if mamba is not None and not isinstance(mamba, MambaGeometry):
            raise TypeError(f"mamba must be a MambaGeometry or None, got {type(mamba).__name__}")
        if not isinstance(attention, KVGeometry):
            raise TypeError(f"attention must be a KVGeometry, got {type(attention).__name__}")
        self.residency = check_choice("residency", residency, RESIDENCY_MODES)
        for name, flag in (("cuda_graph_padding", cuda_graph_padding),
                           ("attention_dp", attention_dp)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r}")
        if comm is not None and not callable(getattr(comm, "all_reduce_min", None)):
            raise TypeError(f"comm must have an all_reduce_min(int) method, got {type(comm).__name__}")
        self.residency_bugs: FrozenSet[str] = frozenset(residency_bugs)
        unknown = self.residency_bugs - set(MANAGER_RESIDENCY_BUGS)
        if unknown:
            raise ValueError(f"residency_bugs must be a subset of {list(MANAGER_RESIDENCY_BUGS)}, "
                             f"got unknown {sorted(unknown)}")
        warmup = tuple(check_int("warmup_batch_sizes[]", b, low=1, high=1 << 20)
                       for b in warmup_batch_sizes)
        self.mamba = mamba
        self.local_num_mamba_layers = 0 if mamba is None else mamba.num_mamba_layers
        self.plan = plan_residency(mamba if self.local_num_mamba_layers else None, attention,
                                   quota_bytes, max_batch_size, pp_size,
                                   cuda_graph_padding=cuda_graph_padding, attention_dp=attention_dp)
        plan = self.plan
        if residency == "raw":
            resident = plan.requested
            if plan.slot_bytes and plan.raw_need_bytes > quota_bytes:
                raise ValueError(QUOTA_TOO_SMALL.format(got=quota_bytes, need=plan.raw_need_bytes))
            cap = None
        else:
            if plan.slot_bytes and plan.local_cap < 1:
                need = (1 + plan.dummies) * plan.slot_bytes + plan.page_bytes
                raise ValueError(QUOTA_TOO_SMALL.format(got=quota_bytes, need=need))
            resident = plan.local_cap
            if comm is not None:  # every rank, Mamba or not, joins the MIN
                resident = check_int("all-reduced residency", comm.all_reduce_min(resident), low=1)
            cap = resident if resident < plan.requested else None
        #: the all-reduced cap (None: the quota affords every requested sequence)
        self._resident_sequence_cap = cap
        num_slots = (resident + plan.dummies) if plan.slot_bytes else 0
        slots_bytes = num_slots * plan.slot_bytes
        super().__init__(attention, quota_bytes - slots_bytes, max_seq_len, max_batch_size,
                         device=device, pp_size=pp_size, **kwargs)
        #: the whole quota (``quota_bytes`` is what the attention pages got after the slots)
        self.hybrid_quota_bytes = quota_bytes
        self.state_slots = StateSlotPool(num_slots, plan.slot_bytes, plan.dummies, self.device)
        self._slot_of: dict = {}
        limit = self.max_resident_sequences()
        self.warmup_batch_sizes: Tuple[int, ...] = (
            warmup if limit is None else tuple(dict.fromkeys(min(b, limit) for b in warmup)))

    # -- residency ------------------------------------------------------------------------
    def max_resident_sequences(self) -> Optional[int]:
        """Sequences whose recurrent state may be resident at once; None = unbounded (the real
        ``max_resident_sequences``, after the review's fix: the all-reduced cap first)."""
        if "attention_only_returns_none_first" in self.residency_bugs:
            if self.local_num_mamba_layers == 0:
                return None
        return self._resident_sequence_cap

    @property
    def resident_sequences(self) -> int:
        """Sequences holding a state slot now (suspended ones included)."""
        return len(self._slot_of)

    # -- slot ownership -------------------------------------------------------------------
    def create_cache(self, request_id: str) -> KVCache:
        """A new cache, and a recurrent-state slot for it (on ranks with Mamba layers)."""
        slot = None
        if self.plan.slot_bytes:
            slot = self.state_slots.acquire()
            if slot is None:
                raise StateSlotsExhausted(
                    f"no free recurrent-state slot for {request_id!r}: "
                    f"{self.resident_sequences} sequences hold all "
                    f"{self.state_slots.num_slots - self.state_slots.num_dummies} "
                    f"(max_resident_sequences={self.max_resident_sequences()})")
        try:
            cache = super().create_cache(request_id)
        except BaseException:
            if slot is not None:
                self.state_slots.release(slot)
            raise
        if slot is not None:
            self._slot_of[request_id] = slot
        return cache

    def state_slot(self, request_id: str) -> Optional[int]:
        return self._slot_of.get(request_id)

    def free(self, request) -> None:
        """Release the cache (pages, page-index slot) and its recurrent-state slot."""
        cache = request if isinstance(request, KVCache) else self.get_cache(request)
        super().free(cache)
        slot = self._slot_of.pop(cache.request_id, None)
        if slot is not None:
            self.state_slots.release(slot)

    def check_invariants(self) -> None:
        super().check_invariants()
        assert set(self._slot_of) <= set(self.caches), "a state slot outlived its cache"
        if self.plan.slot_bytes:
            assert set(self._slot_of) == set(self.caches), "a cache without a state slot"
        held = list(self._slot_of.values())
        assert len(held) == len(set(held)), "a state slot is owned twice"
        assert len(held) + self.state_slots.free_slots + self.state_slots.num_dummies == (
            self.state_slots.num_slots), "state slots not conserved"

    def __repr__(self) -> str:
        return (f"MambaHybridCacheManager({self.residency}, {self.state_slots.num_slots} state "
                f"slots x {self.plan.slot_bytes} B ({self.plan.dummies} dummy), "
                f"max_resident_sequences={self.max_resident_sequences()}, "
                f"{self.total_blocks} blocks x {self.geometry.bytes_per_block} B)")
