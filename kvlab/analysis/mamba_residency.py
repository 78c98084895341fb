"""Notebook 05's arithmetic: Qwen3.5-27B's recurrent-state slots against the 24.86 GiB PR
#17261's H100 had left, what merged TensorRT-LLM and each proposal do with it, and a scaled-down
model whose real manager fits in a laptop (the mechanism: :mod:`kvlab.core.mamba`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kvlab.analysis.presets import check_names
from kvlab.core.checks import (
    MAX_COUNT,
    check_float,
    check_instance,
    check_int,
    check_items,
    check_sequence,
)
from kvlab.core.geometry import (
    STATE_DTYPES,
    KVGeometry,
    MambaGeometry,
    qwen3_5_27b_attention,
    qwen3_5_27b_mamba,
)
from kvlab.core.mamba import QUOTA_TOO_SMALL, ResidencyPlan, plan_residency, proposed_quota_error
from kvlab.core.memory import GIB, MemoryBudget

#: The PR's H100 and what it has left after Qwen3.5-27B's weights (the PR's "24.9 GiB").
H100_BYTES = 80 * GIB
PR_QUOTA_BYTES = int(24.86 * GIB)
PR_MAX_BATCH_SIZE = 512
SCALE = 256  # how many times smaller scaled_qwen3_5_27b is
#: The SSM state dtypes notebook 05 and its panel offer: the PR's numbers', and the config's.
MAMBA_SSM_DTYPES = ("bfloat16", "float32")


def qwen_plan(
    quota_bytes: int = PR_QUOTA_BYTES,
    max_batch_size: int = PR_MAX_BATCH_SIZE,
    ssm_dtype: str = "bfloat16",
    conv_dtype: str = "bfloat16",
) -> ResidencyPlan:
    """The residency plan of Qwen3.5-27B (one rank, CUDA-graph padding) for a quota."""
    return plan_residency(
        qwen3_5_27b_mamba(ssm_dtype=ssm_dtype, conv_dtype=conv_dtype),
        qwen3_5_27b_attention(),
        quota_bytes,
        max_batch_size,
    )


def _answers(plan: ResidencyPlan) -> dict:
    """Whether merged code builds, PR #17261's residency, PR #18985's feasible default."""
    return dict(
        merged_builds=plan.raw_fits,
        clamp_resident=max(plan.local_cap, 0),
        feasible_max_batch_size=plan.feasible_max_batch_size(),
    )


def dtype_rows(
    quota_bytes: int = PR_QUOTA_BYTES,
    max_batch_size: int = PR_MAX_BATCH_SIZE,
    ssm_dtypes: Sequence[str] = ("bfloat16", "float32"),
) -> list[dict]:
    """One row per SSM state dtype: slot bytes, merged slots and their GiB, the quota, whether
    merged code builds, PR #17261's residency and PR #18985's feasible max_batch_size."""
    rows = []
    for dtype in check_items("ssm_dtypes", ssm_dtypes, "dtype names"):
        plan = qwen_plan(quota_bytes, max_batch_size, dtype)
        slots = plan.requested + plan.dummies
        rows.append(
            dict(
                ssm_dtype=dtype,
                slot_bytes=plan.slot_bytes,
                slots=slots,
                slots_gib=round(slots * plan.slot_bytes / GIB, 2),
                quota_gib=round(quota_bytes / GIB, 2),
                **_answers(plan),
            )
        )
    return rows


def implied_ssm_dtype(
    slots_gib: float = 37.5,
    slots: int = PR_MAX_BATCH_SIZE + 1,
    candidates: Sequence[str] = ("bfloat16", "float32"),
    tolerance_gib: float = 0.05,
) -> str | None:
    """The SSM state dtype whose ``slots`` slots come to ``slots_gib`` (the PR's 37.5 GiB)."""
    slots_gib = check_float("slots_gib", slots_gib, low=0.0, high=1 << 20, low_open=True)
    slots = check_int("slots", slots, low=1, high=MAX_COUNT)
    candidates = check_names("candidates", candidates, STATE_DTYPES, "dtype names")
    tolerance_gib = check_float("tolerance_gib", tolerance_gib, low=0.0, high=slots_gib)
    for dtype in candidates:
        gib = slots * qwen3_5_27b_mamba(ssm_dtype=dtype).bytes_per_slot / GIB
        if abs(gib - slots_gib) <= tolerance_gib:
            return dtype
    return None


