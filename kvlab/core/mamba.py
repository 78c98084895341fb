"""MambaHybridCacheManager: attention pages plus a pool of fixed-size recurrent-state slots.

Mirrors ``MambaHybridCacheManagerV2`` (tensorrt_llm/_torch/pyexecutor/kv_cache/
mamba_cache_manager/mamba_cache_manager_v2.py at 28295084; REFERENCE.md §5). The merged default,
``residency="raw"``: ``max_batch_size * pp_size`` resident sequences plus the dummy slots, or the
real ``ValueError`` (:data:`QUOTA_TOO_SMALL`) when they do not fit the quota. Opt-in proposals,
not merged: ``residency="clamped"`` (PR #17261, closed: residency bounded by the quota and
all-reduced) and ``quota_message="pr18985"`` (PR #18985, open; kvlab's wording). A sequence takes
a slot when its cache is created, keeps it while suspended, and gives it back on free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from kvlab.core.checks import (
    check_bools,
    check_choice,
    check_instance,
    check_int,
    check_param,
    check_sequence,
    store_checked,
    store_param,
)
from kvlab.core.geometry import KVGeometry, MambaGeometry
from kvlab.core.host_tier import MinAllReduce
from kvlab.core.kv_cache import KVCache
from kvlab.core.manager import KVCacheManager
from kvlab.core.memory import GIB, MIB
from kvlab.core.request import Request
from kvlab.core.words import counted

#: The real message, raised by ``MambaHybridCacheManagerV2._build_cache_config``.
QUOTA_TOO_SMALL = (
    "The V2 Mamba GPU cache quota is too small for live recurrent states and "
    "attention pages: got {got} bytes, need at least {need} bytes."
)
#: The generic ``max_batch_size`` default PR #18985 starts from (its description's 2048).
GENERIC_MAX_BATCH_SIZE = 2048


class StateSlotsExhausted(RuntimeError):
    """A sequence needed a recurrent-state slot and none was free (the cap was bypassed)."""


def num_dummy_slots(cuda_graph_padding: bool = True, attention_dp: bool = False) -> int:
    """Reserved slots no sequence owns: one for CUDA-graph padding, one more under attention DP
    (the real count without speculative decoding; draft-length schedules add more upstream)."""
    check_bools(cuda_graph_padding=cuda_graph_padding, attention_dp=attention_dp)
    return int(cuda_graph_padding) + int(attention_dp)


@dataclass(frozen=True)
class ResidencyPlan:
    """The slot arithmetic of one rank, computed without allocating anything."""

    requested: int  # max_batch_size * pp_size (the merged _max_resident_sequences())
    dummies: int
    slot_bytes: int
    page_bytes: int  # one attention page
    quota_bytes: int
    pp_size: int = 1

    def __post_init__(self) -> None:
        for name in ("requested", "dummies", "slot_bytes", "page_bytes", "quota_bytes"):
            store_checked(self, name, check_int)
        store_param(self, "pp_size")

    @property
    def max_batch_size(self) -> int:
        return self.requested // self.pp_size

    @property
    def raw_need_bytes(self) -> int:
        """(requested + dummies) * slot_bytes + one page: the floor below which merged code
        raises (``_minimum_live_gpu_quota()``)."""
        return (self.requested + self.dummies) * self.slot_bytes + self.page_bytes

    @property
    def minimum_live_quota(self) -> int:
        """The merged ``_minimum_live_gpu_quota()`` (= :attr:`raw_need_bytes`)."""
        return self.raw_need_bytes

    @property
    def raw_fits(self) -> bool:
        """Merged TensorRT-LLM builds this rank (the floor fits the quota)."""
        return self.raw_need_bytes <= self.quota_bytes

    @property
    def affordable(self) -> int | None:
        """Resident sequences the quota affords after one page and the dummies; None when
        slots cost nothing (no local Mamba layers)."""
        if self.slot_bytes == 0:
            return None
        return (self.quota_bytes - self.page_bytes) // self.slot_bytes - self.dummies

    @property
    def local_cap(self) -> int:
        """min(requested, affordable): what this rank alone would allow under PR #17261's clamp."""
        affordable = self.affordable
        return self.requested if affordable is None else min(self.requested, affordable)

    def feasible_max_batch_size(self, cap: int = GENERIC_MAX_BATCH_SIZE) -> int:
        """*Proposal, PR #18985 (open).* The largest ``max_batch_size``, at most ``cap`` (the
        generic default), whose merged floor fits this quota; 0 when not even 1 fits. The PR pins
        one default per model family; this is the largest a quota admits (Qwen3.5-27B, bf16
        state, 24.86 GiB: 339)."""
        cap = check_int("cap", cap, low=1, high=1 << 20)
        if self.page_bytes > self.quota_bytes:
            return 0
        affordable = self.affordable
        if affordable is None:
            return cap
        return max(0, min(cap, affordable // self.pp_size))


def plan_residency(
    mamba: MambaGeometry | None,
    attention: KVGeometry,
    quota_bytes: int,
    max_batch_size: int,
    pp_size: int = 1,
    *,
    cuda_graph_padding: bool = True,
    attention_dp: bool = False,
) -> ResidencyPlan:
    """The plan for ``MambaHybridCacheManager``'s arguments (``mamba=None``: attention-only)."""
    if mamba is not None and not isinstance(mamba, MambaGeometry):
        raise TypeError(f"mamba must be a MambaGeometry or None, got {mamba!r:.60}")
    check_instance("attention", attention, KVGeometry)
    max_batch_size = check_param("max_batch_size", max_batch_size)
    pp_size = check_param("pp_size", pp_size)
    dummies = num_dummy_slots(cuda_graph_padding, attention_dp)
    slot_bytes = 0 if mamba is None else mamba.bytes_per_slot
    return ResidencyPlan(
        max_batch_size * pp_size,
        dummies if slot_bytes else 0,
        slot_bytes,
        attention.bytes_per_block,
        check_param("quota_bytes", quota_bytes),
        pp_size,
    )


def cache_size_per_token(
    mamba: MambaGeometry | None,
    attention: KVGeometry,
    max_batch_size: int,
    pp_size: int = 1,
    *,
    cuda_graph_padding: bool = True,
    attention_dp: bool = False,
) -> tuple[int, int]:
    """(bytes per token, fixed bytes): the merged ``get_cache_size_per_token``'s affine cost,
    without prefix reuse: one token's attention bytes; the live and dummy state slots."""
    slot_bytes = 0 if mamba is None else mamba.bytes_per_slot
    slots = max_batch_size * pp_size + num_dummy_slots(cuda_graph_padding, attention_dp)
    return attention.bytes_per_token, slots * slot_bytes


def proposed_quota_error(plan: ResidencyPlan) -> str:
    """*Proposal, PR #18985 (open):* the quota error in GiB, naming the counts and the settings to
    change (kvlab's wording; the hint is :meth:`ResidencyPlan.feasible_max_batch_size`)."""
    fits = check_instance("plan", plan, ResidencyPlan).feasible_max_batch_size()
    hint = (
        f"lower max_batch_size (at most {fits:,} fits this quota) or raise "
        f"free_gpu_memory_fraction / max_gpu_total_bytes"
        if fits
        else "not even max_batch_size=1 fits: raise free_gpu_memory_fraction / max_gpu_total_bytes"
    )
    return (
        f"The V2 Mamba GPU cache quota is too small for live recurrent states and attention "
        f"pages: got {plan.quota_bytes / GIB:.2f} GiB, need at least "
        f"{plan.raw_need_bytes / GIB:.2f} GiB ({counted(plan.requested, 'resident sequence')} "
        f"(max_batch_size {plan.max_batch_size:,} x pp_size {plan.pp_size}) + "
        f"{counted(plan.dummies, 'reserved slot')} of {plan.slot_bytes / MIB:.1f} MiB, plus one "
        f"{plan.page_bytes / MIB:.1f} MiB attention page); {hint}."
    )


class StateSlotPool:
    """``num_slots`` recurrent-state slots of ``slot_bytes`` each, one real uint8 tensor; the
    first ``num_dummies`` are reserved (CUDA-graph padding) and never handed out."""

    def __init__(self, num_slots: int, slot_bytes: int, num_dummies: int, device: torch.device):
        self.num_dummies = num_dummies
        self.storage = torch.empty((num_slots, slot_bytes), dtype=torch.uint8, device=device)
        self.nbytes = num_slots * slot_bytes
        self.num_slots = num_slots
        self._free = list(range(num_slots - 1, num_dummies - 1, -1))

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def acquire(self) -> int | None:
        return self._free.pop() if self._free else None

    def release(self, slot: int) -> None:
        assert self.num_dummies <= slot < self.num_slots and slot not in self._free
        self._free.append(slot)


class MambaHybridCacheManager(KVCacheManager):
    """A hybrid model's rank: attention pages (the KVCacheManager) plus recurrent-state slots.

    ``residency="raw"`` (the default) is merged TensorRT-LLM: ``max_resident_sequences()`` is
    None. ``residency="clamped"`` is PR #17261's proposal; ``comm`` belongs to it alone.
    ``quota_message="pr18985"`` words the error as PR #18985 proposes. ``mamba=None`` (or zero
    layers) is an attention-only pipeline rank: no slots, yet in "clamped" mode it takes part
    in the MIN all-reduce and adopts the reduced cap.
    """

    def __init__(
        self,
        attention: KVGeometry,
        mamba: MambaGeometry | None,
        quota_bytes: int,
        max_seq_len: int,
        max_batch_size: int,
        *,
        pp_size: int = 1,
        residency: str = "raw",
        comm: MinAllReduce | None = None,
        cuda_graph_padding: bool = True,
        attention_dp: bool = False,
        warmup_batch_sizes: Sequence[int] = (),
        quota_message: str = "merged",
        device: str | torch.device = "cpu",
        **kwargs: Any,
    ) -> None:
        self.residency = check_choice("residency", residency, ("raw", "clamped"))
        self.quota_message = check_choice("quota_message", quota_message, ("merged", "pr18985"))
        if comm is not None and not callable(getattr(comm, "all_reduce_min", None)):
            raise TypeError(
                f"comm must have an all_reduce_min(int) method, got {type(comm).__name__}"
            )
        if residency == "raw" and comm is not None:
            raise ValueError(
                "comm belongs to residency='clamped' (PR #17261's proposal, closed "
                "without merging); merged TensorRT-LLM (residency='raw') does no "
                "all-reduce of the residency"
            )
        warmup = check_sequence(
            "warmup_batch_sizes", warmup_batch_sizes, check_int, low=1, high=1 << 20
        )
        self.plan = plan = plan_residency(  # zero Mamba layers: slots of 0 bytes, none made
            mamba,
            attention,
            quota_bytes,
            max_batch_size,
            pp_size,
            cuda_graph_padding=cuda_graph_padding,
            attention_dp=attention_dp,
        )
        if residency == "raw":  # the merged _build_cache_config, before any allocation
            if not plan.raw_fits:
                raise ValueError(self._quota_error(plan))
            resident = plan.requested
        else:
            if plan.slot_bytes and plan.local_cap < 1:
                raise ValueError(self._quota_error(replace(plan, requested=1, pp_size=1)))
            resident = plan.local_cap
            if comm is not None:  # every rank, Mamba or not, joins the MIN
                resident = check_int("all-reduced residency", comm.all_reduce_min(resident), low=1)
        #: PR #17261's all-reduced cap (None: merged code, or the quota affords every sequence)
        self._resident_sequence_cap = resident if resident < plan.requested else None
        num_slots = (resident + plan.dummies) if plan.slot_bytes else 0
        # Block reuse is not modelled for hybrids: upstream downgrades "all_reusable" to
        # "per_request" with any Mamba layer and matches only up to a block that carries a state
        # snapshot (kv_cache/mamba_cache_manager.py, _block_radix_tree.py ``_prune_match``).
        kwargs.setdefault("enable_block_reuse", False)
        super().__init__(
            attention,
            quota_bytes - num_slots * plan.slot_bytes,
            max_seq_len,
            max_batch_size,
            device=device,
            pp_size=pp_size,
            **kwargs,
        )
        self.mamba = mamba
        self.local_num_mamba_layers = 0 if mamba is None else mamba.num_mamba_layers
        #: the whole quota (``quota_bytes``: what the attention pages got)
        self.hybrid_quota_bytes = quota_bytes
        self.state_slots = StateSlotPool(num_slots, plan.slot_bytes, plan.dummies, self.device)
        self._slot_of: dict[str, int] = {}
        limit = self._resident_sequence_cap
        self.warmup_batch_sizes: tuple[int, ...] = tuple(
            warmup if limit is None else dict.fromkeys(min(b, limit) for b in warmup)
        )

    def _quota_error(self, plan: ResidencyPlan) -> str:
        if self.quota_message == "pr18985":
            return proposed_quota_error(plan)
        return QUOTA_TOO_SMALL.format(got=plan.quota_bytes, need=plan.raw_need_bytes)

    def max_resident_sequences(self) -> int | None:
        """Sequences whose state may be resident at once; None = unbounded (always, in merged
        code); under PR #17261's clamp, the all-reduced cap, on every rank."""
        return self._resident_sequence_cap

    @property
    def resident_sequences(self) -> int:
        """Sequences holding a state slot now (suspended ones included)."""
        return len(self._slot_of)

    def create_cache(self, request_id: str) -> KVCache:
        """A new cache, and a recurrent-state slot for it (on ranks with Mamba layers)."""
        if not self.plan.slot_bytes:
            return super().create_cache(request_id)
        slot = self.state_slots.acquire()
        if slot is None:
            raise StateSlotsExhausted(
                f"no free recurrent-state slot for {request_id!r}: "
                f"the resident sequences ({self.resident_sequences}) hold every slot "
                f"({self.state_slots.num_slots - self.state_slots.num_dummies}) "
                f"(max_resident_sequences={self.max_resident_sequences()})"
            )
        try:
            cache = super().create_cache(request_id)
        except BaseException:
            self.state_slots.release(slot)
            raise
        self._slot_of[request_id] = slot
        return cache

    def state_slot(self, request_id: str) -> int | None:
        return self._slot_of.get(request_id)

    def get_state_indices(self, request_ids: Sequence[str]) -> list[int]:
        """The real ``get_state_indices``: each request's state slot, in order (0s on a rank
        without Mamba layers; KeyError for a request holding none)."""
        if self.local_num_mamba_layers == 0:
            return [0] * len(request_ids)
        return [self._slot_of[request_id] for request_id in request_ids]

    def free(self, request: Request | KVCache | str) -> None:
        """Release the cache (pages, page-index slot) and its recurrent-state slot."""
        cache = request if isinstance(request, KVCache) else self.get_cache(request)
        super().free(cache)
        slot = self._slot_of.pop(cache.request_id, None)
        if slot is not None:
            self.state_slots.release(slot)

    def check_invariants(self) -> None:
        super().check_invariants()
        held = list(self._slot_of.values())
        if self.plan.slot_bytes:
            assert set(self._slot_of) == set(self.caches), "state slots and caches disagree"
        else:
            assert not held, "a state slot on a rank without Mamba layers"
        assert len(held) == len(set(held)), "a state slot is owned twice"
        slots = self.state_slots
        assert len(held) + slots.free_slots + slots.num_dummies == slots.num_slots, (
            "state slots not conserved"
        )

    def __repr__(self) -> str:
        mode = "raw, merged" if self.residency == "raw" else "clamped, proposal PR #17261"
        return (
            f"MambaHybridCacheManager({mode}: {self.state_slots.num_slots:,} state "
            f"slots x {self.plan.slot_bytes:,} B ({self.plan.dummies:,} dummy), "
            f"max_resident_sequences={self.max_resident_sequences()}, "
            f"{self.total_blocks:,} blocks x {self.geometry.bytes_per_block:,} B)"
        )
