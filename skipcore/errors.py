"""Errors a user can cause. The CLI prints them as one line and exits non-zero; no traceback."""


class UserError(Exception):
    """Bad input from the user: a wrong flag, a missing file, an invalid schedule."""


class ScheduleError(UserError, ValueError):
    """A schedule that cannot run: out-of-range budgets, increasing budgets, non-nested layer sets."""


class ArgumentTypeError(UserError, TypeError):
    """A public function called with an argument of the wrong kind (a string where a list of prompts belongs, a
    policy given by its name): said at the door, not deep inside."""


class SkipcoreWarning(UserWarning):
    """Something a user should know that does not stop the run (a dead run's lock taken over, a cluster short of
    a resource); the CLI prints it as one `warning: ...` line."""


class FallbackWarning(SkipcoreWarning, RuntimeWarning):
    """A faster path that could not run, so a slower exact one did (CUDA graphs that would not capture)."""
