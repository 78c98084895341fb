"""The real SGLang 0.5.23 scheduler stepped on kvlab workloads, in SGLang's own environment: a
script that imports SGLang, torch and the standard library only, never kvlab. SGLang's own
``Scheduler.event_loop_normal`` (sglang/srt/managers/scheduler.py), or with
``disable_overlap_schedule`` False its ``event_loop_overlap``, runs unchanged on real CPU pools;
the sockets, the TokenizerManager's process and the model stand in. What a batch's results
say (a first token, a finish) belongs to the step that ran the batch, which the overlap loop
processes an iteration later; an abort is reported as it is processed. docs/ENGINES.md gives
the protocol, what a step is, every stand-in with the upstream line it replaces, and the front
doors' messages. Each prompt's token ids and the sampled token come in the input
(kvlab.core.prompt_tokens makes them), so kvlab's peer and SGLang's radix cache see the same
shared prefixes."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from array import array
from collections import deque

#: A Llama config with only what SGLang's ModelConfig reads; the KV geometry does not matter to
#: a pool counted in tokens.
_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "num_hidden_layers": 1,
    "vocab_size": 32000,
    "max_position_embeddings": 1 << 30,
    "torch_dtype": "float16",
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
STEP_ROWS_PER_LINE = 500


#: The protocol's stream: the process's stdout, kept apart from sys.stdout, which main() points
#: at stderr so that nothing SGLang prints can break a line.
PROTOCOL = sys.stdout


def emit(**fields) -> None:
    PROTOCOL.write(json.dumps(fields, separators=(",", ":")) + "\n")
    PROTOCOL.flush()


def main() -> int:
    sys.stdout = sys.stderr
    import sglang
    import sglang.srt.managers.scheduler  # noqa: F401  (imported once, before the forks)
    import sglang.srt.models.registry  # noqa: F401  (the model classes the ModelConfig looks up)
    import torch

    spec = json.load(sys.stdin)
    emit(kind="hello", sglang=sglang.__version__, torch=torch.__version__)
    failed = False
    with tempfile.TemporaryDirectory(prefix="kvlab-sglang-model-") as model_dir:
        with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as handle:
            json.dump(_MODEL_CONFIG, handle)
        for index, run in enumerate(spec["runs"]):
            failed |= not run_forked(Run(index, run, model_dir))
    return 1 if failed else 0


def run_forked(run: Run) -> bool:
    """``run`` in a child process: a Scheduler is built once per process (its process groups),
    and its watchdog thread keeps it, pools and all, alive for good. Whether the child ended
    well; a child that died has written its run's lines up to there, and its traceback."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            run.run()
            code = 0
        except BaseException:  # noqa: BLE001 - the parent reports it through the exit status
            traceback.print_exc()
        finally:
            PROTOCOL.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status == 0


# --- the scheduler, its worker and its front door --------------------------------------------


