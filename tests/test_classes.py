"""Class-level co-coding (agents/kinds/classes.py): the vendored ClassEval classes, dealing,
openings, merging, the judge on classes (handles: the program keeps its objects) against honest
and hostile programs, and the class reward on hand-made outputs."""

import ast
import json
import textwrap

import pytest

import store
from agents.judge.harness.codec import NotPlain, decode, encode
from agents.judge.parsing import parse
from agents.judge.testrun import run_tests
from agents.kinds.class_team import (
    CLASS_GREEDY,
    PROMPT_CHARS,
    ClassEpisode,
    ClassTeam,
    MethodStep,
    class_reward,
    fitted,
    method_messages,
    run_class_episode,
)
from agents.kinds.classes import (
    class_node,
    class_problem,
    class_problems,
    class_splits,
    deal,
    judge_class,
    merge,
    method_nodes,
    opening,
    user_class_problem,
)
from agents.serving.policy import Completion
from agents.team.graph import TeamSettings


def test_the_vendored_classes_parse_and_split_by_class():
    problems = class_problems()
    assert len(problems) == 64 and sum(len(p.methods) for p in problems) == 259
    for problem in problems:  # the four mended ones included
        node = class_node(problem.skeleton, problem.class_name)
        assert set(problem.methods) <= set(method_nodes(node)), problem.task_id
    for fold in (None, "1/4", "4/4"):
        parts = class_splits(fold)
        ids = [p.task_id for part in parts.values() for p in part]
        assert sorted(ids) == sorted(p.task_id for p in problems), fold
        assert len(set(ids)) == 64
    held_out = [p.task_id for i in range(1, 5) for p in class_splits(f"{i}/4")["held_out"]]
    assert sorted(held_out) == sorted(p.task_id for p in problems)


def test_methods_are_dealt_round_the_agents_and_begun_with_their_heads():
    problem = class_problem("ClassEval_46")  # Interpolation: static methods
    assert deal(problem, 4) == [["interpolate_1d"], ["interpolate_2d"]]  # never more than methods
    begun = opening(problem, "interpolate_2d")
    assert begun.startswith(
        "    @staticmethod\n    def interpolate_2d(x, y, z, x_interp, y_interp):\n"
    )
    assert begun.rstrip().endswith('"""') and "Linear interpolation of two-dimensional" in begun
    problem = class_problem(4)
    dealt = deal(problem, 2)
    assert [m for part in dealt for m in part] != list(problem.methods)  # interleaved
    assert sorted(m for part in dealt for m in part) == sorted(problem.methods)


def test_the_deal_puts_the_docstring_implied_calls_between_teammates():
    """Over the 64 classes, round the agents leaves 32 of the 91 implied calls (method to another
    method of its class) within one agent of a team of 2; the deal keeps at most 7 there, and
    keeps every agent's share even."""
    within = {2: 0, 4: 0}
    for problem in class_problems():
        for agents in within:
            dealt = deal(problem, agents)
            assert sorted(m for part in dealt for m in part) == sorted(problem.methods)
            sizes = [len(part) for part in dealt]
            assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1, problem.task_id
            assert len(dealt) == min(agents, len(problem.methods))
            owner = {m: a for a, part in enumerate(dealt) for m in part}
            assert all(part == sorted(part, key=problem.methods.index) for part in dealt)
            within[agents] += sum(
                owner[m] == owner[d]
                for m in problem.methods
                for d in problem.calls.get(m, ())
                if d in owner and d != m
            )
    assert within[2] <= 7 and within[4] <= 1, within


def test_merging_takes_each_agents_own_methods_by_name_and_reports_the_rest():
    problem = user_class_problem(
        "class Counter:\n    def __init__(self):\n        self.n = 0\n\n"
        "    def add(self, k):\n        '''Add k.'''\n\n    def total(self):\n        '''The sum.'''\n",
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_add(self):\n"
        "        c = Counter()\n        c.add(2)\n        self.assertEqual(c.total(), 2)\n",
    )
    replies = [
        "    def add(self, k):\n        self.n += k\n\n    def total(self):\n        return -1\n",
        "def total(self):\n    return self.n\n",
    ]
    merged = merge(problem, replies, [["add"], ["total"]])
    assert merged.dropped == [(0, "total")] and merged.missing == []
    assert judge_class(problem, merged.program).all_passed
    merged = merge(
        problem, ["    def add(self, k):\n        self.n += k\n", ""], [["add"], ["total"]]
    )
    assert merged.missing == ["total"] and not judge_class(problem, merged.program).all_passed


