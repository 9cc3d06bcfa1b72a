"""The team: its graph, roles and prompts, the contract, combining parts, the environment's feedback."""
