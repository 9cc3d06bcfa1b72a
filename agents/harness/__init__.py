"""Programs the sandbox runs, passed as text (never imported by the app).

`launcher.py` sets up the isolation layers between fork and the program, then execs the sandboxed
interpreter on `prelude.py`, which installs the audit hook and runs `main.py` (agents/sandbox.py).

`runner.py`, the `main.py` agents/testrun.py runs around a generated module, reads `job.json` from
its folder and prints one JSON line per test on the original standard output and nothing else: in
mode "calls" the values of the calls of `assert CALL OP EXPECTED` tests, in mode "inside"
pass/fail of tests of any other form.
"""
