"""Host (CPU) cost model: the time eager PyTorch spends on the CPU to issue a training step.

A simulated rank's host clock advances by these amounts as its script runs; the GPU timeline
starts each kernel no earlier than the host time it was launched at, so a step whose host work
outlasts its GPU work (small models, many small kernels: "launch-bound") is as long as its host
work. Deterministic: every cost is a constant times something the runtime counts.

What is charged (the constants, `HostConstants`, come from the GPU's profile: specs/<gpu>/host.json,
each with the fit and data it came from; see docs/models/host.md):

- every intercepted op: C++ dispatch + launch (`launch_ns`, `alloc_output_ns`, the gemm / attention
  / foreach / fused terms), views and allocations (`view_ns`, `alloc_ns`), syncs and `.item()`.
  These come from microbenchmarks: N back-to-back calls on tiny tensors with no synchronisation
  (benchmarks/host/measure_calls.py on data/h200/host/calls).
- a kernel op issued from Python (not by the autograd engine): `framework_ns` — Python binding,
  autograd graph recording, autocast, the user's statements around it;
- an `nn.Module` call: `module_call_ns` — `Module.__call__` and the Python of its `forward`;
- an autograd node the backward engine runs: `autograd_node_ns` — scheduling, input buffers,
  saved variables, the node's C++; its ops pay only their dispatch and launch;
- library calls whose own Python is most of their cost: `optimizer.step()` (`optimizer_step_ns`),
  `optimizer.zero_grad()` / `module.zero_grad()` (per parameter), `clip_grad_norm_`'s norm
  (`grad_norm_ns`), a DataLoader batch (`dataloader_next_ns`, and `dataloader_contention_ns` that
  its pin-memory thread takes from the ops issued next); runtime/python_costs.py charges them.

The context terms are fitted on real launch-bound steps, phase by phase (forward, backward, clip,
optimizer, zero_grad, data), for two model families at 1 to 28 layers with and without autocast and
fused/foreach AdamW (benchmarks/host/measure_launch_bound.py, data/h200/host/launch_bound; fit:
benchmarks/host/fit_context.py). Host time measured on the lent VMs varied by ±20% between steps, and by up
to 1.6x between leases for the same steps. The fits divide what they measured on a lease by that lease's
index (how much slower than the average lease it ran the host-bound ground-truth commands:
benchmarks/host/leases.py on data/h200/host/leases), so the constants stand for the average lease; the
per-op microbenchmarks are taken as measured.
Not modelled: the user's own Python that is not a module call (a dataset's `__getitem__` run in
the main process, custom loops), GC pauses. A tokenizer's work is (Note [Tokenizing on the host]).

Note [Tensor ops on the host]
A program's ops on CPU tensors run for real (or on fake CPU tensors where they are large: runtime/dispatch.py
Note [Hybrid dispatch]), and the host pays for the memory they move: a DataLoader's collate stacks each batch's
samples and `pin_memory()` copies the batch again; Megatron-core's GPT datasets give each sample a 2048 x 2048
attention mask, 8 MiB a micro-batch of two, which took about 3 ms of every micro-batch on the real host. Such an
op costs its bytes read and written over `cpu_bytes_per_s`, one thread's copy rate, plus `cpu_page_fault_ns` per
page of a new output above glibc's mmap threshold. Views and metadata ops move nothing. Only the program's main
thread pays (runtime/session.py `host_tensor_op`): DataLoader workers collate in processes of their own, and a
pin-memory thread pins beside the training loop. The rate is a copy's:
an op that computes more than it moves (a causal mask's `tril` on bools, 7-13x slower) is under-charged.

Note [Tensors from Python data]
`torch.tensor(list)`, `torch.as_tensor(list)` and the typed constructors (`torch.LongTensor(list)`) walk the Python
sequence in C++ and store each element into a new CPU tensor; op interception sees one op (`lift_fresh`) however
long the list, so that op pays `python_element_ns` per element of a tensor whose storage torch allocated (one that
shares a numpy array's memory, `torch.from_numpy` or `torch.as_tensor(ndarray)`, stored nothing, and
`torch.tensor(ndarray)` copies it in an op of its own). A data pipeline does this for every sample or batch it
tokenizes and pads: TorchTitan's text dataset a `torch.LongTensor` of each sample's token ids, Hugging Face's
`BatchEncoding` a `torch.tensor` of each padded batch. The constant is the storing pass (67 ns an element of a
4097-int list on an uncontended H200 host); `torch.tensor` without a dtype first infers one in a pass of its own,
about as long again, which is not charged (the op does not say whether a dtype was inferred).

Note [Tokenizing on the host]
A data pipeline that tokenizes as it trains does so on the rank's main thread between steps, while the GPU waits
for the next batch: TorchTitan's text datasets encode each document as they fill a sample (an H200 host spent 10-38
ms a step in TorchTitan's data loader, its GPU idle throughout; data/h200/e2e/frameworks/profiles/), and so does a
map-style dataset whose `__getitem__` calls a tokenizer. The tokenizer is Rust that op interception does not see, so
each call of Hugging Face `tokenizers`' encoders (`Tokenizer.encode`, `encode_batch`: what `transformers`' fast
tokenizers and TorchTitan's call) pays `tokenize_char_ns` per character it reads and `tokenize_token_ns` per token
it returns, charged as the call returns (runtime/python_costs.py). Two terms because tokenizers differ in tokens per
character: per character the byte-level pre-tokenizer and normalizer work, per token the vocabulary's lookups and
merges and the encoding's arrays. Fitted on two byte-level BPE tokenizers (one about a token per character, one about
4.5 characters per token) over documents of 0.4-4.5k characters, each document's first encode, as a pipeline encodes it
(the same text again runs 1.4x faster, its data in the CPU's caches), each at the host speed a probe gave right after
it: within 1.4 % of each's total (benchmarks/host/fit_tokenizer.py on data/h200/host/tokenizer). Not modelled: texts
beyond about 16k characters take longer per character (1.2-1.4x at 64-256k); `encode_batch` is charged as its texts one
after another, as with `TOKENIZERS_PARALLELISM=false` (its Rust threads would run them side by side on a host with cores
to spare); other tokenizer libraries (tiktoken, sentencepiece). The Python around the tokenizer (TorchTitan's token
buffer and sample tensors: little beside the tokenizer and the sample's tensor in its samples of 1-8k tokens) is a
library's Python: TorchTitan's is priced (models/python_prices.py Note [Library Python]), a program's own is not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from phantora.models.compute import foreach_launches, itemsize
from phantora.models.ops import OpCall, TensorMeta

PAGE_BYTES = 4096
MMAP_THRESHOLD_BYTES = 32 << 20
"""glibc's malloc serves a larger block by a mapping of its own (its dynamic threshold never exceeds 32 MiB on
64-bit Linux), so a CPU tensor that large gets fresh pages on every allocation."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HostConstants:
    """Host time per kind of call, in ns, on the host CPU the GPU's profile was measured with. The fields
    without a default are measured or fitted per GPU (specs/<gpu>/host.json names the fit and data of each)."""

    launch_ns: int
    """C++ dispatch and one kernel launch of a plain op on tiny tensors."""
    alloc_output_ns: int
    """Extra for an op that allocates its output through the caching allocator."""
    framework_ns: int
    """Per kernel op issued from Python (not by the backward engine): the Python binding, autograd recording,
    autocast and the statements around it."""
    module_call_ns: int
    """Per `nn.Module` call: `__call__` and the Python of its `forward` beyond its ops."""
    autograd_node_ns: int
    """Per autograd node the backward engine runs; its ops pay dispatch and launch only."""
    optimizer_step_ns: int
    """Python of one `optimizer.step()` beyond its ops (the per-tensor cost is in the foreach and fused terms,
    the per-launch cost in `foreach_launch_ns`)."""
    zero_grad_ns: int
    """`zero_grad(set_to_none=True)`, per call (it launches nothing) ..."""
    zero_grad_per_param_ns: int
    """... and per parameter."""
    grad_norm_ns: int
    """Python of `clip_grad_norm_`'s total norm beyond its ops (grouping by device and dtype)."""
    dataloader_next_ns: int
    """`next()` on a DataLoader whose workers have the batch ready (workers, pinned memory)."""
    dataloader_contention_ns: int
    """What else such a loader takes from the main thread per batch while it issues the next ops (its
    pin-memory thread competes for the GIL and the CPU): step time with the loader minus without, less
    `next()` and the batch's copies."""
    view_ns: int
    """A view or metadata op (no kernel)."""
    alloc_ns: int
    """A pure allocation (`torch.empty`)."""
    gemm_extra_ns: int
    """cuBLAS heuristics and launch of a GEMM on top of `launch_ns`."""
    gemm_select_ns: int
    """cuBLAS's algorithm selection for a GEMM problem (inputs' shapes, strides and dtypes) the process has not
    run before, on top of `gemm_extra_ns`; cuBLAS caches its choice, so a problem pays once (a mixture-of-experts
    layer, whose experts' row counts change from call to call, pays it on most expert GEMMs: Note [Simulated
    routing] in runtime/routing.py). Small m (below ~400) and fp32 problems, which take longer, are not told apart."""
    gemm_kernel_load_ns: int
    """The first launch in the process of a cuBLAS kernel, on top of `gemm_select_ns` (models/gemm_kernels.py
    Note [First launch of a cuBLAS kernel])."""
    attention_extra_ns: int
    """SDPA backend kernels (flash, cuDNN) on top of `launch_ns`."""
    foreach_base_ns: int
    """A foreach op with one tensor."""
    foreach_inplace_per_tensor_ns: int
    """Per tensor of an in-place foreach op in an optimizer step, the optimizer's Python grouping included."""
    foreach_alloc_per_tensor_ns: int
    """Per tensor of a foreach op that allocates outputs (`_foreach_norm` in `clip_grad_norm_`), its Python
    grouping included."""
    foreach_launch_ns: int
    """Per kernel launch of a foreach or fused-optimizer op beyond its first (multi_tensor_apply launches once per
    320 chunks of 65536 elements, or per 30-110 tensors: `compute.foreach_launches`): one `cudaLaunchKernel`."""
    fused_optimizer_per_tensor_ns: int
    """Per parameter of a fused optimizer op (`AdamW(fused=True).step`)."""
    sync_ns: int
    """`torch.cuda.synchronize()` on an idle GPU."""
    item_ns: int
    """`.item()` round trip of a finished scalar (device-to-host copy and sync), GPU idle."""
    functional_collective_ns: int
    """A functional collective (`torch.distributed._functional_collectives`: the custom op's Python, the
    AsyncCollectiveTensor it returns) beyond `collective_ns`; charged per call of the module's API from Python
    (runtime/python_costs.py)."""
    all_to_all_extra_ns: int
    """A functional all-to-all (`all_to_all_single[_autograd]`) beyond `functional_collective_ns`: its split sizes
    (the per-peer lists the process group turns into one send and one receive per peer) and its wait registration."""
    index_extra_ns: int
    """Advanced indexing by a tensor of indices (`x[idx]`, `index_add`, `index_put_`) on top of a plain op: the
    indices' checks and the restrided iterator."""
    radix_sort_pass_ns: int
    """Per byte of key of a sort along a dimension longer than 4096 (PyTorch runs CUB's radix sort then: one
    memset and one kernel per 8 bits, plus a histogram and a scan)."""
    compiled_call_ns: int
    """Per call of a graph `torch.compile` made (its forward, or its backward from the autograd engine): Dynamo's
    guards, AOTAutograd's runtime wrappers and the generated code's prologue, beyond its inputs and kernels."""
    compiled_input_ns: int
    """... per tensor input of that call: the guards' tensor checks, AOTAutograd's handling of each argument, the
    generated code's size and stride asserts (with CUDA graphs, the checks of the static inputs' addresses)."""
    compiled_launch_ns: int
    """Per kernel the generated code launches (a Triton kernel through its launcher, or an extern kernel's ATen
    call), with the wrapper's Python around it: the buffers it allocates and the views it reinterprets. Replaces
    an eager op's dispatch and launch; an extern kernel adds what its op costs beyond them (`gemm_extra_ns`, ...)."""
    subclass_op_ns: int
    """Per op issued from Python on a tensor subclass with its own dispatch (DTensor): unwrapping, sharding
    propagation (cached), redistribution checks and re-wrapping, beyond the ops it then issues on the local
    tensors."""
    subclass_backward_op_ns: int
    """The same for an op the autograd engine issues (in C++, no Python around it)."""
    subclass_op_per_tensor_ns: int
    """... and per subclass tensor beyond the first in its arguments (a foreach op over a list of DTensor
    parameters in `clip_grad_norm_` or the optimizer). The model does not tell placements apart."""
    async_collective_op_ns: int
    """Per op on a functional collective's result (`AsyncCollectiveTensor`) before it is waited for, beyond the op
    itself: its `__torch_dispatch__` in Python (arguments and outputs mapped through pytree, a `wait_tensor` on each
    argument not yet waited for, or for a view op a new wrapper per output). `aten.view` skips it (the dispatch's
    fast path wraps its result and does nothing else)."""
    async_collective_per_output_ns: int
    """... and per output a view op re-wraps (a split into 8 chunks wraps 8)."""
    library_call_ns: Mapping[str, int]
    """Python of distributed-library calls (FSDP2's hooks, DTensor's and tensor parallelism's entry points, named
    `Class.method`) beyond the ops they issue and what the rest of this model charges inside them: real steps'
    mean exclusive host time per call minus the simulation's. runtime/python_costs.py charges them at the call's
    start."""
    accumulating_call_ns: Mapping[str, int]
    """... of those that take a lighter path in a backward that keeps its gradients (gradient accumulation with
    FSDP2's `set_requires_gradient_sync(False)`: post_backward only accumulates and reshards), that path's."""
    collective_ns: int = 89542
    """Host side of one c10d collective or point-to-point call, from Python (c10d's API and its decorators) down
    through ProcessGroupNCCL (work object, stream sync events) to NCCL's launch: what such a call took in situ in
    framework programs' steady steps, cProfile's own cost taken off (benchmarks/host/fit_collective_calls.py). In a
    tight loop the same call takes about a third of it (data/h200/host/collective_calls/)."""
    query_ns: int = 1500
    """Event.query() / Stream.query() (cudaEventQuery through torch): an estimate, not measured; it keeps
    polling loops (`while not e.query()`) advancing in simulated time."""
    cpu_bytes_per_s: float = 18.684e9
    """Bytes read plus bytes written per second by a tensor op on CPU tensors on one intra-op thread (what torchrun
    gives each rank): a DataLoader's collate, `pin_memory()`, a causal mask built on the host
    (benchmarks/host/fit_cpu_tensor_ops.py). Ops that compute more than they move (`tril` on a bool mask) run
    slower, and tensors that fit in the caches faster."""
    cpu_page_fault_ns: int = 2454
    """Per 4 KiB page of a CPU tensor op's new output above glibc's mmap threshold: a fresh mapping whose pages
    fault in on first touch."""
    tokenize_char_ns: int = 457
    """Per character of text a Hugging Face `tokenizers` encoder reads: normalizing, the byte-level pre-tokenizer's
    regex and byte mapping (Note [Tokenizing on the host]; benchmarks/host/fit_tokenizer.py)."""
    tokenize_token_ns: int = 141
    """... and per token it returns: the model's word lookups and merges, the encoding's ids, offsets and masks."""
    python_element_ns: int = 79
    """Per element of Python data stored into a new CPU tensor (`torch.tensor(list)`, `torch.LongTensor(list)`):
    Note [Tensors from Python data] (benchmarks/host/fit_tensor_from_python.py)."""

    def scaled(self, factor: float) -> "HostConstants":
        """Every host time multiplied by `factor` (a host CPU that takes `factor` times as long); a rate (a field
        named `*_per_s`) divided by it."""
        if factor == 1.0:
            return self
        return HostConstants(**{f.name: _scaled(getattr(self, f.name), 1 / factor if f.name.endswith("_per_s") else factor)
                                for f in fields(self)})


