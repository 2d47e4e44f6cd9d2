"""Mixture-of-experts routing with expert parallelism over every rank, three ways frameworks count their tokens
(runtime/routing.py Note [Simulated routing]): TorchTitan's (topk, histc, an all-to-all of the counts),
Megatron-core's (a routing map scattered from topk, summed, all-gathered, tokens picked by masked_select) and
Hugging Face's (one_hot, then nonzero per expert). Prints what each rank sends and receives."""

import json

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
group = dist.group.WORLD
EXPERTS, TOP_K, TOKENS, DIM = 4 * world, 2, 256, 64
router = torch.nn.Linear(DIM, EXPERTS).cuda()
experts_w = torch.nn.Parameter(torch.randn(EXPERTS // world, DIM, DIM, device="cuda", dtype=torch.bfloat16))
seen = {"splits": []}


def titan_style_moe(x: torch.Tensor) -> torch.Tensor:
    scores = router(x).softmax(dim=-1)
    _, chosen = scores.topk(TOP_K, dim=-1)
    counts = torch.histc(chosen.view(-1), bins=EXPERTS, min=0, max=EXPERTS)
    received = funcol.all_to_all_single(counts, None, None, group)
    received = torch.ops._c10d_functional.wait_tensor(received)
    send = counts.view(world, -1).sum(dim=1).tolist()
    recv = received.view(world, -1).sum(dim=1).tolist()
    seen["splits"].append([send, recv])
    order = chosen.view(-1).argsort(stable=True)
    routed = funcol.all_to_all_single_autograd(x[order // TOP_K].bfloat16(), recv, send, group)
    local = received.view(world, -1).sum(dim=0)
    offsets = torch.cumsum(local, dim=0, dtype=torch.int32)
    # tokens arrive grouped by source rank, then by expert: enough to size the grouped GEMM
    hidden = torch._grouped_mm(routed, experts_w.transpose(-2, -1), offs=offsets)
    back = funcol.all_to_all_single_autograd(hidden, send, recv, group)
    return back.float().sum()


x = torch.randn(TOKENS, DIM, device="cuda", requires_grad=True)
titan_style_moe(x).backward()
checkpoint(titan_style_moe, x, use_reentrant=False).backward()  # forward, then its recomputation in backward

# Megatron-core's alltoall dispatcher: a routing map and the routing probabilities scattered from topk, the map's
# column sums all-gathered over the expert group, tokens and probabilities picked by masked_select, the tokens
# exchanged by c10d's all_to_all_single with numpy split sizes
logits = router(x)
scores, chosen = logits.topk(TOP_K, dim=-1)
probs = scores.softmax(dim=-1)
routing_probs = torch.zeros_like(logits).scatter(1, chosen, probs)
routing_map = torch.zeros_like(logits).int().scatter(1, chosen, 1).bool()
local_counts = routing_map.sum(dim=0)
every_count = funcol.all_gather_tensor(local_counts, 0, group)
every_count = torch.ops._c10d_functional.wait_tensor(every_count)
token_ids = torch.arange(TOKENS, device="cuda").unsqueeze(0).expand(EXPERTS, -1)
picked = token_ids.masked_select(routing_map.T.contiguous())
picked_probs = routing_probs.T.contiguous().masked_select(routing_map.T.contiguous())
by_rank = every_count.view(world, world, -1)  # [source rank, destination rank, local expert]
send = by_rank[rank].sum(dim=-1).cpu().numpy()
recv = by_rank[:, rank].sum(dim=-1).cpu().numpy()
received = torch.empty(int(recv.sum()), DIM, device="cuda")
dist.all_to_all_single(received, x.detach()[picked], output_split_sizes=recv, input_split_sizes=send)
seen["megatron"] = {"counts": local_counts.tolist(), "gathered": every_count.view(world, -1).tolist(),
                    "picked": picked.shape[0], "picked_probs": picked_probs.shape[0], "received": received.shape[0]}

# Hugging Face's Mixtral-style loop: one_hot of the choice, the experts hit, each expert's tokens
mask = F.one_hot(chosen, num_classes=EXPERTS).permute(2, 1, 0)
hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
rows = [torch.where(mask[e].squeeze(0))[1].shape[0] for e in range(EXPERTS)]
seen["hf"] = {"hit": hit.shape[0], "rows": rows}
print("PROBE", json.dumps({"rank": rank, **seen}), flush=True)
dist.destroy_process_group()
