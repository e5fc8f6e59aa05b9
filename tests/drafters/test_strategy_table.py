"""The strategies as one enum and one table (issue 29): `Strategy` members are plain strings wherever
they travel (f-strings, JSON, YAML, settings, presets); a strategy is one drafter file plus one line in
`STRATEGY_TABLE`, and what a strategy needs or allows is read from its entry there."""

from __future__ import annotations

import importlib
import json
import sys
from types import MappingProxyType

import pytest
import yaml
from conftest import make_model

from specli import strategies as table
from specli.errors import UsageError
from specli.pair import Pair
from specli.presets import ModelSpec, Preset, preset_to_dict
from specli.settings import STRATEGIES, resolve_settings
from specli.strategies import Strategy


def test_a_strategy_prints_and_serializes_as_its_plain_name():
    """Catches the enum printing as 'Strategy.DRAFT' (a str enum's default format on Python 3.11+) in
    messages and views, and a member reaching JSON or YAML output as anything but its name."""
    assert f"{Strategy.DRAFT}" == "draft" and str(Strategy.LOOKUP) == "lookup"
    assert f"'{Strategy.EAGLE}'" == "'eagle'" and f"{Strategy.SELF:>5}" == " self"
    assert json.dumps({"strategy": Strategy.NONE}) == '{"strategy": "none"}'
    assert STRATEGIES == ("draft", "none", "lookup", "self", "eagle", "heads")
    assert all(type(name) is str for name in STRATEGIES)


def test_settings_and_presets_hold_plain_names_given_a_member():
    """Catches a Strategy member kept inside Settings or a Preset: yaml.safe_dump (presets show) cannot
    represent it, and its repr would leak into messages."""
    settings = resolve_settings(strategy=Strategy.LOOKUP)
    assert type(settings.strategy) is str and settings.strategy == "lookup"
    assert yaml.safe_dump(settings.to_dict())  # raises on an enum member
    assert type(settings.replace(strategy=Strategy.SELF).strategy) is str
    preset = Preset(name="p", strategy=Strategy.SELF, target=ModelSpec(model="a/b"))
    assert type(preset.strategy) is str and repr(preset.strategy) == "'self'"
    assert "strategy: self" in yaml.safe_dump(preset_to_dict(preset))


# ----------------------------------------------------------------------------- adding a strategy

TOY_STRATEGY = '''"""A toy strategy: the target itself drafts, greedily, from the whole context each step."""

import torch

from specli.engine.drafter import Drafter, Proposal


class TargetDrafter(Drafter):
    name = "toy"

    def __init__(self, model):
        self.model = model
        self.ids = []
        self.drafted = []

    def reset(self, prompt_ids):
        self.ids, self.drafted = list(prompt_ids), []

    def propose(self, k, sampling, generator):
        context, self.drafted = list(self.ids), []
        with torch.inference_mode():
            for _ in range(k):
                token = int(self.model(torch.tensor([context])).logits[0, -1].argmax())
                self.drafted.append(token)
                context.append(token)
        return Proposal(torch.tensor(self.drafted, dtype=torch.long))

    def commit(self, accepted, token):
        self.ids += self.drafted[:accepted] + [token]


def build(context, length):
    return TargetDrafter(context.target_model)
'''

PROMPT = [5, 17, 42, 9, 100, 7, 5, 17]


@pytest.fixture
def register(tmp_path, monkeypatch):
    """register(name, **capabilities): the toy strategy's file written, and its one line in the table."""
    (tmp_path / "toy_strategy.py").write_text(TOY_STRATEGY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toy_strategy", raising=False)

    def add(name: str, **capabilities) -> None:
        line = {name: table.Entry("toy_strategy", **capabilities)}  # the one line a strategy adds
        monkeypatch.setattr(table, "STRATEGY_TABLE", MappingProxyType({**table.STRATEGY_TABLE, **line}))

    return add


def test_a_strategy_is_one_file_and_one_table_line(register, tokenizer):
    """Catches dispatch that bypasses the table (an if/elif on strategy names left in Pair, a name list
    in settings or the preset schema): a strategy known only to the table runs through Pair.generate,
    drafts, and keeps the target's greedy output token for token."""
    register("toy")
    model = make_model("llama", layers=2, seed=1).eval()
    plain = Pair(model, tokenizer, strategy="none").generate(prompt_ids=PROMPT, max_new_tokens=24)
    result = Pair(model, tokenizer, strategy="toy").generate(prompt_ids=PROMPT, max_new_tokens=24)
    assert result.token_ids == plain.token_ids and len(result.token_ids) == 24
    assert result.stats.strategy == "toy" and result.stats.accepted > 0  # the toy drafter drafted
    assert result.stats.rounds < plain.stats.rounds
    assert resolve_settings(strategy="toy").strategy == "toy"  # the settings the CLI resolves
    assert Preset(name="t", strategy="toy", target=ModelSpec(model="a/b")).strategy == "toy"


def test_capabilities_come_from_the_table(register, tokenizer):
    """Catches a capability read from a strategy's name instead of its table entry: the weights it needs
    (refused without them, at construction and when another pair's generation asks for it), whether
    --compile runs it, its own default k, drafting with the target's layers."""
    register("needy", model=table.Model.DRAFT, no_compile="it is a toy", default_k=7)
    model = make_model("llama", layers=4)
    with pytest.raises(UsageError, match="strategy 'needy' needs a drafter model"):
        Pair(model, tokenizer, strategy="needy")
    with pytest.raises(UsageError, match="'needy' needs a drafter model, and this pair's preset names none"):
        Pair(model, tokenizer, strategy="lookup").settings(strategy="needy")
    with pytest.raises(UsageError, match="--compile does not support strategy 'needy': it is a toy"):
        table.check_compile("needy")
    assert resolve_settings(strategy="needy").num_draft_tokens == 7
    assert resolve_settings(strategy="lookup", num_draft_tokens=3).num_draft_tokens == 3
    register("layered", target_layers=True)
    with pytest.raises(UsageError, match="between 1 and 3"):
        Pair(model, tokenizer, strategy="lookup").settings(strategy="layered", exit_layer=4)


def test_every_shipped_strategy_has_an_entry_whose_file_builds_its_drafter():
    """Catches a Strategy member without a table line, or a table line naming a file without `build`."""
    assert set(Strategy) <= set(table.STRATEGY_TABLE)
    for name in Strategy:
        module = table.STRATEGY_TABLE[name].module
        assert module is None or callable(importlib.import_module(module).build), name
    assert [n for n in Strategy if not table.STRATEGY_TABLE[n].drafts] == [Strategy.NONE]
