"""Python API: `load(...)` a target/drafter pair once, then `generate` or `stream` many times.

import specli
pair = specli.load("llama-8b-1b")               # or load(target="./my-model", draft="./small")
result = pair.generate("def fibonacci(n):", max_new_tokens=64)
print(result.text, result.stats.acceptance_rate)
for round in pair.stream("Hello", temperature=0.7, seed=1):
    print(round.text, end="")                   # what the round added; round.committed: its ids
settings = pair.settings(temperature=0.7, seed=1)  # the same settings, resolved once (specli.settings)
pair.generate("Hello", settings=settings)

`load` runs in four steps: sources (what to load, arguments over the preset) -> checks (configs and
tokenizers only) -> plan (memory and GPUs, `specli.models.plan`) -> weights.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from specli.drafters.draft_model import (
    PARALLEL_K_DEFAULT,
    DraftModelDrafter,
    parallel_draft_tokens,
    parallel_mask_token,
)
from specli.drafters.eagle import EagleDrafter
from specli.drafters.prompt_lookup import PromptLookupDrafter
from specli.drafters.self_speculative import SelfSpeculativeDrafter
from specli.engine.drafter import Drafter, ReadsTargetFeatures
from specli.engine.events import Round, Stats
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.stopping import StopCriteria
from specli.errors import UsageError
from specli.models import head_formats, loading, plan
from specli.models.cached_lm import CachedLM, check_sliding_rollback, synchronize
from specli.models.eagle_head import EagleHead
from specli.models.layer_stack import LayerStack, check_architecture, check_layer_stack
from specli.models.own_forward.decoder import LeanDecoder
from specli.models.own_forward.head import LeanHead
from specli.models.placement import Placement
from specli.models.plan import ModelToLoad
from specli.models.static_cache import STATIC_DEFAULT_LENGTH, static_cache_problem
from specli.presets import GenerationSpec, Preset, SpeculationSpec, resolve_preset
from specli.settings import (
    Settings,
    check_strategy,
    default_exit_layer,
    preset_speculation,
    settings_from,
)
from specli.text import IncrementalDecoder
from specli.threads import AUTO, BusyProbe, apply_threads

DEFAULT_PRESET = "tiny"


def check_model_options(*, device: str, dtype: str | None, quant: str | None) -> None:
    """Cheap checks of --device/--dtype/--quant before anything loads."""
    loading.resolve_device(device)
    if dtype is not None:
        loading.resolve_dtype(dtype, torch.device("cpu"))
    if quant is not None and quant not in loading.QUANT_MODES:
        raise UsageError(f"unknown quantization '{quant}'.", "Use one of: none, 8bit, 4bit.")


@dataclass
class GenerationStats(Stats):
    """One generation's `Stats` with the settings it ran under: `Result.stats`, and `generate --json`'s
    "stats" (`to_dict`: the same keys either way). strategy, num_draft_tokens (the most a round drafts),
    fixed_k and draft_p_min as resolved; mean_k: drafted tokens per round; compile_time: seconds spent
    compiling before the rounds (None without compile); interrupted: Ctrl-C ended it (the CLI; its
    stop_reason is then "interrupted"); notes: what the run did not show (specli.notes)."""

    strategy: str = ""
    num_draft_tokens: int = 0
    fixed_k: bool = False
    draft_p_min: float = 0.0
    compile_time: float | None = None
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(
        cls, pair: Pair, settings: Settings, prompt_length: int, strategy_given: str | None, **fields: Any
    ) -> GenerationStats:
        """Empty stats for a generation of `pair` under `settings` (`observe` its rounds), with its notes
        (strategy_given: the strategy the caller named, None when none); `fields`: compile_time, ..."""
        from specli.notes import generation_notes

        return cls(
            strategy=settings.strategy,
            num_draft_tokens=settings.num_draft_tokens,
            fixed_k=settings.fixed_k,
            draft_p_min=settings.draft_p_min,
            notes=generation_notes(pair, settings, prompt_length, strategy_given),
            **fields,
        )

    @property
    def mean_k(self) -> float:
        """Drafted tokens per round (each round chooses its k up to num_draft_tokens; 0.0 without rounds)."""
        return self.drafted / self.rounds if self.rounds else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data.update(
            strategy=self.strategy,
            num_draft_tokens=self.num_draft_tokens,
            fixed_k=self.fixed_k,
            draft_p_min=self.draft_p_min,
            mean_k=self.mean_k,
            interrupted=self.interrupted,
            compile_time=self.compile_time,
            notes=list(self.notes),
        )
        if self.interrupted:
            data["stop_reason"] = "interrupted"
        return data


@dataclass
class Result:
    """What one generation produced: text, generated ids (prompt excluded), stats (with the settings it
    ran under: `GenerationStats`) and every round."""

    text: str
    token_ids: list[int]
    prompt_token_ids: list[int]
    stats: GenerationStats
    rounds: list[Round]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "prompt_token_ids": self.prompt_token_ids,
            "stats": self.stats.to_dict(),
            "rounds": [r.to_dict() for r in self.rounds],
        }


class Pair:
    """A loaded target (+ drafter) with generation defaults. Holds no per-generation state."""

    def __init__(
        self,
        target_model: Any,
        tokenizer: Any,
        draft_model: Any | None = None,
        *,
        strategy: str = "draft",
        target_name: str = "target",
        draft_name: str | None = None,
        generation: GenerationSpec | None = None,
        speculation: SpeculationSpec | None = None,
        placement: Placement | None = None,
        head: EagleHead | None = None,
        head_name: str | None = None,
        compile: bool = False,
        lean: bool = True,
    ) -> None:
        self.strategy = check_strategy(strategy)
        if strategy == "draft" and draft_model is None:
            raise UsageError(
                "strategy 'draft' needs a drafter model.",
                "Pass --draft MODEL, or use --strategy none for plain decoding.",
            )
        self.target_model = target_model
        self.draft_model = draft_model
        self.tokenizer = tokenizer
        self.target_name = target_name
        self.draft_name = draft_name
        self.generation = generation or GenerationSpec()
        self.speculation = speculation or SpeculationSpec()
        self.placement = placement  # set when the target is split over several GPUs
        self.head = head  # an EAGLE head (strategy eagle), beside the target's LM head
        self.head_name = head_name
        self.compile = compile  # static caches + torch.compile (docs/design.md §12)
        self.later: _Later | None = None  # set by `load`: loads the preset's drafter or head on first use
        self.lean = lean  # drafters step through specli's own forwards where they can (docs/design.md §13)
        self._lean_steps: dict[int, tuple[Any, str | None]] = {}  # id(model or head) -> (lean step, why not)
        if compile:
            check_compile_strategy(self.strategy)
        if strategy == "self":
            check_layer_stack(target_model)
        self.num_layers = _self_speculation_layers(target_model)  # None: 'self' cannot drive it
        self.eos_ids = loading.eos_token_ids(target_model, tokenizer)
        self.max_positions = loading.model_max_positions(target_model)
        self.draft_max_positions = loading.model_max_positions(draft_model) if draft_model else None
        self.target = _cached_lm(target_model, target_name, self.max_positions, compile)
        self.draft = (
            _cached_lm(draft_model, draft_name or "the drafter", self.draft_max_positions, compile)
            if draft_model is not None
            else None
        )

    def __repr__(self) -> str:
        parts = [f"target={self.target_name!r}"]
        if self.draft_name is not None:
            parts.append(f"draft={self.draft_name!r}")
        if self.head_name is not None:
            parts.append(f"head={self.head_name!r}")
        parts += [f"strategy={self.strategy!r}", f"device={self.target.device}"]
        return f"Pair({', '.join(parts)})"

    # --- text <-> ids -------------------------------------------------------------------------
    def uses_chat(self, chat: bool | None = None) -> bool:
        """chat=None follows the preset ('auto': on when the tokenizer has a chat template)."""
        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        if chat is None:
            mode = self.generation.chat_template
            chat = has_template if mode == "auto" else mode == "on"
        if chat and not has_template:
            raise UsageError(f"'{self.target_name}' has no chat template.", "Run without --chat.")
        return chat

    def encode(self, prompt: str, chat: bool | None = None) -> list[int]:
        """Prompt text -> ids, through the chat template when chat is on."""
        if self.uses_chat(chat):
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = self.tokenizer(prompt)["input_ids"]
        if not ids:
            bos = self.tokenizer.bos_token_id
            if bos is None:
                raise UsageError("the prompt is empty.", "Give some text to continue.")
            ids = [bos]
        return list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # --- settings and generation ---------------------------------------------------------------
    def settings(self, **overrides: Any) -> Settings:
        """The pair's settings (its preset's, its strategy) with `overrides` on top (None = unset),
        checked against the loaded models; exit_layer defaults to a quarter of the target's depth."""
        return self._checked(settings_from(self.generation, self.speculation, self.strategy, **overrides))

    def _checked(self, settings: Settings) -> Settings:
        """What only the loaded models can tell: a drafter model for 'draft'; for 'self', a supported
        target and an exit layer inside it. Fills exit_layer whenever the target can self-speculate."""
        self._load_missing(settings.strategy)
        if self.compile:
            check_compile_strategy(settings.strategy)
        self._check_draft_length(settings)
        layers = self.num_layers
        if settings.exit_layer is None and layers is not None:
            settings = settings.replace(exit_layer=default_exit_layer(layers))
        if settings.strategy == "self":
            if layers is None:
                check_layer_stack(self.target_model)  # raises, naming the architecture
            if not 1 <= settings.exit_layer < layers:
                raise UsageError(
                    f"exit layer {settings.exit_layer} is out of range for '{self.target_name}' "
                    f"({layers} layers).",
                    f"Pick --exit-layer between 1 and {layers - 1}.",
                )
        return settings

    def _load_missing(self, strategy: str) -> None:
        """The drafter ('draft') or EAGLE head ('eagle') `strategy` needs and the pair lacks: loaded now,
        once, when the pair's preset names it (`_Later`); else UsageError naming the load that gives it."""
        later = self.later
        if strategy == "draft" and self.draft is None and not (later and later.load_drafter(self)):
            raise UsageError(
                "strategy 'draft' needs a drafter model, and this pair's preset names none.",
                "Load the pair with specli.load(..., draft=MODEL).",
            )
        if strategy == "eagle" and self.head is None and not (later and later.load_head(self)):
            raise UsageError(
                "strategy 'eagle' needs an EAGLE head, and this pair's preset names none.",
                "Load the pair with specli.load(..., strategy='eagle', draft=HEAD) (a folder, hub id or "
                "embedded:NAME).",
            )

    def attach_drafter(self, draft_model: Any, name: str) -> None:
        """Add a drafter model to a loaded pair (strategy 'draft' then runs with it)."""
        self.draft_model, self.draft_name = draft_model, name
        self.draft_max_positions = loading.model_max_positions(draft_model)
        self.draft = _cached_lm(draft_model, name, self.draft_max_positions, self.compile)

    def _check_draft_length(self, settings: Settings) -> None:
        """UsageError when k cannot fit a model's context: a round verifies the last token + k drafts after
        at least one prompt token, so k <= context - 2 (the engine caps each round by what is left)."""
        if settings.strategy == "none":
            return
        limits = [(self.max_positions, self.target_name)]
        if settings.strategy == "draft":
            limits.append((self.draft_max_positions, self.draft_name))
        for limit, name in limits:
            if limit is not None and settings.num_draft_tokens > limit - 2:
                raise UsageError(
                    f"num-draft-tokens {settings.num_draft_tokens} does not fit the context of "
                    f"'{name}' ({limit} tokens).",
                    f"Pick -k {max(1, limit - 2)} or less.",
                )

    def _resolve(self, settings: Settings | None, overrides: dict[str, Any]) -> Settings:
        """`settings` (default: the pair's own) with `overrides` (None = unset), checked for this pair."""
        if settings is None:
            return self.settings(**overrides)
        changes = {name: value for name, value in overrides.items() if value is not None}
        return self._checked(settings.replace(**changes) if changes else settings)

    def _drafter(self, settings: Settings, length: int) -> Drafter | None:
        """The strategy's drafter for a generation that can reach `length` tokens (None: plain)."""
        if settings.strategy == "none":
            return None
        if settings.strategy == "lookup":
            return PromptLookupDrafter(settings.ngram_min, settings.ngram_max)
        if settings.strategy == "self":
            check_sliding_rollback(self.target, f"'{self.target_name}' (strategy self)", length)
            stack = LayerStack(self.target_model)
            return SelfSpeculativeDrafter(stack, settings.exit_layer, p_min=settings.draft_p_min)
        if settings.strategy == "eagle":
            lean = self._lean_step(self.head)[0]
            return EagleDrafter(self.head, self.target_model, p_min=settings.draft_p_min, lean=lean)
        lean = self._lean_step(self.draft_model)[0]
        if lean is None:
            check_sliding_rollback(self.draft, f"the drafter '{self.draft_name}'", length)
        return DraftModelDrafter(
            lean or self.draft,
            self.target.vocab_size,
            self.draft_max_positions,
            mask_token=parallel_mask_token(self.draft_model.config),
            p_min=settings.draft_p_min,
        )

    def _lean_step(self, model: Any) -> tuple[LeanDecoder | LeanHead | None, str | None]:
        """(specli's lean forward of the draft model or EAGLE head, None), built once per model, or
        (None, why it steps through its own forward): lean off, or a model the lean forward does not
        reproduce. With --compile too the lean step drafts (measured faster than the compiled draft
        model on CPU); only the target's forwards are compiled then."""
        if not self.lean:
            return None, "lean steps are off"
        if id(model) not in self._lean_steps:  # a head is specli's own module: no probe needed
            built = (LeanHead(model), None) if isinstance(model, EagleHead) else LeanDecoder.build(model)
            self._lean_steps[id(model)] = built
        return self._lean_steps[id(model)]

    def drafter_step(self, strategy: str | None = None) -> str | None:
        """How `strategy`'s drafter steps (default: the pair's own): "lean" (specli's own forward),
        "compiled", or "transformers (why)" (the model's forward); None for strategies without a drafter
        model or head."""
        strategy = strategy or self.strategy
        model = self.head if strategy == "eagle" else self.draft_model if strategy == "draft" else None
        if model is None:
            return None
        lean, why = self._lean_step(model)
        if lean is not None:
            return "lean"
        return "compiled" if self.compile and strategy == "draft" else f"transformers ({why})"

    @property
    def parallel_draft_tokens(self) -> int | None:
        """The k the pair's own drafter was made for when it drafts in parallel (PARD: its recorded K or
        8; P-EAGLE: its speculators speculative_tokens or 8); None for an autoregressive one."""
        if self.strategy == "eagle" and self.head is not None and self.head.config.parallel:
            return self.head.config.extra.get("speculative_tokens") or PARALLEL_K_DEFAULT
        if self.strategy == "draft":
            return parallel_draft_tokens(self.draft_model.config)
        return None

    @property
    def parallel(self) -> bool:
        """Whether the pair's own strategy drafts in parallel (a PARD drafter, a P-EAGLE head)."""
        return self.parallel_draft_tokens is not None

    def stream(
        self,
        prompt: str | None = None,
        *,
        prompt_ids: Sequence[int] | None = None,
        settings: Settings | None = None,
        record_top: int = 0,
        **overrides: Any,
    ) -> Iterator[Round]:
        """Yield one Round per target forward. `prompt_ids` bypasses tokenization and chat templates.

        Each round's `text` is what it adds to the output text: joined, the rounds' texts are
        `decode(all committed ids)` (Result.text). A character whose bytes span two rounds appears in the
        round that completes it.

        `settings` (default: `self.settings()`) with keyword overrides on top: max_new_tokens,
        temperature, top_k, top_p, seed, num_draft_tokens (the most a round drafts), fixed_k (True: every
        round drafts num_draft_tokens), draft_p_min, stop, chat, strategy, exit_layer, ngram_min,
        ngram_max, min_p, ignore_eos (None = unset). Bad values raise UsageError here, before the first
        round. Each call
        starts from fresh caches and drafter state. With sampling, a seed reproduces the output only with
        fixed_k: the per-round k follows measured speed. record_top > 0 fills each round's token_source (the
        top entries of the distribution its last token came from).
        """
        settings = self._resolve(settings, overrides)
        ids = self.prompt_ids(prompt, prompt_ids=prompt_ids, chat=settings.chat)
        config = EngineConfig(
            max_new_tokens=settings.max_new_tokens,
            num_draft_tokens=settings.num_draft_tokens,
            fixed_k=settings.fixed_k,
            sampling=settings.sampling,
            seed=settings.seed,
            record_top=record_top,
        )
        drafter = self._drafter(settings, len(ids) + settings.max_new_tokens + settings.num_draft_tokens)
        self._reserve(len(ids), settings)
        self._warm_up(settings, drafter)  # normally done: compiles nothing once warm_up() ran for settings
        criteria = StopCriteria(set() if settings.ignore_eos else self.eos_ids, settings.stop, self.decode)
        rounds = generate_rounds(self.target, drafter, ids, config, criteria, self.max_positions)
        return self._with_text(rounds)

    def _reserve(self, prompt_length: int, settings: Settings) -> None:
        """Static caches: room for everything this generation can hold (the prompt, max_new_tokens and a
        round's k + 1 verify positions, within each model's context), and compiled forwards up to k + 1
        tokens (a verify; a parallel draft). Dynamic caches need nothing."""
        k = settings.num_draft_tokens
        wanted = prompt_length + settings.max_new_tokens + k + 1
        for lm, limit in ((self.target, self.max_positions), (self.draft, self.draft_max_positions)):
            if lm is not None and lm.static:
                lm.reserve(min(wanted, limit + k + 2) if limit else wanted)
                lm.compiled_tokens = k + 1

    def warm_up(
        self,
        prompt: str | None = None,
        *,
        prompt_ids: Sequence[int] | None = None,
        settings: Settings | None = None,
        **overrides: Any,
    ) -> float:
        """With compile: build every compiled forward a generation with these settings can run (each
        verify length up to k + 1, the drafter's steps, over caches sized for the prompt), so none is
        built inside its rounds; `stream` does it too, but then inside the caller's clock. Takes
        `stream`'s arguments; returns the seconds it took (0.0 when everything was built already, and
        without compile). torch caches compiled code on disk: a later process compiles much faster."""
        if not self.compile:
            return 0.0
        settings = self._resolve(settings, overrides)
        ids = self.prompt_ids(prompt, prompt_ids=prompt_ids, chat=settings.chat)
        drafter = self._drafter(settings, len(ids) + settings.max_new_tokens + settings.num_draft_tokens)
        self._reserve(len(ids), settings)
        start = time.perf_counter()
        if self._warm_up(settings, drafter) == 0:
            return 0.0
        synchronize(self.target.device)
        return time.perf_counter() - start

    def _warm_up(self, settings: Settings, drafter: Drafter | None) -> int:
        """Warm every compiled forward the engine will call for `settings` (CachedLM.warm_up); returns
        how many forwards that ran. Target: verifies of 1 .. k + 1 tokens (one under strategy none), with
        hidden states for a feature-reading drafter (EAGLE). Draft model: single steps of 1 .. k + 1
        tokens (its unseen tokens, last position only), or a parallel drafter's passes of 1 .. k + 1."""
        if not self.compile:
            return 0
        k = settings.num_draft_tokens
        verify = range(1, 2) if settings.strategy == "none" else range(1, k + 2)
        ran = self.target.warm_up(verify, features=isinstance(drafter, ReadsTargetFeatures))
        if isinstance(drafter, DraftModelDrafter) and drafter.lm is self.draft:  # not a lean step
            ran += self.draft.warm_up(range(1, k + 2), last_only=not drafter.parallel)
        return ran

    def _with_text(self, rounds: Iterator[Round]) -> Iterator[Round]:
        """The engine's rounds with `text` filled in (the engine itself never decodes)."""
        decoder = IncrementalDecoder(self.tokenizer)
        for r in rounds:
            text = decoder.push(r.committed)
            if r.stop is not None:
                text += decoder.flush()
            yield replace(r, text=text)

    def prompt_ids(
        self, prompt: str | None = None, *, prompt_ids: Sequence[int] | None = None, chat: bool | None = None
    ) -> list[int]:
        """The ids generation starts from; checks they fit the context."""
        if (prompt is None) == (prompt_ids is None):
            raise UsageError("give exactly one of prompt and prompt_ids.")
        ids = list(prompt_ids) if prompt_ids is not None else self.encode(prompt, chat)
        if not ids:
            raise UsageError("prompt_ids is empty.")
        vocab = self.target.vocab_size
        if any(not 0 <= i < vocab for i in ids):
            raise UsageError(f"prompt_ids holds ids outside the vocabulary [0, {vocab}).")
        if self.max_positions is not None and len(ids) >= self.max_positions:
            raise UsageError(
                f"the prompt is {len(ids)} tokens but '{self.target_name}' has a context of "
                f"{self.max_positions} tokens.",
                "Shorten the prompt so there is room to generate.",
            )
        return ids

    def generate(
        self,
        prompt: str | None = None,
        *,
        prompt_ids: Sequence[int] | None = None,
        settings: Settings | None = None,
        record_top: int = 0,
        **overrides: Any,
    ) -> Result:
        """Run to a stop and collect the result; takes the same arguments as `stream`. With compile, the
        graphs are built first (`warm_up`), timed apart: `result.stats.compile_time`."""
        settings = self._resolve(settings, overrides)
        ids = self.prompt_ids(prompt, prompt_ids=prompt_ids, chat=settings.chat)
        compile_time = self.warm_up(prompt_ids=ids, settings=settings) if self.compile else None
        stats = GenerationStats.of(
            self, settings, len(ids), overrides.get("strategy"), compile_time=compile_time
        )
        rounds, tokens = [], []
        for r in self.stream(prompt_ids=ids, settings=settings, record_top=record_top):
            stats.observe(r)
            rounds.append(r)
            tokens += r.committed
        return Result(self.decode(tokens), tokens, ids, stats, rounds)


