"""skipcore: batched, KV-cache-friendly layer skipping (SkipDecode) for decoder-only LMs."""

from skipcore.errors import ScheduleError, UserError
from skipcore.schedule import Schedule

__version__ = "0.1.0"

__all__ = ["Schedule", "ScheduleError", "UserError", "__version__"]
