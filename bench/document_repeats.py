"""What the long-form document says twice, before and after the environment leaves repeats out.

Reads the finished long-form episodes of a store (what `coteam eval --task writing --writing-set
longform --db FILE` or a long-form training run leaves) and rebuilds each document from its
writers' last replies, as the environment does (`agents.team.outline.document_sections`, each
section from its owner). For every episode it measures the redundancy of the sections as the
writers wrote them and of the document the reader gets, the same sections after
`agents.team.sentences.drop_repeats` (a sentence whose embedding's cosine with an earlier one
of the document is ≥ 0.9 is left out), with the long-form reward's measure (the worst pair of
sections: copied trigrams, near-duplicate sentences, paraphrase; `longform_reward`'s
`redundancy` and `document_redundancy`). Both are computed on the same
replies, so the difference is the editing alone, paired per episode. Printed per team shape:

    redundancy (writers / document)   mean over episodes
    ≤ 0.3                             documents at or under issue 12's target, of all
    left out                          share of the writers' sentences dropped as repeats
    words (writers / document)        mean words of the document
    p                                 Wilcoxon signed-rank, writers against document

Usage: python bench/document_repeats.py --db FILE [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy.stats import wilcoxon  # noqa: E402

import store  # noqa: E402
from agents.kinds import team_roles  # noqa: E402
from agents.tasks import longform_tasks  # noqa: E402
from agents.team.outline import document_sections  # noqa: E402
from agents.team.sentences import drop_repeats  # noqa: E402
from learner.writing_reward import longform_reward  # noqa: E402
from store.db import rows  # noqa: E402

TARGET = 0.3  # issue 12: redundancy between parts at most this


def episodes(db_path: str) -> list[dict]:
    """Each finished long-form episode of the store, measured as written and as edited."""
    db = store.open_db(db_path, migrate=False)
    ids = [
        row["id"]
        for row in rows(
            db,
            """SELECT e.id FROM episodes e JOIN tasks t ON t.id = e.task_id
               WHERE e.status = 'ok' AND t.source = 'longform' ORDER BY e.id""",
        )
    ]
    tasks = {task.source_id: task for task in longform_tasks("all")}
    out = []
    for episode in store.get_episodes(db, ids):
        task = tasks[episode["task"]["source_id"]]
        last = max(turn["turn"] for turn in episode["turns"])
        texts = [turn["completion"] for turn in episode["turns"] if turn["turn"] == last]
        roles = team_roles(task, episode["shape"], episode["team_size"])
        sections = document_sections(
            texts, task.extra["outline"], [role.sections for role in roles]
        )
        briefs = [section["brief"] for section in task.extra["outline"]]
        reward = longform_reward(sections, briefs, task.extra["target_words"])
        out.append(
            {
                "episode": episode["id"],
                "task": f"longform/{task.source_id}",
                "shape": episode["shape"],
                "redundancy": reward["redundancy"],
                "document_redundancy": reward["document_redundancy"],
                "left_out": reward["repeats_dropped"],
                "words": reward["words"],
                "document_words": sum(len(s.split()) for s in drop_repeats(sections)),
            }
        )
    return out


def table(records: list[dict]) -> str:
    by_shape: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_shape[r["shape"]].append(r)
    head = "| shape | episodes | redundancy (writers / document) | ≤ 0.3 (writers / document) "
    head += "| left out | words (writers / document) | p |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for shape, group in by_shape.items():
        n = len(group)
        before = [r["redundancy"] for r in group]
        after = [r["document_redundancy"] for r in group]
        changed = [b - a for b, a in zip(before, after, strict=True) if b != a]
        p = wilcoxon(changed).pvalue if changed else 1.0
        under = sum(v <= TARGET for v in before), sum(v <= TARGET for v in after)
        lines.append(
            f"| {shape} | {n} | {sum(before) / n:.3f} / {sum(after) / n:.3f} "
            f"| {under[0]} / {under[1]} of {n} | {sum(r['left_out'] for r in group) / n:.1%} "
            f"| {sum(r['words'] for r in group) / n:.0f} / "
            f"{sum(r['document_words'] for r in group) / n:.0f} | {p:.3g} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="a store with long-form episodes")
    parser.add_argument("--json", help="also write each episode's figures here")
    args = parser.parse_args()
    if not Path(args.db).exists():
        parser.error(f"{args.db} does not exist")
    records = episodes(args.db)
    if not records:
        parser.error(f"{args.db} has no finished long-form episodes")
    print(table(records))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