COMPILE_STRATEGIES = ("none", "draft", "lookup", "eagle")


def check_compile_strategy(strategy: str) -> None:
    """UsageError for a strategy --compile cannot run: 'self' drives the target's layers a slice at a
    time (layer_stack.py) with masks and positions of its own, outside the compiled forward."""
    if strategy not in COMPILE_STRATEGIES:
        raise UsageError(
            f"--compile does not support strategy '{strategy}': it runs the target's layers a slice at a "
            "time, outside the compiled forward.",
            f"Use --strategy {', '.join(COMPILE_STRATEGIES[1:])} or none with --compile, or drop --compile.",
        )


def _cached_lm(model: Any, name: str, max_positions: int | None, compile: bool) -> CachedLM:
    """The model driven one forward at a time: over dynamic caches, or (compile) over one static cache
    of min(context + 1, STATIC_DEFAULT_LENGTH) positions to start, grown when a generation needs more,
    with compiled forwards. UsageError naming the model when it cannot have a static cache."""
    if not compile:
        return CachedLM(model)
    problem = static_cache_problem(model)
    if problem is not None:
        raise UsageError(f"--compile cannot run '{name}': {problem}.", "Run it without --compile.")
    length = min(max_positions + 1, STATIC_DEFAULT_LENGTH) if max_positions else STATIC_DEFAULT_LENGTH
    return CachedLM(model, static_length=length, compile=True)


