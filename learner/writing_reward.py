"""The writing rewards, plain functions returning their components by name: `writing_reward`
scores jointly written sections (length per role, balance, consistency of their all-MiniLM-L6-v2
sentence embeddings, redundancy, agreement with a reference by ROUGE-1, ROUGE-L and embedding
similarity), `longform_reward` a long-form document's sections against their outline; below them,
the text measures they are made of (the sentences and their embeddings are `agents.team.sentences`')."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from agents.team.sentences import (
    NEAR_DUPLICATE,
    drop_repeats,
    embed_texts,
    repeats,
    sentence_vectors,
)


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


def section_agreement(sections: Sequence[str], vectors, subject: str | None) -> dict[str, float]:
    """How alike the written sections are: `voice` (share in the majority person), `format`
    (share in the majority of prose or lists), `terms` (share naming `subject`, where given),
    `embedding_consistency`, and `consistency`, their mean (0 when nothing is written)."""
    written = [s for s in sections if s.split()]
    r = {
        "voice": _agreement([_person(s) for s in written]),
        "format": _agreement([bool(LIST_LINE.search(s)) for s in written]),
        "terms": (
            sum(subject.lower() in s.lower() for s in written) / len(written)
            if subject and written
            else 1.0
        ),
        "embedding_consistency": consistency(sections, vectors),
    }
    r["consistency"] = (
        (r["embedding_consistency"] + r["voice"] + r["format"] + r["terms"]) / 4 * bool(written)
    )
    return r


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
      counted on the words the reader gets (each section after `drop_repeats`), so a section
      does not reach its length by saying its sentences again;
    - `consistency`: mean of the sections' embedding consistency, voice agreement (share of
      sections in the majority person: first, second or third), format agreement (share in the
      majority of prose or lists) and term agreement (share naming `subject` where given);
    - `redundancy`: the worst pair of sections, the larger of `redundancy` (copied trigrams,
      near-duplicate sentences) and `paraphrase` (the same content in other words);
    - `document_redundancy`: the same of the document the reader gets, the sections after
      `drop_repeats`; `repeats_dropped`, the share of the writers' sentences it left out (both
      reported, neither in the aggregates: the reward pays for what the writers wrote);
    - `structure`: `compliance` (agents.team.outline.structure_compliance) when given, else the
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
    # the document as the reader gets it (agents.team.combine), from the same sentence vectors
    marks = repeats(vectors)
    edited = drop_repeats(sections, marks)
    kept = [len(s.split()) for s in edited]
    r = {
        "nonempty": sum(n > 0 for n in words) / len(sections),
        "length": sum(length_score(n, bound) for n in kept) / len(sections),
        "words": float(sum(words)),
    }
    brief_vectors = embed_texts([b or "-" for b in briefs])
    r["coverage"] = sum(
        max(cosine(v.mean(axis=0), b), 0.0) if len(v) and brief else 0.0
        for v, b, brief in zip(vectors, brief_vectors, briefs, strict=True)
    ) / len(sections)
    r |= section_agreement(sections, vectors, subject)
    r["paraphrase"] = paraphrase(vectors)
    r["redundancy"] = max(redundancy(sections, vectors), r["paraphrase"])
    edited_vectors = [v[~gone] for v, gone in zip(vectors, marks, strict=True)]
    r["document_redundancy"] = max(redundancy(edited, edited_vectors), paraphrase(edited_vectors))
    r["repeats_dropped"] = 1 - sum(map(len, edited_vectors)) / max(sum(map(len, vectors)), 1)
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


def _ngram_list(words: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return set(_ngram_list(words, n))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b)) / norm if norm else 0.0
