"""GGUF as a model source (issue 30 item 1): a .gguf file, a folder holding one, org/name:FILE.gguf in
the hub cache, ollama:NAME[:TAG] in an Ollama store. Each loads through `resolve_source` into a
dequantized folder in specli's cache and generates exactly what transformers' own GGUF-loaded model
generates. The files are written here from tiny models (tests/gguf_files.py); nothing reaches a network.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from conftest import make_model
from gguf_files import CHAT_TEMPLATE, hub_cache, ollama_store, write_gguf
from transformers import AutoModelForCausalLM, AutoTokenizer

import specli
from specli.errors import ModelLoadError, ModelNotFoundError, UsageError
from specli.models import gguf_cache, gguf_file, loading, memory

PROMPT = "def fibonacci(n):\n    if n < 2:"
TOKENS = 12


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh specli cache per test (never the user's)."""
    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path / "specli-cache"))
    return tmp_path / "specli-cache" / "gguf"


@pytest.fixture(scope="module")
def files(tmp_path_factory, tokenizer) -> dict[str, Path]:
    """One tiny GGUF per architecture, each alone in its folder; llama also quantized to Q8_0."""
    root = tmp_path_factory.mktemp("gguf")
    vocab = len(tokenizer)
    models = {
        "llama": make_model("llama", vocab, seed=1),
        "qwen2": make_model("qwen2", vocab, seed=2, tie_word_embeddings=True),  # no output.weight
        "qwen3": make_model("qwen3", vocab, seed=3, head_dim=128),  # transformers reads qwen3 at 128
        "gemma3": make_model(  # untied: a tied Gemma of random weights echoes its last token
            "gemma3_text", vocab, seed=4, head_dim=16, sliding_window=8, tie_word_embeddings=False
        ),
    }
    out = {name: write_gguf(root / name / f"tiny-{name}.gguf", m, tokenizer) for name, m in models.items()}
    out["llama-q8"] = write_gguf(
        root / "q8" / "tiny-llama.Q8_0.gguf", models["llama"], tokenizer, quantize="Q8_0"
    )
    return out


def reference(path: Path, prompt_ids: list[int]) -> list[int]:
    """transformers' own greedy generate() of the GGUF-loaded (dequantized, float32) model."""
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=TOKENS, do_sample=False)
    return out[0, len(prompt_ids) :].tolist()


def prompt_ids(path: Path) -> list[int]:
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)(PROMPT).input_ids


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3", "llama-q8"])
def test_a_gguf_file_generates_what_transformers_generates_from_it(files, arch, cache):
    """Each architecture (and a Q8_0 file): greedy output identical to transformers' generate() of the
    GGUF-loaded model, for plain decoding and lookup; tokenizer and chat template from the file. Caught:
    the float32 folder saved as bfloat16 (llama-q8, qwen3, gemma3 differ), the tokenizer files left out of
    the folder (load fails), config taken from the header view instead of transformers (gemma3 differs)."""
    path = files[arch]
    ids = prompt_ids(path)
    expected = reference(path, ids)
    assert len(set(expected)) > 2, expected  # a test that could tell outputs apart
    pair = specli.load(target=str(path), strategy=["none", "lookup"], device="cpu", engine="torch")
    for strategy in ("none", "lookup"):
        result = pair.generate(prompt_ids=ids, strategy=strategy, max_new_tokens=TOKENS)
        assert result.token_ids == expected, strategy
    assert pair.tokenizer.chat_template == CHAT_TEMPLATE
    assert pair.tokenizer(PROMPT).input_ids == ids
    (folder,) = cache.glob("*-float32")
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in folder.iterdir()
    }


def test_a_gguf_drafter_drafts_for_a_gguf_target(files):
    """--draft takes a GGUF too (another architecture, the same tokenizer): lossless, drafts accepted."""
    target, drafter = files["llama"], files["qwen2"]
    ids = prompt_ids(target)
    pair = specli.load(target=str(target), draft=str(drafter), strategy="draft", device="cpu", engine="torch")
    result = pair.generate(prompt_ids=ids, max_new_tokens=TOKENS, num_draft_tokens=3)
    assert result.token_ids == reference(target, ids)
    assert result.stats.drafted > 0


