"""The error every fieldrl failure that a user can fix derives from.

The CLI prints such errors as one line (no traceback) and exits with status 2.
"""

__all__ = ["DataError", "FieldrlError"]


class FieldrlError(Exception):
    """A failure caused by the user's input: a config, a file, a checkpoint, a request."""


class DataError(FieldrlError, ValueError):
    """An input file that cannot be used: the message names the file and what is wrong."""
