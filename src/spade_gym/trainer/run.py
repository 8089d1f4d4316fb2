"""The run folder of a self-play run, its checkpoints, and exact resumption after a kill.

Layout::

    RUN_DIR/
      config.yaml            the SelfPlayConfig (read back through the strict loader on resume)
      registry/              the run's environment registry
      metrics.jsonl          one JSON object per finished iteration ({"iteration", "wall_time", ...})
      designs.jsonl          every design, one JSON object a line (RunDir.log_designs)
      tb/                    TensorBoard events
      checkpoints/
        iter_000003/         policy/, optimizer.pt, sampler.json, rng.json, extra.json, and
                             meta.json written last (it marks the checkpoint complete)
        latest               name of the newest complete checkpoint (replaced atomically)
      plots/                 PNGs of ``spade plot``
      .lock                  the PID of the process running the run

Iteration ``i`` saves its checkpoint (when due) before it appends its ``metrics.jsonl`` line.
:meth:`RunDir.prepare_resume` goes back to the newest complete checkpoint ``c`` (newer ones deleted,
``metrics.jsonl`` cut to iterations ``<= c``, later TensorBoard events hidden), so a kill loses at
most ``run.checkpoint_every`` iterations; environments a killed iteration registered stay.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from spade_gym.errors import RunDirError, install_hint
from spade_gym.files import fsync_dir, lock_file, replace_atomically, write_durably
from spade_gym.trainer.config import ConfigError, SelfPlayConfig

__all__ = [
    "Checkpoint",
    "RunDir",
    "RunDirError",
    "capture_rng_state",
    "flatten_record",
    "read_metrics",
    "restore_rng_state",
]

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
DESIGNS_FILE = "designs.jsonl"
#: Longest completion or program text kept per design in ``designs.jsonl``, characters.
DESIGN_TEXT_CHARS = 20_000
REGISTRY_DIR = "registry"
TB_DIR = "tb"
CHECKPOINTS_DIR = "checkpoints"
PLOTS_DIR = "plots"
LOCK_FILE = ".lock"
LATEST_FILE = "latest"
CHECKPOINT_FORMAT = 1

_CHECKPOINT_NAME = re.compile(r"iter_(\d{6,})")
_TEMP_PREFIX = ".tmp-"


def _fsync_tree(root: Path) -> None:
    """fsync every file and folder under ``root`` (what a save callable wrote too)."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(folder))


