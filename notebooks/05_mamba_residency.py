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
# # 05 · Recurrent-state residency: Qwen3.5-27B's 513 slots (merged code, and two proposals)
#
# *About 15 minutes.*
#
# A hybrid model such as Qwen3.5-27B keeps, beside its attention KV pages, one **fixed-size
# recurrent (Mamba / linear-attention) state per live sequence**. Merged TensorRT-LLM's
# `MambaHybridCacheManagerV2` carves `max_batch_size × pp_size` such slots (plus a dummy for
# CUDA-graph padding) out of the KV-cache quota, and when they and one attention page do not fit
# it **raises a `ValueError` at construction**. There is no clamp, no cap and no scheduler gate.
#
# PR #17261 reported that for Qwen3.5-27B on an 80 GiB H100 this cannot work: *513 slots need
# 37.5 GiB of the 24.9 GiB left after the weights*. It proposed to clamp residency to what the
# quota affords, MIN-reduce it across ranks and let the scheduler queue the excess; the review
# found three holes in it, and the PR was **closed without merging**. PR #18985 (**open**, not
# merged) proposes another answer: pin a feasible `max_batch_size` default for the hybrid family
# and make the quota error say what to change. This notebook redoes the arithmetic, builds the
# merged manager (and watches it raise), then both proposals, side by side, and runs each review
# finding of the clamp with and without its fix (docs/REFERENCE.md §5).

# %% tags=["parameters"]
quota_gib: float = 24.86  # the KV-cache quota in GiB: what the PR's H100 has left after the weights
max_batch_size: int = 512  # requested resident sequences (pp_size 1); the PR's 512
ssm_dtype: str = "bfloat16"  # SSM state dtype: "bfloat16" (what the PR's numbers imply) or "float32" (the config's)
SMOKE: bool = False  # True (CI): a coarser free_gpu_memory_fraction sweep

# %%
import textwrap

import pandas as pd

from kvlab import MambaHybridCacheManager, qwen3_5_27b_attention, qwen3_5_27b_mamba
from kvlab.analysis.mamba_residency import (PR_MAX_BATCH_SIZE, PR_QUOTA_BYTES, SCALE, dtype_rows,
                                            fraction_rows, implied_ssm_dtype, proposal_rows,
                                            qwen_plan, residency_bytes, scaled_qwen3_5_27b)
from kvlab.case_studies import run_review_findings
from kvlab.core.mamba import GENERIC_MAX_BATCH_SIZE
from kvlab.core.memory import GIB, MIB
from kvlab.notebook import viz
from kvlab.notebook.findings import Finding, report_findings
from kvlab.notebook.tables import table
from kvlab.notebook.parameters import check_mamba_parameters
from kvlab.notebook.widgets import mamba_panel

# Bad parameters stop here, with a message naming the parameter.
check_mamba_parameters(quota_gib=quota_gib, max_batch_size=max_batch_size, ssm_dtype=ssm_dtype, SMOKE=SMOKE)

quota = int(quota_gib * GIB)
IS_PR = (quota, max_batch_size, ssm_dtype) == (PR_QUOTA_BYTES, PR_MAX_BATCH_SIZE, "bfloat16")
print(f"parameters: quota_gib={quota_gib:g}, max_batch_size={max_batch_size:,}, ssm_dtype={ssm_dtype}",
      "(the PR's)" if IS_PR else "(not the PR's: the asserts below follow the arithmetic)")

# %% [markdown]
# ## 1. One slot, and the PR's 37.5 GiB
#
# `_mamba_state_bytes_per_slot` is `layers × (conv_bytes + ssm_bytes)` with
# `conv_dim = heads × head_dim + 2 × n_groups × d_state` (conv state: `conv_dim × (d_conv − 1)`
# elements) and an SSM state of `heads × head_dim × d_state` elements. From Qwen3.5-27B's
# published config: 48 linear-attention layers, 48 value heads of 128, d_state 128, 16 key heads
# (n_groups), kernel 4. The config says `mamba_ssm_dtype: float32` — but 513 float32 slots are
# 73.55 GiB, not 37.5. Only a **bfloat16** SSM state gives the PR's figure. The last three
# columns say what the quota leaves: whether merged code builds, how many sequences the clamp of
# PR #17261 would keep resident, and the largest `max_batch_size` that fits (PR #18985's idea).

