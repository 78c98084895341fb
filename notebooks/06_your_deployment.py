# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Your deployment: will it hit issue #21470?
#
# *About 20 minutes.*
#
# Notebooks 01-05 explain a crash after the fact. An engineer about to deploy wants the answer
# before: for *this* model on *this* GPU with *these* settings, does some context length make a
# rank raise `ValueError: User-provided base page indices is too short`, stall the engine, or
# get rejected with a reason? Everything needed is arithmetic the walk has already checked
# against real runs, done in the order the real start-up does it:
#
# 1. **which KV cache manager** the deployment gets. `KvCacheConfig.use_kv_cache_manager_v2`
#    defaults to `"auto"`, which gives the newer V2 manager (the one the walk has studied) only
#    to models whose class declares it: Nemotron-H, Qwen3-Next, Qwen3.5. Llama, Qwen3-MoE,
#    DeepSeek-V3, Mistral get the older V1 `KVCacheManager`, and so does any beam width above 1;
# 2. each rank's KV memory: under V2 the quota `(total − peak) × free_gpu_memory_fraction`
#    (notebook 01), with a hybrid's recurrent-state slots taken from it first (notebook 05);
#    under V1 the smaller of the creator's token estimate and 90 % of the memory free when the
#    manager is built;
# 3. each rank's pool, per pipeline stage (a stage holds its own share of the layers), then the
#    MIN all-reduce across ranks (notebook 01);
# 4. the `max_seq_len` clamp and, under V2, the page-index row sized from it, or from the
#    configured value under the one-line fix (notebooks 02 and 03);
# 5. what a lone request of each context length meets under each policy (notebook 04's phase
#    diagram, here along one line).
#
# `kvlab.analysis.deployment.plan_deployment` does these steps in closed form; `kvlab plan` is
# the same from the command line. Models come from the presets in `data/models/` (each with its
# source and the published config fields its numbers come from) or from any local
# `config.json`, read by transformers' configuration classes with no network; the checkpoint's
# quantization (fp8, nvfp4) sets the weights and the KV cache's dtype, as it does upstream.

# %% tags=["parameters"]
model: str = "llama-3.1-70b"  # a preset of data/models/ for section 3
gpu: str = "h100-80gb"  # a GPU preset (kvlab.analysis.gpus.GPUS)
weights_gib: float = 0.0  # weights per rank in GiB; 0: the parameter count in the checkpoint's format / tp
tp_size: int = 4  # tensor parallelism
max_seq_len: int = 131072  # configured max_seq_len
max_batch_size: int = 256  # max_batch_size
chunked_prefill: bool = True  # TensorRT-LLM's default is off: then a prompt past max_num_tokens (8,192) is rejected
manager: str = "auto"  # the KV cache manager: auto (TensorRT-LLM's default), v1 or v2
traffic: str = "azure-conv"  # §7's trace: azure-conv, azure-code, mooncake-conversation, or your file's path
traffic_requests: int = 2000  # §7 replays the trace's first N rows (SMOKE: at most 300)
SMOKE: bool = False  # True (CI): fewer rows in the preset table

# %%
import dataclasses
import json
import shlex
import tempfile
import textwrap
from pathlib import Path

from kvlab.analysis.deployment import Deployment, example_deployments, plan_deployment
from kvlab.analysis.gpus import GPUS
from kvlab.analysis.models import load_model, load_preset, model_names, read_config
from kvlab.core.memory import GIB
from kvlab.core.paths import REPOSITORY
from kvlab.notebook import viz
from kvlab.notebook.findings import Finding, report_findings
from kvlab.analysis.replay import replay_trace
from kvlab.notebook.parameters import check_plan_parameters, traffic_file
from kvlab.notebook.tables import table
from kvlab.notebook.viz.replay import replay_figure
from kvlab.notebook.widgets import plan_panel

# Bad parameters stop here, with a message naming the parameter.
weights = weights_gib or None  # None: derived from the parameter count
check_plan_parameters(model=model, gpu=gpu, weights_gib=weights, tp_size=tp_size,
                      max_seq_len=max_seq_len, max_batch_size=max_batch_size,
                      chunked_prefill=chunked_prefill, manager=manager, traffic=traffic,
                      traffic_requests=traffic_requests, SMOKE=SMOKE)
EXAMPLES = example_deployments()
findings = []

