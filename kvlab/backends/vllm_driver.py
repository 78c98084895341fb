"""The real vLLM v1 scheduler stepped on kvlab workloads, in vLLM's own environment: a script that
imports vLLM and the standard library only, never kvlab. docs/ENGINES.md gives its protocol and
how vLLM 0.34.0 runs here without a GPU, weights or a model hub (``EngineCore.__init__`` and
``_initialize_kv_caches`` of vllm/v1/engine/core.py by hand, the synchronous ``Scheduler`` of
vllm/v1/core/sched/scheduler.py or, with ``async_scheduling``, the ``AsyncScheduler`` stepped as
``EngineCore.step_with_batch_queue`` steps it, a faked model runner). Each prompt's token ids
and the sampled token come in the input (kvlab.core.prompt_tokens makes them), so kvlab's peer
hashes the same blocks."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import deque

#: A layer-count-agnostic Llama config: only what ModelConfig reads; KV geometry is set per run.
_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 1 << 30,
    "torch_dtype": "float16",
    "rms_norm_eps": 1e-5,
}
STEP_ROWS_PER_LINE = 500


#: The protocol's stream: the process's stdout, kept apart from sys.stdout, which main() points
#: at stderr so that nothing vLLM prints (its logger writes to stdout) can break a line.
PROTOCOL = sys.stdout


def emit(**fields) -> None:
    PROTOCOL.write(json.dumps(fields, separators=(",", ":")) + "\n")
    PROTOCOL.flush()


def main() -> int:
    sys.stdout = sys.stderr
    import torch
    import vllm

    spec = json.load(sys.stdin)
    emit(kind="hello", vllm=vllm.__version__, torch=torch.__version__)
    with tempfile.TemporaryDirectory(prefix="kvlab-vllm-model-") as model_dir:
        with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as handle:
            json.dump(_MODEL_CONFIG, handle)
        for index, run in enumerate(spec["runs"]):
            run_one(index, run, model_dir)
    return 0


def build_scheduler(engine: dict, model_dir: str):
    """vLLM's config and scheduler for ``engine``, as EngineCore builds them; raises vLLM's own
    ValueError where vLLM refuses to start."""
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        resolve_kv_cache_block_sizes,
    )
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.structured_output import StructuredOutputManager

    dtype = getattr(torch, {"fp8": "float8_e4m3fn"}.get(engine["dtype"], engine["dtype"]))
    max_model_len = engine["max_model_len"]
    model_config = ModelConfig(
        model=model_dir, skip_tokenizer_init=True, max_model_len=max_model_len, dtype="float16"
    )
    cache_config = CacheConfig(
        block_size=engine["block_size"], enable_prefix_caching=engine["enable_prefix_caching"]
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=engine["max_num_seqs"],
        max_num_batched_tokens=engine["max_num_batched_tokens"],
        enable_chunked_prefill=engine["enable_chunked_prefill"],
        scheduler_reserve_full_isl=engine["scheduler_reserve_full_isl"],
        watermark=engine["watermark"],
        async_scheduling=engine["async_scheduling"],
        max_model_len=max_model_len,
        is_encoder_decoder=False,
    )
    config = VllmConfig(
        model_config=model_config,
        cache_config=cache_config,
        scheduler_config=scheduler_config,
        device_config=DeviceConfig(device="cpu"),
    )
    specs = {
        f"model.layers.{layer}.self_attn.attn": FullAttentionSpec(
            block_size=engine["block_size"],
            num_kv_heads=engine["num_kv_heads"],
            head_size=engine["head_dim"],
            dtype=dtype,
        )
        for layer in range(engine["num_layers"])
    }
    resolve_kv_cache_layout(config, [["NHD"]], list(specs.values()))
    groups = get_global_kv_cache_groups(config, [specs])
    bytes_per_block = sum(layer.page_size_bytes for layer in specs.values())
    kv_configs = get_kv_cache_configs(
        config, [specs], [engine["startup_num_gpu_blocks"] * bytes_per_block], groups
    )
    kv_config = generate_scheduler_kv_cache_config(kv_configs)
    kv_config.num_blocks = engine["num_gpu_blocks"]  # the pool the scheduler really gets
    config.cache_config.num_gpu_blocks = kv_config.num_blocks
    block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_config, config)
    scheduler_cls = AsyncScheduler if engine["async_scheduling"] else Scheduler
    scheduler = scheduler_cls(
        vllm_config=config,
        kv_cache_config=kv_config,
        structured_output_manager=StructuredOutputManager(config),
        block_size=block_size,
        hash_block_size=hash_block_size,
    )
    return scheduler, InputProcessor(config), request_block_hasher(config, hash_block_size)


def request_block_hasher(config, hash_block_size: int):
    """The block hasher EngineCore gives each Request (vllm/v1/engine/core.py, ``__init__``),
    None without prefix caching. Without it a Request has no block hashes and the cache never
    hits, however ``enable_prefix_caching`` is set."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    if not config.cache_config.enable_prefix_caching:
        return None
    hash_fn = get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return get_request_block_hasher(hash_block_size, hash_fn, config.num_hash_lookahead_tokens)


def vllm_message(exc: ValueError) -> str:
    """vLLM's own message: a config check raises a ValueError that pydantic wraps in a
    ValidationError, whose text adds pydantic's framing around it."""
    if hasattr(exc, "errors"):
        return "; ".join(
            str(error.get("ctx", {}).get("error", error["msg"])) for error in exc.errors()
        )
    return str(exc)