# %%
g = qwen3_5_27b_mamba(ssm_dtype="bfloat16")
print(f"conv_dim = 48 x 128 + 2 x 16 x 128 = {g.conv_dim:,}; conv {g.conv_bytes:,} B + SSM {g.ssm_bytes:,} B a layer")
by_dtype = pd.DataFrame(dtype_rows(PR_QUOTA_BYTES, PR_MAX_BATCH_SIZE)).set_index("ssm_dtype")
display(table(by_dtype))
implied = implied_ssm_dtype(37.5, PR_MAX_BATCH_SIZE + 1)
print(f"513 slots = 37.5 GiB implies a {implied} SSM state")
assert implied == "bfloat16"
assert by_dtype.loc["bfloat16", "slots_gib"] == 37.48 and by_dtype.loc["float32", "slots_gib"] == 73.55
assert by_dtype.loc["bfloat16", "slots"] == 513 == PR_MAX_BATCH_SIZE + 1

# %% [markdown]
# ## 2. Merged code: construction raises, and no `free_gpu_memory_fraction` helps
#
# The quota is `(total − peak) × free_gpu_memory_fraction`. After Qwen3.5-27B's weights an
# 80 GiB H100 has 24.86 GiB left: that is the quota at fraction **1.0**, the most any fraction can
# give. Merged `_minimum_live_gpu_quota()`, `(513 slots × slot) + one attention page`, is above
# it; a fraction would have to exceed 1. `_build_cache_config` raises before it allocates
# anything, so the real full-size manager can be built here — with kvlab's default, merged
# residency — and fail.

# %%
fractions = [0.5, 0.9, 1.0] if SMOKE else [0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0]
sweep = pd.DataFrame(fraction_rows(fractions, max_batch_size=max_batch_size, ssm_dtype=ssm_dtype))
display(table(sweep.round(2)))
plan = qwen_plan(quota, max_batch_size, ssm_dtype)
print(f"merged floor {plan.raw_need_bytes / GIB:.2f} GiB = {plan.raw_need_bytes / PR_QUOTA_BYTES:.2f} x "
      f"what is left after the weights: the fraction would have to be above 1")