class ModelRunnerStub:
    """What the scheduler reads of a ModelRunner, with no model: real CPU pools, built when the
    worker's ``alloc_memory_pool`` asks (model_runner.py:971 is the real one)."""

    model = None
    is_hybrid_swa = prefill_aware_swa = False
    canary_manager = forward_stream = None
    device = "cpu"
    preloaded_weights_bytes = 0
    weight_load_time = weight_load_mem_usage = 0.0
    graph_memory_usage: dict = {}
    graph_time_usage: dict = {}
    mtp_draft_device_pools = mtp_draft_mamba_pools = ()
    memory_pool_config = req_to_token_pool = token_to_kv_pool_allocator = token_to_kv_pool = None
    attn_backend = None  # no Triton block size: the prefill adder takes its default

    def __init__(self, model_config, max_total_tokens: int):
        import torch

        self.model_config = model_config
        self.max_total_tokens = max_total_tokens
        self.forward_stream = torch.cpu.Stream()  # the overlap loop's; a no-op on the CPU

    def alloc_memory_pool(self, memory_pool_config=None, *, draft_parallel_layout=None):
        from types import SimpleNamespace

        import torch
        from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
        from sglang.srt.model_executor.model_runner_components.ngram_embedding_manager import (
            NgramEmbeddingManager,
        )

        tokens = self.max_total_tokens
        self.max_total_num_tokens = tokens
        self.max_running_requests = KVCacheConfigurator.resolve_max_num_reqs(
            SimpleNamespace(model_config=self.model_config, attn_dp_size=1, mambaish_config=None),
            tokens,
        )
        self.req_to_token_pool = ReqToTokenPool(
            size=self.max_running_requests,
            max_context_len=self.model_config.context_len + get_req_to_token_extra_context_len(),
            device="cpu",
            enable_memory_saver=False,
        )
        self.token_to_kv_pool = MHATokenToKVPool(
            tokens,
            page_size=1,
            dtype=torch.float16,
            head_num=1,
            head_dim=1,
            layer_num=1,
            device="cpu",
            enable_memory_saver=False,
            enable_alt_stream=False,
        )
        self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(
            tokens,
            dtype=torch.float16,
            device="cpu",
            kvcache=self.token_to_kv_pool,
            need_sort=False,
        )
        self.memory_pool_config = SimpleNamespace(
            max_total_num_tokens=tokens, max_running_requests=self.max_running_requests
        )
        self.ngram_embedding_manager = NgramEmbeddingManager.from_model(
            model=None,
            model_config=self.model_config,
            req_to_token_pool=self.req_to_token_pool,
            max_running_requests=self.max_running_requests,
            device="cpu",
        )

    @property
    def logical_max_total_num_tokens(self) -> int:
        return self.max_total_num_tokens

    effective_logical_max_total_num_tokens = logical_max_total_num_tokens

    def _nothing(self, *args, **kwargs) -> None:
        """What the real runner sets up for its model: there is none."""

    account_preloaded_weights = init_attention_backends = init_cuda_graphs = _nothing
    prewarm_sampling = _nothing


def worker_class(sampled_token: int):
    """A TpModelWorker without a model (module docstring) that samples ``sampled_token``:
    SGLang's own methods but for ``__init__`` and ``forward_batch_generation``."""
    import torch
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.runtime_context import get_device

    class ModelFreeTpWorker(TpModelWorker):
        def __init__(self, model_config, max_total_tokens: int):
            self.model_config = model_config
            self._model_runner = ModelRunnerStub(model_config, max_total_tokens)
            self.model_runner_list: list = []
            self.dllm_algorithm = None
            self.random_seed = get_device().random_seed
            self.device = "cpu"

        def forward_batch_generation(self, batch, *args, **kwargs):
            return GenerationBatchResult(
                next_token_ids=torch.full((batch.batch_size(),), sampled_token, dtype=torch.int64)
            )

    return ModelFreeTpWorker


def build_scheduler(engine: dict, model_dir: str, sampled_token: int):
    """SGLang's Scheduler for ``engine`` (module docstring); raises SGLang's own exception where
    it refuses to start."""
    from unittest import mock

    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import PortArgs, ServerArgs

    args = ServerArgs(
        model_path=model_dir,
        skip_tokenizer_init=True,
        device="cpu",
        dtype="float16",
        load_format="dummy",
        attention_backend="torch_native",
        page_size=1,
        max_total_tokens=engine["max_total_tokens"],
        context_length=engine["context_length"],
        max_running_requests=engine["max_running_requests"],
        chunked_prefill_size=engine["chunked_prefill_size"],
        max_prefill_tokens=engine["max_prefill_tokens"],
        schedule_conservativeness=engine["schedule_conservativeness"],
        enable_mixed_chunk=engine["enable_mixed_chunk"],
        disable_radix_cache=engine["disable_radix_cache"],
        schedule_policy="fcfs",
        disable_overlap_schedule=engine["disable_overlap_schedule"],
        disable_cuda_graph=True,
        watchdog_timeout=1e9,
    )

    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    worker = worker_class(sampled_token)

    def init_tp_model_worker(scheduler):
        scheduler.tp_worker = worker(scheduler.model_config, engine["max_total_tokens"])

    with mock.patch.object(Scheduler, "init_tp_model_worker", init_tp_model_worker):
        return Scheduler(args, PortArgs.init_new(args))


