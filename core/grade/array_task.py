"""``python -m profreport.grade.array_task JOBS.json INDEX``: one task of the Slurm job array
``grade --run --slurm`` submits, the INDEX-th submission run by :func:`.execute.main`.

A module of its own: the package imports :mod:`.execute`, so ``-m profreport.grade.execute``
ran a module already imported, which runpy warns of in every task's log.
"""

from __future__ import annotations

import sys

from profreport.grade.execute import main

if __name__ == "__main__":
    sys.exit(main())
