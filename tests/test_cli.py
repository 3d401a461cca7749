"""The CLI as real processes: every command, --json, exit codes, docs, and a run without
numpy or sentence-transformers."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

import ai_smartness as ai
import topics_data
from conftest import ROOT, SCRIPT, cli, cli_json, hook
from support import post_payload, prompt_payload, start_payload

COMMANDS = ["capture", "status", "threads", "thread", "bridges", "search", "recall", "context", "rules",
            "forget", "export", "reindex", "health", "daemon", "hook"]


@pytest.fixture(scope="module")
def stored_topics(tmp_path_factory):
    """The 20 interleaved captures, stored once per module through the scripting API (CLI
    capture is tested below, and with 20 processes in the bare-venv test)."""
    path = tmp_path_factory.mktemp("topics") / "proj"
    mem = ai.open_memory(str(path), embedder="fake")
    for _, text in topics_data.interleaved():
        mem.capture(text)
    return path / ".ai"


@pytest.fixture
def filled(project, stored_topics):
    """A `project` holding the 20 interleaved captures: a copy, so a test may change it."""
    shutil.copytree(stored_topics, project / ".ai")
    return project


def test_help_lists_every_command_and_exit_codes(capsys):
    proc = cli("--help")
    assert proc.returncode == 0
    for name in COMMANDS:
        assert name in proc.stdout
    assert "Exit codes" in proc.stdout
    # `hook NAME` skips argparse (hooks are on Claude Code's critical path): a process, exit 0.
    assert cli("hook", "--help").returncode == 0
    for name in set(COMMANDS) - {"hook"}:  # argparse's own exit: in-process proves it as a process would
        with pytest.raises(SystemExit) as exc:
            ai.main([name, "--help"])
        assert exc.value.code == 0 and capsys.readouterr().out.startswith("usage:"), name


def test_readme_documents_every_command():
    readme = (ROOT / "README.md").read_text()
    for name in COMMANDS:
        assert re.search(rf"`[^`]*\b{name}\b[^`]*`", readme), name


def test_read_commands_and_json(filled):
    threads = cli_json("threads", "--status", "all", project=filled)
    assert len([t for t in threads if not t["parent_id"]]) == 3
    tid = threads[0]["id"]
    assert cli_json("thread", tid, project=filled)["id"] == tid
    assert isinstance(cli_json("bridges", project=filled), list)
    hits = cli_json("search", "postgres migration", "--limit", "3", project=filled)
    assert len(hits) == 3 and all("Postgres" in h["text"] for h in hits)
    recall = cli_json("recall", "CSS layout", project=filled)
    assert "sidebar" in recall["text"]
    ctx = cli_json("context", "JWT refresh token", "--budget", "600", project=filled)
    assert len(ctx["text"]) <= 600 and ctx["message_ids"]
    status = cli_json("status", project=filled)
    assert status["threads"] >= 3 and status["daemon"] is False
    export = json.loads(cli("export", project=filled).stdout)
    assert sum(len(t["messages"]) for t in export["threads"]) == 20
    # No vector in an export (a key test: a random id may well contain the letters "vec").
    assert not any("vec" in m for t in export["threads"] for m in t["messages"])


def test_the_thread_list_says_how_long_ago_each_thread_was_active(project):
    """"(Thursday morning)" alone, for work of months ago, read as this week's."""
    at = time.time() - 95 * 86400
    when = ai.when_label(ai.time_markers(at), "en")
    assert cli("capture", "The exporter streams rows in batches of 500", "--at", ai.iso(at), project=project).returncode == 0
    out = cli("threads", "--status", "all", project=project).stdout
    assert "archived  w=" in out and f"(3 months ago, {when})" in out, out


