"""Every benchmark script still starts: its imports resolve and `--help` prints its usage.

The benchmarks are not run by the suite (they are long), so a moved name would otherwise break
them silently: `bench/ratings.py` once imported a function that had moved to `agents/tasks.py`.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize("script", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_bench_script_prints_its_usage(script: Path):
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_the_ratings_experiments_in_the_docs_report_and_plot_again(tmp_path: Path):
    """The figures docs/runs/training-log.md quotes are re-read from their JSON: each run's report (the
    rater against the control where a run has both arms) and one plot with a group of bars per
    run (coding and writing raters together)."""
    docs = BENCH.parent / "docs" / "runs" / "training"
    runs = sorted(docs.glob("ratings-arms-*.json")) + sorted(docs.glob("ratings-summary-*.json"))
    assert len(runs) >= 4
    png = tmp_path / "runs.png"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "ratings.py"),
            "--replot",
            *map(str, runs),
            "--plot",
            str(png),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = {run: json.loads(run.read_text()) for run in runs}
    both = [run for run in runs if {"prefers", "none"} <= figures[run]["arms"].keys()]
    assert len(both) >= 4
    assert done.stdout.count("the rater's arm against the control's") == len(both)
    # and together: one row per run with both arms, under its file's name, and their medians
    for run in both:
        assert re.search(rf"^  {re.escape(run.stem)} +[+-]\d", done.stdout, re.M), run.stem
    properties = [figures[run]["property"] for run in both]
    tables = {p for p in properties if properties.count(p) >= 2}  # a table needs two runs
    assert tables and done.stdout.count("  median ") == len(tables)
    assert png.stat().st_size > 10_000


def test_replotting_a_file_from_before_the_arms_says_so():
    """The first experiments wrote one rater a file (no `before`, no `arms`); replotting one
    names it instead of failing on a missing key."""
    first = BENCH.parent / "docs" / "runs" / "training" / "ratings-typed-50.json"
    assert "arms" not in json.loads(first.read_text())
    done = subprocess.run(
        [sys.executable, str(BENCH / "ratings.py"), "--replot", str(first)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "written before the arms" in done.stderr and first.name in done.stderr
    assert "Traceback" not in done.stderr


def bench_module(name: str):
    """A benchmark script of bench/ loaded as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_raters_taste_is_checkable():
    """`bench/ratings.py`: each simulated rater's taste is a check of the text (writing that says
    who said it, code whose names say what they hold), and nothing else counts as that."""
    ratings = bench_module("ratings")
    attributed = ratings.PROPERTIES["summary"]["attributed"]
    assert attributed("Police said he had walked bare-chested for about two miles.")
    assert attributed("The detective told reporters little.")
    assert attributed('He would have "been very distinctive", the appeal read.')
    assert attributed("According to the council, the road reopens in May.")
    assert not attributed("Ron Strathdee photographed the Northern Lights over Peel Hill.")
    assert not attributed('A sign marked "no" stood at the gate.')  # a quoted word, no speaker
    assert not attributed("The saying goes that the sayings are old.")  # not a word of reporting
    second_person = ratings.PROPERTIES["summary"]["second-person"]
    assert second_person("If you live nearby, your road may close.")
    assert not second_person("Residents nearby may see their road close.")
    descriptive = ratings.PROPERTIES["coding"]["descriptive"]
    assert descriptive("def f(xs):\n    total = 0\n    for value in xs:\n        total += value\n")
    assert descriptive("def f(xs):\n    return sum(xs)\n")  # binds nothing: nothing too short
    assert descriptive("def f(xs):\n    for _ in xs:\n        pass\n")  # `_` is no name
    assert not descriptive("def f(xs):\n    for i in range(len(xs)):\n        pass\n")
    assert not descriptive("def f(xs):\n    return [x for x in xs]\n")  # a comprehension's
    assert not descriptive("try:\n    pass\nexcept ValueError as e:\n    pass\n")
    assert not descriptive("def f(xs):\n    return (\n")  # does not parse
    opens_with_the = ratings.PROPERTIES["summary"]["opens-with-the"]
    assert opens_with_the("\nThe road reopens in May, the council said.")
    assert not opens_with_the("Theresa May opened the road.")  # a name, not the article
    assert not opens_with_the("A road reopens. The council said so.")  # "The" later only


