"""Train a small GPT with Megatron-core: tensor, sequence, pipeline (optionally interleaved), data and
expert parallelism, Megatron's DistributedDataParallel and optimizers, a mock dataset.

The program is an ordinary Megatron-core training loop (model provider with GPTModel and the local layer
spec, initialize_model_parallel, get_forward_backward_func, get_megatron_optimizer); it runs as it is on
GPUs with torchrun, and under Phantora on a machine without GPUs:

    pip install -e '.[megatron]'
    phantora torchrun --gpu h200 --nproc-per-node 4 examples/megatron_core_gpt.py --tp 2 --pp 2 --vpp 2

More layouts (world size = tp * pp * dp; experts are spread over ep ranks of the data-parallel ranks):

    phantora torchrun --gpu h200 --nproc-per-node 2 examples/megatron_core_gpt.py --tp 2 --sequence-parallel
    phantora torchrun --gpu h200 --nproc-per-node 4 examples/megatron_core_gpt.py --pp 2 \\
        --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
    phantora torchrun --gpu h200 --nproc-per-node 2 examples/megatron_core_gpt.py --num-experts 4 --ep 2 \\
        --moe-capacity-factor 1.0
    phantora torchrun --gpu h200 --nproc-per-node 2 examples/megatron_core_gpt.py --tp 2 --optimizer torch

Megatron-core without Apex and Transformer Engine: the local (pure PyTorch) layer spec and torch's Adam inside
Megatron's optimizer; for sequence parallelism, a LayerNorm that Megatron reduces over the tensor-parallel
ranks (its local spec has one only with Apex). The last rank prints one line per iteration, as Megatron's own
training loop does.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from functools import partial
from typing import Iterator

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from megatron.core import parallel_state
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.distributed.finalize_model_grads import finalize_model_grads
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.tokenizers import MegatronTokenizer
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.moe import moe_utils

if not hasattr(moe_utils, "te_general_gemm"):
    # megatron-core 0.14-0.16.1 without Transformer Engine: the MoE router's gating GEMM tests
    # `te_general_gemm is not None`, a name defined only when Transformer Engine imports (NameError on any GPU)
    moe_utils.te_general_gemm = None


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    layout = p.add_argument_group("parallelism")
    layout.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    layout.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    layout.add_argument("--vpp", type=int, default=None, help="virtual stages (model chunks) per pipeline rank")
    layout.add_argument("--ep", type=int, default=1, help="expert-parallel size")
    layout.add_argument("--etp", type=int, default=None, help="expert tensor-parallel size (default: --tp)")
    layout.add_argument("--sequence-parallel", action="store_true")
    layout.add_argument("--use-distributed-optimizer", action="store_true", help="shard optimizer state over DP")
    layout.add_argument("--overlap-grad-reduce", action="store_true")
    layout.add_argument("--overlap-param-gather", action="store_true")
    model = p.add_argument_group("model")
    model.add_argument("--num-layers", type=int, default=4)
    model.add_argument("--hidden-size", type=int, default=512)
    model.add_argument("--ffn-hidden-size", type=int, default=None, help="default: 4 * hidden size")
    model.add_argument("--num-attention-heads", type=int, default=8)
    model.add_argument("--seq-length", type=int, default=512)
    model.add_argument("--vocab-size", type=int, default=8192)
    model.add_argument("--num-experts", type=int, default=None, help="mixture of experts in every layer")
    model.add_argument("--moe-router-topk", type=int, default=2)
    model.add_argument("--moe-capacity-factor", type=float, default=None,
                       help="drop tokens beyond this capacity per expert and pad each expert's input to it")
    model.add_argument("--fp32", action="store_true", help="train in fp32 instead of bf16")
    train = p.add_argument_group("training")
    train.add_argument("--micro-batch-size", type=int, default=2)
    train.add_argument("--global-batch-size", type=int, default=16)
    train.add_argument("--grad-accum", type=int, default=None,
                       help="micro-batches per iteration and data-parallel rank (gradient accumulation): sets the "
                            "global batch size to micro batch size x data-parallel size x this")
    train.add_argument("--recompute", choices=("none", "selective", "full"), default="none",
                       help="activation recomputation: selective = the core attention (its s x s scores), full = "
                            "every layer, one at a time (Megatron's recompute_granularity, method uniform)")
    train.add_argument("--train-iters", type=int, default=5)
    train.add_argument("--lr", type=float, default=3e-4)
    train.add_argument("--optimizer", choices=("megatron", "torch"), default="megatron",
                       help="Megatron's optimizer (get_megatron_optimizer) or a plain torch.optim.Adam")
    return p.parse_args()


def initialize_distributed(args: argparse.Namespace) -> None:
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend="nccl")
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp,
        expert_model_parallel_size=args.ep,
        expert_tensor_parallel_size=args.etp,
    )
    model_parallel_cuda_manual_seed(1234)


def transformer_config(args: argparse.Namespace) -> TransformerConfig:
    dtype = torch.float32 if args.fp32 else torch.bfloat16
    moe = {}
    if args.num_experts:
        moe = dict(num_moe_experts=args.num_experts, moe_router_topk=args.moe_router_topk,
                   moe_token_dispatcher_type="alltoall", moe_aux_loss_coeff=1e-2, moe_grouped_gemm=False)
        if args.moe_capacity_factor is not None:
            moe.update(moe_expert_capacity_factor=args.moe_capacity_factor, moe_pad_expert_input_to_capacity=True)
    return TransformerConfig(
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        ffn_hidden_size=args.ffn_hidden_size,
        num_attention_heads=args.num_attention_heads,
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp,
        expert_model_parallel_size=args.ep,
        expert_tensor_parallel_size=args.etp,
        sequence_parallel=args.sequence_parallel,
        bf16=not args.fp32,
        params_dtype=dtype,
        **recompute(args),
        pipeline_dtype=dtype,
        **moe,
    )


def recompute(args: argparse.Namespace) -> dict:
    """TransformerConfig's activation recomputation for --recompute."""
    if args.recompute == "none":
        return {}
    if args.recompute == "selective":
        return dict(recompute_granularity="selective")
    return dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)


