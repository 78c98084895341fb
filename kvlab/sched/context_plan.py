"""How much of a context one TensorRT-LLM scheduling pass schedules: the pass's token and
request budget (the real BudgetTracker) and the plan of a context's next chunk against it, as
``_try_schedule_context_full`` / ``_chunked`` size it
(tensorrt_llm/_torch/pyexecutor/scheduler/scheduler_v2.py), docs/REFERENCE.md §4."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kvlab.core.request import Request


class ScheduleAction(enum.Enum):
    """Result of one scheduling attempt (the real ScheduleAction)."""

    SCHEDULED = "scheduled"
    SKIP = "skip"
    STOP = "stop"


@dataclass(slots=True)
class PassBudget:
    """Token and request budgets of one pass (the real BudgetTracker, without PEFT);
    ``max_num_tokens=None`` is no token limit."""

    max_num_tokens: int | None
    max_num_requests: int
    num_tokens: int = 0
    num_requests: int = 0

    @property
    def requests_full(self) -> bool:
        return self.num_requests >= self.max_num_requests

    @property
    def remaining_tokens(self) -> int | None:
        return None if self.max_num_tokens is None else self.max_num_tokens - self.num_tokens

    def commit(self, num_tokens: int) -> None:
        self.num_tokens += num_tokens
        self.num_requests += 1


#: A context's next chunk: (chunk, budget tokens, resize tokens): the chunk's context tokens
#: (the request's ``context_chunk_size``), the tokens charged to the budget and those the cache
#: grows by (the last chunk adds the draft tokens to both).
ContextPlan = tuple[int, int, int]


def plan_context(
    request: Request,
    budget_left: int | None,
    chunked: bool,
    max_context_length: int | None,
    chunk_unit: int,
    sized_from: int | None = None,
) -> ContextPlan | None:
    """The plan of ``request``'s next context chunk against ``budget_left`` tokens (None: no
    limit), changing nothing; None when the budget cannot hold it (phase 2 STOPs). Non-chunked:
    the whole rest plus the draft tokens is one unit. Chunked: min(budget left, context left,
    ``max_context_length``), rounded down to ``chunk_unit`` unless it is the last, which carries
    the drafts past the budget check as the real code does. ``sized_from``: the context the
    budget sizes when not what remains (prefix-aware scheduling off: before a reused prefix)."""
    remaining = request.context_remaining_length
    drafts = request.num_draft_tokens
    sized = remaining if sized_from is None else sized_from
    if not chunked:
        if budget_left is not None and sized + drafts > budget_left:
            return None
        return remaining, sized + drafts, remaining + drafts
    chunk = sized
    if budget_left is not None and budget_left < chunk:
        chunk = budget_left
    if max_context_length is not None and max_context_length < chunk:
        chunk = max_context_length
    if chunk < sized:
        chunk -= chunk % chunk_unit
    if chunk < remaining:
        return chunk, chunk, chunk
    return remaining, chunk + drafts, remaining + drafts  # the last chunk


def check_chunk_budget(
    chunk_unit_size: int, max_num_tokens: int | None, max_context_length: int | None = None
) -> None:
    """With chunked prefill, raise ValueError when no chunk of ``chunk_unit_size`` tokens ever
    fits both limits (kvlab's check: the real scheduler would never schedule a context chunk)."""
    if max_num_tokens is not None and chunk_unit_size > max_num_tokens:
        raise ValueError(
            f"max_num_tokens must be at least chunk_unit_size={chunk_unit_size} (the "
            f"tokens per block) with chunked_prefill, or no context chunk is ever "
            f"scheduled; got {max_num_tokens}"
        )
    if max_context_length is not None and chunk_unit_size > max_context_length:
        raise ValueError(
            f"chunk_unit_size must be in [1, max_context_length={max_context_length}] "
            f"with chunked_prefill, got {chunk_unit_size}"
        )
