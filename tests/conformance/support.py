"""Set-up shared by the conformance tests: a real pool, manager, scheduler and executor loop,
brought into the states that TensorRT-LLM's own tests script with mocks.

The upstream tests (NVIDIA/TensorRT-LLM, tests/unittest/_torch/executor/...) mock the manager
and decide each allocation's answer by hand. kvlab has a real pool, so a :class:`Bench` makes
the same answer happen physically: a generation request really holds the pages of its
context, an allocation really fails because an outside tenant (:meth:`Bench.hold`) holds the
pages it would need, a request is really "started" because its first chunk really ran.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Sequence

from kvlab import (
    Engine,
    KVCacheManager,
    KVGeometry,
    MaxSeqLenClampWarning,
    Request,
    ScheduledBatch,
    Scheduler,
)
from kvlab.core.prefix_cache import chain_hashes

#: Tokens a conformance request may still generate: never reached in these short runs.
NEVER_DONE = 1 << 20


def tiny_geometry(tokens_per_block: int = 64) -> KVGeometry:
    """1 layer x 1 KV head x head_dim 1 in fp16: 4 bytes a token, so pools stay small."""
    return KVGeometry(
        num_layers=1, num_kv_heads=1, head_dim=1, dtype="float16", tokens_per_block=tokens_per_block
    )


def ids(requests: Iterable[Request]) -> list[str]:
    """The requests' ids, in order."""
    return [r.request_id for r in requests]


def num_fitting(batch: ScheduledBatch) -> int:
    """Upstream's ``SchedulerOutput.num_fitting_requests``: context plus generation requests
    (DISAGG_GENERATION_INIT requests not included); kvlab's ScheduledBatch has no such field."""
    return len(batch.context_requests) + len(batch.generation_requests)


