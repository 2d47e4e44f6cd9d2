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
- `torchtitan_sample` (where TorchTitan is importable): one 4096-token sample from its `HuggingFaceTextDataset`
  (read, tokenize, build the tensor), to say how much of a sample the tokenizer is.

Each case: one warm-up call, then the median of REPEATS timed calls. A host-speed probe
(benchmarks/common/host_probe.py) runs before and after, to bring the times to the reference host.
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

REPEATS = 5
DOCUMENTS = 300
LONG_CHARS = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10]
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
    rows = []
    for text in texts:
        seconds = median_call_s(lambda: tokenizer.encode(text), REPEATS)
        rows.append({"case": case, "tokenizer": name, "chars": len(text), "bytes": len(text.encode()),
                     "tokens": len(tokenizer.encode(text).ids), "seconds": seconds})
    return rows


def long_texts(texts: list[str]) -> list[str]:
    joined = "\n\n".join(texts)
    while len(joined) < LONG_CHARS[-1]:
        joined += "\n\n" + joined
    return [joined[:n] for n in LONG_CHARS]


def torchtitan_sample_rows(samples: int = 64) -> list[dict]:
    """Seconds per 4096-token sample of TorchTitan's text dataset over the same corpus, where it is installed."""
    try:
        from torchtitan.components.tokenizer import HuggingFaceTokenizer
        from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset
    except ImportError:
        return []
    tokenizer = HuggingFaceTokenizer(str(TOKENIZER_DIR))
    dataset = HuggingFaceTextDataset("c4_test", str(CORPUS.parent), tokenizer, seq_len=4096, infinite=True)
    batches = iter(dataset)
    for _ in range(8):
        next(batches)
    start = time.perf_counter()
    for _ in range(samples):
        next(batches)
    return [{"case": "torchtitan_sample", "tokens": 4096, "seconds": (time.perf_counter() - start) / samples}]


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
            print(f"torchtitan sample of 4096 tokens: {r['seconds'] * 1e3:.2f} ms", flush=True)
    import tokenizers
    result = {"tokenizers": tokenizers.__version__,
              "cpus": len(os.sched_getaffinity(0)), "probes": [before, after], "rows": rows}
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