def _self_speculation_layers(model: Any) -> int | None:
    """The target's decoder layers when self-speculation can drive it, else None."""
    try:
        check_layer_stack(model)
    except UsageError:
        return None
    return len(model.model.layers)


# --- load: sources -> checks -> plan -> weights ------------------------------------------------------


def preset_for(
    preset: str | Preset | None,
    *,
    target: str | None = None,
    draft: str | None = None,
    strategy: str | Sequence[str] | None = None,
) -> Preset | None:
    """The preset `load` uses: the named one, or the embedded `tiny` one when no target is named (a
    drafter or EAGLE head named alone drafts for the default target, e.g. embedded:tiny-pard)."""
    if isinstance(preset, Preset):
        return preset
    if preset is None and target is None:
        preset = DEFAULT_PRESET
    return resolve_preset(preset) if preset else None


def load(
    preset: str | Preset | None = None,
    *,
    target: str | None = None,
    draft: str | None = None,
    strategy: str | Sequence[str] | None = None,
    device: str = "auto",
    dtype: str | None = None,
    quant: str | None = None,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    download_bars: Callable[[str], Any] | None = None,
    threads: int | str | None = AUTO,
    progress: bool = False,
    compile: bool = False,
    lean: bool = True,
) -> Pair:
    """Load a pair from a preset (name, path or Preset) and/or explicit models; explicit arguments win.

    With no preset, target or draft, the embedded `tiny` preset is used (offline, CPU-sized).

    `strategy` may name several strategies (bench runs them all on one pair): everything they need is
    loaded and the first becomes the pair's own. For 'eagle', `draft` names the EAGLE head (else the
    preset's head). A strategy left out whose drafter or head the preset names loads it on the first
    generation that asks for it (once, with the same checks). `dtype` applies to both models, `quant` to
    the target only. Tokenizers and head shapes are checked before any weights load. download_bars(model)
    may return a tqdm class for huggingface_hub's download bars. With device "auto" and several GPUs, a
    target too big for the first GPU is split over as few GPUs as hold it (see `placement`), the drafter
    beside its LM head.

    `threads` sets torch's CPU threads for the process (torch.set_num_threads): a number, "auto" (the
    cores other processes left free while the models loaded, `specli.threads`; torch's default threads
    collapse when another process keeps the CPU busy) or None (leave torch's setting alone).
    `progress=True` shows transformers' and huggingface_hub's own progress bars while loading; by default
    they stay quiet (download_bars, when given, draws the downloads either way).

    `compile=True` runs target and draft model over static KV caches with torch.compile'd forwards (CUDA
    graphs on CUDA; docs/design.md §12): faster steps once warm. Every graph a generation uses is built
    before its first round (`Pair.warm_up`, timed apart as `compile_time`; minutes cold on a CPU), and
    one generation runs at a time per pair. Strategy 'self', sliding-
    window models and models without a static cache are refused (UsageError) before generating.

    `lean=True` (the default) runs the drafter's steps through specli's own forward where it reproduces
    the model (Llama / Mistral / Qwen2 / Qwen3 draft models, every EAGLE head; docs/design.md §13):
    the same proposals at a fraction of the per-step overhead. `Pair.drafter_step()` says which ran.
    A lean step copies the q/k/v weights when first used: after changing a drafter's weights in place,
    load the pair again (or pass lean=False).
    """
    spec = preset_for(preset, target=target, draft=draft, strategy=strategy)
    wanted = _sources(spec, target=target, draft=draft, strategy=strategy, dtype=dtype, quant=quant)
    if compile:
        for name in wanted.strategies:  # before any weights load
            check_compile_strategy(name)
    dev = loading.resolve_device(device)
    probe = BusyProbe()  # what other processes use while we load decides threads="auto"
    fetcher = _Fetcher(allow_pickle, trust_remote_code, download_bars)
    with _progress_bars(progress, hub=download_bars is None):
        models, tokenizer, head = _fetch_and_check(wanted, fetcher)
        need = plan.head_need(head, models[0], dev, trust_remote_code) if head is not None else None
        placement = plan.plan_pair(models, dev, device, trust_remote_code, head=need)
        target_model, draft_model = _load_weights(models, placement, dev, fetcher)
        head_model = _load_head(head, target_model, fetcher) if head is not None else None
    apply_threads(threads, probe)
    pair = Pair(
        target_model,
        tokenizer,
        draft_model,
        strategy=wanted.strategies[0],
        target_name=models[0].name,
        draft_name=models[1].name if draft_model is not None else None,
        generation=spec.generation if spec else None,
        speculation=preset_speculation(spec) if spec else None,  # its k is its own strategy's
        placement=placement,
        head=head_model,
        head_name=head.name if head is not None else None,
        compile=compile,
        lean=lean,
    )
    if spec is not None:
        pair.later = _Later(spec, models[0], fetcher, dtype, progress)
    k = pair.parallel_draft_tokens
    if draft is not None and k is not None:  # a drafter the preset did not pick brings its own k
        pair.speculation = pair.speculation.model_copy(update={"num_draft_tokens": k})
    return pair


