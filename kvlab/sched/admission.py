"""Admission policies: what an engine checks before, and does while, a request runs.

The Scheduler runs one loop (TensorRT-LLM's KVCacheV2Scheduler) for every policy; a policy
plugs into it through three hooks, so styles differ only where the real engines differ:

- ``admit(request, manager) -> Verdict``: when the request arrives; a rejection is for that
  request alone and its reason states the numbers.
- ``may_start(request, manager, active) -> bool``: before a request's first context chunk
  (``active``: the requests in the engine, in arrival order).
  False keeps it waiting and ends this pass's context admission (first come, first served, as
  SGLang admits). "none" and "capacity" always say True: TensorRT-LLM tries and sees.
- ``preemption``: how a generation step that cannot grow makes room: "suspend" (TensorRT-LLM
  V2: suspend victims from the tail, then recompute-pause, then suspend itself), "recompute"
  (recompute-preempt from the tail, itself last) or "retract" (SGLang: retract decodes, abort
  the last one).

vLLM's style is not a policy of this loop: vLLM's own loop is :mod:`kvlab.sched.vllm`.
Reasons quote the real messages (docs/REFERENCE.md §4, §6) where the real engine has one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Sequence, Type, Union

from kvlab.core.checks import check_choice, check_float
from kvlab.core.manager import KVCacheManager
from kvlab.core.request import Request

#: Feasibility classes of the capacity policy (PR #21720).
FITS_NOW = "fits now"
TEMPORARILY_BLOCKED = "temporarily blocked"
NEVER_FITS = "never fits"

PREEMPTION_MODES = ("suspend", "recompute", "retract")
#: Request states whose request holds a KV cache (on the device or in the host tier).
HOLDS_CACHE = ("running", "suspended")


@dataclass(frozen=True)
class Verdict:
    """The answer of ``admit``: admitted, or rejected with a reason."""

    admitted: bool
    reason: str = ""


ADMIT = Verdict(True)


def demand_blocks(request: Request, manager: KVCacheManager) -> int:
    """Pages the request holds when it completes: prompt + every new token (+ the manager's
    extra KV tokens and the request's draft tokens)."""
    tokens = (request.prompt_len + request.max_new_tokens + manager.num_extra_kv_tokens
              + request.num_draft_tokens)
    return manager.geometry.blocks_for_tokens(tokens)


class AdmissionPolicy:
    """Base policy: admits everything, never holds a context back, preempts by suspension."""

    name = "base"
    preemption = "suspend"
    #: The scheduler also rejects, at arrival, a request whose step its token budget can never
    #: hold (``Scheduler._token_budget_verdict``).
    rejects_never_schedulable = False

    def admit(self, request: Request, manager: KVCacheManager) -> Verdict:
        return ADMIT

    def may_start(self, request: Request, manager: KVCacheManager,
                  active: Sequence[Request]) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class NoAdmission(AdmissionPolicy):
    """"none": the historical TensorRT-LLM V2 path: no admission check at all. A request that
    can never fit reaches ``resize_context`` and crashes the engine (clamped page-index width)
    or is refused every pass (configured width): alone it ends in the stall detector's
    deadlock, beside others it starves."""

    name = "none"


class CapacityAdmission(AdmissionPolicy):
    """"capacity": per-request feasibility at arrival, the direction of PR #21720 (a proposal,
    not merged: the Scheduler's default is "none", what the merged code does).

    Each request is classified as fits now / temporarily blocked / never fits. Demand (pages
    for prompt + max_new_tokens + extra tokens) beyond the pool's total physical capacity, or
    beyond the page-index span (the fixed row width), is rejected for that request alone;
    temporary pressure is left to the scheduler, which retries. Simplified: the PR's supported
    configurations are dense attention; kvlab has only those.
    """

    name = "capacity"
    rejects_never_schedulable = True

    def classify(self, request: Request, manager: KVCacheManager) -> tuple:
        """(class, reason): one of FITS_NOW, TEMPORARILY_BLOCKED, NEVER_FITS. Only NEVER_FITS
        depends on fixed capacity; the other two read the free pages of this moment and are
        reported, never acted on."""
        demand = demand_blocks(request, manager)
        detail = (f" ({request.prompt_len:,} prompt + {request.max_new_tokens:,} new tokens at "
                  f"{manager.tokens_per_block} tokens per block)")
        if demand > manager.total_blocks:
            return NEVER_FITS, (f"Request requires {demand} KV cache blocks to complete, which "
                                f"exceeds the total capacity of {manager.total_blocks} blocks"
                                + detail)
        if demand > manager.max_blocks_per_seq:
            return NEVER_FITS, (f"Request requires {demand} KV cache blocks to complete, which "
                                f"exceeds the page-index span of {manager.max_blocks_per_seq} "
                                "entries" + detail)
        first = manager.geometry.blocks_for_tokens(request.prompt_len + manager.num_extra_kv_tokens)
        if first <= manager.free_blocks and manager.free_slots > 0:
            return FITS_NOW, ""
        return TEMPORARILY_BLOCKED, (f"its context needs {first} blocks, {manager.free_blocks} "
                                     f"are free and {manager.free_slots} page-index "
                                     "slots; retried as pages come back")

    def admit(self, request: Request, manager: KVCacheManager) -> Verdict:
        feasibility, reason = self.classify(request, manager)
        return Verdict(False, reason) if feasibility == NEVER_FITS else ADMIT


#: SGLang's margin below the request length limit (``max_req_input_len = max_req_len - 5``).
SGLANG_INPUT_MARGIN = 5


class SglangStyle(AdmissionPolicy):
    """"sglang": SGLang's style (docs/REFERENCE.md §6), run inside kvlab's V2 loop.

    - Front door: ``max_req_input_len = min(context_len - 1, pool tokens - 1) - 5`` (context_len
      is the configured max_seq_len); a prompt at or over it is rejected with SGLang's message.
    - Before the first chunk: the prompt plus ``new_token_ratio`` of its output must fit the
      free tokens left after reserving the same ratio of every running request's remaining
      output (SGLang's PrefillAdder); else the queue waits.
    - Preemption by retraction: decodes with the fewest output tokens (then the longest
      prompts) go back to the queue first; a request with nothing left to retract is aborted.

    Simplified: SGLang decays new_token_ratio every step and raises it after a retraction;
    kvlab keeps it constant. SGLang checks the memory of the whole decode batch at once; kvlab
    handles each request as it fails to grow.
    """

    name = "sglang"
    preemption = "retract"

    def __init__(self, new_token_ratio: float = 0.7):
        self.new_token_ratio = check_float("new_token_ratio", new_token_ratio, low=0.0, high=1.0)

    @staticmethod
    def max_input_len(manager: KVCacheManager) -> int:
        pool_tokens = manager.total_blocks * manager.tokens_per_block
        return min(manager.configured_max_seq_len - 1, pool_tokens - 1) - SGLANG_INPUT_MARGIN

    def admit(self, request: Request, manager: KVCacheManager) -> Verdict:
        limit = self.max_input_len(manager)
        if request.prompt_len >= limit:
            return Verdict(False, f"Input length ({request.prompt_len} tokens) exceeds the maximum "
                                  f"allowed length ({limit} tokens). Use a shorter input or enable "
                                  "--allow-auto-truncate.")
        return ADMIT

    def reserved_tokens(self, request: Request) -> int:
        """Tokens held back for the request's predicted remaining output."""
        return math.ceil((request.max_new_tokens - request.num_generated) * self.new_token_ratio)

    def may_start(self, request: Request, manager: KVCacheManager,
                  active: Sequence[Request]) -> bool:
        reserved = sum(self.reserved_tokens(other) for other in active
                       if other.state in HOLDS_CACHE)
        free_tokens = manager.free_blocks * manager.tokens_per_block
        need = request.context_len + manager.num_extra_kv_tokens + self.reserved_tokens(request)
        return need <= free_tokens - reserved

    def __repr__(self) -> str:
        return f"SglangStyle(new_token_ratio={self.new_token_ratio})"


ADMISSION_POLICIES: Dict[str, Type[AdmissionPolicy]] = {
    policy.name: policy for policy in (NoAdmission, CapacityAdmission, SglangStyle)
}


def make_admission(admission: Union[str, AdmissionPolicy]) -> AdmissionPolicy:
    """A policy from its registry name ("none", "capacity", "sglang") or an instance."""
    if isinstance(admission, AdmissionPolicy):
        if admission.preemption not in PREEMPTION_MODES:
            raise ValueError(f"{admission!r}.preemption must be one of {list(PREEMPTION_MODES)}, "
                             f"got {admission.preemption!r}")
        return admission
    if admission == "vllm":
        raise ValueError(f"admission must be one of {sorted(ADMISSION_POLICIES)}, got 'vllm': vLLM's "
                         "scheduler is a loop of its own, kvlab.sched.vllm.VllmScheduler")
    check_choice("admission", admission, ADMISSION_POLICIES)
    return ADMISSION_POLICIES[admission]()
