"""The schema of scenario files, stated with pydantic: the frozen records a file becomes
(:class:`Scenario` and its blocks) and :data:`EXPECTED`, the quantities its ``expected`` block
may state. :func:`parse_scenario` turns pydantic's first complaint into a :class:`ScenarioError`
naming the file, the dotted field path and what the field accepts, never quoting the file."""

import dataclasses
import re
import types
from collections.abc import Mapping
from os import PathLike
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import AfterValidator, ConfigDict, Field, Strict, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass
from pydantic.fields import FieldInfo

from kvlab.core.checks import MAX_COUNT
from kvlab.core.geometry import DTYPE_BYTES
from kvlab.core.memory import MIB

MAX_TOKENS = 1 << 24  # 16 Mi tokens: far beyond any context window, small enough to catch typos
MAX_SHAPE = 1 << 14  # layers, heads, head size, tokens per block

#: The quantities a scenario's ``expected`` block may state (a source's reported numbers; the
#: tests compare kvlab's own results against them).
EXPECTED: Mapping[str, str] = {
    "bytes_per_token": "KV bytes one token takes over all layers, K and V, on one rank",
    "capacity_tokens": "tokens the pool holds: total_blocks * tokens_per_block",
    "total_blocks": "pages in the pool after the MIN: each quota in whole storage granules "
    "// (bytes_per_token * tokens_per_block)",
    "width_clamped": "page-index row width from the clamped max_seq_len (since PR #12306)",
    "width_configured": "page-index row width from the configured max_seq_len (the one-line fix)",
    "entries_needed": "page-index entries the context needs: ceil(context_length / tokens_per_block)",
}


class ScenarioError(ValueError):
    """A scenario file that cannot be used; ``field`` is a dotted path (``""``: the document)."""

    def __init__(self, file: str | PathLike[str], field: str, message: str):
        self.file, self.field = str(file), field
        super().__init__(f"{file}: {message}")


def accepts_text(tp: Any) -> str:
    """What a schema type accepts, in words."""
    if get_origin(tp) is Annotated:
        base, *extras = get_args(tp)
        info = next((e for e in extras if isinstance(e, FieldInfo)), FieldInfo())
        if info.description or base not in (int, float):
            return info.description or accepts_text(base)
        bounds = {
            k: getattr(m, k) for m in info.metadata for k in ("ge", "gt", "le") if hasattr(m, k)
        }
        low = f"({bounds['gt']}" if "gt" in bounds else f"[{bounds['ge']}"
        return f"{'an int' if base is int else 'a number'} in {low}, {bounds['le']}]"
    if get_origin(tp) in (Union, types.UnionType):  # X | None
        return accepts_text(get_args(tp)[0])
    if get_origin(tp) is Literal:
        return f"one of {sorted(get_args(tp))}"
    if dataclasses.is_dataclass(tp):
        return f"a mapping with the fields {[f.name for f in dataclasses.fields(tp)]}"
    return "true or false" if tp is bool else str(tp)