def test_threads_idle_for_weeks_are_listed_as_suspended_before_any_new_capture(project):
    """The lifecycle ran only on capture, by the newest content's clock: back after three weeks,
    `threads` listed the last work as active until the next capture."""
    at = ai.iso(time.time() - 20 * 86400)
    assert cli("capture", "The exporter streams rows in batches of 500", "--at", at, project=project).returncode == 0
    assert cli_json("threads", project=project) == []
    [row] = cli_json("threads", "--status", "suspended", project=project)
    assert row["status"] == "suspended" and cli_json("thread", row["id"], project=project)["status"] == "suspended"
    assert cli_json("status", project=project)["by_status"] == {"active": 0, "suspended": 1, "archived": 0}
    # The text list says where the threads are rather than a bare "(none)" (an empty memory).
    assert cli("threads", project=project).stdout.strip() == "(none active; suspended: 1 — `--status all` lists them)"
    threads = [{"status": "archived"}, {"status": "suspended"}, {"status": "archived"}]
    assert ai.none_in_status(threads, "active", "fr") == "(aucun fil actif ; suspendu : 1, archivé : 2 — `--status all` les liste)"
    assert ai.none_in_status([], "active", "es") == ai.none_in_status(threads, "all", "es") == "(ninguno)"


def test_rules_add_list_remove(project):
    assert cli("rules", "add", "Always run the tests", project=project).returncode == 0
    assert "already" in cli("rules", "add", "always run the tests", project=project).stdout
    assert [r["text"] for r in cli_json("rules", project=project)] == ["Always run the tests"]
    assert cli("rules", "remove", "1", project=project).returncode == 0
    assert cli_json("rules", project=project) == []
    assert cli("rules", "remove", "7", project=project).returncode == 3


def test_forget_and_exit_codes(filled):
    tid = cli_json("threads", project=filled)[0]["id"]
    title = cli_json("thread", tid, project=filled)["title"]
    store = ai.Store(ai.data_dir_of(str(filled)))
    store.write_recall(tid, f"recalled: {title}")  # what Read(".ai/recall/<id>") left
    assert cli("forget", tid, project=filled).returncode == 0
    assert ai.Store._listdir(store.recall_dir) == []  # no copy of the forgotten thread stays
    assert cli("thread", tid, project=filled).returncode == 3
    assert cli("forget", tid, project=filled).returncode == 3
    assert cli("nonsense", project=filled).returncode == 2
    assert cli("capture", "x", "--at", "not a time", project=filled).returncode == 2


def test_a_forgotten_thread_leaves_no_trace_in_the_briefing_or_a_synthesis(project):
    """forget removes the thread's text wherever the briefing reads it: the last task of the
    heartbeat (the briefing names it when no stored thread holds it) and the threads listed by
    a pre-compaction synthesis (kept for other work)."""
    task = "stream the quarterly billing export as CSV rows"
    assert hook("inject", prompt_payload(task, project=str(project)), project).returncode == 0
    assert cli("capture", "nightly backup of the postgres replica to S3", project=project).returncode == 0
    threads = cli_json("threads", project=project)
    tid = next(t["id"] for t in threads if "billing" in t["title"])
    store = ai.Store(ai.data_dir_of(str(project)))
    doc = ai.build_synthesis([("assistant", "Done: the export now streams its rows.")], store.read_digest(),
                             time.time())
    store.write_synthesis(doc, time.time())
    assert "billing" in ai.latest_synthesis(store)["text"] and "replica" in ai.latest_synthesis(store)["text"]
    assert cli("forget", tid, project=project).returncode == 0
    synth = ai.latest_synthesis(store)
    assert "billing" not in json.dumps(synth) and tid not in json.dumps(synth)
    assert "replica" in synth["text"]  # the other work stays
    brief = hook("start", start_payload(project=str(project)), project)
    assert brief.returncode == 0 and b"billing" not in brief.stdout and b"replica" in brief.stdout, brief.stdout
    assert "billing" not in json.dumps(store.heartbeat())


