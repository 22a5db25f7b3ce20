"""The command's own error: what went wrong, in one line, and the exit status.

Everything the command reports goes through :func:`eoclient.cli.app.guarded`, which
prints ``eoclient: <message>`` on stderr (one line, never a traceback) and exits
non-zero. Raised for bad input the command itself can see; the service's errors
(:class:`eoclient.errors.RpcError`) are printed with the service's message unchanged.
"""

from __future__ import annotations

# Exit statuses. 1 and 2 follow click (and most Unix tools): 2 = the command line is
# wrong, 1 = it ran and failed. 130 = 128 + SIGINT, what a shell reports for Ctrl-C.
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report as one line (``message``) with exit status ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class UsageProblem(CliError):
    """The command line is wrong (contradicting flags, a malformed name): exit status 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)