# %% [markdown]
# ## 1. The #21470 deployment, planned before it ran
#
# The report's deployment as kvlab's scenario assumes it (notebook 01): 16 GB300 ranks with
# attention data parallelism, a model of Qwen3-235B-A22B's geometry (94 layers, 4 KV heads of
# 128, bf16), 22 GiB of weights per rank, a MoE workspace of 28 GiB on rank 0 growing to 40 GiB
# on the last, `max_seq_len` 1,048,576 and a 1,000,000-token context. The crash came from the
# V2 manager's native resize, so the deployment ran V2 (its model class does not ask for it:
# the operator turned it on), and it allowed a `max_seq_len` past the model's own 40,960. The
# plan names every number notebook 01 found by running the ranks: the last rank's 29,962 blocks
# become everyone's pool, `max_seq_len` is clamped to 958,784 and the row is 29,964 entries
# wide, while the one-line fix would size it 32,772.

# %%
plan = plan_deployment(EXAMPLES["issue-21470"])
print(plan.explain())
viz.show(viz.plan_ranges_figure(plan))

assert (plan.blocks, plan.capacity_tokens) == (29962, 958784)
assert (plan.width_current, plan.width_fix) == (29964, 32772)
assert plan.first("crash") == 958_849 and plan.worst() == "crash"
assert plan.worst("capacity") == "reject"
findings.append(Finding(scenario="issue #21470 (16 x GB300)", policy="current code",
                        outcome=plan.worst(),
                        numbers=f"contexts from {plan.first('crash'):,} tokens raise; pool "
                                f"{plan.capacity_tokens:,} tokens, row {plan.width_current:,} entries"))
findings.append(Finding(scenario="issue #21470 (16 x GB300)", policy="admission control (PR #21720)",
                        outcome=plan.worst("capacity"),
                        numbers=f"contexts past {plan.longest('capacity'):,} tokens are rejected with a reason"))

# %% [markdown]
# The bands read left to right: every request that fits the pool whole finishes; a thin band
# stalls, from the contexts whose 64 new tokens no longer fit the pool (so it starts just short of
# the pool's capacity) to the end of the clamped row (its pages cannot all be had, but the row
# holds them); everything past the row raises. The one-line fix turns the red band orange —
# never served, never refused — and admission control turns it blue: rejected at the door with
# a reason. (Admission control's last served context is one token shorter than the current
# code's: it counts a page for every one of the 64 new tokens, while the last generated token
# never needs its KV slot.) The per-rank picture shows why the pool is what it is: the last
# rank's workspace sets everyone's pool through the MIN.

# %%
viz.show(viz.rank_budget_figure(plan.rank_plans(), title="Issue #21470: per-rank memory (16 ranks)"))

# %% [markdown]
# ### The same deployment on the manager it gets by default
#
# Left at `"auto"`, Qwen3-235B gets the V1 manager. V1 sizes its pool differently: the creator
# estimates the bytes per token as `head_dim × KV heads // tp` — a floor over all the heads —
# and the manager then takes the smaller of that estimate's token count and 90 % of the memory
# free at construction over the real bytes (`ceil(KV heads / tp)` whole heads per layer).
# Under this deployment's attention DP every rank holds all four heads and the two agree, so
# the pool is V2's less one block: 29,961 (V1 cuts the quota in pages; V2's storage first rounds
# it up to whole granules of 32 MiB, which here adds one page); at tp 16 without it the estimate is 128 × 4 // 16 = 32
# values per layer where each rank really holds one whole head of 128, four times too few, and
# the free memory sets the pool. V1 clamps `max_seq_len` too, but the clamped value reaches
# the request door: a prompt as long as the clamped `max_seq_len` is refused there
# ("`default_max_tokens` ... must be greater than 0"), a shorter one has its output trimmed to
# fit. Nothing crashes; the long context is rejected with a reason.

# %%
v1 = plan_deployment(dataclasses.replace(EXAMPLES["issue-21470"], manager="auto"))
print(v1.explain())
assert v1.manager == "v1" and v1.worst() == "reject" and v1.first("crash") is None
assert v1.blocks == plan.blocks - 1 and v1.estimated_bytes_per_token == v1.bytes_per_token
no_dp = plan_deployment(dataclasses.replace(EXAMPLES["issue-21470"], manager="auto", attention_dp=False))
print(f"without attention DP: estimate {no_dp.estimated_bytes_per_token:,} B per token, "
      f"real {no_dp.bytes_per_token:,} B")
