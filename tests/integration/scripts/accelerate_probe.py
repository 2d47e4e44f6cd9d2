"""A small Accelerate training program, written as for `accelerate launch train.py`: Accelerator() takes its
settings from what the launcher set, prepare() wraps a tiny Hugging Face Llama, and it reports what it got."""

import json
import time

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset
from transformers import LlamaConfig, LlamaForCausalLM

accelerator = Accelerator()
torch.manual_seed(0)
config = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)
model = LlamaForCausalLM(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
loader = DataLoader(TensorDataset(torch.randint(0, config.vocab_size, (32, 128))), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for step, (ids,) in zip(range(3), loader):
    start = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    torch.cuda.synchronize()
    print(f"step {step}: {(time.perf_counter() - start) * 1e3:.3f} ms")
state = accelerator.state
print("ACC " + json.dumps({
    "rank": accelerator.process_index, "num_processes": accelerator.num_processes, "device": str(accelerator.device),
    "distributed_type": str(accelerator.distributed_type), "mixed_precision": accelerator.mixed_precision,
    "fsdp_version": getattr(getattr(state, "fsdp_plugin", None), "fsdp_version", None),
    "zero_stage": getattr(getattr(state, "deepspeed_plugin", None), "zero_stage", None),
    "model": type(accelerator.unwrap_model(model)).__name__, "wrapped": type(model).__name__}))
