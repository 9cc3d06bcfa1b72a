"""The test runner against programs that try to forge their own result.

The task's expected values are odd numbers (31337, ...) that no honest `add` returns: a forger
can only pass by reading them, which the judge makes impossible (it holds the tests in another
process), or by fooling the judge with what it answers or prints. Every attack must score 0 of
its tests through `run_tests`, the team's check of a turn and the learner's coding reward; a
program that knows the answers scores full, so the runner can tell them apart.
"""

import json
import textwrap
from dataclasses import replace

import pytest

from agents.judge.harness.codec import NotPlain, decode, encode
from agents.judge.result import SandboxResult
from agents.judge.testrun import _report, plan_tests, run_tests
from agents.tasks import Task, humaneval_tasks
from agents.team.feedback import sandbox_check
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


# tests of other forms: the call wrapped in abs(), math.isclose(), tuple(), a loop, a helper
WRAPPED = {
    "abs": """
def check(candidate):
    assert abs(candidate(1, 2) - 31337.5) < 1e-6
    assert abs(candidate(5, 5) - 27182.5) < 1e-6
    assert abs(candidate(-1, 1) - 16180.5) < 1e-6
""",
    "isclose": """
import math

def check(candidate):
    assert math.isclose(candidate(1, 2), 31337.5)
    assert math.isclose(candidate(5, 5), 27182.5)
    assert math.isclose(candidate(-1, 1), 16180.5)
""",
    "tuple": """
def check(candidate):
    assert tuple(candidate(1, 2)) == tuple([31337, 1])
    assert tuple(candidate(5, 5)) == tuple([27182, 1])
    assert tuple(candidate(-1, 1)) == tuple([16180, 1])
""",
    "loop_and_helper": """
EXPECTED = {(1, 2): 31337, (5, 5): 27182, (-1, 1): 16180}

def same(a, b):
    return a == b

def check(candidate):
    for pair in [(1, 2)]:
        assert candidate(*pair) == EXPECTED[pair]
    assert same(candidate(5, 5), EXPECTED[5, 5])
    assert all(candidate(*p) == EXPECTED[p] for p in [(-1, 1)])
""",
}

RIGHT = {
    "abs": "def add(a, b):\n    return {(1, 2): 31337.5, (5, 5): 27182.5, (-1, 1): 16180.5}[a, b]\n",
    "tuple": "def add(a, b):\n    return [{(1, 2): 31337, (5, 5): 27182, (-1, 1): 16180}[a, b], 1]\n",
}
RIGHT["isclose"], RIGHT["loop_and_helper"] = RIGHT["abs"], KNOWS_THE_ANSWERS

# writes passed-test lines in the judge's format to every fd it can, then ends in its own way
RESULT_LINES = """
import os, time
def add(a, b):
    for fd in range(0, 256):
        for unit in range(3):
            line = '{"unit": %d, "passed": true, "message": ""}\\n' % unit
            try:
                os.write(fd, line.encode())
            except OSError:
                break
"""

