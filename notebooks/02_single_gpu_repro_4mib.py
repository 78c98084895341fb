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
# # 02 · Issue #21470 on one GPU: a 4 MiB pool, no weights
#
# *About 25 minutes.*
#
# TensorRT-LLM issue #21470 was a crash on 16 GB300 GPUs: a long context reached
# `resize_context`, the native allocator raised
# `ValueError: User-provided base page indices is too short` on rank 0, and the executor took
# all 16 ranks down. The seed investigation (`docs/SEEDS.md`, "A single line of code eliminated a
# KV cache exception") followed the traceback instead of rebuilding the cluster:
#
# > Scheduler → `KVCacheManagerV2.resize_context()` → native `kv_cache.resize()` →
# > page-index buffer validation → `ValueError`
#
# The exception starts inside one rank's KV-cache manager; the 16-rank shutdown is what the
# executor does afterwards. So the local conditions are enough: **a pool too small for the
# context the engine was configured for**. This notebook rebuilds them with kvlab — no weights,
# a 4 MiB pool — and shows the same `ValueError` for the same arithmetic reason.

# %% tags=["parameters"]
pool_mib: float = 4.0  # the KV pool (quota) in MiB; the seed's 4
context: int = 8192  # configured context length: max_seq_len and the request's tokens; the seed's 8192
tokens_per_block: int = 32  # tokens per page (block); the seed's 32
SMOKE: bool = False  # True (CI): a coarser sweep

# %%
import textwrap
import warnings

from kvlab import KVCacheManager, KVGeometry, MemoryBudget, PageIndexTooShort, Request
from kvlab.analysis.repro import MIB, no_pool_reason, run_repro, sweep_repro, traceback_chain
from kvlab.notebook import viz
from kvlab.notebook.findings import Finding, report_findings
from kvlab.notebook.parameters import check_repro_parameters
from kvlab.core.words import a_or_an
from kvlab.notebook.widgets import repro_panel
from kvlab.run.scenarios import load_scenario

# Bad parameters stop here, with a message naming the parameter.
check_repro_parameters(pool_mib, context, tokens_per_block, SMOKE=SMOKE)
if no_pool_reason(pool_mib, tokens_per_block):
    raise ValueError(f"pool_mib={pool_mib}: {no_pool_reason(pool_mib, tokens_per_block)}")

seed = load_scenario("rtx5080-4mib")  # data/scenarios/rtx5080-4mib.yaml: the seed's table
SEED = seed.parameters
IS_SEED = (pool_mib, context, tokens_per_block) == (SEED.pool_mib, SEED.context_length, SEED.tokens_per_block)
print(seed.title)
print(f"parameters: pool_mib={pool_mib:g}, context={context:,}, tokens_per_block={tokens_per_block}",
      "(the seed's)" if IS_SEED else "(not the seed's: the asserts below follow the arithmetic)")

# %% [markdown]
# ## 1. Manufacturing the constraint
#
# In the cluster, a persistent MoE workspace inflated the memory peak, and the KV quota — what
# `KvCacheCreator._cal_max_memory` leaves, `(total − peak) × free_gpu_memory_fraction`, capped by
# `max_gpu_total_bytes` — shrank. The seed skipped the workspace and the weights and capped the
# quota directly. Here: a 16 GB RTX 5080, **no weights**, `max_gpu_total_bytes` = the pool.

# %%
budget = MemoryBudget(total_bytes=16 * 2**30, weights_bytes=0, max_gpu_total_bytes=int(pool_mib * MIB))
quota = budget.kv_quota_bytes
print(f"available after the (empty) peak: {budget.available_bytes:,} B")
print(f"KV quota = min(available, max_gpu_total_bytes) = {quota:,} B = {quota / MIB:g} MiB")
assert budget.peak_memory_bytes == 0  # nothing loaded
assert quota == min(budget.available_bytes, int(pool_mib * MIB))

# %% [markdown]
# ## 2. Bytes per token, and what 4 MiB holds
#
# One token of KV on this rank is `layers × 2 (K and V) × KV heads × head_dim × dtype bytes`
# (`KVCacheManagerV2.get_layer_bytes_per_token`, summed over layers). The seed's model shape:
# 2 layers, 2 KV heads, head_dim 128, fp16.

# %%
geo = KVGeometry(num_layers=SEED.num_layers, num_kv_heads=SEED.num_kv_heads, head_dim=SEED.head_dim,
                 dtype=SEED.kv_dtype, tokens_per_block=tokens_per_block)