@contextmanager
def _progress_bars(on: bool, hub: bool) -> Iterator[None]:
    """transformers' "Loading weights" bars (and, when `hub`, huggingface_hub's download bars) on or off
    for the block, then as they were."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    def set_bars(transformers_on: bool, hub_on: bool | None) -> None:
        (hf_logging.enable_progress_bar if transformers_on else hf_logging.disable_progress_bar)()
        if hub_on is not None:
            (hub_utils.enable_progress_bars if hub_on else hub_utils.disable_progress_bars)()

    before = (hf_logging.is_progress_bar_enabled(), not hub_utils.are_progress_bars_disabled())
    set_bars(on, on if hub else None)
    try:
        yield
    finally:
        set_bars(before[0], before[1] if hub else None)


@dataclass(frozen=True)
class _Wanted:
    """What `load` fetches: the strategies, the target and drafter (models) and an EAGLE head."""

    strategies: tuple[str, ...]
    models: list[ModelToLoad]
    head: ModelToLoad | None = None


def _sources(
    spec: Preset | None,
    *,
    target: str | None,
    draft: str | None,
    strategy: str | Sequence[str] | None,
    dtype: str | None,
    quant: str | None,
) -> _Wanted:
    """The strategies and what to load (target first, then the drafter if a strategy needs one, and the
    EAGLE head if one does): explicit arguments over the preset. A model named on the command line gets
    'auto' dtype, not the preset's."""
    target_source = target or (spec.target.model if spec else None)
    if target_source is None:
        raise UsageError(
            "no model given.", "Pass --preset NAME (see `specli presets list`) or --target MODEL."
        )
    draft_source = draft or (spec.draft.model if spec and spec.draft else None)
    if isinstance(strategy, str) or strategy is None:
        strategy = [strategy or (spec.strategy if spec else ("draft" if draft_source else "none"))]
    strategies = tuple(dict.fromkeys(check_strategy(s) for s in strategy))
    head = None
    if "eagle" in strategies:
        preset_head = spec.eagle_head if spec and not draft else None
        head_source = draft or (preset_head.model if preset_head else None)
        if head_source is None:
            raise UsageError(
                "strategy 'eagle' needs an EAGLE head.",
                "Pass --draft HEAD (a folder, hub id or embedded:NAME, e.g. embedded:tiny-eagle3).",
            )
        head = ModelToLoad(head_source, dtype=dtype or (preset_head.dtype if preset_head else "auto"))
        if draft:  # --draft named the head, so the preset's drafter model is the draft strategy's
            draft_source = spec.draft.model if spec and spec.draft and spec.strategy != "eagle" else None
    if "draft" not in strategies:
        draft_source = None
    elif draft_source is None:
        raise UsageError(
            "strategy 'draft' needs a drafter model.",
            "Pass --draft MODEL, or use --strategy none for plain decoding.",
        )
    preset_target = spec.target if spec and not target else None
    models = [
        ModelToLoad(
            target_source,
            dtype=dtype or (preset_target.dtype if preset_target else "auto"),
            quant=quant or (preset_target.quantization if preset_target else "none"),
        )
    ]
    if draft_source is not None:
        preset_draft = spec.draft if spec and spec.draft and draft_source == spec.draft.model else None
        models.append(
            ModelToLoad(
                draft_source,
                dtype=dtype or (preset_draft.dtype if preset_draft else "auto"),
                quant=preset_draft.quantization if preset_draft else "none",
            )
        )
    return _Wanted(strategies, models, head)