# (the tests it is run against, the program): each is wrong about what add returns
FORGERS = {
    "object_whose_sub_is_zero": (
        "abs",
        """
class Zero:
    def __sub__(self, other):
        return 0.0
    __rsub__ = __sub__
def add(a, b):
    return Zero()
""",
    ),
    "float_subclass_whose_sub_is_zero": (
        "abs",
        """
class Sly(float):
    def __sub__(self, other):
        return 0.0
def add(a, b):
    return Sly(a + b)
""",
    ),
    "module_level_abs": (
        "abs",
        """
abs = lambda x: 0.0
def add(a, b):
    return float(a + b)
""",
    ),
    "builtins_abs": (
        "abs",
        """
import builtins
builtins.abs = lambda x: 0.0
def add(a, b):
    return float(a + b)
""",
    ),
    "math_isclose_patched": (
        "isclose",
        """
import math
math.isclose = lambda *a, **k: True
def add(a, b):
    return float(a + b)
""",
    ),
    "tuple_shadowed": (
        "tuple",
        """
tuple = lambda *a: ()
import builtins
builtins.tuple = tuple
def add(a, b):
    return [a + b, 1]
""",
    ),
    "always_equal_in_a_loop_and_a_helper": (
        "loop_and_helper",
        """
class Anything:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
def add(a, b):
    return Anything()
""",
    ),
    "a_list_subclass": (
        "tuple",
        """
class Listy(list):
    def __eq__(self, other):
        return True
def add(a, b):
    return Listy([a + b, 1])
""",
    ),
    "a_recursive_list": (
        "tuple",
        """
def add(a, b):
    value = [a + b]
    value.append(value)
    return value
""",
    ),
    "result_lines_on_every_fd_then_exit": ("loop_and_helper", RESULT_LINES + "    os._exit(0)\n"),
    "result_lines_on_every_fd_then_sleep": ("abs", RESULT_LINES + "    time.sleep(60)\n"),
    "answers_ahead_of_the_questions_and_twice": (
        "abs",
        """
import os, json
def add(a, b):
    for seq in [1, 1, 2, 2, 3, 3]:  # its own answers, early and twice: still its answers
        line = json.dumps({"seq": seq, "value": ["f", repr(float(a + b))]}) + "\\n"
        for fd in range(3, 64):
            try:
                os.write(fd, line.encode())
            except OSError:
                pass
    return 0.0
""",
    ),
    "reads_the_tests_from_anywhere": (
        "abs",
        """
import glob, gc, os, re
found = []
for path in glob.glob("/tmp/**", recursive=True) + glob.glob("/proc/*/cmdline") + glob.glob(
    "/proc/*/fd/*"
):
    try:
        with open(path, "rb") as f:
            found += re.findall(rb"- (\\d+\\.5)\\)", f.read(1_000_000))
    except OSError:
        pass
for obj in gc.get_objects():
    found += re.findall(r"- (\\d+\\.5)\\)", repr(obj)[:10000])
def add(a, b):
    return float(found.pop(0)) if found else 0.0
""",
    ),
}


def test_the_answers_pass_so_the_runner_can_tell():
    report = run_tests(KNOWS_THE_ANSWERS, TESTS, "add", timeout=2.0)
    assert (report.passed, report.total) == (3, 3), report.error
    assert report.fraction == 1.0


def _assert_scores_nothing(program: str, tests: str) -> None:
    report = run_tests(program, tests, "add", timeout=2.0)
    assert report.total == 3 and report.passed == 0, [r.message for r in report.results]
    assert report.fraction == 0.0
    reward = coding_reward(["", program], [["aux"], ["add"]], "add", program, report=report)
    assert reward["asserts_passed"] == 0.0 and reward["tests"] == 0.0, reward
    assert 0.0 <= reward["quality"] <= 1.0
    task = Task(kind="coding", form="user", prompt="add", source="test", entry_point="add")
    check = sandbox_check(program, replace(task, tests=tests))  # the team's verdict on a turn
    assert not check.passed and check.tests_passed == 0


@pytest.mark.parametrize("name", list(ATTACKS))
def test_forging_programs_score_nothing(name):
    _assert_scores_nothing(ATTACKS[name], TESTS)


@pytest.mark.parametrize("form", list(WRAPPED))
def test_honest_programs_pass_tests_of_every_form_and_wrong_ones_fail(form):
    assert run_tests(RIGHT[form], WRAPPED[form], "add", timeout=2.0).passed == 3
    wrong = RIGHT[form].replace("31337", "31338").replace("27182", "1").replace("16180", "2")
    assert run_tests(wrong, WRAPPED[form], "add", timeout=2.0).passed == 0


@pytest.mark.parametrize("name", list(FORGERS))
def test_programs_that_forge_wrapped_or_looped_tests_score_nothing(name):
    form, program = FORGERS[name]
    _assert_scores_nothing(program, WRAPPED[form])


def test_what_the_program_raises_reaches_the_tests_as_a_bounded_exception():
    tests = textwrap.dedent(
        """
        def raises(function, argument):
            try:
                function(argument)
            except ValueError:
                return True
            return False

        def check(candidate):
            assert raises(candidate, -1)
            assert candidate(2) == 3
        """
    )
    program = (
        "class Odd(Exception):\n    pass\n"
        "def inc(x):\n"
        "    if x < 0:\n        raise ValueError('negative ' + 'x' * 10_000 + '\\x1b[31m')\n"
        "    raise Odd('odd\\nline')\n"
    )
    report = run_tests(program, tests, "inc", timeout=2.0)
    assert [r.passed for r in report.results] == [True, False]
    assert report.results[1].message == "Odd: odd line"


