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
# # 05 · Recurrent-state residency: Qwen3.5-27B's 513 slots (PR #17261)
#
# A hybrid model such as Qwen3.5-27B keeps, beside its attention KV pages, one **fixed-size
# recurrent (Mamba / linear-attention) state per live sequence**. TensorRT-LLM's
# `MambaHybridCacheManagerV2` used to carve `max_batch_size × pp_size` such slots (plus a dummy
# for CUDA-graph padding) out of the KV-cache quota before anything else. PR #17261 reports that
# for Qwen3.5-27B on an 80 GiB H100 this cannot work: *513 slots need 37.5 GiB of the 24.9 GiB
# left after the weights*. The fix clamps residency to what the quota affords, MIN-reduces it
# across ranks, and lets the scheduler queue the excess. The review found three holes in the fix.
# This notebook redoes the arithmetic, builds the managers, and runs each finding with and
# without its fix (REFERENCE.md §5).

# %% tags=["parameters"]
quota_gib: float = 24.86  # the KV-cache quota in GiB: what the PR's H100 has left after the weights
max_batch_size: int = 512  # requested resident sequences (pp_size 1); the PR's 512
ssm_dtype: str = "bfloat16"  # SSM state dtype: "bfloat16" (what the PR's numbers imply) or "float32" (the config's)
SMOKE: bool = False  # True (CI): a coarser free_gpu_memory_fraction sweep

# %%
import pandas as pd

from kvlab import MambaHybridCacheManager, qwen3_5_27b_attention, qwen3_5_27b_mamba, viz
from kvlab._validate import check_choice, check_float, check_int
from kvlab.findings import Finding, report_findings
from kvlab.mamba import (GIB, PR_MAX_BATCH_SIZE, PR_QUOTA_BYTES, SCALE, dtype_rows, fraction_rows,
                         implied_ssm_dtype, qwen_plan, residency_bytes, run_review_findings,
                         scaled_qwen3_5_27b)
from kvlab.widgets import MAMBA_SSM_DTYPES, mamba_panel

# Bad parameters stop here, with a message naming the parameter.
check_float("quota_gib", quota_gib, low=0.0, high=1024.0, low_open=True)
check_int("max_batch_size", max_batch_size, low=1, high=4096)
check_choice("ssm_dtype", ssm_dtype, MAMBA_SSM_DTYPES)
if not isinstance(SMOKE, bool):
    raise TypeError(f"SMOKE must be a bool, got {SMOKE!r}")

quota = int(quota_gib * GIB)
IS_PR = (quota, max_batch_size, ssm_dtype) == (PR_QUOTA_BYTES, PR_MAX_BATCH_SIZE, "bfloat16")
print("parameters:", dict(quota_gib=quota_gib, max_batch_size=max_batch_size, ssm_dtype=ssm_dtype),
      "(the PR's)" if IS_PR else "(not the PR's: the asserts below follow the arithmetic)")

# %% [markdown]
# ## 1. One slot, and the PR's 37.5 GiB
#
# `_mamba_state_bytes_per_slot` is `layers × (conv_bytes + ssm_bytes)` with
# `conv_dim = heads × head_dim + 2 × n_groups × d_state` (conv state: `conv_dim × (d_conv − 1)`
# elements) and an SSM state of `heads × head_dim × d_state` elements. From Qwen3.5-27B's
# published config: 48 linear-attention layers, 48 value heads of 128, d_state 128, 16 key heads
# (n_groups), kernel 4. The config says `mamba_ssm_dtype: float32` — but 513 float32 slots are
# 73.55 GiB, not 37.5. Only a **bfloat16** SSM state gives the PR's figure.

