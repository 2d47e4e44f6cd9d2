"""Shared by the framework examples: a Hugging Face causal LM built from a config (no weights, nothing
downloaded), synthetic token batches, and the step timing every example prints.

The model flags describe a Llama (dense) or a mixture-of-experts model (`--moe mixtral|qwen2_moe`); the
defaults are tiny, so every example runs in seconds under Phantora. Each example prints one line per step
and, on rank 0, a final JSON line that `benchmarks/e2e/accuracy.py` reads:
{"script": ..., "step_s_median": ..., "max_mem_reserved_gib": ..., "max_mem_alloc_gib": ..., "tokens_per_s": ...}
The median skips the first `WARMUP_STEPS` steps (the allocator, cuBLAS and NCCL warm up there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from torch.utils.data import Dataset

WARMUP_STEPS = 3


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    m = parser.add_argument_group("model (a Hugging Face config, no weights)")
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--hidden", type=int, default=256)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default: --heads)")
    m.add_argument("--ffn", type=int, default=704, help="MLP width (per expert with --moe)")
    m.add_argument("--vocab", type=int, default=8192)
    m.add_argument("--moe", choices=("mixtral", "qwen2_moe"), default=None, help="a mixture-of-experts model")
    m.add_argument("--experts", type=int, default=8)
    m.add_argument("--top-k", type=int, default=2)
    d = parser.add_argument_group("data")
    d.add_argument("--seq", type=int, default=256)
    d.add_argument("--batch", type=int, default=4, help="per-device micro-batch")
    d.add_argument("--steps", type=int, default=8)


def model_config(args: argparse.Namespace):
    """The transformers config the flags describe."""
    common = dict(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                  num_attention_heads=args.heads, num_key_value_heads=args.kv_heads or args.heads,
                  max_position_embeddings=max(args.seq, 2048), attn_implementation="sdpa")
    if args.moe == "mixtral":
        from transformers import MixtralConfig
        return MixtralConfig(intermediate_size=args.ffn, num_local_experts=args.experts,
                             num_experts_per_tok=args.top_k, **common)
    if args.moe == "qwen2_moe":
        from transformers import Qwen2MoeConfig
        return Qwen2MoeConfig(intermediate_size=args.ffn, moe_intermediate_size=args.ffn, num_experts=args.experts,
                              num_experts_per_tok=args.top_k, shared_expert_intermediate_size=args.ffn, **common)
    from transformers import LlamaConfig
    return LlamaConfig(intermediate_size=args.ffn, **common)


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_config(model_config(args))


class RandomTokens(Dataset):
    """Synthetic token windows; a sample is a dict, as a tokenized Hugging Face dataset gives."""

    def __init__(self, vocab: int, seq: int, length: int = 100_000) -> None:
        self.vocab, self.seq, self.length = vocab, seq, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, self.vocab, (self.seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone()}


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


class StepTimer:
    """Times whole optimizer steps as the usual scripts do (synchronize, then perf_counter) and reports them."""

    def __init__(self, script: str, tokens_per_step: int) -> None:
        self.script, self.tokens_per_step = script, tokens_per_step
        self.times: list[float] = []
        self._started = None

    def start(self) -> None:
        torch.cuda.synchronize()
        self._started = time.perf_counter()

    def stop(self) -> None:
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - self._started
        self.times.append(elapsed)
        if is_main_process():
            print(f"step {len(self.times)}: {1e3 * elapsed:.1f} ms, {self.tokens_per_step / elapsed:,.0f} tokens/s, "
                  f"peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)

    def report(self) -> None:
        if not is_main_process() or not self.times:
            return
        steady = self.times[WARMUP_STEPS:] or self.times
        median = statistics.median_low(steady)
        print(json.dumps({"script": self.script, "step_s_median": median, "step_s_all": self.times,
                          "tokens_per_s": self.tokens_per_step / median,
                          "max_mem_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
                          "max_mem_alloc_gib": torch.cuda.max_memory_allocated() / 2**30}), flush=True)
