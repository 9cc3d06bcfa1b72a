"""The judge: holds the tests, never the program, and decides every test's result.

Runs in its own sandbox as `main.py` after codec.py's text (agents/judge/testrun.py joins them). Reads
its job as JSON on standard input (the task's given code, the tests' set-up and steps, the names,
seconds per test, timeouts allowed, the two pipe fds), and prints on its original standard output
one JSON line per counted test, `{"unit": i, "passed": bool, "message": "..."}`, or one
`{"load_error": "..."}` / `{"stopped": "..."}` line.

The tests run here, with this interpreter's own builtins and modules. The program's functions are
stand-ins that send each call's arguments to the program's process (agents/judge/harness/candidate.py)
and rebuild its answer as plain data with exact types; anything else fails that test. So a
wrapping `abs(...)`, `math.isclose(...)`, a loop or a helper in the tests is evaluated here, and
nothing the program does or prints decides a result. Arguments must be plain data too: a test
that passes a function or an object to the program fails, saying so.
"""

# encode, decode, NotPlain and MAX_MESSAGE_CHARS are codec.py's: agents/judge/testrun.py runs this
# file's text after codec.py's
# ruff: noqa: F821

import ast
import builtins
import io
import json
import operator
import os
import signal
import sys

MAX_SHOWN = 200  # characters of a value shown in a failure message
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


def program_exception(name, message):
    """The program's exception rebuilt here: the builtin of that name (so that a test may catch a
    ValueError), else a ProgramError that names it. Only its name and a bounded message cross."""
    name, message = _bounded(name)[:60], _bounded(message)
    found = getattr(builtins, name, None) if name.isidentifier() else None
    if isinstance(found, type) and issubclass(found, Exception):
        try:
            return found(message)
        except Exception:  # needs other arguments (UnicodeDecodeError)
            pass
    return ProgramError(f"{name}: {message}" if message else name)


class Program:
    """The program's process, seen from here: calls go out as requests, values come back."""

    def __init__(self, requests_fd, answers_fd):
        self.requests = os.fdopen(requests_fd, "w", encoding="utf-8")
        self.answers = os.fdopen(answers_fd, "rb")
        self.seq = 0
        self.gone = ""

    def read(self):
        """The next well-formed record from the program, or ProgramGone."""
        while True:
            if self.gone:
                raise ProgramGone(self.gone)
            line = self.answers.readline(MAX_MESSAGE_CHARS + 1)
            if not line:
                self.gone = "the program ended before answering"
                continue
            if len(line) > MAX_MESSAGE_CHARS:
                self.gone = f"the program answered with more than {MAX_MESSAGE_CHARS} characters"
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                continue  # not one of the program's answers: ignored
            if type(record) is dict:
                return record

    def ready(self):
        """The names of the program's callables once it has loaded; ProgramError if it failed."""
        while True:
            record = self.read()
            names = record.get("ready")
            if set(record) == {"ready"} and type(names) is list:
                return {n for n in names if type(n) is str}
            error = record.get("load_error")
            if set(record) == {"load_error"} and type(error) is list and len(error) == 2:
                name, message = (_bounded(part) for part in error)
                if name == "Timeout":  # the program's process stopped its own loading
                    raise ProgramError(message)
                raise ProgramError(f"{name}: {message}" if message else name)

    def call(self, name, args, kwargs):
        try:
            encoded_args = [encode(a) for a in args]
            encoded_kwargs = [[k, encode(v)] for k, v in kwargs.items()]
        except NotPlain as e:
            raise TypeError(
                f"the test passes {e} to {name}(); only plain data reaches the program"
            ) from None
        self.seq += 1
        request = {"seq": self.seq, "name": name, "args": encoded_args, "kwargs": encoded_kwargs}
        try:
            self.requests.write(json.dumps(request) + "\n")
            self.requests.flush()
        except (BrokenPipeError, OSError):
            self.gone = "the program ended before answering"
            raise ProgramGone(self.gone) from None
        while True:
            record = self.read()
            if record.get("seq") != self.seq or type(record.get("seq")) is not int:
                continue  # an answer to an earlier call that timed out here, or a stray line
            if set(record) == {"seq", "value"}:
                try:
                    return decode(record["value"])
                except NotPlain as e:
                    raise TypeError(
                        f"{name}() returned something that is not plain data ({e})"
                    ) from None
            raised = record.get("raised")
            if set(record) == {"seq", "raised"} and type(raised) is list and len(raised) == 2:
                if raised[0] == "Timeout":
                    raise Timeout()
                raise program_exception(raised[0], raised[1])


