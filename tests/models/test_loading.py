"""specli.models.loading: device/dtype resolution, model sources (local folder, offline hub cache), weight
safety, quantized loads, tokenizer agreement and model facts. Offline, CPU, tiny models."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import build_tokenizer, make_model, save_model

from specli.errors import ModelLoadError, SpecliError, UsageError
from specli.models import loading

HASH = "0123456789abcdef0123456789abcdef01234567"
needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA messages")

pytestmark = pytest.mark.usefixtures("no_network")


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory, tokenizer) -> Path:
    return save_model(tmp_path_factory.mktemp("llama"), make_model("llama", len(tokenizer)), tokenizer)


def logits(model, n: int = 5) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.arange(1, n + 1).unsqueeze(0)).logits  # [1, n, V]


# ----------------------------------------------------------------------------- device and dtype


def test_resolve_device_cpu_and_auto():
    assert loading.resolve_device("cpu") == torch.device("cpu")
    assert loading.resolve_device(" CPU ") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert loading.resolve_device("auto").type == expected


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "cuda:-1", "tpu", ""])
def test_resolve_device_unknown_is_usage_error(spec):
    with pytest.raises(UsageError, match="cuda:N"):
        loading.resolve_device(spec)


@needs_no_cuda
@pytest.mark.parametrize("spec", ["cuda", "cuda:7"])
def test_resolve_device_cuda_without_cuda(spec):
    with pytest.raises(SpecliError) as info:
        loading.resolve_device(spec)
    assert not isinstance(info.value, UsageError) and info.value.exit_code == 1
    assert "CUDA is not available" in str(info.value) and "cpu" in str(info.value)


def test_resolve_device_index_out_of_range(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert loading.resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(SpecliError, match="2 CUDA device") as info:
        loading.resolve_device("cuda:7")
    assert info.value.exit_code == 1


def test_resolve_dtype(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert loading.resolve_dtype("auto", cpu) is torch.float32
    assert loading.resolve_dtype("bf16", cpu) is torch.bfloat16
    assert loading.resolve_dtype("float16", cpu) is torch.float16
    with pytest.raises(UsageError, match="bfloat16"):
        loading.resolve_dtype("float8", cpu)

    class Cfg:
        dtype = "float16"

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert loading.resolve_dtype("auto", cuda, Cfg()) is torch.float16
    Cfg.dtype = torch.float32
    assert loading.resolve_dtype("auto", cuda, Cfg()) is torch.bfloat16
    assert loading.resolve_dtype("auto", cuda, None) is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    Cfg.dtype = "bfloat16"
    assert loading.resolve_dtype("auto", cuda, Cfg()) is torch.float16


# ----------------------------------------------------------------------------- local folders


def test_local_folder_loads(llama_dir, tokenizer):
    folder = loading.resolve_source(str(llama_dir))
    assert folder == llama_dir
    device = loading.resolve_device("cpu")
    dtype = loading.resolve_dtype("auto", device)
    model = loading.load_model(folder, device=device, dtype=dtype)
    tok = loading.load_tokenizer(folder)
    assert not model.training
    assert model.device.type == "cpu" and model.dtype is torch.float32
    assert logits(model).shape == (1, 5, len(tokenizer))
    assert tok.encode("def fibonacci(n):") == tokenizer.encode("def fibonacci(n):")


@pytest.mark.parametrize(
    "name", ["./no/such/model", "/definitely/not/here", "~/nope-specli-model", "a\\b", "x/y/z"]
)
def test_missing_folder_is_model_load_error(name):
    with pytest.raises(ModelLoadError, match="does not exist") as info:
        loading.resolve_source(name)
    assert name in str(info.value)


@pytest.mark.parametrize("name", ["a b c", "org/na me", "bad--name/x", "-lead/x", "org/x?"])
def test_garbage_model_name_is_usage_error(name):
    with pytest.raises(UsageError) as info:
        loading.resolve_source(name)
    assert name in str(info.value)


def test_file_instead_of_folder(tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="not a model folder"):
        loading.resolve_source(str(file))


def test_folder_without_config_or_weights(tmp_path, tokenizer):
    with pytest.raises(ModelLoadError, match="config.json"):
        loading.check_weights(tmp_path, allow_pickle=False)
    make_model("llama", len(tokenizer)).config.save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="no \\*.safetensors"):
        loading.check_weights(tmp_path, allow_pickle=True)
    with pytest.raises(ModelLoadError):
        loading.load_model(tmp_path, device=torch.device("cpu"), dtype=torch.float32)


def test_pickle_only_folder_refused_then_loaded(tmp_path, tokenizer):
    source = make_model("llama", len(tokenizer), seed=3)
    source.config.save_pretrained(tmp_path)
    torch.save(source.state_dict(), tmp_path / "pytorch_model.bin")
    cpu = torch.device("cpu")
    with pytest.raises(ModelLoadError, match="--allow-pickle") as info:
        loading.load_model(tmp_path, device=cpu, dtype=torch.float32)
    assert "pytorch_model.bin" in str(info.value)
    model = loading.load_model(tmp_path, device=cpu, dtype=torch.float32, allow_pickle=True)
    torch.testing.assert_close(logits(model), logits(source))


def test_bad_quant_is_usage_error(llama_dir):
    with pytest.raises(UsageError, match="4bit"):
        loading.load_model(llama_dir, device=torch.device("cpu"), dtype=torch.float32, quant="3bit")


def test_broken_config_is_model_load_error(tmp_path, llama_dir):
    shutil.copytree(llama_dir, tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text('{"model_type": "no-such-arch-xyz"}')
    with pytest.raises(ModelLoadError, match="could not load 'mine'") as info:
        loading.load_model(tmp_path / "m", device=torch.device("cpu"), dtype=torch.float32, name="mine")
    assert info.value.__cause__ is not None
    assert "upgrade transformers" in str(info.value)


def test_tokenizer_failure_is_model_load_error(tmp_path, llama_dir):
    shutil.copy(llama_dir / "config.json", tmp_path / "config.json")  # a model folder, but no tokenizer
    with pytest.raises(ModelLoadError, match="tokenizer"):
        loading.load_tokenizer(tmp_path)


# ----------------------------------------------------------------------------- not a model folder


def _not_a_model(tmp_path: Path, tokenizer=None) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "README.md").write_text("just notes\n")
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


def _says_no_model(err: BaseException, folder: str) -> None:
    assert err.message == f"no model found in {folder} (no config.json)"
    assert "tokenizer" not in str(err)


def test_folder_that_is_not_a_model_is_named_before_the_tokenizer(tmp_path, monkeypatch):
    """Catches issue 13 #10: the tokenizer loader's 'Couldn't instantiate the backend tokenizer from one
    of:' (cut mid-sentence) instead of saying the folder holds no model."""
    import transformers

    folder = _not_a_model(tmp_path)

    def no_tokenizer_loading(*args, **kwargs):
        raise AssertionError("the tokenizer was read before the folder was checked")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_tokenizer_loading)
    with pytest.raises(ModelLoadError) as info:
        loading.resolve_source(str(folder))
    _says_no_model(info.value, str(folder))
    assert "config.json and the weights" in info.value.hint


