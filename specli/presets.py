"""Presets: a named target/drafter pairing plus speculation and generation settings, kept in YAML.

A preset file is validated against the pydantic schema below. Every problem becomes a `PresetError`
whose message names the file, the line and the field (``presets/foo.yaml:7: generation.temperature:
...``), so a user can fix it without reading a traceback.

Built-in presets ship in the repository's ``presets/`` folder (packaged into the wheel as
``specli/presets``). User presets live in ``$SPECLI_PRESETS`` (an ``os.pathsep``-separated list of
folders) and ``$XDG_CONFIG_HOME/specli/presets`` (default ``~/.config/specli/presets``); a user preset
replaces a built-in one of the same name.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from specli.errors import PresetError, UsageError
from specli.strategies import (
    LOOKUP_NGRAM_MAX,
    Model,
    Strategy,
    check_strategy,
    choices,
    either,
    entry,
    tree_strategies,
)

PRESET_SUFFIXES = (".yaml", ".yml")
# the preset `specli.load`, the CLI and export use when neither a preset nor a target is named
DEFAULT_PRESET = "tiny"
_RELATIVE_PREFIXES = ("./", "../", ".\\", "..\\", "~")


class _Spec(BaseModel):
    """Common config: unknown keys are errors, and YAML values are taken as typed (no "4" -> 4)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ModelSpec(_Spec):
    """One model: a local folder, a hub id ("org/name") or "embedded:NAME"."""

    model: str = Field(min_length=1)
    quantization: Literal["none", "8bit", "4bit"] = "none"
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"

    @field_validator("model")
    @classmethod
    def _resolve_relative(cls, value: str, info: ValidationInfo) -> str:
        """Expand "~" and resolve "./x" / "../x" against the preset file's folder (when known)."""
        if value in (".", "..") or value.startswith(_RELATIVE_PREFIXES):
            try:
                path = Path(value).expanduser()
            except RuntimeError as exc:  # "~someone" with no such user
                raise ValueError(f"cannot expand '{value}': {exc}") from None
            base_dir = (info.context or {}).get("base_dir")
            if base_dir is not None and not path.is_absolute():
                path = Path(base_dir) / path
            if path.is_absolute():
                return str(path.resolve())
        return value


# The most tokens a round may draft. Every k up to it costs a verify of k + 1 positions (and, with
# --compile, a compiled shape); model drafters gain little past 8-16, lookup's copies a little more.
MAX_DRAFT_TOKENS = 64
MAX_TREE_NODES = 64  # a token tree's nodes per round
MAX_TREE_WIDTH = 8


class SpeculationSpec(_Spec):
    """How the drafter proposes tokens."""

    # the most a round drafts (each round's k is chosen up to it)
    num_draft_tokens: int = Field(4, ge=1, le=MAX_DRAFT_TOKENS)
    fixed_k: bool = False  # draft num_draft_tokens every round (no per-round choice)
    draft_p_min: float = Field(0.0, ge=0, le=1)  # stop a draft at a token the drafter gives less than this
    ngram_min: int = Field(1, ge=1)
    ngram_max: int = Field(LOOKUP_NGRAM_MAX, ge=1)
    exit_layer: int | None = Field(None, ge=1)
    tree: int = Field(0, ge=0, le=MAX_TREE_NODES)  # token-tree nodes per round (0: a chain)
    tree_width: int = Field(2, ge=1, le=MAX_TREE_WIDTH)  # nodes expanded per depth, children per node

    @model_validator(mode="after")
    def _ngram_order(self) -> SpeculationSpec:
        if self.ngram_max < self.ngram_min:
            raise PydanticCustomError(
                "ngram_order",
                "ngram_max ({ngram_max}) must be >= ngram_min ({ngram_min})",
                {"field": "ngram_max", "ngram_max": self.ngram_max, "ngram_min": self.ngram_min},
            )
        return self


