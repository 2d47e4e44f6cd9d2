"""PyTorch Lightning training a Hugging Face causal LM built from a config: `Trainer(strategy=...)` with
bf16 mixed precision; one GPU, DDP or FSDP.

    phantora run --gpu h200 -- python examples/lightning_train.py
    phantora torchrun --gpu h200 --nproc-per-node 2 examples/lightning_train.py --strategy fsdp
    python examples/lightning_train.py --devices 2 --strategy ddp    # real GPUs (Lightning starts the processes)
"""

import argparse
import os

import lightning as L
import torch
from torch.utils.data import DataLoader

from hf_models import RandomTokens, StepTimer, add_model_arguments, build_model


class CausalLM(L.LightningModule):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.model = build_model(args)

    def training_step(self, batch, batch_index):
        loss = self.model(**batch).loss
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-4)


class TimeSteps(L.Callback):
    def __init__(self, timer: StepTimer) -> None:
        self.timer = timer

    def on_train_batch_start(self, trainer, module, batch, batch_index):
        self.timer.start()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_index):
        self.timer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(parser)
    parser.add_argument("--strategy", default="auto", help="auto, ddp, fsdp, ...")
    parser.add_argument("--devices", type=int, default=int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    args = parser.parse_args()
    L.seed_everything(0, verbose=False)
    timer = StepTimer("lightning_train", args.batch * args.seq)
    trainer = L.Trainer(accelerator="gpu", devices=args.devices, strategy=args.strategy, precision="bf16-mixed",
                        max_steps=args.steps, logger=False, enable_checkpointing=False, enable_model_summary=False,
                        callbacks=[TimeSteps(timer)])
    loader = DataLoader(RandomTokens(args.vocab, args.seq), batch_size=args.batch, pin_memory=True)
    trainer.fit(CausalLM(args), loader)
    timer.report()


if __name__ == "__main__":
    main()