assert no_dp.bytes_per_token == 4 * no_dp.estimated_bytes_per_token
findings.append(Finding(scenario="issue #21470 (16 x GB300)", policy="V1 manager (the default)",
                        outcome=v1.worst(),
                        numbers=f"prompts from {v1.clamped_max_seq_len:,} tokens are rejected; "
                                f"pool {v1.capacity_tokens:,} tokens"))

# %% [markdown]
# ## 2. The panel: move your own deployment
#
# It starts at the #21470 deployment, on V2. Pick a model, a GPU and the KV cache manager (`auto` is
# what the model gets by default), set the weights per rank (0: derived from the model's parameter
# count and checkpoint over the ranks; picking another model sets it back to 0, so the report's 22
# GiB must be set again after a round trip) and rank 0's workspace (the others add the report's 12
# GiB spread), the configured `max_seq_len`, `max_batch_size` and the number of attention-DP ranks;
# the rest (activations, non-torch memory, chunked prefill, a `max_seq_len` allowed past the model's
# own) stays the report's. The verdict box says what the current code does next to admission control
# (a V2 proposal); its detail is the whole plan. Try: the manager to `auto` (V1: the crash becomes a
# rejection), back to `v2` and rank 0's workspace down to 0 (the clamp goes away and so does the
# crash), then `qwen3.5-27b` with batch size 2,048 (a hybrid: its recurrent-state slots come out of
# the quota first; 2,050 of them, 149.77 GiB, fit a GB300's quota) and the GPU to `h100-80gb` (its
# 44.55 GiB quota does not hold them, and merged code raises at construction).

# %%
plan_panel()

# %% [markdown]
# ## 3. A model of your own
#
# The parameters cell picks a preset, a GPU, the parallelism and the manager (`auto` by
# default, as upstream). Weights not given are derived from the preset's parameter count in the
# checkpoint's format (bf16, or DeepSeek-V3's fp8 blocks), split evenly over the
# tensor-parallel ranks (an approximation the plan says it makes). Unlike §1's deployment, these
# do not allow a `max_seq_len` past the model's own limit (its `max_position_embeddings` times
# the rope factor, §5): a longer one is lowered to it before anything else, as the executor does
# ("Specified self.max_seq_len=... is larger than what the model can support"). So at the
# 131,072 of the parameters cell mistral-7b-v0.1 plans for its own 32,768: its longest context
# that finishes is 32,768 and it is not clamped, for the pool was never asked for more. The
# table below runs the same question over every preset on that GPU at the same settings: which
# manager each gets, the `max_seq_len` it plans for, where it stops, and how?

# %%
mine = plan_deployment(Deployment(model=load_model(model), gpu_gib=GPUS[gpu].gib,
                                  weights_gib=weights, tp_size=tp_size, max_seq_len=max_seq_len,
                                  max_batch_size=max_batch_size, chunked_prefill=chunked_prefill,
                                  manager=manager))
print(mine.explain())
viz.show(viz.plan_ranges_figure(mine))
findings.append(Finding(scenario=f"{model} on {gpu}, tp {tp_size}", policy="current code",
                        outcome=mine.worst(), numbers=f"longest context that finishes: {mine.longest():,} tokens"))


# %%
def preset_row(name):
    try:
        deployment = Deployment(model=load_model(name), gpu_gib=GPUS[gpu].gib, tp_size=tp_size,
                                max_seq_len=max_seq_len, max_batch_size=max_batch_size,
                                chunked_prefill=chunked_prefill, manager=manager)
    except ValueError as exc:  # e.g. a tp that does not divide the model's heads
        return {"model": name, "verdict": f"refused: {exc}"}
    p = plan_deployment(deployment)
    verdict = p.worst() if p.starts else ("construction raises" if p.blocks else "cannot start")
    return {"model": name, "manager": p.manager.upper(),
            "max_seq_len": p.deployment.configured_max_seq_len,  # lowered to the model's own
            "KV B/token/rank": p.bytes_per_token,
            "pool tokens": p.capacity_tokens if p.starts else "-",
            "clamped": ("yes" if p.clamped else "no") if p.starts else "-",
            "row now": p.width_current if p.starts and p.manager == "v2" else "-",
            "row with fix": p.width_fix if p.starts and p.manager == "v2" else "-",
            "longest ok": p.longest(), "verdict": verdict,
            "first crash": p.first("crash") or "-"}


