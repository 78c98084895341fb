"""The single-GPU repro of issue #21470 (the seed's RTX 5080): a 4 MiB pool of the seed's
geometry, max_seq_len 8192; ``KVCache.resize`` to 8192 tokens raises under the clamped row (256
entries needed, 68 available) and returns False under the configured one (260 entries, 64 pages),
after which the seed retried 32 tokens. :func:`run_repro` does that on a real manager.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.analysis.presets import seed_geometry
from kvlab.core.arith import div_ceil
from kvlab.core.checks import check_choice, check_float, check_instance, check_int, check_sequence
from kvlab.core.geometry import KVGeometry
from kvlab.core.kv_cache import PageIndexTooShort
from kvlab.core.manager import KVCacheManager
from kvlab.core.memory import MIB, readout_mib
from kvlab.core.page_index import WIDTH_POLICIES, PageIndexTable, max_blocks_per_seq
from kvlab.run.progress import progress


@dataclass(frozen=True)
class ReproResult:
    """What one resize did, with every number that explains it."""

    policy: str
    pool_bytes: int
    context: int
    bytes_per_token: int
    bytes_per_token_formula: str
    tokens_per_block: int
    total_blocks: int
    capacity_tokens: int  # the clamped max_seq_len: the longest sequence the pool holds
    configured_max_seq_len: int
    max_blocks_per_seq: int  # entries in the page-index row
    entries_needed: int  # ceil(context / tokens_per_block)
    page_index_bytes: int
    outcome: str  # "ok" (True), "refused" (False), "crash" (PageIndexTooShort)
    error: str | None  # the exception's message on "crash"
    state_preserved: bool | None  # after "refused": capacity, pages and row unchanged
    retry_tokens: int
    retry_ok: bool | None  # after "refused": did the smaller manual retry succeed?
    free_blocks_after: int

    def explain(self) -> str:
        """The arithmetic from bytes per token to the outcome, a step a line."""
        tpb = self.tokens_per_block
        clamped = self.capacity_tokens < self.configured_max_seq_len
        width_len = (
            self.capacity_tokens if self.policy == "clamped" else self.configured_max_seq_len
        )
        raw = div_ceil(width_len + 1, tpb)
        clamp = f"clamped to {self.capacity_tokens:,}" if clamped else "not clamped"
        return "\n".join(
            [
                f"bytes per token : {self.bytes_per_token_formula}",
                f"pool            : {self.pool_bytes:,} B / {self.bytes_per_token:,} B = "
                f"{self.pool_bytes // self.bytes_per_token:,} tokens -> "
                f"{self.total_blocks:,} blocks of {tpb} tokens ({self.total_blocks * tpb:,} tokens)",
                f"max_seq_len     : configured {self.configured_max_seq_len:,}, {clamp}",
                f"page-index row  : [{self.policy}] ceil(({width_len:,} + 1) / {tpb}) = {raw:,} -> "
                f"{self.max_blocks_per_seq:,} entries (table {self.page_index_bytes:,} B)",
                f"request         : {self.context:,} tokens -> ceil({self.context:,} / {tpb}) = "
                f"{self.entries_needed:,} entries",
                f"outcome         : {self.verdict}",
            ]
        )

    @property
    def verdict(self) -> str:
        """The outcome in one sentence, with the numbers."""
        need, have = self.entries_needed, self.max_blocks_per_seq
        if self.outcome == "crash":
            return (
                f"ValueError: {self.error} - {self.context:,} tokens need {need:,} page-index "
                f"entries, the row has {have:,}"
            )
        if self.outcome == "refused":
            return (
                f"resize returned False - {need:,} pages needed, {self.total_blocks:,} exist "
                f"({self.capacity_tokens:,} tokens); state preserved: {self.state_preserved}; "
                f"{self.retry_tokens}-token retry {'succeeded' if self.retry_ok else 'failed'}"
            )
        return f"allocated - {need:,} of {self.total_blocks:,} pages, row of {have:,} entries"


def run_repro(
    pool_mib: float = 4,
    context: int = 8192,
    policy: str = "clamped",
    tokens_per_block: int = 32,
    max_seq_len: int = 8192,
    retry_tokens: int = 32,
    geometry: KVGeometry | None = None,
    device="cpu",
    host_cache_size: int | None = None,
) -> ReproResult:
    """Build a manager on a real pool of ``pool_mib`` MiB and resize one cache to ``context``
    (``host_cache_size``, the tier below the GPU, changes no figure here)."""
    pool_mib = check_float("pool_mib", pool_mib, low=0.0, high=1 << 20, low_open=True)
    context = check_int("context", context, low=1, high=1 << 30)
    retry_tokens = check_int("retry_tokens", retry_tokens, low=1, high=1 << 30)
    geometry = _geometry(geometry, tokens_per_block)
    if int(pool_mib * MIB) < geometry.bytes_per_block:
        raise ValueError(
            f"pool_mib={pool_mib:g} holds no page: one page of {geometry.tokens_per_block} "
            f"tokens takes {geometry.bytes_per_block} B; accepted: pool_mib >= "
            f"{geometry.bytes_per_block / MIB:g}"
        )
    mgr = KVCacheManager.expecting_clamp(
        geometry,
        quota_bytes=int(pool_mib * MIB),
        max_seq_len=max_seq_len,
        max_batch_size=1,
        page_index_policy=policy,
        device=device,
        host_cache_size=host_cache_size,
    )
    cache = mgr.create_cache("repro")
    row_before = cache.page_indices.clone()
    error = state_preserved = retry_ok = None
    try:
        outcome = "ok" if cache.resize(context) else "refused"
    except PageIndexTooShort as exc:
        outcome, error = "crash", str(exc)
    if outcome == "refused":
        state_preserved = (
            cache.capacity == 0
            and cache.num_blocks == 0
            and mgr.free_blocks == mgr.total_blocks
            and bool((cache.page_indices == row_before).all())
        )
        retry_ok = cache.resize(retry_tokens)
    return ReproResult(
        policy=policy,
        pool_bytes=mgr.quota_bytes,
        context=context,
        bytes_per_token=geometry.bytes_per_token,
        bytes_per_token_formula=geometry.bytes_per_token_formula(),
        tokens_per_block=geometry.tokens_per_block,
        total_blocks=mgr.total_blocks,
        capacity_tokens=mgr.max_seq_len,
        configured_max_seq_len=mgr.configured_max_seq_len,
        max_blocks_per_seq=mgr.max_blocks_per_seq,
        entries_needed=geometry.blocks_for_tokens(context),
        page_index_bytes=mgr.page_index.nbytes,
        outcome=outcome,
        error=error,
        state_preserved=state_preserved,
        retry_tokens=retry_tokens,
        retry_ok=retry_ok,
        free_blocks_after=mgr.free_blocks,
    )


def _geometry(geometry: KVGeometry | None, tokens_per_block: int) -> KVGeometry:
    if geometry is not None and not isinstance(geometry, KVGeometry):
        raise TypeError(f"geometry must be a KVGeometry or None (the seed's), got {geometry!r:.60}")
    return geometry or seed_geometry(tokens_per_block)


def no_pool_reason(
    pool_mib: float, tokens_per_block: int = 32, geometry: KVGeometry | None = None
) -> str | None:
    """None when a pool of ``pool_mib`` MiB holds a page; otherwise why not, with the numbers."""
    geometry = _geometry(geometry, tokens_per_block)
    pool_mib = check_float("pool_mib", pool_mib, low=0.0, high=1 << 20)
    quota = int(pool_mib * MIB)
    if geometry.blocks_in(quota) > 0:
        return None
    return (
        f"no pool: {quota:,} B ({readout_mib(pool_mib)} MiB) holds no page - one page of "
        f"{geometry.tokens_per_block:,} tokens x {geometry.bytes_per_token:,} B takes "
        f"{geometry.bytes_per_block:,} B"
    )


def page_index_price(max_seq_lens, batch_sizes, tokens_per_block: int = 32) -> list:
    """Bytes of real ``PageIndexTable`` objects for each row-sizing max_seq_len and
    max_batch_size: one dict a pair (max_seq_len, width, max_batch_size, slots, nbytes)."""
    max_seq_lens = check_sequence("max_seq_lens", max_seq_lens, check_int, low=1, high=1 << 30)
    batch_sizes = check_sequence("batch_sizes", batch_sizes, check_int, low=1, high=1 << 20)
    rows = []
    for seq_len in max_seq_lens:
        width = max_blocks_per_seq(seq_len, tokens_per_block)
        for batch in batch_sizes:
            table = PageIndexTable(batch, width)
            rows.append(
                dict(
                    max_seq_len=seq_len,
                    width=width,
                    max_batch_size=batch,
                    slots=table.slots,
                    nbytes=table.nbytes,
                )
            )
            del table
    return rows


def sweep_repro(pool_mibs, contexts, policy: str = "clamped", tokens_per_block: int = 32) -> list:
    """``run_repro`` over a grid, max_seq_len equal to the context (as in the seed); cells whose
    pool holds no page are skipped."""
    results = []
    check_choice("policy", policy, WIDTH_POLICIES)
    pool_mibs = check_sequence(
        "pool_mibs", pool_mibs, check_float, low=0.0, high=1 << 20, low_open=True
    )
    contexts = check_sequence("contexts", contexts, check_int, low=1, high=1 << 30)
    cells = progress(total=len(pool_mibs) * len(contexts), desc="repro sweep", unit="cell")
    for context in contexts:
        for pool_mib in pool_mibs:
            cells.update()
            if no_pool_reason(pool_mib, tokens_per_block) is None:
                results.append(
                    run_repro(pool_mib, context, policy, tokens_per_block, max_seq_len=context)
                )
    cells.close()
    return results


def traceback_chain(exc: BaseException) -> str:
    """The calls an exception went through, one a line, innermost last, paths shortened to the
    package: the shape of the seed's chain from the scheduler to the page-index check."""
    import traceback
    from pathlib import PurePath

    lines: list[str] = []
    for frame, lineno in traceback.walk_tb(check_instance("exc", exc, BaseException).__traceback__):
        code = frame.f_code
        name = getattr(code, "co_qualname", code.co_name)  # qualified names: Python 3.11+
        parts = PurePath(code.co_filename).parts
        where = (
            "/".join(parts[parts.index("kvlab") :])
            if "kvlab" in parts
            else "notebook cell"
            if code.co_filename.startswith("<") or "ipykernel" in code.co_filename
            else PurePath(code.co_filename).name
        )
        lines.append(f"{'  -> ' if lines else ''}{name}  ({where}, line {lineno})")
    numbers = ""
    if isinstance(exc, PageIndexTooShort):
        numbers = f"  [needed {exc.needed_entries} entries, the row has {exc.available_entries}]"
    lines.append(f"{'  -> ' if lines else ''}{type(exc).__name__}: {exc}{numbers}")
    return "\n".join(lines)
