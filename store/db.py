"""The one place that opens the CoTeam database, and the rules every write follows.

`open_db()` returns a sqlite-utils `Database` on `COTEAM_HOME/coteam.db` (or the path given),
set up for many writers at once:

- WAL journal, so readers never block the writer and the writer never blocks readers;
- a 30 s busy timeout, so a writer waits for the lock instead of failing "database is locked";
- `synchronous=NORMAL`: a killed process loses nothing committed (only a power cut can lose
  the last transactions), and commits don't wait for fsync;
- foreign keys on;
- pending migrations (`store.schema.MIGRATIONS`) applied by `migrate_schema`; a database
  from a newer CoTeam is refused.

Every write goes through `write_transaction(db)`, which starts with `BEGIN IMMEDIATE`: the write
lock is taken up front, so two writers never both hold a read snapshot and then deadlock trying
to upgrade it. The connection is in driver autocommit mode (`isolation_level=None`), so the
sqlite3 module never opens a transaction behind our back.

Threads and processes: a connection belongs to the thread that opened it (sqlite3 enforces this).
Open one per thread, process or request - opening is cheap - and close it when done:

    with open_db() as db:
        episodes = list_episodes(db, limit=20)

Episodes and training runs remember which process is writing them (`current_owner()`), so
after a crash the rows that process left 'running' can be found and marked failed.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from sqlite_utils import Database

from store import schema
from store.paths import default_db_path

BUSY_TIMEOUT_S = 30.0


class StoreError(Exception):
    """Base of the errors the store raises on purpose; the message says what and why."""


class NotFound(StoreError, LookupError):
    """A row that was asked for does not exist."""


class InvalidState(StoreError, ValueError):
    """The row exists but is in the wrong state for this change (e.g. finishing a failed episode)."""


class InvalidInput(StoreError, ValueError):
    """A value that SQLite cannot keep as given (undecodable text, NaN in JSON); says which."""


def check_storable_text(what: str, text: str) -> None:
    """Refuse text that UTF-8 cannot encode (a lone surrogate, e.g. from a broken paste)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInput(
            f"the {what} has a character that cannot be stored (an unpaired surrogate "
            f"{text[e.start]!r} at position {e.start}); remove it and try again"
        ) from None


def check_storable_json(what: str, value: Any) -> None:
    """Refuse data that is not plain JSON (NaN, infinities, undecodable text), naming the fault."""
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (ValueError, TypeError) as e:  # UnicodeEncodeError is a ValueError
        raise InvalidInput(f"the {what} must be plain JSON text and numbers: {e}") from None


def open_db(path: str | Path | None = None, *, migrate: bool = True) -> Database:
    """Open (creating if needed) the CoTeam database and bring its schema up to date.

    `path` defaults to `COTEAM_HOME/coteam.db`. Raises `SchemaTooNew` if the file
    was written by a newer CoTeam. `migrate=False` skips migrations (only tests want that).
    """
    path = Path(path) if path is not None else default_db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        _use_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        db = Database(conn)
        if migrate:
            migrate_schema(db)
    except BaseException:
        conn.close()
        raise
    return db


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL (a lasting property of the file, so usually already done)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as error:
            # Several processes creating the same new file can race for the switch.
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
        if mode.lower() != "wal":
            raise StoreError(f"could not switch the database to WAL mode (journal_mode={mode})")
        return


@contextlib.contextmanager
def write_transaction(db: Database) -> Iterator[Database]:
    """Run the block as one write transaction: all of it is committed, or none of it.

    Starts with `BEGIN IMMEDIATE` (waiting up to the busy timeout for the write lock). Nested
    use becomes a savepoint of the outer transaction, so store functions compose.
    """
    if db.conn.in_transaction:
        with db.atomic():
            yield db
        return
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise
    else:
        db.conn.execute("COMMIT")


@contextlib.contextmanager
def read_snapshot(db: Database) -> Iterator[Database]:
    """Run the block's reads against one consistent snapshot, while writers carry on."""
    if db.conn.in_transaction:
        yield db
        return
    db.conn.execute("BEGIN")
    try:
        yield db
    finally:
        if db.conn.in_transaction:
            db.conn.execute("COMMIT")


def rows(db: Database, sql: str, params: Any = None) -> list[dict]:
    """Run a query and fetch every row as a dict.

    Fetching at once matters: a half-read cursor keeps an old snapshot open, and a later
    `BEGIN IMMEDIATE` on that connection would then fail instead of waiting.
    """
    return list(db.query(sql, params))


