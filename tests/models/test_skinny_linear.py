"""The torch engine's linear layers for forwards of a few tokens on a CPU (specli/models/skinny_linear.py):
the same products as F.linear, taken only inside specli's own forwards of 2..MAX_ROWS tokens."""

from __future__ import annotations

import torch
from conftest import make_model

from specli.models.cached_lm import CachedLM
from specli.models.skinny_linear import MAX_ROWS, MIN_ROWS, SkinnyLinears, skinny_linears


def test_the_products_are_f_linears_and_only_inside_the_switch(monkeypatch):
    """Catches a transposed or misshaped product (the logits move), the path taken outside 2..MAX_ROWS
    tokens (a one-token step would no longer round as generate()'s does: bit for bit against F.linear),
    and the switch left on after a forward (a later transformers call would take the path)."""
    model = make_model("llama", 64, layers=2, seed=3)
    lm = CachedLM(model)
    switch = lm._skinny
    assert isinstance(switch, SkinnyLinears) and skinny_linears(model, compile=False) is switch  # one a model
    prefix = torch.arange(20) % 60 + 1
    real = torch.nn.functional.linear

    def logits(ids: torch.Tensor, skinny: SkinnyLinears | None) -> tuple[torch.Tensor, int]:
        """The forward of ids after the prefix -> (logits [n, V], F.linear calls it made)."""
        lm._skinny = skinny
        cache = lm.new_cache()
        lm.forward(prefix, cache, last_only=True)
        calls = []
        monkeypatch.setattr(torch.nn.functional, "linear", lambda *a, **kw: calls.append(1) or real(*a, **kw))
        out = lm.forward(ids, cache)
        monkeypatch.setattr(torch.nn.functional, "linear", real)
        return out, len(calls)

    for n in (1, MIN_ROWS, 5, MAX_ROWS, MAX_ROWS + 1):
        ids = torch.arange(n) % 50 + 3
        ours, linear_calls = logits(ids, switch)
        assert not switch.on
        reference, every_layer = logits(ids, None)  # F.linear throughout
        assert every_layer > 0
        if MIN_ROWS <= n <= MAX_ROWS:
            assert torch.allclose(ours, reference, atol=1e-4) and linear_calls == 0, n
        else:
            assert torch.equal(ours, reference) and linear_calls == every_layer, n
    with switch.rows(3):
        assert switch.on
    assert not switch.on


def test_only_a_cpu_float32_model_gets_the_switch_and_only_its_own_linears():
    model = make_model("llama", 64, layers=1, seed=4)
    assert skinny_linears(model, compile=True) is None
    assert skinny_linears(model.to(torch.bfloat16), compile=False) is None

    class Quantized(torch.nn.Linear):  # a subclass (bitsandbytes' layers are) keeps its own forward
        pass

    holder = torch.nn.Sequential(torch.nn.Linear(4, 4), Quantized(4, 4))
    SkinnyLinears(holder)
    assert "forward" in vars(holder[0]) and "forward" not in vars(holder[1])
