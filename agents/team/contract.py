"""The coding team's interface contract: which function each role writes, and what each agent
is shown of it.

The contract is made by the environment from the task (no planning call: nothing to wait for or
to count): every role's function, signature and one-line purpose, the agent's own part, the
teammates' functions as stubs, and the opening of each agent's reply (its own function's head),
which the model continues. A small model completes the code it is shown rather than following
instructions, so what it is shown decides the division of labour (docs/runs/evaluation-log.md).
"""

from __future__ import annotations

import ast
import re

from agents.judge.parsing import parse
from agents.tasks import Task, with_stub_bodies

# the functions each coding role writes ({entry}: the task's entry point)
OWNS = {
    "solo": ("{entry}",),
    "helper": ("aux",),
    "helper2": ("aux2",),
    "entry": ("{entry}",),
    "tester": ("test_{entry}",),
    "coder": (),
}

# The interface contract every coding agent sees: each role's function, signature and purpose,
# made by the environment from the task (no planning call: nothing to wait for or to count).
CONTRACT_PURPOSES = {
    "helper": "the core computation of the problem; returns the value `{entry}` needs",
    "helper2": "a second, different sub-step of the problem that `{entry}` needs",
    "entry": "handles special cases (such as empty input), calls {helper_calls} for the core "
    "computation and returns the answer",
    "tester": "checks `{entry}` with assert statements",
}
CONTRACT = (
    "The team's division of the work (interface contract):\n{lines}\nYour part: {own}.\n\n"
    "{others}{mine}"
)
CONTRACT_LINE = "- {title}: `def {function}({params})`: {purpose}"
CONTRACT_OTHERS = (
    "Your teammates' functions, which will be in the same module (do not write them):\n"
    "```python\n{stubs}\n```\n"
)
CONTRACT_MINE = "Complete your function:\n```python\n{stub}\n```"
CONTRACT_STUB = 'def {function}({signature}){returns}:\n    """{purpose}"""{body}'
# The `scaffolded` shape only (a named option, never in a figure that claims cooperation): the
# environment writes the entry author's call of the helper, in its stub (`ENTRY_BODY`) and at the
# start of its reply (`SCAFFOLD_BODIES`), and begins the helper author's reply with the whole
# problem posed for `aux`. A small model completes the code it is shown: with the call written
# for it, the untrained entry author "calls" `aux` in every answer; the call is not its work.
ENTRY_BODY = "\n    return {call}"
SCAFFOLD_BODIES = {"helper": "\n", "helper2": "\n", "entry": "\n    result = {call}\n    return"}
# the roles whose replies the environment begins with their function's head (signature and the
# contract's one-line docstring), and what it writes after it: nothing of the agent's code
REPLY_BODIES = {"helper": "\n", "helper2": "\n", "entry": "\n"}
# the roles that write the whole answer alone (`single`'s, and each of `naive_concat`'s): their
# replies begin with the problem as posed: the head of the function they own, as a team agent's
# begins with its own function's head (no shape rewrites a signature and docstring it was given)
SOLVERS = ("solo", "coder")
# the one-line docstring of each role's function in the stubs
STUB_PURPOSES = {
    "helper": "The core computation of `{entry}`: {summary}",
    "helper2": "A second sub-step of `{entry}`.",
    "entry": "{summary} Handle special cases first; {helper_calls} does the rest.",
    "tester": "Check `{entry}` with assert statements.",
}


def fill(template: str, **values: object) -> str:
    """Replace `{name}` for the names given and leave every other brace alone (code has many)."""
    return re.sub(
        r"\{(\w+)\}",
        lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0),
        template,
    )


def coding_contract(
    task: Task,
    names: list[str],
    agent: int,
    signature: tuple[str, str, str],
    scaffold: bool = False,
) -> str:
    """The interface contract of a coding team with roles `names`, as agent `agent` sees it: every
    role's function, signature and purpose, which one is its own, the teammates' functions as
    stubs and its own function's stub to complete ("" when the roles own no functions: `single`
    and `naive_concat`). `signature` is `entry_signature(task)`.

    The stubs matter for a small model: it completes the code it is shown, so an entry author
    shown `aux` as a teammate's function calls it, and a helper author shown its own `aux` stub
    writes that rather than the problem's entry function. With `scaffold` (the `scaffolded`
    shape) the entry author's stub holds the environment's `return aux(...)`."""
    if not coding_contract_applies(names):
        return ""
    arguments, _, summary = signature
    params = arguments_of(arguments)
    helpers = helper_functions(names)
    calls_text = helper_calls(helpers, params)
    lines, stubs = [], []
    for name in names:
        function = fill(OWNS[name][0], entry=task.entry_point)
        values = {"entry": task.entry_point, "helper_calls": calls_text, "summary": summary}
        tester = name == "tester"
        lines.append(
            fill(
                CONTRACT_LINE,
                title=code_title(name, task.entry_point),
                function=function,
                params="" if tester else params,
                purpose=fill(CONTRACT_PURPOSES[name], **values),
            )
        )
        entry_calls = scaffold and name == "entry" and helpers
        body = fill(ENTRY_BODY, call=f"{helpers[0]}({params})") if entry_calls else ""
        stubs.append(_stub(task, name, signature, calls_text, body))
    # the entry author sees the helpers' stubs (it calls them); a helper author sees no stub of
    # the entry function, which it would otherwise complete
    calls = names[agent] == "entry"
    others = [s for k, s in enumerate(stubs) if calls and names[k].startswith("helper")]
    own = code_title(names[agent], task.entry_point)
    text = fill(
        CONTRACT,
        lines="\n".join(lines),
        own=f"{own} - write only that",
        others=fill(CONTRACT_OTHERS, stubs="\n\n\n".join(others)) if others else "",
        # the entry author completes its stub; a helper author shown its own stub only echoes it
        mine=fill(CONTRACT_MINE, stub=stubs[agent]) if calls else "",
    )
    return text.rstrip()