# %%
g = qwen3_5_27b_mamba(ssm_dtype="bfloat16")
print(f"conv_dim = 48 x 128 + 2 x 16 x 128 = {g.conv_dim}; conv {g.conv_bytes:,} B + SSM {g.ssm_bytes:,} B a layer")
table = pd.DataFrame(dtype_rows(PR_QUOTA_BYTES, PR_MAX_BATCH_SIZE)).set_index("ssm_dtype")
display(table)
implied = implied_ssm_dtype(37.5, PR_MAX_BATCH_SIZE + 1)
print(f"513 slots = 37.5 GiB implies a {implied} SSM state")
assert implied == "bfloat16"
assert table.loc["bfloat16", "slots_gib"] == 37.48 and table.loc["float32", "slots_gib"] == 73.55
assert table.loc["bfloat16", "slots"] == 513 == PR_MAX_BATCH_SIZE + 1

# %% [markdown]
# ## 2. Raw residency: no `free_gpu_memory_fraction` helps
#
# The quota is `(total − peak) × free_gpu_memory_fraction`. After Qwen3.5-27B's weights an
# 80 GiB H100 has 24.86 GiB left: that is the quota at fraction **1.0**, the most any fraction can
# give. The raw floor, `(513 slots × slot) + one attention page`, is above it; a fraction would
# have to exceed 1. Construction raises before it allocates anything, so the real full-size
# manager can be built (and fail) here.

# %%
fractions = [0.5, 0.9, 1.0] if SMOKE else [0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0]
sweep = pd.DataFrame(fraction_rows(fractions, max_batch_size=max_batch_size, ssm_dtype=ssm_dtype))
display(sweep.round(2))
plan = qwen_plan(quota, max_batch_size, ssm_dtype)
print(f"raw floor {plan.raw_need_bytes / GIB:.2f} GiB = {plan.raw_need_bytes / PR_QUOTA_BYTES:.2f} x "
      f"what is left after the weights: the fraction would have to be above 1")
