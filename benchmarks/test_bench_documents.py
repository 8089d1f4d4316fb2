"""Document sampling from a local parquet file of 100,000 documents (``LocalDocuments``).

The corpus is synthetic and deterministic: 2,000 twelve-word sentences built from a made-up
vocabulary, and each document a numbered run of 8 to 25 of them (about 100 to 300 words, 0.6 to
1.8 KiB), written once per module with pyarrow in ten row groups of 10,000 rows.

Every figure is reported, as documents per second and as a ratio to a baseline measured in the same
test (interleaved: one baseline call per benchmark round, from pytest-benchmark's untimed setup),
and never asserted. The baseline is pyarrow reading the same text column into Python strings, in
file order, with no cleaning, capping, hashing or shuffling: what reading the file costs by itself.
Target: above 1,000 documents/s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pytest

from spade_gym.documents import LocalDocuments, cap_tokens, clean_text

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

N = 100_000
ROW_GROUP = 10_000
BATCH = 1_000  # documents per timed call in the steady-state benchmark
TARGET = 1_000.0  # documents/s


def synthetic_documents(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct documents of about 100-300 words each, the same for the same seed."""
    rng = np.random.default_rng(seed)
    syllables = ["ka", "to", "ri", "ne", "sa", "mo", "lu", "pi", "de", "an", "or", "el", "us", "im", "ba", "ve"]
    vocab = ["".join(rng.choice(syllables, size=int(rng.integers(1, 4)))) for _ in range(3_000)]
    sentences = []
    for _ in range(2_000):
        words = [vocab[int(i)] for i in rng.integers(0, len(vocab), size=12)]
        sentences.append(" ".join(words).capitalize() + ".")
    counts = rng.integers(8, 26, size=n)
    picks = rng.integers(0, len(sentences), size=int(counts.sum()))
    docs, at = [], 0
    for i, k in enumerate(counts.tolist()):
        docs.append(f"Record {i}. " + " ".join(sentences[j] for j in picks[at : at + k].tolist()))
        at += k
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float]]:
    """The parquet file, and how long generating and writing it took."""
    begin = time.perf_counter()
    docs = synthetic_documents(N)
    generated = time.perf_counter()
    path = tmp_path_factory.mktemp("documents") / "corpus.parquet"
    pq.write_table(pa.table({"text": docs, "id": list(range(N))}), path, row_group_size=ROW_GROUP)
    written = time.perf_counter()
    return path, {
        "generate_s": generated - begin,
        "write_s": written - generated,
        "file_mib": path.stat().st_size / 2**20,
        "mean_words": float(np.mean([len(d.split()) for d in docs[:2_000]])),
    }


def arrow_reader(path: Path, batch: int) -> Callable[[], list[str]]:
    """The baseline: the next ``batch`` texts of the column as Python strings, in file order, cycling."""
    file = pq.ParquetFile(path)
    batches: Iterator[Any] = iter(())

    def read() -> list[str]:
        nonlocal batches
        out: list[str] = []
        while len(out) < batch:
            chunk = next(batches, None)
            if chunk is None:
                batches = file.iter_batches(batch_size=batch, columns=["text"])
                continue
            out.extend(chunk.column(0).to_pylist())
        return out

    return read


class Interleaved:
    """A baseline timed once per benchmark round, from pedantic's untimed setup."""

    def __init__(self, fn: Callable[[], Any], prepare: Callable[[], Any] | None = None) -> None:
        self.fn, self.prepare = fn, prepare
        self.samples: list[float] = []

    def setup(self) -> None:
        if self.prepare is not None:
            self.prepare()
        begin = time.perf_counter()
        self.fn()
        self.samples.append(time.perf_counter() - begin)


def p50(benchmark: Any) -> float | None:
    return None if benchmark.stats is None else benchmark.stats.stats.median


def verdict(rate: float) -> str:
    return f"target > {TARGET:,.0f} docs/s: {'met' if rate > TARGET else 'NOT met'}"


# ------------------------------------------------------------------------------------------------


