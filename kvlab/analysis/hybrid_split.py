"""A hybrid model's pools on the V2 manager: how merged ``MambaHybridCacheManagerV2`` splits a
rank's quota between attention pages and recurrent-state slots, and per pipeline stage whether
the slots fit and what PR #17261's clamp would keep (docs/REFERENCE.md §5).
"""

from __future__ import annotations

import functools
from typing import Any

from kvlab.analysis.deployment_spec import Deployment
from kvlab.core.arith import div_ceil
from kvlab.core.mamba import QUOTA_TOO_SMALL, ResidencyPlan, num_dummy_slots
from kvlab.core.v2_storage import gpu_granularity, slot_counts


@functools.lru_cache(maxsize=1024)  # ranks of a stage share their inputs
def v2_hybrid_split(
    quota_bytes: int,
    page_pools: tuple[int, ...],
    state_pools: tuple[int, ...],
    live_slots: int,
    sequences: int,
    typical_len: int,
    tokens_per_block: int,
) -> tuple[int, int]:
    """(attention pages, state slots) merged ``MambaHybridCacheManagerV2`` builds from a quota
    (mamba_cache_manager_v2.py at 28295084, through :func:`kvlab.core.v2_storage.slot_counts`):
    a "typical step" (``sequences`` requests of ``typical_len`` tokens, and the ``live_slots``
    states) sets the ratio of the groups' bytes, each pool rounded up to granules; the state
    group's floor is ``live_slots``, attention's one page. A stage without attention layers
    (``page_pools`` empty) gives its quota to the states. [kvlab] A set ``avg_seq_len`` is not
    modelled, nor snapshot states (``fixed_rules``)."""
    if not state_pools:
        return slot_counts(quota_bytes, [page_pools], [1.0], [1])[0], 0
    if not page_pools:
        return 0, slot_counts(quota_bytes, [state_pools], [1.0], [live_slots])[0]
    granule = gpu_granularity(quota_bytes)

    def group_bytes(slots: int, pools: tuple[int, ...]) -> int:
        return sum(div_ceil(slots * size, granule) * granule for size in pools)

    attention = group_bytes(sequences * div_ceil(typical_len, tokens_per_block), page_pools)
    state = group_bytes(live_slots, state_pools)
    total = attention + state
    pages, slots = slot_counts(
        quota_bytes, [page_pools, state_pools], [attention / total, state / total], [1, live_slots]
    )
    return pages, slots


def hybrid_stages(d: Deployment, quotas) -> tuple[dict[str, Any], ...]:
    """Per stage: its layers, slot bytes, merged floor against its smallest quota, and the
    clamp's residency there (docs/REFERENCE.md §5)."""
    dummies = num_dummy_slots(True, d.attention_dp)
    stages = []
    for stage in range(d.pp_size):
        attention, recurrent = d.attention_layers(stage), d.model.stage(d.pp_size, stage)[1]
        mamba = d.mamba_geometry(stage)
        quota = min(q for r, q in enumerate(quotas) if d.stage_of(r) == stage)
        page = d.kv_geometry(stage).bytes_per_block if attention else 0
        page_pools = d.kv_geometry(stage).pool_bytes if attention else ()
        plan = ResidencyPlan(
            requested=d.max_batch_size * d.pp_size,
            dummies=dummies if mamba else 0,
            slot_bytes=mamba.bytes_per_slot if mamba else 0,
            page_bytes=page,
            quota_bytes=max(quota, 1),
            pp_size=d.pp_size,
        )
        pools = (
            (mamba.num_mamba_layers * mamba.ssm_bytes, mamba.num_mamba_layers * mamba.conv_bytes)
            if mamba
            else ()
        )
        split = {
            r: v2_hybrid_split(
                q,
                page_pools,
                pools,
                plan.requested + plan.dummies,
                plan.requested,
                max(1, d.kv_max_seq_len // 2),
                d.tokens_per_block,
            )
            if plan.raw_fits
            else (0, 0)
            for r, q in enumerate(quotas)
            if d.stage_of(r) == stage
        }
        stages.append(
            dict(
                stage=stage,
                attention_layers=attention,
                recurrent_layers=recurrent,
                num_pools=int(bool(attention)) + int(bool(mamba)),
                quota_bytes=quota,
                slot_bytes=plan.slot_bytes,
                need_bytes=plan.raw_need_bytes,
                builds=plan.raw_fits,
                pages=min(p for p, _ in split.values()),
                state_slots=min(n for _, n in split.values()),
                plan=plan,
                split=split,
            )
        )
    return tuple(stages)


def hybrid_plan(d: Deployment, quotas, stages):
    """The summary (of the stage that raises, else the tightest), each rank's state bytes (the
    clamp's where merged code raises) and, where it builds, each rank's attention pages."""
    per_stage = hybrid_stages(d, quotas)
    failing = [h for h in per_stage if not h["builds"]]
    worst = (
        failing[0] if failing else max(per_stage, key=lambda h: h["need_bytes"] / h["quota_bytes"])
    )
    plan = worst["plan"]
    clamp = min(max(h["plan"].local_cap, 0) for h in per_stage)
    hybrid = dict(
        slot_bytes=plan.slot_bytes,
        requested=plan.requested,
        dummies=plan.dummies,
        slots=plan.requested + plan.dummies,
        need_bytes=plan.raw_need_bytes,
        quota_bytes=plan.quota_bytes,
        stage=worst["stage"],
        merged_builds=not failing,
        clamp_resident=clamp,
        feasible_max_batch_size=min(h["plan"].feasible_max_batch_size() for h in per_stage),
        ssm_dtype=d.mamba_ssm_dtype or d.model.dtype,
        error="ValueError: "
        + QUOTA_TOO_SMALL.format(got=plan.quota_bytes, need=plan.raw_need_bytes)
        if failing
        else "",
        stages=[{k: v for k, v in h.items() if k not in ("plan", "split")} for h in per_stage],
    )
    resident = clamp if failing else d.max_batch_size * d.pp_size
    slot_bytes = [
        (resident + per_stage[s]["plan"].dummies) * per_stage[s]["slot_bytes"] if resident else 0
        for s in stages
    ]
    pages = None if failing else [per_stage[s]["split"][r][0] for r, s in enumerate(stages)]
    return hybrid, slot_bytes, pages
