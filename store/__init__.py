"""CoTeam's SQLite store: every read and write of the database goes through these functions.

Modules, each documented at its top:
- `store.db`: `open_db` (the one place that opens the database), write transactions, and
  `migrate_schema`, run on open;
- `store.schema`: the migrations themselves (data only);
- `store.episodes`: tasks, episodes recorded as they run, turns, rewards, history pages;
- `store.ratings`: validated ratings and the preference pairs they imply;
- `store.adapters`: the adapter registry (register, activate, roll back, lineage) and the
  adapter names (`agentK-vN`, training scratch names) built and read in one place;
- `store.training`: training runs and the episodes each one learns from;
- `store.export`: `coteam export` to JSONL or Parquet (imported on its own: it needs pyarrow);
- `store.paths`: where CoTeam keeps its files.

One connection per thread or process: `with open_db() as db: ...`.
"""

from store.adapters import (
    WORK_KINDS,
    AdapterError,
    activate_adapter,
    active_adapters,
    adapter_agents,
    adapter_lineage,
    adapter_name,
    agent_label,
    answers_before_after,
    get_adapter,
    parse_adapter_name,
    recorded_version,
    register_adapter,
    reject_adapter,
    rollback_adapter,
    rollback_target,
    training_adapter_name,
    update_adapter_metrics,
    version_label,
)
from store.db import (
    InvalidInput,
    InvalidState,
    NotFound,
    SchemaTooNew,
    StoreError,
    database_path,
    migrate_schema,
    open_db,
    schema_version,
    write_transaction,
)
from store.episodes import (
    EpisodeFilter,
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
    count_ratings,
    get_rating,
    has_verdict,
    preference_pairs,
    ratings_toward_schedule,
)
from store.schema import LATEST_VERSION
from store.training import (
    TrainingRunBusy,
    cancel_training_run,
    claim_training_data,
    fail_training_run,
    finish_training_run,
    get_training_run,
    list_training_runs,
    mark_interrupted_runs,
    recover_interrupted,
    start_training_run,
    training_data,
    update_training_run,
)

__all__ = [
    "InvalidInput",
    "LATEST_VERSION",
    "WORK_KINDS",
    "AdapterError",
    "EpisodeFilter",
    "InvalidRating",
    "InvalidState",
    "NotFound",
    "SchemaTooNew",
    "StoreError",
    "TrainingRunBusy",
    "activate_adapter",
    "active_adapters",
    "adapter_agents",
    "agent_label",
    "adapter_lineage",
    "adapter_name",
    "answers_before_after",
    "add_rating",
    "count_ratings",
    "get_rating",
    "has_verdict",
    "RatingLimits",
    "ratings_toward_schedule",
    "add_turn",
    "cancel_training_run",
    "claim_training_data",
    "count_episodes",
    "create_task",
    "database_path",
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
    "migrate_schema",
    "open_db",
    "parse_adapter_name",
    "preference_pairs",
    "recorded_version",
    "recover_interrupted",
    "record_rewards",
    "recording_episode",
    "register_adapter",
    "reject_adapter",
    "rollback_adapter",
    "rollback_target",
    "schema_version",
    "start_episode",
    "start_training_run",
    "training_adapter_name",
    "training_data",
    "update_adapter_metrics",
    "update_training_run",
    "version_label",
    "write_transaction",
]
