#!/usr/bin/env python3
"""Thread decisions on labelled note streams: purity and fragmentation.

usage: python bench/threads.py [--embedder hash|minilm|both] [--stream NAME] [--held-out] [--json] [-v]

Each stream of tests/streams_data.py (a new user's notes on two to four tasks, several
phrasings, orders and languages) is captured note by note into a fresh memory, a minute apart, without a
session id (as `ai_smartness.py capture` does). Per stream and embedder: threads, purity
(share of messages in their thread's majority topic), fragmentation (threads per topic),
single-message share. -v prints every thread's topics and title. --held-out measures the
held-out streams instead (streams_data.HELD_OUT: never tuned on). Quality numbers are
deterministic.
Exit codes: 0 done, 2 usage.
"""

import argparse
import json
import os
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO_ROOT, os.path.join(REPO_ROOT, "tests")]
import ai_smartness as ais  # noqa: E402
import streams_data  # noqa: E402

# Seconds between two notes, and the time of the first.
NOTE_GAP, START = 60.0, 1.7e9


def replay(stream, embedder):
    """{thread id: [topic of each message]} and the threads, after capturing the stream."""
    with tempfile.TemporaryDirectory() as tmp:
        mem = ais.open_memory(tmp, embedder=embedder)
        owner = {}
        for i, (topic, text) in enumerate(stream):
            owner[mem.capture(text, at=START + i * NOTE_GAP)["message_id"]] = topic
        members = {tid: [owner[m["id"]] for m in t["messages"]] for tid, t in mem.threads.items()}
        return members, mem.threads


def measure(stream, embedder):
    members, threads = replay(stream, embedder)
    return {"threads": len(members), "purity": round(streams_data.purity(members), 3),
            "fragmentation": round(streams_data.fragmentation(members), 3),
            "singles": round(streams_data.singles(members), 3),
            "shape": [{"topics": sorted(set(m)), "n": len(m), "title": threads[tid]["title"],
                       "keywords": threads[tid].get("topics", [])[:5]} for tid, m in members.items()]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", choices=("hash", "minilm", "both"), default="both")
    parser.add_argument("--stream", help="only this stream")
    parser.add_argument("--held-out", action="store_true", help="the held-out streams instead")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("-v", action="store_true", help="print each thread")
    args = parser.parse_args(argv)
    streams = streams_data.held_out_streams() if args.held_out else streams_data.streams()
    if args.stream:
        if args.stream not in streams:
            parser.error(f"unknown stream {args.stream!r}: {', '.join(streams)}")
        streams = {args.stream: streams[args.stream]}
    names = ("hash", "minilm") if args.embedder == "both" else (args.embedder,)
    results = {}
    for name in names:
        embedder = ais.MiniLMEmbedder() if name == "minilm" else ais.HashEmbedder()
        results[name] = {s: measure(stream, embedder) for s, stream in streams.items()}
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    for name, rows in results.items():
        print(f"\n{name}\n| stream | threads | purity | threads/topic | single-message |\n|---|---|---|---|---|")
        for s, r in rows.items():
            print(f"| {s} | {r['threads']} | {r['purity']:.3f} | {r['fragmentation']:.2f} | {r['singles']:.2f} |")
            if args.v:
                for t in r["shape"]:
                    print(f"    {t['n']:2d} {'/'.join(t['topics']):20s} {t['title'][:60]!r} {t['keywords']}")
        n = len(rows)
        print(f"| mean | {sum(r['threads'] for r in rows.values()) / n:.1f} | "
              f"{sum(r['purity'] for r in rows.values()) / n:.3f} | "
              f"{sum(r['fragmentation'] for r in rows.values()) / n:.2f} | "
              f"{sum(r['singles'] for r in rows.values()) / n:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
