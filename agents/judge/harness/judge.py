"""The judge: holds the tests, never the program, and decides every test's result.

Runs in its own sandbox as `main.py` after codec.py's, program.py's and guard.py's text
(agents/judge/testrun.py joins them). Reads its job as JSON on standard input (the task's given
code, the tests' set-up and steps, the names to bind, seconds per test, timeouts allowed, the two
pipe fds), and prints on its original standard output one JSON line per counted test,
`{"unit": i, "passed": bool, "message": "..."}`, or one `{"load_error": "..."}`,
`{"stopped": "..."}` or `{"broken": "..."}` line (a statement outside the counted tests failed).

The tests run here, with this interpreter's own builtins, modules and `unittest`; every step is
compiled before the program starts, and the guard (guard.py) keeps the program's text from ever
becoming code here. The program's functions, classes and objects are stand-ins (program.py) that
send each operation to the program's process (agents/judge/harness/candidate.py) and rebuild its
answer as plain data with exact types, or as another stand-in. So a wrapping `abs(...)`,
`math.isclose(...)`, a loop, a helper or an `assertEqual` in the tests is evaluated here, and
nothing the program does or prints decides a result. Arguments must be plain data or stand-ins:
a test that passes a function or an object of its own to the program fails, saying so.
"""

# encode, decode, NotPlain and MAX_MESSAGE_CHARS are codec.py's, Program and the stand-ins
# program.py's, guard guard.py's: agents/judge/testrun.py runs this file's text after theirs
# ruff: noqa: F821

import ast
import io
import json
import operator
import os
import signal
import sys
import unittest

MAX_SHOWN = 200  # characters of a value shown in a failure message
MAX_VIEWS = 256  # container attributes the tests read and may change, per test
MESSAGE_CHARS = 500

_OPERATORS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: operator.contains(b, a),
    ast.NotIn: lambda a, b: not operator.contains(b, a),
}


class Timeout(BaseException):
    """Raised by the per-test alarm (a BaseException so `except Exception` cannot swallow it)."""


class ProgramError(Exception):
    """The program raised an exception this judge has no class of the same name for, or it
    failed to load; the message names the program's exception."""


class Failed(AssertionError):
    """A test's assertion failed; the message is the whole line shown."""


class ProgramGone(Exception):
    """The program's process ended, or its answers can no longer be read."""


def on_alarm(signum, frame):
    raise Timeout()


def shown(value):
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…"


def _expression(node):
    return compile(ast.fix_missing_locations(ast.Expression(node)), "test.py", "eval")


def prepare(source):
    """One test statement compiled before the program starts: `assert A OP B` as its three parts,
    so that a failure can say what the program's side was; anything else as a whole."""
    tree = ast.parse(source)
    node = tree.body[0] if len(tree.body) == 1 else None
    if (
        isinstance(node, ast.Assert)
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
        and type(node.test.ops[0]) in _OPERATORS
    ):
        return (
            "compare",
            _expression(node.test.left),
            _OPERATORS[type(node.test.ops[0])],
            _expression(node.test.comparators[0]),
            _expression(node.msg) if node.msg is not None else None,
        )
    return ("exec", compile(tree, "test.py", "exec"))


def run_step(kind, compiled, ns):
    """Run one prepared step: a statement, a pytest-style test function, or a unittest test."""
    if kind == "call":
        ns[compiled]()
        return
    if kind == "unittest":
        run_unittest(ns, *compiled.split("."))
        return
    if compiled[0] == "exec":
        exec(compiled[1], ns)
        return
    _, left_code, operator_, right_code, message_code = compiled
    left = eval(left_code, ns)
    right = eval(right_code, ns)
    if operator_(left, right):
        return
    message = eval(message_code, ns) if message_code is not None else None
    why = f"AssertionError: {message}" if message is not None else "assertion failed"
    raise Failed(f"{why} (got {shown(left)})")


