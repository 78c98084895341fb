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
# # Workshop 3 · An admission check: not yet, or never?
#
# *Follows notebooks 03 and 04. About 45 minutes.*
#
# A resize that returns `False` means one of two different things:
#
# * **temporarily blocked** — the request fits the engine, but not enough pages (or page-index
#   slots) are free right now; waiting works;
# * **never fits** — the request needs more than the engine physically has; waiting never works.
#
# TensorRT-LLM's V2 scheduler cannot tell them apart: it retries, and a request that can never
# fit ends in the stall detector's `RuntimeError` ("V2 scheduler deadlock") or, with the
# clamped row, the `ValueError`. PR #21720 moves the distinction to **admission**: when a
# request arrives, compare what it will need *when it completes* with the engine's fixed
# capacity, and reject only that request, with the numbers.
#
# You write the classification, then plug it into kvlab's scheduler.

# %% tags=["parameters"]
STRICT: bool = False  # True: a failed check raises (the tests use it); False: it only reports
SMOKE: bool = False  # True (CI): the no-admission run stops after 50 stalled passes, not 1000

# %%
import textwrap

from kvlab import AdmissionPolicy, KVCacheManager, Request, Verdict, workshop

stall_limit = 50 if SMOKE else 1000

# %% [markdown]
# ## The problem
#
# Four requests on the seed's 4 MiB pool (64 pages of 32 tokens), configured row: `s1` and `s2`
# (1,536 + 32 tokens each) do not fit together, `big` (8,192 + 16) can never fit, `s3` is small.
# With no admission control (`"none"`, TensorRT-LLM today):

# %%
run = workshop.run_admission_workload("none", "configured", stall_limit=stall_limit)
for request_id, state in run.status.items():
    print(f"{request_id}: {state}")
print(f"\nthe engine stopped with {type(run.error).__name__}:")
print(textwrap.fill(str(run.error), width=80))

# %% [markdown]
# ## Part 1: classify
#
# Write `classify(request, manager)` returning `(class, reason)` with class one of
# `"fits now"`, `"temporarily blocked"`, `"never fits"`. What you may read:
#
# | | |
# |---|---|
# | `request.prompt_len`, `request.max_new_tokens`, `request.num_draft_tokens` | the request |
# | `manager.total_blocks`, `manager.free_blocks` | pages in the pool, and free now |
# | `manager.max_blocks_per_seq` | entries in a page-index row (the span a sequence may address) |
# | `manager.tokens_per_block`, `manager.num_extra_kv_tokens` | page size; extra KV tokens per sequence |
# | `manager.page_index.free_slots` | page-index rows free for a new sequence |
# | `manager.geometry.blocks_for_tokens(n)` | `ceil(n / tokens_per_block)` |
#
# Every class but "fits now" needs a reason: a "temporarily blocked" one says why it must wait
# (the pool is busy, or every page-index slot is taken), and a "never fits" one states the
# numbers: the blocks needed and the limit exceeded. A "fits now" request has its *context*
# pages free now and a free slot (its output grows later).
# Don't peek at `kvlab/sched/admission.py` yet.
#
# The starter below is a first attempt many of us make. Run the check, read what it says, fix it.
# The first time a check fails it gives a hint per wrong case (a question, with the request's and
# the pool's numbers) but not the demand formula; run it again after your next try, and a case
# that still fails the same way after your change reveals the formula with its numbers. (`reveal=True` in the call
# reveals at once; try without it first.)

# %%
def classify(request: Request, manager: KVCacheManager) -> tuple:
    # YOUR CODE HERE: this first attempt is wrong
    needed = manager.geometry.blocks_for_tokens(request.prompt_len)
    if needed > manager.free_blocks:
        return "never fits", f"needs {needed} blocks, {manager.free_blocks} are free"
    return "fits now", ""


# %%
result = workshop.check_admission(classify, strict=STRICT)
result

# %% [markdown]
# ## Part 2: plug it into the scheduler
#
# Open `kvlab/sched/admission.py` and read its module docstring: how does an admission policy plug into
# the `Scheduler`? Which hook runs when a request arrives, and what does it return? Complete the
# policy below so that a request your `classify` calls "never fits" is rejected, with its reason,
# and everything else is admitted (temporary pressure is the scheduler's job: it retries).

# %%
class ClassifyAdmission(AdmissionPolicy):
    name = "workshop"

    def admit(self, request: Request, manager: KVCacheManager) -> Verdict:
        # YOUR CODE HERE
        return Verdict(True)


# %%
result = workshop.check_admission_policy(ClassifyAdmission(), strict=STRICT)
result

# %% [markdown]
# ## Discuss
#
# * Now compare your `classify` with `CapacityAdmission.classify` in `kvlab/sched/admission.py`.
# * Your policy rejects `big` under *both* row widths. Does admission control still need the
#   one-line fix? What does the page-index span check protect?
# * vLLM reserves the whole prompt before admitting; SGLang reserves part of the predicted output.
#   What does each do with `big`? (docs/REFERENCE.md §6; notebook 04 runs them side by side.)
