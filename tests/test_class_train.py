"""Class teams in the learner: each agent's calls (one per method) trained with their joint
sample's advantage, class episodes recorded in the store, class versions of their own."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

import store
from agents.kinds.class_team import (
    CLASS_GREEDY,
    class_reward,
    recombine_classes,
    run_class_episode,
)
from agents.kinds.classes import class_problem
from agents.serving.policy import Completion
from agents.team.graph import Sampling, TeamSettings
from learner.class_train import (
    class_training_problems,
    class_validation_problems,
    cross_classes,
    record_class_episode,
)
from learner.config import MAGRPOConfig, TrainArgs
from learner.registry import work_kind
from learner.train import Group, advantages, agent_samples, training_tasks
from tests.test_classes import Scripted

TWO = TeamSettings(agents=2, sampling=CLASS_GREEDY)  # a class team of two, greedy
# sampled, keeping each call's token ids and log-probabilities (the learner's)
SAMPLED = replace(CLASS_GREEDY, temperature=0.8, logprobs=True)


class WithTokens(Scripted):
    """The canonical methods, with token ids as the server returns them when asked: the prompt
    one id per word of the view, the completion one per line of the method."""

    def generate(self, requests, on_token=None):
        out = []
        for request, completion in zip(requests, super().generate(requests), strict=True):
            words = " ".join(m["content"] for m in request.messages).split()
            lines = completion.text.splitlines()
            out.append(
                Completion(
                    completion.text, request.adapter, len(words), len(lines), 0.0, 0.0, "stop",
                    prompt_token_ids=[len(w) for w in words],
                    token_ids=[len(line) for line in lines],
                    token_logprobs=[-0.5] * len(lines) if request.logprobs else None,
                )
            )  # fmt: skip
        return out


def test_each_agent_trains_every_method_it_wrote_with_its_joint_samples_advantage():
    problem = class_problem(4)  # six methods: three each for a team of two
    policy = WithTokens(problem)
    episodes = [
        run_class_episode(problem, policy, TeamSettings(agents=2, sampling=SAMPLED))
        for _ in range(2)
    ]
    assert [len(e.calls(agent, 0)) for e in episodes for agent in (0, 1)] == [3, 3, 3, 3]
    samples, owners = agent_samples(episodes, 1, 0)
    assert owners == [0, 0, 0, 1, 1, 1]
    assert [s.completion_ids for s in samples] == [c.token_ids for c in episodes[0].calls(1, 0)] * 2
    assert all(s.sampling_logprobs for s in samples)
    # joint rewards 1 and 0: sample 0's calls carry +0.5, sample 1's −0.5, every agent alike
    rewards = torch.tensor([1.0, 0.0])
    run = SimpleNamespace(args=SimpleNamespace(agents=2, magrpo=MAGRPOConfig()))
    batch = advantages(run, [Group(episodes, rewards, rewards.expand(2, -1), [{}, {}])])
    for agent in (0, 1):
        calls, per_group = batch.per_agent[agent]
        assert len(calls) == 6
        assert torch.cat(per_group).tolist() == [0.5] * 3 + [-0.5] * 3
    assert batch.signalled == 1 and batch.skipped == 0


def test_a_class_episode_is_recorded_with_each_agents_methods_and_the_reward(tmp_path):
    problem = class_problem(4)
    episode = run_class_episode(problem, WithTokens(problem), TWO)
    scored = class_reward(episode)
    db_path = tmp_path / "coteam.db"
    first = record_class_episode(db_path, episode, scored, ["agent1-v2", None], "g", 1)
    again = record_class_episode(db_path, episode, scored, ["agent1-v2", None])
    with store.open_db(db_path) as db:
        one, two = store.get_episodes(db, [first, again])
    assert one["task_id"] == two["task_id"]  # a class is one task, however often it is written
    assert one["shape"] == "class_parallel" and one["status"] == "ok"
    assert one["adapter_versions"] == [2, 0] and one["group_id"] == "g"
    assert one["final_output"] == episode.output
    for agent, methods in enumerate(episode.dealt):
        [turn] = [t for t in one["turns"] if t["agent"] == agent]
        for method in methods:
            assert f"def {method}(" in turn["completion"]
    assert one["reward"] == pytest.approx(scored["reward"])
    assert one["rewards"]["tests"] == 1.0 and one["rewards"]["whole_class"] == 1.0


def test_a_class_run_trains_on_the_class_train_split_and_its_versions_are_its_own(tmp_path):
    args = TrainArgs(task="class", fold="2/4")
    args.check()
    trained = {p.task_id for p in training_tasks(args)}
    assert trained == {p.task_id for p in class_training_problems("2/4", None)}
    assert not trained & {p.task_id for p in class_validation_problems("2/4", 64)}
    assert work_kind("class") == "class" and work_kind("coding") == "coding"
    TrainArgs(task="class", agents=1).check()  # the control: one agent, GRPO
    with pytest.raises(ValueError, match="1 on classes"):
        TrainArgs(task="coding", agents=1).check()
    TrainArgs(task="class", magrpo=MAGRPOConfig(joint_mode="cross")).check()
    with pytest.raises(ValueError, match="one-turn"):
        TrainArgs(task="class", turns=2, magrpo=MAGRPOConfig(joint_mode="cross")).check()
    with store.open_db(tmp_path / "coteam.db") as db:  # the schema takes a class version
        row = store.register_adapter(db, 0, str(tmp_path / "a"), version=1, kind="class")
        store.activate_adapter(db, 0, row["version"])
        assert store.active_adapters(db, "class")[0]["version"] == 1
        assert store.active_adapters(db, "coding") == {}


def test_with_calls_trains_only_on_classes_where_a_method_implies_a_teammates_call():
    """The curriculum: of the train split, the classes whose dealt methods imply a call across
    agents (ClassEval_5's `interpret` calls `display`, dealt to the other agent), not those
    whose implied calls stay within one agent's methods or that imply none."""
    from agents.kinds.class_team import teammate_calls
    from agents.kinds.classes import deal

    args = TrainArgs(task="class", with_calls=True)
    args.check()
    picked = [p.task_id for p in training_tasks(args)]
    everything = class_training_problems(None, None)
    assert 0 < len(picked) < len(everything) and "ClassEval_5" in picked
    assert picked == [
        p.task_id for p in everything if teammate_calls(p, deal(p, 2), "")
    ]  # fmt: skip
    assert [p.task_id for p in training_tasks(replace(args, task_limit=3))] == picked[:3]
    for wrong in (TrainArgs(with_calls=True), TrainArgs(task="class", agents=1, with_calls=True)):
        with pytest.raises(ValueError, match="--with-calls .* class team of 2 to 4"):
            wrong.check()


def test_a_group_of_one_agent_is_the_single_shape_and_a_group_of_two_the_team(tmp_path):
    """With --incremental, each of them seeing the methods it wrote before (a class only)."""
    from learner.class_train import play_classes, trained_shape

    problem = class_problem(4)
    db_path = tmp_path / "coteam.db"
    for agents, incremental, shape in (
        (1, False, "class_single"),
        (2, False, "class_parallel"),
        (1, True, "class_single_incremental"),
        (2, True, "class_parallel_incremental"),
    ):
        TrainArgs(task="class", agents=agents, incremental=incremental).check()
        team = TeamSettings(
            trained_shape(agents, incremental), agents, sampling=Sampling(logprobs=True)
        )
        played = play_classes(problem, WithTokens(problem), 2, team, db_path=db_path)
        assert [len(e.dealt) for e, _ in played] == [agents, agents]
        assert all(s["reward"] > 0.8 for _, s in played)  # the canonical class, in full
        with store.open_db(db_path) as db:
            rows = [e for e in store.list_episodes(db, limit=10) if e["shape"] == shape]
        assert len(rows) == 2 and len({r["group_id"] for r in rows}) == 1
    with pytest.raises(ValueError, match="--incremental is a class team's view"):
        TrainArgs(incremental=True).check()


class Broken(WithTokens):
    """The canonical methods, except that agent 2's return None (its every test class fails)."""

    def generate(self, requests, on_token=None):
        out = super().generate(requests)
        for request, completion in zip(requests, out, strict=True):
            if request.agent == 1:
                completion.text = "        return None\n"
        return out


@pytest.mark.parametrize("shape", ["parallel", "parallel_incremental"])
def test_crossing_a_class_credits_each_agent_for_its_own_methods(shape):
    """Sample 0 is the canonical class; in sample 1 agent 2's methods are broken. Aligned, agent
    1's sample 1 would share the blame; crossed, the mixes are judged as classes (agent 1's
    methods of sample 1 with agent 2's of sample 0 pass whole), so agent 1's samples return the
    same and only agent 2's differ. Either team shape: an agent's view is its own."""
    problem = class_problem(4)
    team = replace(TWO, shape=shape)
    good = run_class_episode(problem, WithTokens(problem), team)
    bad = run_class_episode(problem, Broken(problem), team)
    assert good.verdict.all_passed and not bad.verdict.all_passed
    mixed = recombine_classes([good, bad], (1, 0))
    assert mixed.verdict.all_passed and mixed.merged.program == good.merged.program
    assert [s.agent for s in mixed.steps] == [0, 0, 0, 1, 1, 1]
    returns = cross_classes([good, bad], 2)
    assert returns[0, 0] == pytest.approx(returns[0, 1])
    assert returns[1, 0] > returns[1, 1]
    aligned = [class_reward(e)["reward"] for e in (good, bad)]
    assert returns[1, 0] == pytest.approx(aligned[0]) and returns[1, 1] == pytest.approx(aligned[1])
