"""Run the command line with ``python -m profreport``."""

from profreport.cli import main

raise SystemExit(main())
