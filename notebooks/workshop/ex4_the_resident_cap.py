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
# # Workshop 4 · The resident cap's scan
#
# *Follows notebook 05 (Mamba residency, PR #17261). About 25 minutes.*
#
# A hybrid (Mamba) model keeps a fixed-size recurrent state per sequence, and the GPU quota holds
# only so many. PR #17261 caps the sequences resident at once (`max_resident_sequences()`) and
# gates the scheduler's **first context chunks** on it: a first chunk starts a new sequence and
# claims a state slot for the rest of its life; a later chunk of a started sequence already has
# its slot.
#
# A scheduling pass of `KVCacheV2Scheduler` walks twice: phase 1 schedules the generating
# requests, phase 2 the waiting contexts. Below is that PR's phase-2 loop
# (`tensorrt_llm/_torch/pyexecutor/scheduler/scheduler_v2.py`), reduced to the cap. It walks the
# pending context requests in order and returns the ids it schedules this iteration. The review
# found a bug in it. Find it, fix it, and say what it does to a running engine. The check's first
# failure asks a question about each wrong case; the same failure after you change your code
# says what the fix is.

# %% tags=["parameters"]
STRICT: bool = False  # True: a failed check raises (the tests use it); False: it only reports
SMOKE: bool = False  # CI switch; this exercise is fast either way

# %%
from typing import List, Optional, Sequence

from kvlab import workshop
from kvlab.workshop import PendingContext

# %% [markdown]
# ## The loop
#
# `pending_ctx`: `PendingContext(request_id, is_first_context_chunk)` in scheduling order;
# `num_resident`: sequences holding a slot now; `max_resident`: the cap (`None`: unbounded, as
# for attention-only models); `max_num_requests`: the batch budget.

# %%
def schedule_pending_contexts(pending_ctx: Sequence[PendingContext], num_resident: int,
                              max_resident: Optional[int], max_num_requests: int) -> List[str]:
    # YOUR CODE HERE: the loop as the PR had it; find and fix the bug
    scheduled = []
    for req in pending_ctx:
        if len(scheduled) >= max_num_requests:  # the batch is full: nothing later fits either
            break
        # A first context chunk starts a new sequence and therefore claims a
        # state slot for the rest of its lifetime.
        starts_new_sequence = max_resident is not None and req.is_first_context_chunk
        if starts_new_sequence and num_resident >= max_resident:
            break
        scheduled.append(req.request_id)
        if starts_new_sequence:
            num_resident += 1
    return scheduled


# %% [markdown]
# ## Try it by hand first
#
# One slot (cap 1), held by `old-b`, a sequence halfway through its context; `new-a` arrived
# earlier but could not start. What should this iteration schedule?

# %%
schedule_pending_contexts([PendingContext("new-a", True), PendingContext("old-b", False)],
                          num_resident=1, max_resident=1, max_num_requests=8)

# %% [markdown]
# And over several iterations (`run_resident_iterations` calls your loop once per iteration;
# a chunk completes in its iteration, a finished sequence frees its slot):

# %%
steps, log = workshop.run_resident_iterations(schedule_pending_contexts)
print("\n".join(log[:4]))
print(f"finished in {steps} iterations" if steps is not None else "never finishes (stalled)")

# %%
result = workshop.check_resident_scan(schedule_pending_contexts, strict=STRICT)
result

# %% [markdown]
# ## Discuss
#
# Once the check passes:
#
# * The loop checks two limits, the batch budget and the resident cap. When each one binds, which
#   requests later in the list could still run this iteration, and what does your loop do with them?
# * The stall detector would end this run with "V2 scheduler deadlock" after 1,000 passes. Would
#   a user see a bug in the scheduler, or "the KV cache pool is likely exhausted"?
# * The review found two more holes in the same PR: attention-only pipeline ranks that report no
#   cap (ranks disagree on admission), and the DISAGG_GENERATION_INIT path that bypasses the cap.
#   Sketch a test for each.