def test_folder_holding_model_folders_names_them(tmp_path, llama_dir):
    """Catches a parent folder passed by mistake getting only the generic hint."""
    shutil.copytree(llama_dir, tmp_path / "models" / "llama")
    with pytest.raises(ModelLoadError) as info:
        loading.resolve_source(str(tmp_path / "models"))
    _says_no_model(info.value, str(tmp_path / "models"))
    assert str(tmp_path / "models" / "llama") in info.value.hint


def test_tokenizer_of_a_folder_without_config(tmp_path):
    """Catches load_tokenizer passing on the tokenizer loader's half sentence for a folder with no model."""
    folder = _not_a_model(tmp_path)
    with pytest.raises(ModelLoadError) as info:
        loading.load_tokenizer(folder, name="notes")
    _says_no_model(info.value, "notes")


@pytest.mark.parametrize("role", ["target", "draft", "head"])
def test_not_a_model_as_target_drafter_or_eagle_head(tmp_path, tiny_pair, role):
    """Catches issue 13 #10 for each model of a pair, through specli.load as the CLI calls it."""
    import specli

    target, draft = tiny_pair
    folder = str(_not_a_model(tmp_path))
    kwargs = {
        "target": dict(target=folder, strategy="none"),
        "draft": dict(target=str(target), draft=folder),
        "head": dict(target=str(target), draft=folder, strategy="eagle"),
    }[role]
    with pytest.raises(ModelLoadError) as info:
        specli.load(device="cpu", **kwargs)
    _says_no_model(info.value, folder)