def shown(value: Any) -> str:
    """A value from the file as a message shows it: numbers as they are, anything else by its
    type and size, so that a message never quotes the file it refuses."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return f"a str of {len(value)} character(s)"
    if isinstance(value, (list, dict)):
        return f"a {'list' if isinstance(value, list) else 'mapping'} of {len(value)} item(s)"
    return f"a {type(value).__name__}"


def _scalar(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("not a scalar")
    return value


Shape = Annotated[int, Strict(), Field(ge=1, le=MAX_SHAPE)]
Tokens = Annotated[int, Strict(), Field(ge=1, le=MAX_TOKENS)]
NewTokens = Annotated[int, Strict(), Field(ge=0, le=MAX_TOKENS)]
Count = Annotated[int, Strict(), Field(ge=0, le=MAX_COUNT)]
Ranks = Annotated[int, Strict(), Field(ge=1, le=1024)]
GiB = Annotated[float, Strict(), Field(ge=0.0, le=4096.0)]
Bool = Annotated[bool, Strict()]
Text = Annotated[str, Strict(), Field(pattern=r"\S", description="a non-empty string")]
Scalar = Annotated[Any, AfterValidator(_scalar), Field(description="a number or a string")]
FieldPath = Annotated[
    str,
    Strict(),
    Field(
        pattern=r"^[a-z_]+(\.[a-z_]+)+$",
        description="a dotted field path such as deployment.workspace_gib",
    ),
]
CONFIG = ConfigDict(extra="forbid")


@dataclass(frozen=True, kw_only=True, config=CONFIG)  # keyword-only: pool_mib comes first
class ScenarioParameters:
    """The configuration an experiment ran (names follow TensorRT-LLM's where it has one)."""

    # KV pool per rank, MiB; left out beside a `deployment`, whose memory budget sets the pool
    pool_mib: Annotated[int, Strict(), Field(ge=1, le=1 << 20)] | None = None
    num_layers: Shape  # attention layers holding KV
    num_kv_heads: Shape
    head_dim: Shape
    kv_dtype: Literal[tuple(DTYPE_BYTES)]  # type: ignore[valid-type]
    tokens_per_block: Shape
    configured_max_seq_len: Tokens  # what the user asked for (max_seq_len)
    max_batch_size: Annotated[int, Strict(), Field(ge=1, le=1 << 16)]
    context_length: Tokens  # the prompt that reached resize_context
    model_weights_bytes: Count  # weights resident on the rank (0: none loaded)
    # KvCacheConfig.host_cache_size: absent = the automatic host tier, 0 = none (REFERENCE §4a)
    host_cache_size: Count | None = None

    @property
    def pool_bytes(self) -> int:
        if self.pool_mib is None:
            raise ValueError(
                "this scenario sets no pool_mib: its deployment's memory budget "
                "sets each rank's pool (kvlab.run.rank_config.rank_budget)"
            )
        return self.pool_mib * MIB


@dataclass(frozen=True, config=CONFIG)
class DeployedRequest:
    """One request of a deployment; ``rank`` pins it to an attention-DP rank (the real
    ``SchedulingParams.attention_dp_rank`` with ``attention_dp_relax=False``)."""

    id: Annotated[
        str,
        Strict(),
        Field(
            pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
            description="a request id: letters, digits, '_', '.', '-'",
        ),
    ]
    prompt_len: Tokens
    max_new_tokens: NewTokens
    arrival_step: Annotated[int, Strict(), Field(ge=0, le=1 << 20)] = 0
    rank: Annotated[int, Strict(), Field(ge=0, le=1023)] | None = None


@dataclass(frozen=True, config=CONFIG)
class BackgroundRequests:
    """``count`` short requests routed by the balancer: prompts spread evenly over
    [prompt_len_min, prompt_len_max], ``per_step`` arriving per step from step 0."""

    count: Annotated[int, Strict(), Field(ge=0, le=1 << 16)]
    prompt_len_min: Tokens
    prompt_len_max: Tokens
    max_new_tokens: NewTokens
    per_step: Annotated[int, Strict(), Field(ge=1, le=1 << 16)]


@dataclass(frozen=True, config=CONFIG)
class ScenarioDeployment:
    """A multi-rank deployment, memory in GiB per rank, the budget following
    ``KvCacheCreator._cal_max_memory`` (docs/REFERENCE.md §1); rank r's workspace is
    ``workspace_gib + workspace_skew_gib * r / (ranks - 1)``."""

    ranks: Ranks
    attention_dp: Bool
    expert_parallel_size: Ranks
    image: Text  # the TensorRT-LLM version the report ran
    gpu_memory_gib: Annotated[float, Strict(), Field(gt=0.0, le=4096.0)]
    workspace_gib: GiB
    workspace_skew_gib: GiB
    activations_gib: GiB
    non_torch_gib: GiB
    free_gpu_memory_fraction: Annotated[float, Strict(), Field(gt=0.0, le=1.0)]
    max_num_tokens: Tokens  # the scheduler's token budget per pass
    chunked_prefill: Bool
    stall_limit: Annotated[int, Strict(), Field(ge=1, le=1 << 20)]
    max_steps: Annotated[int, Strict(), Field(ge=1, le=1 << 24)]
    requests: Annotated[
        tuple[DeployedRequest, ...],
        Field(
            min_length=1,
            description=f"a list of at least 1 item(s), each {accepts_text(DeployedRequest)}",
        ),
    ]
    background: BackgroundRequests | None = None


@dataclass(frozen=True, config=CONFIG)
class Assumption:
    """A number the source leaves unstated: the value used, its plausible range, and why."""

    value: Scalar
    range: Annotated[
        tuple[Scalar, ...],
        Field(
            min_length=2, description=f"a list of at least 2 item(s), each {accepts_text(Scalar)}"
        ),
    ]
    why: Text


@dataclass(frozen=True, config=CONFIG)
class Scenario:
    """One experiment: where it comes from, what it ran, and the numbers it reported."""

    name: Annotated[
        str,
        Strict(),
        Field(
            pattern=r"^[a-z0-9][a-z0-9_.-]*$",
            description="a lower-case file stem: letters, digits, '_', '.', '-'",
        ),
    ]
    title: Text
    source: Text  # the publication and the software version it used
    gpu: Text
    parameters: ScenarioParameters
    expected: Annotated[
        dict[Literal[tuple(EXPECTED)], Count],  # type: ignore[valid-type]
        Field(description=f"a mapping from some of {sorted(EXPECTED)} to {accepts_text(Count)}"),
    ] = dataclasses.field(default_factory=dict)
    deployment: ScenarioDeployment | None = None
    assumptions: Annotated[
        dict[FieldPath, Assumption],
        Field(
            description=f"a mapping from {accepts_text(FieldPath)} to {accepts_text(Assumption)}"
        ),
    ] = dataclasses.field(default_factory=dict)


_SCENARIO = TypeAdapter(Scenario)
_RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
#: A field name as a scenario file spells it; any other key is described, never quoted.
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_. -]{0,63}")


