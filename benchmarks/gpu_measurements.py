"""The paged KV path measured on a device; stores the figures and prints one JSON line.

Measures (kvlab.analysis.measurements): the per-step host-to-device copy of the page-index table for row
widths sized by max_seq_len 2048 (68 entries, the seed's clamp), 8192 (260, the one-line fix),
32k, 128k and 1M tokens at 32 tokens a page, and max_batch_size 1 to 2048; the read bandwidth of
a gather of pages through a shuffled row against a plain copy, for pages of 4 KiB to 1 MiB in a
1 GiB pool; the pool's allocation (torch.empty, synchronized) from 1 GiB to 0.9 of the free
memory (free_gpu_memory_fraction's default); on CUDA, the KV pool the creator's measurement
leaves after real weights (22 GiB), a warm-up peak (10 GiB) and MoE workspaces of 0 to 56 GiB,
each pool allocated for real (kvlab.core.memory.pool_vs_workspace, the issue-21470 scenario's KV
geometry). First, kvlab.core.paged_attention's check that paged attention through the table equals
attention over a contiguous cache on this device.

    python benchmarks/gpu_measurements.py            # CUDA: writes data/measurements/<device>.json
    python benchmarks/gpu_measurements.py --device cpu --quick [--out PATH]

On the CPU or with --quick nothing is stored unless --out names a file, so CPU or tiny-size
figures never pass for a GPU's.
Needs torch and kvlab only (run with PYTHONPATH set to the repository root).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from kvlab.analysis.measurements import (
    device_info,
    device_slug,
    page_index_copy,
    paged_read,
    pool_allocation,
    save_measurements,
)
from kvlab.core.memory import pool_vs_workspace
from kvlab.core.paged_attention import paged_vs_contiguous
from kvlab.run.rank_config import scenario_geometry
from kvlab.run.scenarios import load_scenario

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "data" / "measurements"
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
FULL = {
    "max_seq_lens": (2048, 8192, 32768, 131072, 1048576),
    "batch_sizes": (1, 8, 64, 512, 2048),
    "page_bytes": (4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB),
    "read_pool_bytes": GIB,
    "alloc_bytes": (GIB, 4 * GIB, 16 * GIB, 64 * GIB),
    "repeat": 20,
}
QUICK = {
    "max_seq_lens": (2048, 8192),
    "batch_sizes": (1, 8),
    "page_bytes": (4 * KIB, 64 * KIB),
    "read_pool_bytes": MIB,
    "alloc_bytes": (MIB, 4 * MIB),
    "repeat": 3,
}
FREE_FRACTION = 0.9
TOKENS_PER_BLOCK = 32
BYTES_PER_BLOCK = 64 * KIB  # the seed's page: 2048 B a token x 32 tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (tests), not stored")
    parser.add_argument(
        "--out",
        type=Path,
        help="where to store the JSON (default on CUDA: "
        "data/measurements/<device>.json; on the CPU or --quick: not stored)",
    )
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    start = time.perf_counter()
    info = device_info(args.device)
    check = paged_vs_contiguous(device=args.device)
    copies = page_index_copy(
        sizes["max_seq_lens"],
        sizes["batch_sizes"],
        device=args.device,
        tokens_per_block=TOKENS_PER_BLOCK,
        repeat=sizes["repeat"],
    )
    reads = paged_read(
        sizes["page_bytes"],
        pool_bytes=sizes["read_pool_bytes"],
        device=args.device,
        repeat=sizes["repeat"],
    )
    alloc_bytes = list(sizes["alloc_bytes"])
    if info["device_type"] == "cuda" and not args.quick:
        torch.cuda.empty_cache()  # the read pools' cached blocks count as used otherwise
        free, _ = torch.cuda.mem_get_info(torch.device(args.device))
        alloc_bytes.append(int(free * FREE_FRACTION) // BYTES_PER_BLOCK * BYTES_PER_BLOCK)
    allocations = pool_allocation(alloc_bytes, bytes_per_block=BYTES_PER_BLOCK, device=args.device)
    shrink = []
    if info["device_type"] == "cuda":
        sc = load_scenario("issue-21470")
        workspaces = (0, 8 * GIB) if args.quick else tuple(w * GIB for w in (0, 8, 16, 28, 40, 56))
        shrink = pool_vs_workspace(
            scenario_geometry(sc),
            (2 if args.quick else 22) * GIB,
            workspaces,
            max_seq_len=sc.parameters.configured_max_seq_len,
            activation_bytes=(0 if args.quick else 10 * GIB),
            device=args.device,
        )
    results = {
        "device": info,
        "paged_attention_check": {
            "max_abs_error": check["max_abs_error"],
            "sequences": len(check["pages"]),
        },
        "page_index_copy": copies,
        "paged_read": reads,
        "pool_allocation": allocations,
        "pool_vs_workspace": shrink,
        "seconds": round(time.perf_counter() - start, 1),
    }
    out = args.out
    if out is None and info["device_type"] == "cuda" and not args.quick:
        out = MEASUREMENTS / f"{device_slug(info['name'])}.json"
    if out is not None:
        save_measurements(results, out)
        out = out.resolve()
        out = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    largest = max(sizes["batch_sizes"])
    print(
        json.dumps(
            {
                "benchmark": "gpu_measurements",
                "device": info["name"],
                "torch": info["torch"],
                "stored": str(out)
                if out is not None
                else "not stored (CPU or --quick figures; pass --out)",
                "paged_attention_max_abs_error": check["max_abs_error"],
                f"table_copy_us_at_batch_{largest}": {
                    r["width"]: r["median_us"] for r in copies if r["max_batch_size"] == largest
                },
                "gather_vs_copy_by_page_bytes": {
                    r["page_bytes"]: r["gather_vs_copy"] for r in reads
                },
                "alloc_ms_by_bytes": {r["nbytes"]: r["median_ms"] for r in allocations},
                "pool_blocks_by_workspace_gib": {
                    r["workspace_bytes"] // GIB: r["pool_blocks"] for r in shrink
                },
                "seconds": results["seconds"],
            }
        )
    )


if __name__ == "__main__":
    main()