def test_hub_repo_without_config_stops_before_weights(monkeypatch, tmp_path, tokenizer, tiny_pair):
    """Catches a hub repo with a tokenizer but no config.json (not a transformers model) getting past the
    configs-first fetch, so its weights would download before the refusal."""
    import specli

    target, _ = tiny_pair
    calls = _serve_from_hub(
        monkeypatch, {"org/target": target, "org/notes": _not_a_model(tmp_path, tokenizer)}
    )
    with pytest.raises(ModelLoadError) as info:
        specli.load(target="org/target", draft="org/notes", device="cpu")
    _says_no_model(info.value, "org/notes")
    assert "no transformers model" in info.value.hint
    assert calls and not any(_fetches_weights(c) for c in calls)


# ----------------------------------------------------------------------------- hub cache (offline)


def lay_out_hub_cache(cache: Path, repo_id: str, source: Path) -> Path:
    """Copy `source` into `cache` in huggingface_hub's layout: blobs/, refs/main, snapshots/<hash>/ links."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(HASH)
    snapshot = repo / "snapshots" / HASH
    snapshot.mkdir(parents=True)
    for file in source.iterdir():
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


@pytest.fixture
def offline_cache(tmp_path, monkeypatch, llama_dir) -> tuple[Path, Path]:
    """(cache dir, snapshot of 'specli-test/tiny-llama') with HF_HUB_OFFLINE=1 and HF_HUB_CACHE set.

    Only environment variables are set, as a user would; huggingface_hub read its constants at import.
    """
    cache = tmp_path / "hf" / "hub"
    snapshot = lay_out_hub_cache(cache, "specli-test/tiny-llama", llama_dir)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache, snapshot


def test_hub_id_resolves_from_offline_cache(offline_cache, tokenizer):
    _, snapshot = offline_cache
    folder = loading.resolve_source("specli-test/tiny-llama")
    assert folder.resolve() == snapshot.resolve()
    assert (folder / "config.json").is_symlink()
    model = loading.load_model(folder, device=torch.device("cpu"), dtype=torch.float32)
    tok = loading.load_tokenizer(folder)
    assert logits(model).shape == (1, 5, len(tokenizer)) and len(tok) == len(tokenizer)


def test_hub_cache_found_through_hf_home(tmp_path, monkeypatch, llama_dir):
    snapshot = lay_out_hub_cache(tmp_path / "home" / "hub", "specli-test/other", llama_dir)
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert loading.resolve_source("specli-test/other").resolve() == snapshot.resolve()


def test_hub_id_not_in_offline_cache(offline_cache):
    with pytest.raises(ModelLoadError) as info:
        loading.resolve_source("specli-test/absent")
    message = str(info.value)
    assert "'specli-test/absent' is not in the local hub cache (HF_HUB_OFFLINE is set)" in message
    assert "local folder" in message


def test_offline_flag_from_hub_constants(tmp_path, monkeypatch):
    """The flag huggingface_hub read at import counts too (a user who exported HF_HUB_OFFLINE=1)."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE is set"):
        loading.resolve_source("specli-test/absent")


def _http():
    """The HTTP library huggingface_hub builds its errors on: httpx2 (hub 2.x) or httpx (hub 1.x)."""
    try:
        import httpx2 as http
    except ImportError:
        import httpx as http
    return http


def _http_response(status: int):
    http = _http()
    return http.Response(status, request=http.Request("GET", "https://huggingface.co/api/models/o/n"))


def _raise_from_hub(monkeypatch, error: Exception) -> list[dict]:
    import huggingface_hub

    calls: list[dict] = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append(dict(repo_id=repo_id, **kwargs))
        raise error

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    return calls