try:
    if not plan.raw_fits:  # raises before allocating: the full-size manager is safe
        MambaHybridCacheManager(qwen3_5_27b_attention(), qwen3_5_27b_mamba(ssm_dtype=ssm_dtype), quota,
                                max_seq_len=4096, max_batch_size=max_batch_size)
    else:  # it would allocate the whole quota: build the 256x smaller model of section 3 instead
        attn_s, mamba_s = scaled_qwen3_5_27b(ssm_dtype)
        MambaHybridCacheManager(attn_s, mamba_s, -(-quota // SCALE), max_seq_len=64,
                                max_batch_size=max_batch_size)
    raw_error = None
    print("merged residency built: the quota affords every requested slot")
except ValueError as exc:
    raw_error = str(exc)
    print(textwrap.fill(f"ValueError: {raw_error}", 100, break_on_hyphens=False))  # between words, as it is
    print(textwrap.fill(f"(TensorRT-LLM's words, unchanged; got {plan.quota_bytes:,} B = "
                        f"{plan.quota_bytes / GIB:.2f} GiB, need at least {plan.raw_need_bytes:,} B = "
                        f"{plan.raw_need_bytes / GIB:.2f} GiB)", 100))
assert (raw_error is None) == plan.raw_fits
if ssm_dtype == "bfloat16" and max_batch_size == PR_MAX_BATCH_SIZE:
    assert not sweep.merged_builds.any()  # not at any fraction, 1.0 included

# %% [markdown]
# ## 3. Proposal, PR #17261 (closed without merging): the clamp
#
# The clamp would keep `min(requested, (quota − one page) // slot − dummies)` sequences resident,
# report it through `max_resident_sequences()` (None when every requested sequence fits), let the
# scheduler admit first context chunks only below it, and truncate the warm-up batch sizes to it
# (each entry costs a slot). kvlab keeps it as an opt-in mode, `residency="clamped"`. To allocate
# for real, the model is scaled down 256× (state split over tp 16 with 3 of 48 layers; one
# attention layer of one head with 8-token pages; the quota ÷ 256): the slot counts stay the PR's.

# %%
attn_s, mamba_s = scaled_qwen3_5_27b(ssm_dtype)
assert mamba_s.bytes_per_slot * SCALE == plan.slot_bytes and attn_s.bytes_per_block * SCALE == plan.page_bytes
warmup = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
scaled = MambaHybridCacheManager(attn_s, mamba_s, quota // SCALE, max_seq_len=64,
                                 max_batch_size=max_batch_size, residency="clamped",
                                 warmup_batch_sizes=warmup)
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
# ## 4. Proposal, PR #18985 (open): a feasible `max_batch_size` default, and an error that says why
#
# PR #18985 starts from the generic default `max_batch_size=2048`: the PR's own example, a hybrid
# whose slot is ~25.1 MiB (it does not name the model; Qwen3.5-27B's bf16 slot of §1 is 74.8
# MiB), then asks for ~50.3 GiB of live quota (2,049 slots), more than the whole KV budget. Instead
# of a clamp it would pin a feasible default for the hybrid family through `get_model_defaults`
# (an explicit user value still wins), and make the quota error report GiB and name
# `max_batch_size` and `free_gpu_memory_fraction`. Its diff could not be read from the stored
# sources: `feasible_max_batch_size` below is the **largest** default that fits a given quota (the
# PR pins one constant per family, which fits only if it is no larger), and the message is
# kvlab's wording of what the PR describes (`quota_message="pr18985"`).

# %%
print(textwrap.fill(f"PR #18985's arithmetic: {GENERIC_MAX_BATCH_SIZE + 1:,} slots x 25.1 MiB = "
                    f"{(GENERIC_MAX_BATCH_SIZE + 1) * 25.1 * MIB / GIB:.1f} GiB (the PR: ~50.3 GiB; its slot is a "
                    f"little over 25.1 MiB)", 100))
feasible = plan.feasible_max_batch_size()
print(f"largest max_batch_size whose floor fits {quota / GIB:.2f} GiB: {feasible:,}")
if feasible:  # merged code builds with it (scaled 256x: the same slot counts)
    fits = MambaHybridCacheManager(attn_s, mamba_s, quota // SCALE, max_seq_len=64,
                                   max_batch_size=feasible)
    assert fits.max_resident_sequences() is None and fits.state_slots.num_slots == feasible + plan.dummies
    print(fits)
    try:
        MambaHybridCacheManager(attn_s, mamba_s, quota // SCALE, max_seq_len=64,
                                max_batch_size=feasible + 1)
        raise AssertionError("one more sequence should not fit")
    except ValueError:
        print(f"max_batch_size {feasible + 1:,}: ValueError")
proposed_error = None
if not plan.raw_fits:  # an explicit max_batch_size still wins, so it still raises: with the new words
    try:
        MambaHybridCacheManager(qwen3_5_27b_attention(), qwen3_5_27b_mamba(ssm_dtype=ssm_dtype), quota,
                                max_seq_len=4096, max_batch_size=max_batch_size, quota_message="pr18985")
    except ValueError as exc:
        proposed_error = str(exc)
    print(f"explicit max_batch_size {max_batch_size:,}, PR #18985's message:")
    print(textwrap.fill(proposed_error, 100, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False))
    assert f"at most {feasible} fits" in proposed_error and "GiB" in proposed_error
if IS_PR:
    assert feasible == resident == 339

# %% [markdown]
# ## 5. Side by side: what each answer serves
#
# With as many concurrent requests as the requested `max_batch_size`: merged code does not
# start. The clamp (PR #17261) keeps `max_batch_size` and serves what the quota affords at once,
# queueing the rest behind its scheduler gate — which needs the MIN all-reduce and the gate the
# review found holes in (section 6). The feasible default (PR #18985) serves the same number at
# once through plain `max_batch_size`, with no new mechanism — but only when `max_batch_size` is
# left unset. The PR's 512 is not the generic default (2,048), so it came from the run's
# configuration, and under PR #18985 an explicit value still wins: it still raises, now with a
# message that says what to change.

# %%
proposals = pd.DataFrame(proposal_rows(plan)).set_index("label")
display(table(proposals[["status", "max_batch_size", "resident", "waiting", "state_gib", "outcome"]].round(2)))
viz.show(viz.residency_proposals_figure(
    proposal_rows(plan), subtitle=f"Qwen3.5-27B, {ssm_dtype} SSM state, {quota / GIB:.2f} GiB quota, "
                                  f"{plan.requested} concurrent requests"))
by_policy = proposals.set_index("policy")
assert by_policy.loc["merged", "outcome"] == ("ok" if plan.raw_fits else "crash")
assert by_policy.loc["clamp", "resident"] == max(resident, 0)
assert by_policy.loc["default", "max_batch_size"] == feasible
if IS_PR:
    assert list(by_policy.resident) == [0, 339, 339, 0] and list(by_policy.waiting) == [0, 173, 173, 0]

# %% [markdown]
# ## 6. The review's three findings on the clamp, bug vs fix
#
# The clamp was never merged, but its review is a lesson in what a residency cap must get right.
# Each finding runs on a tiny hybrid model under `residency="clamped"`, once with its bug and once
# fixed. kvlab's manager and Scheduler hold only the fixed behaviour; each bug is a small
# subclass in `kvlab.case_studies` that overrides one method (`NoneFirstManager`,
# `DisaggBypassScheduler`, `BreakOnCapScheduler`):
#
# 1. **Attention-only pipeline rank returns None first** — a Mamba rank (affords 3 of 8) and an
#    attention-only rank MIN-reduce in two threads; with the bug the attention-only rank reports
#    None and admits all 8 first chunks while the Mamba rank admits 3: the ranks disagree.
# 2. **DISAGG_GENERATION_INIT bypasses the cap** — cap 1, two disaggregated generation inits: with
#    the bug both are admitted and the second finds no state slot (`StateSlotsExhausted`).
# 3. **`break` instead of `continue`** — B is mid-prefill holding the only slot, A (a first chunk)
#    sits ahead of it: `break` on A's cap stops the scan, B never advances, the stall detector fires.
#    Here it fires after 5 passes without progress (`stall_limit=5`, to keep the run short); the
#    engine's own detector waits 1,000.

# %%
runs = run_review_findings()
for run in runs:
    print(textwrap.fill(f"finding {run.finding} {run.label}: {run.what}: {run.detail}", 100,
                        subsequent_indent=" " * 20, break_on_hyphens=False))
viz.show(viz.review_findings_figure(runs))
by = {(r.finding, r.bug): r for r in runs}
assert all(by[n, False].outcome == "ok" for n in (1, 2, 3))
assert [by[n, True].what for n in (1, 2, 3)] == [
    "ranks disagree", "crash (StateSlotsExhausted)", "stall (SchedulerDeadlock)"]
assert dict(by[1, True].metrics)["rank 1 admitted"] == 8 != dict(by[1, True].metrics)["rank 0 admitted"]
assert dict(by[2, True].metrics)["admitted in one pass"] == 2 > dict(by[2, False].metrics)["admitted in one pass"] == 1
assert dict(by[3, True].metrics)["B chunks scheduled"] == 0 < dict(by[3, False].metrics)["B chunks scheduled"]

# %% [markdown]
# ## 7. Try it: quota, max_batch_size, state dtype
#
# Things to find: the smallest quota at which merged code builds for 512 sequences (bf16, then
# float32); the largest max_batch_size the PR's 24.86 GiB affords (PR #18985's feasible default);
# what float32 does to the clamp's residency. Each key press moves the quota slider to the next
# half GiB (arrow keys once it has focus), and the PR's 24.86 GiB is one of its positions.

# %%
panel = mamba_panel(quota_gib=quota_gib, max_batch_size=max_batch_size, ssm_dtype=ssm_dtype)
assert panel.model.resident == max(resident, 0) and panel.model.raw_fits == (raw_error is None)
assert panel.model.feasible_max_batch_size == feasible
panel

# %% [markdown]
# ## Findings
#
# The slot is fixed-size, so `max_batch_size` is not a ceiling but a floor on memory: merged code
# refuses to start when the floor does not fit. The clamp (PR #17261, closed without merging)
# would have turned it back into a ceiling, at the price of a cap every rank and every admission
# path must respect; the feasible default (PR #18985, open) keeps `max_batch_size` a floor and
# chooses it so that it fits.
#
# Block reuse (on by default, notebook 04 §8) does not touch these findings: kvlab reuses
# attention pages, while everything here is the state slots' fixed size against the quota,
# decided when the manager is built, before anything could be cached.

# %%
scenario = "qwen3.5-27b-h100" if IS_PR else f"qwen3.5-27b-{quota_gib:g}GiB-{max_batch_size}seq-{ssm_dtype}"
findings = [
    Finding(scenario=scenario, policy="merged", outcome="ok" if raw_error is None else "crash",
            numbers=f"{plan.requested + plan.dummies:,} slots x {plan.slot_bytes:,} B + one page = "
                    f"{plan.raw_need_bytes / GIB:.2f} GiB vs quota {quota / GIB:.2f} GiB"),
    Finding(scenario=scenario, policy="clamp (proposal, PR #17261, closed without merging)",
            outcome="ok" if resident >= 1 else "crash",
            numbers=f"{max(resident, 0):,} resident + {plan.dummies:,} dummy, "
                    f"{max(plan.requested - max(resident, 0), 0):,} queue; "
                    f"{implied} SSM state implied by the PR's 37.5 GiB"),
    Finding(scenario=scenario, policy="feasible default (proposal, PR #18985, open)",
            outcome="ok" if feasible >= 1 else "crash",
            numbers=f"max_batch_size default {feasible:,} fits; an explicit {max_batch_size:,} "
                    + ("builds" if plan.raw_fits else "still raises, in GiB")),
]
findings += [Finding(scenario=f"review finding {r.finding}", policy=r.label, outcome=r.what,
                     numbers=", ".join(f"{k} {v}" for k, v in r.metrics)
                     + ("; a cap of None is no cap" if any(v is None for _, v in r.metrics) else "")) for r in runs]
if IS_PR:
    assert [f.outcome for f in findings[:3]] == ["crash", "ok", "ok"] and resident == 339 == feasible
findings = report_findings(findings)
