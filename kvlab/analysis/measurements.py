"""Timings of the paged KV path on a device (CUDA events on a GPU, the wall clock on the CPU),
stored as JSON: the page-index table's per-step copy (the cost the one-line fix raises), a paged
gather against a plain copy, and a cold ``torch.empty`` of the pool. Bandwidths in decimal GB/s.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import torch

from kvlab.analysis.repro import page_index_price
from kvlab.core.checks import MAX_COUNT, check_instance, check_int
from kvlab.core.files import FileFormatError, load_json
from kvlab.core.page_index import PageIndexTable
from kvlab.core.paths import DATA_DIR
from kvlab.core.pool import PagePool, resolve_device

GB = 1e9  # bandwidths in decimal GB/s, as memory bandwidths are quoted


def device_info(device="cpu") -> dict:
    """What the figures were taken on: name, device_type, driver, cuda, torch, date (UTC); on
    CUDA also compute_capability, memory_bytes and multiprocessors. No host name."""
    dev = resolve_device(device)
    info: dict[str, object] = {
        "name": platform.processor() or platform.machine(),
        "device_type": dev.type,
        "driver": None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "date": datetime.now(UTC).date().isoformat(),
    }
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        info.update(
            name=props.name,
            driver=_nvidia_driver(),
            compute_capability=f"{props.major}.{props.minor}",
            memory_bytes=props.total_memory,
            multiprocessors=props.multi_processor_count,
        )
    return info


def _nvidia_driver():
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0] if out else None


def device_slug(name: str) -> str:
    """File-name form of a device name: "NVIDIA H200" -> "h200"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-") or "device"


def _ints(name: str, values, low: int, high: int = MAX_COUNT) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise TypeError(f"{name} must be a non-empty sequence of ints, got {values!r}")
    return [check_int(f"{name}[{i}]", v, low=low, high=high) for i, v in enumerate(values)]


