"""`copy.deepcopy` of modules whose parameters and buffers are fake tensors (dispatch Note [Copying fake
tensors]): large ones built on the CPU (fake CPU tensors) and ones on the GPU."""

import copy
import json

import torch

host_built = torch.nn.Linear(1024, 2048)  # 2M weights: a fake CPU tensor, as a large model built on the CPU
host_built.register_buffer("cache", torch.empty(2048, 1024))
on_gpu = torch.nn.Linear(64, 64).cuda()
before = torch.cuda.memory_allocated()
host_copy, gpu_copy = copy.deepcopy(host_built), copy.deepcopy(on_gpu)
print("PROBE", json.dumps({
    "new_parameter": host_copy.weight is not host_built.weight and gpu_copy.weight is not on_gpu.weight,
    "shapes": [list(host_copy.weight.shape), list(host_copy.cache.shape)],
    "devices": [str(host_copy.weight.device), str(gpu_copy.weight.device)],
    "requires_grad": host_copy.weight.requires_grad,
    "gpu_copy_bytes": torch.cuda.memory_allocated() - before,
}))
