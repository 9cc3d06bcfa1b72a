"""The evaluation harness: every team shape (and adapter version) on the same tasks, scored with
the rewards (`coteam eval`). This module holds the run's config and the runner; the statistics
are in `learner/eval_stats.py`, the report and plots in `learner/report.py`.

    records = evaluate(config, policy, out_dir)      # runs, scores, appends DIR/episodes.jsonl
    summary = summarize(records, config, expected)  # -> DIR/results.json
    write_report(summary, out_dir, records)          # -> DIR/report.md and DIR/*.png

`run_eval` does the three. A run is tasks × variants × shapes × K samples; a variant is a named
mapping agent -> adapter name ("base": every agent on the base model). Each finished episode is
one JSON line in DIR/episodes.jsonl, written as soon as it is scored, so an interrupted run
started again with the same DIR skips what is there and runs only the rest.

What is measured, per episode (`eval_stats.DEFINITIONS` is the text the report prints):
- `pass`: coding - every counted test assert passes (sandbox, one assert at a time); writing -
  the environment's success (every section non-empty, inside its role's word bounds, no two
  sections with content-word overlap above 0.5). pass@k uses the unbiased estimator
  1 − C(n−c, k)/C(n, k) over the K samples of a task.
- `tests` (coding): fraction of counted asserts passed. `reference` (writing): agreement with
  the human reference (mean of ROUGE-1, ROUGE-L and embedding cosine).
- `consistency`: coding - the coding reward's coordination component (the entry author's
  function calls the helper author's `aux`, weighted by tests passed), in [0, 1]; writing - mean
  pairwise cosine of the sections' embeddings. Not defined for `single` (one agent has no
  teammate to agree with).
- coding teams also: `helper_called` (the entry function calls every helper author's function),
  `role_violations` (share of agents that implemented another role's function), and for a team
  of a helper and an entry author `helper_alone` (the helper's `aux` alone passes, called by an
  entry function the evaluation writes: beside `pass`, what the entry author's own code added);
  `critical_tokens` (every shape: output tokens on the critical path) sits beside `tokens`.
- `structure`: coding - the team's module parses and defines the entry function (and `aux` for a
  team) with a return; writing - the writing reward's length score of the sections.
- `turns`, `time_s` (completion time: the episode's wall time in seconds), `tokens` (output
  tokens of every agent call), `reward` (the joint reward R recorded in the store).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import store
from agents.kinds import work_of
from agents.serving.server import machine
from agents.tasks import Task, split_tasks
from agents.team.graph import Policy, TeamSettings, requests_at_once
from agents.team.outline import structure_compliance
from agents.team.result import EpisodeResult
from agents.team.sentences import embedding_model
from learner.coding_reward import defines_with_return, helper_alone_passes, parses
from learner.config import BASE_VARIANT, SPLITS, WRITING_SETS, EvalConfig, EvalError
from learner.episode import EpisodeSetup, play
from learner.eval_stats import summarize
from learner.registry import load_version, split_label, trained_splits
from learner.report import write_report
from learner.rewards import Scored
from store.paths import default_db_path

log = logging.getLogger(__name__)

HEALTH_POLL_S = 5.0  # how often a group waiting for a restarted server asks /health


def parse_variant(text: str) -> tuple[str, tuple[str, ...]]:
    """`NAME=agent1-v3,agent2-v3` -> ("NAME", ("agent1-v3", "agent2-v3")); `base` alone for none."""
    name, _, adapters = text.partition("=")
    if not name or (not adapters and name != BASE_VARIANT):
        raise EvalError(f"--adapters {text!r}: expected NAME=ADAPTER0,ADAPTER1,...")
    if name == BASE_VARIANT and adapters:
        raise EvalError(
            f"--adapters {text!r}: {BASE_VARIANT!r} is the base model; name it otherwise"
        )
    names = tuple(a.strip() for a in adapters.split(",")) if adapters else ()
    if any(not a for a in names):
        raise EvalError(f"--adapters {text!r}: an empty adapter name")
    return name, names


def eval_tasks(config: EvalConfig) -> list[Task]:
    """The tasks of the run, from the one split of agents/tasks.py (HumanEval's by the fold, if
    one is given); the first `limit` of them."""
    task_set = "coding" if config.task == "coding" else WRITING_SETS[config.writing_set]
    tasks = split_tasks(task_set, SPLITS[config.split], config.fold)
    return tasks[: config.limit] if config.limit else tasks


def task_name(task: Task) -> str:
    return task.source_id if task.source == "humaneval" else f"{task.source}/{task.source_id}"


def record_key(record: dict) -> tuple:
    return (record["task"], record["shape"], record["variant"], record["sample"])


# -- scoring one episode ---------------------------------------------------------------------


def helper_alone(result: EpisodeResult) -> float | None:
    """A coding team of a helper and an entry author: whether the helper's last `aux` alone
    passes (`helper_alone_passes`); None for any other team or `single`."""
    if [role.name for role in result.roles] != ["helper", "entry"]:
        return None
    return float(helper_alone_passes(result.task, result.final_steps()[0]["text"]))


def episode_metrics(result: EpisodeResult, scored: Scored) -> dict:
    """A played episode's metrics (see the module docstring) from what it did and its score."""
    task, team = result.task, len(result.roles) > 1
    reward = scored.components
    metrics: dict[str, Any] = {
        "turns": result.turns,
        "time_s": result.wall_time_s,
        "tokens": sum(s["completion_tokens"] for s in result.steps),
        "critical_tokens": int(reward["critical_tokens"]),
        "prompt_tokens": sum(s["prompt_tokens"] for s in result.steps),
    }
    metrics |= KIND_METRICS[work_of(task).name](result, scored, team)
    metrics["reward"] = scored.reward
    return metrics