class Bench:
    """A manager of ``num_blocks`` pages, a Scheduler over it and the executor loop
    (:class:`kvlab.Engine`) that runs its batches.

    Defaults follow the upstream test factories: ``tokens_per_block=64``,
    ``max_batch_size=100``, ``max_num_tokens=1024``. ``can_evict`` gives the manager the
    automatic host tier below the GPU (as large as the pool: the upstream mock's
    ``can_evict``); ``host_blocks`` a tier of exactly that many pages; with neither,
    ``host_cache_size=0`` (no tier). ``slots`` is the manager's max_batch_size (its page-index
    slots), the scheduler's ``max_batch_size`` unless given. ``enable_block_reuse`` and
    ``block_reuse_policy`` are the manager's (reuse on, "all_reusable": the real defaults).
    Other keyword arguments go to the Scheduler.

    Requests given ``tokens`` carry their prompt's identity (one hash a token), so block reuse
    can match them; without, a prompt shares nothing.
    """

    def __init__(
        self,
        *,
        tokens_per_block: int = 64,
        num_blocks: int = 4096,
        max_batch_size: int = 100,
        max_num_tokens: int = 1024,
        max_seq_len: int | None = None,
        slots: int | None = None,
        can_evict: bool = False,
        host_blocks: int | None = None,
        admission: str = "none",
        page_index_policy: str = "clamped",
        enable_block_reuse: bool = True,
        block_reuse_policy: str = "all_reusable",
        **scheduler_kwargs,
    ):
        geometry = tiny_geometry(tokens_per_block)
        if host_blocks is not None:
            host_cache_size = host_blocks * geometry.bytes_per_block
        else:
            host_cache_size = None if can_evict else 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MaxSeqLenClampWarning)
            self.manager = KVCacheManager(
                geometry,
                quota_bytes=num_blocks * geometry.bytes_per_block,
                max_seq_len=max_seq_len or num_blocks * tokens_per_block,
                max_batch_size=slots or max_batch_size,
                page_index_policy=page_index_policy,
                host_cache_size=host_cache_size,
                enable_block_reuse=enable_block_reuse,
                block_reuse_policy=block_reuse_policy,
            )
        self.scheduler = Scheduler(
            self.manager,
            admission=admission,
            max_num_tokens=max_num_tokens,
            max_batch_size=max_batch_size,
            **scheduler_kwargs,
        )
        # upstream's tests hand the scheduler whatever active list they build: no executor limit
        self.engine = Engine(self.scheduler, max_num_active_requests=1 << 30)
        self._held: list[int] = []
        self._tenants = 0

    # -- requests ------------------------------------------------------------------------
    def context(
        self,
        request_id: str,
        length: int | None = None,
        *,
        draft: int = 0,
        max_new_tokens: int = NEVER_DONE,
        beam: int = 1,
        tokens: Sequence[int] | None = None,
    ) -> Request:
        """A context request of ``length`` prompt tokens, or of the prompt ``tokens`` (``beam``:
        its beam width), submitted at the next pass; returns the live Request the scheduler
        sees."""
        (request,) = self.engine.add_requests(
            [
                self._request(
                    request_id,
                    length,
                    tokens,
                    max_new_tokens=max_new_tokens,
                    num_draft_tokens=draft,
                    beam_width=beam,
                )
            ]
        )
        return request

    def _request(
        self,
        request_id: str,
        length: int | None,
        tokens: Sequence[int] | None,
        max_new_tokens: int = NEVER_DONE,
        **kwargs,
    ) -> Request:
        if tokens is not None:
            length = len(tokens)
            kwargs.update(prefix_hashes=chain_hashes(tokens), tokens_per_hash=1)
        return Request(request_id, length, max_new_tokens, arrival_step=self.engine.step, **kwargs)

    def cached(self, request_id: str, tokens: Sequence[int]) -> None:
        """A request of the prompt ``tokens`` runs its context alone in a set-up pass and
        finishes: its prompt's pages stay committed in the prefix cache, held by no one."""
        with self.set_up_budget(1 << 30, 1 << 20):
            request = self.context(request_id, tokens=tokens, max_new_tokens=1)
            self.schedule()
        assert request.state == "finished", f"set-up: {request_id!r} did not finish"

    def disagg(self, request_id: str, prompt_len: int = 100) -> Request:
        """A DISAGG_GENERATION_INIT request of a ``prompt_len``-token transferred context
        (upstream's ``make_disagg_request``), submitted at the next pass."""
        (request,) = self.engine.add_requests(
            [
                Request(
                    request_id,
                    prompt_len,
                    NEVER_DONE,
                    arrival_step=self.engine.step,
                    disagg_generation_init=True,
                )
            ]
        )
        return request

    def submit_past_front_door(
        self,
        request_id: str,
        length: int | None = None,
        *,
        draft: int = 0,
        tokens: Sequence[int] | None = None,
    ) -> Request:
        """A context request that reaches the pass although its prompt is over the token
        budget: the front door (``Scheduler.submit``, the LLM API's check) sees no budget, the
        pass sees the test's."""
        scheduler = self.scheduler
        saved = scheduler.max_num_tokens
        scheduler.max_num_tokens = None
        try:
            request = self._request(request_id, length, tokens, num_draft_tokens=draft)
            assert scheduler.submit(request).admitted
        finally:
            scheduler.max_num_tokens = saved
        return request

    def generation(
        self, request_id: str, prompt_len: int = 64, *, draft: int = 0, beam: int = 1
    ) -> Request:
        """A request in generation: its context is scheduled and run in a pass of its own,
        so it holds its context's pages. Build generation requests before any pending
        context, since that pass schedules whatever else is pending too (and steps the
        generation requests already there)."""
        (request,) = self.generations(request_id, prompt_len=prompt_len, draft=draft, beam=beam)
        return request

    def generations(
        self, *request_ids: str, prompt_len: int = 64, draft: int = 0, beam: int = 1
    ) -> list[Request]:
        """Requests in generation whose contexts run together in one set-up pass (see
        :meth:`generation`)."""
        with self.set_up_budget(1 << 30, 1 << 20):
            requests = [self.context(i, prompt_len, draft=draft, beam=beam) for i in request_ids]
            batch = self.schedule()
        for request in requests:
            assert any(r is request for r in batch.context_requests), (
                f"set-up: {request.request_id!r}'s context was not scheduled"
            )
            assert request.is_context_finished and request.state == "running", (
                f"set-up: {request.request_id!r} did not finish its context"
            )
        return requests

    def generations_at_page_end(
        self, *request_ids: str, drafts: dict | None = None
    ) -> list[Request]:
        """Generation requests built one by one, each with exactly one full page when the
        test's pass comes, so that its step there needs one new page (two with 64 draft
        tokens): a request is stepped once by each build after it."""
        drafts = drafts or {}
        tokens_per_block = self.manager.tokens_per_block
        n = len(request_ids)
        return [
            self.generation(rid, tokens_per_block - (n - 1 - i), draft=drafts.get(rid, 0))
            for i, rid in enumerate(request_ids)
        ]

    def generation_behind(self, request_id: str, prompt_len: int = 64) -> Request:
        """:meth:`generation` while the DISAGG_GENERATION_INIT requests already there stay
        pending: in its set-up pass only the pages of its own context are free."""
        self.hold_all_but(self.manager.geometry.blocks_for_tokens(prompt_len))
        try:
            return self.generation(request_id, prompt_len)
        finally:
            self.release_held()

    def started_context(
        self,
        request_id: str,
        length: int | None,
        first_chunk: int,
        *,
        tokens: Sequence[int] | None = None,
    ) -> Request:
        """A chunked context past a first chunk of exactly ``first_chunk`` tokens (a "started"
        request, hence evictable), run in a set-up pass of its own whose chunk unit is 1 and
        whose token budget is that chunk plus the steps of the requests already generating.
        Needs a chunked scheduler."""
        scheduler = self.scheduler
        steps = sum(
            1 + r.num_draft_tokens for r in scheduler.active_requests if r.is_context_finished
        )
        saved = scheduler.chunk_unit_size
        scheduler.chunk_unit_size = 1
        try:
            with self.set_up_budget(first_chunk + steps, 1 << 20):
                request = self.context(request_id, length, tokens=tokens)
                batch = self.schedule()
        finally:
            scheduler.chunk_unit_size = saved
        assert any(r is request for r in batch.context_requests), (
            f"set-up: {request_id!r}'s first chunk was not scheduled"
        )
        assert request.context_current_position == first_chunk
        return request

    def arrange(self, *request_ids: str) -> None:
        """Put the active list in the order upstream's test hands it to the pass (kvlab's list
        is in arrival order, and a test builds its requests in the order their set-up needs)."""
        active = self.scheduler._active
        by_id = {r.request_id: r for r in active}
        assert sorted(request_ids) == sorted(by_id), f"set-up: the active list is {list(by_id)}"
        active[:] = [by_id[i] for i in request_ids]

    @contextlib.contextmanager
    def set_up_budget(self, max_num_tokens: int = 1 << 30, max_num_requests: int = 1 << 20):
        """Budgets of a set-up pass (the test's are restored after it)."""
        scheduler = self.scheduler
        saved = scheduler.max_num_tokens, scheduler.max_num_requests
        scheduler.max_num_tokens, scheduler.max_num_requests = max_num_tokens, max_num_requests
        try:
            yield
        finally:
            scheduler.max_num_tokens, scheduler.max_num_requests = saved

    def step_pages(self, request: Request) -> int:
        """New pages the request's next generation step needs (one token plus its drafts)."""
        cache = self.manager.get_cache(request)
        needed = self.manager.geometry.blocks_for_tokens(
            cache.capacity + 1 + request.num_draft_tokens
        )
        return needed - cache.num_blocks

    # -- pool pressure -------------------------------------------------------------------
    def hold(self, num_blocks: int) -> None:
        """An outside tenant takes ``num_blocks`` free pages (what makes an allocation fail)."""
        pages = self.manager.pool.allocate(num_blocks)
        assert pages is not None, f"set-up: only {self.manager.free_blocks} pages are free"
        self._held.extend(pages)

    def hold_all_but(self, num_blocks: int) -> None:
        """Leave exactly ``num_blocks`` pages free."""
        self.hold(self.manager.free_blocks - num_blocks)

    def release_held(self) -> None:
        """The outside tenant gives back the pages :meth:`hold` took."""
        self.manager.pool.free(self._held)
        self._held = []

    def hold_slots(self) -> None:
        """An outside tenant takes every free page-index slot (what makes prepare_context
        fail, as the real IndexMapper does when it has no slot)."""
        table = self.manager.page_index
        while table.free_slots:
            table.acquire_slot()

    def fill_host_tier(self) -> int:
        """Fill the tier below the GPU with outside tenants' pages, physically: a tenant's
        cache takes free pages and is suspended (its pages stay on the GPU), then a real
        allocation that needs those pages moves them down (``HostTier.make_room``) and gives
        its pages back. Returns how many pages the tenants hold there."""
        manager = self.manager
        tier = manager.host_tier
        filled = 0
        while tier.free_blocks:
            count = min(tier.free_blocks, manager.free_blocks)
            assert count > 0, "set-up: no free page left to move down"
            cache = manager.create_cache(f"outside-tenant-{self._tenants}")
            self._tenants += 1
            assert cache.resize(count * manager.tokens_per_block)
            cache.suspend()
            pages = manager.allocate_pages(manager.free_blocks + count)
            assert pages is not None and cache.suspended_blocks == count, (
                "set-up: the tenant's pages did not move down"
            )
            manager.pool.free(pages)
            filled += count
        return filled

    def allocation_attempts(self) -> int:
        """Page allocations tried on the pool so far, granted or refused (upstream counts
        ``try_allocate_generation`` calls on its mock)."""
        counters = self.manager.pool.counters
        return counters.allocations + counters.failed_allocations

    # -- passes --------------------------------------------------------------------------
    def schedule(self):
        """One scheduling pass, executed as the executor loop executes it; returns the batch. A
        PageIndexTooShort or SchedulerDeadlock is raised again here. The scheduler is always
        called, as upstream's tests call it with whatever list they built: when nothing is live
        (the executor loop would not call it) the pass runs over the scheduler's active list as
        it stands, which still holds the requests finished in the pass before."""
        if not self.engine.iterate():
            return self.scheduler.schedule()
        if self.engine.error is not None:
            raise self.engine.error
        return self.engine.last_batch
