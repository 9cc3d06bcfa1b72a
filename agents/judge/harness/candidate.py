"""The program under test, served: loads the program, then answers the judge's calls.

Runs in the sandbox as `main.py` after codec.py's text (agents/judge/testrun.py joins them). Reads
`job.json` (the program, the two pipe fds, seconds per call and for loading), loads the program
and writes on the answers pipe, one JSON line each:

- `{"ready": [names]}`: the program loaded; the names of its top-level callables;
  or `{"load_error": [type, message]}`;
- for each request `{"seq", "op", "target", "name", "args", "kwargs"}` read from the requests
  pipe (an operation on one of its objects: call a top-level function or a handle, read a
  top-level name, get/set/delete an attribute or an item, `in`, `len`, `bool`, `str`, `repr`,
  iterate): `{"seq": n, "value": ENCODED, "changed": [[where, ENCODED], ...], "same": where}` or
  `{"seq": n, "raised": [type, message, builtin base, arguments]}`. `changed` holds the arguments the call
  changed in place, as they are after it (`where` is a position, or a keyword's name), so that
  the judge applies the changes to its own arguments; `same` names the argument the call returned
  itself (or is null), so that `is` in the tests keeps its meaning. An answer that is not plain
  data (an instance, a class, a bound method) stays here, in a table, and crosses as a handle:
  `["h", [number, name, kind, builtin base]]`; the judge's requests name it by its number.

Nothing here is trusted: the program can rewrite any of it or write its own lines. What it
answers is only its answer to a call; the judge holds the tests, checks the values with its own
code and decides every result (agents/judge/harness/judge.py).
"""

# encode, decode, NotPlain and MAX_MESSAGE_CHARS are codec.py's: agents/judge/testrun.py runs this
# file's text after codec.py's
# ruff: noqa: F821

import builtins
import io
import json
import os
import signal
import sys

MAX_MESSAGE = 300  # characters of an exception's message sent back


class Timeout(BaseException):
    """Raised by the per-call alarm (a BaseException so `except Exception` cannot swallow it)."""


def on_alarm(signum, frame):
    raise Timeout()


def builtin_base(kind):
    """The name of the nearest builtin class `kind` derives from (for an exception class)."""
    return next(
        (c.__name__ for c in kind.__mro__ if getattr(builtins, c.__name__, None) is c),
        "BaseException",
    )


def describe(e):
    """[its class's name, its message, the nearest builtin exception class it derives from, its
    arguments when they are plain and small (a KeyError's key), else None]."""
    base = builtin_base(type(e))
    arguments = encoded_or_none(tuple(e.args)) if isinstance(e, BaseException) else None
    if arguments is not None and len(json.dumps(arguments)) > MAX_MESSAGE:
        arguments = None
    return [type(e).__name__[:60], str(e)[:MAX_MESSAGE], base, arguments]


def encoded_or_none(value):
    try:
        return encode(value)
    except NotPlain:
        return None