def test_hub_errors_are_explained(monkeypatch):
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    _raise_from_hub(monkeypatch, GatedRepoError("gated", response=_http_response(403)))
    with pytest.raises(ModelLoadError) as info:
        loading.resolve_source("meta-llama/Llama-3.1-8B")
    assert "https://huggingface.co/meta-llama/Llama-3.1-8B" in str(info.value)
    assert "HF_TOKEN" in str(info.value)
    assert isinstance(info.value.__cause__, GatedRepoError)

    _raise_from_hub(monkeypatch, RepositoryNotFoundError("404", response=_http_response(404)))
    with pytest.raises(ModelLoadError, match="not found") as info:
        loading.resolve_source("org/typo")
    assert "spelling" in str(info.value) and "HF_TOKEN" in str(info.value)

    down = LocalEntryNotFoundError("cannot find")
    down.__cause__ = _http().ConnectError("no route")
    _raise_from_hub(monkeypatch, down)
    with pytest.raises(ModelLoadError, match="could not reach the Hugging Face Hub") as info:
        loading.resolve_source("org/name")
    assert "not in the local cache" in str(info.value) and "HF_HUB_OFFLINE" not in str(info.value)


def _caused(err: Exception, cause: BaseException) -> Exception:
    err.__cause__ = cause
    return err