def coding_reply_start(
    task: Task,
    names: list[str],
    agent: int,
    signature: tuple[str, str, str],
    problem: str | None = None,
    scaffold: bool = False,
) -> str:
    """The opening of coding agent `agent`'s reply, written by the environment: the head of the
    function the agent owns and nothing of its code. An agent that writes the whole answer alone
    (`SOLVERS`: `single`, `naive_concat`) begins with the problem as posed (imports, signature,
    docstring); a team's helper or entry author with a code fence and its own function's head
    (signature and the contract's one-line docstring). "" for the tester.

    With `scaffold` (the `scaffolded` shape) the environment writes more: the entry author's
    reply goes on with `result = aux(...)` and `return`, and the helper author's begins with its
    whole `problem` posed for `aux` where it can (`helper_reply_start`)."""
    name = names[agent]
    if name in SOLVERS:  # one agent writes the whole answer: begun with the problem as posed
        return helper_reply_start(task.prompt, task.entry_point)
    helpers = helper_functions(names)
    if name not in REPLY_BODIES or not helpers or not coding_contract_applies(names):
        return ""
    if scaffold and name == "helper" and problem and (whole := helper_reply_start(problem)):
        return whole
    params = arguments_of(signature[0])
    bodies = SCAFFOLD_BODIES if scaffold else REPLY_BODIES
    body = fill(bodies[name], call=f"{helpers[0]}({params})")
    return "```python\n" + _stub(task, name, signature, helper_calls(helpers, params), body)


def helper_reply_start(problem: str, helper: str = "aux") -> str:
    """A reply begun with its whole problem, posed for `helper` (imports, the signature, the
    problem's docstring with its examples), when that problem ends with the function `helper`
    still to write: a docstring and no body, or a bare signature. The model then writes only the
    body. Used for the agents that write the whole answer alone (`helper` is the entry point) and
    for the scaffolded helper author (its problem renamed for `aux`). "" otherwise
    (`coding_reply_start` then begins the reply with the contract's stub head)."""
    try:
        tree, bare = parse(problem), False
    except SyntaxError:
        try:
            tree, bare = parse(with_stub_bodies(problem)), True
        except SyntaxError:
            return ""
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.FunctionDef | ast.AsyncFunctionDef) or last.name != helper:
        return ""
    body = last.body[1:] if ast.get_docstring(last) is not None else last.body
    if body and not (bare and len(body) == 1):  # a body the problem already wrote
        return ""
    return "```python\n" + problem.strip("\n") + "\n"


def helper_functions(names: list[str]) -> list[str]:
    """The functions the team's helper authors write, in role order (`aux`, `aux2`)."""
    return [f for n in names if n.startswith("helper") for f in OWNS[n]]


def helper_calls(helpers: list[str], params: str) -> str:
    """How the entry function calls them: "`aux(xs, k)` and `aux2(xs, k)`"."""
    return " and ".join(f"`{h}({params})`" for h in helpers)


def coding_contract_applies(names: list[str]) -> bool:
    """Whether a coding team with roles `names` divides the work by a contract (not `single` or
    `naive_concat`, whose roles own no functions)."""
    return len(names) >= 2 and all(CONTRACT_PURPOSES.get(n) for n in names)


def _stub(
    task: Task, name: str, signature: tuple[str, str, str], helper_calls: str, body: str
) -> str:
    """Role `name`'s function as a stub: signature, one-line purpose, then `body`."""
    arguments, returns, summary = signature
    tester = name == "tester"
    values = {"entry": task.entry_point, "helper_calls": helper_calls, "summary": summary}
    return fill(
        CONTRACT_STUB,
        function=fill(OWNS[name][0], entry=task.entry_point),
        signature="" if tester else arguments,
        returns=f" -> {returns}" if returns and not tester else "",
        purpose=fill(STUB_PURPOSES[name], **values).strip(),
        body=body,
    )


def arguments_of(arguments: str) -> str:
    """`numbers: List[float], threshold: float = 0.5` -> `numbers, threshold` (names only)."""
    try:
        node = parse(f"def f({arguments}): pass").body[0]
    except SyntaxError:
        return arguments
    return ", ".join(a.arg for a in [*node.args.posonlyargs, *node.args.args])


def code_title(name: str, entry: str) -> str:
    return {
        "solo": f"{entry}",
        "helper": "helper aux",
        "helper2": "helper aux2",
        "entry": f"main function {entry}",
        "tester": f"tests of {entry}",
        "coder": "programmer",
    }[name]
