"""TrtllmSettings: TensorRT-LLM's own configuration, as ``VllmEngineArgs`` is vLLM's and
``SglangServerArgs`` SGLang's: the KV cache manager's settings, the executor's and the admission
policy, by TensorRT-LLM's names where it has one (``KvCacheConfig``, ``LlmArgs``).
``.manager()`` and ``.scheduler()`` build the pair :class:`~kvlab.sched.scheduler.Scheduler` runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.core.checks import (
    check_bools,
    check_choice,
    check_instance,
    store_param,
)
from kvlab.core.geometry import KVGeometry
from kvlab.core.manager import KVCacheManager
from kvlab.core.page_index import WIDTH_POLICIES
from kvlab.sched.admission import AdmissionPolicy, make_admission
from kvlab.sched.deadlock import DEFAULT_STALL_LIMIT
from kvlab.sched.scheduler import Scheduler


@dataclass(frozen=True)
class TrtllmSettings:
    """The manager's ``geometry``, ``quota_bytes`` (the KV pool), ``max_seq_len``,
    ``max_batch_size``, row-width ``page_index_policy``, ``host_cache_size`` (None: the
    automatic host tier, 0: none) and ``enable_block_reuse``; the executor's ``max_num_tokens``
    (None: no token budget), ``stall_limit`` and ``enable_chunked_prefill``; the ``admission``
    policy. Checked here; the cross checks (a pool of at least one page, the chunk budget) are
    the manager's and the Scheduler's, when built."""

    geometry: KVGeometry
    quota_bytes: int
    max_seq_len: int
    max_batch_size: int
    page_index_policy: str = "clamped"
    host_cache_size: int | None = None
    enable_block_reuse: bool = True
    max_num_tokens: int | None = 8192
    stall_limit: int = DEFAULT_STALL_LIMIT
    enable_chunked_prefill: bool = False
    admission: str | AdmissionPolicy = "none"

    def __post_init__(self) -> None:
        check_instance("geometry", self.geometry, KVGeometry)
        for name in ("quota_bytes", "max_seq_len", "max_batch_size", "stall_limit"):
            store_param(self, name)
        if self.max_num_tokens is not None:
            store_param(self, "max_num_tokens")
        if self.host_cache_size is not None:
            store_param(self, "host_cache_size")
        check_choice("page_index_policy", self.page_index_policy, WIDTH_POLICIES)
        check_bools(
            enable_block_reuse=self.enable_block_reuse,
            enable_chunked_prefill=self.enable_chunked_prefill,
        )
        make_admission(self.admission)  # its messages: a name it knows, or a policy

    def manager(self) -> KVCacheManager:
        """A fresh manager; the max_seq_len clamp is expected (no warning)."""
        return KVCacheManager.expecting_clamp(
            self.geometry,
            self.quota_bytes,
            self.max_seq_len,
            max_batch_size=self.max_batch_size,
            page_index_policy=self.page_index_policy,
            host_cache_size=self.host_cache_size,
            enable_block_reuse=self.enable_block_reuse,
        )

    def scheduler(self) -> Scheduler:
        """A fresh Scheduler over a fresh :meth:`manager`."""
        return Scheduler(
            self.manager(),
            admission=self.admission,
            max_num_tokens=self.max_num_tokens,
            max_batch_size=self.max_batch_size,
            stall_limit=self.stall_limit,
            chunked_prefill=self.enable_chunked_prefill,
        )
