"""Every benchmark script still starts: its imports resolve and `--help` prints its usage.

The benchmarks are not run by the suite (they are long), so a moved name would otherwise break
them silently: `bench/ratings.py` once imported a function that had moved to `agents/tasks.py`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize("script", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_bench_script_prints_its_usage(script: Path):
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