names = model_names()[:3] if SMOKE else model_names()
rows = [preset_row(name) for name in names]
clamped = [r["model"] for r in rows if r.get("clamped") == "yes"]
print(textwrap.fill(f"clamped at these settings: {', '.join(clamped)}" if clamped else
                    "no preset is clamped at these settings (each pool holds its max_seq_len, already "
                    "lowered to the model's own limit): change tp_size or gpu in the parameters cell "
                    "to see one (on the h100-80gb, tp_size 1, 2 and 8 each clamp a preset)", 100))
table(rows, index="model")

# %% [markdown]
# A big model on few GPUs leaves no quota at all: at this tensor parallelism the weights of
# DeepSeek-V3 or Qwen3-235B alone exceed the GPU (at a lower tp_size, more presets' do), and the
# plan says the executor cannot start rather than drawing a pool of nothing. Most presets get V1.
# Where a pool is too small for `max_seq_len` (the table's "clamped" column, and the line above
# it), V1 rejects the prompts past the clamped length, while on V2 the contexts between the
# clamped row and `max_seq_len` crash. The hybrids get V2, and with a large `max_batch_size` their
# state slots may not fit: then construction raises and nothing runs. With TensorRT-LLM's default
# of chunked prefill off, a prompt longer than `max_num_tokens` (8,192) is refused at the door
# before any of this: set `chunked_prefill = False` above to see `kvlab plan` warn that most
# context lengths are refused (its exit code is then 5).

# %% [markdown]
# ## 4. A hybrid, stage by stage
#
# A pipeline stage holds a contiguous share of **every** decoder layer — `Mapping.pp_layers`
# splits the whole list, MLP-only layers included, the first stages one layer longer — so the
# stages of a hybrid differ. Nemotron-Nano-9B-v2 has 56 layers: 27 Mamba, 25 MLP-only and 4
# attention. At pp 4 its stages hold (attention, Mamba) layers (0, 8), (2, 6), (2, 6), (0, 7):
# the first stage has no KV pool at all and the most recurrent state, so it is the one that
# raises when the slots do not fit, and its page-index table has one pool where the middle
# stages have two (attention pages and SSM slots). Where it builds, the runtime cuts each rank's
# quota in granules (32 MiB past 16 GiB), gives the state pools the granules of every live slot
# first and the attention pool the rest. A stage without attention layers (the first and the last
# here) has no attention pool, so its state pools take the whole quota: its "state slots" are more
# than the live slots that "slots need GiB" counts.

# %%
nemotron = Deployment(model=load_model("nemotron-nano-9b-v2"), gpu_gib=GPUS["h100-80gb"].gib,
                      pp_size=4, max_batch_size=512, chunked_prefill=True, max_seq_len=32768)
stages = plan_deployment(nemotron).hybrid["stages"]
stage_rows = [{"stage": st["stage"], "attention layers": st["attention_layers"],
               "Mamba layers": st["recurrent_layers"], "pools": st["num_pools"],
               "slot MiB": round(st["slot_bytes"] / 2**20, 1), "slots need GiB": round(st["need_bytes"] / GIB, 2),
               "quota GiB": round(st["quota_bytes"] / GIB, 2), "builds": st["builds"],
               "attention pages": st["pages"], "state slots": st["state_slots"]} for st in stages]
display(table(stage_rows, index="stage"))
assert [(st["attention_layers"], st["recurrent_layers"]) for st in stages] == [(0, 8), (2, 6), (2, 6), (0, 7)]

