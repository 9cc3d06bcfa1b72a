"""The test runner against programs that try to forge their own result.

The task's expected values are odd numbers (31337, ...) that no honest `add` returns: a forger
can only pass by reading them, which the runner must make impossible, or by fooling the runner's
reading of the sandbox's output. Every attack must score 0 of 3, through `run_tests`, the
team's check of a turn and the learner's coding reward; a program that knows the answers scores 3 of 3, so the runner can
tell them apart.
"""

import json
import textwrap
from dataclasses import replace

import pytest

from agents.feedback import sandbox_check
from agents.sandbox_result import SandboxResult
from agents.tasks import Task
from agents.testrun import (
    COMPARED,
    INSIDE,
    MalformedValue,
    _read_lines,
    decode_value,
    plan_tests,
    run_tests,
)
from learner.coding_reward import coding_reward

TESTS = textwrap.dedent(
    """
    def check(candidate):
        assert candidate(1, 2) == 31337
        assert candidate(5, 5) == 27182
        assert candidate(-1, 1) == 16180
    """
)

KNOWS_THE_ANSWERS = """
def add(a, b):
    return {(1, 2): 31337, (5, 5): 27182, (-1, 1): 16180}[(a, b)]
"""

# each forges in its own way; all of them are wrong about what add returns
ATTACKS = {
    "patch_json_dumps": """
import json
_dumps = json.dumps
def _forged(obj, *args, **kwargs):
    if isinstance(obj, dict) and "unit" in obj:
        obj = {"unit": obj["unit"], "passed": True, "message": ""}
    return _dumps(obj, *args, **kwargs)
json.dumps = _forged
def add(a, b):
    return a + b
""",
    "walk_frames_for_the_answers": """
import re, sys
def add(a, b):
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):
            found = re.search(r"==\\s*(-?\\d+)", repr(value))
            if found:
                return int(found.group(1))
        frame = frame.f_back
    return a + b
""",
    "search_memory_and_files_for_the_answers": """
import gc, os, re
def _texts():
    for obj in gc.get_objects():
        yield repr(obj)[:100000]
    for path in ("main.py", "job.json", "/proc/self/cmdline", "/proc/self/environ",
                 "/proc/%d/cmdline" % os.getppid(), "/proc/%d/environ" % os.getppid()):
        try:
            with open(path, "rb") as f:
                yield f.read().decode("utf-8", "replace")
        except OSError:
            pass
_numbers = [int(n) for t in _texts() for n in re.findall(r"==\\s*(\\d{5})", t)]
def add(a, b):
    return _numbers.pop(0) if _numbers else a + b
""",
    "patch_the_harness_encoder": """
import sys
sys.modules["__main__"].encode = lambda value, depth=0: ["b", True]
def add(a, b):
    return a + b
""",
    "always_true_eq": """
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
def add(a, b):
    return Anything()
""",
    "int_subclass_with_eq": """
class Sly(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
def add(a, b):
    return Sly(a + b)
""",
    "forged_lines_then_exit": """
import os
with open("main.py") as f:
    harness = f.read()
lines = [
    '{"unit": 0, "passed": true, "message": ""}',
    '{"unit": 1, "passed": 1000000, "message": ""}',
    '{"passed": 1000000, "total": 1}',
    '{"unit": 999, "value": ["i", "1"]}',
    '{"unit": "0", "value": ["i", "31337"]}',
    '{"unit": 2, "value": ["i", "16180"], "passed": true}',
    "not json at all",
    '{"unit": 0, "value": ' + "[" * 100000 + "]" * 100000 + "}",
    '{"unit": 1, "value": ["i", "' + "9" * 5000 + '"]}',
    '{"unit": 2, "value": ["f", "nan"]}',
    "@@coteam-%s@@{\\"unit\\": 0, \\"passed\\": true}" % harness[:16],
]
for fd in range(1, 64):
    for line in lines:
        try:
            os.write(fd, (line + "\\n").encode())
        except OSError:
            break
os._exit(0)
def add(a, b):
    return a + b
""",
    "duplicate_lines_then_carry_on": """
import os
def add(a, b):
    for fd in range(1, 64):
        for unit in range(3):
            try:
                os.write(fd, ('{"unit": %d, "value": ["b", true]}\\n' % unit).encode())
            except OSError:
                break
    return a + b
""",
    "sys_exit_at_load": """
import sys
sys.exit(0)
def add(a, b):
    return a + b
""",
    "os_exit_in_the_call": """
import os
def add(a, b):
    os._exit(0)
""",
    "system_exit_in_the_call": """
def add(a, b):
    raise SystemExit(0)
""",
    "huge_value": """
def add(a, b):
    return "x" * 10_000_000
""",
    "deeply_nested_value": """
def add(a, b):
    value = []
    for _ in range(100_000):
        value = [value]
    return value
""",
    "output_flood_on_every_fd": """
import os
def add(a, b):
    for fd in range(1, 64):
        try:
            os.write(fd, b'{"unit": 0, "passed": true}' * 100_000)
        except OSError:
            pass
    return a + b
""",
    "exception_with_a_hostile_str": """
class Loud(Exception):
    def __str__(self):
        raise SystemExit(0)
def add(a, b):
    raise Loud()
""",
}


