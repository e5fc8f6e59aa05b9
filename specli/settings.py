"""Every generation setting, resolved once: the preset first, then the caller's change on top.

`resolve_settings(preset, change)` gives a frozen `Settings` that the engine, the views and bench all
read; a `SettingsChange` (typed, None = leave the preset's) is how settings cross layers (the CLI's
options, bench's sweeps, a served request). Ranges come from one schema, the preset's (`GenerationSpec`,
`SpeculationSpec`): a value out of range raises a `UsageError` naming the command-line option and the
fix. What the models allow (k against each context, the exit layer inside the target) is one pure check,
`check_fits`, fed by local configs before torch loads and by the loaded models after (`Pair.settings`).

No torch here: the CLI resolves settings before anything heavy is imported, so a typo fails at once.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from specli.errors import UsageError
from specli.presets import (
    MAX_DRAFT_TOKENS,
    MAX_TREE_NODES,
    MAX_TREE_WIDTH,
    GenerationSpec,
    Preset,
    SpeculationSpec,
)
from specli.strategies import (
    LOOKUP_NGRAM_MAX,
    Model,
    Strategy,
    check_strategy,
    check_tree,
    entry,
    strategy_names,
)

if TYPE_CHECKING:
    from specli.engine.sampling import SamplingConfig

STRATEGIES: tuple[str, ...] = strategy_names()  # the shipped ones (check_strategy reads the table itself)
GENERATION_FIELDS = ("max_new_tokens", "temperature", "top_k", "top_p")
SPECULATION_FIELDS = (
    "num_draft_tokens",
    "fixed_k",
    "draft_p_min",
    "ngram_min",
    "ngram_max",
    "exit_layer",
    "tree",
    "tree_width",
)
_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than_equal", "finite_number"}

# What a value out of its range means, per field, in the words of the command line (option names).
_RANGE_MESSAGES: dict[str, Callable[[Any], str]] = {
    "max_new_tokens": lambda v: f"max-new-tokens must be at least 1 (got {v}).",
    "temperature": lambda v: f"temperature must be a number >= 0 (got {v}); 0 is greedy decoding.",
    "top_k": lambda v: f"top-k must be >= 0 (got {v}); 0 turns it off.",
    "top_p": lambda v: f"top-p must be in (0, 1] (got {v}); 1 turns it off.",
    "num_draft_tokens": lambda v: f"num-draft-tokens must be between 1 and {MAX_DRAFT_TOKENS} (got {v}).",
    "ngram_min": lambda v: f"ngram-min must be at least 1 (got {v}).",
    "ngram_max": lambda v: f"ngram-max must be at least 1 (got {v}).",
    "exit_layer": lambda v: f"exit-layer must be at least 1 (got {v}).",
    "draft_p_min": lambda v: f"draft-p-min must be in [0, 1] (got {v}); 0 turns it off.",
    "tree": lambda v: f"tree must be between 0 and {MAX_TREE_NODES} nodes (got {v}); 0 drafts a chain.",
    "tree_width": lambda v: f"tree-width must be between 1 and {MAX_TREE_WIDTH} (got {v}).",
}


@dataclass(frozen=True)
class SettingsChange:
    """The settings a caller names on top of a preset's; None leaves a field as the preset has it.

    Field names are Settings' own. `given()` is what is set; `merged(**fields)` a copy with more set
    (unknown names are a TypeError, as for Settings)."""

    strategy: str | None = None
    max_new_tokens: int | None = None
    num_draft_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: Sequence[str] | str | None = None
    ngram_min: int | None = None
    ngram_max: int | None = None
    exit_layer: int | None = None
    chat: bool | None = None
    fixed_k: bool | None = None
    draft_p_min: float | None = None
    min_p: float | None = None
    ignore_eos: bool | None = None
    tree: int | None = None
    tree_width: int | None = None

    def given(self) -> dict[str, Any]:
        """The fields set (not None), by name."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }

    def merged(self, **fields: Any) -> SettingsChange:
        """A copy with `fields` set on top (a None among them leaves that field as it was)."""
        _check_names(fields)
        return dataclasses.replace(
            self, **{name: value for name, value in fields.items() if value is not None}
        )


@dataclass(frozen=True)
class ModelContext:
    """What a check of the settings needs to know of one model: its name (for the message), the context
    it declares (None: unknown) and, for the target, its layer count (None: unknown or no layer stack)."""

    name: str
    positions: int | None
    layers: int | None = None


