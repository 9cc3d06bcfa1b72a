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
    """Where one database's training runs keep their files (checkpoints, reward curves): run
    ids count per database, so resuming run 1 of one database never picks up another's."""
    return _of_database("runs", db_path)


# a directory every model server mounts at the same path, for adapters published to several
# servers (docs/DEPLOY.md); default: the data directory's adapters/
ADAPTERS_DIR_ENV = "COTEAM_ADAPTERS_DIR"


def adapters_dir(db_path: str | Path | None = None) -> Path:
    """Where one database's adapter versions live (`agentK/vN`): version numbers count per
    database, so a run on another database never meets a version 1 it did not make. Under
    `$COTEAM_ADAPTERS_DIR` when it is set, the folder every model server can read."""
    shared = os.environ.get(ADAPTERS_DIR_ENV)
    return _of_database("adapters", db_path, Path(shared).expanduser() if shared else None)


def _of_database(folder: str, db_path: str | Path | None, root: Path | None = None) -> Path:
    """`root` (default: `folder` of the home) for the default database,
    `root/<file name>-<hash of its path>/` for any other."""
    path = Path(db_path or default_db_path()).expanduser().resolve()
    root = root or coteam_home() / folder
    if path == default_db_path().resolve():
        return root
    return root / f"{path.stem}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"


def models_dir() -> Path:
    return coteam_home() / "models"


def logs_dir() -> Path:
    path = coteam_home() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def venv_python(name: str) -> Path:
    """The interpreter of one of CoTeam's virtual environments (`main` or `vllm`)."""
    return coteam_home() / "venvs" / name / "bin" / "python"
