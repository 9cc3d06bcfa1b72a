"""The Gradio app. For now one tab that streams the team's model; the co-write, co-code, rating,
history and admin tabs build on it."""

from __future__ import annotations

import queue
import threading

import gradio as gr

from agents.policy import PolicyClient, PolicyError, Request

MAX_PROMPT_CHARS = 8000


def stream_answer(client: PolicyClient, prompt: str, max_tokens: int = 256):
    """Yield the growing answer to `prompt` as tokens arrive from the server."""
    if not prompt.strip():
        raise gr.Error("The prompt is empty.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise gr.Error(f"The prompt is {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}.")
    pieces: queue.Queue = queue.Queue()
    done = object()
    errors: list[Exception] = []

    def run() -> None:
        try:
            request = Request([{"role": "user", "content": prompt}], max_tokens=max_tokens)
            client.generate([request], on_token=lambda _, text: pieces.put(text))
        except PolicyError as e:
            errors.append(e)
        finally:
            pieces.put(done)

    threading.Thread(target=run, daemon=True).start()
    answer = ""
    while (piece := pieces.get()) is not done:
        answer += piece
        yield answer
    if errors:
        raise gr.Error(f"The model server failed: {errors[0]}")


def build_app(client: PolicyClient) -> gr.Blocks:
    def ask(prompt: str):
        yield from stream_answer(client, prompt)

    with gr.Blocks(title="CoTeam") as demo:
        gr.Markdown("# CoTeam\nA team of LLM agents that learns to work with you.")
        with gr.Tab("Ask"):
            prompt = gr.Textbox(label="Prompt", lines=4, elem_id="prompt")
            ask_button = gr.Button("Ask", variant="primary", elem_id="ask")
            answer = gr.Markdown(elem_id="answer")
            ask_button.click(ask, prompt, answer, api_name="ask")
    return demo
