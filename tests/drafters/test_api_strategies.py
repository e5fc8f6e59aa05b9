"""A pair asked for a strategy it was not loaded with (issue 20 #18): what its preset names for that
strategy (an EAGLE head, a drafter) loads on first use, once, through load's own fetcher and memory
check; where the preset names nothing, the error says which `load(...)` call gives it. Embedded tiny
models, CPU, offline."""

from __future__ import annotations

import pytest

import specli
from specli.errors import SpecliError, UsageError
from specli.models import memory

PROMPT = "def fibonacci(n):"
TOKENS = 40


def _recorder(names: list[str]):
    """download_bars that records which models load fetches (and draws nothing)."""

    def bars(name: str):
        names.append(name)
        return None

    return bars


def test_the_presets_eagle_head_loads_on_first_use_and_drafts_as_a_pair_loaded_for_eagle():
    """Catches issue 20 #18: `specli.load().generate(strategy="eagle")` refused although the tiny preset
    names a head. The head loads once (a second generation fetches nothing), the output is the target's
    greedy output, and the rounds are those of a pair loaded with strategy 'eagle'."""
    fetched: list[str] = []
    pair = specli.load(device="cpu", download_bars=_recorder(fetched))
    assert pair.head is None and "embedded:tiny-eagle3" not in fetched
    result = pair.generate(PROMPT, strategy="eagle", max_new_tokens=TOKENS, fixed_k=True)
    assert pair.head_name == "embedded:tiny-eagle3" and pair.strategy == "draft"
    assert "embedded:tiny-eagle3" in fetched
    head, count = pair.head, len(fetched)
    again = pair.generate(PROMPT, strategy="eagle", max_new_tokens=TOKENS, fixed_k=True)
    assert pair.head is head and len(fetched) == count  # loaded once
    plain = pair.generate(PROMPT, strategy="none", max_new_tokens=TOKENS)
    assert result.token_ids == again.token_ids == plain.token_ids
    direct = specli.load(device="cpu", strategy="eagle").generate(PROMPT, max_new_tokens=TOKENS, fixed_k=True)
    assert [r.drafted for r in result.rounds] == [r.drafted for r in direct.rounds]
    assert result.stats.accepted > 0  # the head drafted, and the target kept some of it


def test_the_presets_drafter_loads_on_first_use_for_a_pair_loaded_for_eagle():
    pair = specli.load(device="cpu", strategy="eagle")
    assert pair.draft is None
    result = pair.generate(PROMPT, strategy="draft", max_new_tokens=TOKENS, fixed_k=True)
    assert pair.draft_name == "embedded:tiny-draft"
    plain = pair.generate(PROMPT, strategy="none", max_new_tokens=TOKENS)
    assert result.token_ids == plain.token_ids and result.stats.accepted > 0


def test_a_head_loaded_on_first_use_passes_the_memory_check(monkeypatch):
    """The lazy load checks what the device has left; refused, it names the load that plans it with the
    rest, and loads nothing. SPECLI_NO_MEMORY_CHECK=1 skips the check as at load time."""
    pair = specli.load(device="cpu")
    monkeypatch.setattr(memory, "free_bytes", lambda device: 1000)
    with pytest.raises(SpecliError) as info:
        pair.generate(PROMPT, strategy="eagle", max_new_tokens=4)
    assert info.value.message.startswith("not enough memory to add embedded:tiny-eagle3")
    assert "specli.load(..., strategy='eagle')" in info.value.hint
    assert pair.head is None
    monkeypatch.setenv("SPECLI_NO_MEMORY_CHECK", "1")
    pair.generate(PROMPT, strategy="eagle", max_new_tokens=4)
    assert pair.head is not None


def test_without_a_preset_the_error_names_the_load_call():
    pair = specli.load(target="embedded:tiny-target", draft="embedded:tiny-draft", device="cpu")
    with pytest.raises(UsageError) as info:
        pair.generate(PROMPT, strategy="eagle", max_new_tokens=4)
    assert "specli.load(..., strategy='eagle', draft=HEAD)" in info.value.hint
    none = specli.load(target="embedded:tiny-target", strategy="none", device="cpu")
    with pytest.raises(UsageError, match=r"specli\.load\(\.\.\., draft=MODEL\)"):
        none.generate(PROMPT, strategy="draft", max_new_tokens=4)


def test_the_lazy_loader_hands_what_it_loaded_to_pair_attach(monkeypatch):
    """Catches the lazy loader (api._Later) setting a pair's fields itself instead of asking the pair
    (issue 29): every drafter model and head it loads reaches the pair through `Pair.attach`."""
    from specli.pair import Pair

    attached: list[tuple[str, str]] = []
    real = Pair.attach

    def spy(self, name, **given):
        attached.append((name, *given))
        real(self, name, **given)

    monkeypatch.setattr(Pair, "attach", spy)
    specli.load(device="cpu").generate(PROMPT, strategy="eagle", max_new_tokens=2)
    specli.load(device="cpu", strategy="eagle").generate(PROMPT, strategy="draft", max_new_tokens=2)
    assert attached == [("embedded:tiny-eagle3", "head"), ("embedded:tiny-draft", "draft_model")]
    with pytest.raises(TypeError, match="exactly one"):
        real(specli.load(device="cpu", strategy="none"), "x")
