"""The judge's side of the program: its answers to calls and other operations (`Program.op`), the
stand-ins for its objects (`Handle`, `RemoteClass`) and the exceptions it raised, rebuilt.

Runs as part of the judge's `main.py`: agents/judge/testrun.py joins codec.py, this file, guard.py
and judge.py, in that order, into one text (the names each uses are the others').
"""

# ruff: noqa: F821

import builtins
import json
import os

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
    names it. Only its name, a bounded message, its base's name and its plain arguments cross (a
    KeyError is rebuilt from its key, not from its message); an exception that steers control
    flow is never rebuilt."""
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
