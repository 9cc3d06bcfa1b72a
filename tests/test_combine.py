"""The combiner: one module from the agents' code parts, one document from their sections."""

import ast

from agents.tasks import humaneval_task
from agents.team.combine import (
    combine_code,
    combine_sections,
    concat_code,
    extract_code,
    parse_prefix,
)

HELPER = """Sure! Here is the helper:
```python
import math
from typing import List

def aux(xs: List[float]) -> List[float]:
    \"\"\"Sorted copy.\"\"\"
    return sorted(xs)

print(aux([3, 1]))
assert aux([2, 1]) == [1, 2]
result = aux([5, 4])
```
It sorts the list."""

ENTRY = """```python
from typing import List
import math

LIMIT = 10

def has_close_elements(numbers: List[float], threshold: float) -> bool:
    xs = aux(numbers)
    return any(b - a < threshold for a, b in zip(xs, xs[1:]))

has_close_elements([1.0, 2.0], 0.5)
```"""


def test_extract_code_handles_fences_and_plain_code():
    assert extract_code("```python\nx = 1\n```") == "x = 1\n"
    assert extract_code("text\n```\ny = 2\n```\nmore") == "y = 2\n"
    assert extract_code("```py\na = 1\n```\nand\n```python\nb = 2\n```") == "a = 1\n\nb = 2\n"
    assert extract_code("def f():\n    return 1") == "def f():\n    return 1\n"
    assert (
        extract_code("```python\ndef f():\n    return 1\n") == "def f():\n    return 1\n"
    )  # cut off
    assert extract_code("```bash\nls\n```") == ""


def test_parse_prefix_keeps_the_longest_parsing_prefix():
    source = "def f():\n    return 1\n\ndef g():\n    return 2\n\nprint(g(\n"
    tree, kept, error = parse_prefix(source)
    assert [n.name for n in tree.body] == ["f", "g"]
    assert "kept lines 1-6" in error and kept.startswith("def f")
    tree, kept, error = parse_prefix("def f():\n    return 1\n")
    assert error is None and kept == "def f():\n    return 1\n"
    # a function cut off mid-body is dropped whole, never kept half-written
    tree, kept, error = parse_prefix("def f():\n    return 1\n\ndef g(x):\n    if x:\n")
    assert [n.name for n in tree.body] == ["f"]
    tree, kept, error = parse_prefix("def f(:\n")
    assert tree.body == [] and "nothing kept" in error


def test_combine_code_keeps_definitions_merges_imports_and_drops_stray_code():
    task = humaneval_task(0)
    combined = combine_code([HELPER, ENTRY], [("aux",), ("has_close_elements",)], task.preamble)
    assert combined.ok, combined.error
    tree = ast.parse(combined.code)
    kinds = [type(n).__name__ for n in tree.body]
    # imports first and once each, then the definitions; no asserts, prints or example calls
    assert kinds == ["ImportFrom", "Import", "FunctionDef", "Assign", "FunctionDef"]
    assert combined.code.count("from typing import List") == 1
    assert combined.code.count("import math") == 1
    assert "print(" not in combined.code and "assert" not in combined.code
    assert "result = aux" not in combined.code  # an assignment that runs the team's code
    assert "LIMIT = 10" in combined.code  # a constant stays
    assert combined.defines == ["aux", "has_close_elements"]
    assert combined.calls == {"aux": [], "has_close_elements": ["aux"]}
    helper, entry = combined.parts
    assert helper.defines == ["aux"] and len(helper.dropped) == 3
    assert entry.defines == ["has_close_elements"] and entry.dropped == [
        "line 10: has_close_elements(...)"
    ]
    assert '"""Sorted copy."""' in combined.code  # the functions' own text is kept as written


def test_a_function_comes_from_the_role_that_owns_it():
    helper = "def aux(x):\n    return 'helper aux'\n\ndef main(x):\n    return 'helper main'\n"
    entry = "def main(x):\n    return aux(x)\n\ndef aux(x):\n    return 'entry aux'\n"
    owned = combine_code([helper, entry], [("aux",), ("main",)])
    assert "'helper aux'" in owned.code and "return aux(x)" in owned.code
    assert "'entry aux'" not in owned.code and "'helper main'" not in owned.code
    # writing a teammate's part is a role violation, reported as such
    assert owned.parts[0].violations == ["main"] and owned.parts[1].violations == ["aux"]
    assert owned.parts[0].replaced == [] and owned.parts[1].replaced == []
    assert any("`main` is agent 1's part; agent 0's copy unused" in n for n in owned.notes)
    # without owners, the last agent's version wins, as in Python
    last = combine_code([helper, entry])
    assert "'entry aux'" in last.code and "'helper aux'" not in last.code
    assert last.code.count("def aux") == 1 and last.code.count("def main") == 1