def _scaled(value: int | Mapping[str, int], factor: float) -> int | dict[str, int]:
    if isinstance(value, Mapping):
        return {name: round(ns * factor) for name, ns in value.items()}
    return round(value * factor)


_VIEW_OPS = frozenset({
    "aten.view", "aten._unsafe_view", "aten.t", "aten.transpose", "aten.expand", "aten.slice", "aten.select",
    "aten.unsqueeze", "aten.squeeze", "aten.detach", "aten.alias", "aten.as_strided", "aten.permute", "aten.split",
    "aten.split_with_sizes", "aten.unbind", "aten.narrow", "aten.diagonal", "aten.unfold", "aten._reshape_alias",
    "aten.view_as_real", "aten.view_as_complex", "aten.lift_fresh", "aten.expand_as", "aten.view_as", "aten.movedim",
    "aten.chunk", "aten.unsafe_split", "aten._conj", "aten._neg_view", "prim.device", "aten.sym_size", "aten.sym_stride",
})
_ALLOC_OPS = frozenset({"aten.empty", "aten.empty_strided", "aten.empty_like", "aten.new_empty", "aten.new_empty_strided"})
_GEMM_OPS = frozenset({"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_mm", "aten.addbmm", "aten.mv",
                       "aten.addmv", "aten.dot"})
