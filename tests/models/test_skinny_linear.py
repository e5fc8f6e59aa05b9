"""The torch engine's linear layers for forwards of a few tokens on a CPU (specli/models/skinny_linear.py):
the same products as F.linear, taken only inside specli's own forwards of 2..MAX_ROWS tokens."""

from __future__ import annotations

import torch
from conftest import make_model

from specli.models.cached_lm import CachedLM
from specli.models.skinny_linear import CLEAR, MAX_ROWS, MIN_ROWS, TRIALS, SkinnyLinears, skinny_linears


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


def test_each_row_count_keeps_the_path_that_measured_faster():
    """Catches a path kept without trials, the slower one kept (a min/max mix-up), trials shared between
    row counts or thread counts (one size's verdict decides another's), a failed forward counted as a
    trial, trials that never end (the slower path taken forever, one forward in two), and a close call
    decided on one forward each (or a clear one run TRIALS times: a slow trial costs a forward)."""
    now = [0.0]
    close = 1.0 + (CLEAR - 1.0) / 2  # F.linear slower, but by less than CLEAR
    seconds = {(3, True): 0.010, (3, False): 0.030, (5, True): 0.050, (5, False): 0.020}
    seconds |= {(4, True): 0.010 * close, (4, False): 0.010, (6, True): 0.010, (6, False): 0.010 * close}
    switch = SkinnyLinears(torch.nn.Linear(2, 2), clock=lambda: now[0])

    def forward(n: int) -> bool:
        with switch.rows(n):
            now[0] += seconds[n, switch.on]
            return switch.on

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        taken = {n: [forward(n) for _ in range(2 * TRIALS + 4)] for n in (3, 4, 5, 6)}
        assert taken[3] == [True, False] + [True] * (2 * TRIALS + 2)  # clear: one of each, then this path
        assert taken[5] == [True, False] + [False] * (2 * TRIALS + 2)  # clear: F.linear from then on
        assert taken[4] == [True, False] * TRIALS + [False] * 4  # close: TRIALS of each, the faster stays
        assert taken[6] == [True, False] * TRIALS + [True] * 4
        assert not switch.takes(1) and not switch.takes(MAX_ROWS + 1)
        try:  # a forward that fails is not a trial
            with switch.rows(7):
                raise RuntimeError
        except RuntimeError:
            pass
        assert switch.takes(7) and not switch.on
        torch.set_num_threads(2)  # another thread count: its own trials
        assert forward(5) is True and forward(5) is False
    finally:
        torch.set_num_threads(threads)