def _hub_cases():
    """(name, error, offline, environment, words the message must hold, words the hint must hold)."""
    from huggingface_hub.errors import (
        DisabledRepoError,
        GatedRepoError,
        HfHubHTTPError,
        IncompleteSnapshotError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    http = _http()
    url = "https://huggingface.co/org/name"
    not_cached = "cannot find an appropriate cached snapshot folder"
    offline_env = {"HF_HUB_OFFLINE": "1"}
    return [
        ("gated, no token", GatedRepoError("g", response=_http_response(401)), False, {},
         ["gated", "needs a Hugging Face token"], [url, "set HF_TOKEN"]),
        ("gated, a token without access", GatedRepoError("g", response=_http_response(403)), False,
         {"HF_TOKEN": "hf_x"}, ["gated", "your Hugging Face token has no access"], [url]),
        ("not found", RepositoryNotFoundError("n", response=_http_response(404)), False, {},
         ["not found on the Hugging Face Hub"], ["spelling", "HF_TOKEN"]),
        ("no such revision", RevisionNotFoundError("r", response=_http_response(404)), False, {},
         ["revision does not exist"], [url]),
        ("disabled", DisabledRepoError("d", response=_http_response(403)), False, {},
         ["disabled"], ["another model"]),
        ("offline, not cached", LocalEntryNotFoundError(not_cached), True, offline_env,
         ["not in the local hub cache (HF_HUB_OFFLINE is set)"], ["unset HF_HUB_OFFLINE", "download it"]),
        ("offline through the hub's own check",
         _caused(LocalEntryNotFoundError(not_cached), OfflineModeIsEnabled("off")), False, {},
         ["not in the local hub cache (HF_HUB_OFFLINE is set)"], ["unset HF_HUB_OFFLINE"]),
        ("TRANSFORMERS_OFFLINE, not cached", LocalEntryNotFoundError(not_cached), True,
         {"TRANSFORMERS_OFFLINE": "1"}, ["(TRANSFORMERS_OFFLINE is set)"], ["unset TRANSFORMERS_OFFLINE"]),
        ("offline, incomplete", IncompleteSnapshotError("i", snapshot_path="/x"), True, offline_env,
         ["cached copy", "incomplete", "HF_HUB_OFFLINE is set"], ["unset HF_HUB_OFFLINE", "finish"]),
        ("network down, incomplete",
         _caused(IncompleteSnapshotError("i", snapshot_path="/x"), http.ConnectError("no route")), False, {},
         ["cached copy", "incomplete", "could not be reached (ConnectError)"], ["connection", "finish"]),
        ("bad token",
         _caused(LocalEntryNotFoundError("x"), HfHubHTTPError("u", response=_http_response(401))), False, {},
         ["refused access", "401"], ["HF_TOKEN"]),
        ("rate limited",
         _caused(LocalEntryNotFoundError("x"), HfHubHTTPError("t", response=_http_response(429))), False, {},
         ["rate-limiting", "429", "not in the local cache"], ["wait a minute"]),
        ("hub down", _caused(LocalEntryNotFoundError("x"), HfHubHTTPError("b", response=_http_response(503))),
         False, {}, ["answered HTTP 503", "not in the local cache"], ["try again later"]),
        ("network down, not cached", _caused(LocalEntryNotFoundError("x"), http.ConnectError("no route")),
         False, {}, ["could not reach the Hugging Face Hub", "(ConnectError)", "not in the local cache"],
         ["check your connection"]),
        ("network lost during the download", http.ReadTimeout("slow"), False, {},
         ["could not reach the Hugging Face Hub", "(ReadTimeout)"], ["check your connection", "run again"]),
        ("disk full", OSError(28, "No space left on device"), False, {"HF_HUB_CACHE": "/cache/hub"},
         ["could not store", "/cache/hub", "No space left on device"], ["free some space", "HF_HUB_CACHE"]),
        ("anything else", ValueError("odd\nsecond line"), False, {},
         ["could not fetch", "ValueError: odd"], ["run again"]),
    ]  # fmt: skip


@pytest.mark.parametrize("case", _hub_cases(), ids=lambda case: case[0])
def test_every_hub_error_gives_one_consistent_instruction(monkeypatch, case):
    """Catches issue 13 #7: a model that is not cached told to 'set HF_HUB_OFFLINE=1 to use the cache', an
    offline run told to check its connection, a missing token called 'this token', and hints that do not
    offer the other way out (a local folder)."""
    import huggingface_hub

    name, error, offline, env, in_message, in_hint = case
    for var in (
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_TOKEN",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
    ):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: env.get("HF_TOKEN"))
    err = loading._hub_error("org/name", error, offline)
    message, hint = err.message, err.hint or ""
    for words in in_message:
        assert words in message, (name, message)
    for words in in_hint:
        assert words in hint, (name, hint)
    assert hint.endswith("or pass a local folder"), (name, hint)
    assert hint.count("or pass a local folder") == 1 and "\n" not in message + hint, (name, str(err))
    if "not in the local" in message:  # then the cache has nothing to give: never point at it
        assert "use the cache" not in hint and not re.search(r"\bset HF_HUB_OFFLINE", hint), (name, hint)
    assert "HF_HUB_OFFLINE=1" not in hint, (name, hint)  # never: no branch has a cache to fall back on
    if offline or "is set" in message:
        assert "connection" not in hint, (name, hint)
    if "needs a Hugging Face token" in message:
        assert "your" not in message and "this token" not in message, (name, message)


def test_hub_download_patterns(monkeypatch, tmp_path):
    from huggingface_hub.errors import RepositoryNotFoundError

    calls = _raise_from_hub(monkeypatch, RepositoryNotFoundError("404", response=_http_response(404)))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    for allow_pickle in (False, True):
        with pytest.raises(ModelLoadError):
            loading.resolve_source("org/name", allow_pickle=allow_pickle)
    safe, pickled = calls
    assert safe["repo_id"] == "org/name" and safe["cache_dir"] == str(tmp_path)
    assert safe["local_files_only"] is False
    assert {"config.json", "*.safetensors", "*.safetensors.index.json", "tokenizer.json"} <= set(
        safe["allow_patterns"]
    )
    assert not any(".bin" in p or p.endswith(".py") for p in safe["allow_patterns"])
    assert any(p.endswith(".bin") for p in pickled["allow_patterns"])


# ----------------------------------------------------------------------------- tokenizers


def test_same_tokenizer_saved_twice(tmp_path, tokenizer):
    tokenizer.save_pretrained(tmp_path / "a")
    tokenizer.save_pretrained(tmp_path / "b")
    a, b = loading.load_tokenizer(tmp_path / "a"), loading.load_tokenizer(tmp_path / "b")
    assert loading.same_tokenizer(a, b)
    loading.check_tokenizers(a, b, "target-x", "draft-y")


