# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Your deployment: will it hit issue #21470?
#
# Notebooks 01-05 explain a crash after the fact. An engineer about to deploy wants the answer
# before: for *this* model on *this* GPU with *these* settings, does some context length make a
# rank raise `ValueError: User-provided base page indices is too short`, stall the engine, or
# get rejected with a reason? Everything needed is arithmetic the walk has already checked
# against real runs:
#
# 1. each rank's KV quota, `(total − peak) × free_gpu_memory_fraction` (notebook 01);
# 2. for a hybrid model, the recurrent-state slots taken from it first (notebook 05);
# 3. each rank's pool, then the MIN all-reduce across ranks (notebook 01);
# 4. the `max_seq_len` clamp and the page-index row sized from it, or from the configured value
#    under the one-line fix (notebooks 02 and 03);
# 5. what a lone request of each context length meets under each policy (notebook 04's phase
#    diagram, here along one line).
#
# `kvlab.analysis.deployment.plan_deployment` does the five steps in closed form; `kvlab plan`
# is the same from the command line. Models come from the presets in `data/models/` (each with
# its source and the published config fields its numbers come from) or from any local
# `config.json`, read by transformers' configuration classes with no network.

# %% tags=["parameters"]
model: str = "llama-3.1-70b"  # a preset of data/models/ for section 3
gpu: str = "h100-80gb"  # a GPU preset (kvlab.analysis.gpus.GPUS)
weights_gib: float = 0.0  # weights per rank in GiB; 0: the parameter count x bf16 / tp
tp_size: int = 4  # tensor parallelism
max_seq_len: int = 131072  # configured max_seq_len
max_batch_size: int = 256  # max_batch_size
chunked_prefill: bool = True  # TensorRT-LLM's default is off: then a prompt past max_num_tokens (8,192) is rejected
SMOKE: bool = False  # True (CI): fewer rows in the preset table

# %%
import dataclasses
import json
import tempfile
from pathlib import Path

from kvlab.analysis.deployment import Deployment, example_deployments, plan_deployment
from kvlab.analysis.gpus import GPUS
from kvlab.analysis.models import load_model, load_preset, model_names, read_config
from kvlab.core.memory import GIB
from kvlab.notebook import viz
from kvlab.notebook.findings import Finding, report_findings
from kvlab.notebook.parameters import check_plan_parameters
from kvlab.notebook.tables import table
from kvlab.notebook.widgets import plan_panel

# Bad parameters stop here, with a message naming the parameter.
weights = weights_gib or None  # None: derived from the parameter count
check_plan_parameters(model=model, gpu=gpu, weights_gib=weights, tp_size=tp_size,
                      max_seq_len=max_seq_len, max_batch_size=max_batch_size,
                      chunked_prefill=chunked_prefill, SMOKE=SMOKE)
EXAMPLES = example_deployments()
findings = []

# %% [markdown]
# ## 1. The #21470 deployment, planned before it ran
#
# The report's deployment as kvlab's scenario assumes it (notebook 01): 16 GB300 ranks with
# attention data parallelism, a model of Qwen3-235B-A22B's geometry (94 layers, 4 KV heads of
# 128, bf16), 22 GiB of weights per rank, a MoE workspace of 28 GiB on rank 0 growing to 40 GiB
# on the last, `max_seq_len` 1,048,576 and a 1,000,000-token context. The plan names every
# number notebook 01 found by running the ranks: the last rank's 29,961 blocks become everyone's
# pool, `max_seq_len` is clamped to 958,752 and the row is 29,964 entries wide, while the
# one-line fix would size it 32,772.

# %%
plan = plan_deployment(EXAMPLES["issue-21470"])
print(plan.explain())
viz.show(viz.plan_ranges_figure(plan))

