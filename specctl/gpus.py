"""The built-in GPU catalog: what `hardware.gpu` may name, with the memory the checks size against.

Memory is the usable device memory as nvidia-smi reports it, in GiB (nominal marketing sizes in
GB differ); compute capability decides engine defaults such as attention backends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    """One GPU type: catalog key, marketing name, memory and architecture."""

    key: str
    name: str
    memory_gib: float
    architecture: str
    compute_capability: str
    nvlink: bool


GPUS: dict[str, GpuModel] = {
    g.key: g
    for g in (
        GpuModel(
            "rtx-pro-6000-blackwell", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 95.6, "blackwell", "12.0", False
        ),
        GpuModel("b200", "NVIDIA B200", 179.1, "blackwell", "10.0", True),
        GpuModel("b300", "NVIDIA B300", 268.0, "blackwell-ultra", "10.3", True),
        GpuModel("gb200", "NVIDIA GB200", 185.0, "blackwell", "10.0", True),
        GpuModel("h100", "NVIDIA H100 80GB HBM3", 79.6, "hopper", "9.0", True),
        GpuModel("h200", "NVIDIA H200", 140.4, "hopper", "9.0", True),
        GpuModel("a100-80gb", "NVIDIA A100 80GB", 79.2, "ampere", "8.0", True),
        GpuModel("l40s", "NVIDIA L40S", 44.4, "ada", "8.9", False),
        # the reference engine runs on the CPU; its "memory" is what the tiny models may use
        GpuModel("cpu", "CPU (reference engine)", 16.0, "cpu", "0.0", False),
    )
}