def test_different_tokenizers_are_refused(tokenizer):
    other = build_tokenizer(vocab_size=320)
    assert not loading.same_tokenizer(tokenizer, other)
    with pytest.raises(UsageError) as info:
        loading.check_tokenizers(tokenizer, other, "org/target-x", "org/draft-y")
    message = str(info.value)
    assert "'org/target-x'" in message and "'org/draft-y'" in message and "--strategy lookup" in message
    assert "--strategy self" in message and "planned" not in message


def test_extra_added_token_is_a_difference(tmp_path, tokenizer):
    tokenizer.save_pretrained(tmp_path)
    a, b = loading.load_tokenizer(tmp_path), loading.load_tokenizer(tmp_path)
    b.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    assert not loading.same_tokenizer(a, b)


def test_same_tokenizer_different_embedding_rows(tmp_path, tokenizer):
    vocab = len(tokenizer)
    target = save_model(tmp_path / "t", make_model("llama", vocab + 64, layers=2), tokenizer)
    draft = save_model(tmp_path / "d", make_model("llama", vocab, layers=1), tokenizer)
    cpu = torch.device("cpu")
    t_model = loading.load_model(target, device=cpu, dtype=torch.float32)
    d_model = loading.load_model(draft, device=cpu, dtype=torch.float32)
    assert t_model.get_input_embeddings().weight.shape[0] != d_model.get_input_embeddings().weight.shape[0]
    loading.check_tokenizers(loading.load_tokenizer(target), loading.load_tokenizer(draft), "t", "d")


# ----------------------------------------------------------------------------- quantization (CPU)


@pytest.mark.parametrize(("quant", "min_similarity"), [("8bit", 0.95), ("4bit", 0.7)])
def test_quantized_load_on_cpu(llama_dir, tokenizer, quant, min_similarity):
    bnb = pytest.importorskip("bitsandbytes")
    model = loading.load_model(llama_dir, device=torch.device("cpu"), dtype=torch.float32, quant=quant)
    layer = model.model.layers[0].self_attn.q_proj
    assert isinstance(layer, bnb.nn.Linear8bitLt if quant == "8bit" else bnb.nn.Linear4bit)
    assert not model.training and model.device.type == "cpu"
    out = logits(model, 32)
    assert out.shape == (1, 32, len(tokenizer)) and torch.isfinite(out).all()
    # Quantized, not garbage: centred logits point the same way as the float model's (another random
    # model scores ~0; measured 8-bit ~0.998, 4-bit nf4 ~0.87).
    full = logits(loading.load_model(llama_dir, device=torch.device("cpu"), dtype=torch.float32), 32)
    similarity = torch.nn.functional.cosine_similarity(
        (out - out.mean(-1, keepdim=True)).flatten(), (full - full.mean(-1, keepdim=True)).flatten(), dim=0
    )
    assert similarity.item() >= min_similarity


# ----------------------------------------------------------------------------- model facts


def test_model_max_positions():
    assert loading.model_max_positions(make_model("llama", 64, max_positions=512)) == 512
    assert loading.model_max_positions(make_model("gpt2", 64, max_positions=128)) == 128

    class NoLimit:
        config = object()

    assert loading.model_max_positions(NoLimit()) is None


def test_eos_token_ids_union(tokenizer):
    model = make_model("llama", len(tokenizer), eos_token_id=[0, 5])
    model.generation_config.eos_token_id = [7, 5]
    assert loading.eos_token_ids(model, tokenizer) == {0, 5, 7}
    model.config.eos_token_id = None
    model.generation_config.eos_token_id = 9
    assert loading.eos_token_ids(model, tokenizer) == {9, tokenizer.eos_token_id}