@pytest.mark.parametrize("task_id", ["ClassEval_0", "ClassEval_4", "ClassEval_26", "ClassEval_67"])
def test_canonical_classes_pass_through_the_judge(task_id):
    """Handles, attributes the tests change, files the tests write for the program (26)."""
    problem = class_problem(task_id)
    verdict = judge_class(problem, problem.program(problem.solution))
    assert verdict.all_passed, verdict.report.results


HOSTILE_TESTS = textwrap.dedent(
    """
    import unittest

    class BoxTest(unittest.TestCase):
        def test_value(self):
            self.assertEqual(Box(3).value(), 3)

        def test_double(self):
            self.assertEqual(Box(3).double(), [6])

        def test_chain(self):
            box = Box(1)
            self.assertIs(box.same(), box)
            self.assertEqual(box.same().value(), 1)

        def test_import(self):
            import csv
            self.assertTrue(hasattr(csv, "DictReader"))

        def test_last(self):
            self.assertEqual(Box(2).value(), 2)
    """
)

HONEST_BOX = textwrap.dedent(
    """
    class Box:
        def __init__(self, x):
            self.x = x

        def value(self):
            return self.x

        def double(self):
            return [2 * self.x]

        def same(self):
            return self
    """
)

# each is wrong about value() and double(); the judge must not let it pass what it fails
HOSTILE_BOXES = {
    "equals_anything": """
class Anything:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
class Box:
    def __init__(self, x):
        self.x = x
    def value(self):
        return Anything()
    def double(self):
        return Anything()
    def same(self):
        return Anything()
""",
    "plain_type_that_lies": """
class Liar(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
class Lister(list):
    def __eq__(self, other):
        return True
class Box:
    def __init__(self, x):
        self.x = x
    def value(self):
        return Liar(0)
    def double(self):
        return Lister()
    def same(self):
        return Box(self.x)
""",
    "patches_unittest_and_plants_modules": """
import unittest
unittest.TestCase.assertEqual = lambda *a, **k: None
unittest.TestCase.assertIs = lambda *a, **k: None
for name in ("csv.py", "unittest.py"):
    with open(name, "w") as f:
        f.write("DictReader = None\\nraise SystemExit(0)\\n")
class Box:
    def __init__(self, x):
        self.x = x
    def value(self):
        return 0
    def double(self):
        return []
    def same(self):
        return None
""",
}


def test_honest_class_passes_every_test_through_handles():
    report = run_tests(HONEST_BOX, HOSTILE_TESTS, "Box", timeout=2.0)
    assert (report.passed, report.total) == (5, 5), report.results
    assert report.test_classes() == {"BoxTest": {"passed": 5, "total": 5, "all_passed": True}}


@pytest.mark.parametrize("name", list(HOSTILE_BOXES))
def test_hostile_classes_pass_nothing_they_fail(name):
    report = run_tests(HOSTILE_BOXES[name], HOSTILE_TESTS, "Box", timeout=2.0)
    passed = {r.source.split(".")[1]: r.passed for r in report.results}
    assert passed == {
        "test_value": False, "test_double": False, "test_chain": False,
        "test_import": True, "test_last": name == "plain_type_that_lies" and False,
    }, report.results  # fmt: skip


def test_an_exit_in_the_middle_fails_the_tests_not_yet_judged():
    program = HONEST_BOX.replace("return [2 * self.x]", "import os\n        os._exit(0)")
    report = run_tests(program, HOSTILE_TESTS, "Box", timeout=2.0)
    # test_import needs nothing of the program
    assert [r.passed for r in report.results] == [True, False, False, True, False]