class SequenceParallelLayerNorm(torch.nn.LayerNorm):
    """torch's LayerNorm for sequence parallelism. Each tensor-parallel rank normalizes its own slice of the
    sequence, so the weight's gradient is a partial sum: marked `sequence_parallel`, Megatron all-reduces it
    over the tensor-parallel group (finalize_model_grads). Megatron-core's local spec has such a norm only with
    Apex (FusedLayerNorm); its torch fallback refuses sequence parallelism."""

    def __init__(self, config: TransformerConfig, hidden_size: int, eps: float = 1e-5, **unused) -> None:
        super().__init__(hidden_size, eps=eps, dtype=config.params_dtype)
        for param in (self.weight, self.bias):
            param.sequence_parallel = config.sequence_parallel


def layer_spec(config: TransformerConfig, args: argparse.Namespace, vp_stage: int | None):
    """Megatron-core's local (pure PyTorch) layer spec; with sequence parallelism, its norms replaced."""
    spec = get_gpt_layer_local_spec(num_experts=args.num_experts)
    if not args.sequence_parallel:
        return spec
    spec.submodules = dataclasses.replace(spec.submodules, input_layernorm=SequenceParallelLayerNorm,
                                          pre_mlp_layernorm=SequenceParallelLayerNorm)
    layers = get_num_layers_to_build(config, vp_stage=vp_stage)
    return TransformerBlockSubmodules(layer_specs=[spec] * layers, layer_norm=SequenceParallelLayerNorm)


def model_provider(config: TransformerConfig, args: argparse.Namespace, vp_stage: int | None) -> GPTModel:
    """One model chunk: the embedding on the first stage, the output layer on the last."""
    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec(config, args, vp_stage),
        vocab_size=padded_vocab_size(args),
        max_sequence_length=args.seq_length,
        pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
        post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage),
        share_embeddings_and_output_weights=True,
        vp_stage=vp_stage,
    )


