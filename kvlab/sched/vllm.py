"""VllmScheduler: vLLM 0.34.0's scheduler over kvlab's KV cache manager (the vLLM peer):
``Scheduler.schedule`` (vllm/v1/core/sched/scheduler.py), ``KVCacheManager.allocate_slots``
(vllm/v1/core/kv_cache_manager.py), the start-up checks (vllm/config/scheduler.py,
vllm/v1/core/kv_cache_planning.py) and the front door (vllm/v1/engine/input_processor.py), with
vLLM's messages; docs/REFERENCE.md §6a. With ``enable_prefix_caching``, vLLM's prefix cache
(kvlab.sched.vllm_prefix_cache) over the prompts' token ids of kvlab.core.prompt_tokens. With
``async_scheduling``, the ``AsyncScheduler`` (vllm/v1/core/sched/async_scheduler.py) as
``EngineCore.step_with_batch_queue`` steps it: each batch is processed after the next one is
scheduled. kvlab's executor appends a batch's tokens as it runs, so a request's tokens here
already count vLLM's ``num_output_placeholders``. Not modelled (the conformance runs keep them
off): speculative decoding, priorities, ``long_prefill_token_threshold``, KV connectors, LoRA,
encoders. No stall detector, as in vLLM.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvlab.core.cause import Cause, Reason
from kvlab.core.checks import check_bools, check_float, check_instance, check_int, store_checked
from kvlab.core.geometry import KVGeometry
from kvlab.core.manager import KVCacheManager
from kvlab.core.memory import GIB
from kvlab.core.prefix_cache import chain_hashes
from kvlab.core.prompt_tokens import SAMPLED_TOKEN_ID, prompt_token_ids
from kvlab.core.request import Request, RequestState
from kvlab.sched.admission import ADMIT, Verdict
from kvlab.sched.base import LateResults, ScheduledBatch, SchedulerBase, check_plain_request
from kvlab.sched.vllm_prefix_cache import VllmPrefixCache

if TYPE_CHECKING:
    import torch

#: The version whose scheduler this module follows (and kvlab.backends.vllm runs).
VLLM_VERSION = "0.34.0"
#: vLLM's hint after a KV memory refusal (``_more_kv_cache_memory_hint``, no extensible cache).
MEMORY_HINT = (
    "Try increasing `gpu_memory_utilization` when initializing the engine (this flag "
    "also controls CPU memory reservation on the CPU backend, despite its name)."
)
CONSERVING_MEMORY = (
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)


def format_gib(num_bytes: int) -> str:
    """vLLM's ``format_gib`` (vllm/utils/mem_utils.py): GiB rounded to 2 decimals."""
    return f"{round(num_bytes / GIB, 2)}"


@dataclass(frozen=True)
class VllmEngineArgs:
    """The engine arguments vLLM's scheduler reads, by vLLM's names, with ``SchedulerConfig``'s
    defaults. ``geometry.tokens_per_block`` is vLLM's ``block_size``; ``num_gpu_blocks`` the
    pool the scheduler gets, ``startup_num_gpu_blocks`` the one the start-up check saw (None:
    the same). ``enable_prefix_caching`` is vLLM's automatic prefix caching, which vLLM
    defaults to True (vllm/config/cache.py). ``async_scheduling`` runs vLLM's
    ``AsyncScheduler`` behind a batch queue of 2; vLLM 0.34 resolves it to True for a
    single-GPU decoder (vllm/config/vllm.py). kvlab defaults both as vLLM 0.34 does: on."""

    geometry: KVGeometry
    num_gpu_blocks: int
    max_model_len: int
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    scheduler_reserve_full_isl: bool = True
    watermark: float = 0.0
    startup_num_gpu_blocks: int | None = None
    enable_prefix_caching: bool = True
    async_scheduling: bool = True

    def __post_init__(self) -> None:
        check_instance("geometry", self.geometry, KVGeometry)
        store_checked(self, "num_gpu_blocks", check_int, low=1, high=1 << 24)
        store_checked(self, "max_model_len", check_int, low=1, high=1 << 30)
        store_checked(self, "max_num_seqs", check_int, low=1, high=1 << 16)
        store_checked(self, "max_num_batched_tokens", check_int, low=1, high=1 << 30)
        check_bools(
            enable_chunked_prefill=self.enable_chunked_prefill,
            scheduler_reserve_full_isl=self.scheduler_reserve_full_isl,
            enable_prefix_caching=self.enable_prefix_caching,
            async_scheduling=self.async_scheduling,
        )
        store_checked(self, "watermark", check_float, low=0.0, high=1.0, high_open=True)
        if self.startup_num_gpu_blocks is not None:
            store_checked(self, "startup_num_gpu_blocks", check_int, low=1, high=1 << 24)

    @property
    def block_size(self) -> int:
        return self.geometry.tokens_per_block

    @property
    def startup_blocks(self) -> int:
        """The pool vLLM's start-up check saw."""
        return self.startup_num_gpu_blocks or self.num_gpu_blocks

    def replace(self, **changes: Any) -> VllmEngineArgs:
        return dataclasses.replace(self, **changes)


