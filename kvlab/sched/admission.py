"""Admission policies of TensorRT-LLM's loop: what the Scheduler checks when a request arrives,
through one hook, ``admit(request, manager) -> Verdict``; a rejection is for that request alone
and its reason records the cause and its numbers (the real message, docs/REFERENCE.md §4, where
there is one).
"none" admits everything (the merged code: try and see); "capacity" is PR #21720's proposal.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.core.cause import Cause, Reason
from kvlab.core.checks import check_choice, check_instance
from kvlab.core.manager import KVCacheManager
from kvlab.core.request import Request

#: Feasibility classes of the capacity policy (PR #21720).
FITS_NOW = "fits now"
TEMPORARILY_BLOCKED = "temporarily blocked"
NEVER_FITS = "never fits"


@dataclass(frozen=True)
class Verdict:
    """The answer of ``admit``: admitted, or rejected with a reason (a policy of one's own may
    give its reason in words: the scheduler keeps them as a REJECTED_BY_POLICY message)."""

    admitted: bool
    reason: Reason | str | None = None


ADMIT = Verdict(True)


def demand_blocks(request: Request, manager: KVCacheManager) -> int:
    """Pages the request holds when it completes: prompt + every new token (+ the manager's
    extra KV tokens and the request's draft tokens)."""
    check_instance("request", request, Request)
    check_instance("manager", manager, KVCacheManager)
    tokens = request.prompt_len + request.max_new_tokens + request.num_draft_tokens
    return manager.geometry.blocks_for_tokens(tokens + manager.num_extra_kv_tokens)


def front_door_verdict(
    request: Request, max_num_tokens: int | None, chunked_prefill: bool
) -> Verdict:
    """The LLM API's check (tensorrt_llm/llmapi/llm.py ``_check_arguments``), before any policy:
    without chunked prefill a prompt must fit max_num_tokens. Generation-only requests skip it."""
    if (
        not chunked_prefill
        and not request.disagg_generation_init
        and max_num_tokens is not None
        and request.prompt_len > max_num_tokens
    ):
        message = (
            f"The sum of prompt length ({float(request.prompt_len)}), query "
            f"length (0) should not exceed max_num_tokens ({max_num_tokens})"
        )
        return Verdict(False, Reason(Cause.FRONT_DOOR, message=message))
    return ADMIT


def token_budget_verdict(
    request: Request, max_num_tokens: int | None, chunked_prefill: bool
) -> Verdict:
    """A step the token budget can never hold (kvlab's: the real scheduler waits forever)."""
    if max_num_tokens is None:
        return ADMIT
    step = 1 + request.num_draft_tokens
    if step > max_num_tokens:
        numbers = dict(
            step_tokens=step,
            num_draft_tokens=request.num_draft_tokens,
            max_num_tokens=max_num_tokens,
        )
        return Verdict(False, Reason(Cause.STEP_OVER_TOKEN_BUDGET, numbers))
    last = request.prompt_len + request.num_draft_tokens
    if not chunked_prefill and not request.disagg_generation_init and last > max_num_tokens:
        numbers = dict(
            context_tokens=last,
            prompt_len=request.prompt_len,
            num_draft_tokens=request.num_draft_tokens,
            max_num_tokens=max_num_tokens,
        )
        return Verdict(False, Reason(Cause.CONTEXT_OVER_TOKEN_BUDGET, numbers))
    return ADMIT


class AdmissionPolicy:
    """Base policy: admits everything."""

    name = "base"
    #: also reject what the token budget can never hold (:func:`token_budget_verdict`)
    rejects_never_schedulable = False

    def admit(self, request: Request, manager: KVCacheManager) -> Verdict:
        return ADMIT

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class NoAdmission(AdmissionPolicy):
    """ "none": the merged TensorRT-LLM V2 path, no admission check: a request that can never
    fit crashes the engine (clamped page-index width) or is refused every pass (configured)."""

    name = "none"


class CapacityAdmission(AdmissionPolicy):
    """ "capacity": per-request feasibility at arrival, PR #21720's proposal (not merged).
    Demand (:func:`demand_blocks`) beyond the pool's total capacity or the page-index span
    is rejected for that request alone; temporary pressure is left to the scheduler's retries."""

    name = "capacity"
    rejects_never_schedulable = True

    def classify(self, request: Request, manager: KVCacheManager) -> tuple[str, Reason | None]:
        """(class, reason): FITS_NOW (no reason), TEMPORARILY_BLOCKED (both read this moment's
        free pages, reported, never acted on) or NEVER_FITS (fixed capacity)."""
        demand = demand_blocks(request, manager)
        numbers = dict(
            demand=demand,
            prompt_len=request.prompt_len,
            max_new_tokens=request.max_new_tokens,
            tokens_per_block=manager.tokens_per_block,
        )
        if demand > manager.total_blocks:
            numbers["total_blocks"] = manager.total_blocks
            return NEVER_FITS, Reason(Cause.DEMAND_OVER_POOL, numbers)
        if demand > manager.max_blocks_per_seq:
            numbers["max_blocks_per_seq"] = manager.max_blocks_per_seq
            return NEVER_FITS, Reason(Cause.DEMAND_OVER_PAGE_INDEX, numbers)
        first = manager.geometry.blocks_for_tokens(request.prompt_len + manager.num_extra_kv_tokens)
        if first <= manager.free_blocks and manager.free_slots > 0:
            return FITS_NOW, None
        blocked = dict(
            first_blocks=first, free_blocks=manager.free_blocks, free_slots=manager.free_slots
        )
        return TEMPORARILY_BLOCKED, Reason(Cause.TEMPORARILY_BLOCKED, blocked)

    def admit(self, request: Request, manager: KVCacheManager) -> Verdict:
        feasibility, reason = self.classify(request, manager)
        return Verdict(False, reason) if feasibility == NEVER_FITS else ADMIT


ADMISSION_POLICIES: dict[str, type[AdmissionPolicy]] = {
    policy.name: policy for policy in (NoAdmission, CapacityAdmission)
}


def make_admission(admission: str | AdmissionPolicy) -> AdmissionPolicy:
    """A policy from its registry name ("none", "capacity") or an instance."""
    if isinstance(admission, AdmissionPolicy):
        return admission
    check_instance("admission", admission, (str, AdmissionPolicy))
    if admission in ("vllm", "sglang"):
        raise ValueError(
            f"admission must be one of {sorted(ADMISSION_POLICIES)}, got {admission!r}: "
            f"{'vLLM' if admission == 'vllm' else 'SGLang'}'s scheduler is a loop of "
            f"its own, kvlab.sched.{admission}"
        )
    check_choice("admission", admission, ADMISSION_POLICIES)
    return ADMISSION_POLICIES[admission]()