def build_model(config: TransformerConfig, args: argparse.Namespace) -> list[DistributedDataParallel]:
    """The model chunks of this pipeline rank, on the GPU, each in Megatron's DistributedDataParallel."""
    stages = [None] if args.vpp is None else list(range(args.vpp))
    chunks = [model_provider(config, args, vp_stage).cuda() for vp_stage in stages]
    if config.bf16:  # bf16 parameters throughout (the position embedding too); the loss in fp32
        chunks = [Float16Module(config, chunk) for chunk in chunks]
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=args.overlap_grad_reduce,
        overlap_param_gather=args.overlap_param_gather,
        use_distributed_optimizer=args.use_distributed_optimizer,
        average_in_collective=True,
    )
    # only the first chunk's buckets are sized: the others get one bucket each, reduced when the schedule says
    return [DistributedDataParallel(config, ddp_config, chunk, disable_bucketing=i > 0)
            for i, chunk in enumerate(chunks)]


def connect_schedule_hooks(config: TransformerConfig, model: list[DistributedDataParallel],
                           args: argparse.Namespace) -> None:
    """Let the pipeline schedule drive the data-parallel communication, so that it overlaps with compute."""
    config.finalize_model_grads_func = finalize_model_grads
    if args.overlap_grad_reduce:
        config.no_sync_func = [chunk.no_sync for chunk in model]
        config.grad_sync_func = [chunk.start_grad_sync for chunk in model]
        if len(model) == 1:
            config.no_sync_func, config.grad_sync_func = config.no_sync_func[0], config.grad_sync_func[0]
    if args.overlap_param_gather:
        config.param_sync_func = [chunk.start_param_sync for chunk in model]
        if len(model) == 1:
            config.param_sync_func = config.param_sync_func[0]


class PlainAdam:
    """torch.optim.Adam over the model's parameters. Megatron's DDP accumulates gradients in `main_grad`
    (fp32, in its buffers), so the step reads them from there."""

    def __init__(self, model: list[DistributedDataParallel], lr: float) -> None:
        self.params = [p for chunk in model for p in chunk.parameters() if p.requires_grad]
        self.adam = torch.optim.Adam(self.params, lr=lr)

    def zero_grad(self) -> None:
        self.adam.zero_grad(set_to_none=True)

    def step(self) -> tuple[bool, float | None, None]:
        for p in self.params:
            p.grad = p.main_grad.to(p.dtype)
        self.adam.step()
        return True, None, None


def tokenizer(args: argparse.Namespace) -> MegatronTokenizer:
    """Megatron's null tokenizer: token ids below --vocab-size, and its end-of-document id (--vocab-size itself)."""
    return MegatronTokenizer.from_pretrained(metadata_path={"library": "null"}, vocab_size=args.vocab_size)


def padded_vocab_size(args: argparse.Namespace, divisible_by: int = 128) -> int:
    """The tokenizer's vocabulary (end-of-document id included) padded, as Megatron's training pads it, to a multiple
    of 128 per tensor-parallel rank: every id the data holds has an embedding row."""
    multiple = divisible_by * args.tp
    return -(-tokenizer(args).vocab_size // multiple) * multiple


def mock_data_iterator(args: argparse.Namespace) -> Iterator[dict]:
    """Megatron's mock GPT dataset, each data-parallel rank reading its own micro-batches."""
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=args.seq_length,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        tokenizer=tokenizer(args),
        mid_level_dataset_surplus=0.005,
    )
    samples = args.global_batch_size * args.train_iters
    train, _, _ = BlendedMegatronDatasetBuilder(MockGPTDataset, [samples, None, None], lambda: True, config).build()
    sampler = DistributedSampler(train, num_replicas=parallel_state.get_data_parallel_world_size(),
                                 rank=parallel_state.get_data_parallel_rank(), shuffle=False)
    return iter(DataLoader(train, batch_size=args.micro_batch_size, sampler=sampler, pin_memory=True))


