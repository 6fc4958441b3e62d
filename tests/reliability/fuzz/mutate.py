"""Byte-level mutation of seed files: what a fuzzer does to real inputs."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A seed with a few random byte edits (flip, insert, delete, cut, repeat)."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 8))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "cut", "repeat"]))
        at = draw(st.integers(0, max(0, len(data))))
        if op == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(max_size=12))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 12))]
        elif op == "cut":
            del data[at:]
        elif op == "repeat":
            data[at:at] = bytes(data[at : at + 40]) * draw(st.integers(1, 50))
    return bytes(data)
