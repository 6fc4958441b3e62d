"""Benchmark: sitemap parsing throughput against a bare ElementTree parse (the ceiling).

One gzip sitemap of 50,000 URLs (the protocol's maximum) shaped like the sandbox's: a
``<loc>`` and a ``<lastmod>`` per URL, about 4.8 MB of XML, 0.3 MB gzipped. Alternating,
``--repeat`` times, best and median of each:

  bare       gzip.decompress + xml.etree.ElementTree.fromstring (C accelerated): the ceiling,
             with no entity protection, no limits and nothing read out of the tree
  bare+read  the same, then loc and lastmod text of every URL read out (no date parsing)
  sitemap    models.discovery.sitemap.parse_sitemap: bounded streaming gunzip, expat with DTDs and
             entities refused, the 50,000-URL and 50 MB limits, lastmod parsed to UTC
             datetimes, changefreq/priority validated

Reproduce:  .venv/bin/python benchmarks/bench_discovery.py [--urls 50000 --repeat 7]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.discovery.sitemap import parse_sitemap

NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


def build(urls: int) -> bytes:
    start = datetime(2025, 1, 1, tzinfo=UTC)
    rows = []
    for j in range(urls):
        mod = (start + timedelta(seconds=j * 613)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
        rows.append(f"<url><loc>http://127.0.1.1:8080/p/{j}</loc><lastmod>{mod}</lastmod></url>\n")
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        + "".join(rows)
        + "</urlset>\n"
    )
    return gzip.compress(xml.encode(), compresslevel=6, mtime=0)


def bare(data: bytes) -> int:
    return len(ET.fromstring(gzip.decompress(data)))


def bare_read(data: bytes) -> int:
    root = ET.fromstring(gzip.decompress(data))
    out = [(url.findtext(NS + "loc"), url.findtext(NS + "lastmod")) for url in root]
    return len(out)


def ours(data: bytes) -> int:
    return len(parse_sitemap(data).entries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--urls", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    data = build(args.urls)
    size = len(gzip.decompress(data))
    print(f"sitemap: {args.urls:,} URLs, {size / 1e6:.1f} MB XML, {len(data) / 1e6:.2f} MB gzip")
    runs: dict[str, list[float]] = {"bare": [], "bare+read": [], "sitemap": []}
    funcs: dict[str, Callable[[bytes], int]] = {
        "bare": bare,
        "bare+read": bare_read,
        "sitemap": ours,
    }
    for _ in range(args.repeat):
        for name, func in funcs.items():
            t0 = time.perf_counter()
            n = func(data)
            runs[name].append(time.perf_counter() - t0)
            assert n == args.urls, (name, n)
    ceiling = min(runs["bare"])
    print(f"{'':<10} {'best s':>8} {'median s':>9} {'URLs/s (best)':>14} {'x bare':>7}")
    for name, times in runs.items():
        best = min(times)
        print(
            f"{name:<10} {best:>8.3f} {statistics.median(times):>9.3f} "
            f"{args.urls / best:>14,.0f} {best / ceiling:>7.2f}"
        )
    print(
        "reproduce: .venv/bin/python benchmarks/bench_discovery.py "
        f"--urls {args.urls} --repeat {args.repeat}"
    )


if __name__ == "__main__":
    main()
