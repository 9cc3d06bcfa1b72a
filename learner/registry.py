"""Adapter versions and hot-swap: immutable folders, one server name per version, promotion and
rollback without dropping a request.

A version is the folder `COTEAM_HOME/adapters/agentK/vN/` (agents numbered from 1, as on the page:
`store.agent_label`), copied in under a temporary name and renamed when complete; it is served
under the name `agentK-vN` (a new name per version: reloading
under an old name can serve stale prefix-cache blocks). Promotion loads the new version, then flips
the active pointer in the store: episodes that start afterwards ask for the new name, episodes in
flight finish on the old one, which stays loaded (and is what a rollback returns to).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from sqlite_utils import Database

import store
from agents.serving.policy import PolicyClient, modules_refused, served_as
from store.adapters import adapter_name, agent_label
from store.paths import adapters_dir

KEEP_LOADED = 2  # versions per agent kept on the server: the active one and the one before
# the trained team that ships with CoTeam (`ship` writes it): card.json (the base model's name and
# sha256, each version's metrics and training run, its config included) and one PEFT folder per
# agent, agentK/
SHIPPED = Path(__file__).resolve().parent.parent / "assets" / "adapters"
CARD = "card.json"

log = logging.getLogger(__name__)


def publish_candidate(
    db: Database,
    agent: int,
    folder: str | Path,
    *,
    parent: int | None = None,
    kind: str,
    metrics: dict | None = None,
    training_run_id: int | None = None,
) -> dict:
    """Copy a trained adapter folder into the registry as the agent's next version (a candidate)
    of `kind` of work ("coding" or "writing": the work it was trained on)."""
    versions = [row["version"] for row in store.adapter_lineage(db, agent)]
    version = max(versions, default=0) + 1
    dest = adapters_dir(store.database_path(db)) / agent_label(agent) / f"v{version}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():  # this database has no such version: a moved or deleted one's folder
        stamp = time.strftime("%Y%m%d-%H%M%S")
        orphan, n = dest.with_name(f"orphan-v{version}-{stamp}"), 1
        while orphan.exists():  # another left within the same second
            orphan, n = dest.with_name(f"orphan-v{version}-{stamp}-{n}"), n + 1
        log.warning("%s belongs to no version of this database; kept as %s", dest, orphan)
        os.replace(dest, orphan)
    tmp = Path(tempfile.mkdtemp(prefix=f".v{version}.", dir=dest.parent))
    try:
        shutil.copytree(folder, tmp, dirs_exist_ok=True)
        os.replace(tmp, dest)  # fails if dest exists: versions are immutable
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return store.register_adapter(
        db,
        agent,
        str(dest),
        version=version,
        parent=parent,
        metrics=metrics,
        training_run_id=training_run_id,
        kind=kind,
    )


def add_version(db: Database, agent: int, folder: str | Path, kind: str) -> dict:
    """Register a PEFT adapter folder made elsewhere (another installation's version, or a
    candidate kept with the record of the run that trained it) as the agent's next version of
    `kind`, a candidate: copied into this database's folder, served only once promoted by hand
    (`coteam adapters promote`). Refuses a folder that is not an adapter the server can apply:
    no config or weights, another rank than the learner's, modules the server does not adapt."""
    from learner.config import MAGRPOConfig

    folder = Path(folder)
    files = ("adapter_config.json", "adapter_model.safetensors")
    if missing := [name for name in files if not (folder / name).is_file()]:
        raise ValueError(f"{folder} is not a PEFT adapter folder: no {', '.join(missing)}")
    rank = json.loads((folder / files[0]).read_text()).get("r")
    if rank != MAGRPOConfig.lora_rank:
        raise ValueError(
            f"{folder} has LoRA rank {rank}: CoTeam serves rank {MAGRPOConfig.lora_rank}"
        )
    if refused := modules_refused(folder, unnamed=True):
        raise ValueError(f"{folder} {refused}")
    metrics = {"source": "added", "from": str(folder.resolve())}
    return publish_candidate(db, agent, folder, kind=kind, metrics=metrics)


