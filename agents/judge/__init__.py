"""Running untrusted code: the sandbox, the test harness and its report, safe parsing."""