def serve():
    path = os.path.join(os.environ["HOME"], "job.json")  # the run's folder (the cwd may be shared)
    with open(path, encoding="utf-8") as f:
        job = json.load(f)
    os.remove(path)
    answers = os.fdopen(job["answers_fd"], "w", encoding="utf-8")
    requests = os.fdopen(job["requests_fd"], "rb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what the program prints goes nowhere
    sys.stdout = io.StringIO()

    def send(record):
        try:
            line = json.dumps(record)
        except (TypeError, ValueError) as e:
            line = json.dumps({"seq": record.get("seq"), "raised": describe(e)})
        answers.write(line + "\n")
        answers.flush()

    signal.signal(signal.SIGALRM, on_alarm)
    ns = {"__name__": "candidate"}
    signal.setitimer(signal.ITIMER_REAL, job["load_seconds"])
    try:
        exec(compile(job["program"], "program.py", "exec"), ns)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except Timeout:
        seconds = job["load_seconds"]
        too_long = f"loading the program took more than {seconds:g}s"
        send({"load_error": ["Timeout", too_long, "BaseException", None]})
        return
    except BaseException as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        send({"load_error": describe(e)})
        return
    send({"ready": sorted(k for k, v in ns.items() if type(k) is str and callable(v))})
    answer(requests, ns, job["per_call"], send)


class Objects:
    """The program's objects the judge holds handles to: number -> object, kept alive."""

    def __init__(self):
        self.table, self.ids = {}, {}

    def register(self, obj):
        """The handle of one of the program's objects: [number, name, kind, builtin base]."""
        number = self.ids.get(id(obj))
        if number is None:
            number = self.ids[id(obj)] = len(self.table) + 1
            self.table[number] = obj  # kept alive, so its id is not reused
        if isinstance(obj, type):
            if issubclass(obj, BaseException):
                return [number, obj.__name__[:60], "exception", builtin_base(obj)]
            return [number, obj.__name__[:60], "class", None]
        return [number, type(obj).__name__[:60], "callable" if callable(obj) else "object", None]

    def lookup(self, payload):
        if not (type(payload) is list and payload and type(payload[0]) is int):
            raise NotPlain("not a handle")
        if payload[0] not in self.table:
            raise NotPlain("an unknown handle")
        return self.table[payload[0]]


def answer(requests, ns, per_call, send):
    """Answer the judge's requests, one at a time, until it closes the pipe."""
    objects = Objects()
    register, lookup = objects.register, objects.lookup
    operations = {
        "call": lambda target, name, a, k: (target if target is not None else ns[name])(*a, **k),
        "global": lambda target, name, a, k: ns[name],
        "getattr": lambda target, name, a, k: getattr(target, name),
        "setattr": lambda target, name, a, k: setattr(target, name, a[0]),
        "delattr": lambda target, name, a, k: delattr(target, name),
        "getitem": lambda target, name, a, k: target[a[0]],
        "setitem": lambda target, name, a, k: target.__setitem__(a[0], a[1]),
        "delitem": lambda target, name, a, k: target.__delitem__(a[0]),
        "contains": lambda target, name, a, k: a[0] in target,
        "len": lambda target, name, a, k: len(target),
        "bool": lambda target, name, a, k: bool(target),
        "str": lambda target, name, a, k: str(target),
        "repr": lambda target, name, a, k: repr(target),
        "iter": lambda target, name, a, k: list(target),
    }
    for line in requests:
        try:
            request = json.loads(line)
            seq = request["seq"]
            args = [decode(a, lookup) for a in request["args"]]
            kwargs = {k: decode(v, lookup) for k, v in request["kwargs"]}
            target = lookup(request["target"]) if request["target"] is not None else None
            operation = operations[request["op"]]
            name = request["name"]
        except BaseException as e:  # the judge's requests are well-formed; be safe anyway
            send({"seq": None, "raised": describe(e)})
            continue
        try:
            arguments = list(enumerate(args)) + list(kwargs.items())
            signal.setitimer(signal.ITIMER_REAL, per_call)
            value = operation(target, name, args, kwargs)
            signal.setitimer(signal.ITIMER_REAL, 0)
            changed = []
            sent_arguments = request["args"] + [v for _, v in request["kwargs"]]
            for (where, argument), sent in zip(arguments, sent_arguments, strict=True):
                now = encoded_or_none(argument)
                if now is not None and now != sent:
                    changed.append([where, now])
            same = next((where for where, argument in arguments if argument is value), None)
            encoded = encode(value, register)
            send({"seq": seq, "value": encoded, "changed": changed, "same": same})
        except Timeout:
            timed_out = f"the call took more than {per_call:g}s"
            send({"seq": seq, "raised": ["Timeout", timed_out, "BaseException", None]})
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            send({"seq": seq, "raised": describe(e)})
        sys.stdout = io.StringIO()


serve()
