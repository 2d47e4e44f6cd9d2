"""A plain PyTorch training loop on a Hugging Face causal LM (Llama, or Mixtral / Qwen2-MoE with --moe):
bf16 autocast, fused AdamW, gradient clipping, timed as such scripts time themselves.

    phantora run --gpu h200 -- python examples/hf_llama_loop.py
    phantora run --gpu h200 -- python examples/hf_llama_loop.py --moe mixtral
    python examples/hf_llama_loop.py                      # the same on a real GPU
"""

import argparse

import torch
from torch.utils.data import DataLoader

from hf_models import RandomTokens, StepTimer, add_model_arguments, build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = build_model(args).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    loader = DataLoader(RandomTokens(args.vocab, args.seq), batch_size=args.batch, pin_memory=True)
    timer = StepTimer("hf_llama_loop", args.batch * args.seq)
    for step, batch in zip(range(args.steps), loader):
        timer.start()
        batch = {k: v.cuda(non_blocking=True) for k, v in batch.items()}
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        timer.stop()
    timer.report()


if __name__ == "__main__":
    main()