_INDEX_OPS = frozenset({"aten.index", "aten.index_add", "aten.index_add_", "aten.index_put", "aten.index_put_",
                        "aten._index_put_impl_"})
"""Advanced indexing ops that pay `index_extra_ns`."""
_SELECTED_GEMMS = frozenset({"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_mm", "aten.addbmm"})
"""GEMMs that cuBLAS(Lt) chooses an algorithm for by heuristics (matrix-vector products do not)."""
_MULTI_TENSOR = ("aten._foreach_", "aten._fused_adam", "aten._fused_sgd")


def _packet(name: str) -> str:
    return name.rsplit(".", 1)[0] if name.count(".") >= 2 else name


class HostModel:
    """Host time of intercepted calls. Pure: same op, same answer."""

    def __init__(self, constants: HostConstants):
        self.c = constants

    def op_ns(self, op: OpCall, *, backward: bool = False) -> int:
        """Host time of one intercepted op as it is issued inside a training step; `backward`: issued by
        the autograd engine (its node pays `autograd_node_ns`), not from Python."""
        p = _packet(op.name)
        c = self.c
        if p in _VIEW_OPS:
            return c.view_ns
        if p in _ALLOC_OPS:
            return c.alloc_ns
        if p == "aten._local_scalar_dense":
            return c.item_ns
        if p.startswith(_MULTI_TENSOR):
            return self._foreach_ns(op, p)
        t = c.launch_ns if backward else c.launch_ns + c.framework_ns
        if op.outputs and not p.endswith("_"):
            t += c.alloc_output_ns
        return t + self._beyond_launch_ns(op, p)

    def _beyond_launch_ns(self, op: OpCall, p: str) -> int:
        """What a kernel op's host side costs beyond a plain op's dispatch and launch (cuBLAS heuristics, SDPA's
        backend kernels, indexing's checks, a radix sort's passes)."""
        c = self.c
        if p in _GEMM_OPS:
            return c.gemm_extra_ns
        if p == "aten.sort":
            return self._radix_passes(op) * c.radix_sort_pass_ns
        if "attention" in p:
            return c.attention_extra_ns
        if p in _INDEX_OPS:
            return c.index_extra_ns
        return 0

    def compiled_call_ns(self, inputs: int) -> int:
        """Host time of one call of a compiled graph with `inputs` tensor inputs, beyond the kernels it launches."""
        return self.c.compiled_call_ns + self.c.compiled_input_ns * inputs

    def compiled_launch_ns(self, op: OpCall) -> int:
        """Host time of one kernel launched by a compiled graph's generated code (Inductor's wrapper)."""
        return self.c.compiled_launch_ns + self._beyond_launch_ns(op, _packet(op.name))

    @staticmethod
    def _radix_passes(op: OpCall) -> int:
        """Radix-sort passes of a CUDA sort: none for a sorted dimension of at most 4096 elements (a
        bitonic sort in one kernel), else one per byte of key."""
        inputs = op.tensor_inputs()
        if not inputs or not inputs[0].shape:
            return 0
        dim = dict(op.kwargs).get("dim", next((a for a in op.args[1:] if isinstance(a, int) and not isinstance(a, bool)), -1))
        shape = inputs[0].shape
        if shape[dim % len(shape)] <= 4096:
            return 0
        return itemsize(inputs[0])

    def gemm_problem(self, op: OpCall) -> tuple | None:
        """What cuBLAS keys its algorithm choice by for a GEMM op (inputs' shapes, strides and dtypes,
        the result's dtype); None for other ops."""
        p = _packet(op.name)
        if p not in _SELECTED_GEMMS:
            return None
        out = op.outputs[0].dtype if op.outputs else None
        return p, out, tuple((m.shape, m.stride, m.dtype) for m in op.tensor_inputs())

    def gemm_select_ns(self) -> int:
        """Host time of cuBLAS choosing an algorithm for a GEMM problem the process has not run."""
        return self.c.gemm_select_ns

    def gemm_kernel_load_ns(self) -> int:
        """Host time of the process's first launch of a cuBLAS kernel."""
        return self.c.gemm_kernel_load_ns

    def pays_framework(self, op: OpCall, *, backward: bool = False) -> bool:
        """Whether `op_ns` includes `framework_ns` for this op (a kernel op issued from Python)."""
        if backward:
            return False
        p = _packet(op.name)
        return not (p in _VIEW_OPS or p in _ALLOC_OPS or p == "aten._local_scalar_dense" or p.startswith(_MULTI_TENSOR))

    def view_ns(self, name: str) -> int:
        """Host time of a view/metadata op (the runtime filters these out before the compute model)."""
        return self.c.view_ns

    def alloc_ns(self, name: str) -> int:
        """Host time of a pure allocation (empty, empty_strided)."""
        return self.c.alloc_ns

    def sync_ns(self) -> int:
        """Host time of a synchronize once the GPU work it waits for is done."""
        return self.c.sync_ns

    def collective_ns(self) -> int:
        """Host time of issuing one NCCL call through c10d."""
        return self.c.collective_ns

    def functional_collective_ns(self, name: str) -> int:
        """Host time of functional collective `name`'s Python beyond its c10d call."""
        extra = self.c.all_to_all_extra_ns if name.startswith("all_to_all") else 0
        return self.c.functional_collective_ns + extra

    def cpu_tensor_op_ns(self, moved_bytes: int, new_outputs: Iterable[int] = ()) -> int:
        """Host time of a tensor op on CPU tensors that reads and writes `moved_bytes` in all; `new_outputs`: the
        sizes of the new pageable tensors it allocates (Note [Tensor ops on the host])."""
        pages = sum(n // PAGE_BYTES for n in new_outputs if n > MMAP_THRESHOLD_BYTES)
        return round(moved_bytes / self.c.cpu_bytes_per_s * 1e9 + pages * self.c.cpu_page_fault_ns)

    def query_ns(self) -> int:
        """Host time of a stream or event query."""
        return self.c.query_ns

    def subclass_op_ns(self, tensors: int, *, backward: bool = False) -> int:
        """Host time of a tensor subclass's own dispatch of one op with `tensors` subclass arguments;
        `backward`: issued by the autograd engine."""
        own = self.c.subclass_backward_op_ns if backward else self.c.subclass_op_ns
        return own + self.c.subclass_op_per_tensor_ns * max(tensors - 1, 0)

    def async_collective_op_ns(self, outputs: int, *, mapped: bool = True) -> int:
        """Host time of an `AsyncCollectiveTensor`'s own dispatch of one op; `outputs`: the outputs it wraps
        (a view op's), 0 for an op that waits on its arguments; `mapped`: False for `aten.view`, which its
        dispatch wraps on a fast path (no pytree maps, no wait)."""
        dispatch = self.c.async_collective_op_ns if mapped else 0
        return dispatch + self.c.async_collective_per_output_ns * outputs

    def library_call_ns(self, name: str, *, accumulating: bool = False) -> int:
        """Host time of one call of library Python `name` (`Class.method`) beyond its ops; 0 if unknown.
        `accumulating`: made in a backward that keeps its gradients (no gradient sync)."""
        if accumulating and name in self.c.accumulating_call_ns:
            return self.c.accumulating_call_ns[name]
        return self.c.library_call_ns.get(name, 0)

    def library_calls(self) -> list[str]:
        """The library calls this model charges."""
        return sorted(self.c.library_call_ns)

    def module_call_ns(self) -> int:
        """Host time of one `nn.Module` call, beyond the ops it issues."""
        return self.c.module_call_ns

    def autograd_node_ns(self) -> int:
        """Host time of the backward engine running one node, beyond the ops it issues."""
        return self.c.autograd_node_ns

    def optimizer_step_ns(self) -> int:
        """Host time of `optimizer.step()`'s Python, beyond the ops it issues."""
        return self.c.optimizer_step_ns

    def zero_grad_ns(self, params: int) -> int:
        """Host time of `zero_grad()` over `params` parameters, beyond any ops it issues."""
        return self.c.zero_grad_ns + self.c.zero_grad_per_param_ns * params

    def grad_norm_ns(self) -> int:
        """Host time of `clip_grad_norm_`'s total-norm Python, beyond the ops it issues."""
        return self.c.grad_norm_ns

    def dataloader_next_ns(self) -> int:
        """Host time of fetching one ready batch from a DataLoader iterator."""
        return self.c.dataloader_next_ns

    def tokenize_ns(self, chars: int, tokens: int) -> int:
        """Host time of a tokenizer encoding `chars` characters of text into `tokens` tokens (Note [Tokenizing on
        the host])."""
        return self.c.tokenize_char_ns * chars + self.c.tokenize_token_ns * tokens

    def python_data_ns(self, elements: int) -> int:
        """Host time of storing `elements` Python numbers into a new CPU tensor (Note [Tensors from Python data])."""
        return self.c.python_element_ns * elements

    def dataloader_contention_ns(self) -> int:
        """Host time a DataLoader's helper threads take from the main thread per batch, while it
        issues the ops that follow (the runtime spreads it over them: Session.thread_steal_ns)."""
        return self.c.dataloader_contention_ns

    def _foreach_ns(self, op: OpCall, p: str) -> int:
        c = self.c
        lists = [v for v in op.args if isinstance(v, tuple) and v and isinstance(v[0], TensorMeta)]
        n = max((len(v) for v in lists), default=1)
        more_launches = max(foreach_launches(op) - 1, 0) * c.foreach_launch_ns
        if p.startswith("aten._fused_"):
            return c.foreach_base_ns + c.fused_optimizer_per_tensor_ns * n + more_launches
        allocates = not p.endswith("_")  # out-of-place foreach ops (and _foreach_norm) allocate a list
        per = c.foreach_alloc_per_tensor_ns if allocates else c.foreach_inplace_per_tensor_ns
        return c.foreach_base_ns + per * n + more_launches