bytes_per_token = geo.bytes_per_token
total_blocks = quota // geo.bytes_per_block
capacity_tokens = total_blocks * tokens_per_block
print("bytes per token :", geo.bytes_per_token_formula())
print(f"pool            : {quota:,} B / {bytes_per_token:,} B = {quota // bytes_per_token:,} tokens")
print(f"pages           : {quota:,} B / ({bytes_per_token:,} B x {tokens_per_block} tokens) = {total_blocks:,} pages "
      f"= {capacity_tokens:,} tokens")
assert bytes_per_token == 2 * 2 * 2 * 128 * 2 == 2048

# %% [markdown]
# ## 3. The clamp, and the page-index row it sizes
#
# Building the manager (`KVCacheManagerV2.__init__`): the longest sequence the pool holds is
# `total_blocks × tokens_per_block`; a larger `max_seq_len` is **clamped** to it, with a warning.
# Since PR #12306 the page-index row — one entry per page a sequence may own — is sized from that
# clamped length: `round_up_4(ceil((max_seq_len + 1) / tokens_per_block))` (+1 for the decode
# token; a multiple of 4 for the `copy_block_offsets` kernel).

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mgr = KVCacheManager(geo, quota_bytes=quota, max_seq_len=context, max_batch_size=1,
                         page_index_policy="clamped")
for w in caught:
    print(textwrap.fill(f"{w.category.__name__}: {w.message}", 100, break_on_hyphens=False))
print(mgr)

