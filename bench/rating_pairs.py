"""Which pair of a task's stored answers should a person rate? Decisive votes, counted.

An A/B vote teaches the preference model only where it is not a tie. For every task of a
database with several finished answers (its newest --candidates), the simulated rater of
bench/ratings.py (it prefers the answer with --property; a tie when both or neither have it)
votes on one pair a task, the tasks one after another, and this counts the votes that were not
ties, for each way of picking the pair:

    first       the first two answers stored (what the A/B mode's two samples are)
    random      two at random
    unlike      the two the sentence-embedding model finds least alike
    queue       what the rating queue offers (`learner.rating_queue.pick_pair`): the two that
                the preference model, refitted on the votes before at its fixed penalty as the
                queue fits it, scores furthest apart; the least alike until it tells them apart
    any         the tasks that have a decisive pair at all (the most any way could get)

Each way runs over --orders orders of the tasks (the stored order, then shuffles), since the
queue's picks depend on which votes came first.

--sample N first fills --db with --candidates answers to each of N training tasks, sampled
by the untrained team at T = 0.8 as bench/ratings.py samples them (starts a vLLM server).

Usage: python bench/rating_pairs.py --db FILE [--task summary|coding] [--property NAME]
                                    [--candidates 8] [--orders 3] [--sample N] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from preference import KINDS  # noqa: E402  (bench/preference.py; puts the repository first)
from ratings import AGENTS, PROPERTIES, team, vote  # noqa: E402

import store  # noqa: E402
from learner.preference import L2, PreferenceExamples, features, fit_on_features  # noqa: E402
from learner.rating_queue import pick_pair  # noqa: E402
from store.db import rows  # noqa: E402

WAYS = ("first", "random", "unlike", "queue")


def stored_answers(db_path: Path, task: str, candidates: int) -> list[list[str]]:
    """Each task's newest `candidates` finished answers (oldest first), for the tasks of the
    kind with two or more, in the order they were stored."""
    with store.open_db(db_path) as db:
        found = rows(
            db,
            """
            SELECT e.task_id, e.final_output FROM episodes e JOIN tasks t ON t.id = e.task_id
            WHERE t.kind = :kind AND e.status = 'ok' AND trim(coalesce(e.final_output, '')) <> ''
            ORDER BY e.task_id, e.id
            """,
            {"kind": KINDS[task]},
        )
    by_task: dict[int, list[str]] = {}
    for row in found:
        by_task.setdefault(row["task_id"], []).append(row["final_output"])
    return [texts[-candidates:] for texts in by_task.values() if len(texts) >= 2]


def decisive_votes(
    answers: list[list[str]], phi: dict[str, np.ndarray], order: list[int], way: str, has, seed: int
) -> int:
    """The rater's votes, one task after another in `order`, on the pair `way` picks: how many
    were not ties. `phi`: each answer's features (`learner.preference.features`), computed once."""
    rng, examples, decisive, model = random.Random(seed), PreferenceExamples(), 0, None
    for task in order:
        texts = answers[task]
        if len(set(texts)) < 2:  # the queue offers no pair of one text
            continue
        if way == "first":
            i, j = 0, 1
        elif way == "random":
            i, j = rng.sample(range(len(texts)), 2)
        else:  # unlike (its model stays None: the least alike) or queue
            i, j, *_ = pick_pair(texts, model)
        choice = vote("prefers", has, texts[i], texts[j], rng)
        decisive += choice != "tie"
        if way == "queue":  # the vote stored, the model refitted as the queue fits it
            examples.add_vote(texts[i], texts[j], choice)
            examples.rating_ids.add(len(examples.pairs))
            fitted = np.array([phi[text] for text in examples.texts])
            model = fit_on_features(fitted, examples, l2=L2)
    return decisive


def sample(db_path: Path, args) -> None:
    """--candidates answers to each of the first --sample training tasks, into --db."""
    from agents.serving.models import DEFAULT_MODEL, provision_model
    from agents.serving.server import ServerConfig, connect_or_start
    from agents.tasks import split_tasks
    from agents.team.graph import Sampling
    from learner.episode import play
    from store.paths import venv_python

    model_path = provision_model(os.environ.get("COTEAM_MODEL", DEFAULT_MODEL))
    config = ServerConfig(model=str(model_path), agents=AGENTS, python=venv_python("vllm"))
    tasks = split_tasks(args.task, "train")[: args.sample]
    sampling = Sampling(max_tokens=192)  # T = 0.8, as bench/ratings.py samples

    t0 = time.perf_counter()
    with connect_or_start(None, config) as client, ThreadPoolExecutor(max_workers=4) as pool:

        def one(task):
            return play(team(task, sampling), client, db=db_path, samples=args.candidates)

        list(pool.map(one, tasks))
    print(f"sampled {args.candidates} answers to each of {len(tasks)} {args.task} tasks "
          f"into {db_path}, {time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True, help="a CoTeam database (with --sample: created)")
    parser.add_argument("--task", choices=sorted(PROPERTIES), default="summary")
    parser.add_argument("--property", help="what the rater prefers (default: the task's first)")
    parser.add_argument("--candidates", type=int, default=8, help="a task's newest answers")
    parser.add_argument("--orders", type=int, default=3, help="orders of the tasks")
    parser.add_argument("--sample", type=int, default=0, help="first sample N tasks into --db")
    parser.add_argument("--seed", type=int, default=0, help="the shuffles and random pairs")
    args = parser.parse_args()
    args.property = args.property or next(iter(PROPERTIES[args.task]))
    if args.property not in PROPERTIES[args.task]:
        parser.error(f"--property for {args.task}: {', '.join(PROPERTIES[args.task])}")
    if args.candidates < 2 or args.orders < 1 or args.sample < 0:
        parser.error("--candidates must be >= 2, --orders >= 1, --sample >= 0")
    db_path = Path(args.db)
    if args.sample:
        sample(db_path, args)
    elif not db_path.is_file():
        parser.error(f"no database at {db_path} (--sample N fills a new one)")
    has = PROPERTIES[args.task][args.property]
    answers = stored_answers(db_path, args.task, args.candidates)
    if not answers:
        parser.error(f"{db_path} has no {args.task} task with two finished answers")
    with_property = [has(text) for texts in answers for text in texts]
    reachable = sum(len({has(text) for text in texts}) > 1 for texts in answers)
    print(f"{len(answers)} tasks, up to {args.candidates} answers each; "
          f"{sum(with_property) / len(with_property):.0%} have {args.property}; "
          f"{reachable} tasks have a decisive pair (any)")  # fmt: skip
    shuffler = random.Random(args.seed)
    orders = [list(range(len(answers)))] + [
        shuffler.sample(range(len(answers)), len(answers)) for _ in range(args.orders - 1)
    ]
    texts = sorted({text for task in answers for text in task})
    phi = dict(zip(texts, features(texts), strict=True))
    counts = {way: [] for way in WAYS}
    for n, (order, way) in enumerate(itertools.product(orders, WAYS)):
        counts[way].append(decisive_votes(answers, phi, order, way, has, args.seed + n))
    print(f"decisive votes of {len(answers)}, per order of the tasks:")
    for way, found in counts.items():
        mean = sum(found) / len(found)
        print(f"  {way:7s} {' '.join(f'{c:3d}' for c in found)}   mean {mean:5.1f}")


if __name__ == "__main__":
    main()