def test_the_thumbs_rater_thumbs_up_its_taste_and_the_control_flips_a_coin():
    """`bench/ratings.py --rating thumbs`: the rater's thumb follows the property alone; the
    control's does not depend on the text."""
    ratings = bench_module("ratings")
    attributed, rng = ratings.PROPERTIES["summary"]["attributed"], random.Random(0)
    said, plain = "Police said the road reopens.", "The road reopens."
    assert [ratings.thumb("prefers", attributed, t, rng) for t in (said, plain)] == [1, -1]
    for text in (said, plain):
        coin = [ratings.thumb("none", attributed, text, rng) for _ in range(40)]
        assert set(coin) == {1, -1}


def test_the_counterbalanced_arms_vote_opposite_ways_and_their_divergence_is_reported():
    """`bench/ratings.py --rater counter`: the averse rater is the mirror of the one who prefers
    the property (the same ties), and several seeds' runs pool into one paired test."""
    ratings = bench_module("ratings")
    commented, rng = ratings.PROPERTIES["coding"]["commented"], random.Random(0)
    plain, noted = "def f():\n    return 1\n", "def f():\n    # one\n    return 1\n"
    for left, right, prefers in (
        (plain, noted, "right"),
        (noted, plain, "left"),
        (plain, plain, "tie"),
    ):
        assert ratings.vote("prefers", commented, left, right, rng) == prefers
        averse = {"left": "right", "right": "left", "tie": "tie"}[prefers]
        assert ratings.vote("averse", commented, left, right, rng) == averse
    assert [ratings.thumb("averse", commented, t, rng) for t in (noted, plain)] == [-1, 1]

    def run(seed, prefers, averse):
        after = lambda props: [{"property": p, "pass": 0.5} for p in props]  # noqa: E731
        return {
            "property": "commented", "seed": seed, "before": after([0.5] * 4), "samples": 1,
            "prompts": ["HumanEval/0", "HumanEval/1", "HumanEval/2", "HumanEval/3"],
            "arms": {"prefers": {"after": after(prefers)}, "averse": {"after": after(averse)}},
        }  # fmt: skip

    runs = [run(0, [1, 1, 0.5, 1], [0, 0, 0.5, 0]), run(1, [1, 1, 1, 1], [0, 0, 0, 1])]
    said = ratings.across(runs, ["seed0", "seed1"])
    assert "commented, counterbalanced, 2 run(s)" in said
    assert "over 8 prompts x runs: divergence +75.0 points, sign test p = 0.0312" in said


def test_a_ratings_run_names_the_code_it_measured():
    """Runs at one N read alike in the plot unless each names its commit (φ, penalties and the
    blend changed between runs of the same command)."""
    ratings = bench_module("ratings")
    revision = ratings.code_revision()
    assert revision and " " not in revision
    figures = {
        "property": "attributed", "ratings": 50, "rating": "ab", "steps": 10, "group_size": 4,
        "human_weight": 0.8, "held_out": 30, "samples": 8,
    }  # fmt: skip
    assert "code" not in ratings.run_label(figures)  # runs from before it was recorded
    assert ratings.run_label({**figures, "code": revision}).endswith(f", code {revision}")


def test_the_retrain_signal_counts_the_pairs_the_preference_can_reorder(tmp_path: Path):
    """`bench/ratings.py`'s account of a retrain's rollouts, on a real database: of the pairs of
    a group's samples that differ in the property, only those the environment scored alike (the
    same verdict) can the preference reorder, so they are counted apart."""
    import store

    ratings = bench_module("ratings")
    said, plain = 'He said "it works well".', "It works."
    with store.open_db(tmp_path / "coteam.db") as db:
        task = store.create_task(db, "writing", "Summarise.")
        for group, samples in (
            ("g1", [(said, 1.0), (plain, 1.0), (plain, 0.0)]),  # 2 pairs differ, 1 scored alike
            ("g2", [(said, 0.0), (said, 1.0)]),  # none differ
        ):
            for i, (text, verdict) in enumerate(samples):
                episode = store.start_episode(
                    db, task, shape="single", roles=["writer"], group_id=group, sample_index=i
                )
                store.finish_episode(db, episode, text)
                store.record_rewards(db, episode, {"verdict": verdict}, verdict, {})
    signal = ratings.training_signal(tmp_path / "coteam.db", 0, ratings.attributed)
    assert signal["groups"] == 2 and signal["informative"] == 0  # no preference was added
    assert signal["pairs"] == {"differing": 2, "scored_alike": 1}


