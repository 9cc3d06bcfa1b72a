"""Programs the sandbox runs, passed as text (never imported by the app, but codec.py by tests).

`launcher.py` sets up the isolation layers between fork and the program, then execs the sandboxed
interpreter on `prelude.py`, which installs the audit hook and runs `main.py` (agents/judge/sandbox.py).

agents/judge/testrun.py runs two `main.py`s at once, each after `codec.py`'s text (plain values as
tagged JSON, handles for the rest): `candidate.py` loads the program under test and answers the
judge's operations on its functions and objects; the judge's is `program.py` (the program's
answers and the stand-ins for its objects), `guard.py` (its text never becomes code there) and
`judge.py` (the task's given code and the tests, run step by step), joined: it prints one JSON
line per test on the only channel the app reads.
"""