def fraction_rows(
    fractions: Sequence[float],
    left_bytes: int = PR_QUOTA_BYTES,
    total_bytes: int = H100_BYTES,
    max_batch_size: int = PR_MAX_BATCH_SIZE,
    ssm_dtype: str = "bfloat16",
) -> list[dict]:
    """Per ``free_gpu_memory_fraction``: the quota (``left_bytes`` of ``total_bytes`` free), the
    merged floor, whether it builds, PR #17261's residency, PR #18985's max_batch_size."""
    total_bytes = check_int("total_bytes", total_bytes, low=1, high=MAX_COUNT)
    left_bytes = check_int("left_bytes", left_bytes, low=0, high=total_bytes)
    rows = []
    for fraction in check_sequence(
        "fractions", fractions, check_float, low=0.0, high=1.0, low_open=True
    ):
        budget = MemoryBudget(
            total_bytes=total_bytes,
            weights_bytes=total_bytes - left_bytes,
            free_gpu_memory_fraction=fraction,
        )
        if budget.kv_quota_bytes < 1:
            raise ValueError(
                f"left_bytes={left_bytes} leaves no KV quota at fraction {fraction:g}: "
                "left_bytes must leave at least one byte"
            )
        plan = qwen_plan(budget.kv_quota_bytes, max_batch_size, ssm_dtype)
        rows.append(
            dict(
                fraction=fraction,
                quota_gib=budget.kv_quota_bytes / GIB,
                merged_need_gib=plan.raw_need_bytes / GIB,
                **_answers(plan),
            )
        )
    return rows


#: The policies of :func:`proposal_rows`, in order: (key, label, status).
PROPOSALS = (
    ("merged", "merged TensorRT-LLM", "merged"),
    ("clamp", "PR #17261: the clamp", "proposal, PR #17261, closed without merging"),
    ("default", "PR #18985: feasible default", "proposal, PR #18985, open"),
    ("explicit", "PR #18985: explicit value", "proposal, PR #18985, open"),
)


def proposal_rows(plan: ResidencyPlan) -> list[dict]:
    """What each answer does with ``plan.requested`` concurrent requests on one rank (a row
    each: built max_batch_size, resident, waiting, dummies, state_gib, outcome, error): merged
    code, PR #17261's clamp, PR #18985's feasible default, and PR #18985 with ``plan``'s
    explicit max_batch_size (it wins: merged code's outcome with the proposed message)."""
    concurrent = check_instance("plan", plan, ResidencyPlan).requested
    fits, clamp, feasible = plan.raw_fits, max(plan.local_cap, 0), plan.feasible_max_batch_size()
    too_small = QUOTA_TOO_SMALL.format
    clamp_need = (1 + plan.dummies) * plan.slot_bytes + plan.page_bytes
    one_each = dataclasses.replace(plan, requested=plan.pp_size)
    answers = {  # policy -> (max_batch_size, resident, error)
        "merged": (
            plan.max_batch_size,
            plan.requested if fits else 0,
            "" if fits else too_small(got=plan.quota_bytes, need=plan.raw_need_bytes),
        ),
        "clamp": (
            plan.max_batch_size,
            clamp,
            "" if clamp else too_small(got=plan.quota_bytes, need=clamp_need),
        ),
        "default": (
            feasible,
            min(feasible * plan.pp_size, concurrent),
            "" if feasible else proposed_quota_error(one_each),
        ),
        "explicit": (
            plan.max_batch_size,
            plan.requested if fits else 0,
            "" if fits else proposed_quota_error(plan),
        ),
    }
    rows = []
    for key, label, status in PROPOSALS:
        batch, resident, error = answers[key]
        slots = (resident + plan.dummies) if (resident and plan.slot_bytes) else 0
        rows.append(
            dict(
                policy=key,
                label=label,
                status=status,
                max_batch_size=batch,
                resident=resident,
                waiting=concurrent - resident if resident else 0,
                dummies=plan.dummies if resident else 0,
                state_gib=slots * plan.slot_bytes / GIB,
                outcome="ok" if resident else "crash",
                error=error,
            )
        )
    return rows


def scaled_qwen3_5_27b(ssm_dtype: str = "bfloat16") -> tuple[KVGeometry, MambaGeometry]:
    """Qwen3.5-27B with every byte divided by :data:`SCALE`: the state over tp 16 with 3 of 48
    layers, one attention layer of one KV head with 8-token pages. Divide the quota by SCALE too
    and the slot counts stay the PR's."""
    mamba = dataclasses.replace(qwen3_5_27b_mamba(ssm_dtype, tp_size=16), num_mamba_layers=3)
    attention = dataclasses.replace(qwen3_5_27b_attention(8), num_layers=1, num_kv_heads=1)
    return attention, mamba


def residency_bytes(plan: ResidencyPlan) -> dict:
    """The quota's bytes under merged residency ("raw": its floor when it does not fit) and
    PR #17261's clamp ("clamped"): resident and dummy slots, whole pages, unused."""
    check_instance("plan", plan, ResidencyPlan)
    q, slot, page = plan.quota_bytes, plan.slot_bytes, plan.page_bytes

    def split(resident: int, fits: bool) -> dict:
        if not fits:
            return dict(resident=0, dummies=0, pages=0, unused=q)
        slots = resident * slot
        dummies = plan.dummies * slot
        pages = max(page, (q - slots - dummies) // page * page)
        return dict(
            resident=slots, dummies=dummies, pages=pages, unused=max(0, q - slots - dummies - pages)
        )

    raw = split(plan.requested, True)
    if not plan.raw_fits:
        raw = dict(raw, pages=page, unused=0)
    cap = plan.local_cap
    return dict(raw=raw, clamped=split(cap, cap >= 1), raw_fits=plan.raw_fits, clamp_fits=cap >= 1)