def check_fits(settings: Settings, target: ModelContext | None, draft: ModelContext | None = None) -> None:
    """The one check of settings against models, pure: the CLI runs it on local configs before torch is
    imported, `Pair.settings` on the loaded models. UsageError when k cannot fit a context the strategy
    drafts or verifies in (a round verifies the last token + k drafts after at least one prompt token: k
    <= context - 2; the engine caps each round by what is left), or when an exit layer given to a strategy
    drafting with the target's own layers is not inside the target (1 .. layers - 1)."""
    own = entry(settings.strategy)
    if not own.drafts:
        return
    k = settings.num_draft_tokens
    for model in (target, draft if own.model == Model.DRAFT else None):
        if model is not None and model.positions is not None and k > model.positions - 2:
            raise UsageError(
                f"num-draft-tokens {k} does not fit the context of '{model.name}' "
                f"({model.positions} tokens).",
                f"Pick -k {max(1, model.positions - 2)} or less.",
            )
    layer = settings.exit_layer
    if not own.target_layers or target is None or target.layers is None or layer is None:
        return
    if not 1 <= layer < target.layers:
        raise UsageError(
            f"exit layer {layer} is out of range for '{target.name}' ({target.layers} layers).",
            f"Pick --exit-layer between 1 and {target.layers - 1}.",
        )


