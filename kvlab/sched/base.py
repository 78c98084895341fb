"""SchedulerBase: what every scheduler owes the executor loop (kvlab.run.simulation.Engine):
``submit`` the arrivals, ``schedule`` one batch per step, ``finish`` what completed. The shared
bookkeeping lives here: the requests in arrival order, one state each and the counts per state,
freeing a cache, a recompute pause, and the invariants tying the states to the manager's caches.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kvlab.core.cause import Cause, Reason
from kvlab.core.checks import check_bools, check_instance, check_param
from kvlab.core.manager import KVCacheManager
from kvlab.core.request import LIVE_STATES, REQUEST_STATES, Request, RequestState
from kvlab.sched.admission import Verdict


@dataclass(slots=True)
class ScheduledBatch:
    """What one pass decided (the real SchedulerOutput). A context request's chunk is its
    ``context_chunk_size``."""

    context_requests: list[Request] = field(default_factory=list)
    generation_requests: list[Request] = field(default_factory=list)
    #: suspended this pass (evicted, or self-suspended)
    paused_requests: list[Request] = field(default_factory=list)
    #: cache freed this pass; their context (prompt + generated tokens) restarts later
    recompute_paused_requests: list[Request] = field(default_factory=list)
    fitting_disagg_gen_init_requests: list[Request] = field(default_factory=list)
    #: aborted by SGLang (a retraction that found nothing left, or a prompt turned away): state
    #: "rejected"
    aborted_requests: list[Request] = field(default_factory=list)
    #: context rows of the batch that only carried such an abort, never executed
    num_aborted_context_rows: int = 0
    #: decode rows of such an abort not yet processed (SGLang's overlap loop), never executed
    num_aborted_generation_rows: int = 0
    num_tokens: int = 0
    #: the beam width of the generation requests scheduled (0 before the first)
    beam_width: int = 0
    #: the prefix-aware skip deferred a first chunk this pass: progress, though nothing ran
    deferred_behind_contributor: bool = False
    #: [kvlab] the requests this pass refused, in its order (each counts it in ``num_refusals``)
    refused_requests: list[Request] = field(default_factory=list)

    def refuse(self, request: Request) -> None:
        request.num_refusals += 1
        self.refused_requests.append(request)

    @property
    def made_progress(self) -> bool:
        return bool(
            self.context_requests
            or self.generation_requests
            or self.paused_requests
            or self.recompute_paused_requests
            or self.fitting_disagg_gen_init_requests
            or self.aborted_requests
            or self.deferred_behind_contributor
        )


class LateResults:
    """An engine that processes each batch's results only after it has scheduled the next one
    (vLLM's AsyncScheduler behind ``EngineCore.step_with_batch_queue``, SGLang's
    ``event_loop_overlap``). kvlab's executor counts a batch's tokens as it runs it, so at the
    next ``schedule()`` a request of the last batch that sampled has one token the engine has not
    processed: its token is *in flight*. A request whose last token is in flight has not
    finished for the engine: the scheduler holds its finish here and processes it after its
    next pass. A scheduler keeps one, calls :meth:`open` at the top of ``schedule()``, takes the
    held finishes with :meth:`take_finished` where the engine processes the last batch, and
    ends the pass with :meth:`push`."""

    def __init__(self) -> None:
        self._batch: list[tuple[Request, int]] = []  # the last batch: (request, its tokens then)
        self._finished: list[Request] = []
        #: the last batch's requests that sampled a token, in the batch's order
        self.sampled: list[Request] = []
        self._in_flight: set[str] = set()

    def open(self) -> list[Request]:
        """The start of a pass: the last batch's requests that sampled (:attr:`sampled`)."""
        self.sampled = [
            request for request, tokens in self._batch if request.num_generated > tokens
        ]
        self._in_flight = {request.request_id for request in self.sampled}
        return self.sampled

    def in_flight(self, request: Request) -> int:
        """1 while the request's token of the last batch is not processed, else 0."""
        return int(request.request_id in self._in_flight)

    def drop(self, request: Request) -> None:
        """The engine never processes the request's token in flight (SGLang retracting it):
        the token is taken back."""
        if request.request_id in self._in_flight:
            self._in_flight.discard(request.request_id)
            request.num_generated -= 1

    def hold_finish(self, request: Request) -> None:
        """The request's last token ran: its finish waits for the batch to be processed."""
        self._finished.append(request)

    def take_finished(self) -> list[Request]:
        """The finishes held since the last call, in the order they came."""
        finished, self._finished = self._finished, []
        return finished

    @property
    def batch(self) -> list[Request]:
        """The last batch's requests, in its order."""
        return [request for request, _ in self._batch]

    def push(self, requests: list[Request]) -> None:
        """The end of a pass: the batch of ``requests`` is the one whose results wait now."""
        self._batch = [(request, request.num_generated) for request in requests]
        self._in_flight = set()


