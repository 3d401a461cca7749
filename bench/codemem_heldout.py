#!/usr/bin/env python3
"""Build a codemem-1 data file from git repositories whose owners committed Claude Code
transcripts as `logs/chat.json` (a JSON array of ~/.claude/projects/*.jsonl records, written by
a hook), in many versions across history.

    python3 bench/codemem_heldout.py --repo owner/name=GITDIR [--repo ...] --out FILE [--split heldout]
                       [--exclude-blob SHA_PREFIX ...]

Every blob of every path ending in `logs/chat.json` reachable from any ref is read (newest
first, `git log --all -m` order; blobs the snapshot lacks are skipped and left out of
source.files); records are merged by uuid (the first copy read wins), grouped by sessionId and
turned into run.py's events. The conventions are those of codemem_dev.json, which this script
rebuilds exactly (sessions and events of all 6 dev projects) from the same repositories:

* user_prompt: a non-sidechain user record with text content (no tool_result), not isMeta, not a
  compaction summary, not "[Request interrupted by user...]", not a built-in command's echo
  (<command-name> first, <local-command-*>, Caveat), text stripped. A custom slash command
  (<command-message> first) becomes "/name args" (its isMeta expansion is dropped).
  <task-notification> messages stay prompts. Not in dev, dropped here too: hook output the
  client recorded as a user message (<session-start-hook>, "Stop hook feedback:", ...).
* tool_use: one per tool_result whose tool_use is known, placed at the result record (parallel
  calls keep the results' order); t = result time, started = the assistant record's time,
  output = the tool_result text (text blocks joined by newlines, "[image]" for an image),
  response = the record's toolUseResult, is_error from the result, sidechain = isSidechain.
  output and response: strings over 30,000 characters are cut with a marker, lists keep 200.
* assistant_final: closes each turn (a prompt up to the next prompt or compaction): its last
  non-sidechain assistant text, joined with the turn's texts of the same time; text outside a
  prompt's turn (before the first prompt, after a compaction) is no final.
* compact: each compaction summary (isCompactSummary); trigger from a compact_boundary within
  2 minutes, else "auto".
* a session: start/end = first/last record time, cwd = its most common cwd; kept only when it has
  a user prompt. Sessions in time order. root: see choose_root. known_files: the tree at HEAD.
"""
import argparse
import collections
import datetime as dt
import json
import os
import re
import subprocess
import sys

PATH_SUFFIX = "logs/chat.json"
INTERRUPT_RE = re.compile(r"^\[Request interrupted by user[^\]]*\]$")
# feedback a blocking hook sends back to the model as a user message ("Stop hook feedback:",
# "Bash operation feedback:"): no prompt of the user
HOOK_FEEDBACK_RE = re.compile(r"^\S+ (hook|operation) feedback:\s")
CMD_NAME_RE = re.compile(r"<command-name>(.*?)</command-name>", re.S)
CMD_ARGS_RE = re.compile(r"<command-args>(.*?)</command-args>", re.S)


def git(gitdir, *args, check=True, text=True):
    r = subprocess.run(["git", "--git-dir", gitdir] + list(args), capture_output=True, text=text)
    if check and r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {r.stderr[-400:]}")
    return r


def parse_ts(value):
    t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


# ==== git: every version of every */logs/chat.json ====
def chat_blobs(gitdir):
    """[(blob, path, [commits])], newest first: the commit that added the blob, then the one
    that replaced or deleted it (the adding commit twice when it is still current)."""
    def scan(extra):
        out = git(gitdir, "log", "--all", *extra, "--format=C %H", "--raw", "--no-abbrev", "--",
                  "*" + PATH_SUFFIX).stdout
        found, order, commit = {}, [], None
        for line in out.split("\n"):
            if line.startswith("C "):
                commit = line[2:].strip()
                continue
            if not line.startswith(":") or "\t" not in line:
                continue
            meta, path = line.split("\t", 1)
            path = path.split("\t")[-1]
            if not (path == PATH_SUFFIX or path.endswith("/" + PATH_SUFFIX)):
                continue
            f = meta.split()
            old, new = f[2], f[3]
            for blob, role in ((new, "added"), (old, "replaced")):
                if set(blob) == {"0"}:
                    continue
                if blob not in found:
                    found[blob] = {"path": path, "added": None, "replaced": None, "all": []}
                    order.append(blob)
                # git log is newest first: the last assignment is the oldest commit
                found[blob][role] = commit
                if commit not in found[blob]["all"]:
                    found[blob]["all"].append(commit)
        return found, order

    found, _ = scan(["--no-merges"])
    more, order = scan(["-m"])  # the order: newest first, merges included
    for b in order:
        if b not in found:
            found[b] = more[b]  # a blob only a merge brought in
    res = []
    for b in order:
        x = found[b]
        added = x["added"] or (x["all"][-1] if x["all"] else None)
        replaced = x["replaced"] or added
        res.append((b, x["path"], [c for c in (added, replaced) if c]))
    return res


