"""kvlab's peers against the real engines' stored runs: the comparison the conformance tests
assert and the sections of docs/CONFORMANCE.md that test_catalogue.py writes from it."""

from __future__ import annotations

from functools import cache

from kvlab.analysis.peer_conformance import COMPARED, differences
from kvlab.backends.engines import ENGINES
from kvlab.sched.sglang import SglangServerArgs


@cache
def comparisons(engine: str) -> dict[str, dict]:
    """Per conformance workload of ``engine``: the workload, the real engine's stored result,
    kvlab's peer's result and the rows where they differ."""
    backend, workloads = ENGINES[engine]
    stored = backend.stored_results()
    found = {}
    for workload in workloads():
        real = stored[workload.name]
        peer = workload.run_peer()
        found[workload.name] = dict(
            workload=workload, real=real, peer=peer, differences=differences(peer, real)
        )
    return found


def _vllm_engine(args) -> str:
    chunking = (
        f"chunks of {args.max_num_batched_tokens:,}"
        if args.enable_chunked_prefill
        else f"{args.max_num_batched_tokens:,} tokens, no chunking"
    )
    pool = f"{args.num_gpu_blocks:,} x {args.block_size}"
    if args.startup_blocks != args.num_gpu_blocks:
        pool += f" (start-up saw {args.startup_blocks:,})"
    extras = [] if args.scheduler_reserve_full_isl else ["no full-prompt reservation"]
    extras += [f"watermark {args.watermark:g}"] if args.watermark else []
    extras += ["prefix caching"] if args.enable_prefix_caching else []
    extras += ["async scheduling"] if args.async_scheduling else []
    return "; ".join(
        [
            pool,
            f"max_model_len {args.max_model_len:,}",
            f"{args.max_num_seqs} seqs",
            chunking,
            *extras,
        ]
    )


def _sglang_engine(args: SglangServerArgs) -> str:
    chunking = "no chunking" if args.chunk_size is None else f"chunks of {args.chunk_size:,}"
    return "; ".join(
        [
            f"{args.max_total_tokens:,} tokens",
            f"context {args.context_length:,}",
            f"{args.resolved_max_running_requests} running",
            chunking,
            f"prefill budget {args.max_prefill_tokens:,}",
            "ignore_eos" if args.ignore_eos else "new-token ratio",
            *([] if args.disable_radix_cache else ["radix cache"]),
            *([] if args.disable_overlap_schedule else ["overlap loop"]),
        ]
    )


