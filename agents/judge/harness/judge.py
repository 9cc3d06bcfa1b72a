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


# exceptions that steer control flow: rebuilt here, a program's StopIteration would end the tests'
# map() or zip() early, its SystemExit or KeyboardInterrupt would stop the judge
CONTROL_FLOW = {
    "StopIteration",
    "StopAsyncIteration",
    "GeneratorExit",
    "KeyboardInterrupt",
    "SystemExit",
    "BaseException",
}
_program_classes = {}


def program_exception(name, message, base="Exception", arguments=None):
    """The program's exception rebuilt here, by identity: its builtin class when it raised one (so
    that a test may catch a ValueError), else a class of its name that derives from the builtin
    it derives from (so that `except ValueError` catches its subclass), else a ProgramError that
    names it. Only its name, a bounded message and its base's name cross; an exception that
    steers control flow is never rebuilt."""
    name, message, base = _bounded(name)[:60], _bounded(message), _bounded(base)[:60]
    found = getattr(builtins, base, None) if base.isidentifier() else None
    if base in CONTROL_FLOW or name in CONTROL_FLOW:
        return ProgramError(
            f"{name}: {message} (a {base} from the program is not raised in the tests: it would "
            "steer their control flow)"
        )
    if isinstance(found, type) and issubclass(found, Exception):
        kind = found
        if name != base and name.isidentifier():
            kind = _program_classes.get((name, base))
            if kind is None:
                kind = _program_classes[name, base] = type(
                    name, (found,), {"__module__": "program"}
                )
        try:
            rebuilt = decode(arguments) if arguments is not None else None
        except NotPlain:
            rebuilt = None
        for args in ((*rebuilt,) if type(rebuilt) is tuple else None, (message,)):
            if args is None:
                continue
            try:
                return kind(*args)
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
        self.handles = {}  # handle number -> its stand-in here
        self.views = {}  # (id of a stand-in, attribute) -> [stand-in, the tests' copy, as sent, name]
        self.classes = {}  # a class's name -> its stand-in, for the instances that come back

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
            if set(record) == {"load_error"} and type(error) is list and len(error) == 4:
                name, message = (_bounded(part) for part in error[:2])
                if name == "Timeout":  # the program's process stopped its own loading
                    raise ProgramError(message)
                raise ProgramError(f"{name}: {message}" if message else name)

    def op(self, op, target=None, name=None, args=(), kwargs=None):
        """`_request`, after the tests' changes to attributes they read are sent back (`sync`);
        a list, dict or set read from an attribute is kept as a view of it."""
        self.sync()
        value = self._request(op, target, name, args, kwargs)
        if op == "getattr" and type(value) in (list, dict, set):
            return self.view(target, name, value)
        if op == "setattr" and type(args[0]) in (list, dict, set):
            self.view(target, name, args[0])
        return value

    def view(self, target, name, value):
        """The tests' copy of a container attribute of the program's object, the same one each
        time it is read (brought up to date in place): what the tests change in it
        (`obj.items.append(x)`, `obj.data[k] = v`) is set back on the object before the program's
        next operation, so the program sees it as in one process."""
        key = (id(target), name)
        found = self.views.get(key)
        snapshot = encode(value, _handle_payload)
        if found is not None and type(found[1]) is type(value):
            kept = found[1]
            if kept is not value:
                if type(kept) is list:
                    kept[:] = value
                else:
                    kept.clear()
                    kept.update(value)
            found[2] = snapshot
            return kept
        if len(self.views) < MAX_VIEWS:
            self.views[key] = [target, value, snapshot, name]
        return value

    def sync(self):
        for view in list(self.views.values()):
            target, value, snapshot, name = view
            try:
                now = encode(value, _handle_payload)
            except NotPlain:
                continue
            if now != snapshot:
                view[2] = now
                self._request("setattr", target, name, [value])

    def _request(self, op, target=None, name=None, args=(), kwargs=None):
        """The program's answer to one operation on its objects: `call` (of the top-level
        function `name`, or of the handle `target`), `global` (a top-level name), `getattr`,
        `setattr`, `delattr`, `getitem`, `setitem`, `delitem`, `contains`, `len`, `bool`, `str`,
        `repr`, `iter`. What it changed in the arguments is applied to them here, and an argument
        the program returned is returned itself; what is not plain data comes back as a handle."""
        kwargs = kwargs or {}
        what = name if target is None else _name_of(target)
        try:
            encoded_args = [encode(a, _handle_payload) for a in args]
            encoded_kwargs = [[k, encode(v, _handle_payload)] for k, v in kwargs.items()]
        except NotPlain as e:
            raise TypeError(
                f"the test passes {e} to {what}; only plain data reaches the program"
            ) from None
        self.seq += 1
        request = {
            "seq": self.seq,
            "op": op,
            "target": None if target is None else _handle_payload(target),
            "name": name,
            "args": encoded_args,
            "kwargs": encoded_kwargs,
        }
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
            if set(record) == {"seq", "value", "changed", "same"}:
                try:
                    value = decode(record["value"], self.stand_in)
                    self.apply_changes(args, kwargs, record["changed"])
                except NotPlain as e:
                    raise TypeError(f"{what} answered something that cannot cross ({e})") from None
                guard.note(value)
                for argument in [*args, *kwargs.values()]:
                    guard.note(argument)  # what the program wrote into it
                arguments = dict(enumerate(args)) | kwargs
                same = record["same"]
                if type(same) in (int, str) and same in arguments:
                    return arguments[same]
                return value
            raised = record.get("raised")
            if set(record) == {"seq", "raised"} and type(raised) is list and len(raised) == 4:
                if raised[0] == "Timeout":
                    raise Timeout()
                raise program_exception(*raised)

    def stand_in(self, payload):
        """The judge's stand-in for one of the program's objects: the same one each time it
        comes back. A class is a class here (calling it constructs in the program's process;
        `isinstance` works on its instances), an exception class the one the judge raises."""
        if not (
            type(payload) is list
            and len(payload) == 4
            and type(payload[0]) is int
            and type(payload[1]) is str
            and payload[2] in ("class", "exception", "callable", "object")
        ):
            raise NotPlain("not a handle")
        number, name, kind, base = payload
        found = self.handles.get(number)
        if found is not None:
            return found
        name = _bounded(name)[:60]
        if not name.isidentifier():
            name = "ProgramObject"
        if kind == "exception":
            base = base if type(base) is str else "Exception"
            made = program_exception(name, "", base).__class__
            if made is ProgramError:
                made = type(name, (ProgramError,), {"__module__": "program"})
        elif kind == "class":
            made = RemoteClass(name, (Handle,), {"__slots__": (), "__module__": "program"})
            type.__setattr__(made, "_class_number", number)
            self.classes.setdefault(name, made)
        else:
            made = object.__new__(self.classes.get(name, Handle))
            object.__setattr__(made, "_number", number)
        self.handles[number] = made
        return made

    @staticmethod
    def apply_changes(args, kwargs, changed):
        """Apply the program's in-place changes to the tests' own arguments: a list, dict, set or
        bytearray takes the contents it has after the call (nested objects as rebuilt copies);
        a claim about an argument that cannot change is ignored."""
        if type(changed) is not list:
            raise NotPlain("the changed arguments are not a list")
        arguments = dict(enumerate(args)) | kwargs
        for entry in changed:
            if not (type(entry) is list and len(entry) == 2 and type(entry[0]) in (int, str)):
                raise NotPlain("a changed argument is not a [where, value] pair")
            where, now = entry[0], decode(entry[1])
            argument = arguments.get(where)
            if type(argument) is not type(now) or type(argument) not in (list, dict, set):
                continue
            if type(argument) is list:
                argument[:] = now
            else:
                argument.clear()
                argument.update(now)


