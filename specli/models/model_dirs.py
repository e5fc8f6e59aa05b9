"""Model folders, read without torch: the models shipped inside the package, the drafters `specli train`
writes into specli's cache (`trained:NAME`), and a folder's config.json.

`specli presets list` estimates memory from these, so they must not import torch (see `loading` for the
rest of where models come from).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specli.errors import ModelNotFoundError
from specli.models.paths import specli_cache_dir

EMBEDDED_PREFIX = "embedded:"
TRAINED_PREFIX = "trained:"


def embedded_dir() -> Path:
    """The folder of the models shipped inside the package (specli/embedded)."""
    return Path(__file__).resolve().parent.parent / "embedded"


def embedded_names() -> list[str]:
    """Names usable as "embedded:NAME": the folders under embedded_dir() that hold a config.json."""
    root = embedded_dir()
    return sorted(p.name for p in root.iterdir() if (p / "config.json").is_file()) if root.is_dir() else []


def embedded_model(name: str) -> Path:
    """ "embedded:NAME" -> its folder inside the package, or a clear error naming the ones that exist."""
    folder = embedded_dir() / name
    if name and "/" not in name and (folder / "config.json").is_file():
        return folder
    known = (
        ", ".join(f"embedded:{n}" for n in embedded_names()) or "none (this install has no embedded models)"
    )
    raise ModelNotFoundError(f"no embedded model named '{name}'", f"embedded models: {known}")


def trained_dir() -> Path:
    """Where `trained:NAME` drafters live: specli's cache (`specli_cache_dir()`)/trained."""
    return specli_cache_dir() / "trained"


@dataclass(frozen=True)
class Recipe:
    """How a drafter specli does not ship is made: `kind` and `target` of its `specli train` run (which
    writes it into trained_dir()/NAME), `script`: the commands that run it with its data, `why`: why it
    is not shipped."""

    kind: str
    target: str
    script: str
    why: str


# Drafters a shipped preset names that are not in the package: a drafter ships only when it beats plain
# decoding on its target in the committed bench; these were trained on a CPU and did not
# (docs/performance.md "SmolLM2 with its trained drafters"). Recipes: docs/training.md#recipes.
RECIPES: dict[str, Recipe] = {
    "smollm2-135m-draft": Recipe(
        "draft",
        "package:smollm2-135m",
        "bash scripts/smollm2_train.sh data && bash scripts/smollm2_train.sh draft",
        "on SmolLM2 it ran slower than plain decoding",
    ),
    "smollm2-135m-eagle3": Recipe(
        "eagle3",
        "package:smollm2-135m",
        "bash scripts/smollm2_train.sh data && bash scripts/smollm2_train.sh eagle3",
        "on SmolLM2 it ran slower than plain decoding",
    ),
    "smollm2-135m-heads": Recipe(
        "heads",
        "package:smollm2-135m",
        "bash scripts/smollm2_train.sh data && bash scripts/smollm2_train.sh heads",
        "after 2 hours of training they ran at 0.95-1.03x plain decoding on SmolLM2",
    ),
}


def trained_model(name: str) -> Path:
    """ "trained:NAME" -> its folder in trained_dir() (a finished `specli train` run: config.json), or a
    ModelNotFoundError (exit 2) naming the `specli train` command that writes it there."""
    folder = trained_dir() / name
    if name and "/" not in name and (folder / "config.json").is_file():
        return folder
    recipe = RECIPES.get(name)
    kind, target = (recipe.kind, recipe.target) if recipe else ("KIND", "TARGET")
    train = f"specli train {kind} --target {target} --out {folder}"
    if (folder / "checkpoint").is_dir():  # a run stopped at its time limit (or Ctrl-C)
        raise ModelNotFoundError(
            f"{TRAINED_PREFIX}{name} is still training: {folder} holds a checkpoint and no drafter yet",
            f"finish it: specli train {kind} --out {folder} --resume",
        )
    shipped = f"specli does not ship it ({recipe.why}); " if recipe else ""
    how = f"the recipe: {recipe.script} (docs/training.md#recipes)" if recipe else "see docs/training.md"
    raise ModelNotFoundError(
        f"{TRAINED_PREFIX}{name} is not trained on this machine: {shipped}`{train}` writes it",
        f"{how}; or pass --draft with another drafter (a folder or a hub id)",
    )


def user_model_name(name: str) -> str:
    """A model name as the user would type it: a path to an embedded model (on any machine) ->
    "embedded:NAME", a hub cache snapshot (.../models--org--name/snapshots/REV) -> "org/name"; other
    names unchanged."""
    parts = Path(name).parts
    if len(parts) >= 2 and parts[-2] == "embedded" and parts[-1] in embedded_names():
        return EMBEDDED_PREFIX + parts[-1]
    repo = next((p for p in reversed(parts) if p.startswith("models--")), None)
    if repo is not None and "snapshots" in parts[parts.index(repo) :]:
        return repo.removeprefix("models--").replace("--", "/")
    return name


def read_config(folder: Path | str) -> dict[str, Any] | None:
    """A model folder's config.json as a dict, or None when it is missing or not JSON."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


# Config keys that hold a model's longest context, in the order transformers' families use them.
POSITION_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_sequence_length",
    "seq_length",
    "n_ctx",
    "max_seq_len",
)


def config_max_positions(config: Any) -> int | None:
    """The longest context a config declares (a config.json dict or a transformers config; a multimodal
    one's text_config too), or None when it declares none."""
    get = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    for key in POSITION_KEYS:
        value = get(key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    text = get("text_config", None)
    return config_max_positions(text) if text is not None else None