def adapter_source(row: dict) -> str:
    """Where a version came from: "trained here" (by a run of this installation), "shipped"
    (with CoTeam, registered by `register_shipped`) or "registered" (by hand)."""
    if row.get("training_run_id") is not None:
        return "trained here"
    return "shipped" if row["metrics"].get("source") == "shipped" else "registered"


def trained_splits(db: Database, agent: int, version: int) -> set[str | None]:
    """The splits that the version and every version it was trained from were trained on: a
    fold ("1/2") or None, the fixed split (a shipped version: its card's run; one registered by
    hand: none known)."""
    splits: set[str | None] = set()
    row: dict | None = store.get_adapter(db, agent, version)
    while row is not None:
        if row["training_run_id"] is not None:
            run = store.get_training_run(db, row["training_run_id"])
            splits.add(run["config"].get("fold"))
        elif adapter_source(row) == "shipped":
            card = row["metrics"]["card"]["versions"][str(agent)]
            splits.add((card.get("training_run") or {}).get("config", {}).get("fold"))
        parent = row["parent_version"]
        row = store.get_adapter(db, agent, parent) if parent is not None else None
    return splits


def split_label(fold: str | None) -> str:
    """A split as the messages name it: "fold 1/2", or "the fixed split" for None."""
    return f"fold {fold}" if fold else "the fixed split"


def other_splits(db: Database, agent: int, version: int, fold: str | None) -> list[str]:
    """The splits other than `fold` that the version or any version it came from was trained
    on (`trained_splits`), named (`split_label`): those whose training problems include some of
    `fold`'s held-out ones."""
    return sorted(split_label(s) for s in trained_splits(db, agent, version) if s != fold)


def check_start_split(db: Database, start: dict[int, dict], fold: str | None) -> None:
    """Refuse a training run on `fold` (None: the fixed split) that would start from a version
    trained (itself or any version it came from) on another split: that split's training problems
    include this run's held-out ones, so an evaluation of the result would have seen them.
    `start` is {agent: row} of the versions the run would start from (`start_versions`)."""
    for agent, row in sorted(start.items()):
        if other := other_splits(db, agent, row["version"], fold):
            raise ValueError(
                f"agent {agent + 1} would start from {adapter_name(agent, row['version'])}, "
                f"trained on {', '.join(other)}, whose training problems include held-out "
                f"problems of {split_label(fold)}: train on a new database (--db), start from "
                "another version (--from) or roll the agents back to the base model first "
                "(coteam adapters rollback --agent K)"
            )


def register_shipped(db: Database, model: str | Path, folder: Path = SHIPPED) -> list[dict]:
    """On a new installation (no adapter version of any agent in the registry yet), make the
    shipped team each agent's version 1, active, so a new user starts with the trained team; the
    base team is one rollback away. Nothing is registered when nothing is shipped, when this
    registry already has versions (a person's own runs and choices are never overridden), or when
    the card's base model is not the one served (its sha256, from the model's provenance file).
    Returns the registered rows."""
    from agents.serving.models import model_provenance

    card_file = folder / CARD
    if not card_file.is_file() or store.adapter_agents(db):
        return []
    card = json.loads(card_file.read_text())
    served = (model_provenance(model) or {}).get("sha256")
    if served != card["base_model"]["sha256"]:
        log.warning(
            "the shipped adapters were trained on %s (sha256 %s), not on the model served here "
            "(sha256 %s): not registered",
            card["base_model"]["name"],
            card["base_model"]["sha256"],
            served,
        )
        return []
    rows = []
    for agent in card["agents"]:
        run = card["versions"][str(agent)].get("training_run") or {}
        row = publish_candidate(
            db,
            agent,
            folder / agent_label(agent),
            kind=work_kind(run.get("config", {}).get("task", "coding")),
            metrics={"source": "shipped", "card": card},
        )
        rows.append(store.activate_adapter(db, agent, row["version"]))
    return rows


