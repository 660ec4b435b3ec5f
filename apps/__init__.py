"""The fieldrl apps, one sub-package each (``fieldrl.apps.<name>``).

Apps depend on the core (``fieldrl``) and their own extra, never on each other.
They register themselves with the CLI through the ``fieldrl.apps`` entry-point group.
"""
