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
# # Workshop 1 · How wide is a page-index row?
#
# *Follows notebook 02 (the 4 MiB repro). About 20 minutes.*
#
# Every sequence owns one row of the host **page-index table**: one entry per KV page (block) the
# sequence may ever hold. `KVCacheManagerV2.__init__` (TensorRT-LLM,
# `tensorrt_llm/_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py`) sizes the row once, at
# construction:
#
# * the row must hold `max_seq_len` tokens, plus `num_extra_kv_tokens`, plus the
#   `reserved_draft_tokens` of speculative decoding, **plus one** — the token the next decode
#   step writes;
# * in pages of `tokens_per_block` tokens, a partly filled page counting as a whole one;
# * padded up to a **multiple of 4** for the `copy_block_offsets` kernel.
#
# Then you answer the question issue #21470 turned on: *which* `max_seq_len`? Since PR #12306 the
# row uses the max_seq_len **clamped** to what the KV pool holds; the "one-line fix" of notebook 03
# uses the **configured** one.

# %% tags=["parameters"]
STRICT: bool = False  # True: a failed check raises (the tests use it); False: it only reports
SMOKE: bool = False  # CI switch; this exercise is fast either way

# %%
from kvlab import workshop

# %% [markdown]
# ## Part 1: the formula
#
# Write `page_index_width(max_seq_len, tokens_per_block, extra, draft)` returning the number of
# entries in one row (an `int`). Integer arithmetic is enough: `ceil(a / b) == -(-a // b)`.

# %%
def page_index_width(max_seq_len: int, tokens_per_block: int, extra: int, draft: int) -> int:
    # YOUR CODE HERE
    raise NotImplementedError


# %% [markdown]
# ## Part 2: the seed's two rows
#
# The seed's experiment: 2 layers × 2 (K and V) × 2 KV heads × head_dim 128 × 2 bytes (fp16) =
# 2,048 bytes per token, a **4 MiB** KV pool, 32 tokens per block, configured `max_seq_len` 8,192.
# The manager clamps `max_seq_len` to the longest sequence the pool holds (in whole blocks).
# Fill in the `max_seq_len` each width policy sizes the row from.

# %%
seed_max_seq_len = {
    "clamped": None,  # YOUR CODE HERE: the longest sequence a 4 MiB pool holds
    "configured": None,  # YOUR CODE HERE: what the engine was configured with
}

# %% [markdown]
# ## Check
#
# The check runs twenty-two cases: your function on twenty (ten named, ten spot checks), then
# Part 2's two seed rows. It tells you which ones failed, what they expected, and the slips that
# give your answers: several at once if you made several. Run it, fix, run again. The first time a
# case fails it only names the slip (a hint); if it still fails the same way after you change your
# code, it shows the arithmetic with the case's numbers, yours beside the rule's. Want the
# arithmetic at once? Add `reveal=True` to the call.

# %%
result = workshop.check_page_index_width(page_index_width, seed_max_seq_len, strict=STRICT)
result

# %% [markdown]
# ## Discuss
#
# Once the check passes:
#
# * A request for 8,192 tokens needs `ceil(8192 / 32) = 256` entries. Which of your two rows
#   holds it?
# * Your clamped row has a few more entries than the pool has pages. What do the spare entries buy?
# * The configured row has the same width in *every* slot of the table, whatever the pool holds.
#   What does that cost at `max_batch_size` 512? (Notebook 03, "the price of the wider row".)