def estimated_max_model_len(geometry: KVGeometry, num_gpu_blocks: int) -> int:
    """vLLM's ``estimate_max_model_len`` in closed form: every block but the null block."""
    return (num_gpu_blocks - 1) * geometry.tokens_per_block


def startup_error(args: VllmEngineArgs) -> str | None:
    """The message vLLM refuses to start with for ``args``, or None when it starts."""
    if not args.enable_chunked_prefill and args.max_num_batched_tokens < args.max_model_len:
        return (
            f"max_num_batched_tokens ({args.max_num_batched_tokens}) is smaller than "
            f"max_model_len ({args.max_model_len}). This effectively limits the maximum "
            "sequence length to max_num_batched_tokens and makes vLLM reject longer "
            "sequences. Please increase max_num_batched_tokens or decrease max_model_len."
        )
    if args.max_num_batched_tokens < args.max_num_seqs:
        return (
            f"max_num_batched_tokens ({args.max_num_batched_tokens}) must be greater than "
            f"or equal to max_num_seqs ({args.max_num_seqs})."
        )
    bytes_per_block = args.geometry.bytes_per_block
    available = (args.startup_blocks - 1) * bytes_per_block  # less the null block
    if available <= 0:
        return f"No available memory for the cache blocks. {MEMORY_HINT} {CONSERVING_MEMORY}"
    needed = args.geometry.blocks_for_tokens(args.max_model_len) * bytes_per_block
    if needed <= available:
        return None
    estimate = estimated_max_model_len(args.geometry, args.startup_blocks)
    estimated = (
        f"Based on the available memory, the estimated maximum model length is {estimate}. "
        if estimate > 0
        else ""
    )
    return (
        f"To serve at least one request with the model's max seq len ({args.max_model_len}), "
        f"({format_gib(needed)} GiB KV cache is needed, which is larger than the available "
        f"KV cache memory ({format_gib(available)} GiB). {estimated}{MEMORY_HINT} Decreasing "
        f"`max_model_len` also reduces what is needed. {CONSERVING_MEMORY}"
    )


def front_door_error(request: Request, max_model_len: int) -> str | None:
    """vLLM's refusal at arrival (``SamplingParams``, ``_validate_prompt_len``), or None."""
    prompt_len, max_tokens = request.prompt_len, request.max_new_tokens
    if max_tokens < 1:
        return (
            f"max_tokens must be at least 1, got {max_tokens}. "
            f"(parameter=max_tokens, value={max_tokens})"
        )
    if prompt_len > max_model_len:
        return (
            f"The decoder prompt (length {prompt_len}) is longer than the maximum "
            f"model length of {max_model_len}. Make sure that `max_model_len` is no smaller "
            "than the number of text tokens."
        )
    if prompt_len == max_model_len:
        return (
            f"The decoder prompt (length {prompt_len}) plus the number of requested "
            f"output tokens (at least 1) is longer than the maximum model length of "
            f"{max_model_len}. Make sure that `max_model_len` is no smaller than the number "
            "of text tokens (prompt + requested output tokens)."
        )
    return None