PROGRAM = None  # the one Program of this run, for the stand-ins' operations


def _handle_payload(value):
    """What a request says of a stand-in: its number (NotPlain for anything else)."""
    number = (
        type.__getattribute__(value, "_class_number") if isinstance(value, RemoteClass) else None
    )
    if isinstance(value, Handle):
        number = object.__getattribute__(value, "_number")
    if type(number) is not int:
        raise NotPlain(f"a {type(value).__name__}")
    return [number]


def _name_of(target):
    kind = target if isinstance(target, RemoteClass) else type(target)
    return f"the program's {kind.__name__}"


class Handle:
    """One of the program's objects, which stays in the program's process: every operation on
    it here is a request there. It equals only itself and hashes by identity (the judge's own
    rules, never the program's); special methods other than these are not forwarded."""

    __slots__ = ("_number", "__weakref__")

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return PROGRAM.op("getattr", self, name)

    def __setattr__(self, name, value):
        PROGRAM.op("setattr", self, name, [value])

    def __delattr__(self, name):
        PROGRAM.op("delattr", self, name)

    def __call__(self, *args, **kwargs):
        return PROGRAM.op("call", self, None, args, kwargs)

    def __getitem__(self, key):
        return PROGRAM.op("getitem", self, None, [key])

    def __setitem__(self, key, value):
        PROGRAM.op("setitem", self, None, [key, value])

    def __delitem__(self, key):
        PROGRAM.op("delitem", self, None, [key])

    def __contains__(self, item):
        return PROGRAM.op("contains", self, None, [item]) is True

    def __len__(self):
        return PROGRAM.op("len", self)

    def __bool__(self):
        return PROGRAM.op("bool", self) is True

    def __iter__(self):
        return iter(PROGRAM.op("iter", self))

    def __str__(self):
        return PROGRAM.op("str", self)

    def __repr__(self):
        return PROGRAM.op("repr", self)


