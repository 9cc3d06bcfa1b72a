"""Can the model choose, for a plain writing request, which kinds of part its document needs?

The default outline (`agents.tasks.DEFAULT_OUTLINE`) keeps four writers from repeating each
other by giving them parts of different kinds (what it is, its history, a surprising fact, why
it matters today), the same for every request. An outline made from the request could keep that
and only choose, per request, which kinds fit, from a menu (`KINDS`: the default outline's later
three and four more, each with what it fits). Before any document is written on such a plan,
this checks the choice alone, three ways, greedy, on the base model:

    menu        one call names the three kinds in JSON held to the menu by the server's grammar
    calibrated  each kind scored by the model's log-likelihood of its name after the request,
                less its log-likelihood after a request with no subject (the prior a small model
                has for a name, whatever the request), the top three taken (transformers, on
                the CPU)
    yes/no      one call per kind: does the request's subject fit it (JSON, "yes" or "no")

for the held-out long-form requests (all "an explainer article about X") and `OTHER_REQUESTS`
(a how, a why, a risks and a kinds request among them, written before any was tried). Prints
each request's choices and, per way, how many requests chose each kind and how many got the
menu's first three in its order; a choice that follows the menu's order or the kind's name,
not the request, is not an outline made from the request.

Usage: python bench/outline_kinds.py [--limit 12] [--vllm-url URL] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.serving.models import DEFAULT_MODEL, provision_model  # noqa: E402
from agents.serving.policy import Request  # noqa: E402
from agents.serving.server import ServerConfig, connect_or_start  # noqa: E402
from agents.tasks import longform_tasks, request_subject  # noqa: E402

KINDS = {  # the menu, in reading order: a kind's name and the requests it fits
    "How it works": "a process, a device, a method, a body's or a machine's workings",
    "Where it came from": "anything with a past",
    "Its main kinds": "a group with kinds, members, varieties or parts",
    "A surprising fact": "anything",
    "What people get wrong": "a subject often misunderstood",
    "Limits and risks": "a technology, a treatment, a practice or an idea with costs",
    "Why it matters today": "anything",
}
QUESTIONS = {  # the yes/no way's question per kind, about the request's subject {s}
    "How it works": "Is {s} a process, a device, a method or a mechanism that works in steps?",
    "Where it came from": "Does {s} have a history worth telling?",
    "Its main kinds": "Does {s} come in several kinds, types or members?",
    "A surprising fact": "Is there a surprising fact about {s}?",
    "What people get wrong": "Is {s} often misunderstood?",
    "Limits and risks": "Does {s} have risks, costs or limits?",
    "Why it matters today": "Does {s} matter to people today?",
}
OTHER_REQUESTS = (
    "Write a four-part explainer on how vaccines train the immune system",
    "Explain how a bill becomes a law in the United States",
    "Write an article about the risks of social media for teenagers",
    "An introduction to black holes for curious kids",
    "Write a short guide to types of clouds",
    "Why do leaves change colour in autumn?",
)
PICK = 3  # the parts after the first, which defines the subject
SYSTEM = (
    "You plan documents; you never write them. The first part of every document says what its "
    "subject is. Choose the {n} other parts that best answer the request, from these:\n{menu}"
)
NEUTRAL = "Write an explainer article about it."


def menu_choice(client, request: str) -> list[str]:
    """The three kinds one call names, its reply held to the menu by the server's grammar."""
    menu = "\n".join(f"- {kind}: for {fits}" for kind, fits in KINDS.items())
    schema = {
        "type": "object",
        "properties": {
            "parts": {
                "type": "array",
                "items": {"enum": list(KINDS)},
                "minItems": PICK,
                "maxItems": PICK,
            }
        },
        "required": ["parts"],
    }
    messages = [
        {"role": "system", "content": SYSTEM.format(n=PICK, menu=menu)},
        {"role": "user", "content": f"Request: {request}\nChoose its {PICK} parts."},
    ]
    [done] = client.generate([Request(messages, max_tokens=80, json_schema=schema)])
    return json.loads(done.text)["parts"]


def yes_no(client, request: str) -> dict[str, bool]:
    """Each kind's yes or no, one call each."""
    schema = {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]}},
        "required": ["answer"],
    }
    subject = request_subject(request)
    asks = [
        Request(
            [
                {
                    "role": "user",
                    "content": f"Request: {request}\n"
                    f"{question.format(s=subject)} Answer yes or no.",
                }
            ],
            max_tokens=12,
            json_schema=schema,
        )
        for question in QUESTIONS.values()
    ]
    return {
        kind: json.loads(done.text)["answer"] == "yes"
        for kind, done in zip(QUESTIONS, client.generate(asks), strict=True)
    }


class Likelihood:
    """log p(a kind's name | the request), by the model in transformers on the CPU."""

    def __init__(self, model_name: str):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = provision_model(model_name)
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def __call__(self, request: str, kind: str) -> float:
        messages = [
            {
                "role": "system",
                "content": "You plan documents. The first part says what the subject is.",
            },
            {
                "role": "user",
                "content": f"Request: {request}\nName the most useful part after the first.",
            },
        ]
        prompt = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        head = self.tokenizer(prompt)["input_ids"]
        name = self.tokenizer(kind)["input_ids"]
        with self.torch.no_grad():
            logits = self.model(self.torch.tensor([head + name])).logits[0]
        logp = logits[len(head) - 1 : -1].float().log_softmax(-1)
        return float(logp.gather(1, self.torch.tensor(name)[:, None]).sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--limit", type=int, default=12, help="held-out long-form requests")
    parser.add_argument("--vllm-url", help="use this running server instead of starting one")
    parser.add_argument("--json", help="also write each request's choices to this file")
    args = parser.parse_args()
    requests = [t.prompt for t in longform_tasks("held_out")[: args.limit]] + list(OTHER_REQUESTS)
    likelihood = Likelihood(args.model)
    prior = {kind: likelihood(NEUTRAL, kind) for kind in KINDS}
    rows = []
    with connect_or_start(args.vllm_url, ServerConfig(model=args.model)) as client:
        for request in requests:
            scores = {kind: likelihood(request, kind) - prior[kind] for kind in KINDS}
            answers = yes_no(client, request)
            rows.append(
                {
                    "request": request,
                    "menu": menu_choice(client, request),
                    "calibrated": sorted(KINDS, key=lambda k: -scores[k])[:PICK],
                    "yes/no": [kind for kind, yes in answers.items() if yes],
                }
            )
    first = list(KINDS)[:PICK]
    for row in rows:
        print(f"{request_subject(row['request'])[:44]}")
        for way in ("menu", "calibrated", "yes/no"):
            print(f"  {way:10s} {' | '.join(row[way])}")
    summary = {}
    for way in ("menu", "calibrated", "yes/no"):
        summary[way] = {kind: sum(kind in row[way] for row in rows) for kind in KINDS}
        summary[way]["the menu's first three, in order"] = sum(row[way] == first for row in rows)
        print(f"{way}, of {len(rows)} requests: {summary[way]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
