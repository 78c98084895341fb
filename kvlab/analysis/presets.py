"""The names kvlab's analyses share, each defined once: the seed's geometry, the policies (an
admission policy with a page-index width policy), the outcomes a run or a resize can have, and
the classifier that names a run's outcome.

Adding a policy is one entry in :data:`POLICIES` (plus its test); the comparisons, the phase
diagram's regimes, the multi-rank runs, the panels and the figures read it from here.
"""

from __future__ import annotations

from typing import Dict, Tuple

from kvlab.core.geometry import KVGeometry
from kvlab.core.kv_cache import PageIndexTooShort
from kvlab.sched.scheduler import SchedulerDeadlock


def seed_geometry(tokens_per_block: int = 32) -> KVGeometry:
    """The seed's model shape (docs/SEEDS.md §1): 2 layers, 2 KV heads, head_dim 128, fp16;
    2048 bytes a token, so a 4 MiB pool holds 2048 tokens."""
    return KVGeometry(num_layers=2, num_kv_heads=2, head_dim=128, dtype="float16",
                      tokens_per_block=tokens_per_block)


#: Policy name -> (admission policy, page-index width policy).
POLICIES: Dict[str, Tuple[str, str]] = {
    "none/clamped": ("none", "clamped"),         # historical TensorRT-LLM V2: the #21470 crash
    "none/configured": ("none", "configured"),   # the one-line fix: a wider row, refused every pass
    "capacity": ("capacity", "clamped"),         # PR #21720 (a proposal): reject what never fits
    "vllm": ("vllm", "clamped"),                 # vLLM v1's style (kvlab.sched.admission.VllmStyle)
    "sglang": ("sglang", "clamped"),             # SGLang's style (kvlab.sched.admission.SglangStyle)
}
#: TensorRT-LLM's three regimes (the phase diagram's), and the peers' styles.
TRTLLM_POLICIES = ("none/clamped", "none/configured", "capacity")
PEER_POLICIES = ("vllm", "sglang")
#: The multi-rank runs' names for TensorRT-LLM's regimes (scenario files, ``kvlab scenario``).
RANK_POLICIES: Dict[str, str] = {"clamped": "none/clamped", "configured": "none/configured",
                                 "admission": "capacity"}

#: Every outcome name, mildest first (kvlab.notebook.viz gives each its colour and label).
OUTCOMES = ("ok", "refused", "reject", "stall", "crash")
#: What a run can end in: every request finished; some rejected and the rest finished; no
#: progress (SchedulerDeadlock, or requests left waiting or running); a PageIndexTooShort. The
#: phase diagram's int8 codes index this tuple.
ENGINE_OUTCOMES = ("ok", "reject", "stall", "crash")
#: What one resize can do (kvlab.analysis.repro): allocate, return False, raise.
RESIZE_OUTCOMES = ("ok", "refused", "crash")


def engine_outcome(result) -> str:
    """One of :data:`ENGINE_OUTCOMES` for a ``kvlab.simulate`` result."""
    if isinstance(result.error, PageIndexTooShort):
        return "crash"
    if isinstance(result.error, SchedulerDeadlock):
        return "stall"
    statuses = set(result.status.values())
    if statuses & {"waiting", "running"}:
        return "stall"
    return "reject" if "rejected" in statuses else "ok"


__all__ = ["ENGINE_OUTCOMES", "OUTCOMES", "PEER_POLICIES", "POLICIES", "RANK_POLICIES",
           "RESIZE_OUTCOMES", "TRTLLM_POLICIES", "engine_outcome", "seed_geometry"]