def test_the_first_load_converts_once_and_later_loads_read_the_folder(files, cache, monkeypatch):
    """Caught: a conversion on every load (the monkeypatched convert raises the second time), a
    configs-first stage that dequantizes (its folder has weights), a half folder left behind."""
    path = files["llama"]
    calls = []
    real = gguf_cache.convert

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(gguf_cache, "convert", counted)
    meta = loading.resolve_source(str(path), weights=False)
    assert meta.name.endswith("-meta") and not (meta / "model.safetensors").exists() and not calls
    assert (meta / "config.json").is_file() and (meta / "tokenizer.json").is_file()
    folder = loading.resolve_source(str(path))
    assert len(calls) == 1 and folder.name.endswith("-float32")
    assert loading.resolve_source(str(path)) == folder
    assert loading.resolve_source(str(path), weights=False) == folder  # configs from the finished folder
    assert len(calls) == 1
    assert sorted(p.name for p in cache.iterdir()) == sorted([meta.name, folder.name])  # no temporaries
    half = loading.resolve_source(str(path), dtype="bfloat16")
    assert len(calls) == 2 and half.name.endswith("-bfloat16")
    weights = AutoModelForCausalLM.from_pretrained(half).model.embed_tokens.weight
    assert weights.dtype == torch.bfloat16


