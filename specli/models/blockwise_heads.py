"""Blockwise parallel decoding heads (Stern et al. 2018) in Medusa's form (Cai et al. 2024): k heads, each
a residual block into the target's own LM head, all reading the target's last hidden state.

Head i (1-based) reads h_t, the target's final hidden state at the position t that produced the pending
token x_{t+1}, and predicts x_{t+1+i}: `lm_head(h_t + SiLU(W_i h_t + b_i))`. transformers'
`output_hidden_states[L]` (L = the target's depth) is the final *normed* state for Llama, Mistral and
Qwen2 (their LM head applied to it gives the logits), so the heads go straight into the LM head. W_i
starts at zero: an untrained head is the LM head itself (it repeats the pending token's prediction).

Sequential heads (Hydra's form, Ankner et al. 2024: "sequentially dependent draft heads") also read the
token before the one they draft: head i's state is s_i = s_{i-1} + SiLU(W_i [s_{i-1}; e(y_{i-1})] + b_i),
s_0 = h_t, y_0 = the pending token, y_i = head i's draft, e the target's input embedding RMS-normalised
(no weight). Still no forward of any model: one small block per drafted token. A Medusa head drafts x_{t+2}
without knowing x_{t+1}; a sequential head knows it, which is most of what EAGLE's first draft knows.

A folder of heads: config.json `{"specli_heads": {"num_heads": K, "hidden_size": H, "target": "...",
"sequential": false, "intermediate": 0}}` and model.safetensors with `heads.{i}.linear.weight` [H, H]
([H, 2H] sequential) and `heads.{i}.linear.bias` [H] (i = 0..K-1). With an intermediate width I > 0 a
block is x + down(SiLU(up(inputs))) instead: `heads.{i}.up.*` [I, H or 2H] and `heads.{i}.down.*` [H, I]
(down starts at zero, so a fresh block is still the identity). With `"draft_vocab": N` the file also
holds `vocab` [N] (int64): the target ids the heads draft over, the training data's N most frequent
(each head then projects through N rows of the LM head instead of V: on a CPU a row of SmolLM2's
49,152 x 576 head costs about a third of a llama.cpp step, of Gemma 3's 262,144 x 640 two steps; a
token outside gets q = 0, which verification allows). `read_config` / `check_fits` /
`load_heads` read and check one (the config first, so a folder for another target is refused before its
weights are opened); `save_heads` writes one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from specli.errors import ModelLoadError, UsageError

KEY = "specli_heads"  # config.json's key that marks a folder of blockwise heads
WEIGHTS = "model.safetensors"
STORED_DTYPE = torch.bfloat16  # how save_heads writes the weights (load_heads casts to the run's)


@dataclass(frozen=True)
class HeadsConfig:
    """K heads over hidden size H, trained for `target` (a name, may be empty). `parallel` and `extra`
    speak the EAGLE head config's words where the pair reads them: all K drafts come from one pass, and
    the heads were made for K drafts a round (`speculative_tokens`)."""

    num_heads: int
    hidden_size: int
    target: str = ""
    sequential: bool = False  # each head also reads the token before its own (Hydra's form)
    intermediate: int = 0  # > 0: each block is an MLP of this width (0: one Linear, Medusa's block)
    draft_vocab: int = 0  # > 0: they draft over these many tokens (`BlockwiseHeads.vocab`; 0: every token)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    parallel = True
    kind = "heads"
    label = "heads"

    def __post_init__(self) -> None:
        if self.num_heads < 1 or self.hidden_size < 1 or self.intermediate < 0 or self.draft_vocab < 0:
            raise ValueError(f"heads need num_heads >= 1 and hidden_size >= 1, not {self}")
        self.extra.setdefault("speculative_tokens", self.num_heads)
        if self.target:
            self.extra.setdefault("verifier", self.target)

    def to_dict(self) -> dict[str, Any]:
        """The config.json of a heads folder."""
        body = {"num_heads": self.num_heads, "hidden_size": self.hidden_size, "target": self.target}
        body = {**body, "sequential": self.sequential, "intermediate": self.intermediate}
        return {KEY: {**body, "draft_vocab": self.draft_vocab} if self.draft_vocab else body}

    @property
    def form(self) -> str:
        """'sequential' (Hydra's heads) or 'medusa'."""
        return "sequential" if self.sequential else "medusa"


class ResBlock(nn.Module):
    """x + SiLU(Linear(x)) (Medusa's block), or with an intermediate width x + down(SiLU(up(x))); the
    Linear (down) starts at zero, so a fresh block is the identity."""

    def __init__(self, hidden: int, inputs: int | None = None, intermediate: int = 0) -> None:
        super().__init__()
        if intermediate:
            self.up = nn.Linear(inputs or hidden, intermediate)
            self.down = nn.Linear(intermediate, hidden)
            last = self.down
        else:
            self.linear = nn.Linear(inputs or hidden, hidden)
            last = self.linear
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.intermediate = intermediate

    def forward(self, x: torch.Tensor, token: torch.Tensor | None = None) -> torch.Tensor:
        """x [..., H] (token [..., H]: a sequential block's embedding of the token before) -> [..., H]."""
        inputs = x if token is None else torch.cat([x, token], -1)
        if self.intermediate:
            return x + self.down(nn.functional.silu(self.up(inputs)))
        return x + nn.functional.silu(self.linear(inputs))


class BlockwiseHeads(nn.Module):
    """K ResBlocks; `states` maps the target's final hidden states to each head's input of the LM head."""

    def __init__(self, config: HeadsConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        inputs = 2 * h if config.sequential else h
        self.heads = nn.ModuleList(ResBlock(h, inputs, config.intermediate) for _ in range(config.num_heads))
        if config.draft_vocab:  # the target's ids they draft over, ascending [N]
            self.register_buffer("vocab", torch.zeros(config.draft_vocab, dtype=torch.long))
        else:
            self.vocab: torch.Tensor | None = None

    def states(self, hidden: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """hidden [..., H] -> [K, ..., H]: head i's state for each position (i = 0..K-1). Sequential heads
        also take tokens [K, ..., H]: the embeddings (`token_inputs`) of the tokens y_0..y_{K-1} that
        heads 1..K read (teacher forcing: the true ones). Inputs are cast to the heads' dtype."""
        hidden = hidden.to(self._weight.dtype)
        if not self.config.sequential:
            return torch.stack([head(hidden) for head in self.heads])
        if tokens is None:
            raise ValueError("sequential heads need the embeddings of the tokens they read")
        out, state = [], hidden
        for head, token in zip(self.heads, tokens.to(hidden.dtype), strict=False):
            state = head(state, token)
            out.append(state)
        return torch.stack(out)

    def step(self, i: int, state: torch.Tensor, token: torch.Tensor | None = None) -> torch.Tensor:
        """Head i's (0-based) state from the state before it ([..., H]: h for head 0, else head i-1's
        state; for Medusa heads always h) and, sequential, the embedding of the token before its own."""
        weight = self._weight
        return self.heads[i](state.to(weight.dtype), None if token is None else token.to(weight.dtype))

    def logits(self, hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """hidden [..., H] -> [K, ..., V]: head i's logits for the token i + 1 places after the next (the
        states cast to the LM head's dtype)."""
        return lm_head(self.states(hidden).to(lm_head.weight.dtype))

    @property
    def device(self) -> torch.device:
        return self._weight.device

    @property
    def _weight(self) -> torch.Tensor:
        """A weight of the heads (their dtype and device), without walking the module tree."""
        first = self.heads[0]
        return (first.up if first.intermediate else first.linear).weight


def token_inputs(embeddings: torch.Tensor) -> torch.Tensor:
    """The target's input embeddings of tokens [..., H] -> what a sequential head reads of them: RMS
    normalised without a weight (so every architecture's embedding scale reads alike)."""
    return nn.functional.rms_norm(embeddings.float(), (embeddings.shape[-1],), eps=1e-6)


def is_heads(data: Mapping[str, Any]) -> bool:
    """Whether a config.json (as a dict) is a folder of blockwise heads."""
    return isinstance(data.get(KEY), Mapping)


def config_from_dict(data: Mapping[str, Any], name: str) -> HeadsConfig:
    """A heads folder's config.json -> HeadsConfig (ModelLoadError when its numbers are missing)."""
    body = data.get(KEY) or {}
    try:
        sequential = body.get("sequential", False)
        if not isinstance(sequential, bool):
            raise TypeError(f"sequential must be true or false, not {sequential!r}")
        return HeadsConfig(
            int(body["num_heads"]),
            int(body["hidden_size"]),
            str(body.get("target") or ""),
            sequential,
            int(body.get("intermediate") or 0),
            int(body.get("draft_vocab") or 0),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ModelLoadError(
            f"the heads '{name}': config.json's '{KEY}' needs integer num_heads and hidden_size (and "
            f"intermediate), and sequential true or false ({err})"
        ) from None


def read_config(folder: Path | str, name: str | None = None) -> HeadsConfig:
    """config.json of a heads folder -> HeadsConfig."""
    label = name or str(folder)
    try:
        data = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"could not read the config.json of the heads '{label}': {err}") from err
    if not isinstance(data, dict) or not is_heads(data):
        raise ModelLoadError(f"'{label}' is not a folder of blockwise heads (its config.json has no '{KEY}')")
    return config_from_dict(data, label)


def check_fits(config: HeadsConfig, target_hidden: int | None, name: str, target: str) -> None:
    """UsageError, one line, when the heads' hidden size is not the target's (they feed its LM head)."""
    if target_hidden is not None and config.hidden_size != target_hidden:
        trained = f" (trained for '{config.target}')" if config.target else ""
        raise UsageError(
            f"the heads '{name}' have hidden size {config.hidden_size}{trained} but {target} has "
            f"{target_hidden}: train heads for this target with `specli train heads`."
        )


def _expected(config: HeadsConfig) -> dict[str, tuple[int, ...]]:
    h = config.hidden_size
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(config.num_heads):
        inputs = 2 * h if config.sequential else h
        layers = [("up", config.intermediate, inputs), ("down", h, config.intermediate)]
        for name, rows, columns in layers if config.intermediate else [("linear", h, inputs)]:
            shapes[f"heads.{i}.{name}.weight"] = (rows, columns)
            shapes[f"heads.{i}.{name}.bias"] = (rows,)
    if config.draft_vocab:
        shapes["vocab"] = (config.draft_vocab,)
    return shapes


def parameter_bytes(config: HeadsConfig, dtype: torch.dtype) -> int:
    """Bytes the heads' weights take in dtype (for the memory planner)."""
    size = torch.tensor([], dtype=dtype).element_size()
    weights = sum(math.prod(shape) for key, shape in _expected(config).items() if key != "vocab")
    return weights * size + config.draft_vocab * 8


def load_heads(
    folder: Path | str,
    config: HeadsConfig | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    name: str | None = None,
) -> BlockwiseHeads:
    """A heads folder -> BlockwiseHeads in eval mode, in dtype on device; names and shapes are checked
    from the safetensors header before a tensor is read."""
    from safetensors import safe_open

    label = name or str(folder)
    config = config or read_config(folder, label)
    path = Path(folder) / WEIGHTS
    expected = _expected(config)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            found = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118
            if found != expected:
                wrong = sorted(set(found.items()) ^ set(expected.items()))[:3]
                raise ModelLoadError(
                    f"the weights of the heads '{label}' do not match their config.json (e.g. {wrong})"
                )
            state = {key: f.get_tensor(key) for key in expected}
    except FileNotFoundError:
        raise ModelLoadError(f"the heads '{label}' have no {WEIGHTS}") from None
    except ModelLoadError:
        raise
    except Exception as err:  # a truncated or corrupt header
        raise ModelLoadError(f"could not read the weights of the heads '{label}': {err}") from err
    heads = BlockwiseHeads(config)
    heads.load_state_dict(state)
    return heads.to(device=device, dtype=dtype).eval()


def save_heads(
    heads: BlockwiseHeads, folder: Path | str, target: str | None = None, vocab: torch.Tensor | None = None
) -> Path:
    """config.json + model.safetensors (bfloat16 weights; the draft vocabulary as int64) into folder;
    returns it. `target`: the name the heads were trained for (default: the config's); `vocab`: the
    target ids [N] they draft over, ascending (default: the heads' own, if any)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {key: t.detach().to(STORED_DTYPE).contiguous() for key, t in heads.state_dict().items()}
    state.pop("vocab", None)
    vocab = heads.vocab if vocab is None else vocab
    if vocab is not None:
        state["vocab"] = vocab.detach().to(device="cpu", dtype=torch.long).contiguous()
    save_file(state, str(folder / WEIGHTS), metadata={"format": "pt"})
    config = replace(heads.config, draft_vocab=0 if vocab is None else int(vocab.numel()))
    data = replace(config, target=target or config.target).to_dict()
    (folder / "config.json").write_text(json.dumps({**data, "torch_dtype": "bfloat16"}, indent=2) + "\n")
    return folder