@dataclass(frozen=True)
class _Fetcher:
    """Model folders from local paths, the embedded models or the hub (configs first, weights later)."""

    allow_pickle: bool
    trust_remote_code: bool
    download_bars: Callable[[str], Any] | None

    def folder(self, model: ModelToLoad, weights: bool = False) -> Any:
        return loading.resolve_source(
            model.name,
            allow_pickle=self.allow_pickle,
            trust_remote_code=self.trust_remote_code,
            weights=weights,
            tqdm_class=self.download_bars(model.name) if self.download_bars else None,
        )

    def tokenizer(self, model: ModelToLoad) -> Any:
        return loading.load_tokenizer(model.folder, trust_remote_code=self.trust_remote_code, name=model.name)


def _fetch_and_check(wanted: _Wanted, fetcher: _Fetcher) -> tuple[list[ModelToLoad], Any, ModelToLoad | None]:
    """Configs and tokenizers only, so every check runs before any weights are downloaded: the target's
    architecture for 'self', one tokenizer shared by target and drafter, an EAGLE head's shapes against
    the target's. Returns the models with their folders, the tokenizer and the head with its folder."""
    target = replace(wanted.models[0], folder=fetcher.folder(wanted.models[0]))
    head_formats.refuse_head_as_model(target.folder, target.name, "target")  # it has no tokenizer
    tokenizer = fetcher.tokenizer(target)
    target_config = loading.read_config(target.folder) or {}
    if "self" in wanted.strategies:  # refuse an unsupported architecture before any weights load
        check_architecture(str(target_config.get("model_type", "?")), "self")
    models = [target]
    for model in wanted.models[1:]:
        draft = replace(model, folder=fetcher.folder(model))
        head_formats.refuse_head_as_model(draft.folder, draft.name)
        loading.check_tokenizers(tokenizer, fetcher.tokenizer(draft), target.name, draft.name)
        models.append(draft)
    head = wanted.head
    if head is not None:
        head = replace(head, folder=fetcher.folder(head))
        config = head_formats.read_head_config(head.folder, target_config, name=head.name)
        head_formats.check_head(config, target_config, head.name, target.name)
        head = replace(head, config=config)
    return models, tokenizer, head


