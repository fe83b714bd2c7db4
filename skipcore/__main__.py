import signal
import sys

from skipcore.commands import main


def _terminated(signum, frame):
    """A kill (SIGTERM: a scheduler's, a container's stop) stops a run as Ctrl-C does: what it wrote stays whole
    and readable, and its output's lock goes with it (it stayed, to be taken over with a warning)."""
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, _terminated)
sys.exit(main())
