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
# # Workshop 2 · Predict, then trigger, the ValueError
#
# *Follows notebooks 02 and 03. About 30 minutes.*
#
# The native `KvCache::resize` (`cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/kvCache.cpp`)
# checks in this order:
#
# 1. same number of pages as now → `True`;
# 2. the cache's page-index row is shorter than the pages the new capacity needs →
#    `ValueError("User-provided base page indices is too short")` — **before** it looks at the pool;
# 3. not enough free pages → `False`, nothing changed;
# 4. otherwise allocate → `True`.
#
# First predict, on paper, what one resize does in each case below. Then make the error happen
# on a real `KVCacheManager` and catch it.

# %% tags=["parameters"]
STRICT: bool = False  # True: a failed check raises (the tests use it); False: it only reports
SMOKE: bool = False  # CI switch; this exercise is fast either way

# %%
import warnings

from kvlab import KVCacheManager, KVGeometry, PageIndexTooShort, workshop

print(workshop.describe_prediction_cases())

# %% [markdown]
# ## Part 1: predict
#
# Every case uses the seed's model shape (2,048 bytes per token, 32 tokens per block), a configured
# `max_seq_len` of 8,192 and batch size 1. For each, work out: the pages in the pool, the clamped
# `max_seq_len`, the row width under the case's policy (exercise 1), and the entries the resize
# needs. Then write `"ok"`, `"refused"` or `"crash"`. Predict before you run anything.
#
# A wrong prediction first gets the steps to redo, not the outcome; if you change it and it is
# still wrong, the check shows that case's outcome and arithmetic (`reveal=True` shows them at
# once).

# %%
predictions = {
    "A": None,  # YOUR CODE HERE
    "B": None,
    "C": None,
    "D": None,
    "E": None,
    "F": None,
    "G": None,
}

# %%
result = workshop.check_predictions(predictions, strict=STRICT)
result

# %% [markdown]
# ## Part 2: trigger it
#
# Build the seed's manager with kvlab — `KVGeometry(num_layers=2, num_kv_heads=2, head_dim=128,
# dtype="float16", tokens_per_block=32)`, `KVCacheManager(geo, quota_bytes=4 * 2**20,
# max_seq_len=8192, max_batch_size=1, page_index_policy="clamped")` — create a cache with
# `mgr.create_cache("req-0")` and resize it to 8,192 tokens. Catch the `ValueError` and **return**
# it. (The manager warns that it clamps `max_seq_len`; `warnings.catch_warnings()` quiets it.)

# %%
def trigger_the_value_error():
    # YOUR CODE HERE
    raise NotImplementedError


# %%
result = workshop.check_trigger(trigger_the_value_error, strict=STRICT)
result

# %% [markdown]
# ## Discuss
#
# Answer these after your predictions pass.
#
# * Cases C, D and E differ only in the context's length. Which of the four checks above decides
#   each one, and at which lengths does a resize on this clamped row switch from one outcome to
#   another?
# * Case B runs the one-line fix. After its outcome, is the request served? Who retries it, and
#   with what? (Notebook 03, part 2: through the scheduler.)
# * The exception is raised on one rank. Why did all 16 ranks of issue #21470 stop?
