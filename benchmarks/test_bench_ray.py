"""Validation throughput of 64 programs with ``executor="ray"`` against ``executor="local"``.

Target: Ray's overhead stays below 20% at this size on this machine (2 cores), i.e. the
ratio ``ray wall / local wall`` < 1.2. Both executors validate the same 64 programs (the seed
library's programs, repeated) with the same gate settings; Ray runs on a local instance started
with ``num_cpus=2`` (its start-up is reported apart: a run pays it once), with one warm-up batch
so that its worker processes exist, as they do from the second self-play iteration on. Reported,
not asserted.
"""

from __future__ import annotations

import itertools
import time

import pytest

pytest.importorskip("ray")

from spade_gym import EnvProgram  # noqa: E402
from spade_gym.executor import LocalExecutor, make_executor  # noqa: E402
from spade_gym.registry.gymnasium import bundled_registry_path  # noqa: E402
from spade_gym.validation import ValidationConfig  # noqa: E402

N_PROGRAMS = 64


def test_validation_throughput_ray_vs_local(benchmark, report) -> None:  # type: ignore[no-untyped-def]
    seeds = [EnvProgram.from_file(p) for p in sorted((bundled_registry_path() / "envs").glob("*/env.py"))]
    programs = list(itertools.islice(itertools.cycle(seeds), N_PROGRAMS))
    config = ValidationConfig()

    started = time.perf_counter()
    local_reports = LocalExecutor().validate_many(programs, config)
    local_s = time.perf_counter() - started

    started = time.perf_counter()
    executor = make_executor("ray", num_cpus=2)
    init_s = time.perf_counter() - started
    try:
        executor.validate_many(programs[:4], config)  # warm-up: Ray's worker processes and their zygotes
        reports: list = []

        def run() -> None:
            reports[:] = executor.validate_many(programs, config)

        benchmark.pedantic(run, rounds=1, iterations=1)
        ray_s = benchmark.stats.stats.max
    finally:
        executor.close()
    assert [r.category for r in reports] == [r.category for r in local_reports]
    ratio = ray_s / local_s
    report(
        f"validation of {N_PROGRAMS} programs: local {local_s:.1f} s ({N_PROGRAMS / local_s:.2f}/s), "
        f"ray {ray_s:.1f} s ({N_PROGRAMS / ray_s:.2f}/s); ratio ray/local {ratio:.2f} "
        f"(target < 1.20: {'met' if ratio < 1.2 else 'MISSED'}); Ray start-up {init_s:.1f} s, paid once per run",
        programs=N_PROGRAMS,
        local_s=local_s,
        ray_s=ray_s,
        ray_init_s=init_s,
        ratio_ray_to_local=ratio,
    )