# %% [markdown]
# ## 5. From a `config.json`
#
# `kvlab plan --config PATH` (or `read_config(PATH)`) reads any local Hugging Face config with
# transformers' configuration classes — offline — and counts the parameters by building the model
# on PyTorch's meta device (no memory). It knows GQA/MHA models, MLA (DeepSeek: a K-only cache of
# `kv_lora_rank + qk_rope_head_dim`), sliding-window layers (counted, planned as full attention:
# as the executor sizes them unless `max_attention_window` is set), linear-attention hybrids
# (Qwen3.5, Qwen3-Next) and Nemotron-H; anything else is refused naming the field and why. It
# reads what the executor reads besides: the longest sequence the model supports
# (`max_position_embeddings` times the rope factor, for rope types other than su, longrope,
# llama3 and yarn; a longer `max_seq_len` is lowered to it), the checkpoint's quantization
# (`hf_quant_config.json` first, then `quantization_config`: the weights' format and the KV
# cache's dtype) and MTP draft layers. Here the DeepSeek-V3 preset's published fields are
# written to a folder and read back the way your config would be: its fp8 weights fit eight
# H200s, which bf16 weights would not.

# %%
with tempfile.TemporaryDirectory() as scratch:
    folder = Path(scratch) / "deepseek-v3"  # the model is named after its folder
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(load_preset("deepseek-v3")["config"]))
    try:
        deepseek = read_config(folder)
    except ImportError as exc:  # transformers is the optional extra kvlab[models]
        deepseek = None
        print(exc)
if deepseek is not None:
    print(deepseek.kv_geometry().bytes_per_token_formula())
    print(f"{deepseek.parameters:,} parameters counted on the meta device")
    assert deepseek.facts() == load_preset("deepseek-v3")["geometry"]
    print(f"quantization: {deepseek.quantization.weights_algo}, {deepseek.weights_bytes() / GIB:,.1f} GiB "
          f"of weights ({deepseek.weights_bytes('bfloat16') / GIB:,.1f} GiB in bf16)")
    on_h200 = plan_deployment(Deployment(model=deepseek, gpu_gib=GPUS["h200"].gib, tp_size=8,
                                         max_batch_size=64, chunked_prefill=True,
                                         spec_mode="mtp", max_draft_len=3))
    print(on_h200.explain())
    assert on_h200.starts and deepseek.quantization.weights_algo == "FP8_BLOCK_SCALES"

# %% [markdown]
# The same from a shell — the exit code says whether the plan is safe (0), a context stalls (3),
# a context or the construction raises (4), or `max_num_tokens` refuses most contexts (5):
#
# ```
# kvlab plan --model llama-3.1-70b --gpu h100-80gb --tp-size 4 --chunked-prefill
# kvlab plan --config path/to/model --gpu h200 --tp-size 8 --spec-mode mtp --max-draft-len 3 --json
# kvlab plan --example issue-21470 --manager auto
# ```

# %% [markdown]
# ## 6. The rest of the walk, from the presets
#
# The 4 MiB repro of notebook 02 (64 blocks, rows of 68 and 260 entries, an 8,192-token context
# that raises; the seed ran V2) and PR #17261's Qwen3.5-27B of notebook 05 (513 slots of 74.8
# MiB, 37.48 GiB against a 24.86 GiB quota: merged code raises at construction, so there is no
# pool, no row and no verdict per context under any current policy — only the pool PR #17261's
# clamp, a proposal, would leave).

# %%
repro = plan_deployment(EXAMPLES["rtx5080-4mib"])
qwen = plan_deployment(EXAMPLES["pr-17261"])
assert (repro.blocks, repro.width_current, repro.width_fix) == (64, 68, 260)
assert repro.first("crash") <= 8192
assert qwen.hybrid["slots"] == 513 and round(qwen.hybrid["need_bytes"] / GIB, 2) == 37.48
assert not qwen.starts and set(qwen.ranges) == {"pr-17261"}
table([{"deployment": "4 MiB repro (notebook 02)", "pool blocks": repro.blocks,
        "row now": repro.width_current, "row with fix": repro.width_fix,
        "8,192 tokens, current code": next(s.verdict for s in repro.ranges["none/clamped"] if s.high >= 8192)},
       {"deployment": "PR #17261 (notebook 05)", "pool blocks": "-", "row now": "-", "row with fix": "-",
        "8,192 tokens, current code": "nothing runs: construction raises"}], index="deployment")

# %%
findings.append(Finding(scenario="4 MiB repro", policy="current code", outcome=repro.worst(),
                        numbers=f"64 blocks, row {repro.width_current} (fix {repro.width_fix}); "
                                f"crash from {repro.first('crash'):,} tokens"))