class VllmScheduler(SchedulerBase):
    """vLLM v1's scheduling loop on a real ``KVCacheManager`` of ``num_gpu_blocks`` pages on
    ``device``, page 0 held as the null block. Raises ValueError with vLLM's message where vLLM
    refuses to start."""

    def __init__(
        self, args: VllmEngineArgs, device: str | torch.device = "cpu", debug: bool = False
    ):
        check_instance("args", args, VllmEngineArgs)
        refusal = startup_error(args)
        if refusal is not None:
            raise ValueError(refusal)
        manager = KVCacheManager.expecting_clamp(
            args.geometry,
            args.num_gpu_blocks * args.geometry.bytes_per_block,
            args.max_model_len,
            max_batch_size=args.max_num_seqs,
            page_index_policy="configured",
            device=device,
            host_cache_size=0,
            enable_block_reuse=False,  # TensorRT-LLM's; vLLM's prefix cache is below
        )
        #: vLLM's cached blocks (None: prefix caching off), the manager's committed pages
        self.prefix_cache: VllmPrefixCache | None = None
        if args.enable_prefix_caching:
            self.prefix_cache = manager.prefix_cache = VllmPrefixCache(
                manager.pool, args.block_size
            )
        #: per request: its block hashes so far, and the prompt tokens after its last full block
        self._hashes: dict[str, tuple[list[int], list[int]]] = {}
        #: the requests that finished since the last step, with their cached blocks
        self._finished: list[tuple[Request, list[int]]] = []
        #: the last batch, processed after the next ``schedule()`` with async scheduling: a
        #: token in flight is vLLM's ``num_output_placeholders``, and a request whose last token
        #: is in flight keeps its blocks and slot until then
        self.late = LateResults()
        super().__init__(manager, args.max_num_seqs, debug)
        self.args = args
        self.max_model_len = args.max_model_len
        #: vLLM's null block: block 0, held back from the pool
        self.null_block = self.manager.hold_back(1)[0]
        self.watermark_blocks = int(args.watermark * args.num_gpu_blocks)
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()

    @property
    def max_num_active_requests(self) -> int | None:
        return None  # the engine queues every request itself

    def _verdict(self, request: Request) -> Verdict:
        check_plain_request(request, "vLLM")
        refusal = front_door_error(request, self.max_model_len)
        if refusal is not None:
            return Verdict(False, Reason(Cause.FRONT_DOOR, message=refusal))
        request.output_limit = min(request.max_new_tokens, self.max_model_len - request.prompt_len)
        return ADMIT

    def _enqueue(self, request: Request) -> None:
        self.waiting.append(request)
        if self.prefix_cache is not None:  # the Request's block hasher, on its prompt
            tokens, block_size = prompt_token_ids(request), self.args.block_size
            full = len(tokens) - len(tokens) % block_size
            self._hashes[request.request_id] = (
                list(chain_hashes(tokens[:full], block_size)),
                tokens[full:],
            )

    def forget(self, requests: Iterable[Request]) -> None:
        requests = list(requests)
        super().forget(requests)
        for request in requests:
            self._hashes.pop(request.request_id, None)

    def schedule(self) -> ScheduledBatch:
        """One ``Scheduler.schedule()``: the RUNNING requests in admission order, each the tokens
        it still needs within the token budget, preempting the last admitted (recompute, back to
        the queue's head) while ``allocate_slots`` refuses; then, only in a step that preempted
        nothing, the WAITING queue from its head while fewer than ``max_num_seqs`` run, each
        starting past its prefix-cache hit. Blocks are cached as they are allocated. With
        ``async_scheduling`` a request whose last token is in flight is skipped but keeps its
        slot and blocks, and the last batch is processed after this pass
        (:meth:`_update_from_output`)."""
        sampled = self.late.open()
        if len(self._finished) > 1:
            self._free_in_schedule_order()
        self._finished.clear()
        if self._has_retired:  # finished requests leave ``running`` (update_from_output)
            self.running = [r for r in self.running if r.state is RequestState.RUNNING]
            self._has_retired = False
        self._prune_half_retired()
        self.iteration += 1
        batch = ScheduledBatch()
        budget = self.args.max_num_batched_tokens
        preempted = batch.recompute_paused_requests
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            index += 1
            if request.num_generated >= request.output_limit:  # async: its last token in flight
                continue  # (scheduler.py, "Avoid scheduling an extra step"; or max_model_len)
            scheduled = self._schedule_running(request, budget, batch)
            if not scheduled and request.state is not RequestState.RUNNING:
                break  # it preempted itself
            budget -= scheduled
        # the WAITING queue from its head; a refused allocation blocks everyone behind it
        while not preempted and self.waiting and len(self.running) < self.max_batch_size:
            request = self.waiting[0]
            hits = self._cache_hit(request)  # it holds no block: all but the hit is to compute
            computed = len(hits) * self.args.block_size
            num_new = self._num_tokens(request) - computed
            if budget <= 0 or (not self.args.enable_chunked_prefill and num_new > budget):
                break
            num_new = min(num_new, budget)
            if not self._allocate(request, computed + num_new, admitting=True, hits=hits):
                batch.refuse(request)
                break
            self.running.append(self.waiting.popleft())
            if self.prefix_cache is not None:
                self._cache_blocks(request, computed + num_new)
            self._add_to_batch(batch, request, num_new)
            budget -= num_new
        batch.num_tokens = self.args.max_num_batched_tokens - budget
        if self.args.async_scheduling:
            self._update_from_output(sampled)
            self.late.push(batch.context_requests + batch.generation_requests)
        if self.debug:
            self.check_invariants()
        return batch

    def _schedule_running(self, request: Request, budget: int, batch: ScheduledBatch) -> int:
        """A running request's tokens this step, at most ``budget`` (0: none), preempting the
        last admitted while ``allocate_slots`` refuses them (itself last)."""
        computed = self._num_computed_tokens(request)
        num_new = min(
            self._num_tokens(request) - computed, budget, self.max_model_len - computed - 1
        )
        if num_new == 0:
            return 0
        while not self._allocate(request, computed + num_new, admitting=False):
            victim = self.running.pop()  # FCFS: the lowest priority is the last admitted
            self._recompute_pause(victim)
            self.waiting.appendleft(victim)
            batch.recompute_paused_requests.append(victim)
            if victim is request:
                return 0
        if self.prefix_cache is not None:
            self._cache_blocks(request, computed + num_new)
        self._add_to_batch(batch, request, num_new)
        return num_new

    def finish(self, request: Request) -> None:
        if self.args.async_scheduling:
            self.late.hold_finish(request)
            return
        if self.prefix_cache is not None:
            cache = self.manager.caches[request.request_id]
            self._finished.append((request, cache.pages[: cache.committed]))
        super().finish(request)

    def _update_from_output(self, sampled: list[Request]) -> None:
        """The AsyncScheduler's ``update_from_output`` of the previous batch, which
        ``EngineCore.step_with_batch_queue`` runs after the next ``schedule()``
        (vllm/v1/engine/core.py), over its requests that ``sampled`` in the batch's order: one
        still running has its blocks cached up to its computed tokens, and one that finished
        then frees its blocks and slot; one this pass preempted is finished by its token while
        preempted (vllm/v1/core/sched/scheduler.py, ``update_from_output``)."""
        done = {request.request_id for request in self.late.take_finished()}
        position = {request.request_id: i for i, request in enumerate(self.running)}
        for request in sorted(sampled, key=lambda r: position.get(r.request_id, -1)):
            if request.state is RequestState.RUNNING:
                if self.prefix_cache is not None:
                    self._cache_blocks(request, self._num_computed_tokens(request))
                if request.request_id in done:
                    super().finish(request)
            elif request.request_id in done:  # preempted: its blocks went then
                self.waiting.remove(request)
                self._set_state(request, RequestState.FINISHED)
                self._has_retired = True
        self.running = [r for r in self.running if r.state is RequestState.RUNNING]

    def _free_in_schedule_order(self) -> None:
        """vLLM frees a step's finished requests in the order it scheduled them
        (``update_from_output``); kvlab's executor finishes the prefills first. Their cached
        blocks are taken back and given up again in that order, so the free queue holds them as
        vLLM's does (nothing has used the queue since)."""
        assert self.prefix_cache is not None, "only cached blocks have an order"
        position = {request.request_id: i for i, request in enumerate(self.running)}
        for _, pages in self._finished:
            self.prefix_cache.hold(pages)
        for _, pages in sorted(self._finished, key=lambda done: position[done[0].request_id]):
            self.prefix_cache.release(pages)

    def _allocate(
        self, request: Request, num_tokens: int, admitting: bool, hits: Sequence[int] = ()
    ) -> bool:
        """``allocate_slots``: blocks for the first ``num_tokens`` tokens (capped at
        max_model_len), all or nothing; when ``admitting``, the whole sequence must fit first
        (``scheduler_reserve_full_isl``) and the watermark is kept free once anything runs.
        A waiting request's cache ``hits`` are its first blocks, and those no request holds
        count as blocks taken (``get_num_blocks_to_allocate``)."""
        blocks_for = self.manager.geometry.blocks_for_tokens
        free = self.manager.free_blocks
        if admitting and self.running:
            free -= self.watermark_blocks
        cache = self.manager.caches.get(request.request_id)
        # blocks it needs no free block for: those it holds, or its hits some request holds too
        held = len(hits) if cache is None else cache.num_blocks
        if hits:
            assert self.prefix_cache is not None, "a hit needs prefix caching"
            held -= self.prefix_cache.num_evictable(hits)
        if admitting and self.args.scheduler_reserve_full_isl:
            if blocks_for(min(self._num_tokens(request), self.max_model_len)) - held > free:
                return False
        target = min(num_tokens, self.max_model_len)
        if blocks_for(target) - held > free:
            return False
        if hits:  # touched before new blocks are taken, so they are never evicted for them
            cache = self.manager.create_cache(request.request_id)
            self._set_state(request, RequestState.RUNNING)
            self.manager.start_with_committed(cache, hits)
            request.context_current_position = request.prepopulated_prompt_len = cache.capacity
        self._grow(request, max(0, target - (0 if cache is None else cache.capacity)))
        return True

    def _cache_hit(self, request: Request) -> list[int]:
        """``get_computed_blocks`` for a waiting or preempted request: the cached pages of its
        longest run of cached blocks from block 0, one token short of all its tokens at most
        (vllm/v1/request.py ``get_max_cache_hit_length``); none with caching off."""
        if self.prefix_cache is None:
            return []
        max_blocks = (self._num_tokens(request) - 1) // self.args.block_size
        return self.prefix_cache.longest_hit(self._block_hashes(request), max_blocks)

    def _cache_blocks(self, request: Request, num_tokens: int) -> None:
        """``cache_blocks`` after an allocation: the request's full blocks among its first
        ``num_tokens`` tokens (at most all it has: ``allocate_slots``; a token in flight it
        has not yet) are cached, even those whose KV this step only computes."""
        assert self.prefix_cache is not None, "caching needs prefix caching on"
        cache, block_size = self.manager.caches[request.request_id], self.args.block_size
        if num_tokens // block_size <= cache.committed:
            return  # no block newly full: most decode steps
        in_flight = self.late.in_flight(request)  # vLLM has not appended it yet
        num_tokens = min(num_tokens, self._num_tokens(request) - in_flight)
        if num_tokens // block_size <= cache.committed:
            return
        hashes = self._block_hashes(request)
        full = min(num_tokens // block_size, len(hashes))
        if full > cache.committed:
            self.prefix_cache.cache(cache.pages, cache.committed, hashes[:full])
            cache.committed = full

    def _block_hashes(self, request: Request) -> list[int]:
        """vLLM's ``request.block_hashes``: one per full block of its tokens, prompt and outputs
        (each the sampled id), chained (vllm/v1/core/kv_cache_utils.py
        ``get_request_block_hasher``); kept, and extended as outputs fill blocks."""
        hashes, tail = self._hashes[request.request_id]
        block_size = self.args.block_size
        full = self._num_tokens(request) // block_size
        if len(hashes) < full:
            prompt_blocks = request.prompt_len // block_size
            outputs = tail + [SAMPLED_TOKEN_ID] * ((full - prompt_blocks) * block_size - len(tail))
            start = (len(hashes) - prompt_blocks) * block_size
            hashes += chain_hashes(outputs[start:], block_size, hashes[-1] if hashes else 0)
        return hashes

    @staticmethod
    def _num_tokens(request: Request) -> int:
        """vLLM's ``num_tokens``: prompt + output tokens (the newest not yet computed)."""
        return request.prompt_len + request.num_generated

    @staticmethod
    def _num_computed_tokens(request: Request) -> int:
        """vLLM's ``num_computed_tokens``: the context computed so far; once it is, every
        token but the newest sampled one."""
        if request.is_context_finished:
            return request.prompt_len + request.num_generated - 1
        return request.context_current_position

    @staticmethod
    def _add_to_batch(batch: ScheduledBatch, request: Request, num_new: int) -> None:
        if request.is_context_finished:
            batch.generation_requests.append(request)
        else:
            request.context_chunk_size = num_new
            batch.context_requests.append(request)

    def __repr__(self) -> str:
        return f"VllmScheduler({self.args!r})"
