"""SGLang's prefill admission (part of the SGLang peer, kvlab.sched.sglang): what one prefill
batch admits, ``PrefillAdder`` (sglang/srt/managers/schedule_policy.py:607) with its
``PrefillBudget`` (mem_cache/prefill_budget.py:62), and the new-token ratio by which it reserves
the running requests' output, ``NewTokenRatioTracker``
(managers/scheduler_components/new_token_ratio_tracker.py). SGLang 0.5.23, page_size 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kvlab.core.request import Request

# SGLang's environment defaults (sglang/srt/environ.py:646-651) and constants.
INIT_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
#: ``CLIP_MAX_NEW_TOKENS`` (managers/schedule_policy.py:89): the most output tokens the
#: admission reserves for one request, whatever its max_new_tokens.
CLIP_MAX_NEW_TOKENS = 4096
#: ``IGNORE_EOS_RESERVE_TOKENS`` (managers/schedule_policy.py:122).
IGNORE_EOS_RESERVE_TOKENS = 1


class NewTokenRatio:
    """SGLang's ``NewTokenRatioTracker``: the share of their remaining output the admission
    reserves for the running requests."""

    __slots__ = ("init", "min", "decay", "current")

    def __init__(self, schedule_conservativeness: float):
        self.init = min(INIT_NEW_TOKEN_RATIO * schedule_conservativeness, 1.0)
        self.min = min(self.init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.decay = (self.init - self.min) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.current = self.init

    def decay_step(self) -> None:
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        self.current = self.init

    @staticmethod
    def after_retract(outputs: list[int], max_new_tokens: list[int]) -> float:
        """``estimate_new_token_ratio_after_retract`` over the requests left."""
        ratio = (sum(outputs) + RETRACT_DECODE_STEPS * len(outputs)) / (sum(max_new_tokens) + 1)
        return min(1.0, ratio)


@dataclass
class PrefillAdder:
    """One pass of SGLang's ``PrefillAdder`` with its ``PrefillBudget``: ``per_req_token_overhead``
    is one token. ``available``: the pool's free tokens plus the radix cache's evictable ones,
    read anew at every check (``_available_and_evictable``, mem_cache/prefill_budget.py:91-105);
    ``origin_len``: a request's ``len(origin_input_ids)``; ``output_len`` its ``len(output_ids)``
    (under the overlap loop, without a token not yet processed); ``radix_cache``: the cache is
    on."""

    NO_TOKEN, OTHER, CONTINUE = "no_token", "other", "continue"

    running: list[Request]
    ratio: float
    available: Callable[[], int]
    rem_input_tokens: int
    rem_chunk_tokens: int | None
    ignore_eos: bool
    origin_len: Callable[[Request], int]
    output_len: Callable[[Request], int]
    radix_cache: bool = False
    can_run_list: list[Request] = field(default_factory=list)
    extend_lens: list[int] = field(default_factory=list)
    new_chunked_req: Request | None = None
    req_states: list[tuple[float, int]] | None = None
    current_offset: int = 0
    total_offset: float = field(init=False)

    def __post_init__(self) -> None:
        ratio = 1.0 if self.ignore_eos else self.ratio  # the running requests' remaining output
        self.total_offset = sum(
            min(r.output_limit - self.output_len(r), CLIP_MAX_NEW_TOKENS) * ratio
            for r in self.running
        )

    @property
    def rem_total_tokens(self) -> float:
        return self.available() - self.total_offset

    @property
    def cur_rem_tokens(self) -> int:
        return self.available() - self.current_offset

    def fill_len(self, request: Request) -> int:
        """``len(full_untruncated_fill_ids)``: prompt + output tokens."""
        return self.origin_len(request) + self.output_len(request)

    def _req_state(self, request: Request) -> tuple[float, int] | None:
        """(tokens left to generate, tokens held) of a request that still generates."""
        tokens_left = request.output_limit * 1.0 - self.output_len(request)
        if tokens_left <= 0:
            return None
        return tokens_left, self.fill_len(request)

    def budget_state(self) -> str:
        if not (self.rem_total_tokens > 0 and self.cur_rem_tokens > 0):
            return self.NO_TOKEN
        if self.rem_input_tokens <= 0:
            return self.OTHER
        if self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0:
            return self.OTHER
        return self.CONTINUE

    def _commit(self, request: Request, extend_len: int, max_new_tokens: int) -> None:
        """Add the request; ``_update_prefill_budget`` and ``PrefillBudget.reserve``: the extend
        plus one page now, the output later."""
        self.can_run_list.append(request)
        self.extend_lens.append(extend_len)
        immediate = extend_len + 1
        self.total_offset += immediate + max_new_tokens
        self.current_offset += immediate
        self.rem_input_tokens -= extend_len
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= extend_len

    def _add(self, request: Request, extend_len: int) -> str:
        """The request whole, or its first chunk (it becomes the chunked request)."""
        chunk = self.rem_chunk_tokens
        if chunk is None or extend_len <= chunk:
            self._commit(request, extend_len, min(request.output_limit, CLIP_MAX_NEW_TOKENS))
        elif chunk <= 0:
            return self.OTHER
        else:
            self._commit(request, chunk, 0)
            self.new_chunked_req = request
        return self.budget_state()

    def add_chunked_req(self, request: Request) -> Request | None:
        """``add_chunked_req`` (schedule_policy.py:1140): the next chunk of the request being
        chunked; returns it while chunks remain, else None."""
        assert self.rem_chunk_tokens is not None  # only a chunked prefill leaves one
        rem_tokens = min(self.rem_chunk_tokens, int(self.rem_total_tokens))
        if rem_tokens <= 0:  # ``available_chunk_tokens``: a continuation must make progress
            rem_tokens = self.rem_chunk_tokens
        cand = self.fill_len(request) - request.context_current_position
        truncated = cand > rem_tokens
        max_new = 0 if truncated else min(request.output_limit, CLIP_MAX_NEW_TOKENS)
        self._commit(request, min(cand, rem_tokens), max_new)
        return request if truncated else None

    def add_one_req(self, request: Request, prefix_len: int = 0) -> str:
        """``add_one_req`` (schedule_policy.py:1395) with ``_select_prefill_admission`` (:1592)
        for a request from the waiting queue whose first ``prefix_len`` tokens the radix cache
        holds: only the rest is charged. With the cache on, ignore_eos takes this path too
        (:1401-1402)."""
        if self.ignore_eos and not self.radix_cache:
            return self.add_one_req_ignore_eos(request)
        max_new = min(max(request.output_limit - self.output_len(request), 0), CLIP_MAX_NEW_TOKENS)
        extend_len = self.fill_len(request) - prefix_len
        if not extend_len + max_new + 1 < self.rem_total_tokens:  # PrefillBudget.check_prefill
            return self.NO_TOKEN
        # without chunking, the first request may overrun the input budget, the others not
        if (
            self.rem_chunk_tokens is None
            and self.can_run_list
            and extend_len >= self.rem_input_tokens
        ):
            return self.OTHER
        return self._add(request, extend_len)

    def add_one_req_ignore_eos(self, request: Request) -> str:
        """``add_one_req_ignore_eos`` (schedule_policy.py:1241): the whole prompt must fit now,
        and every request's whole remaining output must fit as the requests finish, shortest
        remaining output first."""
        cand = self.fill_len(request)
        paged_input = cand + 1
        if not paged_input <= min(self.cur_rem_tokens, self.rem_total_tokens):
            return self.NO_TOKEN
        state = self._req_state(request)
        if self.req_states is None:
            states = (self._req_state(r) for r in (request, *self.running, *self.can_run_list))
            self.req_states = sorted((s for s in states if s is not None), key=lambda s: s[0])
        elif state is not None:  # before the first with as many left, else (SGLang's loop) the last
            last = max(len(self.req_states) - 1, 0)
            at = next((i for i, s in enumerate(self.req_states) if state[0] <= s[0]), last)
            self.req_states.insert(at, state)
        cur_rem_tokens = self.cur_rem_tokens - paged_input
        tokens_freed = 0
        for i, (tokens_left, tokens_occupied) in enumerate(self.req_states):
            bs = len(self.req_states) - i
            min_free_tokens = cur_rem_tokens + tokens_freed - tokens_left * bs
            if min_free_tokens <= IGNORE_EOS_RESERVE_TOKENS * bs:
                return self.NO_TOKEN
            tokens_freed += tokens_occupied
        return self._add(request, cand)