def _coding_metrics(result: EpisodeResult, scored: Scored, team: bool) -> dict:
    """pass and tests judge the team's combined module; its structure, its helper's use."""
    task, reward = result.task, scored.components
    program, report = result.output, scored.report
    passed, total = (report.passed, report.total) if report else (0, 0)
    needed = [task.entry_point] + (["aux"] if team else [])
    return {
        "pass": report is not None and report.all_passed,
        "tests": report.fraction if report else 0.0,
        "consistency": reward["coordination"] if team else None,
        "helper_called": reward["helper_called"] if team else None,
        "role_violations": reward["role_violations"] if team else None,
        "structure": float(
            parses(program) and all(defines_with_return(program, f) for f in needed)
        ),
        "asserts_passed": passed,
        "asserts_total": total,
        "helper_alone": helper_alone(result),
    }


def _writing_metrics(result: EpisodeResult, scored: Scored, team: bool) -> dict:
    """pass is the environment's verdict; agreement with the reference, the parts' words."""
    reward = scored.components
    parts = [s["text"].strip() for s in result.final_steps()]
    return {
        "pass": bool(result.success),
        "reference": reward.get("reference"),
        "consistency": reward["consistency"] if team else None,
        "structure": reward["structure"],
        "redundancy": reward["redundancy"] if team else None,
        "words": [len(p.split()) for p in parts],
    }


def _document_metrics(result: EpisodeResult, scored: Scored, team: bool) -> dict:
    """Writing's, with structure as each outline section written once, by its owner, and
    redundancy between the document's sections, for single too (one writer can also say
    things twice)."""
    reward = scored.components
    parts = [s["text"].strip() for s in result.final_steps()]
    owners = [role.sections for role in result.roles]
    return _writing_metrics(result, scored, team) | {
        "structure": structure_compliance(parts, result.task.extra["outline"], owners),
        "redundancy": reward["redundancy"],
        "document_redundancy": reward["document_redundancy"],
        "repeats_dropped": reward["repeats_dropped"],
        "coverage": reward["coverage"],
    }


# an episode's metrics of its kind of work (agents/kinds/), by the kind's name
KIND_METRICS = {
    "coding": _coding_metrics,
    "writing": _writing_metrics,
    "longform": _document_metrics,
}


# -- running ---------------------------------------------------------------------------------


def read_records(path: Path) -> list[dict]:
    """The finished episodes in an episodes.jsonl; a line cut off by a crash is skipped."""
    if not path.exists():
        return []
    records, seen = [], set()
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            log.warning("skipping a broken line in %s (an interrupted write)", path)
            continue
        if record_key(record) not in seen:
            seen.add(record_key(record))
            records.append(record)
    return records


