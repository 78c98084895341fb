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
# # 03 · The one-line fix: a wider row, and a pool that is still too small
#
# *About 30 minutes.*
#
# Notebook 02 reproduced issue #21470's `ValueError` on one GPU: the page-index row was sized
# from the **clamped** `max_seq_len` (68 entries for 2,048 tokens), the request from the
# **configured** one (256 entries for 8,192 tokens). The seed's first candidate fix changed one
# line: size the row from the configured length instead. This notebook follows that fix through
# the allocator — where it works — and prices it. Whether it is enough for the *engine* is
# Part 2's question (it is not: the seed, section 5, "A buffer fix is not a scheduling fix").
#
# **Optional parts** (marked "(optional)"; skip them on a first pass, nothing after them needs
# them): §5 what the table is for, §6 the price measured on an H200, §8b whether the tier below
# the GPU changes Part 2's runs.

# %% tags=["parameters"]
pool_mib: float = 4.0  # the KV pool (quota) in MiB; the seed's 4
context: int = 8192  # configured context length: max_seq_len and the request's tokens; the seed's 8192
tokens_per_block: int = 32  # tokens per page (block); the seed's 32
retry_tokens: int = 32  # the seed's manual retry after the refusal
max_batch_size: int = 512  # the largest batch size priced in section 4
stall_limit: int = 1000  # passes without progress before SchedulerDeadlock; the real _DEADLOCK_STALL_ITERS
num_small: int = 6  # small requests (256 + 32 tokens) beside the long one in Part 2
host_tier: str = "automatic"  # tier below the GPU in Part 2: automatic (host_cache_size None, the real default) or none (host_cache_size 0)
chunk_tokens: int = 256  # the token budget per pass of section 9's chunked prefill
SMOKE: bool = False  # True (CI): coarser sweeps

# %%
import inspect
import textwrap

from kvlab import SchedulerDeadlock, simulate
from kvlab.notebook import viz
import dataclasses

from kvlab.analysis.compare import (EngineConfig, TIERS, build_scheduler, long_and_small,
                                    outcome_table, tier_runs)
from kvlab.analysis.measurements import load_measurements, measured_on
from kvlab.analysis.presets import engine_outcome, seed_geometry
from kvlab.analysis.shipped import policies_label
from kvlab.analysis.repro import no_pool_reason, page_index_price, run_repro, sweep_repro
from kvlab.core.page_index import max_blocks_per_seq, width_seq_len
from kvlab.core.paged_attention import paged_vs_contiguous
from kvlab.notebook.findings import Finding, report_findings
from kvlab.notebook.tables import table
from kvlab.notebook.widgets import step_panel
from kvlab.notebook.parameters import check_repro_parameters
from kvlab.run.scenarios import load_scenario

# Bad parameters stop here, with a message naming the parameter.
check_repro_parameters(pool_mib, context, tokens_per_block, SMOKE=SMOKE, retry_tokens=retry_tokens,
                       max_batch_size=max_batch_size)
if host_tier not in TIERS:
    raise ValueError(f"host_tier must be one of {sorted(TIERS)}, got {host_tier!r}")
engine = EngineConfig(pool_mib=pool_mib, max_seq_len=context, geometry=seed_geometry(tokens_per_block),
                      stall_limit=stall_limit, host_cache_size=TIERS[host_tier])  # checks stall_limit (and the pool) by name
chunked_engine = dataclasses.replace(engine, chunked_prefill=True, max_num_tokens=chunk_tokens)
long_and_small(context, num_small=num_small)  # checks num_small by name
if no_pool_reason(pool_mib, tokens_per_block):
    raise ValueError(f"pool_mib={pool_mib}: {no_pool_reason(pool_mib, tokens_per_block)}")

seed = load_scenario("rtx5080-4mib")
SEED = seed.parameters
IS_SEED = ((pool_mib, context, tokens_per_block, retry_tokens)
           == (SEED.pool_mib, SEED.context_length, SEED.tokens_per_block, 32))
print(f"parameters: pool_mib={pool_mib:g}, context={context:,}, tokens_per_block={tokens_per_block}, "
      f"retry_tokens={retry_tokens:,}", "(the seed's)" if IS_SEED else "(not the seed's)")

