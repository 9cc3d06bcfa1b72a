"""The preference model: every stored rating counts, and it learns a simple preference."""

from __future__ import annotations

import random

import numpy as np
import pytest

import store
from learner.preference import (
    L2_GRID,
    PreferenceExamples,
    features,
    fit_on_features,
    fit_preference_model,
    load_preference_model,
    preference_examples,
    sentence_embedding,
    win_rates,
)
from learner.reward_config import RewardWeights


@pytest.fixture
def db(tmp_path):
    with store.open_db(tmp_path / "coteam.db") as db:
        yield db


def finished(db, task_id, output, roles=("helper", "main")):
    episode = store.start_episode(db, task_id, shape="parallel", roles=list(roles))
    for agent in range(len(roles)):
        store.add_turn(
            db,
            episode,
            turn=0,
            agent=agent,
            observation="sees",
            completion=f"{output} part {agent}",
        )
    store.finish_episode(db, episode, output)
    return episode


def test_every_stored_rating_is_counted_even_a_lone_one(db):
    task = store.create_task(db, "coding", "def f(): ...")
    lonely = store.create_task(db, "coding", "def g(): ...")
    writing = store.create_task(db, "writing", "a poem")
    a, b = finished(db, task, "def f(): return 1"), finished(db, task, "def f(): pass")
    alone = finished(db, lonely, "def g(): return 2")
    poem = finished(db, writing, "roses are red")
    counted = [
        store.add_rating(db, a, "score", value=5),
        store.add_rating(db, b, "score", value=2),
        store.add_rating(db, b, "thumbs", value=-1),
        store.add_rating(db, a, "pairwise", choice="left", other_episode_id=b),
        store.add_rating(db, a, "pairwise", choice="tie", other_episode_id=b),
        store.add_rating(db, a, "pairwise", choice="both_bad", other_episode_id=b),
        store.add_rating(db, b, "edit", text="def f(): return 3"),
        store.add_rating(db, b, "thumbs", value=1, agent=1),
        store.add_rating(db, alone, "score", value=4),  # the task's only episode
    ]
    store.add_rating(db, a, "comment", text="nice")  # no verdict to learn
    store.add_rating(db, poem, "score", value=1)  # another kind of task

    examples = preference_examples(db, "coding")
    assert examples.rating_ids == set(counted)
    assert (examples.text_index("def g(): return 2"), 0.75) in examples.singles
    edited, original = (
        examples.text_index("def f(): return 3"),
        examples.text_index("def f(): pass"),
    )
    assert (edited, original, 1.0) in examples.pairs  # edited > original
    assert (examples.text_index("def f(): return 1"), original, 1.0) in examples.pairs  # 5 > 2
    assert examples.text_index("def f(): pass part 1") in [i for i, _ in examples.singles]

    model = load_preference_model(db, "coding")  # the next run counts all of them, with no loss
    assert model.rating_ids == set(counted)
    assert load_preference_model(db, "coding").rating_ids == set(counted)  # and the one after
    assert load_preference_model(db, "writing").rating_ids == {counted[-1] + 2}
    liked = model.group_preference(["def f(): return 3", "def f(): pass"])
    assert liked.shape == (2,) and liked[0] > liked[1] and np.all((liked > 0) & (liked < 1))
    assert liked.sum() == pytest.approx(1.0)  # of two samples, one is preferred to the other


NAMES = [f"{verb}_{noun}" for verb in ("add", "scale", "clip", "count", "merge", "split",
         "parse", "render") for noun in ("rows", "items", "tokens", "scores", "lines")]  # fmt: skip


def typed(name: str, mark: bool) -> str:
    if mark:
        return f'def {name}(x: int) -> int:\n    """Return {name} of x."""\n    return x + 1\n'
    return f"def {name}(x):\n    return x + 1\n"


def commented(name: str, mark: bool) -> str:
    note = f"    # {name.replace('_', ' ')} by one\n" if mark else ""
    return f"def {name}(x):\n{note}    return x + 1\n"


