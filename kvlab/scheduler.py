"""Scheduler: one scheduling iteration at a time, as TensorRT-LLM's KVCacheV2Scheduler does it.

Mirrors ``KVCacheV2Scheduler._schedule_loop``
(tensorrt_llm/_torch/pyexecutor/scheduler/scheduler_v2.py), REFERENCE.md §4:

- Try and see: no free-pages query decides anything; the scheduler calls resize and reacts
  to False. A PageIndexTooShort from resize is not caught: it reaches the executor loop.
- Phase 1 walks the active requests in arrival order. DISAGG_GENERATION_INIT requests go
  through ``prepare_disagg_gen_init`` outside the budgets (False = retry next iteration).
  Context requests are deferred to phase 2. A generation request grows by one token (+ its
  draft tokens); when it cannot, room is made by the admission policy's preemption mode
  ("suspend", the real ladder: suspend started requests from the tail, then recompute-pause,
  then suspend itself and stop phase 1).
- Phase 2 walks the deferred contexts: batch budget full -> break; STOP -> break; SKIP ->
  continue. Non-chunked: a token-budget miss or a prepare failure STOPs later contexts, an
  allocation failure SKIPs. Chunked: chunk = min(token budget left, context remaining,
  max_context_length), rounded down to ``chunk_unit_size`` unless it is the last; every
  failure SKIPs. A failed first chunk has its cache freed and is retried from scratch.
  Victims are only started requests, so first chunks are never evicted.
- Stall detection: ``stall_limit`` consecutive passes with active requests and no progress
  (nothing scheduled, suspended, recompute-paused, aborted or fitted) raise SchedulerDeadlock
  with the real message. The raise comes on the ``stall_limit``-th stalled pass itself, as the
  real ``_stalled_schedules >= _DEADLOCK_STALL_ITERS`` (1000) check does, so a request that is
  alone and never fits stops the engine in exactly ``stall_limit`` passes.

Simplified, and said where it matters: beam width 1; no PEFT, encoder, cross-attention,
prefix reuse or KV connector; budget checks precede ``prepare_context`` (the real default
prepares first for prefix reuse; without reuse the outcome is the same); the phase-2
``preempt_for_pages`` of newer code (recompute one started request for a failed context
when there is no host tier) is left out, so a failed context allocation simply SKIPs, and
two chunked prefills that each fit alone can hold each other up until the stall detector
fires (tests/test_simulation.py shows one). The
host tier is ``host_cache_blocks`` pages (0, the real default ``host_cache_size``: no tier,
so nothing can be suspended; None: unbounded). The manager calls the real code has and
kvlab's KVCacheManager lacks (``try_allocate_generation``, ``prepare_disagg_gen_init``) are
written here from the manager's public resize/suspend/resume/free.

Recurrent-state residency (PR #17261, REFERENCE.md §5): when ``manager.max_resident_sequences()``
is not None, a request that would take a new state slot (a first context chunk, or a
DISAGG_GENERATION_INIT) is admitted only while fewer sequences hold a slot than the cap; a
suspended sequence keeps its slot and counts. A capped first chunk is skipped (``continue``).
``residency_bugs`` restores the review's scheduler findings: "disagg_bypasses_cap" (the
DISAGG_GENERATION_INIT path neither gated nor counted) and "break_on_cap" (``break``: the scan
stops, so non-first chunks behind a capped first chunk are never scheduled).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import FrozenSet, Iterable, List, Optional, Sequence, Tuple, Union

from ._validate import check_int, check_subset
from .admission import AdmissionPolicy, Verdict, make_admission
from .kv_cache import KVCache, PageIndexTooShort
from .manager import KVCacheManager
from .request import REQUEST_STATES, Request

#: The real ``KVCacheV2Scheduler._DEADLOCK_STALL_ITERS``.
DEFAULT_STALL_LIMIT = 1000
#: The remedy the real deadlock message ends with (no KV connector attached).
DEADLOCK_REMEDY = ("Configure kv_cache_config.host_cache_size, increase kv_cache_config.max_tokens, "
                   "or lower max_batch_size.")
LIVE_STATES = ("waiting", "running", "suspended")
#: The review findings of PR #17261 the scheduler can reproduce (default: all fixed).
SCHEDULER_RESIDENCY_BUGS = ("disagg_bypasses_cap", "break_on_cap")


class SchedulerDeadlock(RuntimeError):
    """The V2 scheduler's stall detector fired (a RuntimeError in the real code, with this
    message format); ``stalled_passes`` is the K of the message."""

    def __init__(self, num_generation: int, num_context: int, stalled_passes: int):
        super().__init__(
            f"V2 scheduler deadlock: {num_generation} generation and {num_context} context "
            "request(s) active but none could be scheduled, suspended or preempted in "
            f"{stalled_passes} consecutive attempts. The KV cache pool is likely exhausted. "
            f"{DEADLOCK_REMEDY}")
        self.num_generation = num_generation
        self.num_context = num_context
        self.stalled_passes = stalled_passes


class ScheduleAction(enum.Enum):
    """Result of one scheduling attempt (the real ScheduleAction)."""

    SCHEDULED = "scheduled"
    SKIP = "skip"
    STOP = "stop"


@dataclass
class ScheduledBatch:
    """What one pass decided (the real SchedulerOutput). A context request's chunk is its
    ``context_chunk_size``."""

    context_requests: List[Request] = field(default_factory=list)
    generation_requests: List[Request] = field(default_factory=list)
    #: suspended to the host tier this pass (evicted, or self-suspended)
    paused_requests: List[Request] = field(default_factory=list)
    #: cache freed this pass; their context (prompt + generated tokens) restarts later
    recompute_paused_requests: List[Request] = field(default_factory=list)
    fitting_disagg_gen_init_requests: List[Request] = field(default_factory=list)
    #: aborted by SGLang-style retraction (state "rejected")
    aborted_requests: List[Request] = field(default_factory=list)
    num_tokens: int = 0

    @property
    def made_progress(self) -> bool:
        return bool(self.context_requests or self.generation_requests or self.paused_requests
                    or self.recompute_paused_requests or self.fitting_disagg_gen_init_requests
                    or self.aborted_requests)


class _Budget:
    """Token and request budgets of one pass (the real BudgetTracker, without PEFT)."""

    __slots__ = ("max_num_tokens", "max_num_requests", "num_tokens", "num_requests")

    def __init__(self, max_num_tokens: int, max_num_requests: int):
        self.max_num_tokens = max_num_tokens
        self.max_num_requests = max_num_requests
        self.num_tokens = 0
        self.num_requests = 0

    @property
    def requests_full(self) -> bool:
        return self.num_requests >= self.max_num_requests

    @property
    def remaining_tokens(self) -> int:
        return self.max_num_tokens - self.num_tokens

    def can_fit_tokens(self, num_tokens: int) -> bool:
        return self.num_tokens + num_tokens <= self.max_num_tokens

    def commit(self, num_tokens: int) -> None:
        self.num_tokens += num_tokens
        self.num_requests += 1


class _RecomputePauseState:
    """Recompute-pause frontier and victims of one pass (the real _RecomputePauseState)."""

    __slots__ = ("frontier", "victim_indices")

    def __init__(self, frontier: int):
        self.frontier = frontier
        self.victim_indices: set = set()


def _contains(requests: Sequence[Request], request: Request) -> bool:
    return any(other is request for other in requests)


class Scheduler:
    """KVCacheV2Scheduler over a KVCacheManager, with an admission policy plugged in.

    ``submit`` a request when it arrives, call ``schedule`` once per iteration, execute the
    batch it returns, and ``finish`` requests that completed (``kvlab.simulate`` does all of
    it). ``max_batch_size`` is the scheduler's request budget per pass; the manager's own
    max_batch_size bounds the caches alive at once (its page-index slots).
    """

    def __init__(self, manager: KVCacheManager, admission: Union[str, AdmissionPolicy] = "none",
                 max_num_tokens: int = 8192, max_batch_size: int = 8,
                 stall_limit: int = DEFAULT_STALL_LIMIT, *, chunked_prefill: bool = False,
                 max_context_length: Optional[int] = None, chunk_unit_size: Optional[int] = None,
                 host_cache_blocks: Optional[int] = 0, enable_recompute_pause: bool = True,
                 debug: bool = False, residency_bugs: Iterable[str] = frozenset()):
        if not isinstance(manager, KVCacheManager):
            raise TypeError(f"manager must be a KVCacheManager, got {type(manager).__name__}")
        self.manager = manager
        self.admission = make_admission(admission)
        self.max_num_tokens = check_int("max_num_tokens", max_num_tokens, low=1, high=1 << 30)
        self.max_batch_size = check_int("max_batch_size", max_batch_size, low=1, high=1 << 20)
        self.stall_limit = check_int("stall_limit", stall_limit, low=1, high=1 << 30)
        for name, flag in (("chunked_prefill", chunked_prefill),
                           ("enable_recompute_pause", enable_recompute_pause), ("debug", debug)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r}")
        self.chunked_prefill = chunked_prefill
        self.enable_recompute_pause = enable_recompute_pause
        self.debug = debug
        self.max_context_length = (max_num_tokens if max_context_length is None else check_int(
            "max_context_length", max_context_length, low=1, high=1 << 30))
        self.chunk_unit_size = (manager.tokens_per_block if chunk_unit_size is None else check_int(
            "chunk_unit_size", chunk_unit_size, low=1, high=1 << 30))
        if chunked_prefill and self.chunk_unit_size > self.max_context_length:
            raise ValueError(f"chunk_unit_size must be in [1, max_context_length="
                             f"{self.max_context_length}] with chunked_prefill, got "
                             f"{self.chunk_unit_size}")
        self.host_cache_blocks = (None if host_cache_blocks is None else check_int(
            "host_cache_blocks", host_cache_blocks, low=0))
        self.admission.check_startup(manager)
        self.residency_bugs: FrozenSet[str] = check_subset("residency_bugs", residency_bugs,
                                                           SCHEDULER_RESIDENCY_BUGS)

        self.iteration = 0
        self.stalled_passes = 0
        self.host_blocks_used = 0
        self.counts = dict.fromkeys(REQUEST_STATES, 0)
        self._active: List[Request] = []       # live requests, arrival order (active_requests)
        self._submitted: List[Request] = []
        self._submitted_ids: set = set()
        self._has_retired = False

    # -- the executor's side ------------------------------------------------------------
    @property
    def active_requests(self) -> Tuple[Request, ...]:
        """The live requests (waiting, running, suspended) in arrival order."""
        return tuple(r for r in self._active if r.state in LIVE_STATES)

    @property
    def submitted_requests(self) -> Tuple[Request, ...]:
        return tuple(self._submitted)

    def submit(self, request: Request) -> Verdict:
        """Take an arriving request: the front-door check, then the admission policy. A
        rejected request gets state "rejected" and the verdict's reason."""
        if not isinstance(request, Request):
            raise TypeError(f"request must be a Request, got {type(request).__name__}")
        if request.request_id in self._submitted_ids:
            raise ValueError(f"request_id {request.request_id!r} was already submitted")
        if request.state != "waiting":
            raise ValueError(f"request {request.request_id!r} is {request.state!r}; submit a fresh "
                             "Request (dataclasses.replace(request) makes one)")
        self._submitted_ids.add(request.request_id)
        self._submitted.append(request)
        self.counts["waiting"] += 1
        verdict = self._front_door(request)
        if verdict.admitted:
            verdict = self.admission.admit(request, self.manager)
        if verdict.admitted:
            self._active.append(request)
        else:
            self._set_state(request, "rejected")
            request.reason = verdict.reason
        return verdict

    def _front_door(self, request: Request) -> Verdict:
        """The LLM API's check (tensorrt_llm/llmapi/llm.py ``_check_arguments``): without
        chunked prefill a prompt must fit max_num_tokens. Generation-only requests skip it."""
        if (not self.chunked_prefill and not request.disagg_generation_init
                and request.prompt_len > self.max_num_tokens):
            return Verdict(False, f"The sum of prompt length ({float(request.prompt_len)}), query "
                                  f"length (0) should not exceed max_num_tokens ({self.max_num_tokens})")
        return Verdict(True)

    def finish(self, request: Request) -> None:
        """A request generated its last token: free its cache and retire it."""
        self.manager.free(request)
        self._set_state(request, "finished")
        self._has_retired = True

    # -- one scheduling pass -------------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        """One iteration of ``_schedule_loop``; may raise PageIndexTooShort (from resize) or
        SchedulerDeadlock (from the stall detector)."""
        if self._has_retired:
            self._active = [r for r in self._active if r.state in LIVE_STATES]
            self._has_retired = False
        self.iteration += 1
        batch = ScheduledBatch()
        budget = _Budget(self.max_num_tokens, self.max_batch_size)
        requests = self._active
        pending_contexts: List[Request] = []
        end = len(requests)
        pause_state = _RecomputePauseState(end)
        index = 0
        while index < end:  # phase 1: generation and disagg
            request = requests[index]
            if index in pause_state.victim_indices:
                index += 1
                continue
            if request.is_disagg_generation_init:  # outside both budgets
                if ("disagg_bypasses_cap" not in self.residency_bugs
                        and self._residency_full(request)):
                    request.num_refusals += 1
                elif self._prepare_disagg_gen_init(request):
                    batch.fitting_disagg_gen_init_requests.append(request)
                else:
                    request.num_refusals += 1
                index += 1
                continue
            if budget.requests_full:
                break
            if not request.is_context_finished:
                pending_contexts.append(request)
                index += 1
                continue
            action, end = self._schedule_generation(request, budget, requests, index, end,
                                                    pause_state, batch)
            if action is ScheduleAction.STOP:
                break
            index += 1
        self._schedule_contexts(pending_contexts, budget, batch)
        batch.num_tokens = budget.num_tokens
        if batch.aborted_requests:
            self._has_retired = True
        self._detect_deadlock(requests, pending_contexts, batch)
        if self.debug:
            self.check_invariants()
        return batch

    # -- phase 1: generation -------------------------------------------------------------
    def _schedule_generation(self, request, budget, requests, index, end, pause_state, batch):
        tokens = 1 + request.num_draft_tokens
        if not budget.can_fit_tokens(tokens):
            return ScheduleAction.STOP, end
        success = self._try_allocate_generation(request)
        if not success:
            success, end = self._make_room(request, requests, index, end, pause_state, batch)
        if success:
            batch.generation_requests.append(request)
            budget.commit(tokens)
            return ScheduleAction.SCHEDULED, end
        request.num_refusals += 1
        return self._give_up_generation(request, batch), end

    def _make_room(self, request, requests, index, end, pause_state, batch):
        """Free pages for a generation step, by the policy's preemption mode."""
        mode = self.admission.preemption
        if mode == "suspend":
            success, end = self._evict_for_generation(request, requests, index, end, batch)
            if not success and self.enable_recompute_pause:
                success, end = self._recompute_pause_for_generation(request, requests, index, end,
                                                                    pause_state, batch)
            return success, end
        victims = [i for i in range(index + 1, end)
                   if i not in pause_state.victim_indices and requests[i].is_started
                   and requests[i].state == "running"]
        if mode == "retract":
            # SGLang's order: most output tokens first, then shortest prompt; retract from the end
            victims.sort(key=lambda i: (requests[i].num_generated, -requests[i].context_len),
                         reverse=True)
        while victims:  # "recompute" (vLLM) takes the tail first
            victim_index = victims.pop()
            self._recompute_pause(requests[victim_index])
            batch.recompute_paused_requests.append(requests[victim_index])
            pause_state.victim_indices.add(victim_index)
            if self._try_allocate_generation(request):
                return True, end
        return False, end

    def _give_up_generation(self, request: Request, batch: ScheduledBatch) -> ScheduleAction:
        """Nothing could make room: suspend itself (TensorRT-LLM), recompute itself (vLLM) or
        abort (SGLang, with nothing left to retract)."""
        mode = self.admission.preemption
        if mode == "suspend":
            if request.state == "running" and self._suspend(request):
                batch.paused_requests.append(request)
            return ScheduleAction.STOP
        if mode == "recompute":
            self._recompute_pause(request)
            batch.recompute_paused_requests.append(request)
            return ScheduleAction.STOP
        cache = self.manager.get_cache(request)
        request.reason = (f"aborted: out of KV cache memory with nothing left to retract (needs "
                          f"{self.manager.geometry.blocks_for_tokens(cache.capacity + 1)} blocks; "
                          f"{self.manager.free_blocks} free + {cache.num_blocks} its own of "
                          f"{self.manager.total_blocks})")
        self._release(request)
        self._set_state(request, "rejected")
        batch.aborted_requests.append(request)
        return ScheduleAction.SKIP

    def _is_evictable(self, request: Request) -> bool:
        return (request.is_started and request.state == "running"
                and self._host_has_room(self.manager.get_cache(request).num_blocks))

    def _evict_for_generation(self, request, requests, index, end, batch):
        """The real ``_try_evict_for_gen``: suspend started requests from the tail of
        active_requests (never ones already visited) until the step fits."""
        while end > index:
            victim_index = next((i for i in range(end - 1, index, -1)
                                 if self._is_evictable(requests[i])), None)
            if victim_index is None:
                break
            victim = requests[victim_index]
            self._suspend(victim)
            batch.paused_requests.append(victim)
            end = victim_index
            if self._try_allocate_generation(request):
                return True, end
        return False, end

    def _recompute_pause_for_generation(self, request, requests, index, end, pause_state, batch):
        """The real ``_try_recompute_pause_for_gen``: free started requests' caches from the
        tail. With a host tier (the real ``can_evict``), victims suspended this pass are
        candidates too: tearing one down frees host room to suspend another."""
        can_evict = self.host_cache_blocks != 0
        while True:
            victim_index = None
            for i in range(pause_state.frontier - 1, index, -1):
                candidate = requests[i]
                if (i not in pause_state.victim_indices and candidate.is_started
                        and (can_evict or not _contains(batch.paused_requests, candidate))):
                    victim_index = i
                    break
            if victim_index is None and can_evict:
                victim = next((c for c in batch.paused_requests if c.is_started), None)
                if victim is None:
                    break
                victim_index = next(i for i, c in enumerate(requests) if c is victim)
            elif victim_index is None:
                break
            victim = requests[victim_index]
            if _contains(batch.paused_requests, victim):
                batch.paused_requests.remove(victim)
            self._recompute_pause(victim)
            batch.recompute_paused_requests.append(victim)
            pause_state.victim_indices.add(victim_index)
            pause_state.frontier = min(pause_state.frontier, victim_index)
            success = self._try_allocate_generation(request)
            if not success and can_evict:
                success, end = self._evict_for_generation(request, requests, index, end, batch)
            if success:
                return True, end
        return False, end

    # -- phase 2: contexts ---------------------------------------------------------------
    def _schedule_contexts(self, pending: List[Request], budget: _Budget,
                           batch: ScheduledBatch) -> None:
        for request in pending:
            if budget.requests_full:
                break
            if self.chunked_prefill and not self._has_context_chunk_budget(budget):
                continue
            action, tokens = self._schedule_context(request, budget)
            if action is not ScheduleAction.SCHEDULED:
                request.num_refusals += 1
                if action is ScheduleAction.STOP:
                    break
                continue
            batch.context_requests.append(request)
            budget.commit(tokens)

    def _has_context_chunk_budget(self, budget: _Budget) -> bool:
        remaining = budget.remaining_tokens
        return remaining > 0 and remaining >= self.chunk_unit_size

    def _schedule_context(self, request: Request, budget: _Budget):
        first_chunk = request.is_first_context_chunk
        if first_chunk and self._residency_full(request):
            # the real guard; the review's fix skips only this request
            stop = "break_on_cap" in self.residency_bugs
            return (ScheduleAction.STOP if stop else ScheduleAction.SKIP), 0
        if first_chunk and not self.admission.may_start(request, self.manager, self._active):
            return ScheduleAction.STOP, 0
        try:
            if self.chunked_prefill:
                action, tokens = self._schedule_context_chunked(request, budget)
            else:
                action, tokens = self._schedule_context_full(request, budget)
        except PageIndexTooShort:
            if first_chunk:  # the engine stops; the request never ran
                self._release(request)
            raise
        if first_chunk and action is not ScheduleAction.SCHEDULED:
            self._release(request)  # retried from scratch next iteration
        return action, tokens

    def _schedule_context_full(self, request: Request, budget: _Budget):
        tokens = request.context_remaining_length
        if not budget.can_fit_tokens(tokens):
            return ScheduleAction.STOP, 0
        allocated = self._allocate_context(request, tokens)
        if allocated is None:  # prepare failed
            return ScheduleAction.STOP, 0
        if not allocated:
            return ScheduleAction.SKIP, 0
        request.context_chunk_size = tokens
        return ScheduleAction.SCHEDULED, tokens

    def _schedule_context_chunked(self, request: Request, budget: _Budget):
        # never 0: the chunk budget is >= chunk_unit_size <= max_context_length here
        remaining = request.context_remaining_length
        chunk = min(budget.remaining_tokens, remaining, self.max_context_length)
        if chunk < remaining:
            chunk -= chunk % self.chunk_unit_size
        if not self._allocate_context(request, chunk):
            return ScheduleAction.SKIP, 0
        request.context_chunk_size = chunk
        return ScheduleAction.SCHEDULED, chunk

    # -- recurrent-state residency ---------------------------------------------------------
    def _residency_full(self, request: Request) -> bool:
        """True when ``request`` would take a new state slot and the manager's cap is reached."""
        cap = self.manager.max_resident_sequences()
        if cap is None or request.request_id in self.manager.caches:
            return False
        return self.num_resident_sequences() >= cap

    def num_resident_sequences(self) -> int:
        """Live requests holding a cache, hence a state slot (suspended ones included). With
        "disagg_bypasses_cap", a DISAGG_GENERATION_INIT holding one is not counted."""
        caches = self.manager.caches
        bypass = "disagg_bypasses_cap" in self.residency_bugs
        return sum(1 for r in self._active if r.state in LIVE_STATES and r.request_id in caches
                   and not (bypass and r.is_disagg_generation_init))

    # -- manager calls -------------------------------------------------------------------
    def _allocate_context(self, request: Request, num_tokens: int) -> Optional[bool]:
        """``prepare_context`` then ``resize_context``: None when prepare fails (no free
        page-index slot, as the real IndexMapper answers, or a suspended cache that cannot
        resume), else the resize's answer."""
        cache = self.manager.caches.get(request.request_id)
        if cache is None:
            if self.manager.page_index.free_slots == 0:
                return None
            if self._first_chunk_certainly_refused(num_tokens):
                return False
            self.manager.create_cache(request.request_id)
            self._set_state(request, "running")
        elif cache.suspended and not self._resume(request, cache):
            return None
        return self._resize_context(request, num_tokens)

    def _first_chunk_certainly_refused(self, num_tokens: int) -> bool:
        """Decision-neutral fast path, like the real ``_pending_ctx_certainly_blocked``: a
        first chunk needing more pages than are free, within the row width, would be created,
        refused by resize (False, not a raise), suspended and freed, leaving nothing behind;
        skip the round trip. Only the pool's failed_allocations counter misses it."""
        blocks = self.manager.geometry.blocks_for_tokens(num_tokens + self.manager.num_extra_kv_tokens)
        return self.manager.free_blocks < blocks <= self.manager.max_blocks_per_seq

    def _prepare_disagg_gen_init(self, request: Request) -> bool:
        """The real ``prepare_disagg_gen_init``: a cache sized for the transferred context."""
        if request.request_id not in self.manager.caches:
            if self.manager.page_index.free_slots == 0:
                return False
            self.manager.create_cache(request.request_id)
            self._set_state(request, "running")
        try:
            fitted = self._resize_context(request, request.prompt_len)
        except PageIndexTooShort:
            self._release(request)  # the engine stops; the request never ran
            raise
        if not fitted:
            self._release(request)  # retried next iteration
        return fitted

    def _try_allocate_generation(self, request: Request) -> bool:
        """The real manager's ``try_allocate_generation``: resume if suspended, then grow the
        capacity by one token plus the draft tokens."""
        cache = self.manager.get_cache(request)
        if cache.suspended and not self._resume(request, cache):
            return False
        return self._resize(request, lambda: cache.resize(
            cache.capacity + 1 + request.num_draft_tokens))

    def _resize_context(self, request: Request, num_tokens: int) -> bool:
        return self._resize(request, lambda: self.manager.resize_context(request, num_tokens))

    @staticmethod
    def _resize(request: Request, resize) -> bool:
        """Run a resize; a PageIndexTooShort goes on up, tagged with the request it hit (the
        native message stays ``str(exc)``)."""
        try:
            return resize()
        except PageIndexTooShort as exc:
            exc.request_id = request.request_id
            exc.add_note(f"kvlab: while resizing request {request.request_id!r}: it needs "
                         f"{exc.needed_entries} page-index entries, the row has "
                         f"{exc.available_entries}")
            raise

    def _host_has_room(self, num_blocks: int) -> bool:
        return self.host_cache_blocks is None or (
            self.host_blocks_used + num_blocks <= self.host_cache_blocks)

    def _suspend(self, request: Request) -> bool:
        """Move the request's pages to the host tier; False when the tier has no room."""
        cache = self.manager.get_cache(request)
        if not self._host_has_room(cache.num_blocks):
            return False
        self.host_blocks_used += cache.num_blocks
        cache.suspend()
        request.num_suspensions += 1
        self._set_state(request, "suspended")
        return True

    def _resume(self, request: Request, cache: KVCache) -> bool:
        host_blocks = cache.suspended_blocks
        if not cache.resume():
            return False
        self.host_blocks_used -= host_blocks
        self._set_state(request, "running")
        return True

    def _release(self, request: Request) -> None:
        """Free the request's cache, if it has one, wherever its pages are."""
        cache = self.manager.caches.get(request.request_id)
        if cache is None:
            return
        self.host_blocks_used -= cache.suspended_blocks
        self.manager.free(cache)
        self._set_state(request, "waiting")

    def _recompute_pause(self, request: Request) -> None:
        """Free the cache; the context restarts later as prompt + generated tokens (the real
        ``reset_for_recompute``)."""
        self._release(request)
        request.recomputed_tokens = request.num_generated
        request.context_current_position = 0
        request.num_recomputes += 1

    def _set_state(self, request: Request, state: str) -> None:
        self.counts[request.state] -= 1
        self.counts[state] += 1
        request.state = state

    # -- stall detection -----------------------------------------------------------------
    def _detect_deadlock(self, requests: List[Request], pending: List[Request],
                         batch: ScheduledBatch) -> None:
        """The real ``_detect_deadlock``: raise on the stall_limit-th consecutive pass that had
        candidates and made no progress."""
        if batch.made_progress:
            self.stalled_passes = 0
            return
        num_generation = sum(1 for r in requests
                             if r.state in LIVE_STATES and r.is_context_finished)
        if num_generation == 0 and not pending:
            self.stalled_passes = 0  # legitimately idle
            return
        self.stalled_passes += 1
        if self.stalled_passes >= self.stall_limit:
            raise SchedulerDeadlock(num_generation, len(pending), self.stalled_passes)

    # -- invariants ----------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise AssertionError unless: the manager's pages are conserved and its rows
        consistent; every submitted request is in exactly one state and the state counts
        add up; a request holds a device cache iff "running", a host one iff "suspended";
        no cache outlives its request; the host tier holds what it was given."""
        self.manager.check_invariants()
        caches = self.manager.caches
        seen = dict.fromkeys(REQUEST_STATES, 0)
        for request in self._submitted:
            assert request.state in REQUEST_STATES, f"{request.request_id!r}: state {request.state!r}"
            seen[request.state] += 1
            cache = caches.get(request.request_id)
            if request.state == "running":
                assert cache is not None and not cache.suspended, (
                    f"{request.request_id!r} is running without a device cache")
            elif request.state == "suspended":
                assert cache is not None and cache.suspended, (
                    f"{request.request_id!r} is suspended without a host copy")
            else:
                assert cache is None, f"{request.request_id!r} is {request.state} yet holds a cache"
        assert seen == self.counts, f"state counts drifted: counted {seen}, kept {self.counts}"
        assert sum(seen.values()) == len(self._submitted)
        live = [r.request_id for r in self._active if r.state in LIVE_STATES]
        assert len(live) == len(set(live)) == sum(seen[s] for s in LIVE_STATES), (
            "a live request is missing from, or twice in, the active list")
        assert set(caches) <= set(live), f"caches without a live request: {set(caches) - set(live)}"
        host = sum(cache.suspended_blocks for cache in caches.values())
        assert host == self.host_blocks_used, f"host tier holds {host}, accounted {self.host_blocks_used}"
        assert self.host_cache_blocks is None or host <= self.host_cache_blocks

    def __repr__(self) -> str:
        return (f"Scheduler(admission={self.admission!r}, max_num_tokens={self.max_num_tokens}, "
                f"max_batch_size={self.max_batch_size}, stall_limit={self.stall_limit}, "
                f"chunked_prefill={self.chunked_prefill}, host_cache_blocks={self.host_cache_blocks})")
