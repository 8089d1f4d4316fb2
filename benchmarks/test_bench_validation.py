"""Speed of the validation gate on a typical program (target: below 1 s wall on 2 cores).

Reported, not asserted: the wall time of :func:`spade_gym.validate` with 10 and 20 seeds, the share
spent starting and loading the two workers, and the ratio to a baseline measured in the same run
(one warm ``SandboxClient().load`` of the same program).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spade_gym import EnvProgram, SandboxClient, validate
from spade_gym.validation import ValidationConfig

PROGRAM = EnvProgram.from_file(Path(__file__).resolve().parents[1] / "examples" / "programs" / "arithmetic_chain.py")


def _load_once() -> float:
    started = time.perf_counter()
    with SandboxClient() as client:
        client.load(PROGRAM.source)
    return time.perf_counter() - started


@pytest.mark.parametrize("n_seeds", [10, 20])
def test_validation_of_a_typical_program(benchmark, n_seeds: int) -> None:  # type: ignore[no-untyped-def]
    config = ValidationConfig(seeds=tuple(range(1000, 1000 + n_seeds)), trivial_seeds=n_seeds)
    validate(PROGRAM, config)  # warm the zygotes of both hash seeds
    reports = []

    def run() -> None:
        reports.append(validate(PROGRAM, config))

    benchmark.pedantic(run, rounds=5, iterations=1)
    assert all(r.accepted for r in reports)
    wall = sorted(r.seconds for r in reports)[len(reports) // 2]
    startup = sorted(r.startup_seconds for r in reports)[len(reports) // 2]
    load = sorted(_load_once() for _ in range(5))[2]
    benchmark.extra_info.update(
        {
            "seeds": n_seeds,
            "wall_s_p50": wall,
            "startup_s_p50": startup,
            "startup_share": startup / wall,
            "baseline_load_s": load,
            "ratio_to_one_load": wall / load,
        }
    )
    print(
        f"\n[bench] validation of arithmetic_chain.py with {n_seeds} seeds: p50 {wall * 1000:.0f} ms "
        f"(target < 1000 ms: {'met' if wall < 1 else 'MISSED'}); start-up of the two workers {startup * 1000:.0f} ms "
        f"({startup / wall:.0%}); {wall / load:.1f}x one warm SandboxClient().load ({load * 1000:.1f} ms)"
    )


def test_host_memory_of_a_1000_turn_validation() -> None:
    """Host memory of validating a 1000-turn program with 4 KB observations, against the same
    program at 100 turns in the same run (validation keeps per-step digests, not transitions)."""
    import sys
    import tracemalloc

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from programs import long_episode

    def peak(turns: int) -> tuple[float, float]:
        tracemalloc.start()
        try:
            report = validate(EnvProgram(long_episode(turns, padding=4000)), ValidationConfig())
            assert report.accepted, report.feedback()
            return tracemalloc.get_traced_memory()[1] / 2**20, report.seconds
        finally:
            tracemalloc.stop()

    (short, short_s), (long, long_s) = peak(100), peak(1000)
    print(
        f"\n[bench] host memory of one validation (10 seeds, 4 KB observations): 100 turns {short:.1f} MiB "
        f"({short_s:.1f} s), 1000 turns {long:.1f} MiB ({long_s:.1f} s): "
        f"{(long - short) * 2**20 / (900 * 10 * 3):.0f} bytes per added step (observations are 4,000 bytes)"
    )
    assert (long - short) * 2**20 / (900 * 10 * 3) < 1024, "validation keeps more than a digest per step"