def _check_folder(config: EvalConfig, out_dir: Path, command: str = "") -> None:
    """A folder holds one run's episodes: refuse to mix in episodes made with other settings.
    Its config.json lists every invocation's part of the run (`runs`: shapes, variants, limit
    and command), which the report covers together."""
    path = out_dir / "config.json"
    settings = config.episode_settings() | {"variants": config.variants}
    part = {
        "shapes": list(config.shapes),
        "variants": list(config.variants),
        "limit": config.limit,
    }
    runs = []
    if path.exists():
        old = json.loads(path.read_text())
        variants = {**old.get("variants", {}), **config.variants}
        clash = settings_clash(old, settings, ignore=("variants", "sampling", "runs"))
        clash += [
            f"variant {name}"
            for name, adapters in config.variants.items()
            if list(old.get("variants", {}).get(name, adapters)) != list(adapters)
        ]
        if clash:
            raise EvalError(
                f"{out_dir} holds a run with other settings ({', '.join(clash)}); "
                "use another --out folder, or the same settings to resume"
            )
        settings["variants"] = variants
        runs = old.get("runs", [])
    out_dir.mkdir(parents=True, exist_ok=True)
    settings["sampling"] = asdict(config.sampling)  # for the record: derived from the above
    if not any({k: r.get(k) for k in part} == part for r in runs):  # a resumed part: once
        runs.append(part | {"command": command})
    settings["runs"] = runs
    path.write_text(json.dumps(settings, indent=2, default=list) + "\n")


def folder_run(config: EvalConfig, out_dir: str | Path) -> tuple[EvalConfig, set[tuple], str]:
    """The whole run a folder holds, made by one or more invocations (config.json's `runs`):
    its config (every part's shapes and variants), the episodes its parts asked for and their
    commands, one after the other."""
    settings = json.loads((Path(out_dir) / "config.json").read_text())
    runs = settings["runs"]  # written by _check_folder before any episode runs
    shapes = tuple(dict.fromkeys(s for run in runs for s in run["shapes"]))
    names = dict.fromkeys(name for run in runs for name in run["variants"])
    variants = {name: tuple(settings["variants"][name]) for name in names}  # every part's
    limits = [run.get("limit") for run in runs]
    limit = None if None in limits else max(limits)
    whole = replace(config, shapes=shapes, variants=variants, limit=limit)
    wanted = set()
    for run in runs:
        asked = {name: variants[name] for name in run["variants"]}
        part = replace(whole, shapes=tuple(run["shapes"]), variants=asked, limit=run.get("limit"))
        wanted |= episode_keys(part, eval_tasks(part))
    commands = "; ".join(run["command"] for run in runs if run.get("command"))
    return whole, wanted, commands


def episode_keys(config: EvalConfig, tasks: Sequence[Task]) -> set[tuple]:
    """The record keys of the episodes a run over `tasks` asks for."""
    return {
        (task_name(t), s, v, g)
        for t in tasks
        for s in config.shapes
        for v in config.variants
        for g in range(config.samples)
    }


def settings_clash(old: dict, new: dict, ignore: Sequence[str]) -> list[str]:
    """The settings two runs differ in, an option set in only one of them included."""
    keys = (old.keys() | new.keys()) - set(ignore)
    return sorted(k for k in keys if old.get(k) != new.get(k))


def variant_adapters(variants: dict[str, Sequence[str | None]]) -> set[str]:
    """Every adapter name a variant of the run serves."""
    return {a for adapters in variants.values() for a in adapters if a}


def check_held_out(
    variants: dict,
    split: str,
    fold: str | None,
    db_path: str | Path | None,
    overlaps: Callable[[str | None], bool] = lambda other: True,
) -> None:
    """Refuse to evaluate on held-out problems a variant's adapter (or one it was trained from)
    was trained on: every registered `agentK-vN` must come from runs on the evaluation's split
    (the fixed split, or the same fold), or from splits whose training problems `overlaps` says
    miss this split's held-out ones (classes, where the sets are known; a HumanEval fold's always
    meet the fixed split's)."""
    if SPLITS[split] != "held_out":
        return
    with store.open_db(db_path) as db:
        for name in sorted(variant_adapters(variants)):
            parsed = store.parse_adapter_name(name)
            try:
                splits = trained_splits(db, *parsed) if parsed else set()
            except store.NotFound:
                continue  # not registered: load_variant_adapters says so
            other = sorted(split_label(s) for s in splits if s != fold and overlaps(s))
            if other:
                raise EvalError(
                    f"{name} was trained on the training problems of {', '.join(other)}, "
                    f"which include held-out problems of {split_label(fold)}: evaluate "
                    "it with the fold it was trained on"
                )


