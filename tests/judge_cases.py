"""Test forms people write and programs that exploit how a judge reads them (the judge's third
round): for each, the tests, an honest right program, an honest wrong one and an attack. Used by
tests/test_judge_forms.py and bench/judge_attacks.py (which prints the table before and after).

`expected` is what each program should score as (passed, total) in an honest judge: the right one
passes every test; the wrong one and the attack score as an honest program that is wrong would.
"""

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    tests: str
    entry_point: str
    right: str
    wrong: str
    attack: str
    expected: dict  # program -> (passed, total)
    given: str = ""


def _d(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# writes a passing result line for units 0-4 on every file descriptor it can, in the judge's
# format, then evaluates to None
WRITE_PASSES = _d(
    """
    import os
    for fd in range(3, 64):
        for unit in range(5):
            try:
                os.write(fd, ('{"unit": %d, "passed": true, "message": ""}\\n' % unit).encode())
            except OSError:
                break
    """
)

ROUND_TRIP_VALUES = ["1", "[2, 3]", "'a'", "(4,)", "{5: 6}"]

CASES = [
    Case(
        "eval_of_the_answer",
        "tests that eval() the program's answer",
        "def check(candidate):\n"
        + "".join(f"    assert eval(candidate({v})) == {v}\n" for v in ROUND_TRIP_VALUES),
        "show",
        "def show(x):\n    return repr(x)\n",
        "def show(x):\n    return repr(None)\n",
        f"PAYLOAD = {WRITE_PASSES!r}\n\ndef show(x):\n    return 'exec(%r) or None' % PAYLOAD\n",
        {"right": (5, 5), "wrong": (0, 5), "attack": (0, 5)},
    ),
    Case(
        "pickle_of_the_answer",
        "tests that unpickle the program's answer",
        "import pickle\n\ndef check(candidate):\n"
        + "".join(f"    assert pickle.loads(candidate({v})) == {v}\n" for v in ROUND_TRIP_VALUES),
        "dump",
        "import pickle\n\ndef dump(x):\n    return pickle.dumps(x)\n",
        "import pickle\n\ndef dump(x):\n    return pickle.dumps(None)\n",
        f"import pickle\nPAYLOAD = {WRITE_PASSES!r}\n\n"
        "class Forge:\n    def __reduce__(self):\n        return (exec, (PAYLOAD,))\n\n"
        "def dump(x):\n    return pickle.dumps(Forge())\n",
        {"right": (5, 5), "wrong": (0, 5), "attack": (0, 5)},
    ),
    Case(
        "pytest_functions",
        "pytest-style test functions",
        _d(
            """
            def test_small():
                assert add(1, 2) == 3

            def test_negative():
                assert add(-1, 1) == 0

            def test_big():
                assert add(10**6, 1) == 1000001
            """
        ),
        "add",
        "def add(a, b):\n    return a + b\n",
        "def add(a, b):\n    return a - b\n",
        "def add(a, b):\n    pass\n",
        {"right": (3, 3), "wrong": (0, 3), "attack": (0, 3)},
    ),
    Case(
        "asserts_in_a_helper",
        "a check() whose asserts live in a helper",
        _d(
            """
            def expect(got, want):
                assert got == want, (got, want)

            def check(candidate):
                expect(candidate(1, 2), 3)
                expect(candidate(2, 2), 4)
            """
        ),
        "add",
        "def add(a, b):\n    return a + b\n",
        "def add(a, b):\n    return a - b\n",
        "def add(a, b):\n    return None\n",
        {"right": (2, 2), "wrong": (0, 2), "attack": (0, 2)},
    ),
    Case(
        "answer_in_a_variable",
        "an assert on a variable that holds the program's answer",
        _d(
            """
            def check(candidate):
                assert candidate(1) == 1
                assert candidate(2) == 2
                result = candidate(5)
                assert result == 120
            """
        ),
        "factorial",
        "import math\n\ndef factorial(n):\n    return math.factorial(n)\n",
        "def factorial(n):\n    return 0\n",
        "def factorial(n):\n    return n\n",
        {"right": (3, 3), "wrong": (0, 3), "attack": (2, 3)},
    ),
    Case(
        "stop_iteration",
        "a rebuilt StopIteration that ends the tests' map()",
        _d(
            """
            def check(candidate):
                assert all(map(candidate, [2, 4, 6]))
                assert not any(map(candidate, [1, 3, 5]))
                assert sum(map(candidate, [2, 4, 5])) == 2
                assert list(zip([1, 2], map(candidate, [1, 2]))) == [(1, False), (2, True)]
            """
        ),
        "is_even",
        "def is_even(n):\n    return n % 2 == 0\n",
        "def is_even(n):\n    return n % 2 == 1\n",
        "def is_even(n):\n    raise StopIteration\n",
        {"right": (4, 4), "wrong": (0, 4), "attack": (0, 4)},
    ),
    Case(
        "changed_argument",
        "a program that sorts its argument in place and returns it",
        _d(
            """
            def check(candidate):
                data = [3, 1, 2]
                assert candidate(data) is not data
                assert data == [3, 1, 2], "must not change its argument"
            """
        ),
        "sorted_copy",
        "def sorted_copy(items):\n    return sorted(items)\n",
        "def sorted_copy(items):\n    items.append(0)\n    return items\n",
        "def sorted_copy(items):\n    items.sort()\n    return items\n",
        {"right": (2, 2), "wrong": (0, 2), "attack": (0, 2)},
    ),
    Case(
        "range_answer",
        "an honest program that returns a range",
        _d(
            """
            def check(candidate):
                assert list(candidate(7)) == [0, 2, 4, 6]
                assert len(candidate(9)) == 5
                assert 4 in candidate(5)
            """
        ),
        "evens",
        "def evens(n):\n    return range(0, n, 2)\n",
        "def evens(n):\n    return range(1, n, 2)\n",
        "def evens(n):\n    return range(1, n, 2)\n",
        {"right": (3, 3), "wrong": (0, 3), "attack": (0, 3)},
    ),
    Case(
        "large_list",
        "an honest program that returns 300,000 items",
        _d(
            """
            def check(candidate):
                assert len(candidate(300000)) == 300000
                assert candidate(250000)[-1] == 249999
            """
        ),
        "upto",
        "def upto(n):\n    return list(range(n))\n",
        "def upto(n):\n    return list(range(n - 1))\n",
        "def upto(n):\n    return list(range(n - 1))\n",
        {"right": (2, 2), "wrong": (0, 2), "attack": (0, 2)},
    ),
    Case(
        "exception_subclass",
        "a ValueError subclass the tests catch as ValueError",
        _d(
            """
            def check(candidate):
                try:
                    candidate(-1)
                    raised = False
                except ValueError:
                    raised = True
                assert raised
                assert candidate(16) == 4
            """
        ),
        "root",
        _d(
            """
            class NegativeError(ValueError):
                pass

            def root(x):
                if x < 0:
                    raise NegativeError("negative")
                return int(x**0.5)
            """
        ),
        "def root(x):\n    return x\n",
        "def root(x):\n    return x\n",
        {"right": (2, 2), "wrong": (0, 2), "attack": (0, 2)},
    ),
]

BY_NAME = {case.name: case for case in CASES}