@pytest.mark.integration
def test_the_learner_bench_gives_trl_the_same_start_as_coteam(model_path: Path):
    """`bench/learner.py` hands TRL the single agent's view as text that continues its begun reply
    (the environment's opening: the problem's head), as vLLM continues it for CoTeam; a chat
    prompt would close that reply and open another, and every completion scored 0. Scored as
    CoTeam scores `single`, a right body beats a wrong one."""
    from transformers import AutoTokenizer

    bench = bench_module("learner")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    task = next(t for t in bench.bench_tasks(2) if t.entry_point == "sort_third")
    roles, observations = bench.team_view(task, "single", 1)
    prompt = bench.chat_prompt(tokenizer, observations[0])
    assert roles[0].reply_start and prompt.endswith(roles[0].reply_start)
    assert prompt.count("<|im_start|>assistant") == 1
    right = "    l = list(l)\n    l[::3] = sorted(l[::3])\n    return l\n```"
    wrong = "    return l\n```"
    assert bench.coding_score(task, roles, [right]) > bench.coding_score(task, roles, [wrong])


def test_the_turns_bench_judges_an_episodes_first_turn_again_and_pairs_it_with_its_last(
    tmp_path: Path,
):
    """`bench/class_turns.py`: a two-turn episode's first turn (its first methods, merged and
    judged again) against the episode's end. A team whose get_gpa is right only once it has seen
    the verdict (a scripted policy: graph logic) fails a test class after its first turn and
    passes the class after its second; a team of another size in the folder is left out."""
    from agents.kinds.class_team import run_class_episode
    from agents.kinds.classes import class_problem
    from tests.test_classes import WrongThenRight, team_of

    bench = bench_module("class_turns")
    problem = class_problem(4)
    episode = run_class_episode(problem, WrongThenRight(problem), team_of("parallel", turns=2))
    row = episode.summary() | {"sample": 0, "turns": 2, "variant": "base"}
    other = row | {"dealt": [problem.methods]}  # one agent: not the team of 2
    (tmp_path / "episodes.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(other) + "\n")
    found = bench.episodes([str(tmp_path)], agents=2, turns=2)
    assert list(found) == [("parallel@base", "ClassEval_4")]
    assert found[("parallel@base", "ClassEval_4")]["dealt"] == row["dealt"]
    first = bench.first_turn(found[("parallel@base", "ClassEval_4")])
    assert not first["class_passed"] and row["class_passed"]
    c = bench.compare([first], [row])
    assert (c["second_turn"], c["better"], c["worse"]) == (1, 1, 0)
    assert c["method_one"] < c["method_more"] == 1.0
    assert c["tokens_x"] > 1  # the second turn's rewrites are on the critical path
    c = bench.compare([first], [first])
    assert c["second_turn"] == 0 and c["better"] == c["worse"] == 0


def test_the_call_trend_counts_a_training_runs_sampled_team_episodes(tmp_path, capsys):
    """`bench/teammate_calls.py --db --run`: the implied teammate calls a training run's sampled
    team episodes write, in play order; the gate's greedy episodes are not the run's samples."""
    import store
    from agents.kinds.class_team import class_reward, run_class_episode
    from agents.kinds.classes import class_problem
    from learner.class_train import record_class_episode
    from tests.test_class_train import SAMPLED, TWO, WithTokens

    bench = bench_module("teammate_calls")
    problem = class_problem(0)  # `filter` implies calls to its teammate's methods
    db_path = tmp_path / "coteam.db"
    with store.open_db(db_path) as db:
        run = store.start_training_run(db, "cli")
    sampled = run_class_episode(problem, WithTokens(problem), replace(TWO, sampling=SAMPLED))
    for g in range(4):
        record_class_episode(db_path, sampled, class_reward(sampled), [], "g", g, SAMPLED)
    greedy = run_class_episode(problem, WithTokens(problem), TWO)
    record_class_episode(db_path, greedy, class_reward(greedy), [])  # as the gate keeps one
    with store.open_db(db_path) as db:
        store.finish_training_run(db, run)
    bench.training_trend(str(db_path), run, 2)
    out = capsys.readouterr().out
    assert "4 sampled team episodes in 2 parts" in out
    written = "(2 episodes): 2 implied calls, 2 written (100.0%), 2 of them passing; coordination "
    assert out.count(written + "credit 1.000") == 2
    assert "Fisher's exact p = 1" in out


def test_the_call_trend_tests_only_the_classes_both_parts_played(capsys):
    """Parts of different classes are not compared (that would compare the classes); parts that
    share classes are compared on those alone."""
    bench = bench_module("teammate_calls")
    a, b = ("ClassEval_0", 4, 0, 0, 0.0), ("ClassEval_1", 4, 4, 1, 2.0)
    bench.print_trend(7, [[a], [b]])
    out = capsys.readouterr().out
    assert "played no class in common: no test" in out and "Fisher" not in out
    bench.print_trend(7, [[a, b], [a, b, ("ClassEval_2", 4, 4, 0, 0.0)]])
    out = capsys.readouterr().out
    assert "on the 2 classes both played: 4 of 8 against 4 of 8, Fisher's exact p = 1" in out
    assert "part 2 (3 episodes): 12 implied calls, 8 written (66.7%), 1 of them passing" in out


def test_pooled_class_evaluations_pair_every_class_of_them_all(tmp_path):
    """`bench/class_pool.py`: one evaluation pooled alone is its own report; two of different
    classes are one report over both, with only the rows both have; the same class twice, or
    folders run with other settings, are refused."""
    from learner.class_eval import label

    bench = bench_module("class_pool")
    runs = BENCH.parent / "docs" / "runs" / "eval"
    held_out = runs / "classes-cross-partial-2026-12-07"
    own = json.loads((held_out / "results-agents2-samples1.json").read_text())
    alone = bench.pooled([held_out], 2, 1, 0.0)
    assert alone["figures"] == own["figures"] and alone["paired"] == own["paired"]
    # the same shapes on other classes: 3 of all 64 that are not held out
    other = tmp_path / "other"
    other.mkdir()
    rows = [json.loads(x) for x in (held_out / "episodes.jsonl").read_text().splitlines()]
    everything = runs / "classes-untrained-all64-2026-12-05"
    spare = [json.loads(x) for x in (everything / "episodes.jsonl").read_text().splitlines()]
    picked = ["ClassEval_4", "ClassEval_5", "ClassEval_6"]
    kept = [r for r in spare if r["task_id"] in picked]
    (other / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    (other / "results-agents2-samples1.json").write_text(
        json.dumps(own | {"classes": picked, "command": "coteam eval B"})
    )
    both = bench.pooled([held_out, other], 2, 1, 0.0)
    assert both["classes"] == own["classes"] + picked
    assert set(both["figures"]) == {"single", "single_incremental", "parallel"}
    single = [r for r in rows if r["task_id"] in own["classes"]] + kept
    assert both["figures"]["single"]["classes"] == 19
    assert both["figures"]["single"]["test_classes_passed"] == sum(
        r["test_classes_passed"] for r in single if label(r) == "single"
    )
    assert both["paired"]["parallel"]["classes"] == 19
    assert both["command"].endswith("; coteam eval B")
    with pytest.raises(SystemExit, match="judges classes another folder judged"):
        bench.pooled([held_out, held_out], 2, 1, 0.0)
    (other / "results-agents2-samples1.json").write_text(
        json.dumps(own | {"classes": picked, "max_tokens": 128})
    )
    with pytest.raises(SystemExit, match="different tokens per method"):
        bench.pooled([held_out, other], 2, 1, 0.0)
