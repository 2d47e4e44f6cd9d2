"""A training loop with Hugging Face Accelerate on a causal LM built from a config: whatever `accelerate
launch` sets up (one GPU, DDP, FSDP 1 or 2, the DeepSpeed plugin; mixed precision) reaches the program
through Accelerate, unchanged.

    phantora run --gpu h200 -- python examples/accelerate_train.py
    phantora accelerate launch --gpu h200 --config_file examples/accelerate/fsdp2.yaml examples/accelerate_train.py
    accelerate launch --config_file examples/accelerate/fsdp2.yaml examples/accelerate_train.py   # real GPUs
"""

import argparse

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from hf_models import RandomTokens, StepTimer, add_model_arguments, build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser)
    parser.add_argument("--grad-accum", type=int, default=1)
    args = parser.parse_args()
    accelerator = Accelerator(gradient_accumulation_steps=args.grad_accum)
    torch.manual_seed(0)
    model = build_model(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loader = DataLoader(RandomTokens(args.vocab, args.seq), batch_size=args.batch, pin_memory=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    timer = StepTimer("accelerate_train", args.batch * args.grad_accum * args.seq)
    batches = iter(loader)
    for step in range(args.steps):
        timer.start()
        for _ in range(args.grad_accum):
            with accelerator.accumulate(model):
                loss = model(**next(batches)).loss
                accelerator.backward(loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        timer.stop()
    timer.report()
    accelerator.end_training()


if __name__ == "__main__":
    main()
