"""Request: one generation request as the scheduler and the manager see it.

Field names follow TensorRT-LLM's LlmRequest where one exists (context_current_position,
is_first_context_chunk) so the real code can be read next to kvlab's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._validate import MAX_COUNT, check_int


@dataclass
class Request:
    """A request of ``prompt_len`` context tokens that generates up to ``max_new_tokens``.

    ``context_current_position`` counts context tokens already computed; ``num_generated``
    counts generated tokens. Both are advanced by the scheduler.
    """

    request_id: str
    prompt_len: int
    max_new_tokens: int
    arrival_step: int = 0
    context_current_position: int = 0
    num_generated: int = 0

    def __post_init__(self):
        if not isinstance(self.request_id, str) or not self.request_id:
            raise ValueError(f"request_id must be a non-empty str, got {self.request_id!r}")
        check_int("prompt_len", self.prompt_len, low=1, high=MAX_COUNT)
        check_int("max_new_tokens", self.max_new_tokens, low=0, high=MAX_COUNT)
        check_int("arrival_step", self.arrival_step, low=0, high=MAX_COUNT)

    @property
    def is_first_context_chunk(self) -> bool:
        return self.context_current_position == 0

    @property
    def context_remaining_length(self) -> int:
        return self.prompt_len - self.context_current_position

    @property
    def is_context_finished(self) -> bool:
        return self.context_current_position >= self.prompt_len

    @property
    def num_tokens(self) -> int:
        """Tokens whose KV the sequence holds now (context computed plus generated)."""
        return self.context_current_position + self.num_generated

    @property
    def max_total_tokens(self) -> int:
        """Tokens the sequence holds when it completes: prompt plus every new token."""
        return self.prompt_len + self.max_new_tokens
