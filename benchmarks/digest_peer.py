"""The peer the store's integrity check is measured against: this tree with its file
digests switched off (nothing hashed when a file is written, nothing checked when it is
read; ``tasks.store.history.verify_file``), in this process only. Used by bench_commit.py
(mode ``unchecked``) and bench_estimation.py (``--unchecked``)."""

from __future__ import annotations

from typing import Any


def switch_off_digests() -> None:
    import tasks.store.history as history

    def no_digest(handle: Any) -> str:
        return "0" * 64

    def no_check(*args: Any, **kwargs: Any) -> None:
        return None

    history._handle_digest = no_digest
    history.verify_file = no_check
