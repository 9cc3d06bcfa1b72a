"""CoTeam's SQLite store: every read and write of the database goes through these functions.

Modules, each documented at its top:
- `store.db`: `open_db` (the one place that opens the database), write transactions;
- `store.schema`: the migrations, run on open;
- `store.episodes`: tasks, episodes recorded as they run, turns, rewards, history pages;
- `store.ratings`: validated ratings and the preference pairs they imply;
- `store.adapters`: the adapter registry (register, activate, roll back, lineage);
- `store.training`: training runs and the episodes each one learns from;
- `store.export`: `coteam export` to JSONL or Parquet (imported on its own: it needs pyarrow);
- `store.paths`: where CoTeam keeps its files.

One connection per thread or process: `with open_db() as db: ...`.
"""

from store.adapters import (
    AdapterError,
    activate_adapter,
    active_adapters,
    adapter_lineage,
    get_adapter,
    register_adapter,
    reject_adapter,
    rollback_adapter,
    rollback_target,
    update_adapter_metrics,
)
from store.db import InvalidState, NotFound, StoreError, open_db, write_transaction
from store.episodes import (
    add_turn,
    count_episodes,
    create_task,
    fail_episode,
    finish_episode,
    get_episode,
    get_episodes,
    get_task,
    list_episodes,
    mark_interrupted_episodes,
    record_rewards,
    recording_episode,
    start_episode,
)
from store.ratings import (
    InvalidRating,
    RatingLimits,
    add_rating,
    preference_pairs,
    ratings_toward_schedule,
)
from store.schema import LATEST_VERSION, SchemaTooNew, migrate, schema_version
from store.training import (
    TrainingRunBusy,
    cancel_training_run,
    claim_training_data,
    fail_training_run,
    finish_training_run,
    get_training_run,
    list_training_runs,
    mark_interrupted_runs,
    start_training_run,
    training_data,
    update_training_run,
)

__all__ = [
    "LATEST_VERSION",
    "AdapterError",
    "InvalidRating",
    "InvalidState",
    "NotFound",
    "SchemaTooNew",
    "StoreError",
    "TrainingRunBusy",
    "activate_adapter",
    "active_adapters",
    "adapter_lineage",
    "add_rating",
    "RatingLimits",
    "ratings_toward_schedule",
    "add_turn",
    "cancel_training_run",
    "claim_training_data",
    "count_episodes",
    "create_task",
    "fail_episode",
    "fail_training_run",
    "finish_episode",
    "finish_training_run",
    "get_adapter",
    "get_episode",
    "get_episodes",
    "get_task",
    "get_training_run",
    "list_episodes",
    "list_training_runs",
    "mark_interrupted_episodes",
    "mark_interrupted_runs",
    "migrate",
    "open_db",
    "preference_pairs",
    "record_rewards",
    "recording_episode",
    "register_adapter",
    "reject_adapter",
    "rollback_adapter",
    "rollback_target",
    "schema_version",
    "start_episode",
    "start_training_run",
    "training_data",
    "update_adapter_metrics",
    "update_training_run",
    "write_transaction",
]
