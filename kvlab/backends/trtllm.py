"""The 4 MiB repro of issue #21470 on a real TensorRT-LLM ``KVCacheManagerV2`` (tensorrt_llm >= 1.3
with a CUDA GPU), beside kvlab's; elsewhere it imports, and runs raise :class:`BackendUnavailable`.

Mirrors ``tensorrt_llm/_torch/pyexecutor/kv_cache_manager_v2.py`` at
218ea169be0dbb44219a77580e6fb663815cd1de (``kv_cache/kv_cache_manager_v2.py`` at
0004396720054fd8e205cbf616f21f0b57c6b412; both paths are tried) and
``cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/kvCache.cpp`` at
2cdb4523511c9ae64a383b90287e5165f2e75772 (``_checkPageIndexBufferCapacity``), with a real
``LlmRequest`` built as ``add_dummy_requests`` builds one. Policy "clamped" runs the manager as
shipped; "configured" applies the seed's one-line fix from outside: the table rebuilt, before any
cache exists, with rows sized from the configured ``max_seq_len``.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

import torch

from kvlab.analysis.repro import ReproResult, run_repro
from kvlab.core.checks import check_choice, check_int
from kvlab.core.geometry import KVGeometry
from kvlab.core.page_index import WIDTH_POLICIES, max_blocks_per_seq
from kvlab.run.scenarios import load_scenario

#: The oldest tensorrt_llm line this backend drives (its dev and rc builds included).
MIN_VERSION = (1, 3)
INSTALL_HINT = (
    "kvlab's TensorRT-LLM backend needs tensorrt_llm>=1.3 with a CUDA GPU; install it from "
    "NVIDIA's package index (pip install 'kvlab[trtllm]' with that index added through "
    "--extra-index-url), or run kvlab inside one of NVIDIA's TensorRT-LLM container images"
)
#: kvlab dtype names -> tensorrt_llm.bindings.DataType member names.
_DATA_TYPES = dict(float32="FLOAT", float16="HALF", bfloat16="BF16", fp8="FP8", nvfp4="NVFP4")
#: The fields on which the two results must agree.
COMPARED = tuple(
    "capacity_tokens max_blocks_per_seq outcome error state_preserved retry_ok".split()
)


class BackendUnavailable(RuntimeError):
    """The real TensorRT-LLM cannot run here; ``reason`` says why, the message what is needed."""

    def __init__(self, reason: str):
        super().__init__(f"{reason}. {INSTALL_HINT}")
        self.reason = reason


def parse_version(version) -> tuple[int, int]:
    """(major, minor) of a version string such as "1.4.0rc3.dev202610300406"."""
    match = re.match(r"(\d+)\.(\d+)", version) if isinstance(version, str) else None
    if match is None:
        raise ValueError(f"version must start with MAJOR.MINOR (such as '1.3.0'), got {version!r}")
    return int(match[1]), int(match[2])


def available() -> tuple[bool, str]:
    """(True, what was found) where this backend can run; (False, why not) elsewhere."""
    try:
        trtllm = importlib.import_module("tensorrt_llm")
    except Exception as exc:  # not installed (ImportError), or a broken install's own error
        return False, f"tensorrt_llm cannot be imported ({type(exc).__name__}: {exc})"
    version = getattr(trtllm, "__version__", None)
    try:
        supported = parse_version(version) >= MIN_VERSION
    except ValueError:
        return False, f"tensorrt_llm reports no usable version (__version__ = {version!r})"
    if not supported:
        return False, f"tensorrt_llm {version} is installed, older than 1.3"
    if not torch.cuda.is_available():
        return False, f"tensorrt_llm {version} is installed but torch.cuda.is_available() is False"
    return True, f"tensorrt_llm {version} with a CUDA GPU"


@dataclass(frozen=True)
class TrtllmReproResult:
    """What the real manager did; the fields shared with
    :class:`kvlab.analysis.repro.ReproResult` mean the same there."""

    tensorrt_llm_version: str
    kv_cache_class: str  # the real cache's class: shows which core (native or Python) ran
    policy: str
    context: int
    capacity_tokens: int  # the manager's max_seq_len after its clamp
    configured_max_seq_len: int
    max_blocks_per_seq: int  # the width of the cache's row in host_kv_cache_block_offsets
    outcome: str  # "ok", "refused" or "crash" (kvlab.analysis.presets.RESIZE_OUTCOMES)
    error: str | None
    state_preserved: bool | None  # after "refused": capacity 0 and the row unchanged
    retry_tokens: int
    retry_ok: bool | None  # after "refused": did the smaller retry succeed?


@dataclass(frozen=True)
class Comparison:
    """The same scenario on kvlab and on the real manager."""

    kvlab: ReproResult
    trtllm: TrtllmReproResult

    @property
    def differences(self) -> dict:
        """{field: (kvlab's value, the real value)} for each :data:`COMPARED` field that differs."""
        pairs = {name: (getattr(self.kvlab, name), getattr(self.trtllm, name)) for name in COMPARED}
        return {name: pair for name, pair in pairs.items() if pair[0] != pair[1]}

    @property
    def agree(self) -> bool:
        return not self.differences


def run_trtllm_repro(
    scenario="rtx5080-4mib",
    context: int | None = None,
    policy: str = "clamped",
    retry_tokens: int = 32,
) -> TrtllmReproResult:
    """Build the real KVCacheManagerV2 for ``scenario`` and resize one request's cache to
    ``context`` tokens (the scenario's context length by default) through ``resize_context``;
    after a refusal, resume the cache and retry ``retry_tokens`` tokens, as the seed did."""
    params = load_scenario(scenario).parameters
    if context is None:
        context = params.context_length
    context = check_int("context", context, low=1, high=1 << 30)
    check_choice("policy", policy, WIDTH_POLICIES)
    retry_tokens = check_int("retry_tokens", retry_tokens, low=1, high=1 << 30)
    pool_bytes = params.pool_bytes  # ValueError where a deployment sets the pool
    ok, reason = available()
    if not ok:
        raise BackendUnavailable(reason)
    try:
        try:
            from tensorrt_llm._torch.pyexecutor.kv_cache.kv_cache_manager_v2 import KVCacheManagerV2
        except ModuleNotFoundError:  # builds before the move into kv_cache/
            from tensorrt_llm._torch.pyexecutor.kv_cache_manager_v2 import KVCacheManagerV2
        from tensorrt_llm._torch.pyexecutor.llm_request import LlmRequest
        from tensorrt_llm.bindings import DataType, SamplingConfig
        from tensorrt_llm.bindings.internal.batch_manager import CacheType
        from tensorrt_llm.llmapi.llm_args import KvCacheConfig
        from tensorrt_llm.mapping import Mapping
        from tensorrt_llm.runtime.kv_cache_manager_v2._utils import init_cuda_once
        from tensorrt_llm.sampling_params import SamplingParams
    except ImportError as exc:
        raise BackendUnavailable(
            f"this tensorrt_llm build lacks a part kvlab drives ({exc})"
        ) from exc
    init_cuda_once()
    mgr = KVCacheManagerV2(
        KvCacheConfig(max_gpu_total_bytes=pool_bytes, host_cache_size=0, enable_block_reuse=False),
        CacheType.SELF,
        num_layers=params.num_layers,
        num_kv_heads=params.num_kv_heads,
        head_dim=params.head_dim,
        tokens_per_block=params.tokens_per_block,
        max_seq_len=params.configured_max_seq_len,
        max_batch_size=params.max_batch_size,
        mapping=Mapping(world_size=1, rank=0, tp_size=1, pp_size=1),
        dtype=getattr(DataType, _DATA_TYPES[params.kv_dtype]),
    )
    req = None
    try:
        if policy == "configured":  # the one-line fix: rows sized from max_seq_len as configured
            table = mgr.host_kv_cache_block_offsets
            mgr.max_blocks_per_seq = max_blocks_per_seq(
                params.configured_max_seq_len, params.tokens_per_block, mgr.num_extra_kv_tokens
            )
            mgr.host_kv_cache_block_offsets = torch.zeros(
                (*table.shape[:-1], mgr.max_blocks_per_seq),
                dtype=table.dtype,
                pin_memory=table.is_pinned(),
            )
        req = LlmRequest(
            request_id=0,
            max_new_tokens=1,
            input_tokens=[1] * context,
            sampling_config=SamplingConfig(SamplingParams()._get_sampling_config()),
            is_streaming=False,
        )
        if not mgr.prepare_context(req):
            raise RuntimeError(
                "KVCacheManagerV2.prepare_context refused a first request on an empty pool"
            )
        cache = mgr.kv_cache_map[req.py_request_id]
        row = mgr.host_kv_cache_block_offsets[0, mgr.index_mapper.get_index(req.py_request_id), 0]
        row_before = row.clone()
        error = state_preserved = retry_ok = None
        try:
            outcome = "ok" if mgr.resize_context(req, context) else "refused"
        except ValueError as exc:
            outcome, error = "crash", str(exc)
        if outcome == "refused":
            state_preserved = cache.capacity == 0 and torch.equal(row, row_before)
            # _resume_and_restore: what prepare_context uses to resume (present in every build read)
            retry_ok = bool(
                mgr._resume_and_restore(req.py_request_id, cache)
                and mgr.resize_context(req, retry_tokens)
            )
        return TrtllmReproResult(
            tensorrt_llm_version=importlib.import_module("tensorrt_llm").__version__,
            kv_cache_class=f"{type(cache).__module__}.{type(cache).__qualname__}",
            policy=policy,
            context=context,
            capacity_tokens=int(mgr.max_seq_len),
            configured_max_seq_len=params.configured_max_seq_len,
            max_blocks_per_seq=int(row.numel()),
            outcome=outcome,
            error=error,
            state_preserved=state_preserved,
            retry_tokens=retry_tokens,
            retry_ok=retry_ok,
        )
    finally:
        if req is not None:
            mgr.free_resources(req)
        mgr.shutdown()


def compare_with_kvlab(
    scenario="rtx5080-4mib",
    context: int | None = None,
    policy: str = "clamped",
    retry_tokens: int = 32,
) -> Comparison:
    """:func:`run_trtllm_repro` and :func:`kvlab.analysis.repro.run_repro` on the same scenario."""
    real = run_trtllm_repro(scenario, context, policy, retry_tokens)
    params = load_scenario(scenario).parameters
    assert params.pool_mib is not None, "the real run refused a scenario without a pool"
    geometry = KVGeometry(
        params.num_layers,
        params.num_kv_heads,
        params.head_dim,
        dtype=params.kv_dtype,
        tokens_per_block=params.tokens_per_block,
    )
    model = run_repro(
        pool_mib=params.pool_mib,
        context=real.context,
        policy=policy,
        tokens_per_block=params.tokens_per_block,
        max_seq_len=params.configured_max_seq_len,
        retry_tokens=retry_tokens,
        geometry=geometry,
    )
    return Comparison(kvlab=model, trtllm=real)
