"""kvlab's peers against the real engines' stored runs: the comparison the conformance tests
assert and the section of docs/CONFORMANCE.md that test_catalogue.py writes from it."""

from __future__ import annotations

from functools import lru_cache
from typing import Dict, List

from kvlab.analysis.peer_conformance import COMPARED, differences, vllm_workloads
from kvlab.backends.vllm import VLLM


@lru_cache(maxsize=1)
def vllm_comparisons() -> Dict[str, dict]:
    """Per conformance workload: the workload, real vLLM's stored result, kvlab's peer's result
    and the rows where they differ."""
    stored = VLLM.stored_results()
    comparisons = {}
    for workload in vllm_workloads():
        real = stored[workload.name]
        peer = workload.run_peer()
        comparisons[workload.name] = dict(workload=workload, real=real, peer=peer,
                                          differences=differences(peer, real))
    return comparisons


def _engine(args) -> str:
    chunking = (f"chunks of {args.max_num_batched_tokens:,}" if args.enable_chunked_prefill
                else f"{args.max_num_batched_tokens:,} tokens, no chunking")
    pool = f"{args.num_gpu_blocks:,} x {args.block_size}"
    if args.startup_blocks != args.num_gpu_blocks:
        pool += f" (start-up saw {args.startup_blocks:,})"
    extras = [] if args.scheduler_reserve_full_isl else ["no full-prompt reservation"]
    extras += [f"watermark {args.watermark:g}"] if args.watermark else []
    return "; ".join([pool, f"max_model_len {args.max_model_len:,}", f"{args.max_num_seqs} seqs",
                      chunking, *extras])


def render_vllm() -> List[str]:
    """The vLLM section of docs/CONFORMANCE.md."""
    header = VLLM.stored_header()
    comparisons = vllm_comparisons()
    requests = sum(len(c["workload"].requests) for c in comparisons.values())
    differing = sum(len({row["request_id"] for row in c["differences"]}) for c in comparisons.values())
    lines = [
        f"## vLLM {header['version']}: kvlab's `VllmScheduler` against vLLM's own scheduler", "",
        f"**{len(comparisons)} workloads, {requests:,} requests: {differing:,} differ in "
        f"{', '.join(COMPARED)}.**", "",
        f"The real runs are stored in `data/measurements/vllm-{header['version']}.json` (recorded "
        f"{header['recorded']} with `{header['command']}`); `tests/conformance/test_vllm_peer.py` "
        "holds kvlab's peer to them request by request, and `tests/analysis/test_backend_vllm.py` "
        "runs vLLM itself (`kvlab.backends.vllm`, in the environment `bash scripts/setup.sh vllm` "
        "makes) and fails if it no longer gives what is stored.", "",
        "| workload | engine (blocks x tokens) | requests | finished | rejected | unfinished | "
        "preemptions | steps | differing |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, c in comparisons.items():
        summary = c["real"].summary()
        note = " (refuses to start)" if c["real"].error is not None else ""
        lines.append(
            f"| `{name}` | {_engine(c['workload'].args)}{note} | {len(c['workload'].requests):,} | "
            f"{summary['finished']:,} | {summary['rejected']:,} | "
            f"{summary['waiting'] + summary['running']:,} | {summary['recomputes']:,} | "
            f"{c['real'].end_step:,} | {len({r['request_id'] for r in c['differences']}):,} |")
    lines += [
        "",
        "How the real scheduler runs here: vLLM's `Scheduler` (the synchronous one, not the "
        "`AsyncScheduler` a GPU deployment may default to) with its own `KVCacheManager` and "
        "`BlockPool`, built as its engine core builds them from a config.json-only model folder, "
        "on the CPU, with the KV cache planned by vLLM's start-up functions from exactly the "
        "pool's memory; the model runner is faked by one sampled token per request whose prompt is "
        "computed. A step is one `schedule()` and one `update_from_output()`; both sides skip the "
        "steps in which nothing is waiting or running. Prefix caching is off on both sides "
        "(vLLM's default is on; kvlab models no prefix reuse, and with prompts that share no "
        "prefix it would only change a preempted request's recompute).",
        "",
        ("Remaining differences: none on these workloads. " if differing == 0 else
         f"Remaining differences: {differing:,} requests (the table's last column); each is a "
         "bug to find. ") + "What kvlab's peer leaves out is named in "
        "`kvlab/sched/vllm.py`: speculative decoding, the priority policy, "
        "`long_prefill_token_threshold`, KV connectors, LoRA and encoders; vLLM's start-up "
        "refusal is reproduced for full-attention models only.", ""]
    return lines