try:
    if plan.raw_need_bytes > quota:  # raises before allocating: the full-size manager is safe
        MambaHybridCacheManager(qwen3_5_27b_attention(), qwen3_5_27b_mamba(ssm_dtype=ssm_dtype), quota,
                                max_seq_len=4096, max_batch_size=max_batch_size, residency="raw")
    else:  # it would allocate the whole quota: build the 256x smaller model of section 3 instead
        attn_s, mamba_s = scaled_qwen3_5_27b(ssm_dtype)
        MambaHybridCacheManager(attn_s, mamba_s, -(-quota // SCALE), max_seq_len=64,
                                max_batch_size=max_batch_size, residency="raw")
    raw_error = None
    print("raw residency built: the quota affords every requested slot")
except ValueError as exc:
    raw_error = str(exc)
    print(f"ValueError: {raw_error}")
assert (raw_error is None) == (plan.raw_need_bytes <= quota)
if ssm_dtype == "bfloat16" and max_batch_size == PR_MAX_BATCH_SIZE:
    assert not sweep.raw_fits.any()  # not at any fraction, 1.0 included

# %% [markdown]
# ## 3. The clamp: how many sequences become resident
#
# The fix keeps `min(requested, (quota − one page) // slot − dummies)` sequences resident,
# reports it through `max_resident_sequences()` (None when every requested sequence fits) and
# truncates the warm-up batch sizes to it (each entry costs a slot). To allocate for real, the
# model is scaled down 256× (state split over tp 16 with 3 of 48 layers; one attention layer of
# one head with 8-token pages; the quota ÷ 256): the slot counts stay the PR's.

# %%
attn_s, mamba_s = scaled_qwen3_5_27b(ssm_dtype)
assert mamba_s.bytes_per_slot * SCALE == plan.slot_bytes and attn_s.bytes_per_block * SCALE == plan.page_bytes
warmup = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
scaled = MambaHybridCacheManager(attn_s, mamba_s, quota // SCALE, max_seq_len=64,
                                 max_batch_size=max_batch_size, warmup_batch_sizes=warmup)
print(scaled)
print("warm-up batch sizes:", scaled.warmup_batch_sizes)
resident = plan.local_cap
cap = scaled.max_resident_sequences()
print(f"full size: {resident} resident + {plan.dummies} dummy = "
      f"{(resident + plan.dummies) * plan.slot_bytes / GIB:.2f} GiB of {quota / GIB:.2f} GiB")
assert cap == (None if resident >= max_batch_size else resident)
assert scaled.state_slots.num_slots == min(resident, max_batch_size) + plan.dummies
if IS_PR:
    assert (resident, scaled.state_slots.num_slots) == (339, 340)
    assert scaled.warmup_batch_sizes[-1] == 339
viz.show(viz.residency_stack_figure(residency_bytes(plan), quota))

# %% [markdown]
# ## 4. The review's three findings, bug vs fix
#
# Each finding runs on a tiny hybrid model with its switch (`residency_bugs` on the manager or the
# Scheduler) set to the buggy behaviour, then fixed:
#
# 1. **Attention-only pipeline rank returns None first** — a Mamba rank (affords 3 of 8) and an
#    attention-only rank MIN-reduce in two threads; with the bug the attention-only rank reports
#    None and admits all 8 first chunks while the Mamba rank admits 3: the ranks disagree.
# 2. **DISAGG_GENERATION_INIT bypasses the cap** — cap 1, two disaggregated generation inits: with
#    the bug both are admitted and the second finds no state slot (`StateSlotsExhausted`).
# 3. **`break` instead of `continue`** — B is mid-prefill holding the only slot, A (a first chunk)
#    sits ahead of it: `break` on A's cap stops the scan, B never advances, the stall detector fires.

# %%
runs = run_review_findings()
for run in runs:
    print(f"finding {run.finding} {run.label}: {run.outcome:5} {run.detail[:150]}")
viz.show(viz.review_findings_figure(runs))
by = {(r.finding, r.bug): r for r in runs}
assert all(by[n, False].outcome == "ok" for n in (1, 2, 3))
assert [by[n, True].outcome for n in (1, 2, 3)] == ["stall", "crash", "stall"]
assert dict(by[1, True].metrics)["rank 1 admitted"] == 8 != dict(by[1, True].metrics)["rank 0 admitted"]
assert dict(by[2, True].metrics)["admitted in one pass"] == 2 > dict(by[2, False].metrics)["admitted in one pass"] == 1
assert dict(by[3, True].metrics)["B chunks scheduled"] == 0 < dict(by[3, False].metrics)["B chunks scheduled"]

# %% [markdown]
# ## 5. Try it: quota, max_batch_size, state dtype
#
# Things to find: the smallest quota at which raw residency builds for 512 sequences (bf16, then
# float32); the largest max_batch_size the PR's 24.86 GiB affords without a cap; what float32
# does to the clamped residency.

# %%
panel = mamba_panel(quota_gib=quota_gib, max_batch_size=max_batch_size, ssm_dtype=ssm_dtype)
assert panel.model.resident == max(resident, 0) and panel.model.raw_fits == (raw_error is None)
panel

# %% [markdown]
# ## Findings
#
# The slot is fixed-size, so `max_batch_size` was not a ceiling but a floor on memory; the clamp
# turns it back into a ceiling, and the review's fixes make every rank and every admission path
# respect it.

# %%
scenario = "qwen3.5-27b-h100" if IS_PR else f"qwen3.5-27b-{quota_gib:g}GiB-{max_batch_size}seq-{ssm_dtype}"
findings = [
    Finding(scenario=scenario, policy="raw", outcome="ok" if raw_error is None else "crash",
            numbers=f"{plan.requested + plan.dummies} slots x {plan.slot_bytes:,} B + one page = "
                    f"{plan.raw_need_bytes / GIB:.2f} GiB vs quota {quota / GIB:.2f} GiB"),
    Finding(scenario=scenario, policy="clamped", outcome="ok" if resident >= 1 else "crash",
            numbers=f"{max(resident, 0)} resident + {plan.dummies} dummy; "
                    f"{implied} SSM state implied by the PR's 37.5 GiB"),
]
findings += [Finding(scenario=f"review finding {r.finding}", policy=r.label, outcome=r.outcome,
                     numbers=", ".join(f"{k} {v}" for k, v in r.metrics)
                     + ("; cap 0 = None (unbounded)" if r.finding == 1 else "")) for r in runs]
if IS_PR:
    assert [f.outcome for f in findings[:2]] == ["crash", "ok"] and resident == 339
findings = report_findings(findings)
