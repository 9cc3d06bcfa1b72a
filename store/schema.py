"""The database schema, as an ordered list of migrations that run when the database is opened.

`MIGRATIONS[n - 1]` brings a database from version n - 1 to version n; `schema_version` records
each one applied. Migrations only ever append: to change the schema, add a migration at the end
and never edit one that has shipped. `open_db()` runs the pending ones (`store.db.migrate_schema`) in one
write transaction (a crash mid-upgrade leaves the old version intact), and refuses a database
whose version is newer than `LATEST_VERSION`, written by a newer CoTeam, rather than guess at its
meaning. This module is data only and imports nothing of the store.

Conventions: JSON columns hold JSON text (checked with `json_valid`), timestamps are ISO-8601
UTC strings, agents are numbered from 0 within their team, adapter version 0 is the base model.

Version 1 - what one episode is: tasks, episodes, turns, reward components, ratings.
Version 2 - what the learner keeps: training runs, which episodes each run used, adapters.
Version 3 - rating limits: the rater's session, and whether a rating counts (within the limits).
Version 4 - adapters per kind of work ("coding" or "writing"): one active version per agent and kind.
Version 5 - class teams' versions (kind "class").
Version 6 - what the page showed, kept with the episode: the environment's verdict and each check.
"""

from __future__ import annotations

