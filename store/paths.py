"""Where CoTeam keeps its runtime state: one data directory, `COTEAM_HOME` (default ~/.coteam).

Everything CoTeam writes at run time lives under it: the database, adapters, converted models,
virtual environments and logs. It sits in `store` because every other package may import `store`.
"""

import hashlib
import os
from pathlib import Path


def coteam_home() -> Path:
    """The data directory, created on first use."""
    home = Path(os.environ.get("COTEAM_HOME") or Path.home() / ".coteam").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


def default_db_path() -> Path:
    return coteam_home() / "coteam.db"


def runs_dir(db_path: str | Path | None = None) -> Path:
    """Where one database's training runs keep their files (checkpoints, reward curves).

    Run ids count per database, so each database has its own folder: `runs/` for the default
    database, `runs/<file name>-<hash of its path>/` for any other, so that resuming run 1 of
    one database never picks up run 1 of another."""
    path = Path(db_path or default_db_path()).expanduser().resolve()
    runs = coteam_home() / "runs"
    if path == default_db_path().resolve():
        return runs
    return runs / f"{path.stem}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"


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
