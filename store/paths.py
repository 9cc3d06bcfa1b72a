"""Where CoTeam keeps its runtime state: one data directory, `COTEAM_HOME` (default ~/.coteam).

Everything CoTeam writes at run time lives under it: the database, adapters, converted models,
virtual environments and logs. It sits in `store` because every other package may import `store`.
"""

import os
from pathlib import Path


def coteam_home() -> Path:
    """The data directory, created on first use."""
    home = Path(os.environ.get("COTEAM_HOME") or Path.home() / ".coteam").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


def default_db_path() -> Path:
    return coteam_home() / "coteam.db"


def models_dir() -> Path:
    return coteam_home() / "models"


def adapters_dir() -> Path:
    return coteam_home() / "adapters"


def logs_dir() -> Path:
    path = coteam_home() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def venv_python(name: str) -> Path:
    """The interpreter of one of CoTeam's virtual environments (`main` or `vllm`)."""
    return coteam_home() / "venvs" / name / "bin" / "python"