def test_the_codec_carries_dates_decimals_deques_and_builtin_types():
    import collections
    import datetime
    import decimal

    value = [
        datetime.datetime(2024, 1, 2, 3, 4, 5, 6), datetime.date(2024, 2, 29),
        datetime.time(23, 59), datetime.timedelta(days=-1, seconds=5), decimal.Decimal("1.10"),
        collections.deque([1, 2], maxlen=3), collections.OrderedDict(a=1),
        collections.Counter("aab"), collections.defaultdict(list, {"k": [1]}), int, str,
    ]  # fmt: skip
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and [type(v) for v in back] == [type(v) for v in value]
    assert back[5].maxlen == 3 and back[8].default_factory is list
    for bad in (["T", "eval"], ["dd", ["eval", []]], ["h", [1, "X", "object", None]]):
        with pytest.raises(NotPlain):
            decode(bad)


def _episode(problem, program, dealt, tokens):
    steps = [
        MethodStep(a, m, "", "", tokens, 0.0) for a, methods in enumerate(dealt) for m in methods
    ]
    merged = merge(problem, [""] * len(dealt), dealt)
    merged.program = program
    return ClassEpisode(
        problem, "parallel", dealt, steps, merged, judge_class(problem, program), 1.0
    )


def test_the_class_reward_ranks_hand_made_classes_as_a_person_would():
    """The whole canonical class (get_top_student calls its teammate's get_gpa) above the same
    class with get_gpa's work copied into get_top_student, above a class with get_top_student
    wrong but calling get_gpa (it passes one of its five tests, the empty class's), above the
    same wrong method with get_gpa's work copied in, above methods that only parse: a call is
    paid by the share of the caller's tests that pass, and never outweighs the work itself."""
    problem = class_problem(4)
    dealt = deal(problem, 2)
    canonical = problem.program(problem.solution)
    assert "self.get_gpa(" in canonical
    duplicated = canonical.replace(
        "self.get_gpa(name)",
        "(sum(self.students[name]['courses'].values()) / len(self.students[name]['courses']) "
        "if self.students[name]['courses'] else None)",
    )
    wrong = canonical.replace("top_student = name", "top_student = None")
    wrong_duplicated = duplicated.replace("top_student = name", "top_student = None")
    cls = next(n for n in ast.parse(canonical).body if isinstance(n, ast.ClassDef))
    for method in cls.body:
        if isinstance(method, ast.FunctionDef) and method.name != "__init__":
            method.body = [ast.Pass()]
    stubbed = ast.unparse(cls)
    rewards = [
        class_reward(_episode(problem, program, dealt, 60))
        for program in (canonical, duplicated, wrong, wrong_duplicated, stubbed)
    ]
    assert rewards[0]["calls"] == rewards[2]["calls"] == {"get_top_student": True}
    assert rewards[1]["calls"] == rewards[3]["calls"] == {"get_top_student": False}
    assert rewards[0]["tests"] == rewards[1]["tests"] == 1.0
    assert rewards[2]["tests"] == rewards[3]["tests"] < 1.0
    assert rewards[2]["coordination"] == pytest.approx(1 / 5)  # one of get_top_student's 5
    totals = [r["reward"] for r in rewards]
    assert totals[0] > totals[1] > totals[2] > totals[3] > totals[4], rewards
    assert rewards[4]["reward"] == 0.0  # nothing for methods that only parse


def team_of(shape: str, turns: int = 1) -> TeamSettings:
    """A greedy class team of two (one agent for the single forms)."""
    return TeamSettings(shape, 2, turns, sampling=CLASS_GREEDY)


class Scripted:
    """Writes each method as the canonical class has it (a scripted policy: graph logic only)."""

    def __init__(self, problem):
        self.lines = problem.program(problem.solution).splitlines()
        # a scripted policy is called from the graph's threads: its parse goes through the lock
        tree = parse("\n".join(self.lines))
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
        self.methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
        self.requests = []

    def generate(self, requests, on_token=None):
        self.requests += requests
        out = []
        for request in requests:
            name = request.messages[-1]["content"].split("def ", 1)[1].split("(")[0]
            node = self.methods[name]
            body = "\n".join(self.lines[node.body[0].lineno - 1 : node.end_lineno]) + "\n"
            out.append(Completion(body, None, 10, 7, 0.0, 0.0, "stop"))
        return out