MIGRATIONS: list[list[str]] = [
    # 1: the episode record
    [
        """
        CREATE TABLE tasks (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind <> ''),
            prompt TEXT NOT NULL,
            source TEXT NOT NULL DEFAULT 'user',
            source_id TEXT,
            metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
            created_at TEXT NOT NULL
        )
        """,
        # a curated task imported twice is one task
        "CREATE UNIQUE INDEX tasks_source_id ON tasks(source, source_id) WHERE source_id IS NOT NULL",
        """
        CREATE TABLE episodes (
            id INTEGER PRIMARY KEY,
            task_id INTEGER NOT NULL REFERENCES tasks(id),
            shape TEXT NOT NULL CHECK (shape <> ''),
            team_size INTEGER NOT NULL CHECK (team_size BETWEEN 1 AND 4),
            roles TEXT NOT NULL CHECK (json_valid(roles)),
            adapter_versions TEXT NOT NULL CHECK (json_valid(adapter_versions)),
            group_id TEXT,
            sample_index INTEGER NOT NULL DEFAULT 0,
            params TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(params)),
            status TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'ok', 'failed')),
            turn_count INTEGER NOT NULL DEFAULT 0,
            wall_time_s REAL,
            prompt_tokens INTEGER NOT NULL DEFAULT 0,
            completion_tokens INTEGER NOT NULL DEFAULT 0,
            final_output TEXT,
            error TEXT,
            reward REAL,
            reward_weights TEXT CHECK (reward_weights IS NULL OR json_valid(reward_weights)),
            owner TEXT,
            started_at TEXT NOT NULL,
            finished_at TEXT
        )
        """,
        "CREATE INDEX episodes_task ON episodes(task_id)",
        "CREATE INDEX episodes_status ON episodes(status)",
        "CREATE INDEX episodes_group ON episodes(group_id) WHERE group_id IS NOT NULL",
        """
        CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            episode_id INTEGER NOT NULL REFERENCES episodes(id) ON DELETE CASCADE,
            turn INTEGER NOT NULL CHECK (turn >= 0),
            agent INTEGER NOT NULL CHECK (agent >= 0),
            observation TEXT NOT NULL,
            completion TEXT NOT NULL,
            prompt_tokens INTEGER NOT NULL DEFAULT 0,
            completion_tokens INTEGER NOT NULL DEFAULT 0,
            latency_s REAL NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            UNIQUE (episode_id, turn, agent)
        )
        """,
        """
        CREATE TABLE rewards (
            episode_id INTEGER NOT NULL REFERENCES episodes(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            value REAL NOT NULL,
            PRIMARY KEY (episode_id, name)
        )
        """,
        """
        CREATE TABLE ratings (
            id INTEGER PRIMARY KEY,
            episode_id INTEGER NOT NULL REFERENCES episodes(id) ON DELETE CASCADE,
            agent INTEGER CHECK (agent IS NULL OR agent >= 0),
            kind TEXT NOT NULL
                CHECK (kind IN ('thumbs', 'score', 'comment', 'edit', 'pairwise')),
            value REAL,
            text TEXT,
            choice TEXT CHECK (choice IS NULL OR choice IN ('left', 'right', 'tie', 'both_bad')),
            other_episode_id INTEGER REFERENCES episodes(id) ON DELETE CASCADE,
            rater TEXT,
            created_at TEXT NOT NULL
        )
        """,
        "CREATE INDEX ratings_episode ON ratings(episode_id)",
        "CREATE INDEX ratings_other ON ratings(other_episode_id) WHERE other_episode_id IS NOT NULL",
    ],
    # 2: the learner's records
    [
        """
        CREATE TABLE training_runs (
            id INTEGER PRIMARY KEY,
            trigger TEXT NOT NULL CHECK (trigger <> ''),
            state TEXT NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'ok', 'failed', 'cancelled')),
            progress REAL NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 1),
            message TEXT,
            config TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(config)),
            metrics TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metrics)),
            error TEXT,
            owner TEXT,
            started_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            finished_at TEXT
        )
        """,
        # one training run at a time, enforced by the database itself
        "CREATE UNIQUE INDEX training_runs_one_running ON training_runs(state) "
        "WHERE state = 'running'",
        """
        CREATE TABLE training_examples (
            run_id INTEGER NOT NULL REFERENCES training_runs(id) ON DELETE CASCADE,
            episode_id INTEGER NOT NULL REFERENCES episodes(id) ON DELETE CASCADE,
            PRIMARY KEY (run_id, episode_id)
        )
        """,
        "CREATE INDEX training_examples_episode ON training_examples(episode_id)",
        """
        CREATE TABLE adapters (
            id INTEGER PRIMARY KEY,
            agent INTEGER NOT NULL CHECK (agent >= 0),
            version INTEGER NOT NULL CHECK (version >= 1),
            path TEXT NOT NULL,
            parent_version INTEGER,
            previous_active_version INTEGER,
            training_run_id INTEGER REFERENCES training_runs(id),
            metrics TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metrics)),
            state TEXT NOT NULL DEFAULT 'candidate'
                CHECK (state IN ('candidate', 'active', 'retired', 'rejected')),
            created_at TEXT NOT NULL,
            activated_at TEXT,
            retired_at TEXT,
            UNIQUE (agent, version),
            FOREIGN KEY (agent, parent_version) REFERENCES adapters(agent, version)
        )
        """,
        # exactly one active adapter per agent, enforced by the database itself
        "CREATE UNIQUE INDEX adapters_one_active ON adapters(agent) WHERE state = 'active'",
    ],
    # 3: rating limits (store/ratings.py): past them a rating is kept but does not count
    [
        "ALTER TABLE ratings ADD COLUMN session TEXT",
        "ALTER TABLE ratings ADD COLUMN counts INTEGER NOT NULL DEFAULT 1 CHECK (counts IN (0, 1))",
        "CREATE INDEX ratings_rater ON ratings(rater, created_at) WHERE rater IS NOT NULL",
    ],
    # 4: the kind of work an adapter was trained on; one active version per agent and kind
    [
        "ALTER TABLE adapters ADD COLUMN kind TEXT NOT NULL DEFAULT 'coding' "
        "CHECK (kind IN ('coding', 'writing'))",
        # from its training run's task set, or for a shipped version the run its card records
        """
        UPDATE adapters SET kind = 'writing' WHERE coalesce(
            (SELECT json_extract(r.config, '$.task') FROM training_runs r
             WHERE r.id = adapters.training_run_id),
            json_extract(adapters.metrics,
                '$.card.versions."' || adapters.agent || '".training_run.config.task'),
            'coding'
        ) <> 'coding'
        """,
        "DROP INDEX adapters_one_active",
        "CREATE UNIQUE INDEX adapters_one_active ON adapters(agent, kind) WHERE state = 'active'",
    ],
    # 5: class teams train versions of their own (kind 'class'); SQLite changes a column's CHECK
    # only by rebuilding its table (the same columns, in the same order)
    [
        """
        CREATE TABLE adapters_new (
            id INTEGER PRIMARY KEY,
            agent INTEGER NOT NULL CHECK (agent >= 0),
            version INTEGER NOT NULL CHECK (version >= 1),
            path TEXT NOT NULL,
            parent_version INTEGER,
            previous_active_version INTEGER,
            training_run_id INTEGER REFERENCES training_runs(id),
            metrics TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metrics)),
            state TEXT NOT NULL DEFAULT 'candidate'
                CHECK (state IN ('candidate', 'active', 'retired', 'rejected')),
            created_at TEXT NOT NULL,
            activated_at TEXT,
            retired_at TEXT,
            kind TEXT NOT NULL DEFAULT 'coding' CHECK (kind IN ('coding', 'writing', 'class')),
            UNIQUE (agent, version),
            FOREIGN KEY (agent, parent_version) REFERENCES adapters(agent, version)
        )
        """,
        "INSERT INTO adapters_new SELECT * FROM adapters",
        "DROP TABLE adapters",
        "ALTER TABLE adapters_new RENAME TO adapters",
        "CREATE UNIQUE INDEX adapters_one_active ON adapters(agent, kind) WHERE state = 'active'",
    ],
    # 6: the environment's verdict on the final result (1 passed: every test of a program, every
    # test class of a class, every check of a document; 0 not; NULL not judged) and each check it
    # is made of, with its outcome and the judge's message (JSON list of {name, passed, message})
    [
        "ALTER TABLE episodes ADD COLUMN passed INTEGER CHECK (passed IN (0, 1))",
        "ALTER TABLE episodes ADD COLUMN checks TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(checks))",
    ],
]

LATEST_VERSION = len(MIGRATIONS)
