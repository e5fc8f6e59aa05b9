"""Linear layers for forwards of a few tokens on a CPU (float32): the weight streamed once as the left
operand of one matrix product, W @ x^T, instead of torch's F.linear, x @ W^T.

Measured here (torch 2.13 CPU, MKL, 2 threads, AMD EPYC Zen 5): F.linear on 2-4 rows costs 1.7-3 times
its one-row matrix-vector product (SmolLM2's 49,152 x 576 LM head: 6.5 ms on 1 row, 14.2 / 19.9 / 10.8 ms
on 2 / 3 / 4), while W @ x^T on the same rows takes 3.0 / 2.9 / 2.6 ms. Whole forwards after 300 cached
tokens (the best of 6, both ways interleaved): SmolLM2-135M 2 / 5 / 9 tokens 33.9 / 40.3 /
59.1 ms against 61.3 / 51.8 / 63.9 (a one-token step about 34); Gemma 3 270M 42.5 / 56.7 / 89.5 against
122.0 / 111.3 / 132.1 (a step about 65). From 12 to 33 tokens either way won by up to 10 % depending on
the size (MKL's blocking), so MAX_ROWS is 9.

`SkinnyLinears(model)` gives each of the model's own `nn.Linear` modules (not subclasses: quantized
layers keep theirs) a forward that takes this path while the switch is on, and F.linear otherwise. The
torch engine's `CachedLM` turns it on around its own forwards of MIN_ROWS..MAX_ROWS tokens only: a
one-token step stays F.linear's matrix-vector product, the one transformers' generate() runs, so plain
decoding stays bit for bit the target's own; transformers' runs on the same model (bench --compare-hf)
never see the switch on. A verify forward's rows round as a batch does either way (neither is a step's
rounding): the greedy identity and distribution tests hold them to the target's own output.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch
from torch import nn

MIN_ROWS = 2
MAX_ROWS = 9  # past this F.linear's own blocking is about as fast (module docstring)
SWITCH = "_specli_skinny_linears"  # the model's attribute holding its switch


class SkinnyLinears:
    """The switch over one model's linear layers (module docstring)."""

    def __init__(self, model: nn.Module) -> None:
        self.on = False
        for module in model.modules():
            if type(module) is nn.Linear:
                module.forward = partial(self._forward, module)  # an instance attribute: this model only

    def _forward(self, module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if not self.on:
            return nn.functional.linear(x, module.weight, module.bias)
        flat = x.reshape(-1, x.shape[-1])  # [rows, in]
        out = (module.weight @ flat.T).T  # [rows, out]: the weight is the product's left operand
        if module.bias is not None:
            out = out + module.bias
        return out.reshape(*x.shape[:-1], module.weight.shape[0])

    @contextmanager
    def rows(self, n: int) -> Iterator[None]:
        """On for a forward of n tokens when MIN_ROWS <= n <= MAX_ROWS."""
        self.on = MIN_ROWS <= n <= MAX_ROWS
        try:
            yield
        finally:
            self.on = False


def skinny_linears(model: nn.Module, compile: bool) -> SkinnyLinears | None:
    """The switch for a model whose forwards run on a CPU in float32 and are not compiled (where it was
    measured; CUDA's and bfloat16's kernels are other stories), else None."""
    if compile or model.device.type != "cpu" or model.dtype != torch.float32:
        return None
    switch = getattr(model, SWITCH, None)  # one per model: two wrappers of one model share it
    if switch is None:
        switch = SkinnyLinears(model)
        setattr(model, SWITCH, switch)
    return switch
