"""Compute/communication interference on one GPU: how NCCL kernels and compute kernels slow each
other down when they run at the same time (FSDP's all-gathers under the forward, DDP's all-reduces
under the backward).

NCCL kernels are ordinary CUDA kernels: each channel is a thread block that holds an SM for the
whole collective and streams through HBM. Compute kernels running beside them get fewer SMs and
less memory bandwidth, and the NCCL blocks are scheduled behind the compute kernel's blocks, so both
run slower than alone. The model is two factors, applied by the coordinator and the network:

- `compute_slowdown`: a compute kernel that starts while an NCCL operation of its GPU is in flight
  takes this many times its alone duration;
- `nccl_slowdown`: while any member GPU of an NCCL operation runs compute, the operation's data
  moves this many times slower.

Fitted on kernel-level profiles of real training steps on 4x H200 (`data/h200/e2e/step_profiles/`,
`benchmarks/e2e/compare_step.py`): GEMMs entirely under an NCCL kernel took 1.38x (Llama 1.5B FSDP2)
and 1.50x (8B) their time in the same step when alone, GEMMs with no NCCL beside them 1.01x /
1.03x what the compute model predicts; all-gathers in those steps took 1.6-2.4x and
reduce-scatters 1.5-2.3x their alone time. Microbenchmarks of one GEMM or one elementwise kernel
against one collective (`data/h200/collectives/overlap/`) slow less (compute 1.0-1.3x, collectives 1.2-2.5x,
more beside long GEMMs): a training step overlaps a long run of mixed kernels, not one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSharing:
    """Slowdown factors for compute and NCCL work sharing one GPU (1.0 = no interference)."""

    compute_slowdown: float = 1.45
    """Duration factor of a compute kernel that starts while an NCCL operation of its GPU is in flight."""
    nccl_slowdown: float = 2.0
    """Rate divisor of an NCCL operation's data phase while any of its member GPUs runs compute."""
    by_op: tuple[tuple[str, float, float], ...] = ()
    """(operation, compute_slowdown, nccl_slowdown) for the network operations ("all_reduce", ...) whose
    factors differ from the two above."""
    kernel_gap_ns: int = 0
    """Extra time between two back-to-back compute kernels of a busy GPU in a training step, beyond
    what each kernel's estimated duration already holds (the compute model adds the *minimum* gap,
    10th percentile, per kernel; docs/coordinator.md "Kernel gap"). Not charged to a kernel
    launched onto an idle GPU."""

    def __post_init__(self) -> None:
        factors = [self.compute_slowdown, self.nccl_slowdown] + [f for _, c, n in self.by_op for f in (c, n)]
        if not all(f >= 1.0 for f in factors):
            raise ValueError(f"slowdown factors must be >= 1, got {self}")
        if self.kernel_gap_ns < 0:
            raise ValueError(f"kernel_gap_ns must be >= 0, got {self.kernel_gap_ns}")

    def compute_factor(self, op: str) -> float:
        """Duration factor of a compute kernel that starts while network operation `op` of its GPU is in flight."""
        return next((c for name, c, _ in self.by_op if name == op), self.compute_slowdown)

    def nccl_factors(self) -> dict[str, float]:
        """The operations whose `nccl_slowdown` differs from the default, with theirs."""
        return {name: n for name, _, n in self.by_op}


H200_SHARING = GpuSharing(kernel_gap_ns=1500, by_op=(("all_reduce", 1.23, 1.42),))
"""Fitted on H200 training steps (2026-11-21/22); used for every GPU until others are measured. The
default pair is FSDP2's all-gathers and reduce-scatters; DDP's all-reduces slow compute and are slowed
less: with 1.45 / 2.0 the 4-GPU DDP step's compute was 235.2 ms and its all-reduces 53.7 ms against
226.9 and 39.8 real (rank 0's profile, data/h200/e2e/step_profiles/llama_l1b_ddp4), with 1.2 / 1.35
225.6 and 38.2; 1.23 / 1.42 interpolates to the real pair. The
kernel gap is fitted on the unprofiled layer timeline of the 1.5B Llama on one GPU (backward per
layer 6.15 ms real, 6.01 ms simulated without it, 97 kernels; data/h200/e2e/timelines/); the profiles
put part of it in larger gaps than the compute model's minimum and part in kernels that run slower
in a step than alone (docs/coordinator.md "Kernel gap")."""

NO_SHARING = GpuSharing(compute_slowdown=1.0, nccl_slowdown=1.0)
"""Compute and communication as if each had the GPU to itself."""
