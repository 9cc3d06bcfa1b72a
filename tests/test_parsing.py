"""Parsing Python in threads: one parse at a time (CPython 3.11's AST conversion is not safe from
several threads at once, agents/parsing.py), and no module parses around it."""

import ast
import pathlib
import threading

import pytest

import agents.parsing
from agents.parsing import parse

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_parse_is_ast_parse():
    tree = parse("def f(x):\n    return x + 1\n")
    assert ast.dump(tree) == ast.dump(ast.parse("def f(x):\n    return x + 1\n"))
    with pytest.raises(SyntaxError):
        parse("def f(:\n")


def test_a_parse_waits_for_the_one_in_progress():
    done = threading.Event()
    worker = threading.Thread(target=lambda: (parse("x = 1"), done.set()))
    with agents.parsing._ONE_AT_A_TIME:  # as if another thread were parsing
        worker.start()
        assert not done.wait(0.5)  # it waits for the lock, however long it is held
    worker.join(timeout=30)
    assert done.is_set()


def test_no_module_parses_python_around_the_lock():
    direct = [
        str(path.relative_to(ROOT))
        for folder in ("agents", "app", "learner", "bench", "store")
        for path in (ROOT / folder).rglob("*.py")
        if "ast.parse(" in path.read_text()
        and path.name != "parsing.py"
        # the sandbox's programs run in their own interpreter, never in the app's threads
        and path.parent != ROOT / "agents" / "harness"
    ]
    assert direct == []
