"""Learning from people: rated episodes become MAGRPO groups.

A rating scores one joint output, while the update needs a group of outputs for the same task.
CoTeam groups the rated `parallel` episodes of each task (the A/B mode, running a prompt again
and repeated prompts make such groups). Each episode's reward blends the automatic joint reward
with the people's verdict,

    R = (1 − w_h) · R_auto + w_h · rating        (rating alone when there is no R_auto)

with ratings mapped to [0, 1]: a score 1–5 → 0…1, thumbs up / down → 1 / 0, an A/B vote → 1 for
the winner, 0 for the loser, 0.5 each for a tie, 0 for both when both are bad (the mean when an
episode has several). Then A = R − mean(R) within the group, as for sampled groups. A group needs
at least two episodes to carry a relative signal; smaller ones wait for more ratings.

Each agent's tokens are its stored observation (its exact messages), tokenized with the model's
chat template, and its stored completion: what it saw and wrote, nothing of the others'.
"""

from __future__ import annotations

import json
from collections import defaultdict

from learner.magrpo import Sample
from learner.rewards import blend_human, rating_to_unit


def rating_value(rating: dict, episode_id: int) -> float | None:
    """One rating of `episode_id` in [0, 1], or None for kinds that carry no score."""
    kind = rating["kind"]
    if rating.get("agent") is not None:
        return None  # a rating of one agent's part, not of the joint output
    if kind == "score":
        return rating_to_unit(rating["value"])
    if kind == "thumbs":
        return 1.0 if rating["value"] > 0 else 0.0
    if kind == "pairwise":
        left = rating["episode_id"] == episode_id
        return {
            "left": 1.0 if left else 0.0,
            "right": 0.0 if left else 1.0,
            "tie": 0.5,
            "both_bad": 0.0,
        }[rating["choice"]]
    return None


def human_reward(episode: dict, human_weight: float) -> float | None:
    """The blended reward of a rated episode, or None if no rating scores it."""
    values = [v for r in episode["ratings"] if (v := rating_value(r, episode["id"])) is not None]
    if not values:
        return None
    rating = sum(values) / len(values)
    return blend_human(episode.get("reward"), rating, human_weight)


def rated_groups(
    episodes: list[dict], agents: int, human_weight: float = 0.5
) -> list[tuple[list[dict], list[float]]]:
    """Groups (episodes, rewards) of rated parallel episodes of one task with `agents` agents."""
    by_task: dict[int, list[tuple[dict, float]]] = defaultdict(list)
    for episode in episodes:
        if episode["shape"] != "parallel" or len(episode["roles"]) != agents:
            continue
        reward = human_reward(episode, human_weight)
        if reward is not None:
            by_task[episode["task_id"]].append((episode, reward))
    return [
        ([e for e, _ in members], [r for _, r in members])
        for members in by_task.values()
        if len(members) >= 2
    ]


def episode_sample(tokenizer, episode: dict, agent: int) -> Sample | None:
    """Agent `agent`'s last call in a stored episode, tokenized; None if it made none."""
    own = [t for t in episode["turns"] if t["agent"] == agent]
    if not own or not own[-1]["completion"]:
        return None
    messages = json.loads(own[-1]["observation"])
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    completion_ids = tokenizer.encode(own[-1]["completion"], add_special_tokens=False)
    if tokenizer.eos_token_id is not None:
        completion_ids.append(tokenizer.eos_token_id)  # the answer ended there
    return Sample(prompt_ids, completion_ids)
