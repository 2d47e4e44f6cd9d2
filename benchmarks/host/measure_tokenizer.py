"""Host time of Hugging Face `tokenizers` encoding text, by its length: what the host model's `tokenize_call_ns` and
`tokenize_char_ns` charge (models/host.py Note [Tokenizing on the host]).

    python -m benchmarks.host.measure_tokenizer            # writes $OUT/tokenizer.json

A data pipeline that tokenizes as it trains (TorchTitan's text datasets, a `Dataset` whose `__getitem__` calls a
tokenizer) does it on the rank's main thread between steps, while the GPU waits. The cases, one thread (the Rust
`encode` of one text runs on the calling thread):

- `encode`: `tokenizers.Tokenizer.encode` of each of 300 synthetic c4 documents (English prose and code from the
  standard library's docstrings: benchmarks/workloads/torchtitan/make_synthetic_c4.py), with two byte-level BPE
  tokenizers: TorchTitan's test tokenizer (benchmarks/workloads/torchtitan/tokenizer.json, 2k ids and no merges:
  about one token per character, what the TorchTitan rows of the accuracy table ran) and a 32k-id BPE trained on the
  same corpus (`tokenizers`' own trainer, deterministic: about 4.5 characters per token, as real tokenizers give);
- `encode_long`: texts of 1k to 256k characters made of those documents, to show whether the time stays linear;
- `torchtitan_sample` (where TorchTitan is importable): samples of 1k to 8k tokens from its `HuggingFaceTextDataset`
  (read, tokenize, build the tensor), to say how much of a sample the tokenizer is.

Each text: its first `encode`, as a data pipeline's (the fit reads it), and the median of REPEATS more calls of the
same text (about 1.4x faster on the H200 hosts: its data stay in the CPU's caches), and right after them the
host-speed probe's Python loop (`probe_us`: these VMs' hosts move between uncontended and contended within seconds,
so a probe taken minutes away says little about a row). A probe in a process of its own
(benchmarks/common/host_probe.py) also runs before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common.host_probe import median_call_s, probe_apart
from benchmarks.common.paths import BENCHMARKS
from benchmarks.workloads.timeline import python_loop_probe_us

REPEATS = 5
DOCUMENTS = 300
LONG_CHARS = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10]
SAMPLE_TOKENS = [1024, 2048, 4096, 8192]
TOKENIZER_DIR = BENCHMARKS / "workloads" / "torchtitan"
CORPUS = Path("/tmp/c4_synthetic/data.json")


def documents() -> list[str]:
    """The synthetic c4's texts (generated where absent, as TorchTitan's rows do)."""
    if not CORPUS.exists():
        subprocess.run([sys.executable, str(TOKENIZER_DIR / "make_synthetic_c4.py"), str(CORPUS)], check=True)
    with CORPUS.open() as f:
        return [json.loads(line)["text"] for line in f]


def tokenizers_measured(texts: list[str]) -> dict:
    """name -> tokenizer: TorchTitan's test tokenizer and a 32k-id byte-level BPE trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trained.decoder = decoders.ByteLevel()
    trained.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=32000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return {"torchtitan_test": Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json")), "bpe32k_trained": trained}


def encode_rows(tokenizer, texts: list[str], case: str, name: str) -> list[dict]:
    """Each text's first `encode` (`seconds`: a data pipeline encodes each document once, after others), then the
    median of REPEATS more of the same text (`seconds_repeated`: the caches warm with that text), then the probe."""
    rows = []
    for text in texts:
        start = time.perf_counter()
        tokens = len(tokenizer.encode(text).ids)
        first = time.perf_counter() - start
        repeated = median_call_s(lambda: tokenizer.encode(text), REPEATS, warmup=0)
        rows.append({"case": case, "tokenizer": name, "chars": len(text), "bytes": len(text.encode()),
                     "tokens": tokens, "seconds": first, "seconds_repeated": repeated,
                     "probe_us": python_loop_probe_us()})
    return rows


def long_texts(texts: list[str]) -> list[str]:
    joined = "\n\n".join(texts)
    while len(joined) < LONG_CHARS[-1]:
        joined += "\n\n" + joined
    return [joined[:n] for n in LONG_CHARS]


def torchtitan_sample_rows(tokens_per_batch: int = 1 << 18) -> list[dict]:
    """Seconds per sample of TorchTitan's text dataset over the same corpus at each of SAMPLE_TOKENS (as many samples
    as make `tokens_per_batch` tokens), where it is installed."""
    try:
        from torchtitan.components.tokenizer import HuggingFaceTokenizer
        from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset
    except ImportError:
        return []
    tokenizer = HuggingFaceTokenizer(str(TOKENIZER_DIR))
    rows = []
    for seq in SAMPLE_TOKENS:
        dataset = HuggingFaceTextDataset("c4_test", str(CORPUS.parent), tokenizer, seq_len=seq, infinite=True)
        batches = iter(dataset)
        for _ in range(8):
            next(batches)
        samples = tokens_per_batch // seq
        start = time.perf_counter()
        for _ in range(samples):
            next(batches)
        rows.append({"case": "torchtitan_sample", "tokens": seq, "seconds": (time.perf_counter() - start) / samples,
                     "probe_us": python_loop_probe_us()})
    return rows


def main() -> None:
    out = os.environ.get("OUT", "/tmp")
    texts = documents()
    chosen = texts[:: max(1, len(texts) // DOCUMENTS)][:DOCUMENTS]
    measured = tokenizers_measured(texts)
    before = probe_apart("before")
    rows = [row for name, tokenizer in measured.items() for row in encode_rows(tokenizer, chosen, "encode", name)]
    rows += encode_rows(measured["torchtitan_test"], long_texts(texts), "encode_long", "torchtitan_test")
    rows += torchtitan_sample_rows()
    after = probe_apart("after")
    for case, name in (("encode", "torchtitan_test"), ("encode", "bpe32k_trained"), ("encode_long", "torchtitan_test")):
        picked = [r for r in rows if r["case"] == case and r["tokenizer"] == name]
        chars, seconds = sum(r["chars"] for r in picked), sum(r["seconds"] for r in picked)
        print(f"{case:>12} {name:>16}: {len(picked)} texts, {chars} chars, {seconds * 1e9 / chars:.1f} ns/char, "
              f"{sum(r['tokens'] for r in picked) / chars:.3f} tokens/char", flush=True)
    for r in rows:
        if r["case"] == "torchtitan_sample":
            print(f"torchtitan sample of {r['tokens']} tokens: {r['seconds'] * 1e3:.2f} ms", flush=True)
    import tokenizers
    result = {"tokenizers": tokenizers.__version__,
              "cpus": len(os.sched_getaffinity(0)), "probes": [before, after], "rows": rows}
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
