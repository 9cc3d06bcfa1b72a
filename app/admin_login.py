"""The admin tab's lock: the password box, `log_in` (refused without a configured password),
`LoginThrottle`, which slows down and then locks out an address that guesses, and `require`,
which every admin event function calls first with the session's unlocked flag."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import gradio as gr

from app.context import AppContext

WRONG_PASSWORD_DELAY_S = 1.0  # slows down guessing; doubles with each failure in a row
MAX_BACKOFF_S = 60.0
MAX_LOGIN_FAILURES = 10  # in a row from one address: it is locked out for LOCKOUT_S
LOCKOUT_S = 900.0
PRIVATE = {"api_visibility": "private"}  # every admin event: not callable through the API

log = logging.getLogger(__name__)


class LoginThrottle:
    """Wrong admin passwords per client address. After n failures in a row the next attempt must
    wait WRONG_PASSWORD_DELAY_S·2^(n−1) s (at most MAX_BACKOFF_S); MAX_LOGIN_FAILURES in a row lock
    the address out for LOCKOUT_S. Every failure is logged."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._failures: dict[str, tuple[int, float]] = {}  # address -> (in a row, last time)
        self._lock = threading.Lock()
        self._clock = clock

    def wait_s(self, client: str) -> float:
        """Seconds before `client` may try again (0: now)."""
        with self._lock:
            count, last = self._failures.get(client, (0, 0.0))
        if count == 0:
            return 0.0
        if count >= MAX_LOGIN_FAILURES:
            pause = LOCKOUT_S
        else:
            pause = min(WRONG_PASSWORD_DELAY_S * 2 ** (count - 1), MAX_BACKOFF_S)
        return max(0.0, last + pause - self._clock())

    def failed(self, client: str) -> None:
        with self._lock:
            count = self._failures.get(client, (0, 0.0))[0] + 1
            self._failures[client] = (count, self._clock())
        log.warning("admin login failed from %s (%d in a row)", client, count)
        if count == MAX_LOGIN_FAILURES:
            log.warning("admin login locked for %s for %.0f s", client, LOCKOUT_S)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)


REFUSED_UNCONFIGURED = (
    "Refused: no admin password is configured for this app (set COTEAM_ADMIN_PASSWORD or "
    "--admin-password-file)."
)


def require(admin_ok: bool) -> None:
    """Refuse an admin event of a session that has not unlocked the tab."""
    if not admin_ok:
        raise gr.Error("Unlock the admin tab with the admin password first.")


class AdminLogin:
    """The password box and the per-session unlocked flag (`admin_ok`, a `gr.State`)."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self.throttle = LoginThrottle()

    def build(self) -> None:
        if not self.ctx.admin_password:
            gr.Markdown(
                "**The admin tab is disabled**: no admin password is configured. Start the "
                "app with `COTEAM_ADMIN_PASSWORD=...` in its environment or with "
                "`--admin-password-file FILE`.",
                elem_id="admin-disabled",
            )
        with gr.Row():
            self.password = gr.Textbox(
                label="Admin password", type="password", scale=3, elem_id="admin-password"
            )
            self.unlock = gr.Button("Unlock", scale=1, elem_id="admin-unlock")
        self.login_status = gr.Markdown(elem_id="admin-login-status")
        self.admin_ok = gr.State(False)

    def log_in(self, password: str, request: gr.Request = None):
        """Check the password; open the panels only when it is the configured one. Wrong
        passwords from one address slow it down, then lock it out (`LoginThrottle`)."""
        locked = (False, gr.update(visible=False), gr.Timer(active=False))
        if not self.ctx.admin_password:
            return locked[0], REFUSED_UNCONFIGURED, *locked[1:]
        if not password:
            return locked[0], "Refused: type the admin password first.", *locked[1:]
        client = request.client.host if request is not None and request.client else "unknown"
        wait = self.throttle.wait_s(client)
        if wait > 0:
            message = f"Refused: too many wrong passwords; try again in {wait:.0f} s."
            return locked[0], message, *locked[1:]
        if not self.ctx.password_ok(password):
            self.throttle.failed(client)
            time.sleep(WRONG_PASSWORD_DELAY_S)
            return locked[0], "Refused: wrong password.", *locked[1:]
        self.throttle.succeeded(client)
        return True, "Unlocked.", gr.update(visible=True), gr.Timer(active=True)