def now() -> str:
    """The current time as an ISO-8601 UTC string, the store's one timestamp format."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def seconds_since(timestamp: str) -> float:
    """Seconds elapsed since a timestamp written by `now()`."""
    return (datetime.now(UTC) - datetime.fromisoformat(timestamp)).total_seconds()


def current_owner() -> str:
    """Who is writing: `host:pid:start-time` of this process (start time tells pid reuse apart)."""
    return _owner_of(psutil.Process())


def _owner_of(process: psutil.Process) -> str:
    return f"{socket.gethostname()}:{process.pid}:{process.create_time():.2f}"


def owner_alive(owner: str | None) -> bool:
    """Whether the process named by `current_owner()` may still be running.

    A process on another host cannot be checked and counts as alive; a missing owner as dead.
    """
    if not owner:
        return False
    host, pid, _ = owner.rsplit(":", 2)
    if host != socket.gethostname():
        return True
    try:
        process = psutil.Process(int(pid))
        # A killed child nobody has reaped yet is a zombie: it writes nothing more.
        return process.status() != psutil.STATUS_ZOMBIE and _owner_of(process) == owner
    except psutil.AccessDenied:
        return True  # someone else's process: it exists, and we cannot tell more
    except (psutil.NoSuchProcess, ValueError):
        return False


def fail_orphaned(
    db: Database,
    table: str,
    state_column: str,
    fail: Callable[[dict], None],
    *,
    all_running: bool = False,
) -> list[int]:
    """Fail the rows of `table` left 'running' by a process that is gone; return their ids.

    The one recovery path for rows a killed process left behind (episodes, training runs):
    `fail(row)` closes one row, all of them in one write transaction. With `all_running` every
    running row counts as orphaned (e.g. its processes lived on a host known to be down).
    """
    query = f"SELECT * FROM {table} WHERE {state_column} = 'running' ORDER BY id"

    def stale() -> list[dict]:
        return [row for row in rows(db, query) if all_running or not owner_alive(row["owner"])]

    if not stale():
        return []  # the usual case: no write lock taken
    with write_transaction(db):
        found = stale()  # again, under the lock
        for row in found:
            fail(row)
    return [row["id"] for row in found]


def decode_json(row: dict, *columns: str) -> dict:
    """Turn the named JSON-text columns of a row into Python values, in place; return the row."""
    for column in columns:
        if row.get(column) is not None:
            row[column] = json.loads(row[column])
    return row


# -- migrations (the list itself is in store.schema) ----------------------------------------


class SchemaTooNew(StoreError):
    """The database was written by a newer CoTeam than this one."""


def schema_version(db: Database) -> int:
    """The schema version of an open database (0 for an empty file)."""
    if not db["schema_version"].exists():
        return 0
    return rows(db, "SELECT coalesce(max(version), 0) AS v FROM schema_version")[0]["v"]


def migrate_schema(db: Database, target: int | None = None) -> int:
    """Apply the migrations up to `target` (default: all), in one write transaction.

    Returns the new version. Raises `SchemaTooNew` if the database is already past the newest
    version this code knows.
    """
    latest = len(schema.MIGRATIONS)
    target = latest if target is None else target
    if not 0 <= target <= latest:
        raise ValueError(f"no schema version {target}; this CoTeam knows 0 to {latest}")
    _refuse_newer(db)
    if schema_version(db) >= target:
        return schema_version(db)
    with write_transaction(db):
        # read again under the write lock: another process may have migrated meanwhile
        version = schema_version(db)
        db.execute(
            "CREATE TABLE IF NOT EXISTS schema_version "
            "(version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        for number in range(version + 1, target + 1):
            for statement in schema.MIGRATIONS[number - 1]:
                db.execute(statement)
            db.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", [number, now()]
            )
    return schema_version(db)


def database_path(db: Database) -> str | None:
    """The file an open database is (None for one in memory)."""
    return db.conn.execute("PRAGMA database_list").fetchone()[2] or None


def _refuse_newer(db: Database) -> None:
    version = schema_version(db)
    if version > len(schema.MIGRATIONS):
        path = database_path(db)
        raise SchemaTooNew(
            f"the database {path} has schema version {version}, but this CoTeam only knows "
            f"versions up to {len(schema.MIGRATIONS)}: it was written by a newer CoTeam. Upgrade CoTeam, "
            "or point COTEAM_HOME at another folder; the file was left unchanged."
        )
