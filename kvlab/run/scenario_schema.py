"""The schema of scenario files: the frozen records a file becomes (:class:`Scenario` and its
blocks), each field carrying its check (a spec of :mod:`kvlab.run.scenario_fields`) in its
``metadata["spec"]``, and :data:`EXPECTED`, the quantities a scenario's ``expected`` block may
state. A field without a default is required, one with a default optional. To extend the schema,
add a field with a spec and a default at the end of the dataclass, and name any new expected
quantity in :data:`EXPECTED`. :mod:`kvlab.run.scenarios` reads files into these records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvlab.core.geometry import DTYPE_BYTES
from kvlab.core.memory import MIB
from kvlab.run.scenario_fields import (
    Bool,
    Choice,
    Float,
    Int,
    ListOf,
    MappingOf,
    Record,
    Scalar,
    Table,
    Text,
    spec,
)

MAX_TOKENS = 1 << 24  # 16 Mi tokens: far beyond any context window, small enough to catch typos
MAX_SHAPE = 1 << 14  # layers, heads, head size, tokens per block

# The quantities a scenario's `expected` block may state, and what each one is. A source's
# reported numbers go here; tests compare kvlab's own results against them.
EXPECTED: Mapping[str, str] = {
    "bytes_per_token": "KV bytes one token takes over all layers, K and V, on one rank",
    "capacity_tokens": "tokens the pool holds: total_blocks * tokens_per_block",
    "total_blocks": "pages in the pool: pool bytes // (bytes_per_token * tokens_per_block)",
    "width_clamped": "page-index row width from the clamped max_seq_len (since PR #12306)",
    "width_configured": "page-index row width from the configured max_seq_len (the one-line fix)",
    "entries_needed": "page-index entries the context needs: ceil(context_length / tokens_per_block)",
}


@dataclass(frozen=True, kw_only=True)  # keyword-only: pool_mib (optional) comes first
class ScenarioParameters:
    """The configuration an experiment ran (names follow TensorRT-LLM's where it has one)."""

    # KV pool (quota) per rank, MiB; at most 1 TiB. Optional only in a scenario with a
    # `deployment`, whose memory budget sets the pool (checked by load_scenario).
    pool_mib: int | None = spec(Int(1, 1 << 20), default=None)
    num_layers: int = spec(Int(1, MAX_SHAPE))  # attention layers holding KV
    num_kv_heads: int = spec(Int(1, MAX_SHAPE))
    head_dim: int = spec(Int(1, MAX_SHAPE))
    kv_dtype: str = spec(Choice(frozenset(DTYPE_BYTES)))
    tokens_per_block: int = spec(Int(1, MAX_SHAPE))
    configured_max_seq_len: int = spec(Int(1, MAX_TOKENS))  # what the user asked for (max_seq_len)
    max_batch_size: int = spec(Int(1, 1 << 16))
    context_length: int = spec(Int(1, MAX_TOKENS))  # the prompt that reached resize_context
    model_weights_bytes: int = spec(Int(0))  # weights resident on the rank (0: none loaded)
    # KvCacheConfig.host_cache_size in bytes: absent = the automatic host tier (the real
    # default), 0 = no tier below the GPU (docs/REFERENCE.md §4a)
    host_cache_size: int | None = spec(Int(0), default=None)

    @property
    def pool_bytes(self) -> int:
        if self.pool_mib is None:
            raise ValueError(
                "this scenario sets no pool_mib: its deployment's memory budget "
                "sets each rank's pool (kvlab.run.rank_config.rank_budget)"
            )
        return self.pool_mib * MIB


NAME = Text(r"[a-z0-9][a-z0-9_.-]*", "a lower-case file stem: letters, digits, '_', '.', '-'")


@dataclass(frozen=True)
class DeployedRequest:
    """One request of a deployment's workload; ``rank`` pins it to an attention-DP rank (the
    real ``SchedulingParams.attention_dp_rank`` with ``attention_dp_relax=False``)."""

    id: str = spec(
        Text(r"[A-Za-z0-9][A-Za-z0-9_.-]*", "a request id: letters, digits, '_', '.', '-'")
    )
    prompt_len: int = spec(Int(1, MAX_TOKENS))
    max_new_tokens: int = spec(Int(0, MAX_TOKENS))
    arrival_step: int = spec(Int(0, 1 << 20), default=0)
    rank: int | None = spec(Int(0, 1023), default=None)


@dataclass(frozen=True)
class BackgroundRequests:
    """``count`` short requests routed by the balancer: prompts spread evenly over
    [prompt_len_min, prompt_len_max], ``per_step`` arriving per step from step 0."""

    count: int = spec(Int(0, 1 << 16))
    prompt_len_min: int = spec(Int(1, MAX_TOKENS))
    prompt_len_max: int = spec(Int(1, MAX_TOKENS))
    max_new_tokens: int = spec(Int(0, MAX_TOKENS))
    per_step: int = spec(Int(1, 1 << 16))


@dataclass(frozen=True)
class ScenarioDeployment:
    """A multi-rank deployment: topology, one rank's memory budget, scheduler settings and the
    workload. Memory in GiB per rank; the budget follows ``KvCacheCreator._cal_max_memory``
    (docs/REFERENCE.md §1): weights (``parameters.model_weights_bytes``) + MoE workspace +
    activation peak + non-torch memory make the peak. Rank r's workspace is
    ``workspace_gib + workspace_skew_gib * r / (ranks - 1)``."""

    ranks: int = spec(Int(1, 1024))
    attention_dp: bool = spec(Bool())
    expert_parallel_size: int = spec(Int(1, 1024))
    image: str = spec(Text())  # the TensorRT-LLM version the report ran
    gpu_memory_gib: float = spec(Float(0.0, 4096.0, low_open=True))
    workspace_gib: float = spec(Float(0.0, 4096.0))
    workspace_skew_gib: float = spec(Float(0.0, 4096.0))
    activations_gib: float = spec(Float(0.0, 4096.0))
    non_torch_gib: float = spec(Float(0.0, 4096.0))
    free_gpu_memory_fraction: float = spec(Float(0.0, 1.0, low_open=True))
    max_num_tokens: int = spec(Int(1, MAX_TOKENS))  # the scheduler's token budget per pass
    chunked_prefill: bool = spec(Bool())
    stall_limit: int = spec(Int(1, 1 << 20))
    max_steps: int = spec(Int(1, 1 << 24))
    requests: tuple = spec(ListOf(Record(DeployedRequest)))
    background: BackgroundRequests | None = spec(Record(BackgroundRequests), default=None)


@dataclass(frozen=True)
class Assumption:
    """A number the source leaves unstated: the value used, its plausible range, and why."""

    value: Any = spec(Scalar())
    range: tuple = spec(ListOf(Scalar(), min_len=2))
    why: str = spec(Text())


FIELD_PATH = Text(r"[a-z_]+(\.[a-z_]+)+", "a dotted field path such as deployment.workspace_gib")


@dataclass(frozen=True)
class Scenario:
    """One experiment: where it comes from, what it ran, and the numbers it reported."""

    name: str = spec(NAME)  # equals the file's stem
    title: str = spec(Text())
    source: str = spec(Text())  # the publication and the software version it used
    gpu: str = spec(Text())
    parameters: ScenarioParameters = spec(Record(ScenarioParameters))
    expected: dict = spec(Table(EXPECTED, Int(0)), default_factory=dict)
    deployment: ScenarioDeployment | None = spec(Record(ScenarioDeployment), default=None)
    assumptions: dict = spec(MappingOf(FIELD_PATH, Record(Assumption)), default_factory=dict)
