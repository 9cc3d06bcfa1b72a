"""Programs the sandbox runs as `main.py` around a generated module (never imported by the app).

`calls.py` evaluates only the calls of `assert CALL OP EXPECTED` tests and prints their values;
`inside.py` runs the tests of any other form and prints pass/fail. Both read `job.json` from their
folder, print one JSON line per test on the original standard output and nothing else.
"""
