"""The promotion gate's decision: paired per-task differences on its own validation split."""

from __future__ import annotations

import json

import pytest

from agents.tasks import split_tasks
from learner.config import GateSettings
from learner.promotion import GateResult, describe_gate, paired_scores, validation_tasks
from learner.reward_config import RewardWeights, SpeedBudget
from tests.scripted import ScriptedPolicy


def result(candidate, active, cand_pass=None, act_pass=None, **settings) -> GateResult:
    n = len(candidate)
    return GateResult(
        candidate, active, cand_pass or [None] * n, act_pass or [None] * n, GateSettings(**settings)
    )


def test_a_tie_is_never_promoted():
    """A candidate that changed nothing ties on every task: a mean gain of 0 does not pass."""
    same = [0.2, 0.9, 0.5, 0.0]
    tie = result(same, list(same), [False, True, True, False], [False, True, True, False])
    assert tie.reward_gain == 0 and tie.pass_drop_p == 1.0
    assert not tie.passed


def test_a_consistently_higher_joint_reward_with_the_same_passes_is_promoted():
    active = [0.1 * k for k in range(8)]
    candidate = [a + 0.1 for a in active]
    passes = [k % 2 == 0 for k in range(8)]
    better = result(candidate, active, passes, list(passes))
    assert better.reward_gain == pytest.approx(0.1)
    assert better.reward_gain_p < 0.01 and better.passed


def test_noise_around_zero_is_not_a_gain():
    """What timing noise looks like on a no-op candidate: tiny differences of both signs."""
    noise = result([0.5 + d for d in (1e-3, -1e-3, 2e-3, -5e-4, 1e-3, -2e-3)], [0.5] * 6)
    assert noise.reward_gain >= 0 and noise.reward_gain_p > 0.1
    assert not noise.passed


def test_a_higher_reward_bought_with_significantly_fewer_passes_is_rejected():
    """Seven tasks the serving team passed and the candidate failed: p = 0.5^7 < 0.05."""
    n = 10
    cand_pass = [False] * 7 + [True] * 3
    act_pass = [True] * 10
    worse = result([0.9 + k / 100 for k in range(n)], [0.5] * n, cand_pass, act_pass)
    assert worse.pass_drop_p == pytest.approx(0.5**7)
    assert not worse.passed
    one_loss = result([0.9 + k / 100 for k in range(n)], [0.5] * n, [False] + [True] * 9, act_pass)
    assert one_loss.pass_drop_p == pytest.approx(0.5) and one_loss.passed  # one task is noise


def test_min_gain_is_the_margin_to_beat():
    active = [0.1 * k for k in range(8)]
    assert not result([a + 0.05 for a in active], active, min_gain=0.1).passed
    assert result([a + 0.2 for a in active], active, min_gain=0.1).passed


def test_a_negative_min_gain_is_a_tolerance_for_trials():
    assert result([0.45], [0.5], min_gain=-0.1).passed
    assert not result([0.35], [0.5], min_gain=-0.1).passed


@pytest.mark.parametrize("fold", [None, "1/2", "2/2"])
def test_the_gate_has_its_own_validation_tasks(fold):
    tasks = validation_tasks("coding", 32, fold)
    assert len(tasks) == (32 if fold is None else 27)  # a fold of two: 27 of the other 82
    held_out = {t.source_id for t in split_tasks("coding", "held_out", fold)}
    train = {t.source_id for t in split_tasks("coding", "train", fold)}
    assert not {t.source_id for t in tasks} & (held_out | train)


def test_a_no_op_candidate_is_rejected_through_the_paired_run(tmp_path, monkeypatch):
    """A zero LoRA adapter answers exactly as the serving team under greedy decoding: the
    scripted policy stands for that (it ignores the adapter). Both teams run, every task pairs
    up, the gain is 0 and the candidate is rejected."""
    monkeypatch.setenv("COTEAM_HOME", str(tmp_path))
    tasks = split_tasks("summary", "validation")[:3]
    policy = ScriptedPolicy(lambda request: "A short summary of what the article says.")
    seen = []
    outcome = paired_scores(
        policy,
        (["agent1-v2", "agent2-v2"], ["agent1-v1", "agent2-v1"]),
        tasks,
        tmp_path / "coteam.db",
        GateSettings(tasks=3, concurrency=2),
        RewardWeights(),
        SpeedBudget(),
        on_progress=lambda done, total: seen.append((done, total)),
    )
    assert outcome.tasks == 3 and seen[-1] == (6, 6)
    assert {r.adapter for r in policy.requests} == {
        "agent1-v1",
        "agent2-v1",
        "agent1-v2",
        "agent2-v2",
    }
    assert outcome.reward_gain == pytest.approx(0.0, abs=0.02)  # speed differs a little
    assert not outcome.passed


def test_a_candidate_that_loses_tests_beyond_the_margin_is_rejected_whatever_its_reward():
    """Two of four problems lost: too few for the sign test (p = 0.25), but 50 points below the
    serving team's pass rate, past the non-inferiority margin (10 points)."""
    losing = result([0.9, 0.91, 0.92, 0.93], [0.5] * 4, [False, False, True, True], [True] * 4)
    assert losing.pass_drop_p == pytest.approx(0.25) and not losing.within_pass_margin
    assert not losing.passed
    assert result([0.9, 0.91, 0.92, 0.93], [0.5] * 4, [True] * 4, [True] * 4).passed