@pytest.mark.parametrize(
    "shape",
    ["single", "single_incremental", "parallel", "parallel_incremental", "sequential_pipeline"],
)
def test_every_shape_writes_every_method_from_the_same_opening(shape):
    problem = class_problem(4)
    policy = Scripted(problem)
    episode = run_class_episode(problem, policy, team_of(shape))
    assert episode.verdict.all_passed
    assert sorted(s.method for s in episode.steps) == sorted(problem.methods)
    for request in policy.requests:  # the reply begun with the method's head, and nothing more
        name = request.messages[-1]["content"].split("def ", 1)[1].split("(")[0]
        assert request.messages[-1]["content"] == opening(problem, name)
    seen = [("Methods already written" in r.messages[1]["content"]) for r in policy.requests]
    if shape == "single_incremental":
        assert seen == [False] + [True] * (len(problem.methods) - 1)
    elif shape == "sequential_pipeline":
        assert seen == [False] * 3 + [True] * 3  # agent 2 sees agent 1's methods
    elif shape == "parallel_incremental":  # each agent its own earlier methods, not its mate's
        assert sorted(seen) == [False] * 2 + [True] * 4
        for request in policy.requests:
            name = request.messages[-1]["content"].split("def ", 1)[1].split("(")[0]
            [mine] = [d for d in episode.dealt if name in d]
            shown = request.messages[1]["content"].partition("Methods already written")[2]
            assert not any(f"def {m}(" in shown for m in problem.methods if m not in mine)
    else:
        assert not any(seen)  # decentralized: each agent sees the skeleton and its own ask
    size = 1 if shape.startswith("single") else 2
    assert episode.critical_path_tokens == 7 * len(problem.methods) // size


