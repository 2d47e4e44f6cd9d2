"""DeepSpeed training a Hugging Face causal LM built from a config: `deepspeed.initialize` with a JSON config
(ZeRO stage 1, 2 or 3, bf16, gradient accumulation, DeepSpeed's FusedAdam or torch's AdamW), as its docs set
it up; launched by `deepspeed` (which passes --local_rank) or torchrun.

    phantora deepspeed --gpu h200 --num_gpus 2 examples/deepspeed_train.py --zero 3
    phantora torchrun --gpu h200 --nproc-per-node 2 examples/deepspeed_train.py --zero 2 --torch-adam
    deepspeed --num_gpus 2 examples/deepspeed_train.py --zero 3        # real GPUs
"""

import argparse

import deepspeed
import torch

from hf_models import RandomTokens, StepTimer, add_model_arguments, build_model


def ds_config(args: argparse.Namespace) -> dict:
    return {
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": args.grad_accum,
        "bf16": {"enabled": True},
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": args.zero},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "torch_adam": args.torch_adam}},
        "steps_per_print": 1_000_000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser)
    parser.add_argument("--local_rank", type=int, default=-1, help="passed by the deepspeed launcher")
    parser.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=2)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--torch-adam", action="store_true", help="torch's AdamW instead of DeepSpeed's FusedAdam")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = build_model(args)
    engine, _, loader, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                training_data=RandomTokens(args.vocab, args.seq), config=ds_config(args))
    timer = StepTimer("deepspeed_train", args.batch * args.grad_accum * args.seq * engine.dp_world_size)
    batches = iter(loader)
    for step in range(args.steps):
        timer.start()
        for _ in range(args.grad_accum):
            batch = {k: v.to(engine.device) for k, v in next(batches).items()}
            engine.backward(engine(**batch).loss)
            engine.step()
        timer.stop()
    timer.report()


if __name__ == "__main__":
    main()
