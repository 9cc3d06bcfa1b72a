"""The judge's guard: the program's text never becomes code in the judge's process.

Runs as part of the judge's `main.py` (agents/judge/testrun.py joins codec.py, program.py, this
file and judge.py, in that order).
"""

# ruff: noqa: F821

import ast
import builtins
import os
import sys

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
