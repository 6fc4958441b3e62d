"""``recrawl sandbox``: the sandbox web served in the foreground, on loopback.

The evaluation wing is the only part of the project that imports ``sandbox`` (the
layout test checks it); the command line reaches the sandbox through this module.
"""

from __future__ import annotations

import argparse

from sandbox.cli import add_serve_arguments

__all__ = ["add_serve_arguments", "serve_from_args"]


def serve_from_args(args: argparse.Namespace) -> int:
    """Serve the web the arguments describe until Ctrl-C; the exit code."""
    import asyncio

    from sandbox.cli import raise_open_file_limit, serve_foreground, web_from_args

    if not 0 <= args.port <= 65_535:
        raise ValueError(f"--port must be within 0-65535, got {args.port}")
    if args.manifest is not None and (args.manifest.is_dir() or not args.manifest.parent.is_dir()):
        raise ValueError(f"--manifest must be a file in an existing folder, got {args.manifest}")
    web = web_from_args(args)
    raise_open_file_limit(args.hosts + 4_096)
    serving = serve_foreground(
        web,
        args.port,
        manifest_path=args.manifest,
        log_max_entries=args.log_max_entries,
        show_hosts=5,
        warmup=not args.no_warmup,
    )
    asyncio.run(serving)
    return 0