#: Per engine: the section's title, how an engine is described, how the real scheduler ran.
SECTIONS = {
    "vllm": (
        "kvlab's `VllmScheduler` against vLLM's own scheduler",
        "engine (blocks x tokens)",
        _vllm_engine,
        "How the real scheduler runs here: vLLM's `Scheduler`, or where the table says async "
        "scheduling its `AsyncScheduler` stepped as `EngineCore.step_with_batch_queue` steps "
        "it (each batch processed after the next is scheduled), with its own `KVCacheManager` and "
        "`BlockPool`, built as its engine core builds them from a config.json-only model "
        "folder, on the CPU, with the KV cache planned by vLLM's start-up functions from "
        "exactly the pool's memory; the model runner is faked by one sampled token per "
        "request whose prompt is computed. A step is one `schedule()` and one "
        "`update_from_output()`; both sides skip the steps in which nothing is waiting or "
        "running; with async scheduling, a step's row follows the previous batch's update. "
        "Prefix caching and async scheduling are on where the table says so, and off "
        "elsewhere; with both on (vLLM's defaults, and kvlab's) the engine runs as it ships. Both "
        "sides make each prompt's token ids by one rule, `kvlab.core.prompt_tokens`, from its "
        "prefix hashes, so the Mooncake conversation slices share what the trace says they "
        "share (every prompt its first 512-token block, follow-up turns their history), and "
        "prompts without hashes share nothing. With caching on, a preempted request "
        "also comes back to the blocks of its own that were not evicted meanwhile. "
        '[ENGINES.md, "With their defaults on"]'
        "(ENGINES.md#with-their-defaults-on-what-is-not-modelled-yet) describes what the peer "
        "models and what is still missing. What kvlab's peer leaves out is named in "
        "`kvlab/sched/vllm.py`: speculative decoding, the priority policy, "
        "`long_prefill_token_threshold`, KV connectors, LoRA and encoders; vLLM's start-up "
        "refusal is reproduced for full-attention models only.",
    ),
    "sglang": (
        "kvlab's `SglangScheduler` against SGLang's own scheduler",
        "engine",
        _sglang_engine,
        "How the real scheduler runs here: SGLang's own `Scheduler.event_loop_normal`, or "
        "where the table says overlap loop its `event_loop_overlap` (each batch's results "
        "processed after the next batch is scheduled), unchanged, with its real memory pools "
        "on the CPU (page size 1), its "
        "`TokenizerManager`'s request checks, and a model worker that loads no model and "
        "samples one token per row; the sockets are replaced by the driver's hand-over "
        "(`docs/ENGINES.md` names every stand-in). A step is one "
        "iteration of the event loop that had a request to work on: a prefill batch or "
        "a decode batch, never both (mixed chunks off). The radix cache is on, on both sides, "
        "in the workloads whose engine says so (named `/radix`), and off in the others; it "
        "changes which step requests run on most where prompts share prefixes, as Mooncake's "
        "conversations do. The overlap loop is on, on both sides, in the workloads whose engine "
        "says so (named `/overlap`), and off in the others; it keeps a finished request's "
        "tokens and slot a step longer, so it moves admissions a step later on loaded "
        "traffic; a finish still counts in the step that ran the last token, and with it on a "
        "step's row follows the processing of the previous batch. SGLang, and kvlab's "
        "`SglangServerArgs`, default both switches on; the workloads without a suffix keep "
        "both off. "
        "[ENGINES.md](ENGINES.md#with-their-defaults-on-what-is-not-modelled-yet) describes "
        "both. What kvlab's peer "
        "leaves out is named in `kvlab/sched/sglang.py`. One detail the comparison "
        "does not count: a request whose max_new_tokens SGLang clips to 0 has a "
        "'first token' in SGLang's trace (its sampler draws a token it never reports) "
        "and none in kvlab's.",
    ),
}


def render(engine: str) -> list[str]:
    """The section of docs/CONFORMANCE.md for ``engine``."""
    backend, _ = ENGINES[engine]
    title, engine_column, describe, how = SECTIONS[engine]
    header = backend.stored_header()
    found = comparisons(engine)
    requests = sum(len(c["workload"].requests) for c in found.values())
    differing = sum(len({row["request_id"] for row in c["differences"]}) for c in found.values())
    lines = [
        f"## {backend.title} {header['version']}: {title}",
        "",
        f"**{len(found)} workloads, {requests:,} requests: {differing:,} differ in "
        f"{', '.join(COMPARED)}.**",
        "",
        f"The real runs are stored in `data/measurements/{backend.name}-{header['version']}.json` "
        f"(recorded {header['recorded']} with `{header['command']}`); "
        "`tests/conformance/test_real_peers.py` holds kvlab's peer to them request by request and "
        f"step by step, and `tests/analysis/test_backend_{backend.name}.py` runs "
        f"{backend.title} itself (`kvlab.backends.{backend.name}`, in the environment "
        f"`{backend.setup_command}` makes) and fails if it no longer gives what is stored.",
        "",
        f"| workload | {engine_column} | requests | finished | rejected | unfinished | "
        "preemptions | steps | differing |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in found.items():
        summary = c["real"].summary()
        note = " (refuses to start)" if c["real"].error is not None else ""
        lines.append(
            f"| `{name}` | {describe(c['workload'].args)}{note} | {len(c['workload'].requests):,} | "
            f"{summary['finished']:,} | {summary['rejected']:,} | "
            f"{summary['waiting'] + summary['running']:,} | {summary['recomputes']:,} | "
            f"{c['real'].end_step:,} | {len({r['request_id'] for r in c['differences']}):,} |"
        )
    remaining = (
        "Remaining differences: none on these workloads."
        if differing == 0
        else f"Remaining differences: {differing:,} requests (the table's last column); "
        "each is a bug to find."
    )
    return lines + ["", how, "", remaining, ""]
