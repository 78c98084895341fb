"""SGLang's prefill admission, a part of the SGLang peer (kvlab.sched.sglang, whose docstring
walks the loop): what one prefill batch admits and the new-token ratio by which it reserves the
running requests' output. SGLang 0.5.23 (paths under ``sglang/srt/``), the radix cache off,
page_size 1: ``PrefillAdder`` (managers/schedule_policy.py:607) with its ``PrefillBudget``
(mem_cache/prefill_budget.py:62), and ``NewTokenRatioTracker``
(managers/scheduler_components/new_token_ratio_tracker.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvlab.core.request import Request

if TYPE_CHECKING:
    from kvlab.sched.sglang import SglangScheduler

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
    """SGLang's ``NewTokenRatioTracker`` (managers/scheduler_components/new_token_ratio_tracker.py):
    the share of their remaining output the admission reserves for the running requests."""

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

    def __repr__(self) -> str:
        return f"NewTokenRatio(current={self.current!r}, init={self.init!r}, min={self.min!r})"


class PrefillAdder:
    """One pass of SGLang's ``PrefillAdder`` (managers/schedule_policy.py:607) with its
    ``PrefillBudget`` (mem_cache/prefill_budget.py:62), page_size 1, the radix cache off:
    nothing is evictable, ``per_req_token_overhead`` is one token."""

    NO_TOKEN, OTHER, CONTINUE = "no_token", "other", "continue"

    def __init__(self, scheduler: SglangScheduler, running: list[Request]):
        self.scheduler = scheduler
        self.ratio = scheduler.new_token_ratio.current
        self.rem_input_tokens = scheduler.args.max_prefill_tokens
        self.rem_chunk_tokens = scheduler.args.chunk_size
        self.total_offset = 0
        self.current_offset = 0
        self.can_run_list: list[Request] = []
        self.extend_lens: list[int] = []
        self.new_chunked_req: Request | None = None
        self.req_states: list[tuple[float, int]] | None = None
        self.running = running
        # the running requests' remaining output, by the ratio
        self.total_offset += sum(self._running_offset(r) for r in running)

    def _running_offset(self, request: Request):
        ratio = 1.0 if self.scheduler.args.ignore_eos else self.ratio
        return min(request.output_limit - request.num_generated, CLIP_MAX_NEW_TOKENS) * ratio

    def _available(self) -> int:
        return self.scheduler.manager.free_blocks  # no evictable tokens: the radix cache is off

    @property
    def rem_total_tokens(self):
        return self._available() - self.total_offset

    @property
    def cur_rem_tokens(self):
        return self._available() - self.current_offset

    def budget_state(self) -> str:
        if not (self.rem_total_tokens > 0 and self.cur_rem_tokens > 0):
            return self.NO_TOKEN
        if self.rem_input_tokens <= 0:
            return self.OTHER
        if self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0:
            return self.OTHER
        return self.CONTINUE

    def _update_prefill_budget(self, extend_len: int, max_new_tokens: int) -> None:
        """``_update_prefill_budget`` and ``PrefillBudget.reserve``: the extend plus one page
        now, the output later."""
        immediate = extend_len + 1
        self.total_offset += immediate + max_new_tokens
        self.current_offset += immediate
        self.rem_input_tokens -= extend_len
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= extend_len

    def _commit(
        self, request: Request, extend_len: int, max_new_tokens: int, chunked: bool
    ) -> None:
        self.can_run_list.append(request)
        self.extend_lens.append(extend_len)
        if chunked:
            self.new_chunked_req = request
        self._update_prefill_budget(extend_len, max_new_tokens)

    def add_chunked_req(self, request: Request) -> Request | None:
        """``add_chunked_req`` (schedule_policy.py:1140): the next chunk of the request being
        chunked; returns it while chunks remain, else None."""
        rem_tokens = min(self.rem_chunk_tokens, int(self.rem_total_tokens))
        if rem_tokens <= 0:  # ``available_chunk_tokens``: a continuation must make progress
            rem_tokens = self.rem_chunk_tokens
        cand = self.scheduler.fill_len(request) - request.context_current_position
        truncated = cand > rem_tokens
        new_len = min(cand, rem_tokens)
        self.can_run_list.append(request)
        self.extend_lens.append(new_len)
        max_new = 0 if truncated else min(request.output_limit, CLIP_MAX_NEW_TOKENS)
        self._update_prefill_budget(new_len, max_new)
        return request if truncated else None

    def add_one_req(self, request: Request) -> str:
        """``add_one_req`` (schedule_policy.py:1395) with ``_select_prefill_admission`` (:1592)
        for a request from the waiting queue (no prefix: the radix cache is off)."""
        if self.scheduler.args.ignore_eos:
            return self.add_one_req_ignore_eos(request)
        max_new_tokens = request.output_limit
        max_new = min(max(max_new_tokens - request.num_generated, 0), CLIP_MAX_NEW_TOKENS)
        extend_len = self.scheduler.fill_len(request)
        total_tokens = extend_len + max_new + 1
        if not total_tokens < self.rem_total_tokens:  # PrefillBudget.check_prefill
            return self.NO_TOKEN
        # without chunking, the first request may overrun the input budget, the others not
        if (
            self.rem_chunk_tokens is None
            and self.can_run_list
            and extend_len >= self.rem_input_tokens
        ):
            return self.OTHER
        reserve = min(max_new_tokens, CLIP_MAX_NEW_TOKENS)
        chunked = False
        if self.rem_chunk_tokens is not None and extend_len > self.rem_chunk_tokens:
            extend_len = self.rem_chunk_tokens
            if extend_len <= 0:
                return self.OTHER
            chunked, reserve = True, 0
        self._commit(request, extend_len, reserve, chunked)
        return self.budget_state()

    def add_one_req_ignore_eos(self, request: Request) -> str:
        """``add_one_req_ignore_eos`` (schedule_policy.py:1241): the whole prompt must fit now,
        and every request's whole remaining output must fit as the requests finish, shortest
        remaining output first."""
        scheduler = self.scheduler
        cand = scheduler.fill_len(request)
        paged_input = cand + 1
        if not paged_input <= min(self.cur_rem_tokens, self.rem_total_tokens):
            return self.NO_TOKEN

        def add_req_state(r: Request, insert_sort: bool = False) -> None:
            tokens_left = r.output_limit * 1.0 - r.num_generated
            tokens_occupied = scheduler.origin_len(r) + r.num_generated
            if tokens_left <= 0:
                return
            if not insert_sort:
                self.req_states.append((tokens_left, tokens_occupied))
            else:
                i = 0
                for i in range(len(self.req_states)):  # (SGLang's loop: ``i`` stays at the last
                    if tokens_left <= self.req_states[i][0]:  # index when none is larger)
                        break
                self.req_states.insert(i, (tokens_left, tokens_occupied))

        if self.req_states is None:
            self.req_states = []
            add_req_state(request)
            for r in self.running:
                add_req_state(r)
            for r in self.can_run_list:
                add_req_state(r)
            self.req_states.sort(key=lambda x: x[0])
        else:
            add_req_state(request, insert_sort=True)

        cur_rem_tokens = self.cur_rem_tokens - paged_input
        tokens_freed = 0
        for i, (tokens_left, tokens_occupied) in enumerate(self.req_states):
            bs = len(self.req_states) - i
            min_free_tokens = cur_rem_tokens + tokens_freed - tokens_left * bs
            if min_free_tokens <= IGNORE_EOS_RESERVE_TOKENS * bs:
                return self.NO_TOKEN
            tokens_freed += tokens_occupied

        if self.rem_chunk_tokens is None or cand <= self.rem_chunk_tokens:
            self._commit(
                request, cand, min(request.output_limit, CLIP_MAX_NEW_TOKENS), chunked=False
            )
        else:
            if self.rem_chunk_tokens <= 0:
                return self.OTHER
            self._commit(request, self.rem_chunk_tokens, 0, chunked=True)
        return self.budget_state()
