"""Programs the sandbox runs, passed as text (never imported by the app, but codec.py by tests).

`launcher.py` sets up the isolation layers between fork and the program, then execs the sandboxed
interpreter on `prelude.py`, which installs the audit hook and runs `main.py` (agents/judge/sandbox.py).

agents/judge/testrun.py runs two `main.py`s at once, each after `codec.py`'s text (plain values as
tagged JSON): `candidate.py` loads the program under test and answers calls of its functions;
`judge.py` holds the task's given code and the tests, calls the program through a pipe pair, and
prints one JSON line per test on the only channel the app reads.
"""
