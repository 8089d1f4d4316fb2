"""Write the training and validation datasets of spade environments for verl or OpenRLHF.

Each row is one episode: an environment id and a reset seed (training and validation use disjoint
seeds). verl reads parquet files whose rows route to spade_gym's agent loop
(``examples/integrations/verl_spade.yaml``); OpenRLHF reads JSON lines whose label names the episode
(``examples/integrations/openrlhf_spade.sh``).

    python examples/integrations/prepare_data.py --format verl --out ~/data/spade
    python examples/integrations/prepare_data.py --format openrlhf --out ~/data/spade --envs spade/ArithmeticChain-v0
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spade_gym.errors import SpadeError
from spade_gym.integrations import openrlhf_agent, verl
from spade_gym.integrations._episode import resolve_env_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=["verl", "openrlhf"], default="verl", help="which trainer reads the files")
    parser.add_argument(
        "--out", type=Path, default=Path.home() / "data" / "spade", help="output folder (default: ~/data/spade)"
    )
    parser.add_argument(
        "--envs", nargs="*", default=None, help="environment ids (default: the registry's, held-out envs excluded)"
    )
    parser.add_argument(
        "--registry", default=None, help="registry folder (default: $SPADE_REGISTRY or the bundled seed library)"
    )
    parser.add_argument(
        "--train-seeds", type=int, default=64, help="training episodes per environment, seeds 0..N-1 (default: 64)"
    )
    parser.add_argument(
        "--val-seeds",
        type=int,
        default=8,
        help="validation episodes per environment, seeds from 1_000_000 (default: 8)",
    )
    args = parser.parse_args()
    if args.train_seeds < 1 or args.val_seeds < 1:
        parser.error("--train-seeds and --val-seeds must be >= 1")
    try:
        write(args)
    except (SpadeError, ValueError, OSError) as exc:
        parser.exit(1, f"prepare_data.py: error: {exc}\n")


def write(args: argparse.Namespace) -> None:
    """Write the training and validation files that ``args`` asks for."""

    envs = args.envs or resolve_env_ids(None, args.registry)  # held-out evaluation environments excluded
    train_seeds = range(args.train_seeds)
    val_seeds = range(1_000_000, 1_000_000 + args.val_seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.format == "verl":
        train = verl.write_parquet(
            verl.make_rows(envs, train_seeds, registry=args.registry), args.out / "train.parquet"
        )
        val = verl.write_parquet(
            verl.make_rows(envs, val_seeds, registry=args.registry, split="val"), args.out / "val.parquet"
        )
        print(f"wrote {train} and {val} ({len(envs)} environments)")
    else:
        for name, seeds in (("openrlhf_train", train_seeds), ("openrlhf_val", val_seeds)):
            path = args.out / f"{name}.jsonl"
            rows = openrlhf_agent.make_rows(envs, seeds, registry=args.registry)
            path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
            print(f"wrote {path} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