def run_unittest(ns, class_name, method):
    """One test method of a unittest.TestCase class, run by this judge's own unittest."""

    class Result(unittest.TestResult):
        def addError(self, test, err):
            if issubclass(err[0], Timeout):
                raise Timeout()
            super().addError(test, err)

    result = Result()
    ns[class_name](method).run(result)
    problems = [text for _, text in result.errors + result.failures]
    problems += ["unexpected success"] * len(result.unexpectedSuccesses)
    if problems:
        raise Failed(problems[0].strip().splitlines()[-1])
    if result.testsRun != 1:
        raise Failed("the test did not run")


def judge_step(kind, compiled, ns, per_test):
    """(passed, message, whether it timed out) for one step."""
    signal.setitimer(signal.ITIMER_REAL, per_test)
    try:
        run_step(kind, compiled, ns)
        return True, "", False
    except Timeout:
        return False, f"timed out after {per_test:g}s", True
    except (Failed, ProgramError) as e:
        return False, str(e), False
    except AssertionError as e:
        text = str(e)
        return False, f"AssertionError: {text}" if text else "assertion failed", False
    except BaseException as e:  # a rebuilt exception's text is the program's: bounded, printable
        return False, _bounded(f"{type(e).__name__}: {e}"), False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main():
    job = json.loads(sys.stdin.read())
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what the tests print goes nowhere
    sys.stdout = io.StringIO()

    def report(record):
        out.write(json.dumps(record) + "\n")
        out.flush()

    # everything of the tests is compiled before the program's first answer
    given = compile(job["given"], "given.py", "exec")
    setup = compile(job["setup"], "test.py", "exec")
    steps = [
        (unit, kind, prepare(payload) if kind == "run" else payload)
        for unit, kind, payload in job["steps"]
    ]
    guard.install()
    signal.signal(signal.SIGALRM, on_alarm)
    global PROGRAM
    program = PROGRAM = Program(job["requests_fd"], job["answers_fd"])
    signal.setitimer(signal.ITIMER_REAL, job["load_seconds"])
    try:
        names = program.ready()
    except Timeout:
        report({"load_error": f"loading the program took more than {job['per_test']:g}s"})
        return
    except (ProgramError, ProgramGone) as e:
        report({"load_error": str(e)[:MESSAGE_CHARS]})
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    entry_point = job["entry_point"]
    if entry_point not in names:
        report({"load_error": f"the program does not define {entry_point}()"})
        return
    ns = {"__name__": "tests"}
    try:
        exec(given, ns)
        signal.setitimer(signal.ITIMER_REAL, job["per_test"])
        for name in job["bind"]:  # another function or class of the program the tests call
            if name in names and name not in ns:
                ns[name] = program.op("global", name=name)
        entry = ns[entry_point] = ns[job["candidate"]] = program.op("global", name=entry_point)
        signal.setitimer(signal.ITIMER_REAL, job["per_test"])
        exec(setup, ns)
    except BaseException as e:
        report({"load_error": f"the tests' set-up failed: {type(e).__name__}: {e}"[:MESSAGE_CHARS]})
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    ns[entry_point] = ns[job["candidate"]] = entry
    timeouts = 0
    for unit, kind, compiled in steps:
        if unit is not None:
            program.views.clear()  # a test's objects are its own
        passed, message, timed_out = judge_step(kind, compiled, ns, job["per_test"])
        sys.stdout = io.StringIO()
        timeouts += timed_out
        if unit is not None:
            report({"unit": unit, "passed": passed, "message": message[:MESSAGE_CHARS]})
        elif not passed:  # a statement that prepares failed: the run fails, never silently
            report(
                {
                    "broken": f"a statement outside the counted tests failed: {message}"[
                        :MESSAGE_CHARS
                    ]
                }
            )
            return
        if timeouts >= job["max_timeouts"]:
            report({"stopped": f"{timeouts} tests timed out"})
            return


main()