# %% [markdown]
# ## 1. The line
#
# In kvlab the choice is a width policy: which `max_seq_len` sizes the row. `"clamped"` is the
# historical code (since PR #12306); `"configured"` is the one-line fix.

# %%
print(inspect.getsource(width_seq_len))
before = run_repro(pool_mib, context, "clamped", tokens_per_block, max_seq_len=context, retry_tokens=retry_tokens)
after = run_repro(pool_mib, context, "configured", tokens_per_block, max_seq_len=context, retry_tokens=retry_tokens)
raw = -(-(context + 1) // tokens_per_block)
print(f"clamped    : row from max_seq_len {before.capacity_tokens:,} -> {before.max_blocks_per_seq:,} entries")
print(f"configured : row from max_seq_len {context:,}: ceil(({context:,} + 1) / {tokens_per_block}) = {raw:,} "
      f"-> multiple of 4 = {after.max_blocks_per_seq:,} entries")
assert after.max_blocks_per_seq == -(-raw // 4) * 4 == max_blocks_per_seq(context, tokens_per_block)
assert after.max_blocks_per_seq >= after.entries_needed  # the configured row always holds the request

# %% [markdown]
# ## 2. False instead of the exception
#
# Same pool, same request. The row now holds all the entries the request needs, so the native
# resize gets past its buffer check to the pool check — and the pool is as small as before. A
# resize that cannot get its pages returns **False with no side effects**: nothing allocated, the
# cache's capacity and its row unchanged. The seed then retried a small resize by hand.

# %%
print(after.explain())
print(f"state preserved after False: {after.state_preserved}")
print(f"manual {after.retry_tokens}-token retry: {'succeeded' if after.retry_ok else 'failed'}; "
      f"free pages after it: {after.free_blocks_after:,} of {after.total_blocks:,}")
needed, blocks = after.entries_needed, after.total_blocks
expected_after = "refused" if needed > blocks else "ok"
assert after.outcome == expected_after and after.error is None
if after.outcome == "refused":
    assert after.state_preserved is True
    retry_blocks = -(-retry_tokens // tokens_per_block)
    assert after.retry_ok == (retry_blocks <= blocks)
    assert after.free_blocks_after == blocks - (retry_blocks if after.retry_ok else 0)

# %% [markdown]
# The seed's table, "Original" against "Initial candidate":

# %%
rows = [("page-index width", before.max_blocks_per_seq, after.max_blocks_per_seq),
        ("physical token capacity", before.capacity_tokens, after.capacity_tokens),
        (f"{context:,}-token allocation", "ValueError" if before.outcome == "crash" else before.outcome,
         "returns False" if after.outcome == "refused" else after.outcome),
        ("cache state after refusal", "interrupted" if before.outcome == "crash" else before.state_preserved,
         "preserved" if after.state_preserved else after.state_preserved),
        (f"manual {retry_tokens:,}-token retry", "not reached" if before.outcome == "crash" else before.retry_ok,
         "succeeded" if after.retry_ok else after.retry_ok)]
print(f"{'observation':28} {'clamped (original)':>20} {'configured (fix)':>20}")
for name, a, b in rows:  # counts as 2,048; True, False and words as they are
    a, b = (f"{v:,}" if type(v) is int else str(v) for v in (a, b))
    print(f"{name:28} {a:>20} {b:>20}")

# %% [markdown]
# ## 3. The picture: same pool, wider row
#
# The request now fits the row (the dashed line moved from 68 to 260) but still not the pool: its
# bar turns amber, not green. Over every pool and context the fix turns every red cell amber —
# and not one of them green.

# %%
viz.show(viz.repro_index_row(after))
viz.show(viz.repro_page_map(after))

# %%
step = 1.0 if SMOKE else 0.5
pools = [2 ** (k * step) for k in range(int(-2 / step), int(10 / step) + 1)]
contexts = sorted({2 ** k for k in range(5, 18)} | ({3 * 2 ** k for k in range(4, 16)} if not SMOKE else set()))
sweeps = {policy: sweep_repro(pools, contexts, policy, tokens_per_block) for policy in ("clamped", "configured")}
for policy, sweep in sweeps.items():
    viz.show(viz.outcome_map_figure(sweep, title=f"{policy} row: one resize over {len(sweep):,} (pool, context) pairs"))
pairs = list(zip(sweeps["clamped"], sweeps["configured"]))
assert all((a.pool_bytes, a.context) == (b.pool_bytes, b.context) for a, b in pairs)
assert not any(b.outcome == "crash" for _, b in pairs)  # the fix removes every ValueError ...
assert all(b.outcome == "refused" for a, b in pairs if a.outcome == "crash")  # ... into a False
assert all(a.outcome == b.outcome == "ok" for a, b in pairs if "ok" in (a.outcome, b.outcome))  # and saves none
changed = sum(a.outcome != b.outcome for a, b in pairs)
print(f"{changed:,} of {len(pairs):,} pairs change outcome, all from crash to refused; none becomes ok")

# %% [markdown]
# ## 4. The price: a wider table for every slot
#
# The host page-index table is pinned int32 `[pools, (max_batch_size + 1) slots, 2, width]`, so
# its bytes grow with the width times the batch size — for **every** sequence slot, not just the
# long one. Sizing from the configured length makes the table as wide as the longest context the
# engine accepts, however small the pool (and the review of the fix also raised the copy cost and
# indexing limits of wider rows).

# %%
narrow, wide = before.max_blocks_per_seq, after.max_blocks_per_seq
batch_sizes = sorted({2 ** k for k in range(0, max_batch_size.bit_length()) if 2 ** k <= max_batch_size} | {max_batch_size})
if SMOKE:
    batch_sizes = sorted({1, max_batch_size} | set(batch_sizes[::3]))
seq_lens = sorted({before.capacity_tokens, context, 32768, 131072})
price = page_index_price(seq_lens, batch_sizes, tokens_per_block)
viz.show(viz.table_price_figure(price, labels={narrow: "clamped", wide: "configured"}, compare=(narrow, wide)))
at = {(r["width"], r["max_batch_size"]): r["nbytes"] for r in price}
for r in price:
    assert r["nbytes"] == (r["max_batch_size"] + 1) * 2 * r["width"] * 4  # slots x (K, V) x width x int32
b_narrow, b_wide = at[(narrow, max_batch_size)], at[(wide, max_batch_size)]
print(f"max_batch_size {max_batch_size:,}: {narrow:,} entries -> {b_narrow:,} B; {wide:,} entries -> {b_wide:,} B "
      f"(x{b_wide / b_narrow:.2f} = {wide}/{narrow})")
assert b_wide * narrow == b_narrow * wide  # bytes are proportional to the width
if IS_SEED and max_batch_size == 512:
    assert (narrow, wide, b_narrow, b_wide) == (68, 260, 279_072, 1_067_040)

# %% [markdown]
# ## 5. What the table is for (optional)
#
# Every row of that table is read on every step: the attention kernels find a sequence's K and V
# through it. Token `t` of a sequence lives in page `row[t // tokens_per_block]`, at offset
# `t % tokens_per_block`. `kvlab.core.paged_attention` is a reference in plain torch (not a kernel):
# three sequences grow a page at a time in turn, so their pages interleave in one pool; their K
# and V are written through their rows and read back through them, and attention over what the
# rows gather must equal attention over an ordinary contiguous cache.

# %%
paged = paged_vs_contiguous(lengths=(45, 100, 7))
for seq, pages in paged["pages"].items():
    print(f"{seq}: row -> pages {pages}")
print(f"paged vs contiguous attention, max |difference|: {paged['max_abs_error']:.2e} (float16)")
assert paged["max_abs_error"] < 1e-2
assert paged["pages"]["seq-0"][:2] == [0, 3]  # interleaved: the pages are not contiguous

# %% [markdown]
# ## 6. The price, measured on an H200 (optional)
#
# A wider row is not only host bytes: the executor copies the table to the GPU every step before
# the kernels read it. These figures were measured on an NVIDIA H200 with
# `benchmarks/gpu_measurements.py` and stored in `data/measurements/h200.json` (device, driver,
# CUDA, torch and date inside); this notebook only reads them, so it shows the same figures on a
# laptop. Widths 68 and 260 are the seed's clamped and configured rows; 1,028 to 32,772 are the
# rows of 32k to 1M-token contexts at 32 tokens a page, which is what the one-line fix makes
# every slot pay when the engine is configured for long contexts.

# %%
h200 = load_measurements("h200")
gpu = h200["device"]["name"]
print(measured_on(h200["device"]))
viz.show(viz.table_copy_figure(h200["page_index_copy"], device=gpu,
                               labels={68: "clamped (seed)", 260: "configured (seed)"}))
copy_us = {(r["width"], r["max_batch_size"]): r["median_us"] for r in h200["page_index_copy"]}
big = max(b for _, b in copy_us)
print(textwrap.fill(f"per step at max_batch_size {big:,}: " + ", ".join(
    f"{w:,} entries {copy_us[(w, big)]:,.0f} us" for w in sorted({w for w, _ in copy_us})), 100))
assert copy_us[(260, big)] > copy_us[(68, big)] and copy_us[(32772, big)] > 10 * copy_us[(260, big)]

# %% [markdown]
# Reading K and V through the table gathers pages scattered over the pool. On the H200 that
# costs a little against a plain copy of the same bytes — the indirection itself is cheap; the
# table's price is its size and its copy, not the lookup.

# %%
viz.show(viz.paged_read_figure(h200["paged_read"], device=gpu))
ratios = [r["gather_vs_copy"] for r in h200["paged_read"]]
print("gather / copy bandwidth:", ", ".join(f"{r:.0%}" for r in ratios))
assert all(0.5 < r <= 1.2 for r in ratios)

# %% [markdown]
# And the constraint of issue #21470 made with real allocations: 22 GiB of weights, a 10 GiB
# warm-up peak and a growing MoE workspace as real tensors on the H200, the quota measured as
# `KvCacheCreator` measures it (`torch.cuda.mem_get_info` and the allocator's peak, times
# `free_gpu_memory_fraction` 0.9), then a real pool of that size (`kvlab.core.memory.DeviceMemory`,
# `pool_vs_workspace`). Every GiB of workspace costs 0.9 GiB of pool, and the clamped
# `max_seq_len` with it. Allocating the pool itself (last figure) takes milliseconds up to
# 64 GiB (7.6 ms, the median of three cold allocations), then 0.37 s for the largest, 125 GiB of
# the H200's 140: an allocation near all of the card's free memory costs far more per byte. We
# measured that jump, not its cause (it happens in the CUDA driver, below torch); either way it
# is paid once, at start-up, and it is not what makes the pool too small.

# %%
viz.show(viz.pool_vs_workspace_figure(h200["pool_vs_workspace"], device=gpu))
shrink = h200["pool_vs_workspace"]
for r in shrink:
    print(f"workspace {r['workspace_bytes'] / 2**30:>4.0f} GiB -> pool {r['pool_blocks']:>6,} blocks, "
          f"max_seq_len clamped to {r['max_seq_len']:>7,}")
per_gib = (shrink[0]["kv_quota_bytes"] - shrink[-1]["kv_quota_bytes"]) / (
    shrink[-1]["workspace_bytes"] - shrink[0]["workspace_bytes"])
assert abs(per_gib - 0.9) < 0.01  # fraction x each byte of workspace
viz.show(viz.pool_allocation_figure(h200["pool_allocation"], device=gpu))
alloc = h200["pool_allocation"]
assert alloc[-2]["nbytes"] == 64 * 2**30 and alloc[-2]["median_ms"] < 10 < 300 < alloc[-1]["median_ms"] < 400

# %% [markdown]
# ## Part 2: through the scheduler
#
# In the allocator test the seed issued the smaller retry by hand. In the engine nobody does: the
# scheduler (`KVCacheV2Scheduler`, docs/REFERENCE.md §4) tries the request's context every pass,
# reacts to `False`, and tries again next pass. It has no free-pages query and no notion of a
# request that can *never* fit. Its guards are two. With **no tier below the GPU**
# (`host_cache_size=0`) a context that fails to allocate runs `preempt_for_pages`: the newest
# *started* request that is not scheduled this pass is recompute-paused to free its pages. With
# the **automatic host tier** (`host_cache_size=None`, the real default) it does not; eviction
# suspends to the host instead. And the stall detector: after `_DEADLOCK_STALL_ITERS` = 1000
# consecutive passes with active requests and no progress it raises
# `RuntimeError("V2 scheduler deadlock: ...")`.
#
# The runs below use the tier named in the parameters; section 8b runs both.
#
# Block reuse (prefix caching, `enable_block_reuse=True`, upstream's default) is on here too
# (notebook 04 §8 shows what it does). It changes none of this notebook's findings: these
# prompts share no prefix, so reuse finds nothing to share, and a page a request shares is still
# one of its pages, so a request the pool can never hold stays one with reuse on.
#
# ### Step through it: one pass at a time
#
# Before the long runs, watch the passes one by one. Click the `pass` slider and press → for the
# next pass: the first figure shows what each request asked for this pass (the outline: its whole
# context, or one token of generation) and what it got; the second, the run so far. Under
# `none/configured` the long request is refused every pass while the small ones get on; once they
# finish, nothing makes progress and the stall detector counts up to its limit (20 here, so that
# it is a few key presses away; the real one, 1,000, is what the runs below use). Switch the policy:
# `none/clamped` stops in its first pass, `capacity` rejects the long request as it arrives.

# %%
stepper = step_panel("none/configured", passes=1)
stepper.set(**{"pass": 45})  # where the small requests are done and the stall count climbs
assert stepper.model.rows[0]["result"] == "refused" and stepper.model.stalled > 0
stepper

# %% [markdown]
# ### 7. Alone: refused every pass, then the deadlock

# %%
# Sections 8b and 9 tabulate runs by tier: their columns, and what stopped each run.
TIER_COLUMNS = ["outcome", "finished", "unfinished", "iterations", "preemptions", "max_stalled_passes", "stopped by"]


def stopped_by(runs, max_steps: int):
    """The outcome table of ``runs`` by tier, each outcome as the figures name it (a livelock is
    not a stall), with what stopped each run: the error that stopped the engine or, where
    nothing raised (a livelock never does), the step limit it ran to."""
    outcomes = outcome_table(runs).rename_axis("tier")
    limit = f"nothing raised: still running at max_steps ({max_steps:,} steps)"
    return outcomes.assign(**{"outcome": [viz.run_outcome(run) for run in runs.values()],
                              "stopped by": outcomes["error"].replace("", limit)})


# %%
alone = simulate(build_scheduler("none/configured", engine), long_and_small(context, num_small=0),
                 max_steps=stall_limit + 10)
long_req = alone.requests["long"]
print(f"{alone.iterations:,} passes; the long request refused in {long_req.num_refusals:,} of them")
print(textwrap.fill(f"{type(alone.error).__name__}: {alone.error}", 100, break_on_hyphens=False))  # between words
print("tier below the GPU:", engine.tier_name)
viz.show(viz.scheduler_timeline_figure(alone, stall_limit=stall_limit,
                                       title=f"Alone, configured row: refused every pass, deadlock at pass {stall_limit:,}",
                                       subtitle=policies_label(["none/configured"], engine)))
if after.outcome == "refused":  # the pool cannot hold the request: the scheduler can never place it
    assert isinstance(alone.error, SchedulerDeadlock) and isinstance(alone.error, RuntimeError)
    assert alone.iterations == stall_limit == alone.error.stalled_passes  # raised on the limit-th stalled pass
    assert long_req.num_refusals == alone.iterations  # refused on every pass
    assert alone.trace.column("stalled_passes") == list(range(1, stall_limit + 1))
    assert set(alone.trace.column("free_blocks")) == {after.total_blocks}  # a refusal keeps nothing
    assert f"in {stall_limit} consecutive attempts" in str(alone.error)
    assert engine_outcome(alone) == "stall"

# %% [markdown]
# ### 8. Beside small requests: starvation, then the deadlock
#
# Now small requests (256 prompt + 32 new tokens) arrive every 4 steps beside the long one. Each
# pass the long request is tried and skipped, and the small ones behind it are scheduled: they
# make progress, so the stall counter keeps resetting to 0 and the detector stays quiet. The long
# request *starves* — it waits, with no error and no reason given to its client — for as long as
# anything else runs. When the last small request finishes, the counter starts climbing, and
# `stall_limit` passes later the engine stops.

# %%
beside = simulate(build_scheduler("none/configured", engine), long_and_small(context, num_small=num_small),
                  max_steps=20_000)
small_ids = [rid for rid in beside.status if rid != "long"]
last_small = max((beside.requests[rid].end_step for rid in small_ids), default=-1)
stalled = beside.trace.column("stalled_passes")
steps = beside.trace.column("step")
print(f"small requests finished: {sum(beside.status[r] == 'finished' for r in small_ids)} of {len(small_ids)}, "
      f"the last at step {last_small:,}")
refused = beside.requests["long"].num_refusals
print(f"long request: {beside.status['long']}, refused in "
      + (f"every one of the {beside.iterations:,} passes" if refused == beside.iterations else
         f"{refused:,} of {beside.iterations:,} passes (in the others a full batch came before it)"))
print(textwrap.fill(f"{type(beside.error).__name__} at step {steps[-1]:,} (steps count from 0: "
                    f"pass {steps[-1] + 1:,}): {beside.error}", 100,
                    break_on_hyphens=False))
viz.show(viz.scheduler_timeline_figure(beside, stall_limit=stall_limit,
                                       title="Beside small requests: they finish, the long one starves",
                                       subtitle=policies_label(["none/configured"], engine)))
if after.outcome == "refused" and small_ids:
    assert all(beside.status[rid] == "finished" for rid in small_ids)  # they all finish ...
    assert beside.status["long"] == "waiting" and beside.requests["long"].first_scheduled_step is None  # ... it never starts
    assert max(st for s, st in zip(steps, stalled) if s <= last_small) == 0  # no stall while they run
    assert isinstance(beside.error, SchedulerDeadlock)  # then, once they are gone, the deadlock
    assert stalled[-1] == stall_limit and steps[-1] == last_small + stall_limit
    # tried and refused on every pass that reached it (a pass whose batch was full never did)
    assert stall_limit < beside.requests["long"].num_refusals <= beside.iterations

# %% [markdown]
# ### 8b. Does the tier below the GPU change this? (optional)
#
# Not here. `preempt_for_pages` needs a *started* victim that this pass did not schedule: the
# small requests are either first context chunks (never victims) or generating, and a pass walks
# twice: phase 1 schedules every generating request, then phase 2 walks the waiting contexts and
# tries the long one, when every generating request is already scheduled in this pass and so no
# victim. So with or without a host tier the long request is refused every pass, alone or not.

# %%
tiers_alone = stopped_by(tier_runs(long_and_small(context, num_small=0), engine, max_steps=stall_limit + 10),
                         stall_limit + 10)
tiers_beside = stopped_by(tier_runs(long_and_small(context, num_small=num_small), engine, max_steps=20_000), 20_000)
print("Alone, configured row, non-chunked, under each tier configuration:")
display(table(tiers_alone[TIER_COLUMNS]))
print(f"Beside {num_small} small requests:")
display(table(tiers_beside[TIER_COLUMNS]))
if after.outcome == "refused":
    assert list(tiers_alone["outcome"]) == list(tiers_beside["outcome"]) == ["stall", "stall"]
    assert tiers_alone["preemptions"].sum() == tiers_beside["preemptions"].sum() == 0

# %% [markdown]
# ### 9. Chunked prefill, as issue #21470's deployment ran: the tier decides
#
# The 16-GPU deployment prefilled in chunks. Then the long request *does* start: chunk by chunk
# (here `chunk_tokens` a pass) it takes pages until the pool is full, and only its next chunk is
# refused. From there the two configurations part:
#
# - **automatic host tier**: nothing preempts anything. The long request holds the whole pool, no
#   small request can start, and 1,000 passes later the stall detector stops the engine with
#   every request unfinished.
# - **no tier below the GPU**: a small request's first chunk fails, and `preempt_for_pages`
#   recompute-pauses the newest started request it did not schedule: the long one. Its pages
#   come free, phase 2 stops, and next pass the long request (first in the queue) starts over and
#   takes the budget again. A **preemption livelock**: every few passes a recompute pause, which
#   the stall detector counts as progress, so no error ever comes, and nothing finishes.

# %%
chunked_steps = max(600 if SMOKE else 3000, stall_limit + 100)
chunked = tier_runs(long_and_small(context, num_small=num_small), chunked_engine, max_steps=chunked_steps)
chunked_table = stopped_by(chunked, chunked_steps)
print(f"Chunked prefill ({chunk_tokens} tokens a pass), configured row, beside {num_small} small requests:")
display(table(chunked_table[TIER_COLUMNS]))
livelock = chunked["none"]
window = tier_runs(long_and_small(context, num_small=num_small), chunked_engine, max_steps=200)["none"]
viz.show(viz.scheduler_timeline_figure(window, stall_limit=stall_limit,
                                       title="Chunked, no tier below the GPU: the first 200 passes of a preemption livelock",
                                       subtitle=policies_label(["none/configured"], chunked_engine)))
if after.outcome == "refused" and num_small and IS_SEED:
    held = chunked["automatic"]
    assert isinstance(held.error, SchedulerDeadlock) and held.summary()["finished"] == 0
    assert livelock.error is None and livelock.summary()["finished"] == 0
    assert list(chunked_table["outcome"]) == ["stall", "livelock"]  # (automatic, none): deadlock, livelock
    assert livelock.summary()["recomputes"] > 10 and max(livelock.trace.column("stalled_passes")) < stall_limit

# %% [markdown]
# The buffer fix moved the failure from the allocator to the scheduler: instead of a `ValueError`
# at once, a request that can never fit occupies a queue position, makes its client wait
# indefinitely while other work is served, and — as soon as nothing else is left — stops the
# engine anyway, 1,000 passes later. With chunked prefill and no tier below the GPU it is worse:
# the engine churns forever and says nothing. Telling "not yet" from "never" is admission
# control's job (PR #21720): notebook 04.

# %% [markdown]
# ## Findings
#
# At the allocator's boundary the one-line fix is correct: no `ValueError`, a plain `False`,
# the cache untouched, a small retry succeeds. It does not make the request fit — the pool holds
# the same number of pages — and it widens the table for every slot. Through the scheduler
# (non-chunked, either tier configuration) the request is refused every pass: alone it ends in
# `SchedulerDeadlock` at the stall limit; beside small requests it starves until they are gone,
# then deadlocks. With chunked prefill the tier decides: with the automatic host tier the long
# request holds the pool and everything deadlocks; with no tier below the GPU,
# `preempt_for_pages` turns it into a livelock that never raises.

# %%
scenario = seed.name if IS_SEED else f"{pool_mib:g}MiB-{context}tok-{tokens_per_block}tpb"
findings = report_findings([
    Finding(scenario=scenario, policy="none/clamped", outcome=before.outcome,
            numbers=f"row {narrow:,} entries; {context:,} tokens need {needed:,}; {blocks:,} pages"),
    Finding(scenario=scenario, policy="none/configured", outcome=after.outcome,
            numbers=(f"row {wide:,} entries; {needed:,} needed > {blocks:,} pages → False, state preserved "
                     f"{after.state_preserved}, {retry_tokens:,}-token retry "
                     f"{'ok' if after.retry_ok else 'failed'}; table x{wide / narrow:.2f} bytes "
                     f"({b_narrow:,} → {b_wide:,} B at batch {max_batch_size:,})")
            if after.outcome == "refused" else f"row {wide:,} entries; {needed:,} of {blocks:,} pages allocated"),
    Finding(scenario=f"{scenario}, alone, through the scheduler, {engine.tier_name}", policy="none/configured",
            outcome=engine_outcome(alone),
            numbers=(f"refused in {alone.requests['long'].num_refusals:,} of {alone.iterations:,} passes; "
                     f"{type(alone.error).__name__ if alone.error else 'no error'} after {stall_limit:,} stalled passes")),
    Finding(scenario=f"{scenario}, beside {len(small_ids)} small requests, {engine.tier_name}", policy="none/configured",
            outcome=engine_outcome(beside),
            numbers=(f"{sum(beside.status[r] == 'finished' for r in small_ids)} of {len(small_ids)} small finished by "
                     f"step {last_small:,}; long request {beside.status['long']} (starved); "
                     f"{type(beside.error).__name__ if beside.error else 'no error'} at step {steps[-1]:,}")),
    *[Finding(scenario=f"{scenario}, chunked ({chunk_tokens} a pass), beside {num_small} small, "
                       f"{dataclasses.replace(engine, host_cache_size=TIERS[tier]).tier_name}",
              policy="none/configured", outcome=viz.run_outcome(result),
              numbers=(f"{result.summary()['finished']:,} finished, {result.summary()['recomputes']:,} recompute "
                       f"pauses in {result.iterations:,} passes; "
                       f"{type(result.error).__name__ if result.error else 'no error (livelock)'}"))
      for tier, result in chunked.items()],
])
if IS_SEED:
    assert [f["outcome"] for f in findings] == ["crash", "refused", "stall", "stall", "stall", "livelock"]