assert (plan.blocks, plan.capacity_tokens) == (29961, 958752)
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
# The bands read left to right: every context up to the pool's capacity finishes; a thin band
# between the pool and the end of the clamped row stalls (its pages cannot all be had, but the
# row holds them); everything past the row raises. The one-line fix turns the red band orange —
# never served, never refused — and admission control turns it blue: rejected at the door with
# a reason. (Admission control's last served context is one token shorter than the current
# code's: it counts a page for every one of the 64 new tokens, while the last generated token
# never needs its KV slot.) The per-rank picture shows why the pool is what it is: the last
# rank's workspace sets everyone's pool through the MIN.

# %%
viz.show(viz.rank_budget_figure(plan.rank_plans(), title="Issue #21470: per-rank memory (16 ranks)"))

# %% [markdown]
# ## 2. The panel: move your own deployment
#
# It starts at the #21470 deployment. Pick a model and a GPU, set the weights per rank (0: the
# model's parameter count in bf16 over the ranks) and rank 0's workspace (the others add the
# report's 12 GiB spread), the configured `max_seq_len`, `max_batch_size` and the number of
# attention-DP ranks; the rest (activations, non-torch memory, chunked prefill) stays the
# report's. The verdict box says what the current code does next to admission control; its
# detail is the whole plan. Try: rank 0's workspace down to 0 (the clamp goes away and so does
# the crash), then `qwen3.5-27b` with batch size 2,048 (a hybrid: its recurrent-state slots come
# out of the quota first, 2,050 of them do not fit, and merged code raises at construction).

# %%
plan_panel()

# %% [markdown]
# ## 3. A model of your own
#
# The parameters cell picks a preset, a GPU and the parallelism. Weights not given are derived
# from the preset's parameter count in bf16, split evenly over the tensor-parallel ranks (an
# approximation the plan says it makes). The table below runs the same question over every
# preset on that GPU at the same settings: where does each stop, and how?

# %%
mine = plan_deployment(Deployment(model=load_model(model), gpu_gib=GPUS[gpu].gib,
                                  weights_gib=weights, tp_size=tp_size, max_seq_len=max_seq_len,
                                  max_batch_size=max_batch_size, chunked_prefill=chunked_prefill))
print(mine.explain())
viz.show(viz.plan_ranges_figure(mine))
findings.append(Finding(scenario=f"{model} on {gpu}, tp {tp_size}", policy="current code",
                        outcome=mine.worst(), numbers=f"longest context that finishes: {mine.longest():,} tokens"))


# %%
def preset_row(name):
    deployment = Deployment(model=load_model(name), gpu_gib=GPUS[gpu].gib, tp_size=tp_size,
                            max_seq_len=max_seq_len, max_batch_size=max_batch_size,
                            chunked_prefill=chunked_prefill)
    p = plan_deployment(deployment)
    starts = bool(p.blocks)
    return {"model": name, "KV B/token/rank": p.bytes_per_token, "pool tokens": p.capacity_tokens,
            "clamped": "yes" if p.clamped else "no", "row now": p.width_current,
            "row with fix": p.width_fix, "longest ok": p.longest(),
            "verdict": p.worst() if starts else "cannot start",
            "first crash": p.first("crash") if starts and p.first("crash") else "-"}


names = model_names()[:3] if SMOKE else model_names()
table([preset_row(name) for name in names], index="model")

# %% [markdown]
# A big model on few GPUs leaves no quota at all: at this tensor parallelism the weights of
# DeepSeek-V3 or Qwen3-235B alone exceed the GPU, and the plan says the executor cannot start
# (a red band from the first token) rather than drawing a pool of nothing. A model whose quota
# holds fewer tokens than its `max_seq_len` is clamped, and then the current code crashes for
# the contexts between the clamped row and `max_seq_len`. With TensorRT-LLM's default of
# chunked prefill off, a prompt longer than `max_num_tokens` (8,192) is rejected first: set
# `chunked_prefill = False` above to see it.

