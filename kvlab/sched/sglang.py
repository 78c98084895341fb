"""SglangScheduler: SGLang 0.5.23's scheduler over kvlab's KV cache manager (the SGLang peer).
One ``schedule()`` is one iteration of ``Scheduler.event_loop_normal``
(sglang/srt/managers/scheduler.py:2026) that had a request to work on; docs/ENGINES.md lists the
lines it follows. With ``disable_radix_cache`` False, the radix cache (kvlab.sched.sglang_radix)
holds the requests' computed tokens: a request's manager cache holds only the tokens the tree
does not, and the tree's tokens are held back in the manager. With ``disable_overlap_schedule``
False, one ``schedule()`` is an iteration of ``event_loop_overlap`` (:2061-2134): the last batch's
results are processed after this batch is made (kvlab.sched.base.LateResults, which the vLLM
peer's AsyncScheduler shares), so a finished request frees its tokens and its slot one step later
and a request's token from the last batch is not yet in its ``output_ids``. Left out: mixed
chunks, speculative decoding, pages above one token, other policies and ranks,
SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP (off by default: every batch overlaps). No stall
detector, as in SGLang.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from kvlab.core.cause import Cause, Reason
from kvlab.core.checks import check_bools, check_float, check_instance, check_int, store_checked
from kvlab.core.geometry import KVGeometry
from kvlab.core.manager import KVCacheManager
from kvlab.core.prompt_tokens import SAMPLED_TOKEN_ID, prompt_token_ids
from kvlab.core.request import Request, RequestState
from kvlab.sched.admission import ADMIT, Verdict
from kvlab.sched.base import LateResults, ScheduledBatch, SchedulerBase, check_plain_request
from kvlab.sched.sglang_prefill import RETRACT_DECODE_STEPS, NewTokenRatio, PrefillAdder
from kvlab.sched.sglang_radix import RadixNode, RadixTree

if TYPE_CHECKING:
    import torch

#: The version whose scheduler this module follows (and kvlab.backends.sglang_driver runs).
SGLANG_VERSION = "0.5.23"

#: ``max_req_input_len = max_req_len - 5`` (managers/tp_worker.py:572).
INPUT_LEN_MARGIN = 5
#: ServerArgs' chunked_prefill_size when the device's memory is unknown
#: (arg_groups/memory_hook.py:173-177; 2048 to 16384 by GPU memory otherwise).
DEFAULT_CHUNKED_PREFILL_SIZE = 4096
#: ServerArgs' max_prefill_tokens (arg_groups/fields/schedule.py:71).
DEFAULT_MAX_PREFILL_TOKENS = 16384
#: ``WAITING_PREFIX_REFRESH_INTERVAL`` and ``WAITING_QUEUE_PREFIX_MATCH_MAX``
#: (managers/schedule_policy.py:137-139): every 32nd prefill pass touches the paths of the first
#: 128 waiting requests.
WAITING_PREFIX_REFRESH_INTERVAL = 32
WAITING_QUEUE_PREFIX_MATCH_MAX = 128

#: A one-token abort's input (``set_finish_with_abort``, managers/schedule_batch.py:2233).
ABORT_INPUT_IDS = (0,)

#: SGLang's messages.
MAX_RUNNING_ZERO = "max_running_request is zero"  # tp_worker.py:420
POOL_TOO_SMALL = "Memory pool size is too small"  # tp_worker.py:425
DECODE_OOM_ABORT = (
    "Out of memory even after retracting all other requests in the decode "
    "batch. Aborting the last request."
)  # schedule_batch.py:3516


@dataclasses.dataclass(frozen=True)
class SglangServerArgs:
    """The server arguments (and the one sampling parameter, ``ignore_eos``) SGLang's scheduler
    reads, by SGLang's names. ``geometry``: one token a page (page_size 1);
    ``max_total_tokens``: the KV pool; ``max_running_requests``: None takes SGLang's default;
    ``chunked_prefill_size``: -1 for chunking off. ``disable_radix_cache`` and
    ``disable_overlap_schedule`` are SGLang's switches (sglang/srt/arg_groups/fields/memory.py:64,
    schedule.py:193), False by default as in SGLang: the radix cache and the overlap scheduler
    on."""

    geometry: KVGeometry
    max_total_tokens: int
    context_length: int
    max_running_requests: int | None = None
    chunked_prefill_size: int = DEFAULT_CHUNKED_PREFILL_SIZE
    max_prefill_tokens: int = DEFAULT_MAX_PREFILL_TOKENS
    schedule_conservativeness: float = 1.0
    ignore_eos: bool = False
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False

    def __post_init__(self) -> None:
        check_instance("geometry", self.geometry, KVGeometry)
        if self.geometry.tokens_per_block != 1:
            raise ValueError(
                "geometry.tokens_per_block must be 1 (SGLang's page_size 1), got "
                f"{self.geometry.tokens_per_block}"
            )
        store_checked(self, "max_total_tokens", check_int, low=1, high=1 << 24)
        store_checked(self, "context_length", check_int, low=1, high=1 << 30)
        if self.max_running_requests is not None:
            store_checked(self, "max_running_requests", check_int, low=1, high=1 << 20)
        if type(self.chunked_prefill_size) is not bool and self.chunked_prefill_size == -1:
            object.__setattr__(self, "chunked_prefill_size", -1)  # a plain int, whatever came
        else:
            try:
                store_checked(self, "chunked_prefill_size", check_int, low=1, high=1 << 30)
            except ValueError:
                raise ValueError(
                    f"chunked_prefill_size must be -1 (chunking off) or in [1, "
                    f"{1 << 30}], got {self.chunked_prefill_size}"
                ) from None
        store_checked(self, "max_prefill_tokens", check_int, low=1, high=1 << 30)
        store_checked(self, "schedule_conservativeness", check_float, low=0.0, high=100.0)
        check_bools(
            ignore_eos=self.ignore_eos,
            disable_radix_cache=self.disable_radix_cache,
            disable_overlap_schedule=self.disable_overlap_schedule,
        )

    @property
    def resolved_max_running_requests(self) -> int:
        """``KVCacheConfigurator.resolve_max_num_reqs`` (mem_cache/kv_cache_configurator.py:
        3119) for one rank: the value given, else ``max(min(int(T / C * 512), 4096), 2048)``,
        at most ``T // 2`` either way."""
        tokens = self.max_total_tokens
        given = self.max_running_requests
        if given is None:
            given = max(min(int(tokens / self.context_length * 512), 4096), 2048)
        return min(given, tokens // 2)

    @property
    def max_req_len(self) -> int:
        """``get_worker_info``'s ``min(context_length, max_total_tokens) - 1``."""
        return min(self.context_length, self.max_total_tokens) - 1

    @property
    def max_req_input_len(self) -> int:
        return self.max_req_len - INPUT_LEN_MARGIN

    @property
    def chunk_size(self) -> int | None:
        """The scheduler's ``chunked_prefill_size``: None with chunking off."""
        return None if self.chunked_prefill_size == -1 else self.chunked_prefill_size

    def replace(self, **changes: Any) -> SglangServerArgs:
        return dataclasses.replace(self, **changes)


def startup_error(args: SglangServerArgs) -> str | None:
    """The message SGLang refuses to start with for ``args`` (``TpModelWorker.alloc_memory_pool``,
    managers/tp_worker.py:420-425), or None when it starts."""
    if args.resolved_max_running_requests <= 0:
        return MAX_RUNNING_ZERO
    if args.max_req_len <= 0:
        return POOL_TOO_SMALL
    return None


def front_door_error(request: Request, context_length: int) -> str | None:
    """The TokenizerManager's refusal of ``request`` when it arrives
    (``_validate_one_request``, tokenizer_manager.py:1333-1378), or None."""
    prompt_len, max_new_tokens = request.prompt_len, request.max_new_tokens
    if prompt_len >= context_length:  # tokenizer_manager.py:1349
        return (
            f"The input ({prompt_len} tokens) is longer than the model's context length "
            f"({context_length} tokens)."
        )
    if max_new_tokens + prompt_len > context_length:  # tokenizer_manager.py:1372
        return (
            f"Requested token count exceeds the model's maximum context length of "
            f"{context_length} tokens. You requested a total of {prompt_len + max_new_tokens} "
            f"tokens: {prompt_len} tokens from the input messages and {max_new_tokens} tokens "
            "for the completion. Please reduce the number of tokens in the input messages or "
            "the completion to fit within the limit."
        )
    return None


def clipped_max_new_tokens(args: SglangServerArgs, prompt_len: int, max_new_tokens: int) -> int:
    """``Scheduler.init_req_max_new_tokens`` (managers/scheduler.py:2693): the request's
    max_new_tokens, at most ``max_req_len - P - 1`` and ``max_total_tokens - P - 2``
    (``max_new_tokens_for_memory``, mem_cache/allocator/base.py:88), at least 0."""
    clipped = max(0, min(max_new_tokens, args.max_req_len - prompt_len - 1))
    return max(0, min(clipped, args.max_total_tokens - prompt_len - 1 - 1))


class SglangScheduler(SchedulerBase):
    """SGLang's scheduling loop on a real ``KVCacheManager`` of ``max_total_tokens`` one-token
    pages on ``device``. Raises ValueError with SGLang's message where SGLang refuses to start."""

    def __init__(
        self, args: SglangServerArgs, device: str | torch.device = "cpu", debug: bool = False
    ):
        check_instance("args", args, SglangServerArgs)
        refusal = startup_error(args)
        if refusal is not None:
            raise ValueError(refusal)
        max_running = args.resolved_max_running_requests
        # a page-index row per ReqToTokenPool entry, each as wide as the longest sequence
        manager = KVCacheManager.expecting_clamp(
            args.geometry,
            args.max_total_tokens * args.geometry.bytes_per_block,
            min(args.context_length, args.max_total_tokens),
            max_batch_size=max_running,
            page_index_policy="configured",
            device=device,
            host_cache_size=0,
            enable_block_reuse=False,  # the radix cache is off
        )
        super().__init__(manager, max_running, debug)
        self.args = args
        self.max_running_requests = max_running
        self.new_token_ratio = NewTokenRatio(args.schedule_conservativeness)
        #: SGLang's ``waiting_queue``, ``running_batch.reqs`` and ``chunked_req``
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.chunked_req: Request | None = None
        #: ``running_batch.batch_is_full``: admission stays shut until a request leaves
        self.batch_is_full = False
        #: the requests of the last step's prefill batch (SGLang's ``last_batch``), or None
        self.last_prefill: list[Request] | None = None
        #: requests ``validate_input_length`` turned into a one-token abort: the message
        self.abort_messages: dict[str, str] = {}
        self._last_step: int | None = None  # the step of the latest schedule()
        self._submit_step = 0  # the step of the latest arrival
        #: the radix cache (None when disabled) and, per request: its prompt's ids, and while it
        #: holds tokens, the node its lock holds (``req.lock``) and the tokens it reads from the
        #: tree (``cache_protected_len``)
        self.tree = None if args.disable_radix_cache else RadixTree()
        self._prompt_ids: dict[str, list[int]] = {}
        self._lock: dict[str, RadixNode] = {}
        self._protected: dict[str, int] = {}
        #: the last batch's rows, whose results ``process_batch_result`` takes: in the same
        #: step (``batch_done``), or with the overlap loop after the next batch is scheduled
        self.late = LateResults()
        self.overlap = not args.disable_overlap_schedule
        #: one-token aborts whose prefill result is not processed yet: they hold their token
        self._aborting: set[str] = set()
        self._made_batch = False  # the last iteration ran a batch (SGLang's ``last_batch``)
        self._rows: list[Request] = []  # the rows of the batch being made, in its order
        self._late_prefill = False  # the rows of ``late`` are a prefill batch's
        self._prefix_refreshes = 0  # ``_waiting_prefix_refresh_calls``

    @property
    def max_num_active_requests(self) -> int | None:
        return None  # the engine queues every request itself

    def _verdict(self, request: Request) -> Verdict:
        check_plain_request(request, "SGLang")
        step = request.arrival_step if request.activated_step is None else request.activated_step
        self._submit_step = step
        refusal = front_door_error(request, self.args.context_length)
        if refusal is not None:
            return Verdict(False, Reason(Cause.FRONT_DOOR, message=refusal))
        if not (self.counts[RequestState.WAITING] or self.counts[RequestState.RUNNING]) and (
            self._last_step is None or step > self._last_step + 1
        ):
            # an idle server's iteration ran before this arrival: ``on_idle`` resets the ratio
            self.new_token_ratio.reset()
        # SGLang's (clipped) ``sampling_params.max_new_tokens``
        request.output_limit = clipped_max_new_tokens(
            self.args, request.prompt_len, request.max_new_tokens
        )
        limit = self.args.max_req_input_len
        aborting = request.prompt_len >= limit  # validate_input_length (managers/utils.py:283)
        if aborting:
            self.abort_messages[request.request_id] = (
                f"Input length ({request.prompt_len} tokens) exceeds the maximum allowed length "
                f"({limit} tokens). Use a shorter input or enable --allow-auto-truncate."
            )
        if self.tree is not None:  # an abort's prompt is one token (``set_finish_with_abort``)
            ids = list(ABORT_INPUT_IDS) if aborting else prompt_token_ids(request)
            self._prompt_ids[request.request_id] = ids
        return ADMIT

    def _enqueue(self, request: Request) -> None:
        self.waiting.append(request)

    def origin_len(self, request: Request) -> int:
        """SGLang's ``len(origin_input_ids)``: the prompt, one token for an abort."""
        return 1 if request.request_id in self.abort_messages else request.prompt_len

    def output_len(self, request: Request) -> int:
        """SGLang's ``len(output_ids)``: the tokens generated, less one whose batch's results the
        overlap loop has not processed yet."""
        return request.num_generated - self.late.in_flight(request)

    def schedule(self) -> ScheduledBatch:
        """One iteration of ``event_loop_normal``, or with the overlap loop of
        ``event_loop_overlap`` (module docstring): the last batch's results are processed after
        this batch is made (:meth:`_process_batch_result`)."""
        last = self._last_step
        self._last_step = self._submit_step if last is None else max(last + 1, self._submit_step)
        if self.overlap:
            self.late.open()
        self._prune_half_retired()
        self.iteration += 1
        batch = ScheduledBatch()
        if self.tree is not None:
            chunked = self.chunked_req
            # the chunk computed last enters the tree (stash_chunked_request, scheduler.py:3911)
            if chunked is not None and chunked.context_current_position > self._protected.get(
                chunked.request_id, 0
            ):
                self._checkpoint(chunked, chunked.context_current_position)
        self._merge_last_prefill()
        made_batch = self._get_new_batch_prefill(batch)  # sets last_prefill when it made one
        if not made_batch and self.running:
            self._update_running_batch(batch)
            made_batch = bool(self._rows)
        # on_idle of a server that ran empty; the overlap loop runs on_idle only after an
        # iteration without a batch (scheduler.py:2117-2123)
        idle = not (made_batch or self.running or self.waiting or self.chunked_req)
        if idle and not (self.overlap and self._made_batch):
            self.new_token_ratio.reset()
        self._made_batch = made_batch
        rows, self._rows = self._rows, []
        if self.overlap:  # the overlap loop's pop_and_process after run_batch (:2117-2120)
            self._process_batch_result(batch)
        self.late.push([r for r in rows if r is not self.chunked_req])
        self._late_prefill = bool(batch.context_requests or batch.num_aborted_context_rows)
        if self.debug:
            self.check_invariants()
        return batch

    def _merge_last_prefill(self) -> None:
        """``get_next_batch_to_run``'s merge (managers/scheduler.py:3905-3970): the last prefill
        batch, less its finished requests and the chunked one, joins the running batch."""
        last, self.last_prefill = self.last_prefill, None
        if last is not None:
            kept = [
                r for r in last if r.state is RequestState.RUNNING and r is not self.chunked_req
            ]
            if len(kept) < len(last) or (kept and not self.running):
                self.batch_is_full = False  # (a prefill batch that becomes the batch: its flag)
            self.running.extend(kept)
        running = [r for r in self.running if r.state is RequestState.RUNNING]
        if len(running) < len(self.running):
            self.batch_is_full = False
        self.running = running

    def _get_new_batch_prefill(self, batch: ScheduledBatch) -> bool:
        """``_get_new_batch_prefill_raw`` (managers/scheduler.py:4079); whether it made a batch.
        The request slots left (``get_num_allocatable_reqs``, :4027) exclude the chunked
        request, which holds one outside the running batch."""
        if not self.running:
            self.batch_is_full = False
        if (self.batch_is_full or not self.waiting) and self.chunked_req is None:
            return False
        slots = self.max_running_requests - len(self.running)
        if slots <= 0 and self.chunked_req is None:
            self.batch_is_full = True
            return False
        args, tree = self.args, self.tree
        if tree is not None and self.waiting:
            self._touch_waiting_prefixes()
        adder = PrefillAdder(
            self.running,
            self.new_token_ratio.current,
            self._available_and_evictable,
            args.max_prefill_tokens,
            args.chunk_size,
            args.ignore_eos,
            self.origin_len,
            self.output_len,
            radix_cache=tree is not None,
        )
        if self.chunked_req is not None:
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for request in self.waiting:
            if adder.budget_state() == adder.OTHER:
                break
            if len(adder.can_run_list) >= slots:
                self.batch_is_full = True
            if self.batch_is_full:
                break
            if tree is None:
                result = adder.add_one_req(request)
            else:
                # init_next_round_input's match; the match is pinned while the adder judges
                # it (schedule_policy.py:1431) and stays locked if admitted (:1690)
                prefix_len, node = self._match_prefix(request)
                tree.lock(node)
                result = adder.add_one_req(request, prefix_len)
                if adder.can_run_list and adder.can_run_list[-1] is request:
                    self._lock[request.request_id] = node
                    self._protected[request.request_id] = prefix_len
                else:
                    tree.unlock(node)
            if result != adder.CONTINUE:
                if result == adder.NO_TOKEN:
                    self.batch_is_full = bool(adder.can_run_list) or bool(self.running)
                break
        if not adder.can_run_list:
            return False
        admitted = adder.can_run_list
        if all(a is b for a, b in zip(admitted, self.waiting)):  # the queue's head, as usual
            del self.waiting[: len(admitted)]
        else:
            ids = {id(r) for r in admitted}
            self.waiting = [r for r in self.waiting if id(r) not in ids]
        if adder.new_chunked_req is not None:
            self.chunked_req = adder.new_chunked_req
        self._prepare_for_extend(batch, adder.can_run_list, adder.extend_lens)
        return True

    def _prepare_for_extend(
        self, batch: ScheduledBatch, requests: list[Request], extend_lens: list[int]
    ) -> None:
        """``prepare_for_extend``: the batch's tokens from the pool (``alloc_for_extend``), all
        or nothing; a one-token abort's prefill finishes it (``process_batch_result_prefill``
        frees its token in the same step)."""
        total = sum(extend_lens)
        self._evict_for(total)
        if total > self.manager.free_blocks:  # alloc_token_slots (mem_cache/allocation.py:152)
            raise RuntimeError(
                f"Out of memory. Try to lower your batch size.\nTry to allocate "
                f"{total} tokens.\nAvailable tokens: {self.manager.free_blocks}"
            )
        for request, extend_len in zip(requests, extend_lens):
            self._grow(request, extend_len)
        for request, extend_len in zip(requests, extend_lens):
            message = self.abort_messages.pop(request.request_id, None)
            if message is not None:  # it holds its token until its result is processed
                request.reason = Reason(Cause.FRONT_DOOR, message=message)
                self._aborting.add(request.request_id)
                batch.num_aborted_context_rows += 1
                if not self.overlap:  # reported in this step, else in the step processing it
                    batch.aborted_requests.append(request)
            else:
                if request.context_current_position == 0:  # a cached prefix is not computed
                    prefix_len = self._protected.get(request.request_id, 0)
                    request.context_current_position = request.prepopulated_prompt_len = prefix_len
                request.context_chunk_size = extend_len
                batch.context_requests.append(request)
        batch.num_tokens = total
        self.last_prefill = list(requests)
        self._rows = list(requests)

    def _abort(self, request: Request, reason: Reason) -> None:
        self.manager.free(request)
        self._forget(request, done=True)
        self._set_state(request, RequestState.REJECTED)
        request.reason = reason

    def _update_running_batch(self, batch: ScheduledBatch) -> None:
        """``update_running_batch`` (managers/scheduler.py:4459): retract when the next decode
        does not fit (``check_decode_mem``: one token per request), else decay the ratio; then
        ``prepare_for_decode``: one token each, in one allocation. With the overlap loop, the
        requests whose unprocessed token is their last leave the batch first
        (``_reqs_finishing_inflight``, :4444-4457), and while any do, a decode that does not fit
        waits for their results instead of retracting (:4469-4474)."""
        finishing = []
        if self.overlap:
            queued = {r.request_id for r in self.late.batch}
            finishing = [
                r
                for r in self.running
                if r.request_id in queued and self.output_len(r) + 1 >= r.output_limit
            ]
        if finishing:
            leaving = {id(r) for r in finishing}
            self.running = [r for r in self.running if id(r) not in leaving]
            self.batch_is_full = False
            if not self.running:
                return
        if not self._decode_fits(len(self.running)):
            if finishing:
                return
            self._retract_decode(batch)
        else:
            self.new_token_ratio.decay_step()
        if not self.running:
            return
        self._evict_for(len(self.running))  # prepare_for_decode's alloc_token_slots
        caches = self.manager.caches
        granted = self.manager.grow_each([caches[r.request_id] for r in self.running])
        assert granted, "the free tokens counted for the decode batch were refused"
        self._rows = list(self.running)
        decoding = [r for r in self.running if r.request_id not in self._aborting]
        batch.generation_requests.extend(decoding)
        batch.num_aborted_generation_rows = len(self.running) - len(decoding)
        batch.num_tokens = len(self.running)

    def _retract_decode(self, batch: ScheduledBatch) -> None:
        """``ScheduleBatch.retract_decode`` (managers/schedule_batch.py:3451): free the least
        preferred request (fewest output tokens, then the longest prompt, then the last in the
        batch: ``_get_decode_retraction_order``, :3542) until the others' next tokens fit,
        keeping one; abort that one when even it does not fit. The retracted recompute later,
        from the back of the queue."""
        reqs = self.running
        order = sorted(
            range(len(reqs)),
            key=lambda i: (self.output_len(reqs[i]), -self.origin_len(reqs[i])),
            reverse=True,
        )
        retracted: list[Request] = []
        while not retracted or not self._decode_fits(len(order)):
            if len(order) == 1:
                break
            request = reqs[order.pop()]
            self._retract(request, len(order))
            retracted.append(request)
        if len(order) <= 1 and not self._decode_fits(len(order)):
            oom = Reason(Cause.ABORTED_OUT_OF_MEMORY, message=DECODE_OOM_ABORT)
            aborted = reqs[order.pop()]
            self._abort(aborted, oom)
            batch.aborted_requests.append(aborted)
        if len(order) != len(reqs):  # filter_batch(keep_indices=...) keeps the sorted order
            self.running = [reqs[i] for i in order]
            self.batch_is_full = False
        self.new_token_ratio.current = NewTokenRatio.after_retract(
            [self.output_len(r) for r in self.running], [r.output_limit for r in self.running]
        )
        self.waiting.extend(retracted)  # _add_request_to_queue(is_retracted=True): the back
        batch.recompute_paused_requests.extend(retracted)

    def batch_done(self) -> None:
        """``event_loop_normal`` processes the batch it ran (:meth:`_process_batch_result`);
        the overlap loop does so after the next ``schedule()``."""
        if not self.overlap:
            self._process_batch_result()

    def finish(self, request: Request) -> None:
        """The request's last token ran; SGLang finishes it as it processes the batch's
        results (:meth:`_process_batch_result`)."""
        self.late.hold_finish(request)

    def _process_batch_result(self, batch: ScheduledBatch | None = None) -> None:
        """``process_batch_result`` of the last batch (managers/scheduler_components/
        batch_result_processor.py:258-503, 952-1110), its rows in order: a request whose last
        token it holds finishes (``release_kv_cache(checkpoint=True)``, mem_cache/common.py:400:
        with the radix cache, its prompt and outputs but the last enter the tree, :387-391, 1466);
        a one-token abort frees its token, which with the radix cache enters the tree as id 0
        (``set_finish_with_abort``, managers/schedule_batch.py:2233), followed by the sampled
        token if the overlap loop decoded it meanwhile (``owned_kv_len``, :1552-1564); with the radix cache, a
        prefilled prompt enters the tree (``checkpoint_kv_cache``, :393-394). A row retracted
        since is skipped (:344-345, 1022-1027). An abort processed after ``batch`` was made is
        reported with it."""
        finished = {r.request_id for r in self.late.take_finished()}
        for request in self.late.batch:
            if request.request_id in self._aborting:
                self._aborting.discard(request.request_id)
                reason = request.reason
                assert reason is not None, "an abort carries its message"
                # its token, and the sampled one if it decoded meanwhile (owned_kv_len)
                key = (*ABORT_INPUT_IDS, SAMPLED_TOKEN_ID)[
                    : self.manager.caches[request.request_id].num_blocks
                ]
                self._abort(request, reason)
                if batch is not None:
                    batch.aborted_requests.append(request)
                if self.tree is not None:  # the abort freed its tokens: the tree takes free ones
                    self.manager.hold_back(self.tree.insert(key, 0)[2])
            elif request.state is not RequestState.RUNNING:
                continue
            elif request.request_id in finished:
                if self.tree is not None:
                    self._checkpoint(request, self.origin_len(request) + request.num_generated - 1)
                    self._forget(request, done=True)
                super().finish(request)
            elif self.tree is not None and self._late_prefill:
                self._checkpoint(request, request.context_current_position)

    def _retract(self, request: Request, remaining: int) -> None:
        """``release_req`` (managers/schedule_batch.py:2360-2395): the request's own tokens are
        freed and its lock released (nothing enters the tree), then the tree evicts until the
        ``remaining`` requests' next RETRACT_DECODE_STEPS tokens fit. With the overlap loop, its
        token in flight is dropped."""
        self.late.drop(request)  # a token in flight is never processed (:1022-1027)
        self._recompute_pause(request)  # its tokens freed, reset_for_retract
        if self.tree is not None:
            self._forget(request)
            self._evict_for(remaining * RETRACT_DECODE_STEPS)

    # -- the radix cache ---------------------------------------------------------------------
    def _available_and_evictable(self) -> int:
        evictable = 0 if self.tree is None else self.tree.evictable_size
        return self.manager.free_blocks + evictable

    def _evict_for(self, num_tokens: int) -> None:
        """``evict_to_free_tokens`` (mem_cache/allocator/base.py:155-169): evict the shortfall
        of free tokens, if any."""
        shortfall = num_tokens - self.manager.free_blocks
        if self.tree is not None and shortfall > 0:
            self.manager.release_held_back(self.tree.evict(shortfall))

    def _decode_fits(self, num_tokens: int) -> bool:
        """``check_decode_capacity`` (mem_cache/allocator/base.py:171-185): it evicts even when
        it only checks."""
        self._evict_for(num_tokens)
        return self.manager.free_blocks >= num_tokens

    def _token_ids(self, request: Request) -> list[int]:
        """``origin_input_ids + output_ids`` (kvlab.core.prompt_tokens's ids)."""
        ids = self._prompt_ids[request.request_id]
        return ids + [SAMPLED_TOKEN_ID] * request.num_generated if request.num_generated else ids

    def _match_prefix(self, request: Request) -> tuple[int, RadixNode]:
        """``init_next_round_input``'s match (managers/schedule_batch.py:1692-1768): never the
        last token."""
        assert self.tree is not None
        ids = self._token_ids(request)
        return self.tree.match(ids[: max(len(ids) - 1, 0)])

    def _touch_waiting_prefixes(self) -> None:
        """``_touch_waiting_prefixes`` (managers/schedule_policy.py:282-302): every 32nd pass,
        the first 128 waiting requests' whole paths, the head last."""
        assert self.tree is not None
        refresh = self._prefix_refreshes % WAITING_PREFIX_REFRESH_INTERVAL == 0
        self._prefix_refreshes += 1
        if refresh:
            for request in reversed(self.waiting[:WAITING_QUEUE_PREFIX_MATCH_MAX]):
                self.tree.match(self._token_ids(request))

    def _checkpoint(self, request: Request, up_to: int) -> None:
        """``checkpoint_into_tree`` (mem_cache/unified_radix_cache.py:1164-1310): the request's
        first ``up_to`` tokens enter the tree; the tree keeps its own copy of those it held and
        takes over the rest, and the request's lock moves to the path's end. A finished
        request's path is split at its prompt's end, so that eviction can take the outputs
        first."""
        tree, request_id = self.tree, request.request_id
        assert tree is not None
        ids = self._token_ids(request)[:up_to]
        protected = self._protected[request_id]
        node, duplicates, new = tree.insert(ids, protected)
        prompt_len = self.origin_len(request)
        if request.num_generated >= request.output_limit and 0 < prompt_len < up_to:
            tree.insert(ids[:prompt_len], prompt_len)
        assert duplicates + new == up_to - protected, (request_id, duplicates, new, protected)
        cache = self.manager.caches[request_id]
        keep = cache.num_blocks - (up_to - protected)
        self.manager.hand_over(cache, keep, new)
        cache.capacity = keep
        tree.unlock(self._lock[request_id])
        tree.lock(node)
        self._lock[request_id] = node
        self._protected[request_id] = up_to

    def _forget(self, request: Request, done: bool = False) -> None:
        """The request's lock released (``tree_cache.unlock(req.lock)``); ``done``: it will
        not come back."""
        request_id = request.request_id
        node = self._lock.pop(request_id, None)
        if node is not None:
            assert self.tree is not None
            self.tree.unlock(node)
        self._protected.pop(request_id, None)
        if done:
            self._prompt_ids.pop(request_id, None)

    def check_invariants(self) -> None:
        super().check_invariants()
        if self.tree is not None:
            self.tree.check_invariants()

    def __repr__(self) -> str:
        return f"SglangScheduler({self.args!r})"