def default_exit_layer(num_layers: int) -> int:
    """The exit layer used when neither the call nor the preset names one: a quarter of the depth."""
    return max(1, num_layers // 4)


@dataclass(frozen=True)
class Settings:
    """Every generation setting, resolved once: preset first, then the caller's overrides.

    Built through `resolve_settings` or `Pair.settings`; constructing or `replace`-ing one validates
    every value again (UsageError on a bad one), so a Settings object always holds valid values.
    exit_layer applies to strategy 'self', ngram_min/ngram_max to 'lookup'; chat None follows the
    preset's chat_template rule. num_draft_tokens is the most a round drafts: each round chooses its k
    up to it (docs/design.md §11) unless fixed_k; draft_p_min > 0 ends a draft before a token the
    drafter gives less probability than that. min_p (0 = off) drops tokens below min_p times the top
    token's probability, after temperature, top-k and top-p (transformers' order); ignore_eos: EOS does
    not end the generation (max_new_tokens, the context or a stop string does). tree > 0 drafts token
    trees of up to that many nodes a round (docs/design.md §14), growing tree_width nodes per depth with
    tree_width children each; 0 drafts a chain. A strategy that drafts chains only (self) refuses a
    tree (UsageError); plain decoding (none) ignores it.
    """

    strategy: str  # a plain name: "draft" | "none" | "lookup" | "self" | "eagle" (Strategy)
    max_new_tokens: int
    num_draft_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ngram_min: int = 1
    ngram_max: int = LOOKUP_NGRAM_MAX
    exit_layer: int | None = None
    chat: bool | None = None
    fixed_k: bool = False
    draft_p_min: float = 0.0
    min_p: float = 0.0
    ignore_eos: bool = False
    tree: int = 0
    tree_width: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", check_strategy(self.strategy))  # Strategy.DRAFT -> "draft"
        generation = _validate(GenerationSpec, {name: getattr(self, name) for name in GENERATION_FIELDS})
        speculation = _validate(SpeculationSpec, {name: getattr(self, name) for name in SPECULATION_FIELDS})
        checked = {name: getattr(generation, name) for name in GENERATION_FIELDS}
        checked |= {name: getattr(speculation, name) for name in SPECULATION_FIELDS}
        checked |= {"seed": _seed(self.seed), "stop": _stop(self.stop), "chat": _chat(self.chat)}
        checked |= {"min_p": _min_p(self.min_p), "ignore_eos": _flag(self.ignore_eos, "ignore_eos")}
        for name, value in checked.items():  # the schema's types: "3" -> 3, 1 -> 1.0
            object.__setattr__(self, name, value)
        check_tree(self.strategy, self.tree)

    @property
    def drafts_tree(self) -> bool:
        """Whether generations with these settings draft token trees (tree > 0 and a strategy that
        drafts: plain decoding ignores tree)."""
        return self.tree > 0 and entry(self.strategy).drafts

    @property
    def sampling(self) -> SamplingConfig:
        """temperature, top-k, top-p and min-p as the engine's SamplingConfig."""
        from specli.engine.sampling import SamplingConfig  # imports torch; this module must not

        return SamplingConfig(
            temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p
        )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes` applied, validated again (UsageError on a bad value)."""
        _check_names(changes)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["stop"] = list(self.stop)
        return data


def resolve_settings(
    preset: Preset | None = None,
    change: SettingsChange | None = None,
    /,
    *,
    engine: str | None = None,
    **fields: Any,
) -> Settings:
    """The preset's settings (the schema's defaults without one), then `change` and `fields` on top.

    A field whose value is None is unset. Names are Settings' fields; a value out of range raises a
    UsageError naming the command-line option. `engine` ("torch", "llama.cpp"; None: not known yet)
    picks a strategy's own k where it differs by engine (`draft_tokens`). Nothing here needs a model:
    exit_layer's default and its upper bound come with `Pair.settings`.
    """
    change = (change or SettingsChange()).merged(**fields)
    if preset is None:
        return settings_from(GenerationSpec(), SpeculationSpec(), Strategy.DRAFT, change, engine)
    return settings_from(preset.generation, preset_speculation(preset), preset.strategy, change, engine)


def preset_speculation(preset: Preset) -> SpeculationSpec:
    """The preset's speculation, its num_draft_tokens counting as named for a strategy with a k of its
    own (the table's `own_k`: lookup's) only when the preset itself runs one: a k
    picked for a drafter model stays for the model strategies, unnamed (and so that strategy's own) for
    lookup."""
    spec = preset.speculation
    if entry(preset.strategy).default_k is not None or "num_draft_tokens" not in spec.model_fields_set:
        return spec
    return SpeculationSpec.model_construct(spec.model_fields_set - {"num_draft_tokens"}, **dict(spec))


def draft_tokens(speculation: SpeculationSpec, strategy: str, engine: str | None = None) -> int:
    """The most a round drafts under `strategy`: the speculation's num_draft_tokens, but the strategy's
    own k on `engine` (the table's `own_k`: lookup's 32 on the torch engine, 16 on llama.cpp) unless the
    speculation names one."""
    own = entry(strategy).own_k(engine)
    if own is not None and "num_draft_tokens" not in speculation.model_fields_set:
        return own
    return speculation.num_draft_tokens


def settings_from(
    generation: GenerationSpec,
    speculation: SpeculationSpec,
    strategy: str,
    change: SettingsChange,
    engine: str | None = None,
    /,
) -> Settings:
    """resolve_settings from a preset's parts (what `Pair` keeps of its preset); k as `draft_tokens` says."""
    given = change.given()
    values: dict[str, Any] = {"strategy": strategy}
    values |= {name: getattr(generation, name) for name in GENERATION_FIELDS}
    values |= {name: getattr(speculation, name) for name in SPECULATION_FIELDS}
    values["num_draft_tokens"] = draft_tokens(speculation, given.get("strategy") or strategy, engine)
    return Settings(**(values | given))


def _check_names(fields: dict[str, Any]) -> None:
    unknown = set(fields) - {f.name for f in dataclasses.fields(Settings)}
    if unknown:
        raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")


def _validate(model: type[GenerationSpec] | type[SpeculationSpec], values: dict[str, Any]) -> Any:
    """values through the preset schema (lax about types: numpy ints, "3"), errors as UsageError."""
    try:
        return model.model_validate(values, strict=False)
    except ValidationError as exc:
        raise _usage_error(exc.errors(include_url=False)[0], values) from None


def _usage_error(error: Any, values: dict[str, Any]) -> UsageError:
    """One pydantic error -> the message the command line shows (option names, the value, the fix)."""
    if error["type"] == "ngram_order":
        ctx = error["ctx"]
        return UsageError(f"ngram-max ({ctx['ngram_max']}) must be at least ngram-min ({ctx['ngram_min']}).")
    name = str(error["loc"][0])
    value = values.get(name)
    if error["type"] in _RANGE_ERRORS:
        return UsageError(_RANGE_MESSAGES[name](value))
    message = error["msg"][:1].lower() + error["msg"][1:]  # a type error: "input should be a valid integer"
    return UsageError(f"{name.replace('_', '-')}: {message} (got {value!r}).")


def _seed(seed: Any) -> int | None:
    if seed is None:
        return None
    try:
        return operator.index(seed)
    except TypeError:
        raise UsageError(f"seed must be a whole number (got {seed!r}).") from None


def _stop(stop: Any) -> tuple[str, ...]:
    """Stop strings as a tuple; one string is one stop string (not its characters)."""
    if stop is None:
        return ()
    strings = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, Sequence) else None
    if strings is None or not all(isinstance(s, str) for s in strings):
        raise UsageError(f"stop must be strings (got {stop!r}).")
    if "" in strings:  # it would match at once: generation would stop before its first token
        raise UsageError("a stop string cannot be empty.", "Give --stop some text, or leave it out.")
    return strings


def _min_p(min_p: Any) -> float:
    """A probability ratio in [0, 1] (0: off), as transformers' MinPLogitsWarper takes."""
    try:
        value = float(min_p)
    except (TypeError, ValueError):
        raise UsageError(f"min_p must be a number in [0, 1] (got {min_p!r}); 0 turns it off.") from None
    if isinstance(min_p, bool) or not 0.0 <= value <= 1.0:  # NaN fails the range too
        raise UsageError(f"min_p must be in [0, 1] (got {min_p!r}); 0 turns it off.")
    return value


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    raise UsageError(f"{name} must be True or False (got {value!r}).")


def _chat(chat: Any) -> bool | None:
    if chat is None or isinstance(chat, bool):
        return chat
    raise UsageError(f"chat must be True, False or None (got {chat!r}).")
