"""Speed of the registry with 100,000 environments: lookups, listings and replay sampling.

The index is filled with 100,000 **synthetic rows** through the index's own insert path
(``Index.insert_rows``, the one ``Registry.add`` uses), not with 100,000 folders: writing and
fsync'ing 200,000 files would take minutes and measure the disk, not the registry. The rows look
like real ones (a 1 KiB MinHash signature each, a third of them per setting, a tenth without a
regret estimate, a spread of ``last_sampled`` values), so the database has the size and shape of a
real one. Because no folder backs them, the registry is never reopened in this module (opening
re-checks the index against the folders and would drop them), and calls that write ``meta.json``
(``add``, ``update_stats``) are not measured here; a statistics change by "another process" is
made through the index, as that process's ``update_stats`` would leave it.

Every figure is reported, as an absolute time and as a ratio to a baseline measured in the same
test (interleaved, one baseline call per benchmark round, so that drift hits both), and never
asserted. Target: below 5 ms per sample with 100,000 environments.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from statistics import fmean, median
from typing import Any

import numpy as np
import pytest

from spade_gym.registry import Registry, ReplayConfig
from spade_gym.registry.dedup import NUM_PERM
from spade_gym.registry.index import RECORD_COLUMNS, IndexRow

N = 100_000
SETTINGS = ("reasoning", "tool_use", "game")
ROUNDS = 300
WARMUP = 20


def synthetic_rows(n: int, seed: int = 0) -> tuple[list[IndexRow], list[str]]:
    """``n`` rows shaped like real ones, and their (made-up) folder fingerprints."""
    rng = np.random.default_rng(seed)
    regrets = rng.random(n)
    regrets[rng.random(n) < 0.1] = np.nan
    last = rng.integers(0, 50_000, size=n)
    signatures = rng.integers(0, 2**32, size=(n, NUM_PERM), dtype=np.uint64)
    now = time.time()
    rows = []
    for i in range(n):
        regret = None if np.isnan(regrets[i]) else float(regrets[i])
        rows.append(
            IndexRow(
                env_id=f"Synth{i}-v0",
                name=f"Synth{i}",
                version=0,
                program_id=hashlib.sha256(str(i).encode()).hexdigest(),
                ast_hash="ast:" + hashlib.sha256(f"ast{i}".encode()).hexdigest(),
                setting=SETTINGS[i % 3],
                max_turns=8,
                description=f"synthetic environment number {i}, for the registry benchmarks",
                tags='["synthetic"]',
                created=now + i * 1e-3,
                document=json.dumps({"source": "synthetic", "offset": i}),
                parents="[]",
                validation='{"accepted": true}',
                episodes=8 if regret is not None else 0,
                mean_return_hint=None if regret is None else 0.9,
                mean_return_nohint=None if regret is None else 0.9 - regret,
                regret=regret,
                times_sampled=int(last[i] > 0),
                last_sampled=int(last[i]) or None,
                format_compliance=None,
                minhash=signatures[i].astype("<u8").tobytes(),
            )
        )
    return rows, [f"synthetic:{i}" for i in range(n)]


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Registry, dict[str, float]]:
    """A registry whose index holds ``N`` synthetic environments, and how long it took to fill."""
    registry = Registry(tmp_path_factory.mktemp("bench") / "reg", create=True)
    begin = time.perf_counter()
    rows, fingerprints = synthetic_rows(N)
    built = time.perf_counter()
    index = registry._index  # the internal fast path: rows straight into the index
    with index.write():
        index.insert_rows(rows, fingerprints)
    inserted = time.perf_counter()
    assert len(registry) == N
    size = Path(registry.index_path).stat().st_size + Path(f"{registry.index_path}-wal").stat().st_size
    return registry, {
        "generate_s": built - begin,
        "insert_s": inserted - built,
        "index_mib": size / 2**20,
    }


def per_call(benchmark: Any) -> tuple[float, float] | None:
    """(median, mean) seconds per call that pytest-benchmark measured; None when disabled."""
    if benchmark.stats is None:
        return None
    stats = benchmark.stats.stats
    return stats.median, stats.mean


class Baseline:
    """One call of ``fn`` timed from ``pedantic``'s (untimed) setup every round: interleaved.
    ``prepare`` (untimed) runs first each round."""

    def __init__(self, fn: Callable[[], Any], skip: int = WARMUP, prepare: Callable[[], Any] | None = None) -> None:
        self.fn, self.skip, self.prepare = fn, skip, prepare
        self.samples: list[float] = []
        self.rounds = 0

    def setup(self) -> None:
        self.rounds += 1
        if self.prepare is not None:
            self.prepare()
        begin = time.perf_counter()
        self.fn()
        elapsed = time.perf_counter() - begin
        if self.rounds > self.skip:
            self.samples.append(elapsed)

    @property
    def median(self) -> float | None:
        return median(self.samples) if self.samples else None

    @property
    def mean(self) -> float | None:
        return fmean(self.samples) if self.samples else None


def run(
    benchmark: Any,
    report: Callable[..., None],
    what: str,
    fn: Callable[[], Any],
    baseline_name: str,
    baseline: Callable[[], Any],
    rounds: int = ROUNDS,
    target_ms: float | None = None,
    prepare: Callable[[], Any] | None = None,
    extra: dict[str, float] | None = None,
) -> Any:
    """Benchmark ``fn`` with ``baseline`` interleaved (after ``prepare``, untimed); report both and
    their ratio."""
    base = Baseline(baseline, prepare=prepare)
    result = benchmark.pedantic(fn, setup=base.setup, rounds=rounds, warmup_rounds=WARMUP, iterations=1)
    measured = per_call(benchmark)
    extra = extra or {}
    if measured is None or base.median is None:
        report(f"{what}: n/a (benchmark disabled)", **extra)
        return result
    p50, mean = measured
    ratio = p50 / base.median
    verdict = ""
    if target_ms is not None:
        verdict = f"; target < {target_ms:g} ms: {'met' if p50 * 1e3 < target_ms else 'NOT met'}"
    report(
        f"{what}: p50 {p50 * 1e3:.3f} ms (mean {mean * 1e3:.3f}); {baseline_name} p50 {base.median * 1e3:.3f} ms; "
        f"ratio {ratio:.2f}x{verdict}",
        p50_ms=p50 * 1e3,
        mean_ms=mean * 1e3,
        baseline_p50_ms=base.median * 1e3,
        baseline_mean_ms=(base.mean or 0.0) * 1e3,
        ratio_to_baseline=ratio,
        n_environments=N,
        **extra,
    )
    return result


def numpy_choice_baseline() -> Callable[[], int]:
    """``rng.choice`` over 100,000 probabilities: the cost of one weighted draw with nothing cached."""
    rng = np.random.default_rng(1)
    p = rng.random(N)
    p /= p.sum()
    return lambda: int(rng.choice(N, p=p))


def raw_select(registry: Registry, where: str, params: tuple) -> Callable[[], list]:
    """The SELECT a registry query makes (the same columns), without building records."""
    conn = registry._index.conn
    sql = f"SELECT {', '.join(RECORD_COLUMNS)} FROM records WHERE {where}"
    return lambda: conn.execute(sql, params).fetchall()


# ------------------------------------------------------------------------------------------------


def test_get_by_id(benchmark: Any, big: tuple[Registry, dict[str, float]], report: Callable[..., None]) -> None:
    """``get(env_id)`` vs. the bare indexed SELECT it makes (the rest is building the record)."""
    registry, build = big
    rng = np.random.default_rng(2)
    ids = [f"Synth{i}-v0" for i in rng.integers(0, N, size=ROUNDS + WARMUP + 10)]
    keys = iter(ids * 2)
    record = run(
        benchmark,
        report,
        "get(env_id)",
        lambda: registry.get(next(keys)),
        "bare SELECT by env_id",
        raw_select(registry, "env_id = ?", ("Synth777-v0",)),
        extra=build,
    )
    assert record.env_id.startswith("Synth")


def test_records_by_setting(
    benchmark: Any, big: tuple[Registry, dict[str, float]], report: Callable[..., None]
) -> None:
    """``records(setting="game")`` (a third of the index) vs. the bare SELECT of the same rows."""
    registry, _ = big
    records = run(
        benchmark,
        report,
        f"records(setting='game') of {N // 3} rows",
        lambda: registry.records(setting="game"),
        "bare SELECT of those rows",
        raw_select(registry, "setting = ? ORDER BY seq", ("game",)),
        rounds=10,
    )
    assert len(records) in (N // 3, N // 3 + 1)


@pytest.mark.parametrize("mark", [True, False], ids=["marked", "unmarked"])
def test_sample_uniform(
    benchmark: Any, big: tuple[Registry, dict[str, float]], report: Callable[..., None], mark: bool
) -> None:
    """``sample(strategy="uniform")``: one draw, marked (a write transaction) or not."""
    registry, _ = big
    rng = np.random.default_rng(3)
    registry.sample(1, strategy="uniform", rng=rng, mark=mark)  # the population is cached
    got = run(
        benchmark,
        report,
        f"sample(uniform, mark={mark})",
        lambda: registry.sample(1, strategy="uniform", rng=rng, mark=mark),
        "numpy choice over 100,000 floats",
        numpy_choice_baseline(),
        target_ms=5.0,
    )
    assert len(got) == 1


@pytest.mark.parametrize("mark", [True, False], ids=["marked", "unmarked"])
def test_sample_replay(
    benchmark: Any, big: tuple[Registry, dict[str, float]], report: Callable[..., None], mark: bool
) -> None:
    """``sample(strategy="replay")`` in steady state: ranks cached, staleness moving with every mark."""
    registry, _ = big
    rng = np.random.default_rng(4)
    registry.sample(1, strategy="replay", rng=rng, mark=mark)
    got = run(
        benchmark,
        report,
        f"sample(replay, mark={mark})",
        lambda: registry.sample(1, strategy="replay", rng=rng, mark=mark),
        "numpy choice over 100,000 floats",
        numpy_choice_baseline(),
        target_ms=5.0,
    )
    assert len(got) == 1


def test_sample_replay_after_a_stats_change(
    benchmark: Any, big: tuple[Registry, dict[str, float]], report: Callable[..., None]
) -> None:
    """The Prioritized Level Replay loop: a new regret arrives (from this or another process),
    then a marked replay sample; the change reaches the cached ranks through the change log (an
    O(N) rank update, no re-sort). The statistics change is made in the untimed setup."""
    registry, _ = big
    rng = np.random.default_rng(5)
    index = registry._index
    registry.sample(1, strategy="replay", rng=rng)
    baseline = numpy_choice_baseline()

    def new_regret() -> None:
        seq = int(rng.integers(1, N + 1))
        with index.write():
            index.update_stats(
                seq,
                "",
                episodes=8,
                mean_return_hint=0.9,
                mean_return_nohint=0.5,
                regret=float(rng.random()),
                times_sampled=1,
                last_sampled=index.state().counter,
                format_compliance=None,
            )
        begin = time.perf_counter()
        baseline()
        base.samples.append(time.perf_counter() - begin)

    base = Baseline(baseline)
    got = benchmark.pedantic(
        lambda: registry.sample(1, strategy="replay", rng=rng),
        setup=new_regret,
        rounds=ROUNDS,
        warmup_rounds=WARMUP,
        iterations=1,
    )
    assert len(got) == 1
    measured = per_call(benchmark)
    if measured is None:
        report("sample(replay) after a stats change: n/a (benchmark disabled)")
        return
    p50, mean = measured
    b50 = median(base.samples[WARMUP:])
    report(
        f"sample(replay) after one regret change: p50 {p50 * 1e3:.3f} ms (mean {mean * 1e3:.3f}); numpy choice "
        f"p50 {b50 * 1e3:.3f} ms; ratio {p50 / b50:.2f}x; target < 5 ms: {'met' if p50 * 1e3 < 5 else 'NOT met'}",
        p50_ms=p50 * 1e3,
        mean_ms=mean * 1e3,
        baseline_p50_ms=b50 * 1e3,
        ratio_to_baseline=p50 / b50,
        n_environments=N,
    )


def test_sample_replay_cold(
    benchmark: Any, big: tuple[Registry, dict[str, float]], report: Callable[..., None]
) -> None:
    """The first replay sample of a process (or after a rebuild): load 100,000 rows' regret and
    ``last_sampled`` from the index and rank them. Paid once; the caches are dropped in the setup."""
    registry, _ = big
    rng = np.random.default_rng(6)
    config = ReplayConfig()
    got = run(
        benchmark,
        report,
        "first sample(replay) of a process (load + rank 100,000)",
        lambda: registry.sample(1, strategy="replay", rng=rng, config=config),
        "numpy choice over 100,000 floats",
        numpy_choice_baseline(),
        rounds=15,
        prepare=registry._drop_caches,
    )
    assert len(got) == 1
