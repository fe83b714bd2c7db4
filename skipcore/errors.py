"""Errors a user can cause. The CLI prints them as one line and exits non-zero; no traceback."""


class UserError(Exception):
    """Bad input from the user: a wrong flag, a missing file, an invalid schedule."""


class ScheduleError(UserError, ValueError):
    """A schedule that cannot run: out-of-range budgets, increasing budgets, non-nested layer sets."""
