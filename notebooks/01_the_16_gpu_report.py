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
# # 01 · The 16-GPU report: ranks, memory budgets, and one rank taking all of them down
#
# *About 15 minutes.*
#
# TensorRT-LLM issue #21470: 16 NVIDIA GB300 GPUs, **attention data parallelism** (every rank
# keeps its own KV cache and serves its own requests) with **expert parallelism** (the MoE
# experts are split across the 16 ranks). A persistent MoE workspace shrank the memory left for
# the KV cache. The server started and served short requests; then a long context reached
# `resize_context` on rank 0 and the native allocator raised
# `ValueError: User-provided base page indices is too short`. The executor took all 16 ranks down.
#
# The report was followed by an investigation, which this kit calls **the seed**: it reproduced
# the crash on one consumer GPU (an RTX 5080) with no model weights and a 4 MiB KV pool, found a
# one-line fix, showed why that fix is not enough, and arrived at admission control. "The seed's"
# numbers (2 layers, 2 KV heads, 4 MiB, 8,192 tokens) are that reproduction's; the notebooks
# walk its road. `docs/GLOSSARY.md` explains every term they use.
#
# This notebook rebuilds that deployment with kvlab — 16 ranks, each with its own memory budget,
# KV-cache manager and scheduler, stepping in lockstep — and then makes the reduction the
# investigation made: which conditions on **one** GPU reproduce the local failure (notebook 02).
# The report leaves the model, the memory figures and the context lengths unstated: every such
# number below comes from `data/scenarios/issue_21470_16x_gb300.yaml`, marked as an assumption.

# %% tags=["parameters"]
ranks: int = 16  # ranks (GPUs); the report's 16
workspace_gib: float = 28.0  # MoE workspace on rank 0, GiB (an assumption; the others add a skew)
context: int = 1_000_000  # the long context pinned to rank 0, tokens (an assumption)
SMOKE: bool = False  # True (CI): skip the run with real rank processes

# %%
import dataclasses
import textwrap
import traceback

import pandas as pd

from kvlab import KVCacheManager, KVGeometry, PageIndexTooShort, Request, run_ranks
from kvlab.analysis.repro import run_repro
from kvlab.analysis.sentences import sentence
from kvlab.notebook import viz
from kvlab.notebook.findings import Finding, report_findings
from kvlab.notebook.tables import table
from kvlab.notebook.widgets import ranks_panel
from kvlab.run.rank_config import rank_budget, scenario_config
from kvlab.run.scenarios import load_scenario

sc = load_scenario("issue-21470")  # data/scenarios/issue_21470_16x_gb300.yaml
dep, P = sc.deployment, sc.parameters
# Bad parameters stop here, with a message naming the parameter.
config = scenario_config(sc, ranks, "none/clamped", workspace_gib=workspace_gib, context_length=context)
IS_REPORT = (ranks, workspace_gib, context) == (dep.ranks, dep.workspace_gib, P.context_length)
print(sc.title)
print(f"parameters: ranks={ranks}, workspace_gib={workspace_gib:g}, context={context:,}",
      "(the scenario's)" if IS_REPORT else "(not the scenario's: the asserts follow the arithmetic)")

# %% [markdown]
# ## 1. Topology, and what the report does not say
#
# Under attention DP the attention weights are replicated and each rank holds the KV cache of its
# own requests, with all KV heads (the KV tensor-parallel size is 1). The MoE layers are split
# across the ranks (EP 16); their kernels keep a persistent workspace on every GPU.

# %%
print(f"{dep.ranks} x {sc.gpu}, attention DP = {dep.attention_dp}, expert parallel = "
      f"{dep.expert_parallel_size}, TensorRT-LLM {dep.image}")
print("KV per token per rank:", config.geometry.bytes_per_token_formula())


def span(values) -> str:
    """An assumption's range with the table's separators (131,072 .. 1,048,576), or its choices."""
    if all(isinstance(v, (int, float)) for v in values):
        return " .. ".join(f"{v:,}" for v in values)
    return ", ".join(map(str, values))