class GenerationSpec(_Spec):
    """Sampling and output settings (temperature 0 = greedy; top_k 0 = off)."""

    max_new_tokens: int = Field(256, ge=1)
    temperature: float = Field(0.0, ge=0, allow_inf_nan=False)
    top_k: int = Field(0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    chat_template: Literal["auto", "on", "off"] = "auto"

    @field_validator("chat_template", mode="before")
    @classmethod
    def _bool_to_switch(cls, value: Any) -> Any:
        """YAML reads `on`/`off`/`true`/`false` as booleans; map them back to "on"/"off"."""
        if value is True:
            return "on"
        if value is False:
            return "off"
        return value


class Preset(_Spec):
    """A complete run configuration. `source` is the file it was loaded from (not part of the schema)."""

    name: str = Field(min_length=1)
    description: str = ""
    strategy: str = Strategy.DRAFT.value  # a name in the strategy table (`_known_strategy`)
    # why `strategy` is the default: what a committed bench measured (`presets show` prints it)
    strategy_why: str = ""
    target: ModelSpec
    draft: ModelSpec | None = None
    head: ModelSpec | None = None  # an EAGLE head for `--strategy eagle` when the preset drafts otherwise
    heads: ModelSpec | None = None  # blockwise heads for `--strategy heads` when the preset drafts otherwise
    speculation: SpeculationSpec = Field(default_factory=SpeculationSpec)
    generation: GenerationSpec = Field(default_factory=GenerationSpec)
    # which engine evaluates the models (specli.models.engines): auto picks llama.cpp for a
    # GGUF target when llama-cpp-python is installed
    engine: Literal["auto", "torch", "llama.cpp"] = "auto"
    notes: str = ""

    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        """The preset file this came from, or None when built in code."""
        return self._source

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        """A name in the strategy table; else pydantic's own words for a choice ("Input should be ...")."""
        try:
            return check_strategy(value)  # a plain str, even for a Strategy member; an alias as its name
        except UsageError:
            choice = {"choices": choices()}
            raise PydanticCustomError("strategy", "Input should be {choices}", choice) from None

    @model_validator(mode="after")
    def _draft_needs_model(self) -> Preset:
        """The weights the strategy drafts with (the strategy table's `model`) are named."""
        needs = entry(self.strategy).model
        if needs == Model.DRAFT and self.draft is None:
            raise PydanticCustomError(
                "draft_required",
                "strategy '{strategy}' needs a `draft:` model (or pick strategy lookup, self or none)",
                {"field": "strategy", "strategy": self.strategy},
            )
        if needs == Model.HEAD and self.draft is None and self.head is None:
            raise PydanticCustomError(
                "head_required",
                "strategy '{strategy}' needs an EAGLE head as `draft:` (or `head:`)",
                {"field": "strategy", "strategy": self.strategy},
            )
        if needs == Model.HEADS and self.draft is None and self.heads is None:
            raise PydanticCustomError(
                "heads_required",
                "strategy '{strategy}' needs blockwise heads as `draft:` (or `heads:`)",
                {"field": "strategy", "strategy": self.strategy},
            )
        return self

    @model_validator(mode="after")
    def _tree_needs_a_tree_strategy(self) -> Preset:
        """A token tree (`speculation.tree` > 0) only with a strategy that drafts trees."""
        why = entry(self.strategy).chains_only
        if why is not None and self.speculation.tree > 0:
            raise PydanticCustomError(
                "chains_only",
                "strategy '{strategy}' drafts chains only ({why}): drop speculation.tree (or pick strategy "
                "{others})",
                {
                    "field": "strategy",
                    "strategy": self.strategy,
                    "why": why,
                    "others": either(tree_strategies()),
                },
            )
        return self

    @property
    def eagle_head(self) -> ModelSpec | None:
        """The EAGLE head `--strategy eagle` uses: `head:`, else the drafter of a preset whose strategy
        drafts with a head (eagle)."""
        return self.head or (self.draft if entry(self.strategy).model == Model.HEAD else None)

    @property
    def blockwise_heads(self) -> ModelSpec | None:
        """The blockwise heads `--strategy heads` uses: `heads:`, else the drafter of a preset whose
        strategy is heads."""
        return self.heads or (self.draft if entry(self.strategy).model == Model.HEADS else None)

    @property
    def drafts_with_head(self) -> bool:
        """Whether the preset's own strategy drafts with a head (EAGLE or blockwise), so that its
        `draft:` names that head, not a drafter model."""
        model = entry(self.strategy).model
        return model is not None and model.is_head


# --------------------------------------------------------------------------- loading


def load_preset_file(path: Path) -> Preset:
    """Read and validate one preset file; every problem raises `PresetError` naming file:line: field."""
    path = Path(path)
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PresetError(f"preset file not found: {shown}") from None
    except IsADirectoryError:
        raise PresetError(f"preset path is a folder, not a file: {shown}") from None
    except UnicodeDecodeError as exc:
        raise PresetError(f"{shown}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise PresetError(f"cannot read preset file {shown}: {exc.strerror or exc}") from None

    root, data = _parse_yaml(text, shown)
    if not isinstance(data, dict):
        kind = "an empty file" if data is None else f"a {_yaml_kind(data)}"
        line = _line_of(root) if root is not None else 1
        raise PresetError(
            f"{shown}:{line}: the top level must be a mapping of fields (name:, target:, ...), got {kind}"
        )
    data.setdefault("name", path.stem)

    base_dir = path.expanduser().resolve().parent
    try:
        preset = Preset.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise _validation_to_preset_error(exc, root, shown) from None
    preset._source = path.expanduser().resolve()
    return preset


def _parse_yaml(text: str, shown: str) -> tuple[yaml.Node | None, Any]:
    """Compose the node tree (for line numbers) and construct the data from it, in one pass."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            _check_duplicate_keys(root, shown)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = exc.problem or exc.context or "could not parse"
        raise PresetError(f"{shown}:{line}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise PresetError(f"{shown}: invalid YAML: {exc}") from None
    finally:
        loader.dispose()
    return root, data


def _check_duplicate_keys(node: yaml.Node, shown: str) -> None:
    """YAML silently keeps the last of two equal keys; treat that as the mistake it usually is."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    raise PresetError(
                        f"{shown}:{_line_of(key_node)}: duplicate key '{key_node.value}' "
                        f"(first on line {seen[key_node.value]})"
                    )
                seen[key_node.value] = _line_of(key_node)
            _check_duplicate_keys(value_node, shown)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicate_keys(item, shown)


def _yaml_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def _line_of(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _locate(root: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    """Line of the deepest node along `loc` that exists in the YAML (key line for mapping entries)."""
    if root is None:
        return 1
    node, line = root, _line_of(root)
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                    node, line = value_node, _line_of(key_node)
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = _line_of(node)
        else:
            return line
    return line


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The schema class a field holds (`ModelSpec | None` -> ModelSpec), or None for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _section_model(arg)
        if found is not None:
            return found
    return None


def _schema_at(path: tuple[Any, ...]) -> type[BaseModel] | None:
    """The schema class of the mapping at `path` in a preset (() -> Preset, ("generation",) -> ...)."""
    model: type[BaseModel] | None = Preset
    for part in path:
        info = model.model_fields.get(str(part)) if model is not None else None
        model = _section_model(info.annotation) if info is not None else None
    return model


def _all_field_paths(model: type[BaseModel] = Preset, prefix: str = "") -> list[str]:
    """Every field of a preset as a dotted path ("name", "generation.temperature", ...)."""
    paths = []
    for name, info in model.model_fields.items():
        paths.append(prefix + name)
        section = _section_model(info.annotation)
        if section is not None:
            paths += _all_field_paths(section, f"{prefix}{name}.")
    return paths


def _unknown_field_suggestion(loc: tuple[Any, ...]) -> str | None:
    """For an unknown key: the field it was probably meant to be, as "did you mean 'temperature'?".

    A field of that very name in another mapping, by its full path ("did you mean
    'generation.temperature'?"); else a near miss among the fields of the same mapping; else a near miss
    anywhere, by its full path."""
    *parent, key = (str(part) for part in loc)
    key = key.lower()
    here = ".".join(parent)
    paths = [path for path in _all_field_paths() if path.rpartition(".")[0] != here]
    by_name: dict[str, str] = {}
    for path in paths:
        by_name.setdefault(path.rpartition(".")[2], path)
    if key in by_name:
        return f"did you mean '{by_name[key]}'?"
    model = _schema_at(tuple(parent))
    if model is not None:
        close = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.7)
        if close:
            return f"did you mean '{close[0]}'?"
    close = difflib.get_close_matches(key, list(by_name), n=1, cutoff=0.8)
    return f"did you mean '{by_name[close[0]]}'?" if close else None


def _describe_error(err: Any, loc: tuple[Any, ...]) -> tuple[str, str | None]:
    """pydantic's message for one error, and for an unknown key a suggestion; unknown keys get a message
    in the preset's words, listing the fields the mapping takes when nothing is close."""
    if err["type"] != "extra_forbidden" or not loc:
        return err["msg"], None
    suggestion = _unknown_field_suggestion(loc)
    if suggestion is not None:
        return f"unknown field; {suggestion}", suggestion
    model = _schema_at(tuple(loc[:-1]))
    fields = ", ".join(model.model_fields) if model is not None else ""
    section = ".".join(str(part) for part in loc[:-1]) or "a preset"
    return (f"unknown field ({section} takes: {fields})" if fields else "unknown field"), None


def _validation_to_preset_error(exc: ValidationError, root: yaml.Node | None, shown: str) -> PresetError:
    """Turn pydantic's errors into `file:line: field: message`, first one in the file first; unknown keys
    name the field they were probably meant to be, in the first line and in the "also:" list."""
    found: list[tuple[int, str, str, str | None]] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        field = (err.get("ctx") or {}).get("field")
        if field is not None:  # a model-level check that belongs to one field
            loc = (*loc, field)
        line = _locate(root, loc)
        where = ".".join(str(part) for part in loc)
        msg, suggestion = _describe_error(err, loc)
        found.append((line, where, msg, suggestion))
    found.sort(key=lambda item: item[0])
    line, where, msg, _ = found[0]
    message = f"{shown}:{line}: {where}: {msg}" if where else f"{shown}:{line}: {msg}"
    hint = None
    if len(found) > 1:
        rest = ", ".join(
            f"line {ln} {w or '(top level)'}" + (f" ({s})" if s else "") for ln, w, _, s in found[1:4]
        )
        more = f" (+{len(found) - 4} more)" if len(found) > 4 else ""
        hint = f"also: {rest}{more}"
    return PresetError(message, hint)


# --------------------------------------------------------------------------- where presets live


def builtin_presets_dir() -> Path:
    """The shipped presets: `specli/presets` in a wheel install, else the repository's `presets/`."""
    packaged = Path(__file__).resolve().parent / "presets"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "presets"


def user_presets_dirs() -> list[Path]:
    """User preset folders, highest priority first: each of $SPECLI_PRESETS, then the config folder."""
    dirs = [
        Path(entry).expanduser()
        for entry in os.environ.get("SPECLI_PRESETS", "").split(os.pathsep)
        if entry.strip()
    ]
    config_home = os.environ.get("XDG_CONFIG_HOME", "").strip()
    config = Path(config_home).expanduser() if config_home else Path.home() / ".config"
    dirs.append(config / "specli" / "presets")
    return dirs


def _presets_in(folder: Path) -> dict[str, Path]:
    """name -> file for one folder; `foo.yaml` wins over `foo.yml`."""
    found: dict[str, Path] = {}
    if not folder.is_dir():
        return found
    for suffix in reversed(PRESET_SUFFIXES):
        for file in sorted(folder.glob(f"*{suffix}")):
            if file.is_file():
                found[file.stem] = file
    return found


def available_presets() -> dict[str, Path]:
    """Every known preset, name -> file, sorted by name; user folders override built-ins."""
    merged: dict[str, Path] = {}
    for folder in [builtin_presets_dir(), *reversed(user_presets_dirs())]:  # lowest priority first
        merged.update(_presets_in(folder))
    return dict(sorted(merged.items()))


@dataclass(frozen=True)
class PresetEntry:
    """One preset `available_presets` knows: its file, whether it comes from a user folder, and for a
    user preset the shipped preset file of the same name it replaces (None when it replaces none)."""

    name: str
    path: Path
    user: bool
    shadows: Path | None = None


def preset_entries() -> list[PresetEntry]:
    """Every known preset as `available_presets` resolves it, sorted by name, each marked shipped or
    user, a user preset with the shipped one it shadows."""
    shipped = _presets_in(builtin_presets_dir())
    entries = []
    for name, path in available_presets().items():
        user = path != shipped.get(name)
        entries.append(PresetEntry(name, path, user, shipped.get(name) if user else None))
    return entries


def resolve_preset(name_or_path: str) -> Preset:
    """Load a preset by file path (ends with .yaml/.yml or is an existing file) or by name."""
    as_path = Path(name_or_path).expanduser()
    if name_or_path.lower().endswith(PRESET_SUFFIXES) or as_path.is_file():
        return load_preset_file(as_path)
    known = available_presets()
    if name_or_path in known:
        return load_preset_file(known[name_or_path])
    message = f"unknown preset '{name_or_path}'. Known: {', '.join(known) if known else '(none)'}."
    close = difflib.get_close_matches(name_or_path, list(known), n=1)
    if close:
        message += f" Did you mean '{close[0]}'?"
    raise PresetError(message)


def preset_to_dict(preset: Preset) -> dict[str, Any]:
    """A plain JSON-able dict of the preset, with `source` (the file path as a string, or None)."""
    out = preset.model_dump(mode="json")
    out["source"] = str(preset.source) if preset.source is not None else None
    return out