def forward_step(data_iterator: Iterator[dict], model: GPTModel):
    batch = {k: v.cuda(non_blocking=True) for k, v in next(data_iterator).items()}
    output = model(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])
    return output, partial(loss_func, batch["loss_mask"])


def loss_func(loss_mask: torch.Tensor, output: torch.Tensor):
    """Mean loss over the micro-batch's tokens; the logged value is averaged over the data-parallel ranks."""
    mask = loss_mask.view(-1).float()
    loss = torch.sum(output.float().view(-1) * mask) / mask.sum()
    logged = loss.detach().clone()
    dist.all_reduce(logged, group=parallel_state.get_data_parallel_group())
    return loss, {"lm loss": logged / parallel_state.get_data_parallel_world_size()}


def flops_per_iteration(args: argparse.Namespace, config: TransformerConfig) -> float:
    """Model FLOPs of one iteration (forward and backward, 3x the forward's GEMMs), all GPUs together."""
    h, s, layers = args.hidden_size, args.seq_length, args.num_layers
    mlp = 2 * h * config.ffn_hidden_size * (args.moe_router_topk if args.num_experts else 1)
    per_token = layers * (4 * h * h + mlp + 2 * s * h) + padded_vocab_size(args) * h
    return 3 * 2 * per_token * args.global_batch_size * s


def train(args: argparse.Namespace) -> None:
    config = transformer_config(args)
    model = build_model(config, args)
    connect_schedule_hooks(config, model, args)
    if args.optimizer == "megatron":
        optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=args.lr, weight_decay=0.1, bf16=not args.fp32,
                            params_dtype=config.params_dtype, clip_grad=1.0,
                            use_distributed_optimizer=args.use_distributed_optimizer),
            model)
    else:
        optimizer = PlainAdam(model, args.lr)
    dp = parallel_state.get_data_parallel_world_size()
    if args.grad_accum is not None:
        args.global_batch_size = args.micro_batch_size * dp * args.grad_accum
    micro_batches = args.global_batch_size // (args.micro_batch_size * dp)
    assert micro_batches * args.micro_batch_size * dp == args.global_batch_size, \
        "global batch size must be a multiple of micro batch size x data-parallel size"
    data = mock_data_iterator(args)
    data_iterator = data if args.vpp is None else [data] * args.vpp
    forward_backward = get_forward_backward_func()
    world = dist.get_world_size()
    last_rank = dist.get_rank() == world - 1
    if last_rank:
        print(f"world size {world}: TP {args.tp}, PP {args.pp}, VPP {args.vpp}, DP {dp}, EP {args.ep}, "
              f"{micro_batches} micro-batches of {args.micro_batch_size} per iteration", flush=True)

    for iteration in range(1, args.train_iters + 1):
        start = time.perf_counter()
        for chunk in model:
            chunk.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(forward_step_func=forward_step, data_iterator=data_iterator, model=model,
                                  num_microbatches=micro_batches, seq_length=args.seq_length,
                                  micro_batch_size=args.micro_batch_size, forward_only=False)
        _, grad_norm, _ = optimizer.step()
        loss = torch.stack([x["lm loss"] for x in losses]).mean().item() if losses else float("nan")
        dist.barrier()
        elapsed = time.perf_counter() - start
        if last_rank:
            tflops = flops_per_iteration(args, config) / elapsed / world / 1e12
            tokens = args.global_batch_size * args.seq_length / elapsed
            norm = "n/a" if grad_norm is None else f"{grad_norm:.3f}"
            print(f" iteration {iteration:4d}/{args.train_iters} | elapsed time per iteration (ms): "
                  f"{elapsed * 1e3:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops:.1f} | tokens/s: {tokens:.0f}"
                  f" | lm loss: {loss:.4f} | grad norm: {norm} | peak memory (GiB): "
                  f"{torch.cuda.max_memory_allocated() / 2**30:.2f} | peak reserved (GiB): "
                  f"{torch.cuda.max_memory_reserved() / 2**30:.2f}", flush=True)


def main() -> None:
    args = parse_args()
    initialize_distributed(args)
    train(args)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
