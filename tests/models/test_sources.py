"""specli.models.sources, ollama and gguf_file: every form of model name classified in one torch-free
place, the path and hub helpers every command shares, an Ollama store and a GGUF header read without
torch, and the CLI's early errors for GGUF names (exit 2, one line and a fix, before torch)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import make_model, run_cli_cases
from gguf_files import hub_cache, ollama_store, write_gguf

from specli import export
from specli.errors import ModelNotFoundError, UsageError
from specli.models import gguf_file, loading, ollama, sources


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, tokenizer) -> Path:
    root = tmp_path_factory.mktemp("gguf")
    model = make_model("llama", len(tokenizer), seed=1, max_positions=32)
    return write_gguf(root / "one" / "tiny.gguf", model, tokenizer)


def test_paths_expand_home_and_variables_and_hub_ids_stay_hub_ids(monkeypatch, tmp_path):
    """One behaviour: `~` and `$VARS` expand in model names and in the folder variables. Caught:
    expandvars dropped (the $MODELS folder is not found), a two-part hub id taken for a path."""
    monkeypatch.setenv("MODELS", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sources.expand_path("$MODELS/x") == str(tmp_path / "x")
    assert sources.expand_path("~/x") == str(tmp_path / "x")
    assert sources.expand_path("$SPECLI_NO_SUCH_VAR/x") == "$SPECLI_NO_SUCH_VAR/x"
    for name in ("./m", "../m", "~/m", "/abs/m", "a/b/c", "C:\\models\\m"):
        assert sources.looks_like_path(name), name
    for name in ("org/name", "gpt2", "Qwen/Qwen2.5-0.5B-Instruct"):
        assert not sources.looks_like_path(name), name
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "config.json").write_text("{}")
    assert sources.classify("$MODELS/folder") == sources.Source(
        "folder", "$MODELS/folder", tmp_path / "folder"
    )


def test_the_hub_cache_folder_follows_huggingface_hubs_precedence(monkeypatch, tmp_path):
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    assert sources.hub_cache_dir() is None
    monkeypatch.setenv("ROOT", str(tmp_path))
    monkeypatch.setenv("HF_HOME", "$ROOT/home")
    assert sources.hub_cache_dir() == str(tmp_path / "home" / "hub")
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", "$ROOT/old")
    assert sources.hub_cache_dir() == str(tmp_path / "old")
    monkeypatch.setenv("HF_HUB_CACHE", "$ROOT/new")
    assert sources.hub_cache_dir() == str(tmp_path / "new")
    assert loading.hub_cache_dir is sources.hub_cache_dir


def test_export_and_loading_find_the_same_hub_cache_through_a_variable(monkeypatch, tmp_path, no_network):
    """The drift issue 29 names: export's copy expanded `~` but not `$VARS`, so a cache named through a
    variable held a PARD drafter that export did not see (it assumed a plain draft model)."""
    config = {"model_type": "llama", "pard_token": 7}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"")
    hub_cache(tmp_path / "cache", "acme/pard", {"config.json": tmp_path / "config.json"})
    monkeypatch.setenv("ROOT", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", "$ROOT/cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert export.resolve_pair(target="acme/big", draft="acme/pard").kind == "pard"
    assert (loading.resolve_source("acme/pard", weights=False) / "config.json").is_file()


def test_every_form_of_name_is_classified(tiny_gguf, tmp_path, monkeypatch):
    store = ollama_store(tmp_path / "ollama", tiny_gguf, name="tiny")
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    kinds = {
        "embedded:tiny-target": "embedded",
        str(tmp_path / "model"): "folder",
        str(tiny_gguf): "gguf",
        str(tiny_gguf.parent): "gguf",
        "ollama:tiny": "ollama",
        "org/name": "hub",
        "gpt2": "hub",
        "org/name-GGUF:model.Q4_K_M.gguf": "hub_gguf",
        "org/name-GGUF:sub/model.gguf": "hub_gguf",
    }
    for name, kind in kinds.items():
        assert sources.classify(name).kind == kind, name
    assert sources.classify(str(tiny_gguf.parent)).path == tiny_gguf
    hub = sources.classify("org/name-GGUF:sub/model.gguf")
    assert (hub.repo, hub.filename) == ("org/name-GGUF", "sub/model.gguf")
    assert sources.classify("ollama:tiny").path.name.startswith("sha256-")


@pytest.mark.parametrize(
    "name, message",
    [
        ("./absent", "model folder './absent' does not exist"),
        ("absent.gguf", "GGUF file 'absent.gguf' does not exist"),
        ("org/name:model-00001-of-00002.gguf", "is one part of a split GGUF model"),
        ("not a name", "is neither a local folder nor a hub id"),
        ("embedded:nope", "no embedded model named 'nope'"),
        ("ollama:a/b/c/d", "is not an Ollama model name"),
    ],
)
def test_names_that_are_nothing_here_are_refused_in_one_line(name, message):
    with pytest.raises(UsageError) as err:
        sources.classify(name)
    assert message in err.value.message and err.value.exit_code == 2 and err.value.hint


def test_ollama_names_map_to_their_manifests(tmp_path, monkeypatch):
    assert ollama.parse_name("llama3.2") == ("registry.ollama.ai", "library", "llama3.2", "latest")
    assert ollama.parse_name("me/model:q4") == ("registry.ollama.ai", "me", "model", "q4")
    assert ollama.parse_name("hf.co/org/repo:Q4_K_M") == ("hf.co", "org", "repo", "Q4_K_M")
    for bad in ("../x", "a:b:c", ""):
        with pytest.raises(ModelNotFoundError):
            ollama.parse_name(bad)
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "none"))
    with pytest.raises(ModelNotFoundError, match="no Ollama model store at"):
        ollama.find_model("tiny")


def test_an_ollama_manifest_without_its_blob_says_to_pull_again(tiny_gguf, tmp_path, monkeypatch):
    store = ollama_store(tmp_path / "ollama", tiny_gguf, name="tiny")
    ollama_store(store, tiny_gguf, name="mine", tag="v1")  # shown with its tag, in the default namespace
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    assert ollama.store_names(store) == ["mine:v1", "tiny:latest"]
    for blob in (store / "blobs").iterdir():
        if blob.stat().st_size > 100:
            blob.unlink()
    with pytest.raises(ModelNotFoundError) as err:
        ollama.find_model("tiny")
    assert "is missing from" in err.value.message and "ollama pull tiny:latest" in err.value.hint


def test_the_header_reader_keeps_short_metadata_and_counts_long_arrays(tiny_gguf, tokenizer, monkeypatch):
    """Caught: a long vocabulary decoded (slow: it stays a LongArray), shapes left in ggml order."""
    monkeypatch.setattr(gguf_file, "LONG_ARRAY", 100)  # the tiny vocabulary counts as long
    header = gguf_file.read_header(tiny_gguf)
    assert header.architecture == "llama" and header.version == 3
    assert header.metadata["llama.block_count"] == 2
    assert header.metadata["tokenizer.ggml.tokens"] == gguf_file.LongArray(len(tokenizer))
    embedding = next(t for t in header.tensors if t.name == "token_embd.weight")
    assert embedding.shape == (len(tokenizer), 64) and header.tensor_types() == {"F32"}
    config = gguf_file.header_config(header)
    assert config["max_position_embeddings"] == 32 and config["tie_word_embeddings"] is False


def test_the_identity_follows_the_content(tiny_gguf, tmp_path):
    """Caught: a key of the path or mtime (the copy differs), of the header only (the edit is missed)."""
    key = gguf_file.identity(gguf_file.read_header(tiny_gguf))
    copy = Path(shutil.copy(tiny_gguf, tmp_path / "copy.gguf"))
    assert gguf_file.identity(gguf_file.read_header(copy)) == key
    data = bytearray(copy.read_bytes())
    data[-1] ^= 0x01  # the last byte of the last tensor: inside the last sampled slice
    copy.write_bytes(bytes(data))
    assert gguf_file.identity(gguf_file.read_header(copy)) != key


def test_the_cli_refuses_a_bad_gguf_before_torch(tiny_gguf, tmp_path):
    """generate, bench and train: exit 2, the problem and its fix in two lines, torch never imported;
    -k is checked against the context in the file's header. Caught: GGUF names passed through to the
    loader (torch imported first), the header's context ignored."""
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_gguf.read_bytes()[: tiny_gguf.stat().st_size // 2])
    env_store = tmp_path / "ollama"
    ollama_store(env_store, tiny_gguf, name="tiny")
    cases = {
        ("generate", "hi", "--target", str(cut)): "is cut short",
        ("generate", "hi", "--target", str(tmp_path / "m-00001-of-00002.gguf")): "split GGUF",
        ("bench", "--target", "ollama:absent", "--strategy", "none"): "models there: tiny:latest",
        ("generate", "hi", "--target", str(tiny_gguf), "-k", "40", "--strategy", "lookup"): "(32 tokens)",
        (
            "train",
            "eagle3",
            "--target",
            str(cut),
            "--data",
            "code",
            "--out",
            str(tmp_path / "o"),
        ): "cut short",
    }
    (tmp_path / "m-00001-of-00002.gguf").write_bytes(tiny_gguf.read_bytes())
    env = {"OLLAMA_MODELS": str(env_store), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    reports = run_cli_cases([list(c) for c in cases], tmp_path, env)
    for (args, expected), got in zip(cases.items(), reports, strict=True):
        lines = got["stderr"].strip().splitlines()
        assert got["code"] == 2 and expected in got["stderr"] and len(lines) <= 2, (args, got)
        assert got["heavy"] == [], (args, got)
