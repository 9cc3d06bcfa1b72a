"""The combiner: join the agents' parts into the team's one result.

Code (`combine_code`): one Python module from the helper(s) and the entry function. Each part's
code is taken out of its ``` fences; a part that does not parse is cut back to its longest
prefix that does (a reply cut off by the token limit usually breaks only its last statement).
Of each part only imports, functions, classes and assignments are kept: a small model leaves
asserts, prints and example calls at the top level, often wrong and sometimes cut off, and
keeping them would fail a module whose functions are right (on our 0.5B model joining the raw
texts passed 17/32 HumanEval problems, keeping only definitions 28/32; see RESEARCH.md).
Assignments that call the team's own functions are example runs and are dropped too. Imports
are merged at the top, after the problem's own code (its imports and the helpers it gives). A
function that a role owns is taken from that role's agent only: another agent's copy is a role
violation, reported on its part and never used, not even when the owner wrote none (so the
helper author's copy of the entry function earns nothing, and neither does an entry author's own
`aux`). A function no role owns is taken from the last agent that wrote it (as Python itself
would); the problem's own helpers are never replaced.

`concat_code` is the naive join of the `naive_concat` baseline: the code of every part as it
is, one after another.

Writing (`combine_sections`): the sections in role order as one document.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from agents.judge.parsing import parse
from agents.tasks import with_stub_bodies

FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
CODE_LANGUAGES = {"", "python", "py", "python3"}


@dataclass
class PartReport:
    """What the combiner did with one agent's part."""

    agent: int
    defines: list[str] = field(default_factory=list)  # functions and classes kept from it
    replaced: list[str] = field(default_factory=list)  # its functions a teammate's version replaced
    dropped: list[str] = field(default_factory=list)  # statements removed, e.g. "line 9: assert"
    violations: list[str] = field(default_factory=list)  # functions it wrote that others own
    syntax_error: str | None = None  # why it did not parse, and how much of it was kept


@dataclass
class CombinedCode:
    """The team's module, whether it parses (`error` says why not), and what each part gave."""

    code: str
    error: str | None
    parts: list[PartReport]
    notes: list[str]  # duplicate definitions resolved, one line each
    defines: list[str]  # the module's top-level functions and classes
    calls: dict[str, list[str]]  # function -> the module's own functions it calls

    @property
    def ok(self) -> bool:
        return self.error is None


def extract_code(text: str) -> str:
    """The Python code in a reply: its ```python blocks joined (a cut-off block counts), or
    the whole reply when it has no fences."""
    blocks = [m.group(2) for m in FENCE.finditer(text) if m.group(1).lower() in CODE_LANGUAGES]
    if not blocks and "```" not in text:
        return text.strip("\n") + "\n"
    return "\n\n".join(b.strip("\n") for b in blocks) + "\n" if blocks else ""


def parse_prefix(source: str) -> tuple[ast.Module, str, str | None]:
    """Parse `source`; if it fails, keep the longest prefix that parses, cut before a top-level
    line. Returns the tree, the source it came from and the syntax error (None if all parsed)."""
    try:
        return parse(source), source, None
    except SyntaxError as e:
        error = f"line {e.lineno}: {e.msg}"
        lines = source.splitlines()
        last = min(len(lines), e.lineno or len(lines))
    for end in range(last, 1, -1):
        if not lines[end - 1 : end] or lines[end - 1][:1] in ("", " ", "\t", ")", "]", "}"):
            continue  # only cut where a new top-level statement starts
        prefix = "\n".join(lines[: end - 1]) + "\n"
        try:
            tree = parse(prefix)
        except SyntaxError:
            continue
        return tree, prefix, f"{error}; kept lines 1-{end - 1}"
    return ast.Module(body=[], type_ignores=[]), "", f"{error}; nothing kept"


def _segment(lines: list[str], node: ast.stmt) -> str:
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "\n".join(lines[start - 1 : node.end_lineno])


def _describe(node: ast.stmt) -> str:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "call")
        return f"line {node.lineno}: {name}(...)"
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return f"line {node.lineno}: string"
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        return f"line {node.lineno}: example run"
    return f"line {node.lineno}: {type(node).__name__.lower()}"


def _calls(node: ast.AST) -> set[str]:
    return {
        n.func.id
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }


NOBODY = -1  # a function whose owner did not write it: no one's copy is kept
DEFINITION = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
IMPORT = ast.Import | ast.ImportFrom