def load_variant_adapters(policy: Any, variants: dict, db_path: str | Path | None) -> None:
    """Load every variant's adapters from the adapter registry (`agentK-vN` is agent K's version
    N), each unless the server has it from the version's folder; a name that is no version must
    be on the server already."""
    wanted = variant_adapters(variants)
    if not wanted or not hasattr(policy, "list_adapters"):
        return
    with store.open_db(db_path) as db:
        for name in sorted(wanted):
            parsed = store.parse_adapter_name(name)
            if not parsed:
                if name in policy.list_adapters():
                    continue
                raise EvalError(
                    f"adapter {name!r} is not on the server and is not a version's name "
                    "(agentK-vN, as `coteam adapters list` names them)"
                )
            try:
                row = store.get_adapter(db, *parsed)
            except store.NotFound as e:
                raise EvalError(
                    f"adapter {name!r} is not a version in this database "
                    "(`coteam adapters list` names them)"
                ) from e
            load_version(policy, name, row["path"])


@dataclass
class _Unit:
    """One task × variant × shape: its K samples run together, as one group."""

    index: int
    task: Task
    variant: str
    shape: str
    samples: list[int]


def plan(config: EvalConfig, tasks: Sequence[Task], done: set[tuple]) -> list[_Unit]:
    """What is left to run, task by task; the shape order rotates by task so no shape always
    goes first (a later shape can find the task's prompt in the server's prefix cache)."""
    units = []
    for i, task in enumerate(tasks):
        shapes = config.shapes[i % len(config.shapes) :] + config.shapes[: i % len(config.shapes)]
        for variant in config.variants:
            for shape in shapes:
                keys = [(task_name(task), shape, variant, g) for g in range(config.samples)]
                if not all(key in done for key in keys):
                    units.append(_Unit(i, task, variant, shape, list(range(config.samples))))
    return units


def _run_unit(
    unit: _Unit, config: EvalConfig, policy: Policy, db_path: str, server_wait_s: float
) -> list[dict]:
    """Run one group, score and record each episode; return its records."""
    _wait_for_server(policy, server_wait_s)  # after a crash: wait for the restart, don't fail
    size = config.team_size(unit.shape)
    given = config.variants[unit.variant]
    adapters = [given[i] if i < len(given) else None for i in range(size)]
    team = TeamSettings(unit.shape, size, config.turns, adapters, config.sampling)
    setup = EpisodeSetup(unit.task, team.for_task(unit.index))
    records = []
    for g, played in enumerate(play(setup, policy, db=db_path, samples=len(unit.samples))):
        result = played.result
        metrics = episode_metrics(result, played.scored)
        records.append(
            {
                "task": task_name(unit.task),
                "task_index": unit.index,
                "kind": unit.task.kind,
                "shape": unit.shape,
                "variant": unit.variant,
                "sample": g,
                "adapters": adapters,
                "episode_id": result.episode_id,
                **metrics,
                "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "machine": machine(),
            }
        )
    return records


def evaluate(
    config: EvalConfig,
    policy: Policy,
    out_dir: str | Path,
    db: str | Path | None = None,
    progress: bool = True,
    attempts: int = 3,
    max_failures: int = 3,
    server_wait_s: float = 900.0,
    command: str = "",
) -> list[dict]:
    """Run what DIR/episodes.jsonl lacks of tasks × variants × shapes × K samples, score and record
    each episode, append its line; return the records of the whole requested set.

    Each group starts only once the server answers /health (a managed server restarts itself
    after a crash; a group waits up to `server_wait_s` for it). A group that fails is tried
    again, up to `attempts` times. A group that still fails is left out, and starting again retries it; after
    `max_failures` such groups in a row the run stops with the error.
    """
    out_dir = Path(out_dir)
    db_path = str(db or default_db_path())
    check_held_out(config.variants, config.split, config.fold, db_path)
    _check_folder(config, out_dir, command)
    with store.open_db(db_path) as database:
        store.recover_interrupted(database)  # a killed run leaves its episodes 'running'
    tasks = eval_tasks(config)
    journal = out_dir / "episodes.jsonl"
    done = {record_key(r) for r in read_records(journal)}
    units = plan(config, tasks, done)
    total = config.episode_count(len(tasks))
    if units:
        load_variant_adapters(policy, config.variants, db_path)
        if any(not work_of(task).tested for task in tasks):
            # the writers' combiner embeds sentences: load the model before the first episode's
            # clock starts (4.5 s on a 2-core CPU), not inside whichever shape runs first
            embedding_model()
    bar = _progress_bar(total, total - len(units) * config.samples, progress)
    run = partial(
        _run_unit, config=config, policy=policy, db_path=db_path, server_wait_s=server_wait_s
    )

    def load(unit: _Unit) -> int:
        return requests_at_once(unit.shape, config.team_size(unit.shape))

    try:
        _journal_units(
            units, run, journal, done, bar, (config.concurrency, load), attempts, max_failures
        )
    finally:
        bar.close()
    wanted = episode_keys(config, tasks)
    return [r for r in read_records(journal) if record_key(r) in wanted]


