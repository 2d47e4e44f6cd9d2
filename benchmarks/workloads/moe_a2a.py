# An expert-parallel MoE training script (all_to_all token dispatch), launched with torchrun.
# Each rank holds --experts / world experts (SwiGLU FFNs) of every MoE layer and its own batch of
# tokens; a top-k softmax router picks experts; tokens travel to the experts' ranks and back with
# autograd-aware all_to_all_single (functional collectives, the torchtitan way), split sizes
# exchanged first (an all_to_all of counts, then .tolist(): a device-to-host sync per layer).
# Router and norm weights are replicated: their gradients are averaged with one all_reduce.
# Model: --n-layers residual blocks x + MoE(RMSNorm(x)) on random bf16-autocast activations.
# Step time is measured the usual way (synchronize + perf_counter); rank 0 prints JSON at the end.
import argparse, json, os, time
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

# Marks inside each MoE layer's forward (router, sort, counts, their all-to-all, cat and read back, splits, the
# dispatch's gather, all-to-all and split, each expert's cat and FFN, the combine's cat and all-to-all),
# set to timeline.mark when PHANTORA_BENCH_TIMELINE is set: where the layer's host time goes.
inner_mark = lambda label: None
inner_note = lambda key, value: None  # timeline.note: each call's received rows per local expert


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


class MoE(nn.Module):
    def __init__(self, dim, ffn, n_experts, top_k, world, balanced=False):
        super().__init__()
        self.e, self.k, self.world, self.le = n_experts, top_k, world, n_experts // world
        self.router = nn.Linear(dim, n_experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(self.le, dim, ffn))
        self.w3 = nn.Parameter(torch.empty(self.le, dim, ffn))
        self.w2 = nn.Parameter(torch.empty(self.le, ffn, dim))
        self.loads = []
        self.balanced = balanced

    def forward(self, x):  # x: [tokens, dim]
        group = dist.group.WORLD
        probs = self.router(x).float().softmax(dim=-1)
        weight, expert = probs.topk(self.k, dim=-1)
        if self.balanced:  # every expert gets the same rows every call: no new GEMM shapes, even splits
            expert = torch.arange(expert.numel(), device=x.device).remainder(self.e).view_as(expert)
        inner_mark("moe.route")
        flat = expert.flatten()
        order = flat.argsort(stable=True)
        token = order // self.k
        inner_mark("moe.sort")
        counts = torch.bincount(flat, minlength=self.e)
        inner_mark("moe.bincount")
        recv_counts = fc.all_to_all_single(counts, None, None, group)  # [src rank x local expert]
        inner_mark("moe.count_a2a")
        both = torch.cat([counts, recv_counts])
        inner_mark("moe.count_cat")
        both = both.tolist()
        inner_mark("moe.tolist")
        send, recv = both[:self.e], both[self.e:]
        self.loads.append(send)
        send_splits = [sum(send[r * self.le:(r + 1) * self.le]) for r in range(self.world)]
        recv_splits = [sum(recv[r * self.le:(r + 1) * self.le]) for r in range(self.world)]
        inner_note("expert_rows", [sum(recv[r * self.le + j] for r in range(self.world)) for j in range(self.le)])
        inner_mark("moe.splits")
        gathered = x[token]
        inner_mark("moe.gather")
        routed = fc.all_to_all_single_autograd(gathered, recv_splits, send_splits, group)
        inner_mark("moe.dispatch_a2a")
        # routed is ordered (source rank, local expert): gather each local expert's tokens
        chunks = routed.split(recv)
        inner_mark("moe.dispatch")
        outs = [None] * len(chunks)
        for j in range(self.le):
            idx = [r * self.le + j for r in range(self.world)]
            xe = torch.cat([chunks[i] for i in idx])
            inner_mark("moe.expert_cat")
            ye = (F.silu(xe @ self.w1[j]) * (xe @ self.w3[j])) @ self.w2[j]
            inner_mark("moe.expert_ffn")
            for i, y in zip(idx, ye.split([recv[i] for i in idx])):
                outs[i] = y
            inner_mark("moe.expert")
        joined = torch.cat(outs)
        inner_mark("moe.combine_cat")
        back = fc.all_to_all_single_autograd(joined, send_splits, recv_splits, group)
        inner_mark("moe.combine")
        back = back * weight.flatten()[order].unsqueeze(1).to(back.dtype)
        inner_mark("moe.weight")
        return torch.zeros_like(x).index_add(0, token, back.to(x.dtype))