findings.append(Finding(scenario="Qwen3.5-27B, PR #17261", policy="merged", outcome="crash",
                        numbers=f"{qwen.hybrid['slots']} slots need {qwen.hybrid['need_bytes'] / GIB:.2f} GiB "
                                f"of {qwen.hybrid['quota_bytes'] / GIB:.2f} GiB"))
findings = report_findings(findings)

# %% [markdown]
# ## 7. Your traffic
#
# A plan answers for a lone request. Traffic asks more: many requests at once, arriving when
# they do, each holding its pages while it waits for a pass. `replay_trace` streams a trace
# file through §3's deployment — the pool of the rank that matters, after the MIN, its
# `max_seq_len`, `max_batch_size`, token budget and chunking — under TensorRT-LLM's three
# policies (notebook 04) and vLLM's and SGLang's schedulers as they ship, and counts what each
# did: finished, rejected (with the reason), unfinished (held when the trace ran out, or an
# engine stalled), crashed (lost with an engine that raised). The waits are in scheduler
# iterations from a request's arrival to its first pass, TTFT to its first token; arrivals are
# placed at 0.05 s per iteration, an assumption (the command line's `--seconds-per-iteration`
# sets it). `traffic` picks the trace: Azure's conversation or coding hour (lengths only, so
# nothing is shared), Mooncake's conversation trace (with block hashes, so the prefix cache
# finds hits: the "cached" share), or a file of your own; `traffic_requests` its first rows.

# %%
limit = min(traffic_requests, 300) if SMOKE else traffic_requests
if mine.starts:
    replay = replay_trace(traffic_file(traffic), mine, limit=limit)  # every engine and policy
    print(replay.explain().split("\n\n")[0])
    viz.show(replay_figure(replay))
    columns = {"finished": "finished", "rejected": "rejected", "unfinished": "unfinished",
               "crashed": "crashed", "outcome": "outcome", "wait_p50": "wait p50 (it)",
               "wait_p99": "wait p99 (it)", "ttft_p50": "TTFT p50 (it)", "ttft_p99": "TTFT p99 (it)",
               "preemptions": "preemptions", "goodput_tokens_per_iteration": "goodput (tokens/it)",
               "reused_share": "cached share", "failure": "first failure"}
    traffic_rows = [{"run": f"{r['engine']} {r['policy']}", **{new: r[old] for old, new in columns.items()}}
                    for r in replay.rows()]
    display(table(traffic_rows, index="run"))
    for r in replay.rows():  # every request is counted once, whatever became of it
        counted = r["finished"] + r["rejected"] + r["unfinished"] + r["crashed"]
        assert counted == replay.requests or r["outcome"] == "not run"
    served = [r for r in traffic_rows if r["finished"] == replay.requests]
    print(textwrap.fill(f"{len(served)} of {len(traffic_rows)} runs finished all {replay.requests:,} requests"
                        + (f", their p99 waits for a first pass at most {max(r['wait p99 (it)'] for r in served)} "
                           "iterations" if served else ""), 100))
    defaults = ("llama-3.1-70b", "h100-80gb", 0.0, 4, 131072, 256, True, "auto", "azure-conv")
    if (model, gpu, weights_gib, tp_size, max_seq_len, max_batch_size, chunked_prefill, manager,
            traffic) == defaults:  # what the prose below says of the parameters cell's defaults
        assert (replay.config.total_blocks, replay.config.pool_tokens) == (17249, 551968)
        assert len(served) == len(traffic_rows) and replay.exit_code == 0
        assert all(r["wait p99 (it)"] == 0 and r["rejected"] == 0 for r in traffic_rows)
        longest = {f"{run.engine} {run.policy}": max(b["max_wait_s"] for b in run.timeline(0.05))
                   for run in replay.runs}  # the longest wait of each run, in seconds
        assert longest.pop("sglang sglang") <= 0.05 and set(longest.values()) == {0}
else:
    print("nothing to replay: §3's deployment does not start (see its plan), so no pool serves traffic")

