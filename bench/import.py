#!/usr/bin/env python3
"""Import speed: `import` of a large Claude Code transcript against live capture of the same
events through the hook processes, in one run, both with the model warm.

usage: python bench/import.py [--copies N] [--live N] [--embedder minilm|hash] [--json]

The transcript is generated in a temporary folder from the real transcripts of
../shared/fixtures/claude-code/transcripts: their records, `--copies` times (default 100),
each copy a session of its own (new session, record and tool ids, times an hour apart) whose
prompt, answer and tool-result texts carry a few words drawn for that copy, so no two copies
embed alike. Nothing is copied into the project.

Import: in this process, `ai_smartness.py import` (do_import) on the whole file, after a
warm-up import that loads the model; timed from the call to its summary.
Live: the first `--live` events (default 300) of the same transcript, as the hook payloads
the parser yields (UserPromptSubmit, PostToolUse, PostToolUseFailure, Stop), each through
the installed hook command (a process per event, as Claude Code runs them) with a warm
daemon; timed from the first hook until the daemon has drained the inbox.

Reported: events/s (events: every prompt, tool result and answer the transcript holds,
captured or found to be noise) wall-clock and per CPU second (this process for the import;
the hook processes and the daemon for live capture), and whether import is slower (it must
never be). Wall-clock numbers on a shared machine are noisy: the CPU rate is the stable one.
Exit codes: 0 done, 1 bench error, 2 usage.
"""
import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
import ai_smartness as ai  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(REPO_ROOT), "shared", "fixtures", "claude-code", "transcripts")
# The hook command install.sh writes (settings.template.json), the module from this checkout.
HOOK_CMD = ["-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import ai_smartness; "
            "ai_smartness.hook_command(sys.argv[2:])", REPO_ROOT, "hook"]
HOOK_OF = {"prompt": "inject", "tool": "capture", "failure": "failure", "answer": "stop"}
WORDS = ("ledger refund invoice parser cache schema migration token session queue worker retry "
         "webhook payment tenant quota metric alert deploy rollback canary shard replica index "
         "cursor batch stream socket timeout backoff lock mutex pool thread signal").split()
WAIT_S = 900.0


def big_transcript(path, copies, seed=7):
    """The fixtures' records, `copies` times, each copy its own session (see the docstring)."""
    rng = random.Random(seed)
    records = []
    for name in sorted(os.listdir(FIXTURES)):
        with open(os.path.join(FIXTURES, name), encoding="utf-8") as fh:
            records += [json.loads(line) for line in fh if line.strip()]
    base = ai.valid_ts("2026-01-05T09:00:00Z")
    with open(path, "w", encoding="utf-8") as out:
        for k in range(copies):
            words = " ".join(rng.sample(WORDS, 4))
            text = json.dumps(records)
            # Ids and times of this copy: a session of its own, an hour after the previous.
            text = text.replace('"sessionId": "', f'"sessionId": "c{k}-').replace('"toolu_', f'"toolu_c{k}_')
            text = text.replace('"uuid": "', f'"uuid": "c{k}-').replace('"promptId": "', f'"promptId": "c{k}-')
            for rec in json.loads(text):
                if isinstance(rec.get("timestamp"), str) and ai.valid_ts(rec["timestamp"]):
                    rec["timestamp"] = ai.iso(base + k * 3600 + (ai.valid_ts(rec["timestamp"]) % 3000))
                _vary(rec.get("message"), words)
                out.write(json.dumps(rec) + "\n")
    return path


def _vary(msg, words):
    if not isinstance(msg, dict):
        return
    if isinstance(msg.get("content"), str):
        msg["content"] = f"{msg['content']} ({words})"
    for part in msg.get("content") if isinstance(msg.get("content"), list) else ():
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            part["text"] = f"{part['text']} ({words})"
        elif isinstance(part, dict) and isinstance(part.get("content"), str):
            part["content"] = f"{part['content']} ({words})"


def events_of(path):
    from collections import Counter
    return list(ai.import_events(path, "claude-jsonl", Counter(), lambda n: None))


