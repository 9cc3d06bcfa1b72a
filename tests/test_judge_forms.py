"""The judge, round three: every form of tests people write is counted as their runner would count
it, and no program passes a test it fails by exploiting how the judge reads them (the cases are in
tests/judge_cases.py, with an honest right and an honest wrong program for each)."""

import textwrap
from dataclasses import replace

import pytest

from agents.judge.testrun import plan_tests, run_tests
from agents.tasks import Task, humaneval_tasks
from agents.team.feedback import sandbox_check
from learner.coding_reward import coding_reward
from tests.judge_cases import BY_NAME, CASES


@pytest.mark.parametrize("program", ["right", "wrong", "attack"])
@pytest.mark.parametrize("name", list(BY_NAME))
def test_each_form_scores_as_an_honest_program_would(name, program):
    case = BY_NAME[name]
    code = getattr(case, program)
    report = run_tests(code, case.tests, case.entry_point, timeout=2.0, given=case.given)
    assert (report.passed, report.total) == case.expected[program], report.results
    assert report.rejected_lines == 0


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_teams_verdict_and_the_reward_see_the_same_scores(case):
    task = Task(kind="coding", form="user", prompt="", source="test", entry_point=case.entry_point)
    check = sandbox_check(case.attack, replace(task, tests=case.tests))
    passed, total = case.expected["attack"]
    assert (check.tests_passed, check.passed) == (passed, passed == total)
    report = run_tests(case.attack, case.tests, case.entry_point, timeout=2.0)
    reward = coding_reward(
        ["", case.attack],
        [["aux"], [case.entry_point]],
        case.entry_point,
        case.attack,
        report=report,
    )
    assert reward["asserts_passed"] == passed


def test_unittest_classes_count_one_test_per_method_with_set_up_and_assert_raises():
    tests = textwrap.dedent(
        """
        import unittest

        class RootTest(unittest.TestCase):
            def setUp(self):
                self.square = 16

            def test_square(self):
                self.assertEqual(root(self.square), 4)

            def test_negative(self):
                with self.assertRaises(ValueError):
                    root(-1)

            def test_several(self):
                self.assertEqual([root(x) for x in (0, 1, 9)], [0, 1, 3])

            def helper(self):
                raise AssertionError("not a test")

        if __name__ == "__main__":
            unittest.main()
        """
    )
    right = BY_NAME["exception_subclass"].right
    report = run_tests(right, tests, "root", timeout=2.0)
    assert (report.passed, report.total) == (3, 3), report.results
    assert [r.source for r in report.results] == [
        "RootTest.test_square",
        "RootTest.test_negative",
        "RootTest.test_several",
    ]
    report = run_tests("def root(x):\n    return x\n", tests, "root", timeout=2.0)
    assert (report.passed, report.total) == (0, 3)
    assert report.results[0].message.startswith("AssertionError: 16 != 4")


def test_a_failing_statement_outside_the_counted_tests_fails_the_run():
    tests = "def check(candidate):\n    assert candidate(1) == 2\n    import no_such_module\n"
    report = run_tests("def inc(x):\n    return x + 1\n", tests, "inc", timeout=2.0)
    assert (report.passed, report.total) == (0, 1)
    assert "outside the counted tests failed: ModuleNotFoundError" in report.error


def test_the_tests_own_code_still_compiles_and_evaluates():
    tests = textwrap.dedent(
        """
        import collections

        def check(candidate):
            Point = collections.namedtuple("Point", "x y")
            assert candidate(1) == eval("1 + 1")
            assert Point(candidate(2), 0).x == 3
            assert eval(candidate(3) * 0 + "[4]") == [4]
        """
    )
    program = "def inc(x):\n    return x + 1 if x < 3 else 'z'\n"
    report = run_tests(program, tests, "inc", timeout=2.0)
    # the third evaluates text that holds the program's: only as a literal, and 'z'*0 + '[4]'
    # holds none of it
    assert [r.passed for r in report.results] == [True, True, True], report.results


def test_the_programs_text_is_never_code_in_the_judge():
    tests = "def check(candidate):\n    assert eval(candidate()) is None\n"
    for text in ("__import__('os').getpid() and None", "[x for x in ()] or None"):
        report = run_tests(f"def f():\n    return {text!r}\n", tests, "f", timeout=2.0)
        assert report.passed == 0
        assert "only as a literal" in report.results[0].message
    report = run_tests("def f():\n    return 'None'\n", tests, "f", timeout=2.0)
    assert report.passed == 1


@pytest.mark.parametrize(
    "raised",
    ["StopIteration", "GeneratorExit", "SystemExit(0)", "KeyboardInterrupt", "StopAsyncIteration"],
)
def test_exceptions_that_steer_control_flow_are_not_rethrown(raised):
    tests = textwrap.dedent(
        """
        def check(candidate):
            try:
                candidate()
            except BaseException:
                pass
            assert list(map(lambda _: candidate(), [1])) == []
        """
    )
    report = run_tests(f"def f():\n    raise {raised}\n", tests, "f", timeout=2.0)
    assert (report.passed, report.total) == (0, 1)


def test_an_exception_class_of_the_program_keeps_its_builtin_base():
    tests = textwrap.dedent(
        """
        def check(candidate):
            try:
                candidate()
            except LookupError as e:
                assert type(e).__name__ == "Missing" and str(e) == "'k'"
        """
    )
    program = "class Missing(KeyError):\n    pass\n\ndef f():\n    raise Missing('k')\n"
    assert run_tests(program, tests, "f", timeout=2.0).passed == 1


def test_changes_to_dicts_and_sets_come_back_and_keywords_too():
    tests = textwrap.dedent(
        """
        def check(candidate):
            d, s = {"a": 1}, {1}
            assert candidate(d, s=s) is d
            assert d == {"a": 1, "b": 2} and s == {1, 2}
        """
    )
    program = "def fill(d, s):\n    d['b'] = 2\n    s.add(2)\n    return d\n"
    report = run_tests(program, tests, "fill", timeout=2.0)
    assert (report.passed, report.total) == (2, 2), report.results


def test_the_entry_point_is_never_a_builtin_or_a_name_the_tests_define():
    tests = "def approx(a, b):\n    return abs(a - b) < 1e-6\n\nassert approx(f(1), 2)\n"
    for name in ("abs", "approx", "print", "class"):
        with pytest.raises(ValueError, match="entry point"):
            run_tests("def f(x):\n    return 2\n", tests, name)
    report = run_tests("def abs(x):\n    return 0\n\ndef f(x):\n    return 3\n", tests, "f")
    assert (report.passed, report.total) == (0, 1)  # the tests' abs and approx are their own


def test_plans_count_the_same_tests_on_every_humaneval_problem():
    """The rule counts what HumanEval's checks assert on the candidate, no more and no fewer: one
    counted test per statement of check() that asserts on it."""
    for task in humaneval_tasks():
        plan = plan_tests(task.tests, task.entry_point)
        asserting = [
            source
            for _, kind, source in plan.steps
            if kind == "run" and "assert" in source and "candidate" in source
        ]
        assert plan.units == asserting, task.task_id
