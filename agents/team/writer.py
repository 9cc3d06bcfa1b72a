"""A long-form writer's calls after its first: a writer of several sections whose reply ends
(end token or loop stop) with one of its own sections not begun goes on with it.

The environment writes that section's heading and the model continues the same reply, within
the writer's one token share; a continued call may not end before the section's lower bound of
words (a writer that had ended would end again at once, under the heading), and its stop reads
the whole reply, so a sentence or an own heading written before ends the new text there. A
learner's rollout never goes on: its sample must be one call of the policy (`agents/team.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from agents.serving.policy import Completion, Request
from agents.team.outline import section_opening, written_positions
from agents.team.roles import HEADING_TOKENS, Role, section_min_tokens

StopWhen = Callable[[str], int | None]


def continuing(stop_when: StopWhen | None, before: str) -> StopWhen | None:
    """`stop_when` for a call that continues a reply: it judges the whole reply (a sentence or
    a section written before counts) and cuts the new text only."""
    if stop_when is None:
        return None

    def stop(text: str) -> int | None:
        cut = stop_when(before + text)
        return None if cut is None else max(cut - len(before), 0)

    return stop


def earliest(*stops: StopWhen | None) -> StopWhen | None:
    """One stop from several: the text ends at the first cut any of them makes."""
    given = [stop for stop in stops if stop is not None]
    if len(given) < 2:
        return given[0] if given else None

    def stop(text: str) -> int | None:
        cuts = [cut for cut in (s(text) for s in given) if cut is not None]
        return min(cuts) if cuts else None

    return stop


def without_stray_hash(request: Request, completion: Completion, text: str) -> str:
    if request.stop and completion.finish_reason == "stop":
        # stopped at a teammate's heading: the heading's first `#` may be in the text already
        return re.sub(r"\n[ \t]*#+[ \t]*\Z", "\n", text)
    return text


def next_section(text: str, outline: Sequence[dict], mine: Sequence[int]) -> int | None:
    """The first of a writer's own sections whose heading its reply has not written."""
    written = set(written_positions(text, outline))
    return next((k for k in mine if k not in written), None)


def go_on(
    policy,
    request: Request,
    role: Role,
    outline: Sequence[dict],
    stop_when: StopWhen | None,
    text: str,
    completion: Completion,
    stream: Callable[[int, str], None],
) -> tuple[str, Completion]:
    """The writer's reply `text` (its first call: `request`, `completion`) with every own section
    it left out begun and continued; the calls joined into one completion."""
    begun = request.messages[-1]["content"] if request.messages[-1]["role"] == "assistant" else ""
    asked = request.messages[:-1] if begun else request.messages
    calls, begun_here = [completion], set()
    while True:
        left = request.max_tokens - sum(c.completion_tokens for c in calls)
        missing = next_section(text, outline, role.sections)
        if missing is None or calls[-1].finish_reason == "length" or left < HEADING_TOKENS:
            break
        if missing in begun_here:  # begun once already and still not read as written: stop
            break
        begun_here.add(missing)
        heading = f"\n\n{section_opening(outline[missing])}"
        stream(0, heading)
        text = text.rstrip() + heading
        more_request = replace(
            request,
            messages=[*asked, {"role": "assistant", "content": text}],
            max_tokens=left,
            min_tokens=min(left, section_min_tokens(role)),
            stop_when=continuing(stop_when, text),
        )
        [more] = policy.generate([more_request], on_token=stream)
        text = without_stray_hash(request, more, text + more.text)
        calls.append(more)
    if len(calls) == 1:
        return text, completion
    return text, Completion(
        text=text[len(begun) :],
        adapter=completion.adapter,
        prompt_tokens=sum(c.prompt_tokens for c in calls),
        completion_tokens=sum(c.completion_tokens for c in calls),
        latency_s=sum(c.latency_s for c in calls),
        first_token_s=completion.first_token_s,
        finish_reason=calls[-1].finish_reason,
    )