@pytest.mark.parametrize("program", [typed, commented])
def test_a_simple_synthetic_preference_ranks_held_out_pairs_above_chance(program):
    """A rater who prefers type hints and a docstring, or a `#` comment: A/B votes on 20 tasks,
    then 20 new ones. (On real sampled programs the sentence embedding alone hardly sees a
    comment line and the words do: bench/preference.py --features embedding|model.)"""
    rng = random.Random(0)
    names = NAMES.copy()
    rng.shuffle(names)
    train, held_out = names[:20], names[20:]
    examples = PreferenceExamples()
    for name in train:
        left_marked = rng.random() < 0.5
        left = examples.text_index(program(name, left_marked))
        right = examples.text_index(program(name, not left_marked))
        examples.pairs.append((left, right, 1.0 if left_marked else 0.0))
    model = fit_preference_model(examples)

    marked = model.raw_score([program(n, True) for n in held_out])
    plain = model.raw_score([program(n, False) for n in held_out])
    accuracy = float(np.mean(marked > plain))
    assert accuracy >= 0.8, accuracy  # chance is 0.5
    # in a group of the two, the marked sample is the one a person is likely to prefer
    assert (
        model.group_preference([program(held_out[0], True), program(held_out[0], False)])[0] > 0.6
    )


def test_a_word_both_answers_have_cancels_in_their_difference_whatever_their_lengths():
    """A vote compares two answers; what they share must not look like a difference. Words
    count as present or not (hashed 1-2-grams): "said", in both answers of a pair, adds
    nothing to their difference, where unit-length counts gave it a weight that depends on each
    answer's length, noise the few votes of a person's first ratings had to explain."""
    short = "The minister said the plan works."
    long = "Officials said on Monday that the new plan, announced last week, works well."
    phi = features([short, long, "The plan works.", "The plan works, the minister said."])
    words = phi[:, 384:]  # after the sentence embedding
    assert set(np.unique(words)) == {0.0, 1.0}
    said = (words[0] == 1) & (words[1] == 1) & (words[2] == 0) & (words[3] == 1)
    assert said.any()  # "said" (and nothing else) is in the first two and the last, not the third
    difference = words[0] - words[1]
    assert (difference[said] == 0).all()
    assert ((words[3] - words[2])[said] == 1).all()  # and it is the difference where one lacks it


def test_the_strongest_penalty_flattens_coin_flips_on_the_words():
    """The words are unnormalised (norm 4-10 for a paragraph), so the penalties have that scale
    to overcome: at the grid's strongest, a model fit on coin-flip votes gives every answer of a
    group about the same preference (where 0.1, until 2026-11-27 the strongest, left a spread of
    0.05-0.08 that the reward then added to the advantages)."""
    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(300)]
    texts = [" ".join(rng.choices(vocabulary, k=rng.randint(15, 40))) for _ in range(140)]
    phi = features(texts)
    coin = PreferenceExamples()
    coin.texts = texts
    coin.pairs = [(i, i + 1, float(rng.random() < 0.5)) for i in range(0, 100, 2)]

    def spread(l2: float) -> float:
        model = fit_on_features(phi, coin, l2=l2)
        groups = [phi[j : j + 4] for j in range(100, 140, 4)]  # unseen answers, G = 4
        return float(np.mean([np.std(win_rates(g @ model.weights)) for g in groups]))

    assert spread(max(L2_GRID)) < 0.01 < 0.04 < spread(0.1)


def test_win_rates_are_bradley_terry_within_the_group():
    assert win_rates(np.array([0.7])).tolist() == [0.5]  # alone: no one to be preferred to
    assert win_rates(np.array([1.0, 1.0, 1.0])).tolist() == pytest.approx([0.5, 0.5, 0.5])
    two = win_rates(np.array([np.log(3), 0.0]))  # σ(log 3) = 0.75
    assert two.tolist() == pytest.approx([0.75, 0.25])
    three = win_rates(np.array([2.0, 0.0, -2.0]))
    assert three[0] > three[1] > three[2] and three.mean() == pytest.approx(0.5)


