"""A deployment, checked at construction (the door of ``kvlab plan`` and notebook 06), and what
it resolves to before any cache exists: the manager, the max_seq_len the executor and the KV
manager run with, each stage's geometry and each rank's budget (``KvCacheCreator._cal_max_memory``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.analysis.models import DEFAULT_MAX_POSITION_EMBEDDINGS, ModelGeometry
from kvlab.core.checks import (
    check_bools,
    check_choice,
    check_float,
    check_instance,
    check_int,
    store_checked,
    store_param,
)
from kvlab.core.geometry import DTYPE_BYTES, STATE_DTYPES, KVGeometry
from kvlab.core.memory import GIB, MemoryBudget
from kvlab.run.rank_config import ramped_budget
from kvlab.sched.context_plan import check_chunk_budget

MANAGERS = ("auto", "v1", "v2")  # "auto": the architecture's choice
SPEC_MODES = ("mtp", "eagle3")  # one-model speculative decoding: extra KV tokens, draft layers
MAX_RANKS = 4096
#: The most pages one sequence may span in a plan: the ranges evaluate every block boundary.
MAX_PLAN_BLOCKS = 1 << 22
MAX_GIB = 1 << 20
_GIB = dict(low=0.0, high=MAX_GIB)
#: Deployment's own numbers: field -> (check, bounds); None (where allowed) is unchecked.
DEPLOYMENT_BOUNDS = {
    "gpu_gib": (check_float, dict(_GIB, low=0.001)),
    "weights_gib": (check_float, _GIB),
    "workspace_gib": (check_float, _GIB),
    "workspace_skew_gib": (check_float, _GIB),
    "activations_gib": (check_float, _GIB),
    "non_torch_gib": (check_float, _GIB),
    "host_cache_gib": (check_float, _GIB),
    "free_gpu_memory_fraction": (check_float, dict(low=0.0, high=1.0, low_open=True)),
    "kv_quota_gib": (check_float, dict(_GIB, low=1e-6)),
    "tp_size": (check_int, dict(low=1, high=MAX_RANKS)),
    "ranks": (check_int, dict(low=1, high=MAX_RANKS)),
    "max_beam_width": (check_int, dict(low=1, high=256)),
}
#: Its numbers bounded by ``kvlab.core.checks.BOUNDS``.
SHARED_BOUNDS = (
    "max_seq_len",
    "max_batch_size",
    "max_new_tokens",
    "max_num_tokens",
    "tokens_per_block",
)
FLAGS = ("attention_dp", "chunked_prefill", "allow_long_max_model_len", "disable_overlap_scheduler")


@dataclass(frozen=True)
class Deployment:
    """One deployment, per rank, memory in GiB. ``weights_gib=None`` derives the weights from the
    parameter count (the checkpoint's quantization, or ``weights_dtype``); ``max_seq_len=None``
    is the config's inferred limit, which also lowers a larger one unless
    ``allow_long_max_model_len``; ``workspace_skew_gib`` grows linearly to the last rank;
    ``kv_quota_gib`` is ``max_gpu_total_bytes``; ``host_cache_gib=None`` is upstream's default;
    ``ranks``, when given, must be tp x pp. The other defaults are TensorRT-LLM's."""

    model: ModelGeometry
    gpu_gib: float
    weights_gib: float | None = None
    weights_dtype: str | None = None
    workspace_gib: float = 0.0
    workspace_skew_gib: float = 0.0
    activations_gib: float = 0.0
    non_torch_gib: float = 0.0
    free_gpu_memory_fraction: float = 0.9
    kv_quota_gib: float | None = None
    tp_size: int = 1
    pp_size: int = 1
    attention_dp: bool = False
    ranks: int | None = None
    max_seq_len: int | None = None
    allow_long_max_model_len: bool = False
    max_batch_size: int = 2048
    max_new_tokens: int = 64
    max_num_tokens: int = 8192
    chunked_prefill: bool = False
    tokens_per_block: int = 32
    kv_dtype: str | None = None
    mamba_ssm_dtype: str | None = None
    host_cache_gib: float | None = None
    manager: str = "auto"
    max_beam_width: int = 1
    spec_mode: str | None = None
    max_draft_len: int = 0
    disable_overlap_scheduler: bool = False

    def __post_init__(self):
        check_instance("model", self.model, ModelGeometry)
        for name, (check, bounds) in DEPLOYMENT_BOUNDS.items():
            if getattr(self, name) is not None:
                store_checked(self, name, check, **bounds)
        for name in SHARED_BOUNDS:
            if getattr(self, name) is not None:
                store_param(self, name)
        store_checked(self, "pp_size", check_int, low=1, high=self.model.num_layers)
        check_bools(**{name: getattr(self, name) for name in FLAGS})
        for name, choices in (
            ("weights_dtype", DTYPE_BYTES),
            ("kv_dtype", DTYPE_BYTES),
            ("mamba_ssm_dtype", STATE_DTYPES),
            ("spec_mode", SPEC_MODES),
        ):
            if getattr(self, name) is not None:
                check_choice(name, getattr(self, name), choices)
        check_choice("manager", self.manager, MANAGERS)
        if self.weights_gib is None and self.model.weights_bytes(self.weights_dtype) is None:
            why = (
                f"its checkpoint's quantization {self.model.quantization.weights_algo!r} is "
                "not one kvlab derives weights for"
                if self.model.parameters
                else "it states no parameter count to derive the weights from"
            )
            raise ValueError(f"weights_gib is needed for model {self.model.name!r}: {why}")
        if self.tp_size * self.pp_size > MAX_RANKS:
            raise ValueError(
                f"tp_size x pp_size must be at most {MAX_RANKS} ranks, got "
                f"{self.tp_size} x {self.pp_size} = {self.tp_size * self.pp_size}"
            )
        if self.ranks is not None and self.ranks != self.tp_size * self.pp_size:
            raise ValueError(
                f"ranks must be tp_size x pp_size = {self.tp_size * self.pp_size} "
                f"(TensorRT-LLM's world size; attention DP runs on the tp ranks), "
                f"got {self.ranks}"
            )
        heads = self.model.num_attention_heads
        if not self.attention_dp and heads and heads % self.tp_size:
            raise ValueError(
                f"tp_size must divide num_attention_heads ({heads}) unless attention_dp "
                f"is on, got {self.tp_size}"
            )
        spec = self.spec_mode is not None
        store_checked(self, "max_draft_len", check_int, low=int(spec), high=64 if spec else 0)
        if self.spec_mode == "mtp" and not self.model.draft_layers:
            raise ValueError(
                f"spec_mode 'mtp' needs MTP layers: model {self.model.name!r} "
                "states no num_nextn_predict_layers"
            )
        if self.model.linear_layers and self.resolved_manager == "v1":
            raise ValueError(
                "a hybrid (recurrent-state) model on the V1 manager is "
                "MambaHybridCacheManager, which kvlab does not plan: manager must be "
                "'auto' or 'v2', and max_beam_width 1"
            )
        if self.resolved_manager == "v1" and self.free_gpu_memory_fraction >= 1.0:
            raise ValueError(
                "free_gpu_memory_fraction must be in (0, 1) for the V1 manager "
                "(calculate_max_num_blocks asserts it is below 1.0), got 1.0"
            )
        span = (self.kv_max_seq_len + self.max_new_tokens) // self.tokens_per_block
        if span > MAX_PLAN_BLOCKS:
            raise ValueError(
                f"(max_seq_len + max_new_tokens) / tokens_per_block must be at most "
                f"{MAX_PLAN_BLOCKS:,} blocks, got ({self.configured_max_seq_len:,} + "
                f"{self.max_new_tokens:,}) / {self.tokens_per_block} (about {span:,}): "
                "raise tokens_per_block or lower max_seq_len or max_new_tokens"
            )
        if self.chunked_prefill:  # the Scheduler's own refusal, before any verdict
            check_chunk_budget(self.tokens_per_block, self.max_num_tokens)
        for stage in range(self.pp_size):
            self.kv_geometry(stage)  # head and dtype constraints, named
            if self.model.linear_layers:
                self.mamba_geometry(stage)

    @property
    def world_size(self) -> int:
        """Ranks that each build a KV pool: tp x pp."""
        return self.tp_size * self.pp_size

    @property
    def resolved_manager(self) -> str:
        """ "v1" or "v2": ``manager``, "auto" by the architecture; V2 falls back to V1 at a beam
        width above 1 (``_validate_or_fallback_kv_cache_manager_v2``, _util.py)."""
        want = self.model.preferred_manager if self.manager == "auto" else self.manager
        return "v1" if want == "v2" and self.max_beam_width > 1 else want

    @property
    def requested_max_seq_len(self) -> int:
        limit = self.model.max_seq_len_limit or DEFAULT_MAX_POSITION_EMBEDDINGS
        return self.max_seq_len if self.max_seq_len is not None else limit

    @property
    def configured_max_seq_len(self) -> int:
        """The requested max_seq_len, lowered to the model's unless allow_long_max_model_len."""
        if self.allow_long_max_model_len or self.model.max_seq_len_limit is None:
            return self.requested_max_seq_len
        return min(self.requested_max_seq_len, self.model.max_seq_len_limit)

    @property
    def kv_max_seq_len(self) -> int:
        """The KV manager's max_seq_len (``py_executor_creator``): the configured one, plus
        1 + max_draft_len under the overlap scheduler, plus speculative decoding's tokens."""
        overlap = 0 if self.disable_overlap_scheduler else 1 + self.max_draft_len
        spec = self.num_extra_kv_tokens + self.max_draft_len if self.spec_mode else 0
        return self.configured_max_seq_len + overlap + spec

    @property
    def num_extra_kv_tokens(self) -> int:
        """``max_draft_len - 1`` under speculative decoding (``get_num_extra_kv_tokens``)."""
        return self.max_draft_len - 1 if self.spec_mode else 0

    @property
    def draft_layers(self) -> int:
        """Draft layers on the last stage, with the target's KV geometry: MTP's
        ``num_nextn_predict_layers``, Eagle3's one (``num_eagle_layers``' default)."""
        return {"mtp": self.model.draft_layers, "eagle3": 1}.get(self.spec_mode or "", 0)

    def stage_of(self, rank: int) -> int:
        """The pipeline stage of ``rank`` (``Mapping``: pp is the outer dimension)."""
        return rank // self.tp_size

    def attention_layers(self, stage: int) -> int:
        """Stage ``stage``'s KV layers: its share of the model's, the draft layers on the last."""
        return self.model.stage(self.pp_size, stage)[0] + (
            self.draft_layers if stage == self.pp_size - 1 else 0
        )

    def kv_geometry(self, stage: int | None = None) -> KVGeometry:
        """Stage ``stage``'s KV geometry (None: the most attention layers of any stage)."""
        last = stage == self.pp_size - 1 or (stage is None and self.pp_size == 1)
        return self.model.kv_geometry(
            self.kv_dtype,
            self.tokens_per_block,
            self.tp_size,
            self.pp_size,
            self.attention_dp,
            stage,
            extra_layers=self.draft_layers if last else 0,
        )

    def mamba_geometry(self, stage: int | None = None):
        """Stage ``stage``'s recurrent-state geometry, SSM state in ``mamba_ssm_dtype`` or the
        model's dtype (``mamba_ssm_cache_dtype="auto"`` reads no checkpoint state dtype)."""
        return self.model.mamba_geometry(
            1 if self.attention_dp else self.tp_size,
            self.pp_size,
            self.mamba_ssm_dtype or self.model.dtype,
            stage,
        )

    @property
    def weights_bytes(self) -> int:
        """Per rank: ``weights_gib``, else the model's weights over tp x pp, but its routers and
        norms (:meth:`~kvlab.analysis.models.ModelGeometry.replicated_bytes`) over pp only."""
        if self.weights_gib is not None:
            return round(self.weights_gib * GIB)
        weights = self.model.weights_bytes(self.weights_dtype)
        assert weights is not None  # __post_init__ asks for weights_gib where the model gives none
        whole = self.model.replicated_bytes(self.weights_dtype)
        return (weights - whole) // (self.tp_size * self.pp_size) + whole // self.pp_size

    def budgets(self) -> tuple[MemoryBudget, ...]:
        """Every rank's budget, its workspace ramped (:func:`~kvlab.run.rank_config.ramped_budget`);
        V1 reads no ``max_gpu_total_bytes``."""
        cap = (
            None
            if self.kv_quota_gib is None or self.resolved_manager == "v1"
            else round(self.kv_quota_gib * GIB)
        )
        return tuple(
            ramped_budget(
                r,
                self.world_size,
                gpu_gib=self.gpu_gib,
                weights_bytes=self.weights_bytes,
                workspace_gib=self.workspace_gib,
                workspace_skew_gib=self.workspace_skew_gib,
                activations_gib=self.activations_gib,
                non_torch_gib=self.non_torch_gib,
                free_gpu_memory_fraction=self.free_gpu_memory_fraction,
                max_gpu_total_bytes=cap,
            )
            for r in range(self.world_size)
        )