def _synchronize(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _time_device(fn: Callable[[], object], dev: torch.device, repeat: int) -> list[float]:
    """Seconds of each of ``repeat`` calls after one warm-up."""
    fn()
    _synchronize(dev)
    samples = []
    for _ in range(repeat):
        if dev.type == "cuda":
            stream = torch.cuda.current_stream(dev)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            fn()
            end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return samples


def _figure(value: float) -> float:
    """A measured figure to 4 significant digits (more would be noise)."""
    return float(f"{value:.4g}")


def _summary(prefix: str, samples: list[float], nbytes: int) -> dict:
    median = statistics.median(samples)
    return {
        f"{prefix}median_us": _figure(median * 1e6),
        f"{prefix}min_us": _figure(min(samples) * 1e6),
        f"{prefix}gb_per_s": _figure(nbytes / median / GB),
    }


def page_index_copy(
    max_seq_lens: Sequence[int],
    batch_sizes: Sequence[int],
    *,
    tokens_per_block: int = 32,
    device="cpu",
    repeat: int = 20,
) -> list[dict]:
    """The pinned page-index table's ``non_blocking`` copy to the device, as the executor does
    each step, for each (row-sizing max_seq_len, max_batch_size): one dict a pair."""
    seq_lens = _ints("max_seq_lens", max_seq_lens, low=1, high=1 << 30)
    batches = _ints("batch_sizes", batch_sizes, low=1, high=1 << 20)
    repeat = check_int("repeat", repeat, low=1, high=10_000)
    dev = resolve_device(device)
    rows = []
    for row in page_index_price(seq_lens, batches, tokens_per_block):
        host = PageIndexTable(row["max_batch_size"], row["width"], pin_memory=dev.type == "cuda")
        target = torch.empty(host.table.shape, dtype=host.table.dtype, device=dev)
        samples = _time_device(partial(target.copy_, host.table, non_blocking=True), dev, repeat)
        rows.append({**row, **_summary("", samples, row["nbytes"])})
    return rows


def paged_read(
    page_bytes: Sequence[int], *, pool_bytes: int, device="cpu", repeat: int = 20, seed: int = 0
) -> list[dict]:
    """A gather (``index_select`` of 8-byte words) of every page of a ``pool_bytes`` pool through
    a shuffled row against a plain copy of the same bytes: one dict a page size."""
    sizes = _ints("page_bytes", page_bytes, low=8)
    pool_bytes = check_int("pool_bytes", pool_bytes, low=max(sizes), high=MAX_COUNT)
    repeat = check_int("repeat", repeat, low=1, high=10_000)
    seed = check_int("seed", seed, low=0, high=(1 << 63) - 1)
    bad = [s for s in sizes if s % 8]
    if bad:
        raise ValueError(
            f"page_bytes must be multiples of 8 (the gather moves 8-byte words), got {bad}"
        )
    dev = resolve_device(device)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for size in sizes:
        pool = PagePool(pool_bytes // size, size, dev)
        row = torch.randperm(pool.num_blocks, generator=generator).to(torch.int32)
        index = row.to(dev)
        source = pool.storage.view(torch.int64)
        out = torch.empty_like(source)
        gather = _time_device(partial(torch.index_select, source, 0, index, out=out), dev, repeat)
        copy = _time_device(partial(out.copy_, source), dev, repeat)
        result = {
            "page_bytes": size,
            "num_pages": pool.num_blocks,
            "nbytes": pool.nbytes,
            **_summary("gather_", gather, pool.nbytes),
            **_summary("copy_", copy, pool.nbytes),
        }
        result["gather_vs_copy"] = _figure(statistics.median(copy) / statistics.median(gather))
        rows.append(result)
    return rows


def pool_allocation(
    pool_bytes: Sequence[int], *, bytes_per_block: int = 65536, device="cpu", repeat: int = 3
) -> list[dict]:
    """Wall time of a cold ``torch.empty`` of the pool's uint8 storage, synchronized (the
    allocator's cache emptied first, as at start-up): one dict a size."""
    sizes = _ints("pool_bytes", pool_bytes, low=1)
    bytes_per_block = check_int("bytes_per_block", bytes_per_block, low=1, high=min(sizes))
    repeat = check_int("repeat", repeat, low=1, high=1000)
    dev = resolve_device(device)
    rows = []
    for size in sizes:
        num_blocks = size // bytes_per_block
        samples = []
        for _ in range(repeat):
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            _synchronize(dev)
            t0 = time.perf_counter()
            storage = torch.empty((num_blocks, bytes_per_block), dtype=torch.uint8, device=dev)
            _synchronize(dev)
            samples.append(time.perf_counter() - t0)
            del storage
        rows.append(
            {
                "nbytes": num_blocks * bytes_per_block,
                "num_blocks": num_blocks,
                "bytes_per_block": bytes_per_block,
                "median_ms": _figure(statistics.median(samples) * 1e3),
                "min_ms": _figure(min(samples) * 1e3),
            }
        )
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def save_measurements(results: Mapping, path) -> Path:
    """Write ``results`` as indented JSON (parent folders created); returns the path."""
    if not isinstance(results, Mapping):
        raise TypeError(f"results must be a mapping, got {type(results).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")
    return path


MEASUREMENTS_DIR = DATA_DIR / "measurements"
MAX_MEASUREMENTS_BYTES = 16 << 20  # a file of device_info and benchmark figures: kilobytes


def load_measurements(path) -> dict:
    """Results written by :func:`save_measurements`: a path, or a name under data/measurements."""
    check_instance("path", path, (str, os.PathLike))
    if isinstance(path, str) and "/" not in path and not path.endswith(".json"):
        known = sorted(p.stem for p in MEASUREMENTS_DIR.glob("*.json"))
        if path not in known:
            raise ValueError(
                f"no measurements named {path!r}; known: {known} (path takes one of "
                "these names, or a .json file's path)"
            )
        path = MEASUREMENTS_DIR / f"{path}.json"
    results = load_json(path, "measurements", MAX_MEASUREMENTS_BYTES)
    if not isinstance(results, dict):
        raise FileFormatError(f"{path} does not hold a JSON object of measurements")
    return results


def measured_on(info: Mapping) -> str:
    """ "measured on NAME (driver ..., CUDA ..., torch ..., date)" from ``device_info``."""
    check_instance("info", info, Mapping)
    missing = [key for key in ("name", "torch", "date") if key not in info]
    if missing:
        raise ValueError(
            f"info must hold the keys name, torch and date (device_info's), missing {missing}"
        )
    parts = [
        f"driver {info['driver']}" if info.get("driver") else None,
        f"CUDA {info['cuda']}" if info.get("cuda") else None,
        f"torch {info['torch']}",
        info["date"],
    ]
    return f"measured on {info['name']} ({', '.join(p for p in parts if p)})"
