"""A loaded pair: `Pair` (a target, its drafter or EAGLE head, generation defaults), what one generation
returns (`Result`, `GenerationStats`), and the checks only the loaded models can make. `specli.load`
(specli/api.py) builds one; `Pair.generate` / `Pair.stream` run the engine over it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol

from specli.drafters.context import DraftContext, build_drafter
from specli.drafters.draft_model import parallel_draft_tokens
from specli.engine.draft_length import DraftLength
from specli.engine.drafter import Drafter
from specli.engine.events import Round, Stats
from specli.engine.loop import EngineConfig, generate_rounds, new_draft_length
from specli.engine.stopping import StopCriteria
from specli.errors import UsageError
from specli.models import engines, loading
from specli.models.blockwise_heads import BlockwiseHeads
from specli.models.cached_lm import CachedLM, synchronize
from specli.models.eagle_head import EagleHead
from specli.models.layer_stack import check_layer_stack
from specli.models.llama_cpp.lm import LlamaLM, LlamaModel
from specli.models.own_forward.decoder import LeanDecoder
from specli.models.own_forward.head import LeanHead
from specli.models.placement import Placement
from specli.models.sources import trained_parallel_k
from specli.models.static_cache import STATIC_DEFAULT_LENGTH, static_cache_problem
from specli.presets import GenerationSpec, SpeculationSpec
from specli.settings import (
    ModelContext,
    Settings,
    SettingsChange,
    check_fits,
    check_strategy,
    default_exit_layer,
    settings_from,
)
from specli.strategies import Model, Strategy, check_compile, entry
from specli.text import IncrementalDecoder


class LoadsLater(Protocol):
    """What `specli.load` leaves on a pair (`Pair.later`): `load(pair, model)` loads the drafter model or
    EAGLE head the pair's preset names, the first time a generation asks for a strategy that drafts with
    it, and hands it to `Pair.attach`; False when the preset names none."""

    def load(self, pair: Pair, model: Model) -> bool: ...


# A strategy's weights a pair lacks: what they are, and the load that gives them.
_MISSING = MappingProxyType(
    {
        Model.DRAFT: ("a drafter model", "Load the pair with specli.load(..., draft=MODEL)."),
        Model.HEAD: (
            "an EAGLE head",
            "Load the pair with specli.load(..., strategy='{strategy}', draft=HEAD) (a folder, hub id or "
            "embedded:NAME).",
        ),
        Model.HEADS: (
            "blockwise heads",
            "Load the pair with specli.load(..., strategy='{strategy}', draft=FOLDER) (heads from `specli "
            "train heads`).",
        ),
    }
)


@dataclass
class GenerationStats(Stats):
    """One generation's `Stats` with the settings it ran under: `Result.stats`, and `generate --json`'s
    "stats" (`to_dict`: the same keys either way). strategy, num_draft_tokens (the most a round drafts),
    fixed_k, draft_p_min, tree and tree_width (token trees: nodes a round, 0 for a chain) as resolved;
    mean_k: drafted tokens per round; compile_time: seconds spent compiling before the rounds (None
    without compile); interrupted: Ctrl-C ended it (the CLI; its stop_reason is then "interrupted");
    notes: what the run did not show (specli.notes)."""

    strategy: str = ""
    engine: str = "torch"
    num_draft_tokens: int = 0
    fixed_k: bool = False
    draft_p_min: float = 0.0
    tree: int = 0
    tree_width: int = 2
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
            engine=pair.engine,
            num_draft_tokens=settings.num_draft_tokens,
            fixed_k=settings.fixed_k,
            draft_p_min=settings.draft_p_min,
            tree=settings.tree,
            tree_width=settings.tree_width,
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
            engine=self.engine,
            num_draft_tokens=self.num_draft_tokens,
            fixed_k=self.fixed_k,
            draft_p_min=self.draft_p_min,
            tree=self.tree,
            tree_width=self.tree_width,
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
        strategy: str = Strategy.DRAFT,
        target_name: str = "target",
        draft_name: str | None = None,
        generation: GenerationSpec | None = None,
        speculation: SpeculationSpec | None = None,
        placement: Placement | None = None,
        head: EagleHead | None = None,
        head_name: str | None = None,
        heads: BlockwiseHeads | None = None,
        heads_name: str | None = None,
        compile: bool = False,
        lean: bool = True,
    ) -> None:
        self.strategy = check_strategy(strategy)
        own = entry(self.strategy)
        if own.model == Model.DRAFT and draft_model is None:
            raise UsageError(
                f"strategy '{self.strategy}' needs a drafter model.",
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
        self.heads = heads  # blockwise heads (strategy heads), beside it too
        self.heads_name = heads_name
        self.compile = compile  # static caches + torch.compile (docs/design.md §12)
        self.later: LoadsLater | None = None  # set by `load`: the preset's drafter or head, on first use
        self.lean = lean  # drafters step through specli's own forwards where they can (docs/design.md §13)
        self._lean_steps: dict[int, tuple[Any, str | None]] = {}  # id(model or head) -> (lean step, why not)
        # settings -> each round's k and tree against chain, learned across generations (`_draft_length`)
        self._draft_lengths: dict[tuple[Any, ...], DraftLength] = {}
        if compile:
            check_compile(self.strategy)
        if own.target_layers:
            check_layer_stack(target_model, self.strategy)
        self.num_layers = _stack_layers(target_model)  # None: no strategy can draft with its own layers
        self.eos_ids = loading.eos_token_ids(target_model, tokenizer)
        self.max_positions = loading.model_max_positions(target_model)
        self.draft_max_positions = loading.model_max_positions(draft_model) if draft_model else None
        self.target = _cached_lm(target_model, target_name, self.max_positions, compile)
        self.engine = self.target.engine  # "torch" or "llama.cpp"
        engines.check_strategies([self.strategy], self.engine)
        if self.engine == engines.LLAMA and compile:
            raise UsageError("--compile is for the torch engine.", "Drop it, or use --engine torch.")
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
        if self.heads_name is not None:
            parts.append(f"heads={self.heads_name!r}")
        parts.append(f"strategy={self.strategy!r}")
        if self.engine != engines.TORCH:
            parts.append(f"engine={self.engine!r}")
        parts.append(f"device={self.target.device}")
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
    def settings(self, change: SettingsChange | None = None, /, **fields: Any) -> Settings:
        """The pair's settings (its preset's, its strategy) with `change` and `fields` on top (None =
        unset), checked against the loaded models; exit_layer defaults to a quarter of the target's depth."""
        change = (change or SettingsChange()).merged(**fields)
        settings = settings_from(self.generation, self.speculation, self.strategy, change, self.engine)
        return self._checked(self._own_k_fitted(settings, change))

    def _own_k_fitted(self, settings: Settings, change: SettingsChange) -> Settings:
        """A strategy's own k (lookup's, named by neither the call nor the preset) cut to what the
        target's context verifies (context - 2): a default never stops a generation; a k someone named
        that does not fit is a UsageError (`check_fits`)."""
        own = entry(settings.strategy).own_k(self.engine)
        named = {*change.given(), *self.speculation.model_fields_set}
        if own is None or "num_draft_tokens" in named or self.max_positions is None:
            return settings
        if own <= self.max_positions - 2:
            return settings
        return settings.replace(num_draft_tokens=max(1, self.max_positions - 2))

    def _checked(self, settings: Settings) -> Settings:
        """What only the loaded models can tell: the weights the strategy drafts with (the strategy
        table's `model`); for one drafting with the target's own layers ('self'), a supported target and
        an exit layer inside it. Fills exit_layer whenever the target can self-speculate."""
        engines.check_strategies([settings.strategy], self.engine)  # what the engine table refuses
        engines.check_tree(settings.tree if entry(settings.strategy).drafts else 0, self.engine)
        self._load_missing(settings.strategy)
        if self.compile:
            check_compile(settings.strategy)
        layers = self.num_layers
        if settings.exit_layer is None and layers is not None:
            settings = settings.replace(exit_layer=default_exit_layer(layers))
        if entry(settings.strategy).target_layers and layers is None:
            check_layer_stack(self.target_model, settings.strategy)  # raises, naming the architecture
        check_fits(
            settings,
            ModelContext(self.target_name, self.max_positions, layers),
            ModelContext(self.draft_name, self.draft_max_positions) if self.draft_name else None,
        )
        return settings

    def _load_missing(self, strategy: str) -> None:
        """The weights `strategy` drafts with (a drafter model, an EAGLE head) when the pair lacks them:
        loaded now, once, when the pair's preset names them (`later`, which hands them to `attach`); else
        UsageError naming the load that gives them."""
        model = entry(strategy).model
        if model is None or self._weights(model) is not None:
            return
        if self.later is not None and self.later.load(self, model):
            return
        what, hint = _MISSING[model]
        raise UsageError(
            f"strategy '{strategy}' needs {what}, and this pair's preset names none.",
            hint.format(strategy=strategy),
        )

    def _weights(self, model: Model | None) -> Any | None:
        """The pair's drafter model, EAGLE head or blockwise heads (None when it has none, or for model
        None)."""
        if model == Model.DRAFT:
            return self.draft_model
        if model == Model.HEAD:
            return self.head
        if model == Model.HEADS:
            return self.heads
        return None

    def attach(
        self, name: str, *, draft_model: Any = None, head: EagleHead | BlockwiseHeads | None = None
    ) -> None:
        """Add a drafter model, an EAGLE head or blockwise heads (exactly one; it replaces the pair's own of
        that kind) to the loaded pair: strategy 'draft', 'eagle' or 'heads' then runs with it. The caller
        loaded and checked it as `load` does (its tokenizer, the head's shapes, the memory); `attach` only
        wires it in."""
        if (draft_model is None) == (head is None):
            raise TypeError("attach takes exactly one of draft_model and head")
        strategy = Strategy.EAGLE if head is not None else Strategy.DRAFT
        if isinstance(head, BlockwiseHeads):
            strategy = Strategy.HEADS
        self._draft_lengths = {key: n for key, n in self._draft_lengths.items() if key[0] != strategy}
        if isinstance(head, BlockwiseHeads):
            self.heads, self.heads_name = head, name
            return
        if head is not None:  # what was learned of the replaced drafter's acceptance goes with it
            self._lean_steps.pop(id(self.head), None)  # a step built for the head it replaces
            self.head, self.head_name = head, name
            return
        self._lean_steps.pop(id(self.draft_model), None)
        self.draft_model, self.draft_name = draft_model, name
        self.draft_max_positions = loading.model_max_positions(draft_model)
        self.draft = _cached_lm(draft_model, name, self.draft_max_positions, self.compile)

    def _resolve(self, settings: Settings | None, fields: dict[str, Any]) -> Settings:
        """`settings` (default: the pair's own) with the keyword `fields` of a call (None = unset) on top,
        checked for this pair."""
        change = SettingsChange().merged(**fields)
        if settings is None:
            return self.settings(change)
        given = change.given()
        return self._checked(settings.replace(**given) if given else settings)

    def _drafter(self, settings: Settings, length: int) -> Drafter | None:
        """The strategy's drafter for a generation that can reach `length` tokens, built by its file in
        the strategy table (None: plain decoding)."""
        context = DraftContext(
            settings=settings,
            target=self.target,
            target_model=self.target_model,
            target_name=self.target_name,
            draft=self.draft,
            draft_model=self.draft_model,
            draft_name=self.draft_name,
            draft_max_positions=self.draft_max_positions,
            head=self.head,
            head_name=self.head_name,
            heads=self.heads,
            heads_name=self.heads_name,
            lean_step=self.lean_step,
        )
        drafter = build_drafter(entry(settings.strategy), context, length)
        if drafter is not None and drafter.tree_size:
            window = self.target.sliding_window
            if window is not None and length + drafter.tree_size >= window:
                raise UsageError(
                    f"the target has sliding-window attention (window {window}) and this generation can "
                    f"reach {length} tokens; token trees need the whole context in view.",
                    "Drop --tree, or keep prompt + max-new-tokens under the window.",
                )
        return drafter

    def forget_prompts(self) -> None:
        """Drop what the models' caches kept of earlier generations for reuse (the llama.cpp engine keeps
        the last prompt's cells, as llama-server's prompt cache does): the next generation prefills its
        whole prompt. Bench calls it before every run, so each run pays its own prefill."""
        for lm in (self.target, self.draft):
            if lm is not None:
                lm.forget()

    def describe_engine(self) -> str:
        """The engine and what it runs, for a header line: "torch", or "llama.cpp (FILE.gguf, Q4_1, 94 MiB, 2
        threads)", with ", flash attention" where the probe turned it on, the Q8_0 kernel switch once chosen
        (`LlamaLM.q8_rows`) and the row rule when the file needs one ("; single tokens padded to 2 rows")."""
        if self.engine != engines.LLAMA:
            return self.engine
        import torch

        model = self.target_model
        size = f"{model.file_size / 2**20:.0f} MiB"
        threads = torch.get_num_threads()
        rule = "" if self.target.rule.costs_nothing else f"; {self.target.rule.describe()}"
        cores = f"{threads} thread" + ("s" if threads != 1 else "")
        attention = ", flash attention" if self.target.rule.flash else ""
        rows = self.target.q8_rows  # chosen once the verify costs were timed (or read)
        kernels = attention + (f", Q8_0 through sgemm from {rows} rows" if rows is not None else "")
        return f"{self.engine} ({model.path.name}, {self.weights_dtype}, {size}, {cores}{kernels}{rule})"

    @property
    def weights_dtype(self) -> str:
        """What the target's weights are stored as: a torch dtype, or the GGUF's type (llama.cpp)."""
        if self.engine == engines.LLAMA:  # llama.cpp's "ARCH SIZE TYPE", e.g. "gemma3 270M Q4_K - Medium"
            return self.target_model.describe().split(" ", 2)[-1]
        return str(next(self.target_model.parameters()).dtype).replace("torch.", "")

    def lean_step(self, model: Any) -> tuple[LeanDecoder | LeanHead | None, str | None]:
        """(specli's lean forward of the draft model or EAGLE head, None), built once per model, or
        (None, why it steps through its own forward): lean off, or a model the lean forward does not
        reproduce. With --compile too the lean step drafts (measured faster than the compiled draft
        model on CPU); only the target's forwards are compiled then."""
        if not self.lean:
            return None, "lean steps are off"
        if isinstance(model, LlamaModel):
            return None, "llama.cpp evaluates it"
        if isinstance(model, BlockwiseHeads):
            return None, "blockwise heads run one pass of their blocks, no forward of their own"
        if id(model) not in self._lean_steps:  # a head is specli's own module: no probe needed
            built = (LeanHead(model), None) if isinstance(model, EagleHead) else LeanDecoder.build(model)
            self._lean_steps[id(model)] = built
        return self._lean_steps[id(model)]

    def drafter_step(self, strategy: str | None = None) -> str | None:
        """How `strategy`'s drafter steps (default: the pair's own): "lean" (specli's own forward),
        "compiled", or "transformers (why)" (the model's forward); None for strategies without a drafter
        model or head, and for blockwise heads (one pass of their blocks a round, no steps)."""
        kind = entry(strategy or self.strategy).model
        model = self._weights(kind)
        if model is None or isinstance(model, BlockwiseHeads):
            return None
        lean, why = self.lean_step(model)
        if lean is not None:
            return "lean"
        return "compiled" if self.compile and kind == Model.DRAFT else f"transformers ({why})"

    def parallel_draft_tokens(self, strategy: str | None = None) -> int | None:
        """The k `strategy`'s drafter (default: the pair's own) was made for when it drafts in parallel
        (PARD: its recorded K or 8; P-EAGLE: its speculators speculative_tokens or 8); None for an
        autoregressive one and for strategies without a drafter model or head."""
        kind = entry(strategy or self.strategy).model
        head = self._weights(kind) if kind is not None and kind.is_head else None
        if head is not None and head.config.parallel:
            return trained_parallel_k(head.config.extra.get("speculative_tokens"))
        if kind == Model.DRAFT and self.draft_model is not None:
            return parallel_draft_tokens(self.draft_model.config)
        return None

    @property
    def parallel(self) -> bool:
        """Whether the pair's own strategy drafts in parallel (a PARD drafter, a P-EAGLE head)."""
        return self.parallel_draft_tokens() is not None

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
        ngram_max, min_p, ignore_eos, tree, tree_width (None = unset). Bad values raise UsageError here,
        before the first round. Each call starts from fresh caches and drafter state. With sampling, a
        seed reproduces the output only with fixed_k: the per-round k follows measured speed. record_top
        > 0 fills each round's token_source (the top entries of the distribution its last token came
        from).
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
        length = self._draft_length(settings, drafter, config) if drafter is not None else None
        rounds = generate_rounds(self.target, drafter, ids, config, criteria, self.max_positions, length)
        return self._with_text(rounds)

    def _draft_length(self, settings: Settings, drafter: Drafter, config: EngineConfig) -> DraftLength:
        """The `DraftLength` generations under these drafting settings share: acceptance per position and
        state, round costs and tree against chain rounds carry over from one generation to the next, so
        a pair pays the cost model's warm-up once, not once per prompt. Settings that change acceptance
        or the round's shape (strategy, k, trees, sampling, n-grams, exit layer) each get their own;
        max_new_tokens, seed and stop strings do not matter. A seeded sampled generation starts its k
        from the priors (so the same seed gives the same tokens on every call)."""
        key = (
            settings.strategy,
            settings.tree,
            settings.tree_width,
            settings.num_draft_tokens,
            settings.greedy,
            settings.fixed_k,
            settings.temperature,
            settings.top_k,
            settings.top_p,
            settings.min_p,
            settings.draft_p_min,
            settings.ngram_min,
            settings.ngram_max,
            settings.exit_layer,
        )
        if key not in self._draft_lengths:
            self._draft_lengths[key] = new_draft_length(self.target, drafter, config)
        kept = self._draft_lengths[key]
        if settings.seed is not None and not settings.greedy:
            # a seeded sample is reproducible call after call: which tokens a seed draws depends on each
            # round's k, so its k starts from the priors every time (what trees are worth carries over)
            fresh = new_draft_length(self.target, drafter, config)
            fresh.share_trees(kept)
            return fresh
        return kept

    def _reserve(self, prompt_length: int, settings: Settings) -> None:
        """Static caches: room for everything this generation can hold (the prompt, max_new_tokens and a
        round's k + 1 verify positions, within each model's context), and compiled forwards up to k + 1
        tokens (a verify; a parallel draft). Dynamic caches need nothing."""
        k = settings.num_draft_tokens
        # a round's newest positions: k + 1 verified, a tree's N + 1, a drafter's tree width per depth
        block = max(k, settings.tree, settings.tree_width * k) if settings.tree else k
        wanted = prompt_length + settings.max_new_tokens + block + 1
        for lm, limit in ((self.target, self.max_positions), (self.draft, self.draft_max_positions)):
            if lm is None:
                continue
            lm.reserve(min(wanted, limit + block + 2) if limit else wanted)  # dynamic caches: a no-op
            if lm.static:
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
        verify = range(1, 2) if drafter is None else range(1, k + 2)
        ran = self.target.warm_up(verify, features=drafter is not None and bool(drafter.feature_layers))
        if drafter is not None and self.drafter_step(settings.strategy) == "compiled":  # not a lean step
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


def _cached_lm(model: Any, name: str, max_positions: int | None, compile: bool) -> CachedLM:
    """The model driven one forward at a time: over dynamic caches, or (compile) over one static cache
    of min(context + 1, STATIC_DEFAULT_LENGTH) positions to start, grown when a generation needs more,
    with compiled forwards. UsageError naming the model when it cannot have a static cache. A llama.cpp
    model: its `LlamaLM`."""
    if isinstance(model, LlamaModel):
        return LlamaLM(model)
    if not compile:
        return CachedLM(model)
    problem = static_cache_problem(model)
    if problem is not None:
        raise UsageError(f"--compile cannot run '{name}': {problem}.", "Run it without --compile.")
    length = min(max_positions + 1, STATIC_DEFAULT_LENGTH) if max_positions else STATIC_DEFAULT_LENGTH
    return CachedLM(model, static_length=length, compile=True)


def _stack_layers(model: Any) -> int | None:
    """The target's decoder layers when a strategy can draft with its first ones (layer_stack.py), else
    None."""
    try:
        check_layer_stack(model)
    except UsageError:
        return None
    return len(model.model.layers)
