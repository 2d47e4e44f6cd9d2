"""Mixture-of-experts routing on a simulated GPU: the experts each token goes to, drawn so that every rank
agrees with every other on who sends what.

Note: [Simulated routing]
A mixture-of-experts layer scores each token against its experts, keeps the top k (`torch.topk` of the
scores: TorchTitan, Megatron-core, Hugging Face's MoE models), counts the tokens per expert (`histc`,
`bincount`, a sum over a one-hot mask), exchanges the counts between expert-parallel ranks (an all-to-all
or all-gather), reads them on the host and sizes its token all-to-alls and its experts' GEMMs by them. The
scores do not exist here, so the choice is drawn where it is made: `topk` of unknown values returns, for
each row, k distinct indices drawn uniformly (what a balanced router gives, the load the usual
load-balancing loss aims for, with a real router's fluctuations). The drawn indices are known values
(Note [Shadow values] in runtime/shadows.py), so everything the program derives from them is computed for
real: its counts, its sort, its split sizes, and the shapes that follow.

Every rank can compute every rank's draw: a draw is a function of the global rank and of a draw number,
and an exchange of values known this way is known on every member (`Shadows.all_to_all`,
`Shadows.all_gather`). So what each rank sends is what the others expect to receive, and the output sizes
follow; no rank needs another's data.

The draw number is the CUDA generator's Philox offset, which a draw advances as a random kernel would:
activation checkpointing saves the generator's state before a checkpointed forward and restores it to
recompute, so a recomputed router draws the same routing as the forward did (as a GPU's deterministic
router recomputes the same choice), and all ranks, running the same program, number their draws alike.
The seed of the generator is not used: programs seed ranks differently, and each rank must be able to
redraw the others'. Nothing else moves the offset here (no random values exist), so only routing draws
tell a simulated GPU's `get_rng_state()` from a real one's.

Where a count is taken of values that are not known (`bincount` with `minlength` of an unknown tensor), the
counts themselves are drawn the same way (`random_counts`: n elements over the bins, each bin uniform).

What is not modelled: a router's preferences (skewed load, node-limited groups: a drawn choice ignores
the scores' mask), and ranks that route the same tokens (tensor-parallel ranks before a sequence split)
draw different choices, as their draws are their own. Each draw costs the simulator's host CPU about as
much as the rows times the experts (it is not charged to the simulated host). Draws of more than
`MAX_DRAW_ELEMENTS` scores are not made (their indices stay unknown, as values read back are placeholders).
"""

from __future__ import annotations

import torch

ROUTING_SEED = 20261122
PHILOX_OFFSET_STEP = 4
"""How far a draw advances the generator's offset (CUDA's Philox offsets move in multiples of 4)."""
MAX_DRAW_ELEMENTS = 1 << 28
"""Largest `topk` input (rows x choices) whose indices are drawn."""
_ROWS_PER_CHUNK = 1 << 16
"""Rows drawn at a time, bounding the host memory a draw takes."""


def next_draw(device: int) -> int:
    """The number of the next routing draw on `device`: its CUDA generator's Philox offset, which the draw
    advances (Note [Simulated routing])."""
    generator = torch.cuda.default_generators[device]
    offset = generator.get_offset()
    generator.set_offset(offset + PHILOX_OFFSET_STEP)
    return offset


def _generator(draw: int, rank: int) -> torch.Generator:
    return torch.Generator().manual_seed((ROUTING_SEED + draw) * 1_000_003 + rank)


def drawn_topk_indices(shape: tuple[int, ...], dim: int, choices: int, draw: int, rank: int) -> torch.Tensor:
    """`topk` indices of shape `shape` (k along `dim`) over `choices` candidates: k distinct candidates per
    row, uniformly; the same for the same `draw` and `rank`."""
    dim = dim % len(shape) if shape else 0
    k = shape[dim] if shape else 1
    moved = tuple(n for i, n in enumerate(shape) if i != dim)
    rows = 1
    for n in moved:
        rows *= n
    generator = _generator(draw, rank)
    with torch._C._DisableTorchDispatch():
        parts = [torch.rand(min(_ROWS_PER_CHUNK, rows - start), choices, generator=generator).topk(k, dim=1).indices
                 for start in range(0, rows, _ROWS_PER_CHUNK)]
        indices = torch.cat(parts) if parts else torch.empty(0, k, dtype=torch.int64)
        if not shape:
            return indices.reshape(())
        return indices.reshape(*moved, k).movedim(-1, dim).contiguous()


def random_counts(n: int, bins: int, draw: int, rank: int) -> torch.Tensor:
    """n elements over `bins`, each bin drawn uniformly; the same counts for the same `draw` and `rank`."""
    with torch._C._DisableTorchDispatch():
        return torch.bincount(torch.randint(bins, (n,), generator=_generator(draw, rank)), minlength=bins)