def cpu_self():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cpu_of(pid):
    """CPU seconds of a running process (its /proc stat), 0.0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def run_import(project, path, embedder):
    """do_import in this process on a memory whose model is warm; (seconds, CPU seconds, summary)."""
    parser = ai.build_parser()
    args = parser.parse_args(["--project", project, "import", "--json", path])
    cli = ai.Cli(args)
    cli._mem = ai.Memory(cli.store.dir, embedder=embedder)
    started, cpu = time.perf_counter(), cpu_self()
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert args.func(cli, args) == 0
    return time.perf_counter() - started, cpu_self() - cpu, json.loads(out.getvalue())


def run_live(project, events, env):
    """Each event through its hook process with a warm daemon; (seconds, CPU seconds,
    messages stored)."""
    python = sys.executable
    env = dict(env, CLAUDE_PROJECT_DIR=project)  # as Claude Code sets it: the hooks' project
    subprocess.run([python, os.path.join(REPO_ROOT, "ai_smartness.py"), "--project", project, "daemon", "start"],
                   env=env, check=True, capture_output=True, timeout=WAIT_S)
    store = ai.Store(ai.data_dir_of(project))
    pid = ai.daemon_info(store).get("pid")
    started, cpu, daemon_cpu = time.perf_counter(), cpu_children(), cpu_of(pid)
    for kind, payload in events:
        payload = dict(payload, cwd=project, hook_event_name=kind)
        payload.pop("at", None)
        subprocess.run([python, *HOOK_CMD, HOOK_OF[kind]], input=json.dumps(payload).encode(), env=env,
                       cwd=project, capture_output=True, timeout=60)
    deadline = time.monotonic() + WAIT_S
    while store.inbox_pending() and time.monotonic() < deadline:
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    used = cpu_children() - cpu + cpu_of(pid) - daemon_cpu
    ai.stop_daemon(store)
    mem = ai.Memory(store.dir, embedder=ai.HashEmbedder())
    mem.ensure_loaded()
    return elapsed, used, len(mem.msgs)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    def count(text):
        if int(text) < 1:
            raise argparse.ArgumentTypeError(f"must be 1 or more: {text}")
        return int(text)
    p.add_argument("--copies", type=count, default=100, help="copies of the fixtures' records (sessions)")
    p.add_argument("--live", type=count, default=300, help="events captured live through the hooks")
    p.add_argument("--embedder", choices=("minilm", "hash"), default="minilm")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if not os.path.isdir(FIXTURES):
        print(f"bench/import.py: fixtures absent: {FIXTURES}", file=sys.stderr)
        return 1
    env = dict(os.environ, AI_SMARTNESS_EMBEDDER=args.embedder)
    os.environ["AI_SMARTNESS_EMBEDDER"] = args.embedder
    with tempfile.TemporaryDirectory(prefix="ai_import_bench.") as tmp:
        path = big_transcript(os.path.join(tmp, "big.jsonl"), args.copies)
        events = events_of(path)
        embedder = ai.make_embedder(args.embedder)
        warm = os.path.join(tmp, "warm")
        os.mkdir(warm)
        run_import(warm, os.path.join(FIXTURES, sorted(os.listdir(FIXTURES))[0]), embedder)  # loads the model
        project = os.path.join(tmp, "import")
        os.mkdir(project)
        secs, cpu, summary = run_import(project, path, embedder)
        live_project = os.path.join(tmp, "live")
        os.mkdir(live_project)
        live = events[:args.live]
        live_secs, live_cpu, live_stored = run_live(live_project, live, env)
    out = {"embedder": args.embedder, "events": len(events), "prompts": summary["exchanges"], "stored": summary["stored"],
           "import": {"seconds": round(secs, 2), "cpu_seconds": round(cpu, 2),
                      "events_per_s": round(len(events) / secs, 1), "events_per_cpu_s": round(len(events) / cpu, 1)},
           "live": {"events": len(live), "stored": live_stored, "seconds": round(live_secs, 2), "cpu_seconds": round(live_cpu, 2),
                    "events_per_s": round(len(live) / live_secs, 1),
                    "events_per_cpu_s": round(len(live) / live_cpu, 1)}}
    out["import_slower"] = out["import"]["events_per_cpu_s"] < out["live"]["events_per_cpu_s"]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"embedder {out['embedder']}: {out['events']} events ({out['prompts']} prompts), {out['stored']} stored")
        for name in ("import", "live"):
            r = out[name]
            print(f"{name:7s} {r.get('events', out['events']):6d} events  {r['seconds']:8.2f} s  "
                  f"{r['events_per_s']:7.1f} ev/s  {r['cpu_seconds']:8.2f} CPU s  {r['events_per_cpu_s']:7.1f} ev/CPU s")
        print("import slower than live capture: " + ("YES" if out["import_slower"] else "no"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
