"""Python source to an AST, safe from several threads at once.

CPython 3.11 turns a parsed tree into Python objects with one recursion counter for the whole
interpreter, not one per thread. When the garbage collector runs a finalizer (Python code) in
the middle of that, another thread can start a parse of its own, and the first one fails with
"SystemError: AST constructor recursion depth mismatch" (python/cpython#106905 and its
neighbours). The tasks of a training step, the episodes of an evaluation and the app's episode
slots run in threads, and a step of `bench/learner.py` died of it; four threads parsing with
such finalizers about reproduce it (2 errors in 20 s here). So every parse in CoTeam goes
through `parse`, one at a time, with the collector paused, and tried again on that error: a
parse of a generated program takes about a millisecond.
"""

from __future__ import annotations

import ast
import gc
import threading

_ONE_AT_A_TIME = threading.Lock()
# The lock alone did not end it: a training run died of the error at step 37 of 40 with every
# CoTeam parse behind the lock (a parse elsewhere in the process, or in a finalizer). So no
# collection runs during a parse, and a parse that still meets the error is tried again: the
# counter is set afresh at each conversion, and the same source parses the same way.
TRIES = 3


def parse(source: str) -> ast.Module:
    """`ast.parse(source)`, one thread at a time (raises SyntaxError as it does)."""
    with _ONE_AT_A_TIME:
        for _ in range(TRIES - 1):
            try:
                return _parse_uncollected(source)
            except SystemError as e:
                if "recursion depth mismatch" not in str(e):
                    raise
        return _parse_uncollected(source)  # the last try: its error is the caller's


def _parse_uncollected(source: str) -> ast.Module:
    """`ast.parse` with the garbage collector paused (no finalizer runs in the middle)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if collecting:
            gc.enable()
