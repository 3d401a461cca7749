#!/usr/bin/env python3
"""The files in play of a codemem file, offline: the product's capture and file ranking alone.

usage: python bench/codemem_files.py --data DATA.json [--product DIR] [--projects a/b,c/d] [--misses] [--json]

Each project's events go in time order through the product's own `capture_entry()` (what its
hooks journal) and `FileTable` (what its daemon keeps); before each prompt of a later session,
`FileTable.rank(prompt, 5)` is scored as `../shared/bench/codemem/run.py` scores files@5: the
share of the files the agent touched next (F, the benchmark's own `prepare()`; at most five)
among those five.
Baseline in the same run: the five files the earlier events touched last (the benchmark's
"recent files"). A whole project takes seconds where the replay through the hooks takes
minutes, so a change to the ranking is tried here first; the replay's files@5 also depends on
which files the injected text names first, and stays the number to report. `--misses` prints,
for each prompt, the files of F the five missed with their rank. Exit 0 done, 1 unreadable
input or no benchmark code, 2 usage.
"""
import argparse
import importlib.util
import json
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "shared", "bench", "codemem", "run.py")
TOP = 5  # files@5
MISS_RANKS = 100  # how deep a missed file's rank is looked for


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def message(ais, table, entry, n):
    """The message the product's writer makes of a journaled capture (MemoryWriter.message_files)."""
    msg = {"id": f"m{n}", "session": entry.get("session"), "source": entry["source"], "text": entry["text"]}
    files = entry.get("files")
    if isinstance(files, list) and entry.get("op") in ais.FILE_OPS.values():
        files = [f for f in files if isinstance(f, str) and f][:ais.MAX_CAPTURE_FILES]
        files = table.known(files) if entry["op"] == "run" else files
        if files:
            msg.update(files=files, op=entry["op"])
            if isinstance(entry.get("cites"), list):
                msg["cites"] = entry["cites"]
    elif entry["source"] in ("prompt", "assistant"):
        named = table.mentioned(entry["text"])
        if named:
            msg["files"] = named
    for key in ("command", "failed"):
        if entry.get(key):
            msg[key] = entry[key]
    return msg


def replay(run, ais, project, misses):
    """[(files@5 of the product, of the recent files)] per scored prompt of one project."""
    files = run.Files(project)
    info, cwds = run.prepare(project, files), run.session_cwds(project)
    root = project["root"].rstrip("/")
    data_dir = root + "/.ai"  # never written: capture_entry() only reads the project's folder from it
    table, recent, rows, n = ais.FileTable(root), {}, [], 0
    for t, _, sid, kind, e in run.timeline(project):
        base = {"session_id": sid, "cwd": cwds[sid] or root}
        if kind == "user_prompt":
            p = info[id(e)]
            if p["session_index"] > 0 and p["F"]:
                F = set(p["F"])
                ranked = [f for f, _ in table.rank(e["text"], MISS_RANKS if misses else TOP)]
                newest = sorted(recent, key=recent.get, reverse=True)[:TOP]
                rows.append((len(F.intersection(ranked[:TOP])) / min(len(F), TOP),
                             len(F.intersection(newest)) / min(len(F), TOP)))
                missed = [(f, ranked.index(f) + 1 if f in ranked else None) for f in sorted(F) if f not in ranked[:TOP]]
                if misses and missed:
                    print(f"{project['id']}: {e['text'][:80]!r}\n  five: {ranked[:TOP]}\n  missed: {missed}")
            entry = ais.capture_entry("prompt", dict(base, prompt=e["text"]), data_dir, at=t)
        elif kind == "tool_use":
            payload = dict(base, tool_name=e.get("name") or "", tool_input=e.get("input") or {}, tool_use_id=e.get("id"))
            entry = ais.capture_entry("failure", dict(payload, error=(e.get("output") or "")[:2000]), data_dir, at=t) \
                if e.get("is_error") else ais.capture_entry("tool", dict(payload, tool_response=run.response_for(e)),
                                                            data_dir, at=t)
            for f in files.touched(e, cwds[sid]):
                recent[f] = (t, n)
        elif kind == "assistant_final":
            entry = ais.capture_entry("answer", dict(base, last_assistant_message=e["text"]), data_dir, at=t)
        else:
            continue
        if entry:
            n += 1
            table.note(message(ais, table, dict(entry, session=sid), n), t)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--product", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the folder of the ai_smartness.py to rank with (default: this checkout)")
    ap.add_argument("--projects", help="only these projects (owner/name, comma-separated)")
    ap.add_argument("--misses", action="store_true", help="print the files of F the five missed")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        run = load(BENCH, "codemem_run")
        ais = load(os.path.join(args.product, "ai_smartness.py"), "ai_smartness")
        with open(args.data, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, SyntaxError, ImportError) as e:
        print(f"codemem_files: {e}", file=sys.stderr)
        return 1
    only = set(args.projects.split(",")) if args.projects else None
    per, rows = {}, []
    for project in data["projects"]:
        if only and project["id"] not in only:
            continue
        got = replay(run, ais, project, args.misses)
        rows += got
        per[project["id"]] = {"prompts": len(got), "product": mean([r[0] for r in got]),
                              "recent_files": mean([r[1] for r in got])}
    total = {"prompts": len(rows), "product": mean([r[0] for r in rows]), "recent_files": mean([r[1] for r in rows])}
    if args.json:
        print(json.dumps({"projects": per, "all": total}, indent=1))
        return 0
    for name, r in list(per.items()) + [("all", total)]:
        print(f"{name:42} {r['prompts']:4d} prompts  files@5 {r['product']:.3f}  recent files {r['recent_files']:.3f}")
    return 0


def mean(values):
    return sum(values) / len(values) if values else 0.0


if __name__ == "__main__":
    sys.exit(main())
