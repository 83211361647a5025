"""patchwheel: maintained fixes for transformers/accelerate as patch series, built into +fixed wheels.

The public surface, kept stable and changed only with a CHANGELOG.md entry:

- the command line (``patchwheel <verb>``, ``python -m patchwheel``), its verbs, options and exit statuses;
- what it writes for others: the +fixed wheels, their ``overlay-fixes.json`` manifest, dist/ (the PEP 503 index,
  the consumer pins and constraints) and the committed upstream matrix under patches/;
- ``patchwheel status --json``: the status probe's report of an environment;
- the nox sessions (``nox -s build``, ``lint``, ``prove``, ``follow``, ...), which call the command line.

Every module below is internal, moved or renamed without notice: they are grouped by job (``wheels/``: the build;
``matrix/``, ``probes/``, :mod:`.series`, ``maint/``, and the command line in :mod:`.cli`, :mod:`.commands` and
:mod:`.maint_commands`).
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