def combine_code(
    parts: list[str],
    owners: list[tuple[str, ...]] | None = None,
    preamble: str = "",
    problem: str = "",
) -> CombinedCode:
    """Join the agents' replies (in role order) into one module; see the module docstring.

    `owners[i]` names the functions agent i's role writes; `preamble` is the problem's own code
    (imports and given helpers) that the module starts with; `problem` the problem as posed: a
    function it defines keeps the problem's docstring in the module (`with_problem_docstrings`).
    """
    owners = owners or [()] * len(parts)
    given = parse(preamble) if preamble.strip() else ast.Module(body=[], type_ignores=[])
    given_lines = preamble.splitlines()
    given_names = {n.name for n in given.body if isinstance(n, DEFINITION)}

    reports, trees = [], []
    for agent, text in enumerate(parts):
        tree, source, error = parse_prefix(extract_code(text))
        reports.append(PartReport(agent=agent, syntax_error=error))
        trees.append((tree, source.splitlines()))
    team_functions = {n.name for t, _ in trees for n in t.body if isinstance(n, DEFINITION)}

    # Who provides each definition: the problem, else the owner, else the last writer.
    writers: dict[str, list[int]] = {}
    for agent, (tree, _) in enumerate(trees):
        for node in tree.body:
            if isinstance(node, DEFINITION) and agent not in writers.setdefault(node.name, []):
                writers[node.name].append(agent)
    owned_by = {name: agent for agent, names in enumerate(owners) for name in names}
    chosen: dict[str, int | None] = {}
    notes = []
    for name, agents in writers.items():
        if name in given_names:
            chosen[name] = None
            notes.append(f"`{name}` is given by the problem; agent(s) {agents} redefined it")
            continue
        owner = owned_by.get(name)
        if owner is not None:
            chosen[name] = owner if owner in agents else NOBODY
            for agent in agents:
                if agent != owner:
                    reports[agent].violations.append(name)
                    notes.append(f"`{name}` is agent {owner}'s part; agent {agent}'s copy unused")
            continue
        chosen[name] = agents[-1]
        if len(agents) > 1:
            notes.append(f"`{name}` was written by agents {agents}; kept agent {chosen[name]}'s")

    imports = [ast.unparse(n) for n in given.body if isinstance(n, IMPORT)]
    body = [_segment(given_lines, n) for n in given.body if not isinstance(n, IMPORT)]
    for agent, (tree, lines) in enumerate(trees):
        report = reports[agent]
        definitions = [n for n in tree.body if isinstance(n, DEFINITION)]
        for node in tree.body:
            if isinstance(node, IMPORT):
                imports.append(ast.unparse(node))
            elif isinstance(node, DEFINITION):
                last_of_name = [d for d in definitions if d.name == node.name][-1] is node
                if chosen.get(node.name) == agent and last_of_name:
                    body.append(_segment(lines, node))
                    report.defines.append(node.name)
                elif (
                    chosen.get(node.name) not in (agent, None, NOBODY)
                    and node.name not in report.replaced + report.violations
                ):
                    report.replaced.append(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign) and not (
                _calls(node) & (team_functions | given_names)
            ):
                body.append(_segment(lines, node))
            else:
                report.dropped.append(_describe(node))

    imports = list(dict.fromkeys(imports))
    code = "\n".join(imports) + ("\n\n\n" if imports and body else "") + "\n\n\n".join(body)
    code = code.strip("\n") + "\n" if code.strip() else ""
    return _finish(with_problem_docstrings(code, problem), reports, notes)


def with_problem_docstrings(code: str, problem: str) -> str:
    """`code` with each function the problem defines carrying the problem's docstring, as the
    person (or the benchmark) wrote it: the environment begins an agent's reply with a one-line
    contract docstring of its own, which is the environment's text, not the person's. A function
    without a docstring, or code or a problem that does not parse, is left as it is."""
    if not problem.strip():
        return code
    try:
        tree, posed = parse(code), parse(with_stub_bodies(problem))
    except SyntaxError:
        return code
    problem_lines = with_stub_bodies(problem).splitlines()
    wanted = {
        node.name: _docstring_node(node)
        for node in posed.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _docstring_node(node)
    }
    lines = code.splitlines()
    found = [
        (_docstring_node(node), wanted[node.name])
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name in wanted
        and _docstring_node(node)
    ]
    for here, original in sorted(found, key=lambda pair: -pair[0].lineno):  # bottom up
        if not (_alone(lines, here) and _alone(problem_lines, original)):
            continue
        text = problem_lines[original.lineno - 1 : original.end_lineno]
        shift = here.col_offset - original.col_offset
        text = [_indented(line, shift) for line in text]
        lines[here.lineno - 1 : here.end_lineno] = text
    return "\n".join(lines) + ("\n" if code.endswith("\n") else "")


def _alone(lines: list[str], node: ast.expr | ast.stmt) -> bool:
    """Whether nothing but white space shares the node's first and last lines."""
    first, last = lines[node.lineno - 1], lines[node.end_lineno - 1]
    return not first[: node.col_offset].strip() and not last[node.end_col_offset :].strip()


def _indented(line: str, shift: int) -> str:
    if shift >= 0:
        return " " * shift + line if line.strip() else line
    spaces = len(line) - len(line.lstrip(" "))
    return line[min(-shift, spaces) :]


def _docstring_node(node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.Expr | None:
    first = node.body[0] if node.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
        and first.lineno != node.lineno  # not `def f(): "doc"` on one line
    ):
        return first
    return None


def concat_code(parts: list[str]) -> CombinedCode:
    """The naive join: every part's code as it is, one after another, nothing removed."""
    code = "\n\n".join(extract_code(p).strip("\n") for p in parts if extract_code(p).strip())
    return _finish(
        code + "\n" if code else "", [PartReport(agent=i) for i in range(len(parts))], []
    )


def _finish(code: str, reports: list[PartReport], notes: list[str]) -> CombinedCode:
    try:
        tree = parse(code)
    except SyntaxError as e:
        return CombinedCode(code, f"line {e.lineno}: {e.msg}", reports, notes, [], {})
    defined = [n.name for n in tree.body if isinstance(n, DEFINITION)]
    calls = {
        n.name: sorted((_calls(n) & set(defined)) - {n.name})
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    return CombinedCode(code, None, reports, notes, defined, calls)


def combine_sections(sections: list[str]) -> str:
    """A writing team's document: the non-empty sections, in role order, a blank line apart."""
    return "\n\n".join(s.strip() for s in sections if s.strip())
