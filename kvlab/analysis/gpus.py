"""GPU presets for ``kvlab plan``: the total memory each reports, in bytes.

``KvCacheCreator`` starts from ``torch.cuda.mem_get_info``'s total. The H200's is measured
(150,109,880,320 B = 139.80 GiB on an H200 with driver 580.159.04, 2026-12-03; nvidia-smi says
143,771 MiB there, about 0.6 GiB more). The others are nvidia-smi's totals for the common boards,
so they may be that much high; GB300 is what kvlab's issue-21470 scenario assumes (268.0 GiB of
its 288 GB, data/scenarios/issue_21470_16x_gb300.yaml). Any other GPU: pass its memory in GiB.
"""

from __future__ import annotations

from typing import Dict, Tuple

from kvlab.core.memory import GIB, MIB

#: name -> (total bytes, what it is)
GPUS: Dict[str, Tuple[int, str]] = {
    "rtx-5080": (16303 * MIB, "GeForce RTX 5080, 16 GB GDDR7 (the seed's repro)"),
    "a100-80gb": (81920 * MIB, "A100 SXM 80 GB HBM2e"),
    "h100-80gb": (81559 * MIB, "H100 SXM 80 GB HBM3"),
    "h200": (150_109_880_320, "H200 SXM 141 GB HBM3e (torch.cuda.mem_get_info's total, measured)"),
    "b200": (183359 * MIB, "B200 180 GB HBM3e"),
    "gb300": (round(268.0 * GIB), "GB300 288 GB HBM3e, as issue #21470's scenario assumes"),
}


__all__ = ["GPUS"]