def ship(db: Database, model: str | Path, out: Path, kind: str) -> dict:
    """Write the active team of `kind` as the team CoTeam ships: each agent's active adapter into
    `out`/agentK/ (PEFT config, weights in bf16: half the size, as vLLM serves them) and
    `out`/card.json, which says what it is (the base model's name and sha256, each agent's
    version, the training run's config and figures, the promotion gate's decision). Refuses
    when no agent has an active version or the base model has no provenance (no sha256 to check
    against). Returns the card."""
    import torch
    from safetensors.torch import load_file, save_file

    from agents.serving.models import PROVENANCE_FILE, model_provenance

    active = store.active_adapters(db, kind)
    if not active:
        raise ValueError(f"no agent has an active {kind} adapter version: nothing to ship")
    base = model_provenance(model)
    if base is None:
        raise ValueError(
            f"{model} has no {PROVENANCE_FILE}: the card needs the base model's sha256"
        )
    if out.exists() and any(out.iterdir()) and not (out / CARD).is_file():
        raise ValueError(f"{out} has files but no {CARD}: not a shipped team to replace")
    card = {
        "base_model": {"name": base.get("preset", Path(model).name), "sha256": base["sha256"]},
        "agents": sorted(active),
        "versions": {},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ship.", dir=out.parent))
    try:
        for agent, row in sorted(active.items()):
            dest = tmp / agent_label(agent)
            dest.mkdir()
            shutil.copy2(Path(row["path"]) / "adapter_config.json", dest)
            weights = load_file(Path(row["path"]) / "adapter_model.safetensors")
            save_file({k: v.to(torch.bfloat16) for k, v in weights.items()},
                      dest / "adapter_model.safetensors")  # fmt: skip
            run = row.get("training_run_id")
            card["versions"][str(agent)] = {
                "version": row["version"],
                "created_at": row["created_at"],
                "metrics": row["metrics"],
                "training_run": store.get_training_run(db, run) if run is not None else None,
            }
        (tmp / CARD).write_text(json.dumps(card, indent=2, default=str) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return card


def remove_unfinished_copies(db_path: str | Path | None = None) -> list[Path]:
    """Delete temporary folders a killed process left in database `db_path`'s registry (never
    a finished version)."""
    removed = []
    for tmp in adapters_dir(db_path).glob("agent*/.v*"):
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    return removed


def load_version(client: PolicyClient, name: str, path: str) -> None:
    """Load a version under its name unless the server has it from that folder (loaded by
    another process of this database); another database's version of the same name is served
    under a name of its own (`served_as`), so the two never meet."""
    if client.serves(name, path):
        client.remember(name, path)  # loaded by another process: remember it here too
    else:
        client.load_adapter(name, path)


def served_versions(db: Database, client: PolicyClient, agent: int) -> dict[int, str]:
    """{version: folder} of this database's versions of `agent` that the server has loaded, by
    whichever process loaded them."""
    served = {m["id"] for m in client.models()}
    return {
        r["version"]: r["path"]
        for r in store.adapter_lineage(db, agent)
        if served_as(adapter_name(agent, r["version"]), r["path"]) in served
    }


def work_kind(task_set: str) -> str:
    """The kind of work a task set is: "coding", "class" (class teams, ClassEval), or "writing"
    (summaries, abstracts, articles)."""
    return task_set if task_set in ("coding", "class") else "writing"


def version_names(rows: dict[int, dict], agents: int) -> list[str | None]:
    """The server name of each agent's version in `rows` ({agent: version row}, e.g. the
    active ones or a run's start), one per agent (None: the base model)."""
    return [adapter_name(a, rows[a]["version"]) if a in rows else None for a in range(agents)]


def serving_adapters(db: Database, agents: int, kind: str) -> list[str | None]:
    """The server name each agent's new requests of `kind` of work ("coding" or "writing") go
    to: its active version of that kind, or None (the base model: a coding team does not write
    essays)."""
    return version_names(store.active_adapters(db, kind), agents)


def ensure_loaded(db: Database, client: PolicyClient, agents: int, kind: str) -> list[str | None]:
    """Load every active adapter of `kind` the server lacks (after a restart or a promotion
    elsewhere); return the serving names (`serving_adapters`). Cheap when all are loaded."""
    names = serving_adapters(db, agents, kind)
    missing = [(a, n) for a, n in enumerate(names) if n and n not in client.loaded]
    if missing:  # the common case, all loaded by this client, asks the server nothing
        active = store.active_adapters(db, kind)
        for agent, name in missing:
            load_version(client, name, active[agent]["path"])
    return names


def start_versions(db: Database, agents: int, kind: str, named: dict[int, int]) -> dict[int, dict]:
    """{agent: row} of the versions a training run on `kind` of work starts from: each agent's
    active version, or the one `named` for it (`--from`: any state, e.g. a rejected candidate
    trained further; it must be of `kind`). An agent absent starts from the base model."""
    rows = {a: r for a, r in store.active_adapters(db, kind).items() if a < agents}
    for agent, version in sorted(named.items()):
        row = store.get_adapter(db, agent, version)  # NotFound names the version
        if row["kind"] != kind:
            raise ValueError(
                f"--from: {adapter_name(agent, version)} was trained on {row['kind']}, not {kind}"
            )
        rows[agent] = row
    return rows


def load_start(
    db: Database, client: PolicyClient, agents: int, kind: str, start: dict[int, dict]
) -> tuple[list[str | None], list[str]]:
    """Load the versions a run starts from (`start_versions`) into the server; return their
    names (`version_names`) and those loaded for the run alone (versions not serving that the
    server lacked), which the run unloads when it ends."""
    serving = ensure_loaded(db, client, agents, kind)
    names = version_names(start, agents)
    named = {a: n for a, n in enumerate(names) if n and n != serving[a]}  # `--from`'s
    borrowed = [n for a, n in sorted(named.items()) if not client.serves(n, start[a]["path"])]
    for agent, name in sorted(named.items()):
        load_version(client, name, start[agent]["path"])
    return names, borrowed


def promote(db: Database, client: PolicyClient | None, agent: int, version: int) -> dict:
    """Load a version into the server, then make it active; the version it replaces stays
    loaded for requests in flight and for rollback, older ones are unloaded."""
    row = store.get_adapter(db, agent, version)
    if client is not None:
        load_version(client, adapter_name(agent, version), row["path"])
    activated = store.activate_adapter(db, agent, version)
    if client is not None:
        _unload_old(db, client, agent)
    return activated


def rollback(db: Database, client: PolicyClient | None, agent: int, kind: str) -> dict | None:
    """Reactivate the version the active one of `kind` replaced (or the base model: None). The
    target is loaded into the server first, so a failed load leaves the store as it was."""
    target = store.rollback_target(db, agent, kind)
    if client is not None and target is not None:
        load_version(client, adapter_name(agent, target["version"]), target["path"])
    return store.rollback_adapter(db, agent, kind)


def _unload_old(db: Database, client: PolicyClient, agent: int) -> None:
    lineage = store.adapter_lineage(db, agent)
    active = [r for r in lineage if r["state"] == "active"]
    keep = {adapter_name(agent, r["version"]) for r in active}
    for r in active:
        if r.get("previous_active_version"):
            keep.add(adapter_name(agent, r["previous_active_version"]))
    for version, path in served_versions(db, client, agent).items():
        name = adapter_name(agent, version)
        if name not in keep:
            client.remember(name, path)  # perhaps loaded by another process: named by its folder
            client.unload_adapter(name)