assumptions = pd.DataFrame([dict(field=k, value=a.value, range=span(a.range), why=a.why)
                            for k, a in sc.assumptions.items()])
table(assumptions, index="field")

# %% [markdown]
# ## 2. Sixteen memory budgets, one KV pool
#
# Each rank sizes its KV quota from what its warm-up left free
# (`KvCacheCreator._cal_max_memory`): `(total − peak) × free_gpu_memory_fraction`, where the
# peak counts the weights, the **MoE workspace**, the activation peak and memory torch does not
# see. The workspace is assumed to differ between ranks with their experts' load (28 GiB on
# rank 0 growing to 40 GiB on rank 15, so the last rank has the smallest pool); then the ranks
# agree on one capacity: the token capacity is **all-reduced with MIN**, and the MIN never
# raises a rank's own quota. Every rank ends up with the smallest pool.
#
# The run below is real: 16 ranks (threads of this kernel, the in-process mode of
# `kvlab.run.distributed`; section 5 also starts real processes), each building its budget, its
# KVCacheManager and its Scheduler, stepping together with an all_gather every iteration.

# %%
clamped = run_ranks(config, in_process=True)
local_tokens = [r.local_blocks * P.tokens_per_block for r in clamped.ranks]
pool_blocks = clamped.ranks[0].blocks
print(f"own capacities: {min(local_tokens):,} .. {max(local_tokens):,} tokens; after the MIN: "
      f"{clamped.ranks[0].capacity_tokens:,} tokens = {pool_blocks:,} blocks on every rank")
assert {r.capacity_tokens for r in clamped.ranks} == {min(local_tokens)}
assert all(r.blocks <= r.local_blocks for r in clamped.ranks)  # the MIN never raises a quota
viz.show(viz.rank_budget_figure(clamped.ranks))

# %% [markdown]
# ## 3. The clamp
#
# The pool holds at most `blocks × tokens_per_block` tokens of one sequence. The configured
# `max_seq_len` (1,048,576 here) is larger, so every rank's KV-cache manager warns and clamps it,
# and — since PR #12306 — sizes the page-index row from the clamped length:
# `round_up_4(ceil((max_seq_len + 1) / tokens_per_block))` entries.