def test_sample_steady_state(benchmark: Any, corpus: tuple[Path, dict[str, float]], report: Any) -> None:
    """``source.sample(1000)`` once the shuffle buffer is full: read, shuffle, clean, cap, hash,
    build the provenance; against pyarrow reading 1,000 texts of the same column."""
    path, build = corpus
    source = LocalDocuments(path, seed=0)
    source.sample(1)  # opens the file and fills the shuffle buffer (see the cold-start benchmark)
    base = Interleaved(arrow_reader(path, BATCH))
    docs = benchmark.pedantic(lambda: source.sample(BATCH), setup=base.setup, rounds=30, warmup_rounds=3)
    assert len(docs) == BATCH and all(d.source["kind"] == "parquet" for d in docs)
    # Where the time goes, on 2,000 texts of the file (measured once, not interleaved).
    texts = pq.read_table(path, columns=["text"]).column(0).slice(0, 2_000).to_pylist()
    begin = time.perf_counter()
    cleaned = [clean_text(t) or "" for t in texts]
    clean_us = (time.perf_counter() - begin) / len(texts) * 1e6
    begin = time.perf_counter()
    for text in cleaned:
        cap_tokens(text, 1024)
    cap_us = (time.perf_counter() - begin) / len(texts) * 1e6
    median_s = p50(benchmark)
    if median_s is None:
        report("sample(1000), steady state: n/a (benchmark disabled)", **build)
        return
    rate = BATCH / median_s
    base_rate = BATCH / median(base.samples[3:])
    report(
        f"sample({BATCH}) from {N:,} parquet documents: {rate:,.0f} docs/s (p50 {median_s * 1e3:.1f} ms); "
        f"pyarrow read of the same column {base_rate:,.0f} docs/s; ratio {base_rate / rate:.1f}x the bare read; "
        f"clean_text {clean_us:.1f} us + cap_tokens {cap_us:.1f} us per document; {verdict(rate)}",
        docs_per_s=rate,
        baseline_docs_per_s=base_rate,
        ratio_to_baseline=base_rate / rate,
        clean_text_us=clean_us,
        cap_tokens_us=cap_us,
        n_documents=N,
        **build,
    )


def test_full_epoch(benchmark: Any, corpus: tuple[Path, dict[str, float]], report: Any) -> None:
    """All 100,000 documents through a fresh source: one epoch, buffer fill included; against pyarrow
    reading the whole column into Python strings."""
    path, _ = corpus

    def read_all() -> list[str]:
        return list(pq.read_table(path, columns=["text"]).column(0).to_pylist())

    base = Interleaved(read_all)
    docs = benchmark.pedantic(lambda: LocalDocuments(path, seed=1).sample(N), setup=base.setup, rounds=1)
    assert len({d.source["row"] for d in docs}) == N  # one epoch: every row once
    median_s = p50(benchmark)
    if median_s is None:
        report("full epoch: n/a (benchmark disabled)")
        return
    rate = N / median_s
    base_rate = N / median(base.samples)
    report(
        f"one epoch of {N:,} parquet documents: {rate:,.0f} docs/s ({median_s:.2f} s); pyarrow read of the column "
        f"{base_rate:,.0f} docs/s; ratio {base_rate / rate:.1f}x; {verdict(rate)}",
        docs_per_s=rate,
        baseline_docs_per_s=base_rate,
        ratio_to_baseline=base_rate / rate,
        epoch_s=median_s,
    )


def test_cold_start(benchmark: Any, corpus: tuple[Path, dict[str, float]], report: Any) -> None:
    """``LocalDocuments(path).sample(1)``: file metadata, the constructor's check for a usable
    document (one batch), the batches until the 10,000-document shuffle buffer is full, one document
    cleaned; against pyarrow reading 10,000 texts."""
    path, _ = corpus
    base = Interleaved(arrow_reader(path, 10_000))
    docs = benchmark.pedantic(lambda: LocalDocuments(path, seed=2).sample(1), setup=base.setup, rounds=5)
    assert len(docs) == 1
    median_s = p50(benchmark)
    if median_s is None:
        report("cold start: n/a (benchmark disabled)")
        return
    base_s = median(base.samples)
    report(
        f"first sample of a new source (fills a 10,000-document buffer): {median_s * 1e3:.1f} ms; pyarrow read of "
        f"10,000 texts {base_s * 1e3:.1f} ms; ratio {median_s / base_s:.2f}x",
        first_sample_ms=median_s * 1e3,
        baseline_ms=base_s * 1e3,
        ratio_to_baseline=median_s / base_s,
    )


def test_resume_mid_epoch(benchmark: Any, corpus: tuple[Path, dict[str, float]], report: Any) -> None:
    """A checkpoint 50,000 documents into an epoch: ``load_state_dict`` on a fresh source, then
    ``sample(1)``, which replays (reads and reshuffles, without cleaning) those 50,000 records;
    against pyarrow reading 50,000 texts."""
    path, _ = corpus
    position = 50_000
    source = LocalDocuments(path, seed=3)
    source.sample(position)
    state = source.state_dict()
    expected = source.sample(1)

    def resume() -> Any:
        fresh = LocalDocuments(path, seed=3)
        fresh.load_state_dict(state)
        return fresh.sample(1)

    base = Interleaved(arrow_reader(path, position))
    got = benchmark.pedantic(resume, setup=base.setup, rounds=3)
    assert got == expected
    median_s = p50(benchmark)
    if median_s is None:
        report("resume: n/a (benchmark disabled)")
        return
    base_s = median(base.samples)
    report(
        f"resume {position:,} documents into an epoch: {median_s * 1e3:.0f} ms; pyarrow read of {position:,} texts "
        f"{base_s * 1e3:.0f} ms; ratio {median_s / base_s:.2f}x",
        resume_ms=median_s * 1e3,
        baseline_ms=base_s * 1e3,
        ratio_to_baseline=median_s / base_s,
    )