def front_door(scheduler, ignore_eos: bool):
    """SGLang's TokenizerManager, never started, on one request: a function of (request_id,
    input_ids, max_new_tokens) that raises its ValueError (``_validate_one_request``,
    tokenizer_manager.py:1307) or returns the request as it sends it on
    (``_create_tokenized_object``, tokenizer_manager.py:1541)."""
    from sglang.srt.managers.io_struct import GenerateReqInput, TokenizedGenerateReqInput
    from sglang.srt.managers.tokenizer_manager import TokenizerManager
    from sglang.srt.managers.utils import compute_num_reserved_tokens
    from sglang.srt.runtime_context import get_serving
    from sglang.srt.sampling.sampling_params import SamplingParams

    manager = TokenizerManager.__new__(TokenizerManager)
    manager.model_config = scheduler.model_config
    manager.context_len = scheduler.model_config.context_len
    manager.num_reserved_tokens = compute_num_reserved_tokens()
    manager.allow_auto_truncate = get_serving().allow_auto_truncate
    manager.validate_total_tokens = True

    def tokenize(request_id, input_ids, max_new_tokens: int):
        request = GenerateReqInput(
            input_ids=input_ids, sampling_params={"max_new_tokens": max_new_tokens}
        )
        manager._validate_one_request(request, input_ids)
        params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=ignore_eos)
        params.normalize(None)
        params.verify(scheduler.model_config.vocab_size)
        return TokenizedGenerateReqInput(
            rid=request_id,
            input_text=None,
            input_ids=array("q", input_ids),
            input_embeds=None,
            mm_inputs=None,
            token_type_ids=None,
            sampling_params=params,
            return_logprob=False,
            logprob_start_len=-1,
            top_logprobs_num=0,
            token_ids_logprob=None,
            stream=False,
        )

    return tokenize


# --- one run -----------------------------------------------------------------------------------


def is_abort(req) -> bool:
    """Whether SGLang has finished ``req`` with an abort, or will as it processes its batch's
    results (the one-token prefill of a request ``validate_input_length`` turned away, or a
    request it could not keep running)."""
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    return isinstance(req.finished_reason, FINISH_ABORT) or isinstance(req.to_finish, FINISH_ABORT)


class RunOver(Exception):
    """Raised from the request read to leave SGLang's event loop."""