def join_field(where: str, name: object) -> str:
    if isinstance(name, int):
        return f"{where}[{name}]"
    if not (isinstance(name, str) and FIELD_NAME.fullmatch(name)):
        name = f"<a key: {shown(name)}>"
    return f"{where}.{name}" if where else str(name)


def _path(loc: tuple[Any, ...]) -> str:
    where = ""
    for part in loc:
        where = join_field(where, part)
    return where


def _at(loc: tuple[Any, ...]) -> tuple[Any, Any, bool]:
    """(the type at ``loc``, the type holding it, whether ``loc`` names a mapping's key)."""
    tp: Any = Scenario
    parent: Any = None
    for i, part in enumerate(loc):
        while get_origin(tp) in (Annotated, Union, types.UnionType):
            tp = get_args(tp)[0]
        parent = tp
        if dataclasses.is_dataclass(tp):
            tp = get_type_hints(tp, include_extras=True).get(part)
        elif get_origin(tp) is tuple:
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict:
            if i + 1 < len(loc) and loc[i + 1] == "[key]":
                return get_args(tp)[0], tp, True
            tp = get_args(tp)[1]
    return tp, parent, False


def parse_scenario(data: Any, file: str | PathLike[str]) -> Scenario:
    """``data`` (a parsed YAML document) as a Scenario; ScenarioError otherwise."""
    try:
        return _SCENARIO.validate_python(data)
    except ValidationError as exc:
        error = exc.errors()[0]
    loc = tuple(part for part in error["loc"] if part != "[key]")
    where = _path(loc)
    what, kind, value = where or "the document", error["type"], error["input"]
    tp, parent, is_key = _at(tuple(error["loc"]))
    if kind == "unexpected_keyword_argument" or (is_key and get_origin(tp) is Literal):
        known = sorted(get_args(tp) if is_key else (f.name for f in dataclasses.fields(parent)))
        owner = _path(loc[:-1]) or "the document"
        raise ScenarioError(
            file, where, f"{where} is not a known field of {owner}; known fields: {known}"
        )
    accepts = accepts_text(tp)
    if kind in ("missing", "missing_argument"):
        raise ScenarioError(file, where, f"{where} is missing; it must be {accepts}")
    if kind in _RANGE_ERRORS:
        raise ScenarioError(
            file, where, f"{what} must be in {accepts.split(' in ', 1)[1]}, got {value}"
        )
    got = (
        f"{value!r} ({type(value).__name__})"
        if isinstance(value, (bool, int, float))
        else shown(value)
    )
    raise ScenarioError(file, where, f"{what} must be {accepts}, got {got}")
