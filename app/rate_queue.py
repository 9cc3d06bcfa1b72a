"""Rate two stored answers: the History tab's panel that shows, one task at a time, two answers
to it already in the store (`learner.rating_queue`: training rollouts, A/B runs, earlier
episodes), the two whose vote should teach most: those the preference model learnt from the
votes so far scores furthest apart, or before it can tell, the two least alike. It takes an
A/B vote on them. Nothing is generated, so a person can vote as fast as they read, and never
on two answers of one text (a certain tie). A vote is stored as the Co-code/Co-write A/B vote
is (`app.rating.save_vote`: the server's identity for the rater, the same limits), and the next
pair follows."""

from __future__ import annotations

import textwrap

import gradio as gr

import store
from app.context import AppContext
from app.history import fenced
from app.rating import VOTES, rater_of, save_vote
from learner.rating_queue import pairs_to_rate

PROMPT_CHARS = 600
NONE_LEFT = (
    "No pair to rate: every task with two or more different answers has your vote, or none has "
    "two yet. Run a team in A/B mode, or let a retrain store its samples."
)
# what picked a pair, as the heading says it (never which answer the model expects to win)
PICKED_BY = {
    "preference": "picked as the pair the preference model scores furthest apart",
    "unlike": "picked as the least alike",
}


class RateQueuePanel:
    """Built inside the History tab; `kind` is the tab's task-kind filter."""

    def __init__(self, ctx: AppContext, kind: gr.Dropdown):
        self.ctx, self.kind = ctx, kind

    def build(self) -> None:
        with gr.Accordion("Rate two stored answers", open=True, elem_id="rate-queue"):
            gr.Markdown(
                "Two answers to one task from the history, the two your team's votes so far say "
                "differ most (before any vote: the least alike); which is better? Your vote "
                "teaches the team's preference model at the next retrain."
            )
            self.pair = gr.State(None)
            self.show = gr.Button("Show a pair to rate", elem_id="rate-show")
            self.task = gr.Markdown(elem_id="rate-task")
            with gr.Row():
                self.left = gr.Markdown(elem_id="rate-left", label="A")
                self.right = gr.Markdown(elem_id="rate-right", label="B")
            with gr.Row():
                self.votes = {
                    choice: gr.Button(text, size="sm", elem_id=f"rate-vote-{choice}")
                    for choice, text in VOTES.items()
                }
            self.status = gr.Markdown(elem_id="rate-status")
        views = [self.pair, self.task, self.left, self.right]
        self.show.click(self.next_pair, self.kind, views)
        for choice, button in self.votes.items():
            button.click(self.voter(choice), [self.pair, self.kind], [self.status, *views])

    def voter(self, choice: str):
        """The event of one vote button: store the vote on the shown pair, show the next."""

        def vote(pair, kind: str, request: gr.Request):
            saved = save_vote(self.ctx, tuple(pair) if pair else None, choice, rater_of(request))
            return saved, *self.next_pair(kind, request)

        return vote

    def next_pair(self, kind: str, request: gr.Request):
        """The next pair for this rater (of the tab's task kind), or why there is none."""
        rater = rater_of(request)
        with store.open_db(self.ctx.db_path) as db:
            found = pairs_to_rate(db, rater.identity, kind=None if kind == "any" else kind)
            if not found:
                return None, NONE_LEFT, "", ""
            pair = found[0]
            left, right = store.get_episodes(db, [pair.left, pair.right])
        task = left["task"]
        prompt = textwrap.shorten(" ".join(task["prompt"].split()), PROMPT_CHARS)
        heading = (
            f"**Task #{pair.task_id}** ({task['kind']}): {prompt}\n\n"
            f"A is episode {pair.left}, B is episode {pair.right} "
            f"(how unlike: {pair.distance:.2f} on a scale of 0 to 2; {PICKED_BY[pair.picked_by]})."
        )
        return (
            (pair.left, pair.right),
            heading,
            f"**A** (episode {pair.left})\n\n{shown(left['final_output'], task['kind'])}",
            f"**B** (episode {pair.right})\n\n{shown(right['final_output'], task['kind'])}",
        )


def shown(output: str, kind: str) -> str:
    """An answer as the page shows it: code in a Python block, writing as the text it is
    (Markdown: a long-form document's section headings stay headings; HTML is sanitized)."""
    return fenced(output, "python") if kind == "coding" else output
