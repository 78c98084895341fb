"""Request: one generation request as the scheduler and the manager see it. Field names follow
TensorRT-LLM's LlmRequest where one exists (context_current_position, is_first_context_chunk,
context_chunk_size); its lifecycle, :class:`RequestState`, is set by the scheduler and the
executor loop (``kvlab.run.simulation``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from kvlab.core.arith import div_ceil
from kvlab.core.cause import Reason
from kvlab.core.checks import MAX_COUNT, check_bools, store_param
from kvlab.core.reuse_scope import scoped_hashes

#: Tokens per hash in Mooncake's FAST'25 traces (``hash_ids``: one per 512-token block).
MOONCAKE_TOKENS_PER_HASH = 512


class RequestState(StrEnum):
    """A request's lifecycle. Live: WAITING (no KV cache: not started, or recompute-paused),
    RUNNING (holds a KV cache on the device), SUSPENDED (its pages held until they move to the
    host tier); done: FINISHED, REJECTED (``Request.reason`` says why). A member equals its
    text ("running")."""

    WAITING = "waiting"
    RUNNING = "running"
    SUSPENDED = "suspended"
    FINISHED = "finished"
    REJECTED = "rejected"

    @property
    def status(self) -> RequestState:
        """What a run's result reports: a suspended request is admitted and keeps its KV, so it
        counts as running."""
        return RequestState.RUNNING if self is RequestState.SUSPENDED else self


#: Every state, and the live ones: still the scheduler's.
REQUEST_STATES = tuple(RequestState)
LIVE_STATES = frozenset((RequestState.WAITING, RequestState.RUNNING, RequestState.SUSPENDED))
#: The statuses of a request a run left unfinished (a result's ``status`` values, which also
#: count "lost" and "not routed" in a multi-rank run).
UNFINISHED_STATUSES = (RequestState.WAITING, RequestState.RUNNING)


@dataclass(slots=True)
class Request:
    """A request of ``prompt_len`` context tokens that generates up to ``max_new_tokens``;
    ``context_current_position`` (context computed) and ``num_generated`` advance as it runs.

    ``disagg_generation_init``: it arrives on a disaggregated generation server, its context KV
    computed elsewhere; the scheduler only allocates the cache (``prepare_disagg_gen_init``).
    ``num_draft_tokens``: draft tokens each generation step reserves beyond its one new token
    (all rejected in simulation). ``beam_width``: a generation step takes that many tokens of
    the budget (kvlab keeps one set of pages per sequence). ``prefix_hashes``: the prompt's
    chained block hashes, one per ``tokens_per_hash`` tokens (vLLM's ``Request.block_hashes``;
    ``prefix_cache.chain_hashes`` makes them): what block reuse matches; empty shares nothing.
    ``cache_salt``: the reuse scope (the LLM API's ``cache_salt``): prompts share pages only
    with prompts of the same salt (None, the default, is a scope of its own).
    The fields after these are runtime bookkeeping, not constructor arguments.
    """

    request_id: str
    prompt_len: int
    max_new_tokens: int
    arrival_step: int = 0
    context_current_position: int = 0
    num_generated: int = 0
    disagg_generation_init: bool = False
    num_draft_tokens: int = 0
    beam_width: int = 1
    prefix_hashes: tuple[int, ...] = ()
    tokens_per_hash: int = MOONCAKE_TOKENS_PER_HASH
    cache_salt: str | None = None

    #: ``prefix_hashes`` under the ``cache_salt`` scope: the keys block reuse stores pages by
    scoped_hashes: tuple[int, ...] = field(default=(), init=False)
    state: RequestState = field(default=RequestState.WAITING, init=False)
    #: why it ended as it did (or where it was when the run ended); None while it is live
    reason: Reason | None = field(default=None, init=False)
    #: Generated tokens folded back into the context by a recompute pause (the real
    #: ``reset_for_recompute`` rewrites the prompt as prompt + generated tokens).
    recomputed_tokens: int = field(default=0, init=False)
    #: Leading context tokens a reused prefix provided, not computed (LlmRequest's
    #: ``prepopulated_prompt_len``); the context starts there.
    prepopulated_prompt_len: int = field(default=0, init=False)
    #: Tokens of the context chunk scheduled this iteration (LlmRequest.context_chunk_size).
    context_chunk_size: int = field(default=0, init=False)
    num_suspensions: int = field(default=0, init=False)
    num_recomputes: int = field(default=0, init=False)
    #: Scheduling passes in which this request was tried and refused (no pages, no slot).
    num_refusals: int = field(default=0, init=False)
    #: the step the executor handed it to the scheduler (it left the executor's queue)
    activated_step: int | None = field(default=None, init=False)
    first_scheduled_step: int | None = field(default=None, init=False)
    first_token_step: int | None = field(default=None, init=False)
    end_step: int | None = field(default=None, init=False)
    #: The most tokens it generates: max_new_tokens, unless the scheduler stops it sooner when it
    #: arrives (vLLM stops a sequence at max_model_len, finish reason "length").
    output_limit: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or not self.request_id:
            raise ValueError(f"request_id must be a non-empty str, got {self.request_id!r}")
        for name in ("prompt_len", "max_new_tokens", "arrival_step", "context_current_position"):
            store_param(self, name)
        store_param(self, "num_generated")
        check_bools(disagg_generation_init=self.disagg_generation_init)
        if self.disagg_generation_init and self.max_new_tokens < 1:
            raise ValueError(
                f"max_new_tokens must be in [1, {MAX_COUNT}] for a disagg_generation_init "
                "request (its context server produced the first token), "
                f"got {self.max_new_tokens}"
            )
        if self.context_current_position > self.prompt_len:
            raise ValueError(
                f"context_current_position must be in [0, prompt_len={self.prompt_len}], "
                f"got {self.context_current_position}"
            )
        if self.num_generated > self.max_new_tokens:
            raise ValueError(
                f"num_generated must be in [0, max_new_tokens={self.max_new_tokens}], "
                f"got {self.num_generated}"
            )
        self.output_limit = self.max_new_tokens
        for name in ("num_draft_tokens", "beam_width", "tokens_per_hash"):
            store_param(self, name)
        if not isinstance(self.prefix_hashes, tuple) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in self.prefix_hashes
        ):
            raise TypeError(
                f"prefix_hashes must be a tuple of ints, got {self.prefix_hashes!r:.80}"
            )
        blocks = div_ceil(self.prompt_len, self.tokens_per_hash)
        if len(self.prefix_hashes) > blocks:
            raise ValueError(
                f"prefix_hashes must hold at most {blocks} hashes, one per {self.tokens_per_hash}-"
                f"token block of the {self.prompt_len}-token prompt, got {len(self.prefix_hashes)}"
            )
        if self.cache_salt is not None and not isinstance(self.cache_salt, str):
            raise TypeError(
                f"cache_salt must be a str or None, got {self.cache_salt!r:.60} "
                f"({type(self.cache_salt).__name__})"
            )
        self.scoped_hashes = scoped_hashes(self.prefix_hashes, self.cache_salt)

    @property
    def is_first_context_chunk(self) -> bool:
        """At the start of its context: nothing computed past the reused prefix (the real
        ``isFirstContextChunk``, cpp/include/tensorrt_llm/batch_manager/llmRequest.h)."""
        return self.context_current_position == self.prepopulated_prompt_len

    @property
    def context_len(self) -> int:
        """Tokens the context phase computes: the prompt, plus generated tokens after a
        recompute pause."""
        return self.prompt_len + self.recomputed_tokens

    @property
    def context_remaining_length(self) -> int:
        return self.context_len - self.context_current_position

    @property
    def is_last_context_chunk(self) -> bool:
        """The chunk scheduled this iteration (``context_chunk_size``) ends the context."""
        return self.context_current_position + self.context_chunk_size >= self.context_len

    @property
    def is_context_finished(self) -> bool:  # context_len spelled out: asked very often
        return self.context_current_position >= self.prompt_len + self.recomputed_tokens

    @property
    def is_disagg_generation_init(self) -> bool:
        """In state DISAGG_GENERATION_INIT: waiting for its cache before the KV transfer."""
        return self.disagg_generation_init and self.num_generated == 0

    @property
    def is_finished_generating(self) -> bool:
        return self.is_context_finished and self.num_generated >= self.output_limit

    @property
    def is_started(self) -> bool:
        """Started, hence evictable (the real ``_is_started_request``): a context past its
        first chunk, or a generation request."""
        return self.context_current_position > self.prepopulated_prompt_len

    @property
    def num_tokens(self) -> int:
        """Tokens whose KV the sequence holds now (context computed plus generated)."""
        return self.context_current_position + self.num_generated - self.recomputed_tokens

    @property
    def max_total_tokens(self) -> int:
        """Tokens the sequence holds when it completes: prompt plus every new token."""
        return self.prompt_len + self.max_new_tokens
