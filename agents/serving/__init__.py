"""Serving the model: the vLLM server, the model files, the client, vLLM's CPU guard and plugin."""