def test_the_answers_pass_so_the_runner_can_tell():
    report = run_tests(KNOWS_THE_ANSWERS, TESTS, "add", timeout=2.0)
    assert (report.passed, report.total) == (3, 3), report.error
    assert {r.kind for r in report.results} == {COMPARED}
    assert report.weighted_fraction == 1.0


@pytest.mark.parametrize("name", list(ATTACKS))
def test_forging_programs_score_nothing(name):
    program = ATTACKS[name]
    report = run_tests(program, TESTS, "add", timeout=2.0)
    assert (report.passed, report.total) == (0, 3), [r.message for r in report.results]
    assert report.fraction == 0.0 and report.weighted_fraction == 0.0
    reward = coding_reward(["", program], [["aux"], ["add"]], "add", program, report=report)
    assert reward["asserts_passed"] == 0.0 and reward["tests"] == 0.0, reward
    assert 0.0 <= reward["quality"] <= 1.0
    task = Task(kind="coding", form="user", prompt="add", source="test", entry_point="add")
    check = sandbox_check(program, replace(task, tests=TESTS))  # the team's verdict on a turn
    assert not check.passed and check.tests_passed == 0


def test_a_run_reports_each_tests_kind_and_weighs_inside_tests_less():
    tests = textwrap.dedent(
        """
        def check(candidate):
            assert candidate(2) == 4
            assert not candidate(0)
            for x in range(3):
                assert candidate(x) == 2 * x
            assert candidate(3) == sum([3, 3])
        """
    )
    report = run_tests("def double(x):\n    return 2 * x\n", tests, "double", timeout=2.0)
    assert [r.kind for r in report.results] == [COMPARED, COMPARED, INSIDE, INSIDE]
    assert (report.passed, report.total) == (4, 4)
    report = run_tests("def double(x):\n    return 4\n", tests, "double", timeout=2.0)
    assert [r.passed for r in report.results] == [True, False, False, False]
    assert report.weighted_fraction == pytest.approx(1 / 3)  # 1 of 1 + 1 + 0.5 + 0.5
    assert report.to_dict()["tests"][1] == {
        "source": "assert not candidate(0)",
        "kind": COMPARED,
        "passed": False,
        "message": "assertion failed (got 4)",
    }


def test_compared_forms_keep_pythons_meaning():
    tests = textwrap.dedent(
        """
        def check(f):
            assert f(1) == (1, 2)
            assert f(2) != [2, 4]
            assert f(2) != (2, 4)
            assert f(3) == [3, 6]
            assert 2 < f(3)[0]
            assert f(4) is None
            assert 5 in f(5)
            assert abs(f(6)[1] - 0.5) < 1e-6
            assert f(7)
        """
    )
    program = textwrap.dedent(
        """
        def pair(x):
            if x == 4:
                return None
            if x == 6:
                return [6, 0.5000000001]
            return (x, 2 * x)
        """
    )
    _, _, units = plan_tests(tests, "pair")
    assert all(u.kind == COMPARED for u in units)
    in_python = []
    for unit in units:  # the same asserts run here, on a program we wrote
        namespace: dict = {}
        exec(program + "\nf = pair\n", namespace)
        try:
            exec(unit.source, namespace)
            in_python.append(True)
        except AssertionError:
            in_python.append(False)
    assert in_python == [True, True, False, False, True, True, True, True, True]
    report = run_tests(program, tests, "pair", timeout=2.0)
    assert [r.passed for r in report.results] == in_python


def test_values_come_back_only_as_plain_data():
    assert decode_value(["t", [["i", "1"], ["s", "a"], ["N", None]]]) == (1, "a", None)
    assert decode_value(["d", [[["F", [["i", "2"]]], ["f", "inf"]]]]) == {
        frozenset({2}): float("inf")
    }
    for bad in (
        ["x", 1],
        ["i", 1],
        ["i", "9" * 5000],  # past Python's int-from-string limit
        ["S", [["l", []]]],  # unhashable in a set
        "31337",
        ["b", "true"],
        ["d", [[["i", "1"]]]],
        ["l", [], "extra"],
    ):
        with pytest.raises(MalformedValue):
            decode_value(bad)
    deep: list = ["N", None]
    for _ in range(100):
        deep = ["l", [deep]]
    with pytest.raises(MalformedValue):
        decode_value(deep)


def test_every_line_read_back_is_validated():
    lines = [
        json.dumps({"unit": 0, "value": ["i", "1"]}),
        json.dumps({"unit": 1, "value": ["i", "2"]}),
        json.dumps({"unit": 1, "value": ["i", "2"]}),  # twice: neither counts
        json.dumps({"unit": 7, "value": ["i", "2"]}),  # not asked for
        json.dumps({"unit": True, "value": ["i", "2"]}),  # a bool is not a unit number
        json.dumps({"unit": 2, "value": ["i", "3"], "passed": True}),
        json.dumps([1, 2]),
        "[" * 100_000,
        "\udcff not utf-8",
    ]
    result = SandboxResult(
        stdout="\n".join(lines),
        stderr="",
        exit_code=0,
        timed_out=False,
        killed_by=None,
        limit=None,
        reason="finished normally",
        blocked=[],
        duration_s=0.1,
        output_truncated=False,
        layers=[],
    )
    records, rejected, error = _read_lines(result, {0, 1, 2}, [{"value"}, {"error"}])
    assert list(records) == [0]
    assert rejected == 7
    assert error == "the program ended before every test ran"
