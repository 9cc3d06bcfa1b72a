"""What the web app's tabs share: the policy client, the database path, the background learner
and the admin password. `coteam serve` builds one `AppContext` and hands it to `build_app`."""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import store
from agents.serving.policy import PolicyClient
from agents.team.roles import MAX_AGENTS
from store.paths import coteam_home

if TYPE_CHECKING:  # the learner imports torch: only `coteam serve` loads it, when it trains
    from learner.worker import LearnerWorker

PASSWORD_ENV = "COTEAM_ADMIN_PASSWORD"


@dataclass
class AppContext:
    """Everything an event function needs besides its inputs.

    `db_path` None is the default database; `learner` None means this app cannot train (the
    admin tab says so); `admin_password` None keeps the admin tab locked for everyone.
    """

    client: PolicyClient
    db_path: str | Path | None = None
    learner: LearnerWorker | None = None
    admin_password: str | None = None
    eval_dir: Path = field(default_factory=lambda: coteam_home() / "eval")
    max_agents: int = 4
    rating_limits: store.RatingLimits = field(default_factory=store.RatingLimits)

    def registered_adapters(self) -> list[dict]:
        """Every adapter version of every agent in the registry, by agent then version."""
        with store.open_db(self.db_path) as db:
            return [row for agent in range(MAX_AGENTS) for row in store.adapter_lineage(db, agent)]

    def password_ok(self, given: str | None) -> bool:
        """Whether `given` is the configured admin password (never true without one)."""
        if not self.admin_password or not given:
            return False
        return hmac.compare_digest(given.encode(), self.admin_password.encode())


def admin_password_from(file: str | Path | None = None) -> str | None:
    """The admin password: the first line of `file` if given, else $COTEAM_ADMIN_PASSWORD;
    None when neither is set. An unreadable or empty file is an error, not a silent lockout."""
    if file is not None:
        try:
            lines = Path(file).read_text().splitlines()
        except OSError as e:
            raise ValueError(f"--admin-password-file {file}: {e.strerror}") from e
        password = lines[0].strip() if lines else ""
        if not password:
            raise ValueError(f"--admin-password-file {file} is empty")
        return password
    return os.environ.get(PASSWORD_ENV) or None