def read_records(gitdir, blob):
    r = git(gitdir, "cat-file", "-p", blob, check=False, text=False)
    if r.returncode != 0:
        return None, "missing"
    raw = r.stdout.decode("utf-8", "replace")
    if not raw.strip():
        return None, "empty"
    try:
        data = json.loads(raw)
    except ValueError:
        data = []
        for line in raw.splitlines():  # a .jsonl copy
            line = line.strip()
            if not line:
                continue
            try:
                data.append(json.loads(line))
            except ValueError:
                return None, "bad json"
    if isinstance(data, dict):
        data = data.get("messages") or data.get("records") or [data]
    if not isinstance(data, list):
        return None, "not a list"
    return [x for x in data if isinstance(x, dict)], "ok"


# ==== records -> events ====
def content_text(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def tool_result_text(content):
    """A tool_result's content as text: text blocks joined by newlines, "[image]" for an image."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, dict):
                if b.get("type") == "text":
                    parts.append(b.get("text", ""))
                else:
                    parts.append("[" + str(b.get("type") or "block") + "]")
            elif isinstance(b, str):
                parts.append(b)
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


STR_CAP, LIST_CAP = 30000, 200


def cap(value):
    """Tool outputs and results as the dev file holds them: a string longer than 30,000
    characters is cut there (with a marker), a list keeps its first 200 items."""
    if isinstance(value, str):
        if len(value) > STR_CAP:
            return value[:STR_CAP] + f"\n[... cut by codemem at {STR_CAP} chars]"
        return value
    if isinstance(value, dict):
        return {k: cap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [cap(v) for v in value[:LIST_CAP]]
    return value


def has_tool_result(content):
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def prompt_text(rec):
    """The prompt as the UserPromptSubmit hook would see it, or None when the record is no
    user prompt."""
    if rec.get("isSidechain") or rec.get("isMeta") or rec.get("isCompactSummary") \
            or rec.get("isVisibleInTranscriptOnly"):
        return None
    msg = rec.get("message") or {}
    content = msg.get("content")
    if has_tool_result(content):
        return None
    text = content_text(content)
    s = text.strip()
    if not s:
        return None
    if INTERRUPT_RE.match(s) or HOOK_FEEDBACK_RE.match(s):
        return None
    if s.startswith("This session is being continued from a previous conversation"):
        return None
    if s.startswith("Caveat: The messages below were generated by the user while running local commands"):
        return None
    if s.startswith("<local-command-stdout>") or s.startswith("<local-command-stderr>") \
            or s.startswith("<local-command-caveat>") or s.startswith("<bash-input>") \
            or s.startswith("<bash-stdout>") or s.startswith("<bash-stderr>"):
        return None
    if s.startswith("<session-start-hook>") or s.startswith("<user-prompt-submit-hook>"):
        return None  # a hook's output the client recorded as a user message
    if s.startswith("<command-name>"):
        return None  # a built-in command (/clear, /mcp, /model, ...): no UserPromptSubmit
    if s.startswith("<command-message>"):
        m = CMD_NAME_RE.search(s)
        if not m:
            return None
        name = m.group(1).strip()
        if not name.startswith("/"):
            name = "/" + name
        a = CMD_ARGS_RE.search(s)
        args = a.group(1).strip() if a else ""
        return (name + " " + args).strip() if args else name
    return s


def is_compact_summary(rec):
    return rec.get("type") == "user" and not rec.get("isSidechain") and bool(rec.get("isCompactSummary"))


def build_sessions(records, log):
    by_session = collections.defaultdict(list)
    for r in records:
        sid = r.get("sessionId")
        if sid and r.get("timestamp"):
            by_session[sid].append(r)
    sessions = []
    for sid, recs in by_session.items():
        recs.sort(key=lambda r: parse_ts(r["timestamp"]))  # stable: file order within a tie
        calls = {}  # tool_use_id -> (assistant record, tool_use block)
        for r in recs:
            if r.get("type") == "assistant":
                c = (r.get("message") or {}).get("content")
                if isinstance(c, list):
                    for b in c:
                        if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("id"):
                            calls.setdefault(b["id"], (r, b))
        boundaries = [r for r in recs if r.get("type") == "system" and r.get("subtype") == "compact_boundary"]
        events = []
        seen_tools = set()
        for r in recs:
            typ = r.get("type")
            ts = r["timestamp"]
            if typ == "user":
                content = (r.get("message") or {}).get("content")
                if has_tool_result(content):
                    # a tool event sits where its result arrived (parallel calls: result order)
                    for rb in content:
                        if not (isinstance(rb, dict) and rb.get("type") == "tool_result"):
                            continue
                        tid = rb.get("tool_use_id")
                        if tid in seen_tools or tid not in calls:
                            continue
                        seen_tools.add(tid)
                        ar, b = calls[tid]
                        events.append({"t": ts, "type": "tool_use", "id": tid, "name": b.get("name"),
                                       "input": b.get("input") or {}, "output": cap(tool_result_text(rb.get("content"))),
                                       "response": cap(r.get("toolUseResult")), "is_error": bool(rb.get("is_error")),
                                       "sidechain": bool(r.get("isSidechain") or ar.get("isSidechain")),
                                       "started": ar["timestamp"]})
                    continue
                if is_compact_summary(r):
                    trig = "auto"
                    t0 = parse_ts(ts)
                    near = [b for b in boundaries if abs(parse_ts(b["timestamp"]) - t0) < 120]
                    if near:
                        trig = ((near[0].get("compactMetadata") or {}).get("trigger")) or "auto"
                    events.append({"t": ts, "type": "compact", "trigger": trig})
                    continue
                text = prompt_text(r)
                if text is not None:
                    events.append({"t": ts, "type": "user_prompt", "text": text})
            elif typ == "assistant" and not r.get("isSidechain"):
                content = (r.get("message") or {}).get("content")
                if not isinstance(content, list):
                    continue
                for b in content:
                    if isinstance(b, dict) and b.get("type") == "text" and (b.get("text") or "").strip():
                        events.append({"t": ts, "type": "_text", "text": b["text"]})
        events.sort(key=lambda e: parse_ts(e["t"]))
        # assistant_final: closes each turn (a user prompt up to the next prompt or compaction;
        # text outside a prompt's turn is no final)
        out, texts, in_turn = [], [], False

        def close():
            if not texts:
                return
            # the last text, with the texts sharing its time (a copied history has one time)
            last = texts[-1]
            pick = [x for x in texts if x["t"] == last["t"]]
            out.append({"t": last["t"], "type": "assistant_final", "text": "\n".join(x["text"] for x in pick)})

        for e in events:
            if e["type"] == "_text":
                if in_turn:
                    texts.append(e)
                continue
            if e["type"] in ("user_prompt", "compact"):
                close()
                texts, in_turn = [], e["type"] == "user_prompt"
            out.append(e)
        close()
        out.sort(key=lambda e: parse_ts(e["t"]))
        if not any(e["type"] == "user_prompt" for e in out):
            log(f"    session {sid}: no user prompt, dropped ({len(out)} events)")
            continue
        cwds = collections.Counter(r.get("cwd") for r in recs if r.get("cwd"))
        sessions.append({"id": sid, "start": min((r["timestamp"] for r in recs), key=parse_ts),
                         "end": max((r["timestamp"] for r in recs), key=parse_ts),
                         "cwd": cwds.most_common(1)[0][0] if cwds else None, "events": out})
    sessions.sort(key=lambda s: parse_ts(s["start"]))
    return sessions


FILE_KEYS = {"Read": "file_path", "Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path",
             "NotebookEdit": "notebook_path", "NotebookRead": "notebook_path"}


def choose_root(sessions, blob_prefix, known):
    """The original project directory: among the sessions' directories (a session logged by a
    sub-folder's logs/chat.json counts with that sub-folder removed), the one under which the
    most file paths the file tools used are files of the repository; ties: the most sessions
    logged by a top-level logs/chat.json, then the most sessions."""
    cands = collections.Counter()
    top = collections.Counter()
    for s in sessions:
        c, pre = (s["cwd"] or "").rstrip("/"), blob_prefix.get(s["id"], "")
        if not c:
            continue
        c = c[:-len(pre) - 1] if pre and c.endswith("/" + pre) else c
        cands[c] += 1
        if pre == "":
            top[c] += 1
    if not cands:
        return "/"
    paths = set()
    for s in sessions:
        for e in s["events"]:
            if e["type"] == "tool_use" and not e.get("is_error"):
                p = (e.get("input") or {}).get(FILE_KEYS.get(e.get("name"), ""), None)
                if isinstance(p, str) and p.startswith("/"):
                    paths.add(os.path.normpath(p))

    def hits(c):
        return sum(1 for p in paths if p.startswith(c + "/") and p[len(c) + 1:] in known)
    order = list(cands)  # first seen first (sessions are in time order)
    best = max(order, key=lambda c: (hits(c), top[c], cands[c], -order.index(c)))
    return best.rstrip("/") or "/"


def licence(gitdir, head):
    names = [n for n in git(gitdir, "ls-tree", "--name-only", head).stdout.split("\n") if n]
    for n in names:
        if re.match(r"(?i)^(licen[cs]e|copying)(\.(md|txt|rst))?$", n):
            text = git(gitdir, "cat-file", "-p", f"{head}:{n}", check=False).stdout[:3000]
            for pat, name in ((r"MIT License|Permission is hereby granted, free of charge", "MIT"),
                              (r"Apache License,?\s+Version 2\.0", "Apache-2.0"),
                              (r"GNU AFFERO GENERAL PUBLIC LICENSE", "AGPL-3.0"),
                              (r"GNU LESSER GENERAL PUBLIC LICENSE", "LGPL"),
                              (r"GNU GENERAL PUBLIC LICENSE\s+Version 3", "GPL-3.0"),
                              (r"GNU GENERAL PUBLIC LICENSE\s+Version 2", "GPL-2.0"),
                              (r"Mozilla Public License", "MPL-2.0"),
                              (r"BSD 3-Clause|Redistribution and use in source and binary forms", "BSD"),
                              (r"unlicense|This is free and unencumbered software", "Unlicense")):
                if re.search(pat, text, re.I):
                    return f"{name} ({n})"
            return f"see {n}"
    return "none stated"


def convert_repo(name, gitdir, excludes, log):
    head = git(gitdir, "rev-parse", "HEAD").stdout.strip()
    known = sorted(n for n in git(gitdir, "ls-tree", "-r", "--name-only", head).stdout.split("\n") if n)
    records, files, seen = [], [], set()
    blob_prefix = {}
    for blob, path, commits in chat_blobs(gitdir):  # newest first; the first copy of a record wins
        if any(blob.startswith(x) for x in excludes):
            log(f"  {name}: blob {blob[:10]} ({path}) excluded")
            continue
        recs, status = read_records(gitdir, blob)
        if recs is None:
            log(f"  {name}: blob {blob[:10]} ({path}) skipped: {status}")
            continue
        files.append({"path": path, "blob": blob, "commits": commits})
        prefix = path[:-len(PATH_SUFFIX)].rstrip("/")
        n_new = 0
        for r in recs:
            u = r.get("uuid")
            if not u or u in seen:
                continue
            seen.add(u)
            records.append(r)
            n_new += 1
            if r.get("sessionId"):
                blob_prefix.setdefault(r["sessionId"], prefix)
        log(f"  {name}: blob {blob[:10]} ({path}): {len(recs)} records, {n_new} new")
    sessions = build_sessions(records, log)
    root = choose_root(sessions, blob_prefix, set(known))
    root = root.rstrip("/") or "/"
    for s in sessions:
        if not s["cwd"]:
            s["cwd"] = root
    return {"id": name, "root": root, "sessions": sessions, "known_files": known,
            "source": {"kind": "cc_git", "repo": f"https://github.com/{name}", "head": head, "files": files,
                       "licence": licence(gitdir, head)}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", action="append", required=True, metavar="owner/name=GITDIR")
    ap.add_argument("--out", required=True)
    ap.add_argument("--split", default="heldout")
    ap.add_argument("--exclude-blob", action="extend", nargs="+", default=[], metavar="SHA_PREFIX")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    log = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    projects = []
    for spec in args.repo:
        name, sep, gitdir = spec.partition("=")
        if not sep or not gitdir:
            ap.error(f"--repo wants owner/name=GITDIR, got {spec!r}")
        log(f"codemem_heldout: {name} from {gitdir}")
        p = convert_repo(name, gitdir, [x.lower() for x in args.exclude_blob], log)
        ev = collections.Counter(e["type"] for s in p["sessions"] for e in s["events"])
        log(f"  {name}: {len(p['sessions'])} sessions, {ev['user_prompt']} prompts, {ev['tool_use']} tool events, "
            f"{ev['assistant_final']} finals, {ev['compact']} compactions; root {p['root']}")
        if not p["sessions"]:
            log(f"  {name}: no session with a prompt, project left out")
            continue
        projects.append(p)
    out = {"format": "codemem-1", "split": args.split, "projects": projects}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh, ensure_ascii=False)
    os.replace(tmp, args.out)
    log(f"codemem_heldout: wrote {args.out} ({len(projects)} projects)")


if __name__ == "__main__":
    main()