clamped_len = min(context, capacity_tokens)
width = mgr.max_blocks_per_seq
needed = -(-context // tokens_per_block)
raw = -(-(clamped_len + 1) // tokens_per_block)  # ceil((clamped_len + 1) / tokens_per_block)
expected_width = -(-raw // 4) * 4  # rounded up to a multiple of 4
print(f"row width: ceil(({clamped_len:,} + 1) / {tokens_per_block}) = {raw:,} -> multiple of 4 = {width:,} entries")
print(f"{a_or_an(f'{context:,}')} {context:,}-token context needs ceil({context:,} / {tokens_per_block}) = {needed:,} entries")
assert mgr.max_seq_len == clamped_len and width == expected_width
assert (len(caught) == 1) == (context > capacity_tokens)  # the clamp warns exactly when it clamps

# %% [markdown]
# What is the row for? The page-index table (host memory, int32) has one row per sequence the
# engine may hold at once (here `max_batch_size` 1), plus one reserved dummy row no sequence gets,
# and one entry per page a sequence may own: entry *i* holds the number of the pool page where
# tokens `i × tokens_per_block` to `(i + 1) × tokens_per_block − 1` live. Each row is stored
# twice, for the K and the V plane: the seed's table is 2 rows × 2 planes × 68 entries × 4 B =
# 1,088 B, the "table" size the repro prints. The attention kernel reads the K and V of a sequence by following its row (notebook 03 §5 times
# that copy and that read). Pages come back to the pool in any order, so a row points all over the
# pool. The row's width is fixed when the manager is built, and the native resize checks it
# before it looks at the pool: a context that needs more entries than the row has is refused
# with `ValueError`, however many pages are free.

# %%
viz.show(viz.page_table_figure(width, needed, mgr.total_blocks, slots=mgr.page_index.slots,
                               dummy_slot=mgr.page_index.dummy_slot, tokens_per_block=tokens_per_block))

# %% [markdown]
# ## 4. The reproduced `ValueError`
#
# The request goes through `resize_context`, as in the engine. The native resize checks the row
# **before** it looks at the pool (`_checkPageIndexBufferCapacity`, docs/REFERENCE.md §3): a row shorter
# than the pages the new capacity needs raises — even though the pool could never have held them
# anyway. Nothing catches it: in the engine it reaches the executor loop.

# %%
request = Request("req-0", prompt_len=context, max_new_tokens=1)
mgr.prepare_context(request)
try:
    returned = mgr.resize_context(request, context)
    error = None
    print(f"resize_context returned {returned}")
except PageIndexTooShort as exc:
    error = exc
    print(traceback_chain(exc))
mgr.check_invariants()
print(f"pages still free: {mgr.free_blocks:,} of {mgr.total_blocks:,}")

# %% [markdown]
# `kvlab.analysis.repro.run_repro` does the same resize on a fresh manager and keeps every number; the CLI
# (`kvlab repro`) and the live panel below use it too.

# %%
result = run_repro(quota / MIB, context, "clamped", tokens_per_block, max_seq_len=context)
print(result.explain())
expected_outcome = "crash" if needed > width else "refused" if needed > total_blocks else "ok"
assert (result.bytes_per_token, result.total_blocks) == (bytes_per_token, total_blocks)
assert result.capacity_tokens == clamped_len  # ReproResult keeps the clamped max_seq_len
assert (result.max_blocks_per_seq, result.entries_needed) == (width, needed)
assert result.outcome == expected_outcome
assert (error is not None) == (expected_outcome == "crash")
if error is not None:
    assert str(error) == "User-provided base page indices is too short" == result.error

# %% [markdown]
# ## 5. The picture: the pool, and the row
#
# The page map lays out the pool's pages and, past them, the pages the request would need that
# do not exist. The row figure puts three numbers side by side: the row's width, the pool's
# pages and the request's entries. The resize checks the request against the row first, and
# only then against the pool.

# %%
viz.show(viz.repro_page_map(result))
viz.show(viz.repro_index_row(result))

# %% [markdown]
# ## 6. Try it: the live panel
#
# Move the pool size (a log slider, MiB), the context length, the page size and the row-width
# policy; the page map, the row and the verdict follow. Things to find: the smallest pool on
# the slider that holds an 8,192-token context (its half steps jump from 11.31 MiB, which still
# crashes, to 16 MiB); a context just above the clamped capacity that is *refused* rather than
# crashing — so the crash stops a little before the pool is big enough (the row has one entry
# more than the clamped pool's pages, for the decode token, rounded up to a multiple of 4: try
# pools between 2 and 4 MiB with a context of 1,536 tokens); a pool too small to hold one page. ("configured" is the one-line fix of notebook 03.)

# %%
panel = repro_panel(pool_mib=quota / MIB, context=context, tokens_per_block=tokens_per_block, policy="clamped")
assert panel.outcome == result.outcome
panel

# %% [markdown]
# ## 7. Where it crashes: every pool and context
#
# One resize for each pool size and context length (max_seq_len = context, as in the seed),
# under the historical clamped row. Red is the `ValueError`; amber a plain `False`; green fits.

# %%
step = 1.0 if SMOKE else 0.5
pools = [2 ** (k * step) for k in range(int(-2 / step), int(10 / step) + 1)]
contexts = sorted({2 ** k for k in range(5, 18)} | ({3 * 2 ** k for k in range(4, 16)} if not SMOKE else set()))
sweep = sweep_repro(pools, contexts, "clamped", tokens_per_block)
viz.show(viz.outcome_map_figure(sweep, title=f"Clamped row: which (pool, context) pairs crash? ({len(sweep):,} resizes)"))
crashes = [r for r in sweep if r.outcome == "crash"]
assert all(r.entries_needed > r.max_blocks_per_seq for r in crashes)
assert all(r.context > r.capacity_tokens for r in crashes)  # only contexts the pool cannot hold crash
print(f"{len(crashes):,} of {len(sweep):,} resizes crash; every one asks for more than its pool holds")

# %% [markdown]
# ## Findings
#
# The exception is local and arithmetic: the row was sized for what the pool holds (the clamped
# length), and the request was sized for what the engine was configured for. Notebook 03 widens
# the row — and finds that the pool is still too small.
#
# Block reuse (on, as upstream's default) changes nothing here: the request is the first in an
# empty pool, so there is nothing cached to reuse, and the row check counts every page the new
# capacity needs, whether the cache would hold a shared page or its own.

# %%
scenario = (seed.name if IS_SEED else f"{pool_mib:g}MiB-{context}tok-{tokens_per_block}tpb") + ", any host tier"
numbers = (f"{bytes_per_token:,} B/token; {quota / MIB:g} MiB -> {total_blocks:,} blocks = {capacity_tokens:,} tokens; "
           f"row {width:,} entries (clamped max_seq_len {clamped_len:,}); {context:,} tokens need {needed:,} entries")
if IS_SEED:  # the seed's table, and the scenario file's expected numbers
    exp = seed.expected
    assert (bytes_per_token, capacity_tokens, total_blocks) == (exp["bytes_per_token"], exp["capacity_tokens"], exp["total_blocks"])
    assert (width, needed, result.outcome) == (exp["width_clamped"], exp["entries_needed"], "crash")
findings = report_findings([Finding(scenario=scenario, policy="none/clamped", outcome=result.outcome, numbers=numbers)])