@pytest.mark.integration
def test_a_class_team_on_the_real_model_from_the_cli(vllm_server, model_path, capsys, home):
    """`coteam episode --task class --json`: each method begun with its head, merged, judged,
    recorded with its reward; with no class versions trained, the base model (the shipped
    coders are not a class team)."""
    from app.cli import main

    problem = class_problem("ClassEval_46")
    args = ["episode", "--task", "class", "--problem", "ClassEval_46", "--greedy", "--json"]
    server = ["--vllm-url", vllm_server.url, "--model", str(model_path)]
    assert main([*args, "--max-tokens", "160", *server]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["dealt"] == [["interpolate_1d"], ["interpolate_2d"]]
    assert [m["method"] for m in summary["methods"]] == ["interpolate_1d", "interpolate_2d"]
    for method in summary["methods"]:
        assert method["text"].startswith(method["opening"])
        assert method["opening"] == opening(problem, method["method"])
    assert set(summary["test_classes"]) == set(problem.test_classes)
    assert summary["critical_path_tokens"] == max(m["tokens"] for m in summary["methods"])
    ast.parse(summary["program"])
    assert summary["adapters"] == [None, None]
    with store.open_db(home / "coteam.db") as db:
        [episode] = store.get_episodes(db, [summary["episode_id"]])
        assert store.active_adapters(db, "coding")  # the shipped team, registered for coding
    assert episode["shape"] == "class_parallel" and episode["final_output"] == summary["program"]
    assert episode["reward"] == pytest.approx(summary["reward"], abs=1e-4)


class ScriptedClasses:
    """Every vendored class's canonical methods, for episodes of any of them (graph logic only)."""

    def __init__(self):
        self.by_class = {p.class_name: Scripted(p) for p in class_problems()}

    def generate(self, requests, on_token=None):
        out = []
        for request in requests:
            name = request.messages[1]["content"].rsplit("` of `", 1)[1].split("`", 1)[0]
            out += self.by_class[name].generate([request])
        return out


def test_the_class_evaluation_pairs_each_team_with_the_better_single_form(tmp_path):
    from learner.class_eval import run_class_eval

    policy = ScriptedClasses()
    args = dict(shapes=("single", "single_incremental", "parallel"), limit=3, progress=False)
    results = run_class_eval(policy, tmp_path, agents=2, **args)
    assert results["classes"] == [p.task_id for p in class_splits()["held_out"][:3]]
    figures = results["figures"]
    assert figures["single"]["method_level"] == figures["parallel"]["method_level"] == 1.0
    paired = results["paired"]["parallel"]
    assert (paired["better"], paired["worse"], paired["against"]) == (0, 0, "single")
    assert paired["tokens_ratio"] < 0.75  # the scripted methods split between two agents
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 9
    results = run_class_eval(policy, tmp_path, agents=4, **args)  # only the teams of 4 are new
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert 9 < len(lines) <= 12
    report = (tmp_path / "report-agents4-samples1.md").read_text()
    assert "parallel (4 agents)" in report and "same openings" in report


def test_a_variant_runs_every_shape_with_its_adapters_against_the_base_single(tmp_path):
    from learner.class_eval import run_class_eval

    policy = ScriptedClasses()
    seen = []
    generate = policy.generate
    policy.generate = lambda requests, on_token=None: seen.extend(requests) or generate(requests)
    results = run_class_eval(
        policy, tmp_path, shapes=("single", "parallel"), limit=2, progress=False,
        variants={"trained": ("agent1-v2", "agent2-v2")},
    )  # fmt: skip
    assert set(results["figures"]) == {"single", "parallel", "single@trained", "parallel@trained"}
    assert {p: t["against"] for p, t in results["paired"].items()} == {
        "parallel": "single", "single@trained": "single", "parallel@trained": "single",
    }  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert {(r["shape"], r["variant"]) for r in rows} == {
        (shape, variant) for shape in ("single", "parallel") for variant in ("base", "trained")
    }
    assert {r.adapter for r in seen} == {None, "agent1-v2", "agent2-v2"}
    report = (tmp_path / "report-agents2-samples1.md").read_text()
    assert "| single@trained |" in report and "trained = agent1-v2, agent2-v2" in report
    # another run into the folder (one shape, another variant): the tables hold every row
    results = run_class_eval(
        policy, tmp_path, shapes=("single",), limit=2, progress=False,
        variants={"control": ("agent1-v3",)},
    )  # fmt: skip
    assert list(results["figures"]) == [
        "single", "parallel", "single@control", "single@trained", "parallel@trained",
    ]  # fmt: skip
    assert results["variants"]["control"] == ["agent1-v3"]
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 2 * 5


def test_sampled_class_evaluation_draws_at_its_temperature_and_reports_pass_at_k(tmp_path):
    from learner.class_eval import run_class_eval

    policy = ScriptedClasses()
    seen = []
    generate = policy.generate
    policy.generate = lambda requests, on_token=None: seen.extend(requests) or generate(requests)
    args = dict(shapes=("single", "parallel"), limit=2, progress=False)
    with pytest.raises(ValueError, match="temperature"):
        run_class_eval(policy, tmp_path, samples=2, temperature=0.0, **args)
    results = run_class_eval(policy, tmp_path, samples=2, temperature=0.2, **args)
    assert {r.temperature for r in seen} == {0.2} and None not in {r.seed for r in seen}
    assert results["temperature"] == 0.2
    assert results["figures"]["parallel"]["method_at_k"] == 1.0  # the canonical methods
    assert results["paired"]["parallel"]["method_at_k_diff"] == 0.0
    report = (tmp_path / "report-agents2-samples2-t0.2.md").read_text()
    assert "T = 0.2" in report and "| parallel | 1.000 | 1.000 |" in report
    # greedy into the same folder: its answers are new, not the sampled answer 0
    seen.clear()
    results = run_class_eval(policy, tmp_path, **args)
    assert {r.temperature for r in seen} == {0.0} and results["temperature"] == 0.0
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 2 * 2 * 2 + 2 * 2


def test_pass_at_k_counts_a_test_class_any_sample_passes():
    from learner.class_eval import summarize

    def row(sample, passed):
        tests = {"A": (1, 1) if "A" in passed else (0, 1), "B": (2, 2) if "B" in passed else (1, 2)}
        return {
            "task_id": "C", "shape": "single", "sample": sample, "test_classes": tests,
            "test_classes_passed": len(passed), "class_passed": len(passed) == 2,
            "critical_path_tokens": 10, "wall_s": 1.0,
        }  # fmt: skip

    figures = summarize([row(0, "A"), row(1, "B"), row(2, "")], ("single",), 2)["figures"]
    assert figures["single"]["method_level"] == pytest.approx(1 / 3)  # pass@1: the mean
    assert figures["single"]["method_at_k"] == 1.0  # A by sample 0, B by sample 1
    assert figures["single"]["class_at_k"] == 0.0  # no one sample passes both


class WrongThenRight(Scripted):
    """Writes get_gpa wrong on the first turn, right once it has seen the verdict."""

    def generate(self, requests, on_token=None):
        out = super().generate(requests)
        for request, completion in zip(requests, out, strict=True):
            later = "The tests' verdict on your methods" in request.messages[1]["content"]
            if "def get_gpa" in request.messages[-1]["content"] and not later:
                completion.text = "        return 0\n"
        return out


def test_a_one_round_discussion_revises_every_method_seeing_the_teams_drafts():
    problem = class_problem(4)
    policy = WrongThenRight(problem)  # no verdict is shown: get_gpa stays wrong when revised
    episode = run_class_episode(problem, policy, team_of("one_round_discussion"))
    assert sorted(s.method for s in episode.steps if s.turn == 1) == sorted(problem.methods)
    revisions = policy.requests[len(problem.methods) :]
    assert all("The class as your team wrote it" in r.messages[1]["content"] for r in revisions)
    assert not any("verdict" in r.messages[1]["content"] for r in revisions)
    assert episode.critical_path_tokens == 2 * 7 * 3
    assert not episode.verdict.all_passed


@pytest.mark.parametrize("shape", ["parallel", "sequential_pipeline"])
def test_a_second_turn_rewrites_only_the_methods_that_failed_with_the_verdict(shape):
    problem = class_problem(4)
    policy = WrongThenRight(problem)
    episode = run_class_episode(problem, policy, team_of(shape, turns=2))
    assert episode.verdict.all_passed
    second = [s for s in episode.steps if s.turn == 1]
    # get_top_student calls get_gpa: its tests failed too, and its author writes it again
    assert [s.method for s in second] == ["get_gpa", "get_top_student"]
    view = next(
        r.messages[1]["content"] for r in policy.requests
        if "verdict" in r.messages[1]["content"] and "def get_gpa" in r.messages[-1]["content"]
    )  # fmt: skip
    assert "AssessmentSystemTestGetGPA (`get_gpa`): 0 of" in view
    assert "The class as your team wrote it" in view and "def get_top_student" in view
    assert episode.critical_path_tokens == 7 * 3 + 7
    once = run_class_episode(problem, WrongThenRight(problem), team_of(shape))
    assert not once.verdict.all_passed and max(s.turn for s in once.steps) == 0


def test_a_later_turns_view_of_a_long_class_keeps_the_verdict_within_the_window():
    """The verdict a second turn shows counts in the view's budget: on a long class (CalendarUtil's
    skeleton is 1,500 tokens) it is cut to the lines that fit, and the view stays within
    `PROMPT_CHARS` (a view over the model's window stopped a two-turn evaluation)."""
    problem = class_problem("CalendarUtil")
    dealt = [problem.methods[::2], problem.methods[1::2]]
    team = ClassTeam(problem, team_of("parallel", turns=2), dealt, [None, None], policy=None)
    note = "The tests' verdict on your methods:\n" + "\n".join(
        f"- Test{i} (`{m}`): 0 of 5 tests passed; first failure: " + "x" * 200
        for i, m in enumerate(dealt[0])
    )
    merged = problem.skeleton * 2  # the class as written: too long to show, the skeleton instead
    messages = method_messages(team, 0, dealt[0][0], [], note, merged)
    view = messages[1]["content"] + messages[2]["content"]
    asked = messages[1]["content"].rsplit("\n\n", 1)[1]  # the ask, not in the budget
    assert asked.startswith("Write the method") and len(view) - len(asked) <= PROMPT_CHARS
    assert "The class, as a skeleton" in view and "The tests' verdict on your methods" in view
    assert note not in view  # cut to the lines that fit
    short = "The tests' verdict on your methods:\n- TestA (`a`): 0 of 1 tests passed"
    assert fitted(short, 1000) == short and fitted(short, 10) == ""
