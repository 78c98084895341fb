"""The one table of policies: each name pairs an admission policy (:mod:`kvlab.sched.admission`)
with a page-index width policy (:data:`kvlab.core.page_index.WIDTH_POLICIES`); "vllm" and
"sglang" are the peers' own loops. The comparisons, panels and figures read it from here.
"""

from __future__ import annotations

#: Policy name -> (admission policy, page-index width policy).
POLICIES: dict[str, tuple[str, str]] = {
    "none/clamped": ("none", "clamped"),  # historical TensorRT-LLM V2: the #21470 crash
    "none/configured": ("none", "configured"),  # the one-line fix: a wider row, refused every pass
    "capacity": ("capacity", "clamped"),  # PR #21720 (a proposal): reject what never fits
    "vllm": ("vllm", "configured"),  # vLLM v1's own loop (kvlab.sched.vllm.VllmScheduler)
    "sglang": ("sglang", "configured"),  # SGLang's own loop (kvlab.sched.sglang.SglangScheduler)
}
#: TensorRT-LLM's three regimes (the phase diagram's), and the peers' styles.
TRTLLM_POLICIES = ("none/clamped", "none/configured", "capacity")
PEER_POLICIES = ("vllm", "sglang")

__all__ = ["PEER_POLICIES", "POLICIES", "TRTLLM_POLICIES"]