def test_cross_validation_fits_a_taste_confidently_and_coin_flips_flatly():
    """Votes that follow a feature choose a weak penalty (a confident model); coin-flip votes
    on the same pairs choose a strong one (a flat model), so a rater without a preference moves
    the reward less."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(120, 16)) / 4
    taste = np.zeros(16)
    taste[0] = 1.0
    tasteful, coin = PreferenceExamples(), PreferenceExamples()
    tasteful.texts = coin.texts = [str(i) for i in range(120)]
    for i in range(0, 120, 2):
        tasteful.pairs.append((i, i + 1, float(features[i] @ taste > features[i + 1] @ taste)))
        coin.pairs.append((i, i + 1, float(rng.random() < 0.5)))
    confident = fit_on_features(features, tasteful)
    flat = fit_on_features(features, coin)
    assert confident.l2 < flat.l2
    spread = [np.std(win_rates(features[:4] @ m.weights)) for m in (confident, flat)]
    assert spread[0] > 3 * spread[1], spread
    # and it says how far to trust each: the taste predicts held-out votes, coin flips do not,
    # so the preference has its full weight in the reward for the one and about none for the other
    assert confident.skill > 0.25 and flat.skill < 0.05, (confident.skill, flat.skill)
    weights = RewardWeights()
    assert confident.blend_weight(weights) == weights.human
    assert flat.blend_weight(weights) < weights.human / 5


def test_skill_is_the_share_of_held_out_votes_the_model_predicts():
    """0 with too few votes to cross-validate, with only ties (nothing to predict) and for a
    model that predicts worse than none; near 1 for votes a feature decides outright."""
    rng = np.random.default_rng(1)
    features = rng.normal(size=(80, 4))

    def examples(label) -> PreferenceExamples:
        found = PreferenceExamples()
        found.texts = [str(i) for i in range(80)]
        found.pairs = [(i, i + 1, label(i)) for i in range(0, 80, 2)]
        return found

    def decided(i: int) -> float:
        return float(features[i, 0] > features[i + 1, 0])

    assert fit_on_features(features, examples(decided)).skill > 0.7
    assert fit_on_features(features, examples(lambda i: 0.5)).skill == 0  # all ties
    few = examples(decided)
    few.pairs = few.pairs[:9]
    assert fit_on_features(features, few).skill == 0  # under 2 x 5 folds: too few to tell
    with pytest.raises(ValueError, match="human_full_skill"):
        RewardWeights(human_full_skill=0)


def test_a_text_is_embedded_once_per_process(monkeypatch):
    import agents.team.sentences as sentences

    first = sentence_embedding(["The bridge reopens in May.", "Two late goals won it."])
    model, asked = sentences.embedding_model(), []

    class Recording:  # the model, with what it is asked to encode written down
        def encode(self, texts, **kwargs):
            asked.append(list(texts))
            return model.encode(texts, **kwargs)

    monkeypatch.setattr(sentences, "embedding_model", Recording)
    again = sentence_embedding(
        ["Two late goals won it.", "Rain closed the roads.", "Rain closed the roads."]
    )
    assert asked == [["Rain closed the roads."]]  # only the new text, once
    assert np.array_equal(again[0], first[1]) and np.array_equal(again[1], again[2])
    assert again.shape == (3, 384) and sentence_embedding([]).shape == (0, 0)
    # the writing reward's sentences go through the same cache: the combiner's drop_repeats
    # embeds a document's sentences, and scoring the document embeds none of them again
    document = ["The hive is made of wax. Bees guard it.", "The queen lays eggs. Bees guard it."]
    sentences.drop_repeats(document)
    asked.clear()
    sentences.sentence_vectors(document)
    assert asked == []


def test_ratings_of_validation_and_held_out_problems_are_kept_but_never_learnt(db):
    """A curated task of the gate's or the evaluation's split judges the team: its ratings stay
    in the store, but neither the preference model nor the rating queue uses them."""
    from learner.rating_queue import pairs_to_rate

    ids = {}
    for name, source_id in (("train", "HumanEval/100"), ("validation", "HumanEval/140")):
        ids[name] = store.create_task(db, "coding", name, source="humaneval", source_id=source_id)
    ids["held_out"] = store.create_task(
        db, "coding", "held", source="humaneval", source_id="HumanEval/0"
    )
    rated = {}
    for name, task in ids.items():
        a, b = finished(db, task, f"def f(): return 1  # {name}"), finished(db, task, "pass")
        rated[name] = store.add_rating(db, a, "pairwise", choice="left", other_episode_id=b)
    assert preference_examples(db).rating_ids == {rated["train"]}
    # a training run by fold 2/2 keeps its own split's: there problem 100 is the gate's, and
    # problems 0 and 140 are trained on
    assert preference_examples(db, "coding", "2/2").rating_ids == {
        rated["validation"],
        rated["held_out"],
    }
    assert db["ratings"].count == 3  # all kept
    assert [p.task_id for p in pairs_to_rate(db, "ann", limit=5)] == [ids["train"]]