# %% [markdown]
# At the parameters cell's defaults (llama-3.1-70b on four H100s, `max_batch_size` 256, chunked
# prefill, V1 by default) the pool of the rank that matters holds 17,249 blocks, 551,968 tokens,
# and the first 2,000 requests of Azure's conversation hour (its first seven minutes; prompts of
# 1,032 tokens and outputs of 239 at the median) never fill it: every run finishes every request, nothing is
# rejected, and at p99 no request waits a single iteration for its first pass. The figure's
# lines lie on zero but for three blips of SGLang's: a few of its requests wait one iteration
# (0.05 s; a blip is a time bin's mean). That is the answer a plan cannot give: not only does
# no context length crash or stall here, this traffic does not queue either. To see a pool
# under pressure, give the deployment less of one: a smaller GPU or `tp_size`, a
# `max_batch_size` the traffic outgrows, or `traffic = "azure-code"` (longer prompts). A pool
# under pressure replays slower too (requests wait, so more iterations run): lower
# `traffic_requests` first.
#
# The same replay from a shell, with this notebook's values (its exit code is `kvlab plan`'s:
# 0 every request served, 3 a run stalled or left requests unfinished, 4 a run crashed, 5
# every run rejected most requests; `--json` for the numbers, `--plot FILE.html` for the
# figure):

# %%
trace = traffic_file(traffic).resolve()
flags = [f"--model {model}", f"--gpu {gpu}", f"--tp-size {tp_size}", f"--max-seq-len {max_seq_len}",
         f"--max-batch-size {max_batch_size}", f"--manager {manager}"]
flags += [f"--weights-gib {weights_gib:g}"] * bool(weights_gib) + ["--chunked-prefill"] * chunked_prefill
where = trace.relative_to(REPOSITORY) if trace.is_relative_to(REPOSITORY) else trace  # from the checkout
print(f"kvlab replay --trace {shlex.quote(str(where))} {' '.join(flags)} "
      f"--limit {limit} --engine all")

# %% [markdown]
# **Your own traffic.** A file of three columns — when each request arrives, in seconds from
# the start, its prompt and its output in tokens — is a trace (docs/TRACES.md gives the rest:
# block hashes, conversations, JSON lines):
#
# ```csv
# arrival_s,prompt_tokens,output_tokens,conversation_id
# 0.0,1200,150,alice
# 0.4,30000,80,bob
# 2.5,1500,200,alice
# ```
#
# Set `traffic` to its path (or pass `--trace` to `kvlab replay`): each row is checked before
# any run starts, and a bad one is named by its line and field.
#
# **What the replay models, and what it does not.** TensorRT-LLM is replayed with one
# scheduler, KVCacheV2Scheduler's loop: a deployment that gets the V1 manager (the default one
# here) runs that loop on V1's pool, for V1's own scheduler is not modelled (the printout above
# says so). A hybrid's recurrent-state slots are not replayed, its attention pool alone is.
# vLLM and SGLang are kvlab's peers of their schedulers, run as they ship (prefix caching and
# async scheduling on; their own chunked-prefill defaults), on the same pool; SGLang's page
# table holds one entry per token, and where that table would exceed kvlab's bound on a
# page-index table its run is listed "not run", not guessed. A pass takes one iteration
# whatever its size: the waits count iterations, and seconds only by the assumption above.

# %% [markdown]
# ## What the plan leaves out
#
# It plans a **lone** request per context length: other requests' pages only delay a request
# that fits, they do not change which contexts can never run. Block reuse (on by default) does
# not change a verdict either: a page a request shares is still one of its pages; it lets
# requests that share prefixes be resident together sooner (notebook 04 §8), which a plan of a
# lone request does not count. Under chunked prefill a chunk
# boundary can land in the few blocks between the pool and the row's end and make a stall a
# crash (the plan says so when chunked prefill is on). Weights derived from a parameter count are
# split evenly over tp x pp, but MoE routers and norms stay in the model's dtype and whole on
# every tp rank: experts under expert parallelism and attention replicated under attention DP
# are not modelled (give the weights).
# Sliding-window layers are planned as full attention, as the executor sizes them unless
# `max_attention_window` is set (then V1 builds a pool per window, which kvlab does not plan).
# A hybrid's quota is split as the runtime splits it where the state slots' floor binds (from
# about two dozen slots); below that, kvlab's rounding is an assumption. A hybrid on the V1 manager (beam search) is a different
# class, not planned. The host tier holds evicted pages; the clamp and the row count GPU pages
# only, so it changes no verdict here. GPU totals other than the H200's are nvidia-smi's, about
# 0.5-0.9 GiB above what `torch.cuda.mem_get_info` reports: give `--gpu-gib` with your own
# board's measured total for an exact plan.
