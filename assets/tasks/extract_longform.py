"""Rebuild assets/tasks/longform.jsonl from the English Wikipedia excerpt in gensim's test data.

    pip download --no-deps -d /tmp/x gensim==4.4.0
    python assets/tasks/extract_longform.py /tmp/x

Only the one data file is read out of the wheel (a zip file); nothing is installed. Each task is
one article: its title, its first four content sections (heading + a one-line brief: the
section's first sentence), and as the reference the first words of each section's text (whole
sentences, up to WORDS_PER_SECTION), sections separated by a blank line. The selection is deterministic (file order, the filters
below), so the output is the same on every run. See PROVENANCE.md for the source and licence.
"""

from __future__ import annotations

import bz2
import html
import json
import re
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WHEEL_GLOB = "gensim-4.4.0-*.whl"
MEMBER = (
    "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
)
SECTIONS = 4
MIN_SECTION_WORDS = 80  # a section this short has too little to write about or compare with
WORDS_PER_SECTION = 160  # the reference keeps this many words of each section (whole sentences)
MAX_BRIEF_WORDS = 30
COUNT = 48
HELD_OUT_EVERY = 4  # tasks 3, 7, 11, ... (every fourth, from 0) are held out: 12 of 48
# Sections that are lists of sources or links, not prose to write.
NOT_PROSE = re.compile(
    r"references|see also|external links|further reading|notes|bibliography|sources|"
    r"citations|footnotes|works|gallery|list of|filmography|discography",
    re.I,
)


def strip_markup(text: str) -> str:
    """Plain prose from MediaWiki markup: templates, tables, refs, files and markup removed."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"<ref[^>]*/>", "", text)
    text = re.sub(r"<ref[^>]*>.*?</ref>", "", text, flags=re.S)
    text = drop_nested(text, "{{", "{{", "}}")  # templates (they nest, and may hold braces)
    text = drop_nested(text, "{|", "{|", "|}")  # tables
    for prefix in ("[[File:", "[[Image:", "[[Category:"):  # captions hold links: nested [[ ]]
        text = drop_nested(text, prefix, "[[", "]]")
    text = re.sub(r"\[\[[^\]|]*\|([^\]]*)\]\]", r"\1", text)
    text = re.sub(r"\[\[([^\]]*)\]\]", r"\1", text)
    text = re.sub(r"\[https?://\S+ ([^\]]*)\]", r"\1", text)
    text = re.sub(r"\[https?://\S+\]", "", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"'{2,}", "", text)
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip()
        and not line.lstrip().startswith(("*", "#", ":", ";", "|", "!", "{", "}"))
        and not re.fullmatch(r"\s*=+.*=+\s*", line)  # sub-section headings
    ]
    text = " ".join(lines)
    text = re.sub(r"\(\s*[,;]?\s*\)", "", text)
    return re.sub(r"\s+([,.;:])", r"\1", re.sub(r"\s{2,}", " ", text)).strip()


def drop_nested(text: str, start: str, opening: str, closing: str) -> str:
    """`text` without every span from `start` to its matching `closing` (`opening` nests)."""
    out, i = [], 0
    while (begin := text.find(start, i)) >= 0:
        out.append(text[i:begin])
        depth, k = 0, begin
        while k < len(text):
            if text.startswith(opening, k):
                depth, k = depth + 1, k + len(opening)
            elif text.startswith(closing, k):
                depth, k = depth - 1, k + len(closing)
                if depth == 0:
                    break
            else:
                k += 1
        i = k
    return "".join(out) + text[i:]


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text) if s.strip()]


def first_words(text: str, limit: int) -> str:
    """Whole sentences from the start of `text`, as many as fit in `limit` words (at least one)."""
    kept, count = [], 0
    for sentence in sentences(text):
        n = len(sentence.split())
        if kept and count + n > limit:
            break
        kept.append(sentence)
        count += n
    return " ".join(kept)


def article_sections(wikitext: str) -> list[tuple[str, str]]:
    """(heading, plain text) of each top-level section, sub-sections included in the text."""
    parts = re.split(r"^==([^=].*?)==\s*$", wikitext, flags=re.M)
    return [
        (strip_markup(parts[i]), strip_markup(parts[i + 1])) for i in range(1, len(parts) - 1, 2)
    ]


def task_of(title: str, wikitext: str) -> dict | None:
    """The task made from one article, or None when it has fewer than four usable sections."""
    usable = [
        (heading, text)
        for heading, text in article_sections(wikitext)
        if not NOT_PROSE.search(heading) and len(text.split()) >= MIN_SECTION_WORDS
    ][:SECTIONS]
    if len(usable) < SECTIONS:
        return None
    outline, references = [], []
    for heading, text in usable:
        brief = sentences(text)[0]
        if len(brief.split()) > MAX_BRIEF_WORDS:
            brief = " ".join(brief.split()[:MAX_BRIEF_WORDS]) + " ..."
        outline.append({"heading": heading, "brief": brief})
        references.append(first_words(text, WORDS_PER_SECTION))
    reference_words = sum(len(r.split()) for r in references)
    return {
        "title": title,
        "request": f"Write an explainer article about {title} for a general reader.",
        "outline": outline,
        "target_words": min(max(reference_words, 400), 800),
        "reference": "\n\n".join(references),
    }


def longform(wheel_dir: Path) -> list[dict]:
    wheel = next(iter(sorted(wheel_dir.glob(WHEEL_GLOB))))
    with zipfile.ZipFile(wheel) as z:
        xml = bz2.decompress(z.read(MEMBER)).decode()
    items = []
    for page in re.findall(r"<page>(.*?)</page>", xml, flags=re.S):
        title = html.unescape(re.search(r"<title>(.*?)</title>", page).group(1))
        text = re.search(r"<text[^>]*>(.*?)</text>", page, flags=re.S)
        task = task_of(title, html.unescape(text.group(1))) if text else None
        if task is not None:
            items.append(task)
    items = items[:COUNT]
    for index, item in enumerate(items):
        item["id"] = str(index)
        item["split"] = "held_out" if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "train"
    return [{"id": i.pop("id"), "split": i.pop("split"), **i} for i in items]


if __name__ == "__main__":
    path = HERE / "longform.jsonl"
    items = longform(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
    path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items))
    print(f"{path.name}: {len(items)} items, {path.stat().st_size // 1024} KiB")
