"""The V1 ``KVCacheManager``'s pool on one rank (resource_manager.py at 001541bad,
docs/REFERENCE.md §8): the creator's per-token estimate, the memory free when the manager is
built, and the token capacity the two give before the MIN all-reduce.
"""

from __future__ import annotations

import math

from kvlab.analysis.deployment_spec import Deployment
from kvlab.core.arith import div_ceil
from kvlab.core.memory import MemoryBudget


def estimated_bytes_per_token(deployment: Deployment, stage: int) -> int:
    """The creator's per-token estimate (``KVCacheManager.get_cache_size_per_token``,
    resource_manager.py at 001541bad): for ``m`` values a token, 1 byte each for an fp8 KV
    cache, ``ceil(m / 2) + ceil(m / 16)`` for nvfp4 (its scales), else 2; ``m`` counts the
    stage's share of the attention layers (``pp_layers`` of their count, at least 1) times
    MLA's ``kv_lora_rank + qk_rope_head_dim`` with kv_factor 1, or ``head_dim *
    num_key_value_heads // tp`` (a floor over all heads, tp 1 under attention DP) with
    kv_factor 2."""
    model, pp = deployment.model, deployment.pp_size
    base, extra = divmod(model.attention_layers, pp)
    layers = max(base + (stage < extra), 1)
    tp = 1 if deployment.attention_dp else deployment.tp_size
    dtype = deployment.kv_dtype or model.kv_dtype
    width = model.head_dim if model.kv_factor == 1 else model.head_dim * model.num_kv_heads // tp
    values = layers * width * model.kv_factor
    if dtype == "nvfp4":
        return div_ceil(values, 2) + div_ceil(values, 16)
    return (1 if dtype == "fp8" else 2) * values


def v1_tokens(deployment: Deployment, budget: MemoryBudget, stage: int) -> float:
    """One rank's V1 token capacity before the MIN all-reduce: the creator sets
    ``kv_cache_config.max_tokens`` to its budget over :func:`estimated_bytes_per_token`, and
    ``KVCacheManager.calculate_max_num_blocks`` (resource_manager.py at 001541bad) takes the
    smaller of that and ``free_gpu_memory_fraction`` of the free memory at construction (the
    activations freed) over the real bytes per token (``ceil(heads / tp)`` per layer)."""
    estimate = estimated_bytes_per_token(deployment, stage)
    creator = budget.available_bytes // estimate if estimate else math.inf
    real = deployment.kv_geometry(stage).bytes_per_token
    return min(creator, deployment.free_gpu_memory_fraction * free_at_construction(budget) / real)


def free_at_construction(budget: MemoryBudget) -> int:
    """The memory free when the V1 manager is built: the total less the weights, the workspace
    and what torch does not see (the estimation run's activations are freed by then), never
    below zero. [kvlab] Upstream the estimation run's CUDA graphs are released only after the
    managers are built, so the real figure is somewhat lower."""
    return max(0, budget.total_bytes - budget.peak_memory_bytes + budget.activation_peak_bytes)


__all__ = ["estimated_bytes_per_token", "free_at_construction", "v1_tokens"]
