"""Learning from people: ratings of stored episodes become groups with blended rewards."""

import json

import pytest

import store
from learner.human import episode_sample, human_reward, rated_groups, rating_value


def record(db, task_id, texts, shape="parallel"):
    episode = store.start_episode(db, task_id, shape=shape, roles=["helper", "entry"][: len(texts)])
    for agent, text in enumerate(texts):
        messages = [{"role": "user", "content": f"agent {agent}: write your part"}]
        store.add_turn(
            db, episode, turn=0, agent=agent, observation=json.dumps(messages), completion=text
        )
    store.finish_episode(db, episode, "\n".join(texts))
    return episode


def test_rating_values():
    assert rating_value({"kind": "score", "value": 5, "agent": None}, 1) == 1.0
    assert rating_value({"kind": "score", "value": 2, "agent": None}, 1) == 0.25
    assert rating_value({"kind": "thumbs", "value": -1, "agent": None}, 1) == 0.0
    vote = {
        "kind": "pairwise",
        "choice": "left",
        "episode_id": 1,
        "other_episode_id": 2,
        "agent": None,
    }
    assert rating_value(vote, 1) == 1.0 and rating_value(vote, 2) == 0.0
    assert rating_value({**vote, "choice": "tie"}, 2) == 0.5
    assert rating_value({"kind": "comment", "text": "nice", "agent": None}, 1) is None
    assert rating_value({"kind": "thumbs", "value": 1, "agent": 0}, 1) is None  # one agent's part


def test_rated_parallel_episodes_of_a_task_form_a_group(db):
    task = store.create_task(db, "coding", "def f(): ...")
    other = store.create_task(db, "coding", "def g(): ...")
    good = record(db, task, ["def aux(): return 1", "def f(): return aux()"])
    bad = record(db, task, ["", "def f(): pass"])
    unrated = record(db, task, ["x", "y"])
    alone = record(db, other, ["a", "b"])  # a group of one carries no relative signal
    single = record(db, task, ["def f(): return 1"], shape="single")
    store.record_rewards(db, good, {"tests": 1.0}, 0.8, {"w_quality": 0.6})
    store.add_rating(db, good, "score", value=5)
    store.add_rating(db, bad, "thumbs", value=-1)
    store.add_rating(db, alone, "score", value=4)
    store.add_rating(db, single, "score", value=5)

    episodes = store.get_episodes(db, [good, bad, unrated, alone, single])
    [(members, rewards)] = rated_groups(episodes, agents=2, human_weight=0.5)
    assert [e["id"] for e in members] == [good, bad]
    assert rewards == pytest.approx([0.5 * 0.8 + 0.5 * 1.0, 0.0])  # blended; rating alone
    assert human_reward(store.get_episode(db, unrated), 0.5) is None


@pytest.mark.integration
def test_episode_sample_is_the_agents_own_observation_and_completion(db, model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    task = store.create_task(db, "coding", "def f(): ...")
    episode = store.get_episode(db, record(db, task, ["def aux(): return 1", "def f(): return 2"]))
    sample = episode_sample(tokenizer, episode, 1)
    prompt = tokenizer.decode(sample.prompt_ids)
    assert "agent 1: write your part" in prompt and "agent 0" not in prompt
    assert tokenizer.decode(sample.completion_ids, skip_special_tokens=True) == "def f(): return 2"