def _load_weights(
    models: list[ModelToLoad], placement: Placement | None, device: torch.device, fetcher: _Fetcher
) -> tuple[Any, Any | None]:
    """The target (split over GPUs when `placement` says so, else whole on `device`), then the drafter
    (beside the target's LM head when split)."""

    def weights(model: ModelToLoad, **where: Any) -> Any:
        return _model_weights(model, device, fetcher, **where)

    split = placement.max_memory if placement is not None else None  # None: whole on `device`
    target_model = weights(models[0], device=device, max_memory=split)
    if len(models) == 1:
        return target_model, None
    draft_device = device if placement is None else plan.draft_device(target_model, placement)
    return target_model, weights(models[1], device=draft_device)


def _model_weights(model: ModelToLoad, planned: torch.device, fetcher: _Fetcher, /, **where: Any) -> Any:
    """One model's weights (fetched now if they were not), at the dtype `model` resolves to on the
    `planned` device; `where`: load_model's device and max_memory."""
    return loading.load_model(
        fetcher.folder(model, weights=True),
        dtype=plan.dtype_for(model, planned, fetcher.trust_remote_code),
        quant=model.quant,
        allow_pickle=fetcher.allow_pickle,
        trust_remote_code=fetcher.trust_remote_code,
        name=model.name,
        **where,
    )