class RemoteClass(type):
    """The type of a stand-in for one of the program's classes: calling it constructs an instance
    in the program's process; its other attributes (static methods, class fields) are read
    there."""

    def __call__(cls, *args, **kwargs):
        return PROGRAM.op("call", cls, None, args, kwargs)

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return PROGRAM.op("getattr", cls, name)

    def __repr__(cls):
        return f"<the program's class {cls.__name__}>"


def _bounded(text):
    text = str(text)
    return "".join(c if c.isprintable() else " " for c in text)[:300]


# (module, name) pairs an unpickler may look up here: plain types only, never a callable that
# runs code (a pickle's __reduce__ would call builtins.eval, os.system, ...)
PICKLE_SAFE = {
    *(
        ("builtins", n)
        for n in (
            "set",
            "frozenset",
            "complex",
            "bytearray",
            "range",
            "slice",
            "list",
            "dict",
            "tuple",
            "int",
            "float",
            "str",
            "bytes",
            "bool",
        )
    ),
    *(("__builtin__", n) for n in ("set", "frozenset", "complex", "bytearray", "list", "dict")),
    *(("collections", n) for n in ("OrderedDict", "deque", "Counter", "defaultdict")),
    *(("datetime", n) for n in ("date", "datetime", "time", "timedelta", "timezone")),
    ("decimal", "Decimal"),
    ("fractions", "Fraction"),
    ("_codecs", "encode"),
    ("copyreg", "_reconstructor"),
}


class Guard:
    """Text from the program never becomes code in this process.

    Every str and bytes the program answered is noted. An audit hook then refuses, for the rest
    of the run, to compile source that holds any of it (`eval`, `exec`, `compile`, `ast.parse`),
    to unpickle anything but plain types, to load marshalled code or build code objects that hold
    it;
    `eval` of the program's text is evaluated as a literal (`ast.literal_eval`: no code runs),
    which is all an honest `eval(candidate(x)) == x` needs. The judge compiles its own test code
    before the program starts, so nothing it runs later is compiled from the program's text."""

    def __init__(self):
        self.texts = set()
        self.literal = False
        self.real_eval = builtins.eval

    def note(self, value, depth=0):
        kind = type(value)
        if kind is str and value:
            self.texts.add(value.encode("utf-8", "surrogatepass"))
        elif kind is bytes and value:
            self.texts.add(value)
        elif kind in (list, tuple, set, frozenset) and depth < 60:
            for item in value:
                self.note(item, depth + 1)
        elif kind is dict and depth < 60:
            for key, item in value.items():
                self.note(key, depth + 1)
                self.note(item, depth + 1)

    def from_program(self, source):
        if isinstance(source, str):
            source = source.encode("utf-8", "surrogatepass")
        elif not isinstance(source, (bytes, bytearray, memoryview)):
            return False
        source = bytes(source)
        return any(text in source for text in self.texts)

    def hook(self, event, args):
        if event == "compile":
            if self.literal or _installed_source(args[1]):
                return
            if self.from_program(args[0]):
                raise PermissionError("the judge does not compile text the program returned")
        elif event == "pickle.find_class":
            if (args[0], args[1]) not in PICKLE_SAFE:
                raise PermissionError(
                    f"the judge unpickles plain types only, not {args[0]}.{args[1]}"[:200]
                )
        elif event == "marshal.loads":  # imports load their .pyc files so too
            data = bytes(args[0]) if isinstance(args[0], bytes | bytearray) else b""
            if data in self.texts or any(t in data for t in self.texts if len(t) >= 16):
                raise PermissionError("the judge does not load code the program returned")
        elif event == "code.__new__":  # co_code as bytes; the library builds some (mock)
            data = args[0] if isinstance(args[0], bytes) else b""
            if any(t in data for t in self.texts if len(t) >= 16):
                raise PermissionError("the judge does not build code the program returned")

    def eval(self, source, globals=None, locals=None):
        """builtins.eval here: the program's text as a literal, anything else as Python does."""
        if isinstance(source, (str, bytes)) and self.from_program(source):
            text = source if isinstance(source, str) else source.decode("utf-8")
            self.literal = True
            try:
                return ast.literal_eval(text.strip(" \t"))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise PermissionError(
                    "the program's text is evaluated here only as a literal"
                ) from None
            finally:
                self.literal = False
        if globals is None:
            caller = sys._getframe(1)
            globals, locals = caller.f_globals, caller.f_locals if locals is None else locals
        return self.real_eval(source, globals, locals)

    def install(self):
        sys.addaudithook(self.hook)
        builtins.eval = self.eval


guard = Guard()


def _installed_source(filename):
    """A module of this interpreter's own library, compiled as it is imported."""
    return (
        isinstance(filename, str)
        and filename.startswith(sys.base_prefix + "/")
        and filename.endswith(".py")
        and os.path.isfile(filename)
    )


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
