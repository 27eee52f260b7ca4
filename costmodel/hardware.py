"""GPU presets: peak dense FLOP/s per precision, HBM size and bandwidth, links.

Figures are the vendors' public spec-sheet numbers for dense (non-sparse) math:
- V100 SXM2 32GB: NVIDIA V100 datasheet (125 TFLOP/s fp16 tensor, 900 GB/s HBM2,
  NVLink2 300 GB/s total = 150 GB/s per direction); DGX-1 class 100 Gb/s EDR NIC.
- A100 SXM4 40/80GB: NVIDIA A100 datasheet (312 TFLOP/s fp16/bf16, 1,555 / 2,039 GB/s,
  NVLink3 600 GB/s total = 300 GB/s per direction); DGX A100: one 200 Gb/s HDR NIC per GPU.
- H100 SXM5 80GB: NVIDIA H100 datasheet (989 TFLOP/s bf16, 1,979 TFLOP/s fp8 dense,
  3.35 TB/s, NVLink4 900 GB/s total); DGX H100: one 400 Gb/s NDR NIC per GPU.
- H200 SXM 141GB: NVIDIA H200 datasheet (same compute as H100, 4.8 TB/s, NVLink 900 GB/s).
- B200 180GB (HGX B200): NVIDIA Blackwell datasheet (2.25 PFLOP/s bf16, 4.5 PFLOP/s fp8
  dense, 7.7 TB/s, NVLink5 1.8 TB/s total); 400 Gb/s ConnectX-7 per GPU.
- MI300X 192GB: AMD Instinct MI300X datasheet (1,307 TFLOP/s bf16/fp16, 2,615 TFLOP/s fp8
  dense, 5.3 TB/s, 896 GB/s aggregate Infinity Fabric = 448 GB/s per direction); 400 Gb/s NIC.

"fp32" entries are TF32 tensor-core peaks (what cuBLAS/XLA use for fp32 matmuls by default;
V100 has no TF32, so its plain fp32 figure). fp32 is for imported kernel rows only: training
precision is fp16, bf16 or fp8.

Fused attention (`attention_efficiency`, the fraction of the dense 16-bit peak a FlashAttention
kernel reaches, forward and backward): 0.45 by default (the analytical prior of every attention op,
ops.BASE_EFFICIENCY). On Hopper (H100, H200) FlashAttention-2, the kernel PyTorch's SDPA runs,
reaches about 35 % of peak (FlashAttention-3 paper, Shah et al. 2024) where on the A100 it reaches
about 62 % (FlashAttention-2 paper, Dao 2023: ~190-200 of 312 TFLOP/s fwd+bwd, causal, head dim
128); the Hopper presets scale the 0.45 prior by that ratio: 0.45 x 0.35 / 0.62 = 0.25.
FlashAttention-3 or cuDNN's fused attention reach more on Hopper: set attention_efficiency.

Units: FLOP/s, bytes, bytes/s. Memory sizes are binary (an "80 GB" A100 has 80 GiB; the H200 exposes
~140 GiB of its 141 GB). NVLink figures are per GPU, per direction.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from vtrain.costmodel.units import GB, GiB, TB


DEFAULT_ATTENTION_EFFICIENCY = 0.45  # fraction of the 16-bit peak an attention kernel reaches
HOPPER_FLASH_ATTENTION_2_EFFICIENCY = 0.25  # 0.45 x 0.35 / 0.62 (see the module docstring)


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator model. All rates are peak, dense, per GPU."""

    name: str
    peak_flops: dict[str, float]  # precision -> FLOP/s (dense tensor-core math)
    hbm_bytes: float  # bytes of device memory
    hbm_bw: float  # bytes/s
    nvlink_GBps: float  # GB/s per direction, per GPU, inside a node
    nic_Gbps: float  # Gb/s per GPU across nodes
    gpus_per_node: int = 8
    aliases: tuple[str, ...] = field(default=())
    attention_efficiency: float = DEFAULT_ATTENTION_EFFICIENCY  # fused attention / dense 16-bit peak

    def flops(self, precision: str) -> float:
        """Peak dense FLOP/s for `precision` (raises KeyError if unsupported)."""
        return self.peak_flops[precision]


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        GpuSpec("v100", {"fp16": 125 * TB, "fp32": 15.7 * TB}, 32 * GiB, 900 * GB, 150, 100, 8, ("v100-32gb", "v100-sxm2")),
        GpuSpec("a100-40gb", {"fp16": 312 * TB, "bf16": 312 * TB, "fp32": 156 * TB}, 40 * GiB, 1555 * GB, 300, 200, 8, ("a100-sxm4-40gb",)),
        GpuSpec("a100-80gb", {"fp16": 312 * TB, "bf16": 312 * TB, "fp32": 156 * TB}, 80 * GiB, 2039 * GB, 300, 200, 8, ("a100", "a100-sxm4-80gb")),
        GpuSpec("h100-sxm", {"fp16": 989 * TB, "bf16": 989 * TB, "fp8": 1979 * TB, "fp32": 494 * TB}, 80 * GiB, 3350 * GB, 450, 400, 8, ("h100", "h100-80gb"),
                HOPPER_FLASH_ATTENTION_2_EFFICIENCY),
        GpuSpec("h200", {"fp16": 989 * TB, "bf16": 989 * TB, "fp8": 1979 * TB, "fp32": 494 * TB}, 140 * GiB, 4800 * GB, 450, 400, 8, ("h200-sxm",),
                HOPPER_FLASH_ATTENTION_2_EFFICIENCY),
        GpuSpec("b200", {"fp16": 2250 * TB, "bf16": 2250 * TB, "fp8": 4500 * TB, "fp32": 1100 * TB}, 180 * GiB, 7700 * GB, 900, 400, 8, ()),
        GpuSpec("mi300x", {"fp16": 1307 * TB, "bf16": 1307 * TB, "fp8": 2615 * TB, "fp32": 654 * TB}, 192 * GiB, 5300 * GB, 448, 400, 8, ()),
        # Not a GPU: nominal figures for a small x86 host (2 cores, AVX2 FMA, ~20 GB/s DRAM) so
        # that kernels profiled on the CPU (`vtrain profile --device cpu`) can be fitted and tested.
        GpuSpec("cpu", {"fp32": 0.2 * TB, "bf16": 0.2 * TB, "fp16": 0.2 * TB}, 24 * GiB, 20 * GB, 20, 10, 1, ("host",)),
    ]
}

_ALIASES = {alias: g.name for g in GPUS.values() for alias in g.aliases}


def gpu_names() -> list[str]:
    """Canonical preset names."""
    return list(GPUS)


def lookup_gpu(name: str) -> GpuSpec | None:
    """The preset for `name` (case-insensitive, accepts aliases), or None."""
    key = str(name).strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    return GPUS.get(key)
