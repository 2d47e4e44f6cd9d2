# Pipeline-parallel Llama training with torch.distributed.pipelining, launched with torchrun.
# The model is llama_train.py's (same Block, RMSNorm, rope): the layers are split evenly into
# one stage per rank (stage 0 also holds the embedding, the last stage the final norm and the
# output projection). One step = one schedule.step() over --batch sequences cut into
# --microbatches micro-batches, then clip_grad_norm_ and AdamW on the stage's own parameters.
# Step time is measured the usual way (synchronize + perf_counter); rank 0 prints per-step
# lines and a final JSON line.
import argparse, json, os, time
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe, Schedule1F1B

from llama_train import Block, RMSNorm, rope_cache


class Stage(nn.Module):
    def __init__(self, a, first, last, n_layers):
        super().__init__()
        self.a = a
        self.tok = nn.Embedding(a.vocab, a.dim) if first else None
        self.layers = nn.ModuleList(Block(a) for _ in range(n_layers))
        self.norm = RMSNorm(a.dim) if last else None
        self.out = nn.Linear(a.dim, a.vocab, bias=False) if last else None

    def forward(self, x):
        if self.tok is not None:
            x = self.tok(x)
        cos, sin = rope_cache(x.shape[1], self.a.dim // self.a.n_heads, device=x.device)
        for l in self.layers:
            x = l(x, cos, sin)
        if self.out is not None:
            x = self.out(self.norm(x))
        return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--n-layers", type=int, default=16)
    p.add_argument("--n-heads", type=int, default=32)
    p.add_argument("--n-kv-heads", type=int, default=8)
    p.add_argument("--ffn-dim", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--schedule", choices=["gpipe", "1f1b"], default="1f1b")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--tag", default="")
    a = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    torch.manual_seed(0)

    first, last = rank == 0, rank == world - 1
    per = [a.n_layers // world + (1 if i < a.n_layers % world else 0) for i in range(world)]
    with torch.device("meta"):
        stage_mod = Stage(a, first, last, per[rank])
    stage_mod.to_empty(device=device)
    with torch.no_grad():
        for prm in stage_mod.parameters():
            prm.normal_(0, 0.02)
    nparams = sum(p.numel() for p in stage_mod.parameters())

    stage = PipelineStage(stage_mod, rank, world, device)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())

    cls = ScheduleGPipe if a.schedule == "gpipe" else Schedule1F1B
    schedule = cls(stage, n_microbatches=a.microbatches, loss_fn=loss_fn)
    opt = torch.optim.AdamW(stage_mod.parameters(), lr=3e-4, weight_decay=0.1)

    def train_step():
        idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=device)
        losses = []
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if first:
                schedule.step(idx[:, :-1])
            elif last:
                schedule.step(target=idx[:, 1:], losses=losses)
            else:
                schedule.step()
        torch.nn.utils.clip_grad_norm_(stage_mod.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return losses

    times = []
    for step in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses = train_step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        times.append(dt)
        if rank == 0:
            print(f"step {step} time {dt*1000:.1f}ms", flush=True)
        if last and losses:
            print(f"[last stage] step {step} loss {torch.stack(losses).mean().item():.4f}", flush=True)
    if os.environ.get("PHANTORA_BENCH_PROFILE_DIR"):  # one extra, profiled step (not in the median)
        import profile_step
        profile_step.profile(train_step, os.environ["PHANTORA_BENCH_PROFILE_DIR"], rank)
    steady = sorted(times[3:])
    med = steady[len(steady) // 2]
    mem = torch.tensor([torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()],
                       dtype=torch.float64, device=device)
    mems = [torch.zeros_like(mem) for _ in range(world)]
    dist.all_gather(mems, mem)
    if rank == 0:
        nccl = getattr(torch.cuda, "nccl", None)
        try:
            v = nccl.version()
            nccl_version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            nccl_version = None
        print(json.dumps({
            "script": "llama_pp", "tag": a.tag, "world": world, "parallel": "pp", "schedule": a.schedule,
            "microbatches": a.microbatches, "layers_per_stage": per,
            "dim": a.dim, "n_layers": a.n_layers, "n_heads": a.n_heads, "n_kv_heads": a.n_kv_heads,
            "ffn_dim": a.ffn_dim, "vocab": a.vocab, "seq": a.seq, "batch": a.batch, "params_stage0": nparams,
            "step_s_median": med, "step_s_all": times,
            "tokens_per_s_per_gpu": a.batch * a.seq / med / world,
            "max_mem_alloc_gib": torch.cuda.max_memory_allocated() / 2**30,
            "max_mem_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
            "per_rank_mem_alloc_gib": [m[0].item() / 2**30 for m in mems],
            "per_rank_mem_reserved_gib": [m[1].item() / 2**30 for m in mems],
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "nccl": nccl_version,
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
