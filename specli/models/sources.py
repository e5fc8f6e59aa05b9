"""What a model name names, decided without torch: the one place a name becomes a kind of source.

Forms, tried in this order (`classify`):

- `embedded:NAME`: a model shipped inside the package;
- `trained:NAME`: a drafter `specli train` wrote into specli's cache (`model_dirs.trained_model`: a
  missing one names the command that trains it);
- `package:NAME`: the GGUF file of a model that comes as registry packages (`packaged`);
- `ollama:NAME[:TAG]`: the model layer of a model in an Ollama store (`ollama`);
- a folder holding config.json: a transformers model folder;
- a `.gguf` file, or a folder holding exactly one (and no config.json): a GGUF file;
- `org/name:FILE.gguf`: a GGUF file of a hub repo;
- `org/name` (or `name`): a hub repo of a transformers model.

Paths: `~` and `$VARS` are expanded (`expand_path`) in model names and in the variables that name
folders (HF_HOME, HF_HUB_CACHE, OLLAMA_MODELS, SPECLI_CACHE_DIR), as huggingface_hub expands its own.
A name that can only be a path (`looks_like_path`) never falls through to the hub.

Imports neither torch nor transformers: `presets list`, `export` and the CLI's checks before loading
read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specli.errors import ModelNotFoundError, UsageError
from specli.models.model_dirs import EMBEDDED_PREFIX, TRAINED_PREFIX, embedded_model, trained_model

# re-exported: callers that classify a name read the path helpers here too
from specli.models.paths import SPLIT_NAME as SPLIT_NAME
from specli.models.paths import expand_path as expand_path
from specli.models.paths import hub_cache_dir as hub_cache_dir
from specli.models.paths import looks_like_path as looks_like_path
from specli.models.paths import specli_cache_dir as specli_cache_dir

OLLAMA_PREFIX = "ollama:"
PACKAGE_PREFIX = "package:"  # the same as specli.models.packaged's
GGUF_SUFFIX = ".gguf"

# Config keys naming a parallel drafter's mask token (PARD's pard_token, AWS P-EAGLE's ptd_token_id).
MASK_TOKEN_KEYS = ("pard_token", "ptd_token_id")
PARALLEL_K_KEY = "para_num"  # the drafts per forward a parallel (PARD) drafter was trained for, when recorded
PARALLEL_K_DEFAULT = 8  # PARD's training K where none is recorded; its own examples draft 8-12


def trained_parallel_k(value: object) -> int:
    """A parallel drafter's recorded k (`PARALLEL_K_KEY`'s value, or a P-EAGLE head's speculative_tokens)
    when it is a positive int, else PARALLEL_K_DEFAULT."""
    return value if type(value) is int and value >= 1 else PARALLEL_K_DEFAULT


HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
_HUB_FILE = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*):(?P<file>[^:]+)$")

Kind = Literal["embedded", "folder", "gguf", "hub", "hub_gguf", "ollama", "package"]


@dataclass(frozen=True)
class Source:
    """A model name, classified. `path`: the folder (embedded, folder), the GGUF file (gguf, ollama);
    `repo` and `filename`: the hub repo and, for hub_gguf, the file inside it. Every GGUF kind
    (`is_gguf`) with a `path` loads through `gguf_cache.folder_for(path, ...)`, so a new way of finding a
    GGUF file only has to give its path here."""

    kind: Kind
    name: str
    path: Path | None = None
    repo: str | None = None
    filename: str | None = None

    @property
    def is_gguf(self) -> bool:
        return self.kind in ("gguf", "hub_gguf", "ollama", "package")


def classify(name: str) -> Source:
    """The kind of source `name` is (module docstring), checking only what is on this machine: an
    unknown embedded or Ollama name, a trained:NAME not trained here, a path that does not exist, a file
    that is no GGUF or a folder with several GGUF files raise ModelNotFoundError (exit 2) in one line;
    hub names are not looked up."""
    if name.startswith(EMBEDDED_PREFIX):
        return Source("embedded", name, embedded_model(name[len(EMBEDDED_PREFIX) :]))
    if name.startswith(TRAINED_PREFIX):
        return Source("folder", name, trained_model(name[len(TRAINED_PREFIX) :]))
    if name.startswith(PACKAGE_PREFIX):
        from specli.models import packaged

        return Source("package", name, packaged.packaged_gguf(name))
    if name.startswith(OLLAMA_PREFIX):
        from specli.models import ollama

        return Source("ollama", name, ollama.find_model(name[len(OLLAMA_PREFIX) :]))
    path = Path(expand_path(name))
    if path.is_dir():
        if (path / "config.json").is_file():
            return Source("folder", name, path)
        found = gguf_files_in(path, name)
        return Source("gguf", name, found) if found is not None else Source("folder", name, path)
    if path.exists():
        if path.name.lower().endswith(GGUF_SUFFIX):
            return Source("gguf", name, path)
        raise ModelNotFoundError(
            f"'{name}' is a file, not a model folder or a .gguf file",
            "pass the folder that holds config.json and the weights, or a .gguf file",
        )
    hub_file = _HUB_FILE.fullmatch(name)
    if hub_file and hub_file["file"].lower().endswith(GGUF_SUFFIX):
        if SPLIT_NAME.search(hub_file["file"]):  # said before any part downloads
            from specli.models.gguf_file import split_error

            raise split_error(name, Path(hub_file["file"]))
        return Source("hub_gguf", name, repo=hub_file["repo"], filename=hub_file["file"])
    if name.lower().endswith(GGUF_SUFFIX):
        raise ModelNotFoundError(
            f"GGUF file '{name}' does not exist",
            "check the path, or name a hub repo's file as org/name:FILE.gguf",
        )
    if looks_like_path(name):
        raise ModelNotFoundError(
            f"model folder '{name}' does not exist", "check the path, or pass a hub id like 'org/name'"
        )
    if not HUB_ID.fullmatch(name) or "--" in name or ".." in name:
        raise UsageError(
            f"'{name}' is neither a local folder nor a hub id",
            "pass an existing folder, a .gguf file or a hub id like 'Qwen/Qwen2.5-0.5B-Instruct'",
        )
    return Source("hub", name, repo=name)


def gguf_files_in(folder: Path, name: str) -> Path | None:
    """The one .gguf file directly inside `folder` (None when there is none); ModelNotFoundError naming
    them when there are several."""
    try:
        found = sorted(p for p in folder.iterdir() if p.name.lower().endswith(GGUF_SUFFIX) and p.is_file())
    except OSError:
        return None
    if len(found) <= 1:
        return found[0] if found else None
    shown = ", ".join(p.name for p in found[:4]) + (" ..." if len(found) > 4 else "")
    if all(SPLIT_NAME.search(p.name) for p in found):
        return found[0]  # the parts of one split model: reading the first says how to merge them
    raise ModelNotFoundError(
        f"'{name}' holds {len(found)} GGUF files ({shown})",
        f"pass one of them, e.g. {Path(name) / found[0].name}",
    )


def cached_hub_file(repo: str, filename: str) -> Path | None:
    """A hub repo's file from the local hub cache, never the network; None when it is not cached."""
    from huggingface_hub import try_to_load_from_cache

    try:
        path = try_to_load_from_cache(repo, filename, cache_dir=hub_cache_dir())
    except Exception:  # an id huggingface_hub refuses: nothing cached
        return None
    return Path(path) if isinstance(path, str) else None


def local_gguf(source: Source) -> Path | None:
    """The GGUF file of a GGUF source on this machine (a hub file only when cached), else None."""
    if source.kind == "hub_gguf":
        assert source.repo is not None and source.filename is not None
        return cached_hub_file(source.repo, source.filename)
    return source.path if source.is_gguf else None


def local_config(source: Source, *, hub_cache: bool = False) -> dict | None:
    """The config of a source as far as this machine knows it, without torch: a folder's config.json,
    a GGUF header's view of one (`gguf_file.header_config`), with hub_cache a hub model's cached
    config.json; None when unknown. A damaged or split GGUF raises UsageError."""
    from specli.models.model_dirs import read_config

    if source.kind in ("embedded", "folder"):
        assert source.path is not None
        return read_config(source.path)
    if source.is_gguf:
        from specli.models import gguf_file

        path = local_gguf(source)
        return gguf_file.header_config(gguf_file.read_header(path, source.name)) if path else None
    if hub_cache and source.repo is not None:
        path = cached_hub_file(source.repo, "config.json")
        return read_config(path.parent) if path is not None else None
    return None
