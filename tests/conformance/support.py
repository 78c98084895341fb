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
from typing import Iterable, List, Optional

from kvlab import Engine, ScheduledBatch, KVCacheManager, KVGeometry, MaxSeqLenClampWarning, Request, Scheduler

#: Tokens a conformance request may still generate: never reached in these short runs.
NEVER_DONE = 1 << 20


def tiny_geometry(tokens_per_block: int = 64) -> KVGeometry:
    """1 layer x 1 KV head x head_dim 1 in fp16: 4 bytes a token, so pools stay small."""
    return KVGeometry(num_layers=1, num_kv_heads=1, head_dim=1, dtype="float16",
                      tokens_per_block=tokens_per_block)


def ids(requests: Iterable[Request]) -> List[str]:
    return [r.request_id for r in requests]


class Bench:
    """A manager of ``num_blocks`` pages, a Scheduler over it and the executor loop
    (:class:`kvlab.Engine`) that runs its batches.

    Defaults follow the upstream test factories: ``tokens_per_block=64``,
    ``max_batch_size=100``, ``max_num_tokens=1024``. ``can_evict`` gives the manager a tier
    below the GPU as large as the pool (the upstream mock's ``can_evict``; without it
    ``host_cache_size=0``); ``slots`` is the manager's max_batch_size (its page-index slots),
    the scheduler's ``max_batch_size`` unless given. Other keyword arguments go to the
    Scheduler.
    """

    def __init__(self, *, tokens_per_block: int = 64, num_blocks: int = 4096,
                 max_batch_size: int = 100, max_num_tokens: int = 1024,
                 max_seq_len: Optional[int] = None, slots: Optional[int] = None,
                 can_evict: bool = False, admission: str = "none",
                 page_index_policy: str = "clamped", **scheduler_kwargs):
        geometry = tiny_geometry(tokens_per_block)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MaxSeqLenClampWarning)
            self.manager = KVCacheManager(
                geometry, quota_bytes=num_blocks * geometry.bytes_per_block,
                max_seq_len=max_seq_len or num_blocks * tokens_per_block,
                max_batch_size=slots or max_batch_size, page_index_policy=page_index_policy,
                host_cache_size=None if can_evict else 0)
        self.scheduler = Scheduler(self.manager, admission=admission,
                                   max_num_tokens=max_num_tokens, max_batch_size=max_batch_size,
                                   **scheduler_kwargs)
        self.engine = Engine(self.scheduler)
        self._held: List[int] = []

    # -- requests ------------------------------------------------------------------------
    def context(self, request_id: str, length: int, *, draft: int = 0,
                max_new_tokens: int = NEVER_DONE) -> Request:
        """A context request of ``length`` prompt tokens, submitted at the next pass; returns
        the live Request the scheduler sees."""
        (request,) = self.engine.add_requests([Request(
            request_id, length, max_new_tokens, arrival_step=self.engine.step,
            num_draft_tokens=draft)])
        return request

    def generation(self, request_id: str, prompt_len: int = 64, *, draft: int = 0) -> Request:
        """A request in generation: its context is scheduled and run in a pass of its own,
        so it holds its context's pages. Build generation requests before any pending
        context, since that pass schedules whatever else is pending too."""
        with self._budget(1 << 30, 1 << 20):
            request = self.context(request_id, prompt_len, draft=draft)
            batch = self.schedule()
        assert any(r is request for r in batch.context_requests), (
            f"set-up: {request_id!r}'s context was not scheduled")
        assert request.is_context_finished, f"set-up: {request_id!r} did not finish its context"
        return request

    def started_context(self, request_id: str, length: int, first_chunk: int) -> Request:
        """A chunked context past its first chunk of ``first_chunk`` tokens (a "started"
        request, hence evictable). Needs a chunked scheduler; built like :meth:`generation`."""
        with self._budget(first_chunk, 1 << 20):
            request = self.context(request_id, length)
            batch = self.schedule()
        assert any(r is request for r in batch.context_requests), (
            f"set-up: {request_id!r}'s first chunk was not scheduled")
        assert request.context_current_position == first_chunk
        return request

    @contextlib.contextmanager
    def _budget(self, max_num_tokens: int, max_batch_size: int):
        """The set-up pass's own budgets (the test's are restored after it)."""
        scheduler = self.scheduler
        saved = scheduler.max_num_tokens, scheduler.max_num_requests
        scheduler.max_num_tokens, scheduler.max_num_requests = max_num_tokens, max_batch_size
        try:
            yield
        finally:
            scheduler.max_num_tokens, scheduler.max_num_requests = saved

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
        self.manager.pool.free(self._held)
        self._held = []

    # -- passes --------------------------------------------------------------------------
    def schedule(self):
        """One scheduling pass, executed as the executor loop executes it; returns the batch
        (empty when nothing is live, e.g. when the front door rejected every request: check
        ``request.state``). A PageIndexTooShort or SchedulerDeadlock is raised again here."""
        if not self.engine.iterate():
            return ScheduledBatch()
        if self.engine.error is not None:
            raise self.engine.error
        return self.engine.last_batch
