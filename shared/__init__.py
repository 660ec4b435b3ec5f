"""fieldrl: reinforcement-learning applications on a small shared core.

The core (this package) gives every app config loading, run folders and logging,
checkpoints, seeding, policy building blocks, serving, the Ray backend and the CLI.
Apps live in ``fieldrl.apps.<name>``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fieldrl")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