def test_forget_text_cuts_a_secret_out_of_everything_stored(project):
    """A secret the redaction missed (no pattern knows a passphrase of words) is cut out of
    every file of the data dir: records, the digest, rules, syntheses, a capture still
    journaled, the heartbeat and its task lists, the log and a quarantined record; the memory
    around it stays."""
    secret = "plumtree-garage-47-lantern"
    assert hook("inject", prompt_payload(f"log in to staging with {secret} and rerun the deploy",
                                         project=str(project)), project).returncode == 0
    assert cli("capture", f"staging passphrase is {secret} until Friday", project=project).returncode == 0
    assert cli("rules", "add", f"always use {secret} on staging", project=project).returncode == 0
    assert hook("capture", post_payload("TaskCreate", {"subject": f"Rerun the deploy with {secret}"},
                                        {"task": {"id": "1"}}, project=str(project)), project).returncode == 0
    store = ai.Store(ai.data_dir_of(str(project)))
    store.write_synthesis({"text": f"State: deploy with {secret}"}, time.time())
    store.inbox_append(ai.prepare_capture(f"retry with {secret}", "prompt"))
    store.log.error("capture failed", detail=f"x {secret}")
    bad = os.path.join(store.threads_dir, "t0000000000000bad.json")
    with open(bad, "w") as f:
        f.write(f'{{"title": "{secret}", ')  # corrupt: quarantined on the next load
    store.quarantine(bad, "test")
    data = pathlib.Path(store.dir)

    def holding():
        return sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file()
                      and secret.encode() in p.read_bytes())
    assert {"db/index.json", "heartbeat.json", "user_rules.json", "logs/ai_smartness.log"} <= set(holding())
    assert cli("forget", "--text", "plum", project=project).returncode == 2  # too short
    assert cli("forget", project=project).returncode == 2
    proc = cli("forget", "--text", secret, "--json", project=project)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["forgotten_text"] >= 4
    assert holding() == []
    found = cli_json("search", "staging passphrase", project=project)
    assert found and ai.FORGOTTEN_MARK in json.dumps(found)
    quoted = 'lamp"post-77-harbor'  # a log line holds it JSON-escaped
    store.log.error("odd", detail=quoted)
    assert cli("forget", "--text", quoted, project=project).returncode == 0
    assert b"lamp" not in (data / "logs" / "ai_smartness.log").read_bytes()


def test_capture_from_stdin_with_source_file_and_time(project):
    proc = cli("capture", "-", "--source", "file_read", "--file", "src/db.py", "--at", "2024-02-03T04:05:06+01:00",
               project=project, input="def connect(): return psycopg.connect(DSN)  # database pool")
    assert proc.returncode == 0, proc.stderr
    thread = cli_json("threads", "--status", "all", project=project)[0]
    assert thread["origin_type"] == "file_read"
    full = cli_json("thread", thread["id"], project=project)
    assert full["messages"][0]["file"] == "src/db.py"
    assert full["messages"][0]["ts"] == "2024-02-03T03:05:06Z"


def test_health_reports_metrics(filled):
    health = cli_json("health", project=filled)
    assert health["embedding_coverage"] == 1.0
    assert health["embedding_model"] == "fake-v1"
    assert 0 < health["continuation_rate"] <= 1
    assert health["daemon"]["running"] is False and health["daemon"]["served_by"] == "in-process"
    assert health["quarantined"] == []


def test_project_resolution_from_env_and_from_the_installed_script(project, tmp_path):
    env_proc = cli("capture", "kafka consumer lag notes", env={"CLAUDE_PROJECT_DIR": str(project)})
    assert env_proc.returncode == 0
    installed = project / ".ai" / "ai_smartness.py"
    installed.write_bytes(SCRIPT.read_bytes())
    proc = subprocess.run([sys.executable, str(installed), "threads", "--json"], capture_output=True, text=True,
                          cwd=str(tmp_path))
    assert proc.returncode == 0 and len(json.loads(proc.stdout)) == 1


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """An interpreter that cannot see numpy or sentence-transformers."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import numpy"], capture_output=True)
    assert probe.returncode != 0
    return python


def test_works_without_numpy_and_sentence_transformers(project, bare_python):
    env = {"AI_SMARTNESS_EMBEDDER": ""}
    for _, text in topics_data.interleaved():
        assert cli("capture", text, project=project, python=bare_python, env=env).returncode == 0
    health = cli_json("health", project=project, python=bare_python, env=env)
    assert health["embedding_model"] == "hash-v2" and health["embedding_coverage"] == 1.0
    assert any("fallback" in w for w in health["warnings"])
    hits = cli_json("search", "postgres migration", project=project, python=bare_python, env=env)
    assert "Postgres" in hits[0]["text"]
    roots = [t for t in cli_json("threads", project=project, python=bare_python, env=env) if not t["parent_id"]]
    assert len(roots) == 3
