"""The strategies: `Strategy` names the shipped ones, `STRATEGY_TABLE` says what each one is, from its
name to the file that builds its drafter and its capabilities (what it needs loaded, whether --compile
runs it, its own k). Dispatch, validation (settings, presets, the command line) and every "does this
strategy need ..." question read the table, so adding a strategy is one drafter file and one entry here
(`tests/drafters/test_strategy_table.py` registers one that way); code that must name a shipped strategy (a
default, a label) uses its `Strategy` member.

No torch here: the CLI and the preset schema check strategy names before anything heavy is imported; a
strategy's file is imported only when a pair builds its drafter (`specli.drafters.context.build_drafter`).
A leaf: it imports nothing of specli's but its errors, so every layer may read it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from specli.errors import UsageError


class Strategy(str, Enum):
    """The shipped strategies. A str enum: members equal, hash and print as their plain names ("draft"),
    so YAML, JSON and command-line values stay plain strings."""

    DRAFT = "draft"
    NONE = "none"
    LOOKUP = "lookup"
    SELF = "self"
    EAGLE = "eagle"
    HEADS = "heads"

    def __str__(self) -> str:  # and so format(): f"{Strategy.DRAFT}" is "draft", not "Strategy.DRAFT"
        return self.value


class Model(str, Enum):
    """The weights a strategy drafts with, beside the target's."""

    DRAFT = "drafter model"  # a small model sharing the target's tokenizer (load's `draft=`)
    # an EAGLE head reading the target's hidden states (load's `draft=` with eagle; told apart from
    # blockwise heads by its config.json: specli/models/head_formats.py)
    HEAD = "EAGLE head"
    HEADS = "blockwise heads"  # K blocks into the target's LM head (load's `draft=` with heads)

    @property
    def is_head(self) -> bool:
        """Weights that read the target's hidden states and sit beside its LM head (no model of their
        own): an EAGLE head or blockwise heads."""
        return self in (Model.HEAD, Model.HEADS)

    def __str__(self) -> str:
        return self.value


# lookup's most drafts per round where neither the caller nor a lookup preset names k: its drafts cost
# nothing but verify width, and the per-round controller drafts less where they stop paying
# (docs/strategies.md). A copy in progress keeps nearly every draft, so a longer bound pays where a verify
# of 33 tokens is one forward (the torch engine: editing prompts on Gemma 3 270M ran 1.21x at k <= 32
# against k <= 16, docs/performance.md); the llama.cpp engine splits forwards past 17 rows to keep them
# exact (specli/models/llama_cpp/rows.py), so it keeps 16.
LOOKUP_DRAFT_TOKENS = 32
LOOKUP_DRAFT_TOKENS_LLAMA = 16
# lookup's longest suffix matched (--ngram-max's default): long enough that a match pins the passage
# being repeated, so a draft follows that passage instead of re-deciding each token from a short n-gram
# that occurs in many places (docs/strategies.md)
LOOKUP_NGRAM_MAX = 32


@dataclass(frozen=True)
class Entry:
    """One strategy. `module` is the file that drafts for it, imported when a pair first builds that
    drafter: it defines `build(context, length) -> Drafter` (`specli.drafters.context.DraftContext`; a
    generation that can reach `length` tokens; UsageError when the loaded models cannot run it); None is
    plain decoding (no drafter).

    `about` says in a few words what drafts (the --strategy help lists it).

    Capabilities: `model`, the weights it drafts with (loaded by `specli.load`, or on first use from the
    preset; None: no weights of its own); `target_layers`, it drafts with the target's own first layers
    (the target needs a supported architecture, and an exit layer inside it); `no_compile`, why --compile
    cannot run it (None: it can); `chains_only`, why it cannot draft token trees (None: it can);
    `default_k`, the most it drafts per round when neither the caller nor a
    preset of its own names k (None: the preset's num_draft_tokens), and `engine_k` that default on the
    engines where it differs ("llama.cpp": 16; `own_k`). `aliases`: other names the command
    line, settings and presets accept for it (each means this strategy; outputs name it by its own)."""

    module: str | None
    about: str = ""
    model: Model | None = None
    target_layers: bool = False
    no_compile: str | None = None
    chains_only: str | None = None
    default_k: int | None = None
    engine_k: tuple[tuple[str, int], ...] = ()  # (engine, k) pairs
    aliases: tuple[str, ...] = ()

    def own_k(self, engine: str | None = None) -> int | None:
        """The strategy's own k on `engine` ("torch", "llama.cpp"); None: the engine is not known yet
        (before loading, engine auto), and the smallest of its engines' k stands in (the loaded pair's
        settings give the engine's own). None when it has no k of its own."""
        if self.default_k is None:
            return None
        if engine is None:
            return min([self.default_k, *(k for _, k in self.engine_k)])
        return dict(self.engine_k).get(engine, self.default_k)

    @property
    def drafts(self) -> bool:
        """Whether the strategy drafts at all ('none' is plain decoding)."""
        return self.module is not None


