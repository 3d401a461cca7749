#!/usr/bin/env python3
"""Build a MemoryCode dialogues file of the dialogues the dev file does not hold, from the
MemoryCode repository (Cohere-Labs-Community/MemoryCode, Apache-2.0), in the dev file's shape.

    python3 bench/memorycode_heldout.py --repo GITDIR --out FILE
                       [--dev ../shared/bench/memorycode/memorycode_dev.json]

`GITDIR` is the repository's git directory (a `git clone --mirror`, or a work tree's `.git`).
The dialogues (`dataset/dialogue_<n>.json`) are read at the commit the dev file names; each one
the dev file also holds must be identical to the dev file's copy (the same source, so the rest
is data the product was never tuned on), else the build fails. The output keeps the dev file's
`source`, `commit`, `license` and `paper`, says what its `split` is, and is third-party data:
write it outside the project. Exit 0 written, 1 unreadable input or a dev dialogue that differs,
2 usage.
"""
import argparse
import json
import os
import re
import subprocess
import sys

DEV = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                   "shared", "bench", "memorycode", "memorycode_dev.json")
DIALOGUE_RE = re.compile(r"^dataset/(dialogue_\d+)\.json$")
KEPT = ("source", "commit", "license", "paper")  # what the output says of where it comes from


def git(gitdir, *args):
    r = subprocess.run(["git", "--git-dir", gitdir, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {r.stderr.strip()[-300:]}")
    return r.stdout


def held_out(gitdir, dev):
    """{name: dialogue} of the repository's dialogues at dev's commit that dev does not hold."""
    commit = dev["commit"]
    out, same = {}, 0
    for path in git(gitdir, "ls-tree", "-r", "--name-only", commit, "dataset/").split("\n"):
        m = DIALOGUE_RE.match(path)
        if not m:
            continue
        dialogue = json.loads(git(gitdir, "show", f"{commit}:{path}"))
        if m.group(1) in dev["dialogues"]:
            if dialogue != dev["dialogues"][m.group(1)]:
                raise ValueError(f"{path} differs from the dev file's copy")
            same += 1
        else:
            out[m.group(1)] = dialogue
    if same != len(dev["dialogues"]):
        raise ValueError(f"{len(dev['dialogues']) - same} dev dialogues are not in the repository at {commit}")
    return dict(sorted(out.items(), key=lambda kv: int(kv[0].rsplit("_", 1)[1])))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True, help="the MemoryCode repository's git directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dev", default=DEV, help="the dev dialogues file (default: ../shared's)")
    args = ap.parse_args(argv)
    try:
        with open(args.dev, encoding="utf-8") as f:
            dev = json.load(f)
        dialogues = held_out(args.repo, dev)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        print(f"memorycode_heldout: {e}", file=sys.stderr)
        return 1
    data = {k: dev[k] for k in KEPT if k in dev}
    data.update(split=f"held out: the {len(dialogues)} dialogues not in the dev file", dialogues=dialogues)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(data, f)
    print(f"{args.out}: {len(dialogues)} dialogues")
    return 0


if __name__ == "__main__":
    sys.exit(main())