class Run:
    """One workload on a fresh Scheduler: hands requests over, reads outputs, reports events."""

    def __init__(self, index: int, run: dict, model_dir: str):
        self.index, self.model_dir = index, model_dir
        self.engine, self.max_steps = run["engine"], run["max_steps"]
        self.prompts, self.sampled_token = run["prompts"], run["sampled_token_id"]
        self.arrivals = sorted(run["requests"], key=lambda r: r[3])  # stable: ties keep order
        self.next_arrival = self.step = self.iterations = 0
        self.step_open = False  # the current loop iteration counts as step self.step
        self.idled = False  # the last iteration was the idle one of a gap between arrivals
        # request id -> requested max_new_tokens, for the requests SGLang holds
        self.live: dict[str, int] = {}
        self.started: set[str] = set()
        self.first_token: set[str] = set()
        self.retractions: dict[str, int] = {}  # request id -> retraction_count seen
        self.requeued: set[str] = set()  # retracted, not yet admitted again
        # what SGLang sent towards the tokenizer in this iteration, each with its step: that of
        # the batch whose results it came from, else this one
        self.outputs: list = []
        self.launched: deque = deque()  # the steps of the batches run, not yet processed
        self.result_step: int | None = None  # the step of the batch being processed
        self.rows: list[list] = []

    def event(self, request_id, name, step=None, **fields) -> None:
        step = self.step if step is None else step
        emit(kind="event", run=self.index, step=step, id=request_id, event=name, **fields)

    def run(self) -> None:
        from unittest import mock

        try:
            scheduler = build_scheduler(self.engine, self.model_dir, self.sampled_token)
        except (ValueError, AssertionError, RuntimeError) as exc:
            emit(kind="startup_error", run=self.index, message=str(exc))
            return
        self.scheduler = scheduler
        self.tokenize = front_door(scheduler, self.engine["ignore_eos"])
        emit(
            kind="start",
            run=self.index,
            max_total_num_tokens=scheduler.max_total_num_tokens,
            free_tokens=scheduler.token_to_kv_pool_allocator.available_size(),
            max_running_requests=scheduler.max_running_requests,
            max_req_len=scheduler.max_req_len,
            max_req_input_len=scheduler.max_req_input_len,
            context_length=scheduler.model_config.context_len,
            chunked_prefill_size=scheduler.chunked_prefill_size,
            max_prefill_tokens=scheduler.max_prefill_tokens,
        )
        scheduler.ipc_channels.send_to_tokenizer.send_output = self.keep_output
        scheduler.ipc_channels.send_to_detokenizer.send_output = self.keep_output
        self.run_batch, self.process_batch_result = (
            scheduler.run_batch,
            scheduler.process_batch_result,
        )
        scheduler.run_batch = self.on_run_batch
        scheduler.process_batch_result = self.on_process_batch_result
        receiver = type(scheduler.request_receiver)  # a frozen dataclass: patched on its class
        try:
            with mock.patch.object(receiver, "_pull_raw_reqs", lambda _: self.pull_requests()):
                if self.engine["disable_overlap_schedule"]:
                    scheduler.event_loop_normal()
                else:
                    # run_event_loop's set-up on a CPU (scheduler.py:1992-2009): no WAR barrier
                    scheduler._war_barrier_enabled = False
                    scheduler.event_loop_overlap()
        except RunOver:
            pass
        if self.rows:
            emit(kind="steps", run=self.index, rows=self.rows)
        emit(kind="end", run=self.index, end_step=self.step, iterations=self.iterations)

    def keep_output(self, output, recv_obj=None) -> None:
        self.outputs.append((self.step if self.result_step is None else self.result_step, output))

    def on_run_batch(self, batch, *args, **kwargs):
        """``run_batch``, its step noted for the results."""
        self.launched.append(self.step)
        return self.run_batch(batch, *args, **kwargs)

    def on_process_batch_result(self, batch, result):
        """``process_batch_result``: what it finishes and the first tokens it appends belong to
        the step that ran the batch (the overlap loop processes it an iteration later), as the
        peer's executor counts a token in the step that computes it."""
        self.result_step = step = self.launched.popleft()
        try:
            return self.process_batch_result(batch, result)
        finally:
            self.result_step = None
            for req in batch.reqs:
                if req.output_ids and req.rid not in self.first_token and not is_abort(req):
                    self.first_token.add(req.rid)
                    self.event(req.rid, "first_token", step)

    def pull_requests(self) -> list:
        """The top of each loop iteration: close the one before, hand over this one's arrivals
        (as SGLang's TokenizerManager passes them on; an event for each it turns away)."""
        if self.step_open:
            self.close_step()
        self.outputs = []
        arrivals = self.arrivals
        if not self.live:
            if self.next_arrival == len(arrivals):
                raise RunOver
            arrival = arrivals[self.next_arrival][3]
            if arrival > self.step and not self.idled:
                self.idled = True  # a gap: one idle iteration (on_idle), then skip it
                return []
            self.step = max(self.step, arrival)
        self.idled = False
        if self.step >= self.max_steps:
            raise RunOver
        handed = []
        while self.next_arrival < len(arrivals) and arrivals[self.next_arrival][3] <= self.step:
            request_id, _, max_new_tokens, _ = arrivals[self.next_arrival]
            self.next_arrival += 1
            runs = self.prompts[request_id]
            input_ids = [t for first, count in runs for t in range(first, first + count)]
            try:
                handed.append(self.tokenize(request_id, input_ids, max_new_tokens))
            except ValueError as exc:
                self.event(request_id, "rejected", message=str(exc))
                continue
            self.live[request_id] = max_new_tokens
        self.step_open = bool(self.live)
        return handed

    def close_step(self) -> None:
        """What the iteration that was step ``self.step`` did, read after it ended."""
        scheduler = self.scheduler
        batch = scheduler.last_batch
        prefills = decodes = tokens = 0
        if batch is not None:
            if batch.forward_mode.is_extend():
                decodes = len(batch.decoding_reqs or ())
                prefills = len(batch.reqs) - decodes
                tokens = batch.extend_num_tokens
                for req in batch.reqs[:prefills]:
                    if req.rid not in self.started and not is_abort(req):
                        self.started.add(req.rid)
                        self.event(req.rid, "started")
                    elif req.rid in self.requeued:  # a retracted request admitted again
                        self.requeued.discard(req.rid)
                        self.event(req.rid, "resumed")
            else:
                decodes = tokens = len(batch.reqs)
        # a retracted request waits again in the queue with its retraction_count raised
        retracted = 0
        for req in scheduler.waiting_queue:
            if req.retraction_count > self.retractions.get(req.rid, 0):
                self.retractions[req.rid] = req.retraction_count
                self.requeued.add(req.rid)
                retracted += 1
                self.event(req.rid, "preempted")
        self.note_outputs()
        self.iterations += 1
        waiting = len(scheduler.waiting_queue)
        free = scheduler.token_to_kv_pool_allocator.available_size()
        batch_row = [prefills, decodes, tokens, retracted]
        # the radix cache's tokens no request locks (an allocation may evict them) and those
        # some request does
        tree = [scheduler.tree_cache.evictable_size(), scheduler.tree_cache.protected_size()]
        self.rows.append([self.step, free, len(self.live) - waiting, waiting, *batch_row, *tree])
        if len(self.rows) >= STEP_ROWS_PER_LINE:
            emit(kind="steps", run=self.index, rows=self.rows)
            self.rows = []
        self.step += 1
        self.step_open = False

    def note_outputs(self) -> None:
        """An event for each request whose end SGLang sent towards the tokenizer."""
        from sglang.srt.managers.io_struct import AbortReq, BatchTokenIDOutput

        ends: list = []  # (step, request id, finished reason, output tokens)
        for step, output in self.outputs:
            if isinstance(output, BatchTokenIDOutput):
                ends += [
                    (step, *end)
                    for end in zip(output.rids, output.finished_reasons, output.completion_tokens)
                ]
            elif isinstance(output, AbortReq):
                ends.append((step, output.rid, output.finished_reason, None))
        for step, request_id, reason, num_output_tokens in ends:
            requested = self.live.pop(request_id, None) if reason is not None else None
            if requested is None:
                continue  # not an end, or one reported already
            if reason.get("type") == "abort":
                # never run: SGLang turned it away at admission (its one-token abort prefill
                # aside); reported as SGLang processes it, a step late with the overlap loop
                name = "aborted" if request_id in self.started else "rejected"
                self.event(request_id, name, message=reason.get("message"))
                continue
            own = num_output_tokens == requested
            self.event(
                request_id,
                "finished",
                step,
                finish_reason=json.dumps(reason),
                num_output_tokens=num_output_tokens,
                cause="max_new_tokens" if own else reason.get("type", "other"),
            )


if __name__ == "__main__":
    sys.exit(main())