def _jsonable(value: Any, where: str, *, finite: bool) -> Any:
    """``value`` as JSON data (numpy/torch values become numbers and lists; NaN and infinities
    ``None`` when ``finite``); RunDirError naming ``where`` for anything else."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return None if finite and not math.isfinite(value) else float(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise RunDirError(f"{where}: key {k!r} is not a string (JSON objects have string keys)")
            out[k] = _jsonable(v, f"{where}.{k}", finite=finite)
        return out
    if isinstance(value, list | tuple):
        return [_jsonable(v, f"{where}[{i}]", finite=finite) for i, v in enumerate(value)]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:  # numpy/torch scalar
        return _jsonable(value.item(), where, finite=finite)
    if hasattr(value, "tolist") and callable(value.tolist):  # a numpy array or torch tensor
        return _jsonable(value.tolist(), where, finite=finite)
    raise RunDirError(f"{where} = {value!r} ({type(value).__name__}) is not JSON data")


def _dump_json(value: Any, where: str, *, finite: bool = False) -> bytes:
    return json.dumps(_jsonable(value, where, finite=finite), ensure_ascii=False, allow_nan=not finite).encode()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(f"cannot read {path}: {exc}") from exc


def _torch(needed_for: str = "") -> Any:
    """The torch module; ``None`` without it, or RunDirError when it is ``needed_for`` something."""
    try:
        import torch
    except ImportError:
        if needed_for:
            raise RunDirError(f"{needed_for} needs torch: {install_hint('train')}") from None
        return None
    return torch


def capture_rng_state(generators: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every global random generator's state and ``generators``' (the run's own ``random.Random``,
    numpy or torch Generator, by name) as JSON data: ``{"python", "numpy", "torch", "cuda",
    "generators"}``, torch and cuda ``None`` without them."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = cast(tuple[Any, Any, Any, Any, Any], np.random.get_state(legacy=True))
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": {"kind": kind, "keys": keys.tolist(), "pos": pos, "has_gauss": has_gauss, "cached_gaussian": cached},
        "torch": None,
        "cuda": None,
        "generators": {},
    }
    torch = _torch()
    if torch is not None:
        state["torch"] = torch.get_rng_state().tolist()
        if torch.cuda.is_available():
            state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    for name, gen in (generators or {}).items():
        state["generators"][name] = _generator_state(name, gen)
    return state


def _generator_state(name: str, gen: Any) -> dict[str, Any]:
    if isinstance(gen, random.Random):
        version, internal, gauss = gen.getstate()
        return {"type": "python", "state": [version, list(internal), gauss]}
    if isinstance(gen, np.random.Generator):
        return {"type": "numpy", "state": _jsonable(gen.bit_generator.state, name, finite=False)}
    torch = _torch()
    if torch is not None and isinstance(gen, torch.Generator):
        return {"type": "torch", "state": gen.get_state().tolist()}
    raise TypeError(f"generator {name!r} is a {type(gen).__name__}; expected random.Random, numpy or torch Generator")


def restore_rng_state(state: Mapping[str, Any], generators: Mapping[str, Any] | None = None) -> None:
    """Put every generator back in the state :func:`capture_rng_state` returned; ``generators``
    are restored in place. Raises RunDirError for one missing from ``state`` or of another type."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], np.array(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    torch = _torch()
    if torch is not None and state.get("torch") is not None:
        torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if torch is not None and state.get("cuda") is not None and torch.cuda.is_available():
        saved = state["cuda"]
        count = torch.cuda.device_count()
        if len(saved) != count:
            warnings.warn(
                f"the checkpoint has the RNG state of {len(saved)} CUDA devices and this machine {count}; "
                f"restoring the first {min(len(saved), count)}",
                RuntimeWarning,
                stacklevel=2,
            )
        for i in range(min(len(saved), count)):
            torch.cuda.set_rng_state(torch.tensor(saved[i], dtype=torch.uint8), device=i)
    saved_generators = state.get("generators") or {}
    for name, gen in (generators or {}).items():
        if name not in saved_generators:
            raise RunDirError(
                f"the RNG state has no generator {name!r} (it has: {', '.join(saved_generators) or 'none'})"
            )
        entry = saved_generators[name]
        kind = _generator_state(name, gen)["type"]
        if entry["type"] != kind:
            raise RunDirError(f"generator {name!r} was saved as a {entry['type']} generator, not {kind}")
        if kind == "python":
            v, s, g = entry["state"]
            gen.setstate((v, tuple(s), g))
        elif kind == "numpy":
            gen.bit_generator.state = entry["state"]
        else:
            assert torch is not None
            gen.set_state(torch.tensor(entry["state"], dtype=torch.uint8))


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint (:meth:`RunDir.load_checkpoint`): the JSON parts as saved, ``time``
    in seconds since the epoch; the policy and optimizer states are read on demand."""

    iteration: int
    path: Path
    sampler_state: dict[str, Any]
    rng_state: dict[str, Any]
    extra: dict[str, Any]
    metrics: dict[str, Any] | None
    time: float

    @property
    def policy_dir(self) -> Path:
        return self.path / "policy"

    @property
    def has_optimizer_state(self) -> bool:
        return (self.path / "optimizer.pt").is_file()

    def load_policy_state(self, map_location: Any = "cpu") -> dict[str, Any]:
        """The policy state dict saved as ``policy.pt``; RunDirError when there is none."""
        path = self.policy_dir / "policy.pt"
        if not path.is_file():
            raise RunDirError(
                f"{self.path} has no policy state dict ({path}); the policy was saved into {self.policy_dir}"
            )
        return _torch_load(path, map_location)

    def load_optimizer_state(self, map_location: Any = "cpu") -> dict[str, Any] | None:
        """The optimizer state dict, or ``None`` when none was saved."""
        path = self.path / "optimizer.pt"
        return _torch_load(path, map_location) if path.is_file() else None


def _torch_save(obj: Any, path: Path) -> None:
    torch = _torch(f"saving {path.name}")
    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def _torch_load(path: Path, map_location: Any) -> Any:
    return _torch(f"reading {path}").load(path, map_location=map_location, weights_only=True)


def _checkpoint_name(iteration: int) -> str:
    return f"iter_{iteration:06d}"


def flatten_record(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A metrics record with nested mappings joined into ``a/b`` keys (leaves kept as they are)."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, Mapping):
            out.update(flatten_record(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _config_diff(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        dotted = f"{prefix}{key}"
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out.extend(_config_diff(va, vb, dotted + "."))
        elif va != vb:
            out.append(f"{dotted}: {va!r} -> {vb!r}")
    return out


class RunDir(AbstractContextManager["RunDir"]):
    """A self-play run folder (see the module docstring): :meth:`create` a new one or :meth:`open`
    an existing one; :meth:`close` it (or use it as a context manager) to flush TensorBoard."""

    def __init__(self, path: str | Path, config: SelfPlayConfig) -> None:
        self.path = Path(path)
        self.config = config
        self.config_path = self.path / CONFIG_FILE
        self.registry_dir = self.path / REGISTRY_DIR
        self.metrics_path = self.path / METRICS_FILE
        self.designs_path = self.path / DESIGNS_FILE
        self.tb_dir = self.path / TB_DIR
        self.checkpoints_dir = self.path / CHECKPOINTS_DIR
        self.plots_dir = self.path / PLOTS_DIR
        self._writer: Any = None
        self._tb_failed = False
        self._purge_step: int | None = None
        self._metrics_checked = False
        self._lock_fd: int | None = None

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @classmethod
    def create(cls, path: str | Path, config: SelfPlayConfig, *, resume: bool = False) -> RunDir:
        """Start a new run in ``path`` (missing or empty), writing ``config`` (validated, ``run.out``
        set to ``path``) as ``config.yaml``. With ``resume``, a folder holding a run of the same
        config (apart from ``run.out``) is opened instead.

        Raises:
            ConfigError: ``config`` is invalid.
            RunDirError: ``path`` is a file, not empty, or (with ``resume``) a run of another config.
        """
        path = Path(path)
        config = dataclasses.replace(config, run=dataclasses.replace(config.run, out=str(path)))
        config.validate()
        if path.exists() and not path.is_dir():
            raise RunDirError(f"run folder {path} is a file")
        if path.is_dir() and any(path.iterdir()):
            if not resume:
                raise RunDirError(
                    f"run folder {path} already exists and is not empty; continue it with `spade resume {path}` "
                    "or choose another run.out"
                )
            run = cls.open(path)
            diff = _config_diff(run.config.to_dict(), config.to_dict())
            if diff:
                raise RunDirError(
                    f"run folder {path} was started with another config ({'; '.join(diff)}); "
                    f"continue it with its own config (`spade resume {path}`) or choose another run.out"
                )
            return run
        for folder in (path, path / REGISTRY_DIR, path / CHECKPOINTS_DIR, path / PLOTS_DIR):
            folder.mkdir(parents=True, exist_ok=True)
        replace_atomically(path / CONFIG_FILE, config.to_yaml())
        return cls(path, config)

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """Open an existing run folder: RunDirError without ``config.yaml``, ConfigError (naming the
        file and key) when it is invalid."""
        path = Path(path)
        config_path = path / CONFIG_FILE
        if not config_path.is_file():
            raise RunDirError(f"{path} is not a run folder: it has no {CONFIG_FILE}")
        try:
            config = SelfPlayConfig.from_yaml(config_path, saved=True)
        except ConfigError as exc:
            raise ConfigError(f"{config_path}: {exc.message}", key=exc.key) from exc
        for folder in (path / REGISTRY_DIR, path / CHECKPOINTS_DIR, path / PLOTS_DIR):
            folder.mkdir(parents=True, exist_ok=True)
        return cls(path, config)

    def log_designs(self, iteration: int, designs: list[dict[str, Any]]) -> None:
        """Append one iteration's designs (JSON objects, ``iteration`` added) to ``designs.jsonl``."""
        _check_iteration(iteration)
        lines = b"".join(_dump_json({"iteration": iteration, **d}, "designs") + b"\n" for d in designs)
        with open(self.designs_path, "ab") as fh:
            fh.write(lines)

    def log_metrics(self, iteration: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Append one iteration's metrics to ``metrics.jsonl`` (fsync'ed) and TensorBoard (nested
        mappings as ``a/b`` tags); returns the record written, with ``iteration`` and ``wall_time``
        added and NaN/infinities as ``null``. RunDirError for non-JSON values or those two keys."""
        _check_iteration(iteration)
        if "iteration" in metrics or "wall_time" in metrics:
            raise RunDirError("metrics must not hold 'iteration' or 'wall_time': log_metrics adds them")
        record = {"iteration": iteration, "wall_time": time.time(), **metrics}
        line = _dump_json(record, "metrics", finite=True) + b"\n"
        if not self._metrics_checked:
            self._drop_torn_tail()
            self._metrics_checked = True
        with open(self.metrics_path, "ab") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        writer = self._tensorboard()
        if writer is not None:
            for tag, value in flatten_record(metrics).items():
                if isinstance(value, bool | int | float) and math.isfinite(value):
                    writer.add_scalar(tag, float(value), iteration)
            writer.flush()
        return json.loads(line)

    def read_metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.metrics_path)

    def _drop_torn_tail(self) -> None:
        """Cut a torn last line off ``metrics.jsonl``."""
        try:
            with open(self.metrics_path, "rb+") as fh:
                data = fh.read()
                if not data or data.endswith(b"\n"):
                    return
                keep = data.rfind(b"\n") + 1
                warnings.warn(
                    f"{self.metrics_path}: dropping a torn last line: {data[keep : keep + 80]!r}",
                    RuntimeWarning,
                    stacklevel=3,
                )
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
        except FileNotFoundError:
            return

    def truncate_metrics(self, after: int, restore: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rewrite ``metrics.jsonl`` atomically to the records of iterations ``<= after`` (``-1``:
        none), adding ``restore`` as iteration ``after``'s when it is missing; returns them."""
        records = [r for r in self.read_metrics() if r["iteration"] <= after]
        if restore is not None and (not records or records[-1]["iteration"] != after):
            records.append({"iteration": after, "wall_time": time.time(), **dict(restore)})
            records[-1]["iteration"] = after
        text = b"".join(_dump_json(r, "metrics", finite=True) + b"\n" for r in records)
        replace_atomically(self.metrics_path, text)
        self._metrics_checked = True
        return records

    def _tensorboard(self) -> Any:
        if self._writer is not None or self._tb_failed or not self.config.run.tensorboard:
            return self._writer
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            self._tb_failed = True
            warnings.warn(
                f"TensorBoard events are not written ({exc}); install tensorboard, or set run.tensorboard: false",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        self._writer = SummaryWriter(log_dir=str(self.tb_dir), purge_step=self._purge_step)
        return self._writer

    def lock(self) -> None:
        """Take the run folder for this process (an exclusive ``flock`` on ``.lock``, holding the PID)
        until :meth:`close`; RunDirError (with the holder's PID) when another process has it."""
        if self._lock_fd is not None:
            return
        try:
            fd = lock_file(self.path / LOCK_FILE, blocking=False)
        except BlockingIOError:
            holder = (self.path / LOCK_FILE).read_text(errors="replace")[:32].strip() or "unknown"
            raise RunDirError(
                f"{self.path} is in use by another process (PID {holder}): one process runs a run folder at a time"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def close(self) -> None:
        """Close the TensorBoard writer and release the folder's lock."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def __exit__(self, *exc: object) -> None:
        self.close()

    def checkpoints(self) -> list[int]:
        """The iterations of every complete checkpoint, ascending."""
        found = []
        if self.checkpoints_dir.is_dir():
            for entry in self.checkpoints_dir.iterdir():
                match = _CHECKPOINT_NAME.fullmatch(entry.name)
                if match and (entry / "meta.json").is_file():
                    found.append(int(match.group(1)))
        return sorted(found)

    def clean_temporary(self) -> list[Path]:
        """Delete temporary folders left by a checkpoint save that was killed; returns them."""
        removed = []
        if self.checkpoints_dir.is_dir():
            for entry in self.checkpoints_dir.iterdir():
                if entry.name.startswith(_TEMP_PREFIX) or (
                    entry.is_dir() and _CHECKPOINT_NAME.fullmatch(entry.name) and not (entry / "meta.json").is_file()
                ):
                    if entry.is_dir():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
                    removed.append(entry)
        return removed

    def save_checkpoint(
        self,
        iteration: int,
        *,
        policy_state: Mapping[str, Any] | Callable[[Path], object] | None = None,
        optimizer_state: Mapping[str, Any] | None = None,
        sampler_state: Mapping[str, Any] | None = None,
        rng_state: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        keep: int | None = None,
    ) -> Path:
        """Save a checkpoint atomically, point ``latest`` at it, and delete the oldest beyond ``keep``
        (default ``run.keep_checkpoints``); returns its folder.

        ``policy_state`` is a state dict (saved as ``policy/policy.pt``) or a callable that saves
        the policy into the folder it is given; ``rng_state`` ``None`` captures the global
        generators now; ``sampler_state``, ``extra`` and ``metrics`` are JSON data.

        Raises:
            RunDirError: a part that is not JSON data, a checkpoint of a later iteration on disk, or
                a failed write (nothing of this checkpoint is left, ``latest`` is unchanged).
        """
        _check_iteration(iteration)
        keep = self.config.run.keep_checkpoints if keep is None else keep
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        newer = [i for i in self.checkpoints() if i > iteration]
        if newer:
            raise RunDirError(
                f"cannot save a checkpoint of iteration {iteration}: {self.checkpoints_dir} already has one of "
                f"iteration {newer[-1]}; resume from an older checkpoint with prepare_resume({iteration - 1}) first"
            )
        name = _checkpoint_name(iteration)
        self.checkpoints_dir.mkdir(parents=True, exist_ok=True)
        # JSON first: a bad state fails before anything is written.
        sampler = _dump_json(sampler_state or {}, "sampler_state")
        rng = _dump_json(capture_rng_state() if rng_state is None else rng_state, "rng_state")
        extra_bytes = _dump_json(extra or {}, "extra")
        meta = {
            "format": CHECKPOINT_FORMAT,
            "iteration": iteration,
            "time": time.time(),
            "metrics": _jsonable(metrics, "metrics", finite=True) if metrics is not None else None,
        }
        tmp = self.checkpoints_dir / f"{_TEMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
        final = self.checkpoints_dir / name
        try:
            tmp.mkdir()
            (tmp / "policy").mkdir()
            if callable(policy_state):
                policy_state(tmp / "policy")
            elif policy_state is not None:
                _torch_save(dict(policy_state), tmp / "policy" / "policy.pt")
            if optimizer_state is not None:
                _torch_save(dict(optimizer_state), tmp / "optimizer.pt")
            write_durably(tmp / "sampler.json", sampler)
            write_durably(tmp / "rng.json", rng)
            write_durably(tmp / "extra.json", extra_bytes)
            _fsync_tree(tmp)
            write_durably(tmp / "meta.json", _dump_json(meta, "meta", finite=True))  # last: marks it complete
            fsync_dir(tmp)
            if final.exists():  # the same iteration saved again (resumed from an older checkpoint)
                trash = self.checkpoints_dir / f"{_TEMP_PREFIX}old-{name}-{uuid.uuid4().hex[:8]}"
                os.rename(final, trash)
                shutil.rmtree(trash, ignore_errors=True)
            os.rename(tmp, final)
            fsync_dir(self.checkpoints_dir)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OSError):
                raise RunDirError(f"could not write checkpoint {final}: {exc}") from exc
            raise
        self._write_latest(name)
        for old in self.checkpoints()[:-keep]:
            if old != iteration:
                shutil.rmtree(self.checkpoints_dir / _checkpoint_name(old), ignore_errors=True)
        return final

    def _write_latest(self, name: str) -> None:
        replace_atomically(self.checkpoints_dir / LATEST_FILE, name + "\n")

    def latest_iteration(self) -> int | None:
        """The iteration of the newest complete checkpoint, or ``None`` when there is none."""
        found = self.checkpoints()
        return found[-1] if found else None

    def load_checkpoint(self, which: str | int = "latest") -> Checkpoint:
        """Read a complete checkpoint: ``"latest"`` (the newest, whatever the ``latest`` file says)
        or an iteration number; RunDirError when there is none or it cannot be read."""
        found = self.checkpoints()
        if which == "latest":
            if not found:
                raise RunDirError(f"{self.checkpoints_dir} holds no complete checkpoint")
            iteration = found[-1]
        elif isinstance(which, int) and not isinstance(which, bool):
            if which not in found:
                raise RunDirError(
                    f"{self.checkpoints_dir} has no complete checkpoint of iteration {which} "
                    f"(it has: {', '.join(map(str, found)) or 'none'})"
                )
            iteration = which
        else:
            raise ValueError(f"which must be 'latest' or an iteration number, got {which!r}")
        path = self.checkpoints_dir / _checkpoint_name(iteration)
        meta = _read_json(path / "meta.json")
        if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
            raise RunDirError(f"{path / 'meta.json'} is not a checkpoint of format {CHECKPOINT_FORMAT}")
        return Checkpoint(
            iteration=iteration,
            path=path,
            sampler_state=_read_json(path / "sampler.json"),
            rng_state=_read_json(path / "rng.json"),
            extra=_read_json(path / "extra.json"),
            metrics=meta.get("metrics"),
            time=float(meta.get("time", 0.0)),
        )

    def prepare_resume(self, which: str | int = "latest") -> Checkpoint | None:
        """Put the run folder back at a checkpoint (see the module docstring) and return it;
        ``None``: start from scratch."""
        self.close()
        self.clean_temporary()
        if not self.checkpoints():
            self.truncate_metrics(-1)
            self._purge_step = 0
            (self.checkpoints_dir / LATEST_FILE).unlink(missing_ok=True)
            return None
        checkpoint = self.load_checkpoint(which)
        for newer in self.checkpoints():
            if newer > checkpoint.iteration:
                shutil.rmtree(self.checkpoints_dir / _checkpoint_name(newer), ignore_errors=True)
        self._write_latest(checkpoint.path.name)
        restore = None if checkpoint.metrics is None else {"wall_time": checkpoint.time, **checkpoint.metrics}
        self.truncate_metrics(checkpoint.iteration, restore)
        self._purge_step = checkpoint.iteration + 1
        return checkpoint


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every iteration's record from a ``metrics.jsonl`` file, in order (``[]`` when it is missing).

    Lines that are not a JSON object with an ``iteration`` (a torn last line) are dropped with a
    warning; when an iteration appears again, the later records win. RunDirError when the file
    cannot be read.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc}") from exc
    lines = data.split(b"\n")
    records: list[dict[str, Any]] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        last = number == len(lines)  # no newline after it: maybe torn
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            record = None
        if not isinstance(record, dict) or not _is_iteration(record.get("iteration")):
            what = "a torn last line (the run was killed while writing it)" if last else f"line {number}"
            warnings.warn(f"{path}: ignoring {what}: {raw[:80]!r}", RuntimeWarning, stacklevel=3)
            continue
        while records and records[-1]["iteration"] >= record["iteration"]:
            records.pop()
        records.append(record)
    return records


def _is_iteration(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_iteration(iteration: Any) -> None:
    if not _is_iteration(iteration):
        raise ValueError(f"iteration must be an int >= 0, got {iteration!r}")