def check_plain_request(request: Request, peer: str) -> None:
    """ValueError for what the real engines' peers (``peer``: "vLLM", "SGLang") model not:
    draft tokens, beam search, disaggregated generation, a cache salt."""
    if request.num_draft_tokens or request.beam_width != 1 or request.disagg_generation_init:
        raise ValueError(
            f"request {request.request_id!r}: kvlab's {peer} peer and backend model no "
            "draft tokens, beam search or disaggregated generation; give it "
            "num_draft_tokens=0, beam_width=1, disagg_generation_init=False"
        )
    if request.cache_salt is not None:
        raise ValueError(
            f"request {request.request_id!r}: cache_salt must be None for kvlab's {peer} peer "
            f"and backend, got {request.cache_salt!r:.40}: they hash prompts without a salt "
            "(only TensorRT-LLM's block reuse is scoped by it)"
        )


class SchedulerBase:
    """The executor's side of a scheduler over ``manager``: subclasses define ``schedule()``
    and ``_verdict(request)``, the checks at arrival."""

    def __init__(self, manager: KVCacheManager, max_batch_size: int, debug: bool = False):
        self.manager = check_instance("manager", manager, KVCacheManager)
        check_bools(debug=debug)
        self.max_batch_size = check_param("max_batch_size", max_batch_size)
        self.debug = debug
        self.iteration = 0
        #: consecutive passes without progress (only the V2 loop detects stalls)
        self.stalled_passes = 0
        self.counts = dict.fromkeys(REQUEST_STATES, 0)
        self._active: list[Request] = []  # admitted requests, arrival order; pruned lazily
        self._submitted: list[Request] = []
        self._submitted_ids: set[str] = set()
        self._has_retired = False

    @property
    def max_num_active_requests(self) -> int | None:
        """How many requests the executor hands over at once (None: all of them)."""
        return self.max_batch_size

    @property
    def active_requests(self) -> tuple[Request, ...]:
        """The live requests (waiting, running, suspended) in arrival order."""
        return tuple(r for r in self._active if r.state in LIVE_STATES)

    @property
    def submitted_requests(self) -> tuple[Request, ...]:
        return tuple(self._submitted)

    def submit(self, request: Request) -> Verdict:
        """Take an arriving request through ``_verdict``; a rejected request gets state
        "rejected" and the verdict's reason."""
        check_instance("request", request, Request)
        if request.request_id in self._submitted_ids:
            raise ValueError(f"request_id {request.request_id!r} was already submitted")
        if request.state is not RequestState.WAITING:
            raise ValueError(
                f"request {request.request_id!r} is {request.state!r}; submit a fresh "
                "Request (dataclasses.replace(request) makes one)"
            )
        if (
            request.context_current_position or request.num_generated
        ) and not request.disagg_generation_init:
            raise ValueError(
                f"request {request.request_id!r}: a submitted request has computed "
                "nothing yet (the engine computes its context): context_current_position "
                f"and num_generated must be 0, got {request.context_current_position} "
                f"and {request.num_generated}"
            )
        verdict = self._verdict(request)
        self._submitted_ids.add(request.request_id)
        self._submitted.append(request)
        self.counts[RequestState.WAITING] += 1
        if verdict.admitted:
            self._active.append(request)
            self._enqueue(request)
        else:
            self._set_state(request, RequestState.REJECTED)
            reason = verdict.reason
            if not isinstance(reason, Reason):  # a policy's own words
                reason = Reason(Cause.REJECTED_BY_POLICY, message=str(reason or ""))
            request.reason = reason
        return verdict

    def _verdict(self, request: Request) -> Verdict:
        raise NotImplementedError

    def _enqueue(self, request: Request) -> None:
        """An admitted request joins the scheduler's own queue (if it keeps one)."""

    def schedule(self) -> ScheduledBatch:
        raise NotImplementedError

    def batch_done(self) -> None:
        """The last batch ran and its requests' tokens were counted (a hook for what an engine
        does with the results beyond finishing requests; nothing by default)."""

    def finish(self, request: Request) -> None:
        """A request generated its last token: free its cache and retire it."""
        self.manager.free(request)
        self._set_state(request, RequestState.FINISHED)
        self._has_retired = True

    def forget(self, requests: Iterable[Request]) -> None:
        """Drop ended requests from the record of submissions (and their counts): a long replay
        keeps only what is live (kvlab.run.simulation.Engine.release_ended)."""
        gone = {r.request_id for r in requests}
        self._submitted = [r for r in self._submitted if r.request_id not in gone]
        self._submitted_ids -= gone
        for request in requests:
            assert request.state not in LIVE_STATES, request.request_id
            self.counts[request.state] -= 1

    def _prune_retired(self) -> None:
        if self._has_retired:
            self._active = [r for r in self._active if r.state in LIVE_STATES]
            self._has_retired = False

    def _prune_half_retired(self) -> None:
        """Drop ended requests from the active list once they are half of it: for a scheduler
        that walks queues of its own, not the list (the peers)."""
        counts = self.counts
        live = counts[RequestState.WAITING] + counts[RequestState.RUNNING]
        if 2 * (live + counts[RequestState.SUSPENDED]) < len(self._active):
            self._active = [r for r in self._active if r.state in LIVE_STATES]

    def _set_state(self, request: Request, state: RequestState) -> None:
        self.counts[request.state] -= 1
        self.counts[state] += 1
        request.state = state

    def _runs_if(self, active: bool, request: Request) -> bool:
        """The manager answered ``active``: the request holds an active cache, so it runs."""
        if active and request.state is not RequestState.RUNNING:
            self._set_state(request, RequestState.RUNNING)
        return active

    def _grow(self, request: Request, num_tokens: int) -> None:
        """Grow the request's cache (made first, and the request running, if it has none) by
        ``num_tokens`` the caller counted free."""
        cache = self.manager.caches.get(request.request_id)
        if cache is None:
            cache = self.manager.create_cache(request.request_id)
            self._set_state(request, RequestState.RUNNING)
        granted = self.manager.grow_each([cache], num_tokens)
        assert granted, f"{request.request_id!r}: the free pages counted were refused"

    def _release(self, request: Request) -> None:
        """Free the request's cache, if it has one, wherever its pages are."""
        cache = self.manager.caches.get(request.request_id)
        if cache is None:
            return
        self.manager.free(cache)
        if request.prepopulated_prompt_len:  # the reused prefix goes with the cache
            if request.is_first_context_chunk:
                request.context_current_position = 0
            request.prepopulated_prompt_len = 0
        self._set_state(request, RequestState.WAITING)

    def _recompute_pause(self, request: Request) -> None:
        """Free the cache; the context restarts later as prompt + generated tokens (TensorRT-LLM's
        ``reset_for_recompute``, vLLM's recompute preemption)."""
        self._release(request)
        request.recomputed_tokens = request.num_generated
        request.context_current_position = 0
        request.num_recomputes += 1

    def check_invariants(self) -> None:
        """Raise AssertionError unless: the manager's pages are conserved and its rows
        consistent; every submitted request is in exactly one state and the state counts
        add up; a request holds an active cache iff "running", a suspended one iff
        "suspended"; no cache outlives its request."""
        self.manager.check_invariants()
        caches = self.manager.caches
        seen = dict.fromkeys(REQUEST_STATES, 0)
        for request in self._submitted:
            assert request.state in REQUEST_STATES, (
                f"{request.request_id!r}: state {request.state!r}"
            )
            seen[request.state] += 1
            cache = caches.get(request.request_id)
            if request.state is RequestState.RUNNING:
                assert cache is not None and cache.is_active, (
                    f"{request.request_id!r} is running without an active cache"
                )
            elif request.state is RequestState.SUSPENDED:
                assert cache is not None and cache.suspended, (
                    f"{request.request_id!r} is suspended without a suspended cache"
                )
            else:
                assert cache is None, f"{request.request_id!r} is {request.state} yet holds a cache"
        assert seen == self.counts, f"state counts drifted: counted {seen}, kept {self.counts}"
        assert sum(seen.values()) == len(self._submitted)
        live = [r.request_id for r in self._active if r.state in LIVE_STATES]
        assert len(live) == len(set(live)) == sum(seen[s] for s in LIVE_STATES), (
            "a live request is missing from, or twice in, the active list"
        )
        strays = set(caches) - set(live)
        assert not strays, f"caches without a live request: {strays}"
