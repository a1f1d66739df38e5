"""Peak dense BF16 / FP8 matrix throughput and HBM bandwidth per device, from vendor datasheets.

Dense figures (no structured sparsity), per GPU (one OAM / SXM module). Each figure names the
datasheet it was read from and the datasheet's date. These were copied from the vendors'
published datasheets; the machine that wrote this table has no web access, so re-check a figure
against its URL before you quote it outside traceladder.

A device is found from the trace's ``deviceProperties[].name`` (``AMD Instinct MI300X``,
``NVIDIA H100 80GB HBM3``, ...), else from a GPU model the caller gives (a ladder's cluster),
else it is unknown and the roofline has no peak.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DevicePeak", "PEAKS", "find_device", "device_from_trace"]


@dataclass(frozen=True)
class DevicePeak:
    name: str
    bf16_tflops: float  # dense matrix BF16
    fp8_tflops: float  # dense matrix FP8
    hbm_tbps: float  # peak HBM bandwidth, TB/s (10^12 bytes/s)
    source: str  # the vendor datasheet
    source_date: str


PEAKS: dict[str, DevicePeak] = {
    p.name: p
    for p in (
        DevicePeak(
            "MI300X",
            1307.4,
            2614.9,
            5.3,
            "AMD Instinct MI300X accelerator data sheet, "
            "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf",
            "2023-12",
        ),
        DevicePeak(
            "MI325X",
            1307.4,
            2614.9,
            6.0,
            "AMD Instinct MI325X accelerator data sheet, "
            "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/product-briefs/instinct-mi325x-datasheet.pdf",
            "2024-10",
        ),
        DevicePeak(
            "MI350X",
            2307.0,
            4614.0,
            8.0,
            "AMD Instinct MI350X GPU data sheet, "
            "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/product-briefs/amd-instinct-mi350x-gpu-brochure.pdf",
            "2025-06",
        ),
        DevicePeak(
            "MI355X",
            2516.6,
            5033.2,
            8.0,
            "AMD Instinct MI355X GPU data sheet, "
            "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/product-briefs/amd-instinct-mi355x-gpu-brochure.pdf",
            "2025-06",
        ),
        DevicePeak(
            "H100",
            989.4,
            1978.9,
            3.35,
            "NVIDIA H100 Tensor Core GPU datasheet (SXM), "
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
            "2023-09",
        ),
        DevicePeak(
            "B200",
            2250.0,
            4500.0,
            8.0,
            "NVIDIA DGX B200 datasheet (per GPU: 1/8 of the system's dense figures), "
            "https://resources.nvidia.com/en-us-dgx-systems/dgx-b200-datasheet",
            "2024-03",
        ),
    )
}
# longest first, so "MI325X" is not read as a shorter name
_PATTERN = re.compile("|".join(sorted(map(re.escape, PEAKS), key=len, reverse=True)), re.IGNORECASE)


def find_device(text: str | None) -> DevicePeak | None:
    """The table's device named in ``text`` (a device name or a cluster's GPU model)."""
    if not text:
        return None
    m = _PATTERN.search(str(text))
    return PEAKS[m.group(0).upper()] if m else None


def device_from_trace(metadata: dict[str, Any], gpu_model: str | None = None) -> tuple[DevicePeak | None, str]:
    """(peak or None, how it was found): the trace's deviceProperties names, then ``gpu_model``."""
    props = metadata.get("deviceProperties")
    names = (
        [str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name")] if isinstance(props, list) else []
    )
    for name in names:
        found = find_device(name)
        if found:
            return found, f"deviceProperties name {name!r}"
    found = find_device(gpu_model)
    if found:
        return found, f"cluster GPU model {gpu_model!r}"
    seen = names[0] if names else (gpu_model or "none given")
    return None, f"unknown: no peak (device {seen!r} is not in the table)"