def _load_head(head: ModelToLoad, target_model: Any, fetcher: _Fetcher) -> EagleHead:
    """The EAGLE head's weights, beside the target's LM head, in the LM head's dtype unless asked."""
    lm_head = target_model.get_output_embeddings()
    device = CachedLM(target_model).output_device
    dtype = lm_head.weight.dtype if head.dtype == "auto" else loading.resolve_dtype(head.dtype, device)
    return head_formats.load_head(
        fetcher.folder(head, weights=True),
        target_model.config,
        allow_pickle=fetcher.allow_pickle,
        dtype=dtype,
        device=device,
        name=head.name,
    )


@dataclass(frozen=True)
class _Later:
    """What a pair's preset names for a strategy the pair was loaded without (its drafter, its EAGLE
    head), loaded on first use with `load`'s own fetcher, progress bars and checks: configs and tokenizer
    first, then the memory check against what the device has left, then the weights beside the target's
    LM head (where the planner puts a drafter or head)."""

    spec: Preset
    target: ModelToLoad  # with its folder
    fetcher: _Fetcher
    dtype: str | None  # load's dtype argument (None: the preset's)
    progress: bool

    def load_drafter(self, pair: Pair) -> bool:
        """Load the preset's drafter into `pair`; False when the preset names none."""
        named = self.spec.draft if self.spec.strategy != "eagle" else None  # an eagle preset's is a head
        if named is None:
            return False
        model = ModelToLoad(named.model, dtype=self.dtype or named.dtype, quant=named.quantization)
        device = CachedLM(pair.target_model).output_device
        with _progress_bars(self.progress, hub=self.fetcher.download_bars is None):
            model = replace(model, folder=self.fetcher.folder(model))
            head_formats.refuse_head_as_model(model.folder, model.name)
            tokenizer = self.fetcher.tokenizer(model)
            loading.check_tokenizers(pair.tokenizer, tokenizer, pair.target_name, model.name)
            needs = plan.estimate_needs([model], device, self.fetcher.trust_remote_code)
            plan.check_addition(needs or [], device, "specli.load(..., strategy='draft')")
            pair.attach_drafter(_model_weights(model, device, self.fetcher, device=device), model.name)
        return True

    def load_head(self, pair: Pair) -> bool:
        """Load the preset's EAGLE head into `pair`; False when the preset names none."""
        named = self.spec.eagle_head
        if named is None:
            return False
        head = ModelToLoad(named.model, dtype=self.dtype or named.dtype)
        device = CachedLM(pair.target_model).output_device
        trust = self.fetcher.trust_remote_code
        with _progress_bars(self.progress, hub=self.fetcher.download_bars is None):
            head = replace(head, folder=self.fetcher.folder(head))
            target_config = loading.read_config(self.target.folder) or {}
            config = head_formats.read_head_config(head.folder, target_config, name=head.name)
            head_formats.check_head(config, target_config, head.name, pair.target_name)
            head = replace(head, config=config)
            need = plan.head_need(head, self.target, device, trust)
            plan.check_addition([need], device, "specli.load(..., strategy='eagle')")
            pair.head, pair.head_name = _load_head(head, pair.target_model, self.fetcher), head.name
        return True
