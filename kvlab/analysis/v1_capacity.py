"""The V1 ``KVCacheManager``'s pool on one rank (resource_manager.py at 001541bad,
docs/REFERENCE.md §8): the creator's per-token estimate, the memory free at construction, and
the token capacity the two give before the MIN all-reduce.
"""

from __future__ import annotations

import math

from kvlab.analysis.deployment_spec import Deployment
from kvlab.core.arith import div_ceil
from kvlab.core.memory import MemoryBudget


def estimated_bytes_per_token(deployment: Deployment, stage: int) -> int:
    """The creator's per-token estimate (``get_cache_size_per_token``): ``m`` values a token
    (the stage's share of the attention layers x MLA's head, or ``head_dim x kv heads // tp``,
    a floor), 1 byte each in fp8, ``ceil(m / 2) + ceil(m / 16)`` in nvfp4, else 2."""
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
    """One rank's V1 tokens before the MIN: the smaller of the creator's ``max_tokens`` (its
    budget over the estimate) and ``calculate_max_num_blocks``' share of the free memory at
    construction over the real bytes per token."""
    estimate = estimated_bytes_per_token(deployment, stage)
    creator = budget.available_bytes // estimate if estimate else math.inf
    real = deployment.kv_geometry(stage).bytes_per_token
    return min(creator, deployment.free_gpu_memory_fraction * free_at_construction(budget) / real)


def free_at_construction(budget: MemoryBudget) -> int:
    """The memory free when the V1 manager is built: the total less all but the activations.
    [kvlab] Upstream the estimation's CUDA graphs are released later: a little less is free."""
    return max(0, budget.total_bytes - budget.peak_memory_bytes + budget.activation_peak_bytes)