def _journal_units(
    units: list[_Unit],
    run: Callable[[_Unit], list[dict]],
    journal: Path,
    done: set,
    bar,
    capacity: tuple[int, Callable[[_Unit], int]],
    attempts: int,
    max_failures: int,
) -> None:
    """Run the units in order, appending each one's records to the journal the moment it is done.
    `capacity` is (N, load): units start while the loads of those running (the requests each
    makes at once) stay within N, and one always runs, so every shape meets the same load. A
    failed unit is tried again after the others, up to `attempts` times, and `max_failures`
    units given up in a row stop the run with the last error."""
    most, load = capacity
    tries: dict[int, int] = defaultdict(int)
    given_up = 0
    waiting, running = deque(units), {}
    pool = ThreadPoolExecutor(max_workers=most)
    try:
        with open(journal, "a") as out:
            while waiting or running:
                busy = sum(load(u) for u in running.values())
                while waiting and (not running or busy + load(waiting[0]) <= most):
                    busy += load(waiting[0])
                    unit = waiting.popleft()
                    running[pool.submit(run, unit)] = unit
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    unit = running.pop(future)
                    try:
                        records = future.result()
                    except Exception as e:
                        tries[id(unit)] += 1
                        where = f"{task_name(unit.task)} {unit.shape} [{unit.variant}]"
                        log.error("%s failed (try %d): %s", where, tries[id(unit)], e)
                        if tries[id(unit)] < attempts:
                            waiting.append(unit)
                            continue
                        given_up += 1
                        if given_up >= max_failures:
                            raise
                        continue
                    given_up = 0
                    for record in records:
                        if record_key(record) not in done:
                            out.write(json.dumps(record) + "\n")
                            done.add(record_key(record))
                    out.flush()
                    os.fsync(out.fileno())  # what is in the journal is never run again
                    bar.update(len(records))
                    bar.set_postfix_str(f"{task_name(unit.task)} {unit.shape}", refresh=False)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # on Ctrl-C: finish what runs, start nothing


def pending(config: EvalConfig, out_dir: str | Path) -> int:
    """How many episodes of the run DIR/episodes.jsonl still lacks (0: no server is needed)."""
    done = {record_key(r) for r in read_records(Path(out_dir) / "episodes.jsonl")}
    return sum(len(u.samples) for u in plan(config, eval_tasks(config), done))


def _wait_for_server(policy: Any, timeout_s: float) -> None:
    """After a failure: wait until the server answers /health again (a restart takes minutes)."""
    if not hasattr(policy, "healthy"):
        return
    deadline = time.monotonic() + timeout_s
    while not policy.healthy():
        if time.monotonic() > deadline:
            raise EvalError(f"the vLLM server did not answer /health for {timeout_s:.0f} s")
        time.sleep(HEALTH_POLL_S)


def _progress_bar(total: int, done: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=done, unit="episode", desc="eval", disable=not enabled)


def run_eval(
    config: EvalConfig,
    policy: Policy,
    out_dir: str | Path,
    db: str | Path | None = None,
    progress: bool = True,
    command: str = "",
) -> dict:
    """Evaluate, then write results.json, report.md and the plots over the folder's whole run
    (every invocation's part of it); return the summary."""
    evaluate(config, policy, out_dir, db=db, progress=progress, command=command)
    whole, wanted, commands = folder_run(config, out_dir)
    records = [r for r in read_records(Path(out_dir) / "episodes.jsonl") if record_key(r) in wanted]
    summary = summarize(records, whole, len(wanted), command=commands)
    (Path(out_dir) / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_report(summary, out_dir, records)
    return summary
