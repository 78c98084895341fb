"""GPU presets for ``kvlab plan``: the total memory each reports, and its source.
``KvCacheCreator._cal_max_memory`` starts from ``torch.cuda.mem_get_info``'s total (docs/REFERENCE.md
§1): the H200's is measured so; the others are nvidia-smi's (give ``--gpu-gib`` for an exact plan).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.core.memory import GIB, MIB

MEASURED = "measured: torch.cuda.mem_get_info's total"
NVIDIA_SMI = "nvidia-smi's total; torch.cuda.mem_get_info reports about 0.5-0.9 GiB less"
ASSUMED = "assumed by issue #21470's scenario"


@dataclass(frozen=True)
class GpuPreset:
    """A board's total memory (bytes), its name and where the total comes from."""

    total_bytes: int
    title: str
    source: str

    @property
    def gib(self) -> float:
        return self.total_bytes / GIB

    def describe(self) -> str:
        return f"{self.title}: {self.gib:,.2f} GiB ({self.source})"


GPUS: dict[str, GpuPreset] = {
    "rtx-5080": GpuPreset(
        16303 * MIB, "GeForce RTX 5080 16 GB GDDR7 (the seed's repro)", NVIDIA_SMI
    ),
    "a100-80gb": GpuPreset(81920 * MIB, "A100 SXM 80 GB HBM2e", NVIDIA_SMI),
    "h100-80gb": GpuPreset(81559 * MIB, "H100 SXM 80 GB HBM3", NVIDIA_SMI),
    "h200": GpuPreset(150_109_880_320, "H200 SXM 141 GB HBM3e", MEASURED),
    "b200": GpuPreset(183359 * MIB, "B200 192 GB HBM3e (179 GiB usable)", NVIDIA_SMI),
    "gb300": GpuPreset(round(268.0 * GIB), "GB300 288 GB HBM3e", ASSUMED),
}