class Model(nn.Module):
    def __init__(self, a, world):
        super().__init__()
        self.norms = nn.ModuleList(RMSNorm(a.dim) for _ in range(a.n_layers))
        self.moes = nn.ModuleList(MoE(a.dim, a.ffn_dim, a.experts, a.top_k, world, a.balanced_routing) for _ in range(a.n_layers))

    def forward(self, x):
        for norm, moe in zip(self.norms, self.moes):
            x = x + moe(norm(x))
        return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--ffn-dim", type=int, default=4096)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--n-layers", type=int, default=8)
    p.add_argument("--tokens", type=int, default=8192, help="tokens per rank per step")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--tag", default="")
    p.add_argument("--balanced-routing", action="store_true",
                   help="route token slots round-robin (same rows per expert every call): isolates the cost of "
                        "new GEMM shapes and uneven splits")
    a = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.manual_seed(0)  # same router/norm weights on every rank
    model = Model(a, world).cuda()
    torch.manual_seed(1 + rank)  # own experts and own tokens
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if name.split(".")[-1] in ("w1", "w2", "w3"):
                prm.normal_(0, 0.02)
    dense = [p for n, p in model.named_parameters() if n.split(".")[-1] not in ("w1", "w2", "w3")]
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

    timeline = None
    if os.environ.get("PHANTORA_BENCH_TIMELINE"):  # host and GPU time of each MoE layer and phase
        import timeline
        timeline.install(model.moes)
        global inner_mark, inner_note
        inner_mark, inner_note = timeline.mark, timeline.note
    mark = timeline.mark if timeline else (lambda phase: None)

    def train_step():
        x = torch.randn(a.tokens, a.dim, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        mark("forward")
        loss.backward()
        mark("backward")
        flat = torch.cat([p.grad.flatten() for p in dense])
        dist.all_reduce(flat)
        flat /= world
        for p, g in zip(dense, flat.split([p.numel() for p in dense])):
            p.grad.copy_(g.view_as(p))
        mark("dense_all_reduce")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark("optimizer")
        return loss

    times = []
    for step in range(a.steps):
        torch.cuda.synchronize()
        if timeline:
            timeline.step_begin(step)
        t0 = time.perf_counter()
        loss = train_step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if timeline:
            timeline.step_end()
        times.append(dt)
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} time {dt*1000:.1f}ms", flush=True)
    if os.environ.get("PHANTORA_BENCH_PROFILE_DIR"):  # one extra, profiled step (not in the median)
        import profile_step
        profile_step.profile(train_step, os.environ["PHANTORA_BENCH_PROFILE_DIR"], rank)
    if timeline:
        timeline.dump(os.environ["PHANTORA_BENCH_TIMELINE"], rank)
    steady = sorted(times[3:])
    med = steady[len(steady) // 2]
    loads = [l for m in model.moes for l in m.loads]  # tokens sent to each expert, per layer call
    if rank == 0:
        nccl = getattr(torch.cuda, "nccl", None)
        try:
            v = nccl.version()
            nccl_version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            nccl_version = None
        print(json.dumps({
            "script": "moe_a2a", "tag": a.tag, "world": world, "parallel": "ep", "balanced_routing": a.balanced_routing, "dim": a.dim, "ffn_dim": a.ffn_dim,
            "experts": a.experts, "top_k": a.top_k, "n_layers": a.n_layers, "tokens": a.tokens, "params_rank0": nparams,
            "step_s_median": med, "step_s_all": times,
            "tokens_per_s_per_gpu": a.tokens / med,
            "rank0_expert_load_min": min(min(l) for l in loads), "rank0_expert_load_max": max(max(l) for l in loads),
            "rank0_expert_load_mean": sum(sum(l) for l in loads) / (len(loads) * a.experts),
            "max_mem_alloc_gib": torch.cuda.max_memory_allocated() / 2**30,
            "max_mem_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "nccl": nccl_version,
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