def test_an_interrupted_conversion_leaves_no_folder(files, cache, monkeypatch):
    """Caught: writing straight into the final folder (a half folder that later loads would trust)."""
    path = files["qwen2"]

    def broken(model, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(AutoModelForCausalLM, "from_config", broken)
    with pytest.raises(KeyboardInterrupt):
        loading.resolve_source(str(path))
    assert not list(cache.glob("*-float32")) and not list(cache.glob(".*"))
    monkeypatch.undo()
    monkeypatch.setenv("SPECLI_CACHE_DIR", str(cache.parent))
    assert (loading.resolve_source(str(path)) / "model.safetensors").is_file()


def test_a_copy_of_the_file_shares_the_cache_and_a_changed_file_does_not(files, cache, tmp_path):
    """The identity is the content, not the path or mtime. Caught: a key from the path (the copy converts
    again) or from the header alone (the changed tensor byte is served from the old folder)."""
    first = loading.resolve_source(str(files["llama"]))
    copy = shutil.copy(files["llama"], tmp_path / "elsewhere.gguf")
    assert loading.resolve_source(str(copy)) == first
    data = bytearray(Path(copy).read_bytes())
    offset = gguf_file.read_header(copy).data_offset
    data[offset] ^= 0xFF
    Path(copy).write_bytes(bytes(data))
    assert loading.resolve_source(str(copy)) != first


def test_a_folder_holding_one_gguf_is_that_file_and_several_are_named(files, tmp_path):
    assert loading.resolve_source(str(files["llama"].parent)) == loading.resolve_source(str(files["llama"]))
    both = tmp_path / "both"
    both.mkdir()
    for name in ("a.gguf", "b.gguf"):
        shutil.copy(files["llama"], both / name)
    with pytest.raises(ModelNotFoundError) as err:
        loading.resolve_source(str(both))
    assert err.value.exit_code == 2 and "a.gguf, b.gguf" in err.value.message
    assert str(both / "a.gguf") in err.value.hint


def test_an_ollama_model_loads_from_the_store(files, tmp_path, monkeypatch):
    """ollama:NAME and ollama:NAME:TAG find the model layer's blob through the manifest (the blob has no
    .gguf suffix); the same content shares the cache with the file. Caught: the template layer taken for
    the model, a default tag other than latest, OLLAMA_MODELS not read."""
    store = ollama_store(tmp_path / "ollama", files["llama"], name="tiny")
    ollama_store(store, files["qwen2"], name="other", tag="q8")
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    folder = loading.resolve_source("ollama:tiny")
    assert (
        folder == loading.resolve_source("ollama:tiny:latest") == loading.resolve_source(str(files["llama"]))
    )
    ids = prompt_ids(files["qwen2"])
    pair = specli.load(target="ollama:other:q8", device="cpu", engine="torch")
    assert pair.generate(prompt_ids=ids, max_new_tokens=TOKENS).token_ids == reference(files["qwen2"], ids)
    with pytest.raises(ModelNotFoundError) as err:
        loading.resolve_source("ollama:absent")
    assert err.value.exit_code == 2 and "'absent:latest' is not in the Ollama store" in err.value.message
    assert err.value.hint == "models there: other:q8, tiny:latest"


def test_the_default_ollama_store_is_under_home(files, tmp_path, monkeypatch):
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    ollama_store(tmp_path / ".ollama" / "models", files["llama"], name="tiny")
    assert (loading.resolve_source("ollama:tiny") / "model.safetensors").is_file()


def test_a_hub_gguf_loads_from_the_hub_cache_offline(files, tmp_path, monkeypatch, no_network):
    """org/name:FILE.gguf in the usual hub cache layout, HF_HUB_OFFLINE=1. Caught: the name taken for a
    repo id (snapshot_download finds no config.json), the cache folder not honoured."""
    root = hub_cache(tmp_path / "hub", "acme/tiny-GGUF", {"tiny.Q8_0.gguf": files["llama-q8"]})
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ids = prompt_ids(files["llama-q8"])
    pair = specli.load(target="acme/tiny-GGUF:tiny.Q8_0.gguf", device="cpu", engine="torch")
    assert pair.generate(prompt_ids=ids, max_new_tokens=TOKENS).token_ids == reference(files["llama-q8"], ids)
    with pytest.raises(ModelLoadError) as err:
        loading.resolve_source("acme/tiny-GGUF:tiny.Q4_K_M.gguf")
    assert "not in the local hub cache (HF_HUB_OFFLINE is set)" in err.value.message
    assert "https://huggingface.co/acme/tiny-GGUF" not in str(err.value)  # offline: no page to visit


def test_the_planner_sizes_a_gguf_from_its_header(files, tmp_path, monkeypatch):
    """Before anything loads: the dequantized parameter count from the header (file, Ollama, cached hub
    file), equal to the model's. Caught: a tied LM head counted twice, GGUF names left unsized."""
    store = ollama_store(tmp_path / "ollama", files["qwen2"], name="tiny")
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    root = hub_cache(tmp_path / "hub", "acme/tiny-GGUF", {"tiny.gguf": files["qwen2"]})
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    model = AutoModelForCausalLM.from_pretrained(files["qwen2"].parent, gguf_file=files["qwen2"].name)
    count = sum(p.numel() for p in model.parameters())
    header = gguf_file.read_header(files["qwen2"])
    assert gguf_file.parameter_count(header) == count
    for name in (str(files["qwen2"]), "ollama:tiny", "acme/tiny-GGUF:tiny.gguf", str(files["qwen2"].parent)):
        assert memory.shape_of(name).parameters() == count, name
    assert memory.shape_of("acme/tiny-GGUF:absent.gguf") is None


# --------------------------------------------------------------------------- files transformers cannot read


def test_a_cut_file_a_split_file_and_an_unknown_architecture_are_named_with_the_fix(files, tmp_path):
    """Each: UsageError (exit 2), one line naming the file, one hint naming the fix."""
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(files["llama"].read_bytes()[: files["llama"].stat().st_size // 2])
    short = tmp_path / "short.gguf"
    short.write_bytes(files["llama"].read_bytes()[:1000])  # inside the header
    split = tmp_path / "tiny-00001-of-00003.gguf"
    shutil.copy(files["llama"], split)
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    cases = {
        cut: ("is cut short: its tensors need", "download or copy"),
        short: ("is cut short inside its header", "download or copy"),
        split: (
            "one part of a split GGUF model",
            "llama-gguf-split --merge tiny-00001-of-00003.gguf tiny.gguf",
        ),
        text: ("is not a GGUF file", "download or copy"),
    }
    for path, (message, hint) in cases.items():
        with pytest.raises(UsageError) as err:
            loading.resolve_source(str(path))
        assert err.value.exit_code == 2 and message in err.value.message and str(path) in err.value.message
        assert hint in err.value.hint and "\n" not in err.value.message + err.value.hint


def test_an_architecture_transformers_does_not_map_lists_those_it_does(tmp_path):
    import gguf

    writer = gguf.GGUFWriter(str(tmp_path / "rwkv.gguf"), "rwkv7")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 8).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UsageError) as err:
        loading.resolve_source(str(tmp_path / "rwkv.gguf"))
    assert "architecture 'rwkv7', which transformers cannot load" in err.value.message
    assert "llama" in err.value.message and "qwen2" in err.value.message and err.value.exit_code == 2


def test_load_dequantizes_into_the_dtype_asked_for(files, cache):
    """specli.load(dtype=...) reaches the conversion: bfloat16 is stored as bfloat16 (half the disk) and
    the load is that of the bfloat16 folder. Caught: the dtype dropped on the way (a float32 folder)."""
    pair = specli.load(target=str(files["llama"]), dtype="bfloat16", device="cpu")
    assert [p.name.rsplit("-", 1)[-1] for p in cache.iterdir() if not p.name.endswith("-meta")] == [
        "bfloat16"
    ]
    assert pair.target_model.dtype == torch.bfloat16
