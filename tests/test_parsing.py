"""Parsing Python in threads: one parse at a time (CPython 3.11's AST conversion is not safe from
several threads at once, agents/judge/parsing.py), and no module parses around it."""

import ast
import pathlib
import threading

import pytest

import agents.judge.parsing
from agents.judge.parsing import parse

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_parse_is_ast_parse():
    tree = parse("def f(x):\n    return x + 1\n")
    assert ast.dump(tree) == ast.dump(ast.parse("def f(x):\n    return x + 1\n"))
    with pytest.raises(SyntaxError):
        parse("def f(:\n")


def test_a_parse_waits_for_the_one_in_progress():
    done = threading.Event()
    worker = threading.Thread(target=lambda: (parse("x = 1"), done.set()))
    with agents.judge.parsing._ONE_AT_A_TIME:  # as if another thread were parsing
        worker.start()
        assert not done.wait(0.5)  # it waits for the lock, however long it is held
    worker.join(timeout=30)
    assert done.is_set()


def test_a_parse_that_meets_the_depth_mismatch_is_tried_again_with_the_collector_paused(
    monkeypatch,
):
    import gc

    real, seen = ast.parse, []

    def flaky(source):
        seen.append(gc.isenabled())
        if len(seen) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=36, after=62)")
        return real(source)

    monkeypatch.setattr(agents.judge.parsing.ast, "parse", flaky)
    assert isinstance(parse("x = 1"), ast.Module)
    assert seen == [False, False] and gc.isenabled()  # paused during each try, then back on
    # another SystemError, or the error every time, is raised
    monkeypatch.setattr(
        agents.judge.parsing.ast, "parse", lambda s: (_ for _ in ()).throw(SystemError("x"))
    )
    with pytest.raises(SystemError, match="x"):
        parse("x = 1")
    always = SystemError("AST constructor recursion depth mismatch")
    monkeypatch.setattr(agents.judge.parsing.ast, "parse", lambda s: (_ for _ in ()).throw(always))
    with pytest.raises(SystemError, match="mismatch"):
        parse("x = 1")
    assert gc.isenabled()


def test_no_module_parses_python_around_the_lock():
    direct = [
        str(path.relative_to(ROOT))
        for folder in ("agents", "app", "learner", "bench", "store")
        for path in (ROOT / folder).rglob("*.py")
        if "ast.parse(" in path.read_text()
        and path.name != "parsing.py"
        # the sandbox's programs run in their own interpreter, never in the app's threads
        and path.parent != ROOT / "agents" / "judge" / "harness"
    ]
    assert direct == []