# %% [markdown]
# ## 4. From a `config.json`
#
# `kvlab plan --config PATH` (or `read_config(PATH)`) reads any local Hugging Face config with
# transformers' configuration classes — offline — and counts the parameters by building the model
# on PyTorch's meta device (no memory). It knows GQA/MHA models, MLA (DeepSeek: a K-only cache of
# `kv_lora_rank + qk_rope_head_dim`), sliding-window layers (counted, planned as full attention:
# an upper bound), linear-attention hybrids (Qwen3.5, Qwen3-Next) and Nemotron-H; anything else
# is refused naming the field and why. Here the DeepSeek-V3 preset's published fields are
# written to a folder and read back the way your config would be.

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
    on_b200 = plan_deployment(Deployment(model=deepseek, gpu_gib=GPUS["b200"].gib, tp_size=8,
                                         weights_dtype="fp8", max_seq_len=163840, max_batch_size=64,
                                         chunked_prefill=True))
    print(on_b200.explain())

# %% [markdown]
# The same from a shell — the exit code says whether the plan is safe (0), a context stalls (3)
# or a context or the construction raises (4):
#
# ```
# kvlab plan --model llama-3.1-70b --gpu h100-80gb --tp-size 4 --max-seq-len 131072
# kvlab plan --config path/to/model --gpu b200 --tp-size 8 --weights-dtype fp8 --json
# kvlab plan --example issue-21470
# ```

# %% [markdown]
# ## 5. The rest of the walk, from the presets
#
# The 4 MiB repro of notebook 02 (64 blocks, rows of 68 and 260 entries, an 8,192-token context
# that raises) and PR #17261's Qwen3.5-27B of notebook 05 (513 slots of 74.8 MiB, 37.48 GiB
# against a 24.86 GiB quota: merged code raises at construction).

# %%
repro = plan_deployment(EXAMPLES["rtx5080-4mib"])
qwen = plan_deployment(EXAMPLES["pr-17261"])
assert (repro.blocks, repro.width_current, repro.width_fix) == (64, 68, 260)
assert repro.first("crash") <= 8192
assert qwen.hybrid["slots"] == 513 and round(qwen.hybrid["need_bytes"] / GIB, 2) == 37.48
assert not qwen.hybrid["merged_builds"]
table([{"deployment": "4 MiB repro (notebook 02)", "pool blocks": repro.blocks,
        "row now": repro.width_current, "row with fix": repro.width_fix,
        "8,192 tokens, current code": next(s.verdict for s in repro.ranges["none/clamped"] if s.high >= 8192)},
       {"deployment": "PR #17261 (notebook 05)", "pool blocks": qwen.blocks,
        "row now": qwen.width_current, "row with fix": qwen.width_fix,
        "8,192 tokens, current code": "nothing runs: construction raises (the pool and rows "
                                      "are those PR #17261's clamp would leave)"}], index="deployment")

# %%
findings.append(Finding(scenario="4 MiB repro", policy="current code", outcome=repro.worst(),
                        numbers=f"64 blocks, row {repro.width_current} (fix {repro.width_fix}); "
                                f"crash from {repro.first('crash'):,} tokens"))
findings.append(Finding(scenario="Qwen3.5-27B, PR #17261", policy="merged", outcome="crash",
                        numbers=f"{qwen.hybrid['slots']} slots need {qwen.hybrid['need_bytes'] / GIB:.2f} GiB "
                                f"of {qwen.hybrid['quota_bytes'] / GIB:.2f} GiB"))
findings = report_findings(findings)

# %% [markdown]
# ## What the plan leaves out
#
# It plans a **lone** request per context length: other requests' pages only delay a request
# that fits, they do not change which contexts can never run. Under chunked prefill a chunk
# boundary can land in the few blocks between the pool and the row's end and make a stall a
# crash (the plan says so when chunked prefill is on). Weights derived from a parameter count are
# split evenly over tp x pp: experts under expert parallelism and attention replicated under
# attention DP are not modelled (give the weights). Sliding-window layers are planned as full
# attention. The host tier holds evicted pages; the clamp and the row count GPU pages only, so it
# changes no verdict here.