def test_what_is_not_plain_data_stays_in_the_program_and_is_judged_as_python_would():
    """A generator or an object comes back as a handle: the tests may iterate it, and it equals
    only itself (never what the program's __eq__ says)."""
    tests = textwrap.dedent(
        """
        def check(candidate):
            assert tuple(candidate(1, 2)) == (31337, 1)
            assert candidate(5, 5) == [31337, 1]
            assert list(candidate(-1, 1)) == [16180, 1]
        """
    )
    report = run_tests("def add(a, b):\n    yield from [31337, 1]\n", tests, "add", timeout=2.0)
    assert [r.passed for r in report.results] == [True, False, False]


def test_a_test_that_passes_the_program_a_function_fails_saying_why():
    tests = "def check(candidate):\n    assert candidate(lambda: 1) == 1\n"
    report = run_tests("def call(f):\n    return f()\n", tests, "call", timeout=2.0)
    assert not report.results[0].passed
    assert "only plain data reaches the program" in report.results[0].message


def test_the_tasks_given_helpers_are_the_judges_not_the_programs():
    task = humaneval_tasks()[38]  # decode_cyclic: the tests call the problem's encode_cyclic
    assert "encode_cyclic" in task.preamble
    liar = "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n"
    report = run_tests(liar, task.tests, task.entry_point, given=task.preamble)
    assert report.total == 1 and report.passed == 0
    right = task.prompt + task.reference
    report = run_tests(right, task.tests, task.entry_point, given=task.preamble)
    assert report.passed == 1, report.results


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
    in_python = []
    for _, _, source in plan_tests(
        tests, "pair"
    ).steps:  # the same asserts run here, on a program we wrote
        namespace: dict = {}
        exec(program + "\nf = pair\n", namespace)
        try:
            exec(source, namespace)
            in_python.append(True)
        except AssertionError:
            in_python.append(False)
    assert in_python == [True, True, False, False, True, True, True, True, True]
    report = run_tests(program, tests, "pair", timeout=2.0)
    assert [r.passed for r in report.results] == in_python
    assert report.results[3].message == "assertion failed (got (3, 6))"


def test_values_cross_only_as_plain_data():
    value = (1, "a", None, 2**4000, -7, b"\x00", {frozenset({2}): float("inf")}, [1.5, 2j])
    assert decode(json.loads(json.dumps(encode(value)))) == value
    for bad in (
        ["x", 1],
        ["i", 1],
        ["S", [["l", []]]],  # unhashable in a set
        "31337",
        ["b", "true"],
        ["d", [[["i", "1"]]]],
        ["l", [], "extra"],
    ):
        with pytest.raises(NotPlain):
            decode(bad)
    deep: list = ["N", None]
    for _ in range(100):
        deep = ["l", [deep]]
    with pytest.raises(NotPlain):
        decode(deep)
    for not_plain in (type("T", (), {}), iter([]), type("S", (str,), {})("s")):
        with pytest.raises(NotPlain):
            encode(not_plain)


def test_every_line_read_back_from_the_judge_is_validated():
    line = {"unit": 0, "passed": True, "message": ""}
    lines = [
        json.dumps(line),
        json.dumps(line | {"unit": 1}),
        json.dumps(line | {"unit": 1, "passed": False}),  # twice: the first counts
        json.dumps(line | {"unit": 7}),  # not asked for
        json.dumps(line | {"unit": True}),  # a bool is not a unit number
        json.dumps(line | {"unit": 2, "value": ["i", "0x3"]}),
        json.dumps(line | {"unit": 2, "passed": 1}),
        json.dumps([1, 2]),
        "[" * 100_000,
        "\udcff not utf-8",
    ]
    run = SandboxResult(
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
    report = _report(run, run, ["a", "b", "c"])  # one line it would not write fails the run
    assert [r.passed for r in report.results] == [False, False, False]
    assert report.rejected_lines == 8
    assert report.error.startswith("the judge's results were not its own: 8 line(s)")
    clean = replace(run, stdout="\n".join(lines[:2]))
    report = _report(clean, run, ["a", "b", "c"])
    assert [r.passed for r in report.results] == [True, True, False]
    assert report.error == "the program ended before every test ran"
    broken = replace(clean, stdout=clean.stdout + '\n{"broken": "x = f() failed"}')
    assert _report(broken, run, ["a", "b", "c"]).passed == 0