def run_one(index: int, run: dict, model_dir: str) -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    try:
        scheduler, input_processor, block_hasher = build_scheduler(run["engine"], model_dir)
    except ValueError as exc:
        emit(kind="startup_error", run=index, message=vllm_message(exc))
        return
    pool = scheduler.kv_cache_manager.block_pool
    emit(
        kind="start",
        run=index,
        num_gpu_blocks=pool.num_gpu_blocks,
        free_blocks=pool.get_num_free_blocks(),
        max_model_len=scheduler.max_model_len,
    )

    def event(step, request_id, name, **fields):
        emit(kind="event", run=index, step=step, id=request_id, event=name, **fields)

    arrivals = sorted(run["requests"], key=lambda r: r[3])  # stable: list order breaks ties
    prompts, sampled_token = run["prompts"], run["sampled_token_id"]
    # the batches scheduled and not yet processed, newest first: with async scheduling
    # EngineCore's batch queue of max_concurrent_batches = 2 (vllm/config/vllm.py)
    queue_size = 2 if run["engine"]["async_scheduling"] else 1
    in_flight: deque = deque()
    next_arrival, step, iterations, rows = 0, 0, 0, []
    started, first_token, prefilling = set(), set(), set()

    def process(batch_step, output, scheduled, sampled):
        """``update_from_output`` on a batch; its events belong to the step that scheduled it."""
        outputs = scheduler.update_from_output(
            output, ModelRunnerOutput(req_ids=list(scheduled), sampled_token_ids=sampled)
        )
        for request_id, tokens_out in zip(scheduled, sampled):
            if tokens_out and request_id not in first_token:
                first_token.add(request_id)
                event(batch_step, request_id, "first_token")
        for out in [out for engine in outputs.values() for out in engine.outputs]:
            if out.finish_reason is not None:
                request = scheduled[out.request_id]
                generated = request.num_output_tokens
                own = generated >= request.max_tokens
                event(
                    batch_step,
                    out.request_id,
                    "finished",
                    finish_reason=str(out.finish_reason),
                    num_output_tokens=generated,
                    cause="max_tokens" if own else "max_model_len",
                )

    max_steps = run["max_steps"]
    while step < max_steps:
        # nothing waiting or running: skip to the next arrival, as kvlab's Engine does (the real
        # engine core would run one more empty step to tell its workers what finished)
        if not scheduler.has_unfinished_requests():
            if next_arrival == len(arrivals):
                break
            step = max(step, arrivals[next_arrival][3])
            if step >= max_steps:
                break
        while next_arrival < len(arrivals) and arrivals[next_arrival][3] <= step:
            request_id, prompt_len, max_tokens, _ = arrivals[next_arrival]
            next_arrival += 1
            try:  # the front door: vLLM's own validation of the prompt and its parameters
                params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
                input_processor._validate_prompt_len(prompt_len, "decoder")
            except (ValueError, VLLMValidationError) as exc:
                event(step, request_id, "rejected", message=str(exc))
                continue
            tokens = [t for first, n in prompts[request_id] for t in range(first, first + n)]
            scheduler.add_request(
                Request(
                    request_id,
                    tokens,
                    params,
                    None,
                    arrival_time=float(step),
                    block_hasher=block_hasher,
                )
            )
        if not scheduler.has_unfinished_requests():
            continue
        output = scheduler.schedule()
        scheduled = {
            request_id: scheduler.requests[request_id] for request_id in output.num_scheduled_tokens
        }
        for new in output.scheduled_new_reqs:  # admitted from the waiting queue
            prefilling.add(new.req_id)
            event(step, new.req_id, "resumed" if new.req_id in started else "started")
            started.add(new.req_id)
        preempted = sorted(output.preempted_req_ids or ())
        for request_id in preempted:
            event(step, request_id, "preempted")
        # the fake model runner: a token for every request whose prompt is now computed, decided
        # now (schedule() has advanced num_computed_tokens; by the update, maybe the next batch)
        sampled = [[] if r.is_prefill_chunk else [sampled_token] for r in scheduled.values()]
        # a decode row: a request that sampled since its admission (its prompt, or after a
        # preemption its prompt and outputs, computed), as kvlab counts generation steps
        decodes = sum(1 for request_id in scheduled if request_id not in prefilling)
        prefilling.difference_update(
            request_id for request_id, tokens_out in zip(scheduled, sampled) if tokens_out
        )
        # step_with_batch_queue (vllm/v1/engine/core.py): queue the batch, and process the
        # oldest once the queue is full (its other exit, nothing left to schedule, never comes
        # here: a request stays unfinished while its last token is in flight); a batch still
        # in flight when the run stops is never processed
        in_flight.appendleft((step, output, scheduled, sampled))
        if len(in_flight) == queue_size:
            process(*in_flight.pop())
        iterations += 1
        queues = [len(scheduler.running), len(scheduler.waiting)]
        batch = [len(scheduled) - decodes, decodes, output.total_num_scheduled_tokens]
        rows.append([step, pool.get_num_free_blocks(), *queues, *batch, len(preempted)])
        if len(rows) >= STEP_ROWS_PER_LINE:
            emit(kind="steps", run=index, rows=rows)
            rows = []
        step += 1
    if rows:
        emit(kind="steps", run=index, rows=rows)
    emit(kind="end", run=index, end_step=step, iterations=iterations)


if __name__ == "__main__":
    sys.exit(main())
