#!/usr/bin/env python3
"""codemem evidence recall counted four ways, from a saved replay (no hook is run).

usage: python bench/codemem_evidence.py --raw RAW.json --data DATA.json [--json]

RAW is what `../shared/bench/codemem/run.py --save-raw RAW.json` wrote for DATA. For each
scored prompt and each injected text (the product and the baselines), evidence recall (the
share of the earlier events about the next turn's files that appear in the text) is counted:

- `code`: as the benchmark's code counts it (`run.attribute`, `run.appears`);
- `distinct`: each distinct 5-gram of the text once, as the benchmark's README defines it;
- `relative`: as `code`, with the project's folder taken out of the events and of the texts, so
  a path counts from the project's root (`src/app.ts`): the folder starts every absolute path
  of the project, so raw lines share 5-grams with every event that names a file;
- `content`: as `relative`, with the client's fixed sentences around tool results out too (the
  `<system-reminder>` blocks, "The file … has been updated …", "File created successfully at:
  …"): what an event says, not how the client framed it.

Each score is the mean over the scored prompts; the ratio is the product over the best baseline
of the same count. Exit 0 done, 1 unreadable input or no benchmark code, 2 usage.
"""
import argparse
import collections
import json
import os
import re
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "shared", "bench", "codemem")
# What Claude Code wraps tool results in, the same for every file: out of the `content` count.
CLIENT_SENTENCES = (
    r"<system-reminder>.*?</system-reminder>",
    r"The file \S+ has been updated(?: successfully)?\.(?: All occurrences of .*? were successfully replaced)?",
    r"Here's the result of running `cat -n` on a snippet of the edited file:",
    r"File created successfully at: \S+",
)
COUNTS = ("code", "distinct", "relative", "content")


def framing(project_dir, count):
    """text -> the text as `count` reads it."""
    if count in ("code", "distinct"):
        return lambda text: text
    folder = re.compile(re.escape(project_dir.rstrip("/")) + "/?")
    fixed = [re.compile(p, re.S) for p in CLIENT_SENTENCES] if count == "content" else []

    def read(text):
        for pattern in fixed:
            text = pattern.sub(" ", text)
        return folder.sub("", text)
    return read


def shared_distinct(run, text, index, limit):
    """event -> how many distinct 5-grams of `text` it holds."""
    toks = run.tokens(text)
    found = collections.Counter()
    if len(toks) >= 5:
        for owners in index.owners_of(list(set(run.grams(toks))), limit):
            found.update(set(owners.tolist()))
    return found


def score(run, project, raw):
    """count -> injection -> [evidence recall of each scored prompt]."""
    res = run.materialize(project, raw)
    store, files = res["store"], res["files"]
    out = {c: collections.defaultdict(list) for c in COUNTS}
    indexes = {}
    for p in res["prompts"]:
        if not (p["session_index"] > 0 and p["F"]):
            continue
        wanted, limit = set(p["F"]), p["n_earlier"]
        related = {i for i in range(limit) if (wanted.intersection(store[i]["touched"]) if store[i]["kind"] == "tool_use"
                                               else any(files.named(store[i]["match"], f) for f in wanted))}
        if not related:
            continue
        for count in COUNTS:
            read = framing(raw["project_dir"], count)
            if count not in indexes:
                indexes[count] = indexes.get("code") if count == "distinct" else \
                    run.GramIndex([dict(x, match=read(x["match"])) for x in store])
            index = indexes[count]
            for name, text in p["inject"].items():
                if name == "none":
                    continue
                found = shared_distinct(run, read(text), index, limit) if count == "distinct" else \
                    run.attribute(read(text), index, limit, related)[0]
                out[count][name].append(sum(run.appears(found, index, e) for e in related) / len(related))
    return out


def main():
    ap = argparse.ArgumentParser(description="codemem evidence recall counted four ways")
    ap.add_argument("--raw", required=True, help="a file written by run.py --save-raw")
    ap.add_argument("--data", required=True, help="the codemem file that replay read")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, BENCH)
    try:
        import run
        with open(args.raw) as fh:
            raws = json.load(fh)["raw"]
        with open(args.data) as fh:
            projects = {p["id"]: p for p in json.load(fh)["projects"]}
    except (ImportError, OSError, ValueError, KeyError) as exc:
        print(f"codemem_evidence: {exc}", file=sys.stderr)
        return 1
    totals = {c: collections.defaultdict(list) for c in COUNTS}
    for raw in (r for r in raws if r["project"] in projects):
        for count, by_name in score(run, projects[raw["project"]], raw).items():
            for name, values in by_name.items():
                totals[count][name] += values
    report = {}
    for count, by_name in totals.items():
        means = {name: sum(v) / len(v) for name, v in by_name.items() if v}
        best = max((v for k, v in means.items() if k != "product"), default=0.0)
        report[count] = dict(means, ratio=means.get("product", 0.0) / best if best else None,
                             prompts=len(by_name.get("product", [])))
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return 0
    names = sorted({k for r in report.values() for k in r} - {"ratio", "prompts", "product"})
    print("| count | prompts | product | " + " | ".join(names) + " | product / best |")
    print("|---|---:|---:|" + "---:|" * len(names) + "---:|")
    for count, r in report.items():
        ratio = f"{r['ratio']:.2f}×" if r["ratio"] is not None else "-"
        print(f"| {count} | {r['prompts']} | {r.get('product', 0):.3f} | "
              + " | ".join(f"{r.get(n, 0):.3f}" for n in names) + f" | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
