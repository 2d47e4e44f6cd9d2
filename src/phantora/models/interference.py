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
  moves this many times slower;
- held SMs: an NCCL kernel takes its SMs (one thread block per channel) from the moment its stream
  reaches it, also while it spins waiting for the other members to arrive. A GEMM or attention kernel
  that starts then runs on the SMs left: `sm_count / (sm_count - channels)` times as long. Memory-bound
  kernels need fewer SMs than the GPU has to saturate HBM and are not slowed by it.

A GPU's factors are in its profile (specs/<gpu>/sharing.json), written by benchmarks/collectives/fit_sharing.py
from kernel-level profiles of real training steps on 4x H200 (data/h200/e2e/step_profiles): compute kernels wholly
under FSDP2's all-gathers and reduce-scatters took 1.38x their twins' time alone in the same step (GEMMs 1.47x),
under DDP's all-reduces 1.29x (`by_op`); the collectives beside compute took 1.4-1.7x the network model's time
alone, their waits for late peers included. Microbenchmarks of one GEMM or one elementwise kernel against one
collective (data/h200/collectives/overlap) slow less (compute 1.0-1.3x, collectives 1.2-2.5x): a training step
overlaps a long run of mixed kernels, not one. The kernel gap makes the 1.5B Llama's backward layer on one GPU
(data/h200/e2e/timelines) take as long as measured: part of it is in larger gaps than the compute model's minimum
and part in kernels that run slower in a step than alone (docs/coordinator.md "Kernel gap").

Held SMs: NCCL's kernels for every large collective in the TorchTitan profiles of
data/h200/e2e/frameworks/profiles have 24 blocks of 103,808 B of shared memory (read by the same fit), and the GEMMs
beside them (cuBLAS's persistent nvjet kernels, one 188-213 KB block per SM) cannot share an SM with one. The same
GEMM took 1.22-1.24 ms alone and 1.42-1.45 ms while an all-gather or reduce-scatter of its GPU waited for a
late peer (132/108 = 1.22); docs/models/sharing.md. A send/recv's kernel holds its peer's point-to-point channels
the same way (`p2p_channels_per_peer`: 16 blocks of the same shared memory per peer in every profile): in the
pipeline-parallel profiles a GEMM beside a waiting send/recv took 1.13-1.27x its time alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSharing:
    """Slowdown factors for compute and NCCL work sharing one GPU (1.0 = no interference)."""

    compute_slowdown: float = 1.0
    """Duration factor of a compute kernel that starts while an NCCL operation of its GPU is in flight."""
    nccl_slowdown: float = 1.0
    """Rate divisor of an NCCL operation's data phase while any of its member GPUs runs compute."""
    by_op: tuple[tuple[str, float, float], ...] = ()
    """(operation, compute_slowdown, nccl_slowdown) for the network operations ("all_reduce", ...) whose
    factors differ from the two above."""
    nccl_channels: int = 0
    """SMs a large NCCL kernel holds: its channels, one thread block each (0: none held)."""
    p2p_channels_per_peer: int = 0
    """SMs a point-to-point NCCL kernel (a send/recv pair) holds for its peer: NCCL's channels per peer, one thread
    block each (0: none held)."""
    sm_count: int = 0
    """The GPU's SMs (its spec's `sm_count`; set when the profile is read)."""
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
        for name in ("nccl_channels", "p2p_channels_per_peer"):
            channels = getattr(self, name)
            if channels < 0 or self.sm_count < 0 or (self.sm_count and channels >= self.sm_count):
                raise ValueError(f"{name} must be >= 0 and below sm_count, got {channels} of {self.sm_count}")

    def compute_factor(self, op: str) -> float:
        """Duration factor of a compute kernel that starts while network operation `op` of its GPU is in flight."""
        return next((c for name, c, _ in self.by_op if name == op), self.compute_slowdown)

    def held_sm_factor(self, op: str, size_bytes: int) -> float:
        """Duration factor of a GEMM or attention kernel that starts while the NCCL kernel of network operation
        `op` of `size_bytes` (nccl-tests' size) holds SMs of its GPU. NCCL gives a small operation fewer
        channels: one per `NCCL_CHANNEL_MIN_BYTES`, as its tuning does for the Simple protocol (64 B per
        thread, 512 threads). A send/recv runs on its peer's p2p channels, one per `NCCL_P2P_CHUNK_BYTES` up to
        `p2p_channels_per_peer`. An all-to-all's channels depend on how much goes to each peer (a permutation sends
        to one, an expert exchange to all), which the network operation does not say: it holds none here."""
        if op in RING_COLLECTIVES:
            most, per_channel = self.nccl_channels, NCCL_CHANNEL_MIN_BYTES
        elif op == "send_recv":
            most, per_channel = self.p2p_channels_per_peer, NCCL_P2P_CHUNK_BYTES
        else:
            return 1.0
        if not most:
            return 1.0
        if not self.sm_count:
            raise ValueError("held SMs need the GPU's sm_count (the device profile sets it)")
        channels = min(most, max(1, math.ceil(size_bytes / per_channel)))
        return self.sm_count / (self.sm_count - channels)

    def nccl_factors(self) -> dict[str, float]:
        """The operations whose `nccl_slowdown` differs from the default, with theirs."""
        return {name: n for name, _, n in self.by_op}


RING_COLLECTIVES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"})
"""Network operations whose NCCL kernels run on the communicator's collective channels (`nccl_channels`)."""

NCCL_CHANNEL_MIN_BYTES = 64 * 512
"""Bytes below which NCCL drops a channel (src/enqueue.cc: nBytes < channels x threads x threadThreshold)."""

NCCL_P2P_CHUNK_BYTES = 512 << 10
"""A point-to-point channel's chunk over NVLink (NCCL_P2P_NVL_CHUNKSIZE's default): a send/recv smaller than a
chunk per channel runs on fewer channels."""

NO_SHARING = GpuSharing()
"""Compute and communication as if each had the GPU to itself."""
