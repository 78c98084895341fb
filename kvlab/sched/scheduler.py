"""Scheduler: one pass of TensorRT-LLM's ``KVCacheV2Scheduler._schedule_loop``
(tensorrt_llm/_torch/pyexecutor/scheduler/scheduler_v2.py at 00746ef999; REFERENCE.md §4).

One pass does what the older ``SimpleScheduler`` splits in two: its ``capacity_scheduler``
(which requests get KV cache) and its ``micro_batch_scheduler`` (which fit the budgets).
Try and see: it asks the manager and reacts to the answer. Phase 1 walks the active requests in
arrival order (generation steps; contexts deferred); phase 2 the deferred contexts. Simplified:
beams count in the budget, not in pages; no PEFT, encoder or KV connector.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvlab.core.checks import check_bools, check_param, check_param_or
from kvlab.core.kv_cache import PageIndexTooShort
from kvlab.core.manager import KVCacheManager
from kvlab.core.request import LIVE_STATES, Request, RequestState
from kvlab.sched.admission import (
    AdmissionPolicy,
    Verdict,
    front_door_verdict,
    make_admission,
    token_budget_verdict,
)
from kvlab.sched.base import ScheduledBatch, SchedulerBase
from kvlab.sched.context_plan import (
    ContextPlan,
    PassBudget,
    ScheduleAction,
    check_chunk_budget,
    plan_context,
)
from kvlab.sched.deadlock import DEFAULT_STALL_LIMIT, SchedulerDeadlock
from kvlab.sched.make_room import RecomputePauseState, RoomMaking, contains
from kvlab.sched.prefix_skip import PrefixAwareSkip
from kvlab.sched.residency import ResidencyCap


class Scheduler(RoomMaking, PrefixAwareSkip, ResidencyCap, SchedulerBase):
    """KVCacheV2Scheduler over a KVCacheManager, with an admission policy plugged in:
    ``submit`` arrivals, ``schedule`` once per iteration, ``finish`` what completed
    (``kvlab.simulate`` does it all). Requests per pass: ``scheduler_capacity``, else
    ``max_batch_size``; ``max_num_tokens=None``: no token budget; ``stall_limit`` passes
    without progress raise SchedulerDeadlock."""

    def __init__(
        self,
        manager: KVCacheManager,
        admission: str | AdmissionPolicy = "none",
        max_num_tokens: int | None = 8192,
        max_batch_size: int = 8,
        stall_limit: int = DEFAULT_STALL_LIMIT,
        *,
        chunked_prefill: bool = False,
        max_context_length: int | None = None,
        chunk_unit_size: int | None = None,
        scheduler_capacity: int | None = None,
        enable_recompute_pause: bool = True,
        enable_prefix_aware_scheduling: bool = True,
        debug: bool = False,
    ):
        super().__init__(manager, max_batch_size, debug)
        self.admission = make_admission(admission)
        self.max_num_tokens = check_param_or("max_num_tokens", max_num_tokens, None)
        self.max_num_requests = check_param_or(
            "scheduler_capacity", scheduler_capacity, self.max_batch_size
        )
        self.stall_limit = check_param("stall_limit", stall_limit)
        check_bools(
            chunked_prefill=chunked_prefill,
            enable_recompute_pause=enable_recompute_pause,
            enable_prefix_aware_scheduling=enable_prefix_aware_scheduling,
        )
        self.chunked_prefill = chunked_prefill
        self.enable_recompute_pause = enable_recompute_pause
        self.enable_prefix_aware_scheduling = enable_prefix_aware_scheduling
        self._prefix_skip_enabled = (
            enable_prefix_aware_scheduling
            and manager.enable_block_reuse
            and manager.block_reuse_policy == "all_reusable"
        )
        self.max_context_length = check_param_or(
            "max_context_length", max_context_length, max_num_tokens
        )
        self.chunk_unit_size = check_param_or(
            "chunk_unit_size", chunk_unit_size, manager.tokens_per_block
        )
        if chunked_prefill:
            check_chunk_budget(self.chunk_unit_size, self.max_num_tokens, self.max_context_length)
        self._inflight: frozenset[str] = frozenset()

    def _verdict(self, request: Request) -> Verdict:
        """The LLM API's front door, then the admission policy (and, for a policy that rejects
        what can never run, the token budget)."""
        verdict = front_door_verdict(request, self.max_num_tokens, self.chunked_prefill)
        if verdict.admitted:
            verdict = self.admission.admit(request, self.manager)
        if verdict.admitted and self.admission.rejects_never_schedulable:
            verdict = token_budget_verdict(request, self.max_num_tokens, self.chunked_prefill)
        return verdict

    def schedule(self, inflight_request_ids: Iterable[str] = frozenset()) -> ScheduledBatch:
        """One iteration of ``_schedule_loop``; may raise PageIndexTooShort or SchedulerDeadlock.
        ``inflight_request_ids``: requests an overlap executor still has in flight, skipped and
        counted nowhere (kvlab's own executor passes none)."""
        self._inflight = frozenset(inflight_request_ids)
        self._prune_retired()
        self.iteration += 1
        batch = ScheduledBatch()
        budget = PassBudget(self.max_num_tokens, self.max_num_requests)
        pending = self._schedule_generations(budget, batch)
        # phase 2: the deferred contexts
        preempted: list[Request] = []
        contributed = self._collect_contributed_blocks(pending)
        for request in pending:
            if budget.requests_full or not self._has_context_chunk_budget(budget):
                break  # (the real loop goes on for encoder requests, which kvlab has none of)
            if preempted and contains(preempted, request):
                continue
            first_new_block = None
            if contributed is not None:  # the prefix-aware skip, before any cache work
                first_new_block = self.manager.probe_first_new_block_key(request)
                if request.is_first_context_chunk and first_new_block in contributed:
                    batch.deferred_behind_contributor = True
                    continue
            action, tokens = self._schedule_context(request, budget, batch, preempted)
            if action is not ScheduleAction.SCHEDULED:
                batch.refuse(request)
                if action is ScheduleAction.STOP:
                    break
                continue
            batch.context_requests.append(request)
            budget.commit(tokens)
            if contributed is not None and first_new_block is not None:
                contributed.add(first_new_block)  # registered once it runs this pass
        # _sort_requests: non-last chunks before last chunks, stable
        batch.context_requests.sort(key=lambda r: r.is_last_context_chunk)
        batch.num_tokens = budget.num_tokens
        if preempted:
            pending = [r for r in pending if not contains(preempted, r)]
        self._detect_deadlock(pending, batch)
        if self.debug:
            self.check_invariants()
        return batch

    def _schedule_generations(
        self, budget: PassBudget, batch: ScheduledBatch, start: int = 0
    ) -> list[Request]:
        """Phase 1; returns the contexts it deferred. Each step is the real
        ``_try_schedule_generation``: beams + drafts from the budget (STOP when they do not
        fit), another beam width SKIPs, then the allocation and, failing it, the ladder
        (kvlab.sched.make_room); failing that, the request suspends itself and phase 1 STOPs.
        ``start``: the first active request walked (kvlab.run.fast_forward took those before)."""
        requests, inflight, max_num_tokens = self._active, self._inflight, budget.max_num_tokens
        pending_contexts: list[Request] = []
        pause_state = RecomputePauseState(len(requests))
        end = len(requests)  # the ladder's victims shorten the walk
        for index, request in enumerate(requests[start:], start):
            if index >= end:
                break
            if index in pause_state.victim_indices or request.request_id in inflight:
                continue
            if request.disagg_generation_init and request.is_disagg_generation_init:
                # outside both budgets
                capped = self._disagg_gen_init_under_cap() and self._residency_full(request)
                if not capped and self._runs_if(
                    self.manager.prepare_disagg_gen_init(request), request
                ):
                    batch.fitting_disagg_gen_init_requests.append(request)
                else:
                    batch.refuse(request)
                continue
            if budget.requests_full:
                break
            if not request.is_context_finished:
                pending_contexts.append(request)
                continue
            tokens = request.beam_width + request.num_draft_tokens
            if max_num_tokens is not None and budget.num_tokens + tokens > max_num_tokens:
                break  # STOP
            if batch.beam_width and request.beam_width != batch.beam_width:
                continue  # SKIP
            fitted = self._try_allocate_generation(request)
            if not fitted:  # the ladder: suspend from the tail, then recompute-pause
                fitted, end = self._evict_for_generation(request, requests, index, end, batch)
            if not fitted and self.enable_recompute_pause:
                fitted, end = self._recompute_pause_for_generation(
                    request, requests, index, end, pause_state, batch
                )
            if not fitted:  # nothing made room: the request suspends itself, phase 1 STOPs
                batch.refuse(request)
                if request.state is RequestState.RUNNING:
                    self._suspend(request)
                    batch.paused_requests.append(request)
                break
            batch.generation_requests.append(request)
            batch.beam_width = request.beam_width
            budget.commit(tokens)
        return pending_contexts

    def _has_context_chunk_budget(self, budget: PassBudget) -> bool:
        remaining = budget.remaining_tokens
        return not self.chunked_prefill or remaining is None or remaining >= self.chunk_unit_size

    def _schedule_context(
        self, request: Request, budget: PassBudget, batch: ScheduledBatch, preempted: list[Request]
    ) -> tuple[ScheduleAction, int]:
        """One context attempt (the real ``_try_schedule_context_full`` / ``_chunked``): plan,
        ``prepare_context``, ``resize_context``; (action, tokens charged when SCHEDULED). A
        first chunk that does not run has its cache freed: it is retried from scratch."""
        first_chunk = request.is_first_context_chunk
        if first_chunk and self._residency_full(request):
            return self._residency_refusal(), 0
        prepare_failed = ScheduleAction.SKIP if self.chunked_prefill else ScheduleAction.STOP
        action, charged = ScheduleAction.SCHEDULED, 0
        try:
            if first_chunk and request.prefix_hashes and self.manager.reuses(request):
                action, plan = self._prepare_then_plan(request, budget)
            else:
                plan = self._plan_context(request, budget.remaining_tokens)
                if plan is None:
                    action = ScheduleAction.STOP
                elif request.state is not RequestState.RUNNING and not self._prepare(request):
                    action = prepare_failed
            if action is ScheduleAction.SCHEDULED:
                assert plan is not None  # a context is scheduled only on a plan
                request.context_chunk_size, charged, resize_tokens = plan
                if not self.manager.resize_context(request, resize_tokens):
                    preempted_one = self._preempt_for_pages(request, batch, preempted)
                    action = ScheduleAction.STOP if preempted_one else ScheduleAction.SKIP
        except PageIndexTooShort:
            if first_chunk:  # the engine stops; the request never ran
                self._release(request)
            raise
        if action is not ScheduleAction.SCHEDULED and first_chunk:
            self._release(request)
        return action, charged

    def _plan_context(
        self, request: Request, budget_left: int | None, sized_from: int | None = None
    ) -> ContextPlan | None:
        """:func:`plan_context` under this scheduler's chunking settings."""
        return plan_context(
            request,
            budget_left,
            self.chunked_prefill,
            self.max_context_length,
            self.chunk_unit_size,
            sized_from,
        )

    def _prepare(self, request: Request) -> bool:
        return self._runs_if(self.manager.prepare_context(request), request)

    def _detect_deadlock(self, pending: list[Request], batch: ScheduledBatch) -> None:
        """The real ``_detect_deadlock``: raise on the ``stall_limit``-th consecutive pass that
        had candidates and made no progress."""
        if batch.made_progress:
            self.stalled_passes = 0
            return
        live = [
            r for r in self._active if r.state in LIVE_STATES and r.request_id not in self._inflight
        ]
        num_generation = sum(1 for r in live if r.is_context_finished)
        if num_generation == 0 and not pending:
            self.stalled_passes = 0  # legitimately idle
            return
        self.stalled_passes += 1
        if self.stalled_passes >= self.stall_limit:
            raise SchedulerDeadlock(num_generation, len(pending), self.stalled_passes)

    def __repr__(self) -> str:
        return (
            f"Scheduler(admission={self.admission!r}, max_num_tokens={self.max_num_tokens}, "
            f"max_batch_size={self.max_batch_size}, chunked_prefill={self.chunked_prefill})"
        )