def test_remote_code_needs_the_flag(tmp_path, llama_dir, request):
    """A folder that ships its own modeling code is refused (never prompted, never run) without the flag."""
    from transformers.dynamic_module_utils import HF_MODULES_CACHE

    folder = tmp_path / "specli_test_remote_code"
    # transformers copies trusted code into its modules cache, named after the folder: clean that up.
    request.addfinalizer(
        lambda: shutil.rmtree(
            Path(HF_MODULES_CACHE) / "transformers_modules" / folder.name, ignore_errors=True
        )
    )
    shutil.copytree(llama_dir, folder)
    marker = tmp_path / "code-ran"
    (folder / "modeling_custom.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "class CustomConfig(LlamaConfig):\n    model_type = 'specli-custom'\n"
        "class CustomForCausalLM(LlamaForCausalLM):\n    config_class = CustomConfig\n"
    )
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "specli-custom"  # unknown to transformers: only the folder's code can load it
    config["auto_map"] = {
        "AutoConfig": "modeling_custom.CustomConfig",
        "AutoModelForCausalLM": "modeling_custom.CustomForCausalLM",
    }
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="--trust-remote-code"):
        loading.load_model(folder, device=torch.device("cpu"), dtype=torch.float32)
    assert not marker.exists()
    cpu = torch.device("cpu")
    model = loading.load_model(folder, device=cpu, dtype=torch.float32, trust_remote_code=True)
    assert type(model).__name__ == "CustomForCausalLM" and marker.exists()


def _serve_from_hub(monkeypatch, folders: dict[str, Path]) -> list[dict]:
    """A stand-in for snapshot_download that serves local folders by repo id and records each call."""
    import huggingface_hub

    calls: list[dict] = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append(dict(repo_id=repo_id, **kwargs))
        return str(folders[repo_id])

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    return calls


def _fetches_weights(call: dict) -> bool:
    return "*.safetensors" in call["allow_patterns"]


def test_configs_and_tokenizers_come_before_any_weights(monkeypatch, tiny_pair):
    import specli

    target, draft = tiny_pair
    calls = _serve_from_hub(monkeypatch, {"org/target": target, "org/draft": draft})
    specli.load(target="org/target", draft="org/draft", device="cpu")
    order = [(c["repo_id"], _fetches_weights(c)) for c in calls]
    assert order == [("org/target", False), ("org/draft", False), ("org/target", True), ("org/draft", True)]


def test_no_weights_move_when_the_pair_does_not_fit(monkeypatch, tiny_pair):
    import specli
    from specli.errors import SpecliError
    from specli.models import memory

    target, draft = tiny_pair
    calls = _serve_from_hub(monkeypatch, {"org/target": target, "org/draft": draft})
    monkeypatch.setattr(memory, "free_bytes", lambda device: 1000)
    with pytest.raises(SpecliError, match="not enough memory"):
        specli.load(target="org/target", draft="org/draft", device="cpu")
    assert calls and not any(_fetches_weights(c) for c in calls)


def test_no_weights_move_when_the_tokenizers_differ(monkeypatch, tiny_pair, tmp_path):
    import specli
    from specli.errors import SpecliError

    other = build_tokenizer(vocab_size=300)
    other_tokenizer_model = save_model(tmp_path / "other", make_model("llama", len(other), layers=1), other)
    target, _ = tiny_pair
    calls = _serve_from_hub(monkeypatch, {"org/target": target, "org/other": other_tokenizer_model})
    with pytest.raises(SpecliError):
        specli.load(target="org/target", draft="org/other", device="cpu")
    assert calls and not any(_fetches_weights(c) for c in calls)


# ----------------------------------------------------------------------------- no model there: a usage error


@pytest.mark.parametrize("kind", ["missing path", "no config.json", "a file", "unknown embedded"])
def test_no_model_where_the_user_pointed_is_a_usage_error(tmp_path, kind):
    """Catches issue 20 #7: these exited 1 (a runtime failure); the user named something that is not
    there, so exit 2. Still ModelLoadErrors, with the same messages."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "file.txt").write_text("x")
    name, message = {
        "missing path": (str(tmp_path / "nope"), "does not exist"),
        "no config.json": (str(tmp_path / "notes"), "(no config.json)"),
        "a file": (str(tmp_path / "file.txt"), "is a file, not a model folder"),
        "unknown embedded": ("embedded:nope", "no embedded model named 'nope'"),
    }[kind]
    with pytest.raises(ModelLoadError) as info:
        loading.resolve_source(name)
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2
    assert message in info.value.message
