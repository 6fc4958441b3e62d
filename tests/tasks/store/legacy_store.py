"""Make a store look written before the digests existed (a manifest without them, a catalog
without its sidecar): what an old store on disk is."""

from __future__ import annotations

import json
from pathlib import Path

from tasks.store.history import DIGEST, MANIFEST, MANIFEST_DIGEST, sidecar_path


def strip_digests(root: Path) -> None:
    """Remove every digest the store keeps: the manifest's (of its files and of itself)
    and the catalog's sidecar."""
    path = Path(root) / "history" / MANIFEST
    if path.exists():
        manifest = json.loads(path.read_text())
        manifest.pop(MANIFEST_DIGEST, None)
        for entry in manifest["cycles"].values():
            entry.pop(DIGEST, None)
        if manifest.get("stats"):
            manifest["stats"].pop(DIGEST, None)
        path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    sidecar_path(Path(root) / "pages" / "catalog.parquet").unlink(missing_ok=True)