# %%
r0 = clamped.ranks[0]
tpb = P.tokens_per_block
raw = -(-(r0.max_seq_len + 1) // tpb)
needed = -(-context // tpb)
print(f"max_seq_len: configured {config.max_seq_len:,}, clamped to {r0.max_seq_len:,}")
print(f"row: ceil(({r0.max_seq_len:,} + 1) / {tpb}) = {raw:,} -> multiple of 4 = {r0.max_blocks_per_seq:,} entries")
print(f"the long context: ceil({context:,} / {tpb}) = {needed:,} entries")
assert r0.max_seq_len == min(config.max_seq_len, r0.capacity_tokens)
assert r0.max_blocks_per_seq == -(-raw // 4) * 4
expect_crash = needed > r0.max_blocks_per_seq

# %% [markdown]
# ## 4. The request that lands on rank 0
#
# Attention DP routes each new request to a rank: one pinned to a rank
# (`attention_dp_rank`) goes there; the others are balanced, longest first, to the rank with
# the fewest active tokens (`kvlab.run.routing.route`, after TensorRT-LLM's
# `balance_requests_across_ranks`). The report's long request was on rank 0.

# %%
placement = pd.DataFrame([dict(rank=r.rank, requests=len(r.status),
                               long_context="long-ctx" in r.status,
                               statuses=", ".join(f"{n} {s}" for s, n in
                                                  pd.Series(list(r.status.values())).value_counts().items()))
                          for r in clamped.ranks])
assert "long-ctx" in r0.status and placement.requests.sum() == len(config.requests)
table(placement, index="rank")

# %% [markdown]
# ## 5. The chain, from kvlab's own traceback, and the shutdown of every rank
#
# The seed followed the traceback: Scheduler → `KVCacheManagerV2.resize_context()` → native
# `kv_cache.resize()` → page-index check → `ValueError`. Here is rank 0's, the real exception
# formatted with `traceback.format_exception`, trimmed to kvlab's frames. Nothing between the
# check and the executor loop catches it; the next per-iteration all_gather carries it to every
# rank, and every rank shuts down with the reason.

# %%
if expect_crash:
    print(r0.traceback)
    frames = [line.split(", in ")[-1] for line in r0.traceback.splitlines() if ", in " in line]
    chain = ["schedule", "resize_context", "resize"]
    assert [f for f in frames if f in chain] == chain, frames
    assert r0.traceback.rstrip().splitlines()[-2] == "kvlab.core.kv_cache.PageIndexTooShort: User-provided base page indices is too short"
print(textwrap.fill(clamped.headline, 100, break_on_hyphens=False))  # between words: outputs break mid-word
display(table(clamped.rank_rows(), index="rank"))
if expect_crash:
    assert clamped.ended == "shut down" and r0.outcome == "raised"
    assert r0.error == "ValueError: User-provided base page indices is too short"
    assert all(r.error == "shut down: rank 0 raised ValueError: User-provided base page indices is too short"
               for r in clamped.ranks[1:])
else:
    assert clamped.ended == "completed"

# %% [markdown]
# Three counts for the same 1,000,000-token request appear in this notebook, and each answers
# a different question:
#
# - **the whole context** (section 3): `ceil(1,000,000 / 32)` entries, what the prompt needs once
#   all of it is in the cache; more than the row, hence the crash;
# - **the traceback's resize**: the deployment prefills in chunks (`max_num_tokens` a pass, shared
#   with the background requests), and the resize that raises is the *first chunk whose end
#   crosses the row*: `ceil((position + chunk) / 32)` entries, fewer than the whole context;
# - **admission's demand** (section 6): `ceil((1,000,000 + 64 new tokens) / 32)`, every token
#   the request will hold when it completes.

# %%
if expect_crash:
    import re

    crossing = int(re.search(r"it needs ([\d,]+) page-index entries", r0.traceback).group(1).replace(",", ""))
    demand = -(-(context + 64) // tpb)
    display(table([
        dict(count="the whole context (section 3)", entries=needed, formula=f"ceil({context:,} / {tpb})"),
        dict(count="the chunk that crossed the row (traceback)", entries=crossing,
             formula=f"ceil((position + chunk) / {tpb}), first above {r0.max_blocks_per_seq:,}"),
        dict(count="to completion (admission, section 6)", entries=demand,
             formula=f"ceil(({context:,} + 64) / {tpb})"),
    ], index="count"))
    assert r0.max_blocks_per_seq < crossing <= needed < demand

# %% [markdown]
# The same ranks as real processes over `torch.distributed` (gloo on CPU: a MIN all-reduce of the
# capacity, an all_gather per iteration). Same code per rank, same results; only the transport
# differs. (Skipped when `SMOKE`.)

# %%
if not SMOKE:
    by_process = run_ranks(config, backend="gloo")
    print(textwrap.fill(by_process.headline, 100, break_on_hyphens=False))
    assert [dataclasses.asdict(r) for r in by_process.ranks] == [dataclasses.asdict(r) for r in clamped.ranks]
    assert (by_process.ended, by_process.reason) == (clamped.ended, clamped.reason)
    print(f"Every field of the {len(by_process.ranks)} ranks' rows equals the table above.")

# %% [markdown]
# ## 6. The same deployment with admission control
#
# PR #21720's direction: a request whose demand exceeds the pool's total capacity is rejected at
# admission, on its rank, for that request alone. Rank 0 rejects the long context, and all
# ranks finish their work. (The one-line fix of notebook 03, a row sized from the configured
# length, is the policy "none/configured" (no admission check, the configured width): no crash,
# but the request is refused every pass and the stall detector takes the engine down instead.)

# %%
admitted = run_ranks(scenario_config(sc, ranks, "capacity", workspace_gib=workspace_gib,
                                     context_length=context), in_process=True)
print(textwrap.fill(admitted.headline, 100, break_on_hyphens=False))
display(table(admitted.rank_rows(), index="rank"))
print(textwrap.fill(f"long-ctx: {admitted.ranks[0].status['long-ctx']} - {sentence(admitted.ranks[0].reasons['long-ctx'])}",
                    100, break_on_hyphens=False))
assert admitted.ended == "completed" and all(r.outcome == "finished" for r in admitted.ranks)
demand = -(-(context + 64) // tpb)
assert (admitted.ranks[0].status["long-ctx"] == "rejected") == (demand > pool_blocks)

# %% [markdown]
# ## 7. The reduction: what one GPU needs to reproduce the local failure
#
# The other 15 ranks decided the pool's size (through the MIN) and went down afterwards; nothing
# else in the exception depends on them. Here the MIN decided a lot: rank 0's own pool, printed
# below, would have held the long context, and the MIN gave it the smallest rank's pool instead.
# But once the pool is what it is, the local failure needs three things:
#
# 1. a KV pool smaller than the configured `max_seq_len` (so the manager clamps),
# 2. a page-index row sized from the clamped length (the code since PR #12306),
# 3. a context needing more pages than that row has entries.
#
# So a single KVCacheManager with the pool rank 0 ended up with, and no ranks at all, raises the
# same error; and so does the seed's RTX 5080 with no weights and a 4 MiB pool — the same
# inequality at 1/470th the scale. Notebook 02 takes it from there.

# %%
one = rank_budget(sc, 0, 1)  # rank 0's budget alone (a world of one rank: no MIN, no skew)
seed = run_repro(4.0, 8192, "clamped", 32, max_seq_len=8192)
rows = [
    dict(condition="KV pool (blocks)", rank0_of_16=r0.blocks, seed_rtx5080=seed.total_blocks),
    dict(condition="configured max_seq_len", rank0_of_16=config.max_seq_len, seed_rtx5080=seed.configured_max_seq_len),
    dict(condition="clamped max_seq_len", rank0_of_16=r0.max_seq_len, seed_rtx5080=seed.capacity_tokens),
    dict(condition="row width (entries)", rank0_of_16=r0.max_blocks_per_seq, seed_rtx5080=seed.max_blocks_per_seq),
    dict(condition="context entries needed", rank0_of_16=needed, seed_rtx5080=seed.entries_needed),
]
reduction = pd.DataFrame(rows)
own_holds = r0.local_blocks >= needed
print(f"rank 0 alone (no MIN): {one.kv_quota_bytes / 2**30:.1f} GiB quota = {r0.local_blocks:,} blocks, "
      f"{'enough' if own_holds else 'not enough'} for the long context's {needed:,}; after the MIN "
      f"{r0.blocks:,} blocks")
assert seed.outcome == "crash" and seed.entries_needed > seed.max_blocks_per_seq
assert seed.configured_max_seq_len > seed.capacity_tokens  # the seed clamps too
table(reduction, index="condition")

# %% [markdown]
# The same local conditions on one manager, at the seed's scale: a pool of rank 0's *shape*
# (clamped row, a context beyond it) raises the same `ValueError`, with no ranks, no weights and
# no workspace — only the three conditions above.

# %%
seed_geo = KVGeometry(num_layers=2, num_kv_heads=2, head_dim=128, dtype="float16", tokens_per_block=32)
mgr = KVCacheManager(seed_geo, quota_bytes=4 * 2**20, max_seq_len=8192, max_batch_size=1,
                     page_index_policy="clamped")
req = Request("req-0", prompt_len=8192, max_new_tokens=1)
mgr.prepare_context(req)
try:
    mgr.resize_context(req, 8192)
    local_error = None
except PageIndexTooShort as exc:
    local_error = exc
    print("".join(traceback.format_exception_only(exc)).strip())
assert str(local_error) == "User-provided base page indices is too short"

# %% [markdown]
# ## 8. Try it: workspace and context
#
# Move rank 0's MoE workspace (the other ranks add the scenario's skew) and the long context's
# length. The panel does not run the ranks on every move: it works out, in closed form
# (`kvlab.analysis.rank_plan`), what each rank's start-up builds — own quota, MIN, clamp, row width —
# where each request lands and whether it outgrows its row (crash), in a few milliseconds. Under
# the clamp the row is as long as the pool, give or take the few entries of its rounding, so a
# context the pool cannot hold outgrows the row too, unless it needs no more than those few
# entries (notebook 02 §6 finds one that is refused instead). The button **Run the ranks** then runs them
# for real (in-process threads, the same `RankRunner` code as the processes above) and says
# whether the run ended as predicted. Things to find: the workspace below which the pool no
# longer clamps; a workspace at which the pool clamps and the long context still fits, so the
# clamp alone does no harm; how much of rank 0's own pool the MIN takes away.

# %%
panel = ranks_panel(workspace_gib=workspace_gib, context=context, ranks=ranks)
assert panel.outcome == ("crash" if expect_crash else "ok")
panel

# %% [markdown]
# **Run the ranks**, pressed here once, at the panel's starting values: the real run must end as
# the plan said. It is section 5's run, so the panel above says only how the ranks ended, the
# ranks that ended alike in one row (0, then 1-15); the line below says it too, for a copy of
# this notebook without a live kernel.

# %%
checked = panel.act()  # what the button does
assert checked.ended == panel.model.plan.ended and "As predicted." in panel.action_output.value
assert checked.rank_rows() == clamped.rank_rows()  # section 5's table
print(textwrap.fill(f"Run the ranks: {checked.ended} - {checked.reason}. As predicted.", 100, break_on_hyphens=False))

# %% [markdown]
# ## Findings
#
# The 16-rank failure is one rank's local failure plus the executor's failure handling: the MIN
# all-reduce gave every rank the smallest pool, the clamp sized rank 0's row from it, a context
# beyond the row raised in the native resize, and every rank shut down. Admission control keeps
# every rank alive. The local conditions reproduce on one GPU with a 4 MiB pool (notebook 02).
#
# Block reuse is on here, as TensorRT-LLM's default (notebook 04 §8), and changes none of this:
# the pools, the clamp and the row are fixed when the managers are built, before any page is
# cached, and a page a request shares is still one of its pages, so the context that overruns
# rank 0's row overruns it with reuse on or off. So does the tier below the GPU: the engines here
# keep TensorRT-LLM's default, an automatic host tier (pages a suspended request holds may move
# to host memory; notebook 03 §8b), which the table below names with the scenario.

# %%
scenario = (sc.name if IS_REPORT else f"{ranks}x-{workspace_gib:g}GiB-{context}tok") + ", automatic host tier"
numbers = (f"{ranks} ranks; own pools {min(local_tokens):,}-{max(local_tokens):,} tokens, MIN {r0.capacity_tokens:,} "
           f"tokens = {pool_blocks:,} blocks; row {r0.max_blocks_per_seq:,} entries (clamped max_seq_len "
           f"{r0.max_seq_len:,}); {context:,} tokens need {needed:,} entries")
if IS_REPORT:  # the scenario file's expected numbers
    exp = sc.expected
    assert (pool_blocks, r0.capacity_tokens, r0.max_blocks_per_seq, needed) == (
        exp["total_blocks"], exp["capacity_tokens"], exp["width_clamped"], exp["entries_needed"])
findings = report_findings([
    Finding(scenario=scenario, policy="none/clamped", outcome="crash" if expect_crash else "ok",
            numbers=numbers + f"; {clamped.ended}: {clamped.reason}"),
    Finding(scenario=scenario, policy="capacity", outcome="reject" if demand > pool_blocks else "ok",
            numbers=f"demand {demand:,} blocks vs {pool_blocks:,}; {admitted.ended}: {admitted.reason}"),
    Finding(scenario="rtx5080-4mib", policy="none/clamped", outcome=seed.outcome,
            numbers=f"the reduction: {seed.total_blocks:,} blocks, row {seed.max_blocks_per_seq:,}, "
                    f"{seed.entries_needed:,} entries needed"),
])