def _bounded(text):
    text = str(text)
    return "".join(c if c.isprintable() else " " for c in text)[:300]


def remote(program, name):
    def call(*args, **kwargs):
        return program.call(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def shown(value):
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…"


def run_statement(source, ns):
    """Run one test statement here. `assert A OP B` is evaluated side by side so that a failure
    can say what the program's side was; anything else runs as written."""
    tree = ast.parse(source)
    node = tree.body[0] if len(tree.body) == 1 else None
    if (
        isinstance(node, ast.Assert)
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
        and type(node.test.ops[0]) in _OPERATORS
    ):
        left = _evaluate(node.test.left, ns)
        right = _evaluate(node.test.comparators[0], ns)
        if _OPERATORS[type(node.test.ops[0])](left, right):
            return
        message = _evaluate(node.msg, ns) if node.msg is not None else None
        why = f"AssertionError: {message}" if message is not None else "assertion failed"
        raise Failed(f"{why} (got {shown(left)})")
    exec(compile(tree, "test.py", "exec"), ns)


def _evaluate(expression, ns):
    return eval(
        compile(ast.fix_missing_locations(ast.Expression(expression)), "test.py", "eval"), ns
    )


def judge_step(source, ns, per_test):
    """(passed, message, whether it timed out) for one statement."""
    signal.setitimer(signal.ITIMER_REAL, per_test)
    try:
        run_statement(source, ns)
        return True, "", False
    except Timeout:
        return False, f"timed out after {per_test:g}s", True
    except (Failed, ProgramError) as e:
        return False, str(e), False
    except AssertionError as e:
        text = str(e)
        return False, f"AssertionError: {text}" if text else "assertion failed", False
    except BaseException as e:
        return False, f"{type(e).__name__}: {e}", False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def used_names(sources):
    names = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def main():
    job = json.loads(sys.stdin.read())
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what the tests print goes nowhere
    sys.stdout = io.StringIO()

    def report(record):
        out.write(json.dumps(record) + "\n")
        out.flush()

    signal.signal(signal.SIGALRM, on_alarm)
    program = Program(job["requests_fd"], job["answers_fd"])
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
    sources = [job["given"], job["setup"]] + [source for _, source in job["steps"]]
    try:
        exec(compile(job["given"], "given.py", "exec"), ns)
        used = used_names(sources)
        for name in sorted((used & names) - set(ns) - set(dir(builtins))):
            ns[name] = remote(program, name)  # another function of the program the tests call
        ns[entry_point] = ns[job["candidate"]] = remote(program, entry_point)
        signal.setitimer(signal.ITIMER_REAL, job["per_test"])
        exec(compile(job["setup"], "test.py", "exec"), ns)
    except BaseException as e:
        report({"load_error": f"the tests' set-up failed: {type(e).__name__}: {e}"[:MESSAGE_CHARS]})
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    ns[entry_point] = ns[job["candidate"]] = remote(program, entry_point)
    timeouts = 0
    for unit, source in job["steps"]:
        passed, message, timed_out = judge_step(source, ns, job["per_test"])
        sys.stdout = io.StringIO()
        timeouts += timed_out
        if unit is not None:  # a statement that only prepares is not a test
            report({"unit": unit, "passed": passed, "message": message[:MESSAGE_CHARS]})
        if timeouts >= job["max_timeouts"]:
            report({"stopped": f"{timeouts} asserts timed out"})
            return


main()
