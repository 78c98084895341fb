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
# # Workshop solutions (instructors' copy)
#
# One solution per exercise, each passing its check. It lives in `notebooks/workshop/instructor/`,
# apart from the exercises, so that participants browsing the workshop folder do not open it by
# accident; hand it out after each exercise, or keep it (docs/INSTRUCTORS.md). With
# `STRICT = True` a failing check raises, so this notebook doubles as the test that the checks
# accept a correct answer.

# %% tags=["parameters"]
STRICT: bool = False  # True: a failed check raises (the tests run this notebook with True)
SMOKE: bool = False  # CI switch; the solutions are fast either way

# %%
import warnings

from kvlab import (AdmissionPolicy, KVCacheManager, KVGeometry, PageIndexTooShort, Request, Verdict,
                   workshop)
from kvlab.workshop import PendingContext

# %% [markdown]
# ## 1 · The page-index width
#
# `round_up_to_multiple_of_4(ceil((max_seq_len + extra + draft + 1) / tokens_per_block))`. The
# seed's pool: 4 MiB / 2048 B per token = 2048 tokens = 64 blocks of 32, so the clamped row is
# `ceil(2049 / 32) = 65 -> 68` entries and the configured one `ceil(8193 / 32) = 257 -> 260`.

# %%
def page_index_width(max_seq_len: int, tokens_per_block: int, extra: int, draft: int) -> int:
    blocks = -(-(max_seq_len + extra + draft + 1) // tokens_per_block)  # +1: the decode token
    return -(-blocks // 4) * 4  # a multiple of 4 for copy_block_offsets


bytes_per_token = 2 * 2 * 2 * 128 * 2  # layers x (K, V) x KV heads x head_dim x fp16 bytes
pool_blocks = (4 * 2**20) // (bytes_per_token * 32)
seed_max_seq_len = {"clamped": min(8192, pool_blocks * 32), "configured": 8192}

workshop.check_page_index_width(page_index_width, seed_max_seq_len, strict=STRICT)

# %% [markdown]
# ## 2 · Predict, then trigger, the ValueError
#
# | case | pool | row (policy) | needed | outcome |
# |---|---|---|---|---|
# | A | 64 pages | 68 (clamped 2048) | 256 | crash: the row is checked first |
# | B | 64 pages | 260 (configured 8192) | 256 | refused: fits the row, not the pool |
# | C | 64 pages | 68 | 64 | ok |
# | D | 64 pages | 68 | 66 | refused: the row's padding to 4 leaves 4 spare entries |
# | E | 64 pages | 68 | 69 | crash |
# | F | 128 pages | 132 (clamped 4096) | 256 | crash |
# | G | 256 pages | 260 (8192 fits: no clamp) | 256 | ok |

# %%
predictions = {"A": "crash", "B": "refused", "C": "ok", "D": "refused", "E": "crash", "F": "crash", "G": "ok"}
workshop.check_predictions(predictions, strict=STRICT)


# %%
def trigger_the_value_error():
    geo = KVGeometry(num_layers=2, num_kv_heads=2, head_dim=128, dtype="float16", tokens_per_block=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the clamp warning: 8192 -> 2048
        mgr = KVCacheManager(geo, quota_bytes=4 * 2**20, max_seq_len=8192, max_batch_size=1,
                             page_index_policy="clamped")
    cache = mgr.create_cache("req-0")
    try:
        cache.resize(8192)
    except ValueError as exc:  # PageIndexTooShort is a ValueError
        return exc


caught = trigger_the_value_error()
assert isinstance(caught, PageIndexTooShort) and str(caught) == "User-provided base page indices is too short"
workshop.check_trigger(trigger_the_value_error, strict=STRICT)


# %% [markdown]
# ## 3 · An admission check
#
# Never-fits compares the demand *at completion* (prompt + output + extra + draft tokens, in
# blocks) with the two fixed budgets: the pool's total pages and the row's span. Everything else
# is about this moment: the context's pages free now and a free slot, or wait.

# %%
def classify(request: Request, manager: KVCacheManager) -> tuple:
    blocks = manager.geometry.blocks_for_tokens
    demand = blocks(request.prompt_len + request.max_new_tokens + manager.num_extra_kv_tokens
                    + request.num_draft_tokens)
    if demand > manager.total_blocks:
        return "never fits", (f"Request requires {demand} KV cache blocks to complete, which exceeds "
                              f"the total capacity of {manager.total_blocks} blocks")
    if demand > manager.max_blocks_per_seq:
        return "never fits", (f"Request requires {demand} KV cache blocks to complete, which exceeds "
                              f"the page-index span of {manager.max_blocks_per_seq} entries")
    context = blocks(request.prompt_len + manager.num_extra_kv_tokens)
    if context <= manager.free_blocks and manager.page_index.free_slots > 0:
        return "fits now", ""
    return "temporarily blocked", (f"its context needs {context} blocks, {manager.free_blocks} are free "
                                   f"and {manager.page_index.free_slots} slots")


workshop.check_admission(classify, strict=STRICT)


# %%
class ClassifyAdmission(AdmissionPolicy):
    """Rejects what can never fit at arrival; admits the rest (the scheduler retries pressure)."""

    name = "workshop"

    def admit(self, request: Request, manager: KVCacheManager) -> Verdict:
        verdict, reason = classify(request, manager)
        return Verdict(False, reason) if verdict == "never fits" else Verdict(True)


workshop.check_admission_policy(ClassifyAdmission(), strict=STRICT)


# %% [markdown]
# ## 4 · The resident cap's scan: `continue`, not `break`
#
# The cap gates only the request it applies to: `continue` skips the capped first chunk and lets
# the scan reach later chunks of started sequences, which need no new slot. With `break`, a
# capped first chunk ahead of a started sequence starves it; that sequence never finishes, never
# frees its slot, and the engine stalls until the deadlock detector fires. The budget's `break`
# stays: when the batch is full, nothing later fits either.

# %%
def schedule_pending_contexts(pending_ctx, num_resident, max_resident, max_num_requests):
    scheduled = []
    for req in pending_ctx:
        if len(scheduled) >= max_num_requests:
            break
        starts_new_sequence = max_resident is not None and req.is_first_context_chunk
        if starts_new_sequence and num_resident >= max_resident:
            continue  # was `break`: skip only this capped first chunk
        scheduled.append(req.request_id)
        if starts_new_sequence:
            num_resident += 1
    return scheduled


workshop.check_resident_scan(schedule_pending_contexts, strict=STRICT)