def test_the_gate_judges_the_reward_the_run_trained_on_so_a_rated_taste_is_promoted(
    tmp_path, monkeypatch
):
    """Raters preferred answers in the second person. A candidate that learnt it, and is
    otherwise the serving team (the same facts, the same verdict), wins on the blended reward
    the run trained on and is promoted; on the automatic reward alone it would not be."""
    from learner.preference import PreferenceExamples, fit_preference_model

    monkeypatch.setenv("COTEAM_HOME", str(tmp_path))
    examples = PreferenceExamples()
    facts = ["the bridge reopens in May", "rain stopped the match", "the council met", "a shop"]
    for k in range(16):
        fact = f"{facts[k % 4]} ({k})"
        examples.add_vote(f"You will see that {fact}.", f"It is reported that {fact}.", "left")
    preference = fit_preference_model(examples)
    weights = RewardWeights()
    assert preference.blend_weight(weights) > 0.5 * weights.human

    def answer(request):
        start = "You will see that" if request.adapter.endswith("-v2") else "It is reported that"
        return f"{start} the council approved the new plan for the town centre on Tuesday."

    tasks = split_tasks("summary", "validation")[:5]
    teams = (["agent1-v2", "agent2-v2"], ["agent1-v1", "agent2-v1"])
    settings = GateSettings(tasks=5, concurrency=2)
    outcome = paired_scores(
        ScriptedPolicy(answer), teams, tasks, tmp_path / "coteam.db", settings, weights,
        SpeedBudget(), preference=preference,
    )  # fmt: skip
    assert outcome.passed, outcome.to_json()
    report = outcome.to_json()
    assert report["preference_weight"] == pytest.approx(preference.blend_weight(weights))
    auto_gain = report["candidate_auto_score"] - report["active_auto_score"]
    assert report["reward_gain"] > auto_gain + 0.1  # the preference, on top of the same verdicts
    automatic_only = paired_scores(
        ScriptedPolicy(answer), teams, tasks, tmp_path / "coteam.db", settings, weights,
        SpeedBudget(),
    )  # fmt: skip
    assert not automatic_only.passed and automatic_only.preference_weight == 0
    # the mirror: the serving team says what raters prefer. The candidate is rejected, and the
    # decision goes into the adapter's record as JSON (a rejected rated retrain once failed its
    # run there: the blend's numpy scalars made `passed` a numpy bool)
    mirrored = paired_scores(
        ScriptedPolicy(answer), teams[::-1], tasks, tmp_path / "coteam.db", settings, weights,
        SpeedBudget(), preference=preference,
    )  # fmt: skip
    assert json.loads(json.dumps(mirrored.to_json()))["passed"] is False


def test_a_taste_learnt_in_the_sampled_answers_is_judged_on_samples_drawn_alike(
    tmp_path, monkeypatch
):
    """A retrain can move the answers the app samples (T = 0.8) and leave the greedy one as it
    was: the greedy gate then sees a tie; with `samples` it judges sampled answers, both teams'
    drawn with the same seeds, and promotes the taste."""
    from learner.preference import PreferenceExamples, fit_preference_model

    monkeypatch.setenv("COTEAM_HOME", str(tmp_path))
    examples = PreferenceExamples()
    for k in range(16):
        fact = f"the council met on day {k}"
        examples.add_vote(f"You will see that {fact}.", f"It is reported that {fact}.", "left")
    preference = fit_preference_model(examples)

    def answer(request):
        learnt = request.adapter.endswith("-v2") and request.temperature > 0
        start = "You will see that" if learnt else "It is reported that"
        return f"{start} the council approved the new plan for the town centre on Tuesday."

    tasks = split_tasks("summary", "validation")[:5]
    teams = (["agent1-v2", "agent2-v2"], ["agent1-v1", "agent2-v1"])
    scores = {}
    for samples in (1, 3):
        policy = ScriptedPolicy(answer)
        scores[samples] = paired_scores(
            policy, teams, tasks, tmp_path / "coteam.db", GateSettings(tasks=5, samples=samples),
            RewardWeights(), SpeedBudget(), preference=preference,
        )  # fmt: skip
        seeds = {
            team: sorted(
                str(r.seed) for r in policy.requests if r.adapter.endswith(f"-v{2 - team}")
            )
            for team in (0, 1)
        }
        assert seeds[0] == seeds[1]  # the two teams' answers drawn alike
        assert samples == 1 or "None" not in seeds[0]
    assert not scores[1].passed and scores[1].reward_gain == pytest.approx(0, abs=0.02)
    assert scores[3].passed, scores[3].to_json()
    assert scores[3].tasks == 5 and scores[3].pass_rates == (None, None)
    assert "x 3 sampled answers" in describe_gate(scores[3].to_json())


def test_the_pass_test_counts_the_tasks_whose_pass_shares_differ():
    """With several answers a task, its pass figure is the share that passed; the sign test
    counts the tasks where the shares differ, as McNemar's counts those where one team passed."""
    shares = result([0.9] * 4, [0.5] * 4, [0.5, 1.0, 0.25, 1.0], [1.0, 1.0, 0.75, 1.0])
    assert shares.pass_drop_p == pytest.approx(0.25) and shares.pass_rates == (0.6875, 0.9375)
    assert not shares.within_pass_margin and not shares.passed
    better = result([0.9] * 4, [0.5] * 4, [1.0, 1.0, 0.75, 1.0], [0.5, 1.0, 0.75, 1.0])
    assert better.pass_drop_p == 1.0 and better.passed
