"""The Hugging Face `Trainer` on a causal LM built from a config (Llama, or Mixtral / Qwen2-MoE with --moe):
bf16 mixed precision, gradient accumulation, optional gradient checkpointing, as a user would set it up.
One process per GPU; under torchrun the Trainer runs DDP by itself.

    phantora run --gpu h200 -- python examples/hf_trainer.py --grad-accum 2 --checkpointing
    phantora torchrun --gpu h200 --nproc-per-node 2 examples/hf_trainer.py
    python examples/hf_trainer.py                         # the same on a real GPU
"""

import argparse
import tempfile

from transformers import Trainer, TrainerCallback, TrainingArguments

from hf_models import RandomTokens, StepTimer, add_model_arguments, build_model


class TimeSteps(TrainerCallback):
    """Each optimizer step, timed (the Trainer logs losses, not step times)."""

    def __init__(self, timer: StepTimer) -> None:
        self.timer = timer

    def on_step_begin(self, args, state, control, **kwargs):
        self.timer.start()

    def on_step_end(self, args, state, control, **kwargs):
        self.timer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--checkpointing", action="store_true", help="gradient (activation) checkpointing")
    args = parser.parse_args()
    timer = StepTimer("hf_trainer", args.batch * args.grad_accum * args.seq)
    training = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf_trainer_"), per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=args.grad_accum, gradient_checkpointing=args.checkpointing, bf16=True,
        max_steps=args.steps, logging_steps=1, save_strategy="no", report_to=[], dataloader_pin_memory=True,
        disable_tqdm=True, seed=0)
    trainer = Trainer(model=build_model(args), args=training, train_dataset=RandomTokens(args.vocab, args.seq),
                      callbacks=[TimeSteps(timer)])
    trainer.train()
    timer.report()


if __name__ == "__main__":
    main()
