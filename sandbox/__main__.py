"""``python -m sandbox``: serve the sandbox web in the foreground (see sandbox.cli)."""

from sandbox.cli import main

raise SystemExit(main())