def test_a_part_is_never_taken_from_a_non_owner_even_when_the_owner_wrote_none():
    entry = "def main(x):\n    return aux(x)\n\ndef aux(x):\n    return 'entry aux'\n"
    combined = combine_code(["Sorry, no code.", entry], [("aux",), ("main",)])
    assert "'entry aux'" not in combined.code and "def aux" not in combined.code
    assert combined.parts[1].violations == ["aux"]
    helper = "def aux(x):\n    return x\n\ndef main(x):\n    return 'helper main'\n"
    combined = combine_code([helper, ""], [("aux",), ("main",)])
    assert "def main" not in combined.code  # the helper author's copy of the entry: no credit
    assert combined.parts[0].violations == ["main"]


def test_the_problems_own_helpers_are_never_replaced():
    task = humaneval_task(32)
    part = "```python\ndef poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 0.0\n```"
    combined = combine_code([part], [("find_zero",)], task.preamble)
    assert combined.ok
    assert "return 0\n" not in combined.code  # the agent's `poly` is dropped
    assert "math.pow" in combined.code and combined.code.startswith("import math")
    assert combined.defines == ["poly", "find_zero"]
    assert combined.parts[0].replaced == []  # copying the problem's code is no fault of the agent
    assert any("`poly` is given by the problem" in note for note in combined.notes)


def test_a_cut_off_part_keeps_what_parses_and_says_so():
    cut = "```python\ndef aux(x):\n    return x + 1\n\nprint(aux(2), aux(\n"
    combined = combine_code([cut, "def f(x):\n    return aux(x)\n"])
    assert combined.ok and combined.defines == ["aux", "f"]
    assert combined.parts[0].syntax_error.startswith("line ")
    assert combined.parts[1].syntax_error is None


def test_empty_and_unparseable_parts_give_an_empty_but_valid_module():
    combined = combine_code(["no code here, sorry", "```python\ndef (:\n```"])
    assert combined.ok and combined.code == "" and combined.defines == []
    assert combined.parts[1].syntax_error.endswith("nothing kept")


def test_concat_code_is_the_naive_join():
    combined = concat_code([HELPER, ENTRY])
    assert combined.ok
    assert "assert aux([2, 1]) == [1, 2]" in combined.code  # nothing removed
    assert combined.code.index("def aux") < combined.code.index("def has_close_elements")
    broken = concat_code(["def f(x):\n    return (x\n", "def g():\n    return 1\n"])
    assert not broken.ok and broken.error.startswith("line ")


def test_combine_sections_joins_in_role_order():
    assert combine_sections([" One. ", "", "Two.\n", "Three."]) == "One.\n\nTwo.\n\nThree."
    assert combine_sections(["", "  "]) == ""


def test_the_module_keeps_the_problems_docstring_not_the_environments():
    """The entry author's reply begins with the contract's one-line docstring ("... `aux(s)` does
    the rest."): the person's module shows the problem's own docstring instead, examples and
    all; the code around it is the team's, unchanged."""
    problem = (
        "from typing import List\n\n\n"
        "def shout(words: List[str]) -> str:\n"
        '    """Join the words in upper case.\n'
        "    >>> shout(['a', 'b'])\n"
        "    'A B'\n"
        '    """\n'
    )
    helper = "```python\ndef aux(words):\n    return ' '.join(w.upper() for w in words)\n```"
    entry = (
        "```python\ndef shout(words: List[str]) -> str:\n"
        '    """Join the words in upper case. Handle special cases first; `aux(words)` does the '
        'rest."""\n'
        "    result = aux(words)\n    return result\n```"
    )
    owners = [("aux",), ("shout",)]
    combined = combine_code([helper, entry], owners, preamble="from typing import List\n",
                            problem=problem)  # fmt: skip
    assert "does the rest" not in combined.code
    assert (
        "    >>> shout(['a', 'b'])\n    'A B'\n    \"\"\"\n    result = aux(words)" in combined.code
    )
    assert combined.error is None and combined.calls["shout"] == ["aux"]
    plain = combine_code([helper, entry], owners, preamble="from typing import List\n")
    assert "does the rest" in plain.code  # without the problem, nothing to restore