STRATEGY_TABLE: Mapping[str, Entry] = MappingProxyType(
    {
        Strategy.DRAFT: Entry("specli.drafters.draft_model", "a drafter model", model=Model.DRAFT),
        Strategy.NONE: Entry(None, "plain decoding"),
        Strategy.LOOKUP: Entry(
            "specli.drafters.prompt_lookup",
            "n-grams of prompt + output",
            default_k=LOOKUP_DRAFT_TOKENS,
            engine_k=(("llama.cpp", LOOKUP_DRAFT_TOKENS_LLAMA),),  # engines.LLAMA
        ),
        Strategy.SELF: Entry(
            "specli.drafters.self_speculative",
            "the target's first layers draft",
            target_layers=True,
            no_compile="it runs the target's layers a slice at a time, outside the compiled forward",
            chains_only="it drafts inside the target's own layers",
        ),
        Strategy.EAGLE: Entry(
            "specli.drafters.eagle", "an EAGLE head on the target's hidden states", model=Model.HEAD
        ),
        Strategy.HEADS: Entry(
            "specli.drafters.heads",
            "blockwise heads on the target's last hidden state",
            model=Model.HEADS,
            aliases=("blockwise",),
        ),
    }
)


def strategy_names() -> tuple[str, ...]:
    """Every strategy the table knows, in its order, as plain names."""
    return tuple(str(name) for name in STRATEGY_TABLE)


def entry(strategy: str) -> Entry:
    """The table's entry for `strategy` (checked: UsageError for a name it does not know)."""
    return STRATEGY_TABLE[check_strategy(strategy)]


def check_strategy(strategy: str) -> str:
    """`strategy` as a plain name the table knows (an alias as the name it stands for: 'blockwise' ->
    'heads'), or a UsageError listing them (with the nearest for a typo: 'eagel')."""
    names = strategy_names()
    if isinstance(strategy, str) and strategy in names:
        return str(strategy)
    for name, known in STRATEGY_TABLE.items():
        if strategy in known.aliases:
            return str(name)
    close = difflib.get_close_matches(str(strategy), names, n=1)
    guess = f" Did you mean '{close[0]}'?" if close else ""
    raise UsageError(f"unknown strategy '{strategy}'.{guess}", f"Use one of: {', '.join(names)}.")


def choices() -> str:
    """The table's strategies as a sentence: "'draft', 'none', 'lookup', 'self' or 'eagle'"."""
    return either([f"'{name}'" for name in strategy_names()])


def described() -> str:
    """Every strategy with its `about`, plain decoding last: "draft (a drafter model), ... or none (plain
    decoding)" (the --strategy help)."""
    names = sorted(strategy_names(), key=lambda name: not entry(name).drafts)
    return either([f"{name} ({entry(name).about})" if entry(name).about else name for name in names])


def either(parts: list[str]) -> str:
    """ "a, b or c"."""
    return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else "".join(parts)


def check_compile(strategy: str) -> None:
    """UsageError for a strategy --compile cannot run (its entry's `no_compile` says why)."""
    why = entry(strategy).no_compile
    if why is None:
        return
    runs = [name for name in strategy_names() if entry(name).drafts and entry(name).no_compile is None]
    raise UsageError(
        f"--compile does not support strategy '{strategy}': {why}.",
        f"Use --strategy {', '.join(runs)} or none with --compile, or drop --compile.",
    )


def tree_strategies() -> list[str]:
    """The strategies that draft token trees, in the table's order: those that draft, less `chains_only`."""
    return [name for name in strategy_names() if entry(name).drafts and entry(name).chains_only is None]


def check_tree(strategy: str, tree: int) -> None:
    """UsageError, one line, for a tree (tree > 0) with a strategy that drafts chains only (its entry's
    `chains_only` says why); plain decoding ignores a tree."""
    why = entry(strategy).chains_only
    if why is not None and tree > 0:
        raise UsageError(
            f"strategy '{strategy}' drafts chains only ({why}); drop --tree, or use --strategy "
            f"{either(tree_strategies())}."
        )
