"""Signals a turn leaves beside its text (issue 17): the files changed in git when it ends (a
real temp repository; a hung git stand-in for the time limit), the time markers of every
message (local time zone, a retrieval signal for "the fix from Friday evening"), and the work
an answer says is resolved (en, fr, es; negations, questions and conditionals are not), shown by
recall, the briefing, `threads` and `thread ID`, and the optional Stop-hook reminder."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import ai_smartness as ai
from conftest import cli, cli_json
from support import SESSION, check_contract, failures, installed_hook, shared_path, start_payload, stop_payload


# ---- resolved work ----

SOLVED = [
    "The login bug is fixed.",
    "Fixed the crash in the exporter: a single join replaces the N+1 queries.",
    "Done. The tests pass now and the timeout issue is resolved.",
    "I fixed the bug that did not handle empty lists.",
    "Le bug de connexion est corrigé.",
    "Problème résolu : le cache expirait trop tôt.",
    "El error de inicio de sesión está arreglado.",
    "Ya está resuelto: faltaba un índice.",
]
NOT_SOLVED = [
    "The login bug is not fixed yet.",
    "It is not yet fixed.",
    "It isn't fixed.",
    "Le bug n'est pas encore corrigé.",
    "Le problème n'est toujours pas résolu.",
    "Todavía no está resuelto.",
    "El problema sigue sin resolver.",
    "Is it fixed?",
    "¿Está resuelto?",
    "Est-ce corrigé ?",
    "If the tests pass, the bug is fixed.",
    "This should be fixed by the next commit.",
    "It will be fixed tomorrow.",
    "Si el test pasa, quedará resuelto.",
    "Une fois corrigé, on déploie.",
    "Use a fixed-width font and a fixed size buffer.",
    "The bug remains to be fixed.",
]


@pytest.mark.parametrize("text", SOLVED)
def test_an_answer_that_says_a_problem_is_solved_gives_its_sentence(text):
    found = ai.resolution_of("Some context first.\n" + text + "\nNext: nothing.")
    assert found.startswith(text) or text.endswith(found)  # from its own sentence on, not the context before


@pytest.mark.parametrize("text", NOT_SOLVED)
def test_negations_questions_conditionals_and_adjectives_are_no_outcome(text):
    assert ai.resolution_of(text) == ""


def test_a_short_outcome_comes_with_what_follows_and_a_lead_in_is_none():
    assert ai.resolution_of("Fixed! 🎉\nThe popup now closes on Escape.") == "Fixed! The popup now closes on Escape."
    assert ai.resolution_of("✅ **Fixed carousel restart bug** in the widget") == "Fixed carousel restart bug in the widget"
    for text in ("How it works now:\n- the cache", "Let me summarise what was fixed:", "Voy a dejarlo arreglado."):
        assert ai.resolution_of(text) == "", text
    assert ai.resolution_of("You're right, it's fixed now: the token refresh ran twice.") == \
        "It's fixed now: the token refresh ran twice."  # what was fixed, not the agreement before it


def test_a_real_answer_that_reports_a_fix_is_recognised():
    path = shared_path("fixtures", "claude-code", "transcripts", "cc-v2.1.32_chicken-tracker_6e6cddcb_tail.jsonl")
    found = [ai.resolution_of(t) for role, t in ai.transcript_texts(str(path)) if role == "assistant"]
    assert any(f.startswith("Fixed `type") for f in found)


def test_one_notion_of_resolved_commands_fixed_and_answers():
    thread = {"messages": [
        {"id": "m1", "ts": "2026-11-20T10:00:00Z", "text": "$ pytest [failed]", "command": "pytest", "fixed_by": "m2",
         "fixed_at": "2026-11-20T10:05:00Z"},
        {"id": "m3", "ts": "2026-11-20T10:06:00Z", "source": "assistant", "text": "x", "resolved": "The parser bug is fixed."},
        {"id": "m4", "ts": "2026-11-20T10:07:00Z", "source": "assistant", "text": "y", "resolved": 5},  # damaged: skipped
    ]}
    # pytest passed when run again with nothing changed: a retry, not something the work resolved.
    assert [(o["kind"], o["text"], o["at"]) for o in ai.thread_outcomes(thread)] == [
        ("answer", "The parser bug is fixed.", "2026-11-20T10:06:00Z")]
    assert ai.signal_lines(thread, "en")[0] == "  Resolved: The parser bug is fixed (20 November 2026)."
    thread["messages"][0]["fixed_files"] = ["src/parser.py", 7]  # a damaged entry is skipped
    outcomes = ai.thread_outcomes(thread)
    assert [(o["kind"], o["text"], o["at"]) for o in outcomes] == [
        ("command", "pytest", "2026-11-20T10:05:00Z"), ("answer", "The parser bug is fixed.", "2026-11-20T10:06:00Z")]
    assert outcomes[0]["files"] == ["src/parser.py"]
    assert ai.signal_lines(thread, "en")[0] == \
        "  Resolved: pytest (20 November 2026, after changing src/parser.py); The parser bug is fixed (20 November 2026)."
    assert ai.signal_lines(thread, "fr")[0].startswith(
        "  Résolu : pytest (20 novembre 2026, après modification de src/parser.py);")


# ---- time markers ----

@pytest.fixture
def tz(monkeypatch):
    """Set the process's local time zone."""
    def set_zone(name):
        monkeypatch.setenv("TZ", name)
        time.tzset()
    yield set_zone
    monkeypatch.delenv("TZ", raising=False)
    time.tzset()


@pytest.mark.parametrize("hour,part", [(0, "night"), (4, "night"), (5, "morning"), (11, "morning"), (12, "afternoon"),
                                       (17, "afternoon"), (18, "evening"), (21, "evening"), (22, "night"), (23, "night")])
def test_parts_of_the_day_have_stated_bounds(tz, hour, part):
    tz("UTC")
    assert ai.time_markers(ai.parse_time(f"2026-11-20T{hour:02d}:30:00Z")) == (part, "friday")


def test_markers_are_in_the_local_time_zone(tz):
    tz("America/New_York")
    # 01:30 UTC on Saturday is 20:30 on Friday in New York.
    assert ai.time_markers(ai.parse_time("2026-11-21T01:30:00Z")) == ("evening", "friday")
    tz("Asia/Tokyo")
    assert ai.time_markers(ai.parse_time("2026-11-21T01:30:00Z")) == ("morning", "saturday")


@pytest.mark.parametrize("query,days,parts", [
    ("the fix from Friday evening", {"friday"}, {"evening"}),
    ("le correctif de vendredi soir", {"friday"}, {"evening"}),
    ("el arreglo del viernes por la tarde", {"friday"}, {"afternoon"}),
    ("what broke on Tuesday night", {"tuesday"}, {"night"}),
    ("mercredi après-midi", {"wednesday"}, {"afternoon"}),
    ("game night with the team", set(), set()),  # not a time
    ("mañana hacemos el despliegue", set(), set()),  # "tomorrow", not "morning"
    ("the MIÉRCOLES build and the sábado deploy", {"wednesday", "saturday"}, set()),
    ("la matinée de dimanche, puis les soirées et les nuits", {"sunday"}, {"morning", "evening", "night"}),
    ("falló de madrugada, no anoche ni esta noche", set(), {"night", "evening"}),
    ("the overnight job and the Mondays standup this morning", {"monday"}, {"night", "morning"}),
    ("why is the exporter slow", set(), set()),
])
def test_queries_name_days_and_parts_of_the_day(query, days, parts):
    assert ai.query_times(query) == (days, parts)


def test_every_message_carries_its_markers_and_the_query_matches_them(tmp_path, tz):
    tz("UTC")
    mem = ai.open_memory(str(tmp_path))
    # Two fixes of the same kind, two days apart: only the time tells them apart.
    mem.capture("Fixed the flaky upload test: the retry now waits for the bucket", source="assistant",
                at="2026-11-18T09:15:00Z")  # Wednesday morning
    mem.capture("Fixed the flaky upload test: the retry now waits for the queue", source="assistant",
                at="2026-11-20T19:40:00Z")  # Friday evening
    mem.flush()
    msgs = [m for t in mem.threads.values() for m in t["messages"]]
    assert {(m["time_of_day"], m["day_of_week"]) for m in msgs} == {("morning", "wednesday"), ("evening", "friday")}
    for query in ("the upload fix from Friday evening", "le fix de upload de vendredi soir",
                  "el fix de upload del viernes por la noche"):
        assert "queue" in mem.search(query, 1)[0]["text"], query
    assert "bucket" in mem.search("the upload fix from Wednesday morning", 1)[0]["text"]
    text = mem.recall("upload fix")
    assert "20 November 2026, Friday evening]" in text and "18 November 2026, Wednesday morning]" in text


def test_old_records_without_markers_derive_them_from_their_time(tmp_path, tz):
    tz("UTC")
    mem = ai.open_memory(str(tmp_path))
    mem.capture("Rotated the signing keys of the staging cluster", source="prompt", at="2026-11-20T19:40:00Z")
    mem.capture("Rotated the signing keys of the production cluster", source="prompt", at="2026-11-17T08:00:00Z")
    mem.flush()
    for path in (tmp_path / ".ai" / "db" / "threads").glob("*.json"):
        doc = json.loads(path.read_text())
        for m in doc["messages"]:
            m.pop("time_of_day"), m.pop("day_of_week")
        path.write_text(json.dumps(doc))
    old = ai.open_memory(str(tmp_path))
    assert "staging" in old.search("signing keys rotated Friday evening", 1)[0]["text"]
    assert "Friday evening" in old.recall("signing keys")


# ---- files changed in git ----

def git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(proj):
    """The test project as a git repository with one commit, then: a staged change, an unstaged
    change, a new untracked file, a binary changed, an ignored file, a new untracked binary."""
    git(proj, "init", "-q")
    git(proj, "config", "user.email", "t@example.com")
    git(proj, "config", "user.name", "t")
    (proj / ".gitignore").write_text("build.log\n")
    (proj / "src").mkdir()
    (proj / "src" / "app.py").write_text("print('a')\n")
    (proj / "src" / "util.py").write_text("X = 1\n")
    (proj / "logo.png").write_bytes(b"\x89PNG\x00\x01")
    git(proj, "add", ".gitignore", "src", "logo.png")
    git(proj, "commit", "-qm", "init")
    (proj / "src" / "app.py").write_text("print('b')\n")
    git(proj, "add", "src/app.py")  # staged
    (proj / "src" / "app.py").write_text("print('c')\n")  # and unstaged too: named once
    (proj / "src" / "util.py").write_text("X = 2\n")  # unstaged
    (proj / "NOTES.md").write_text("new notes\n")  # untracked
    (proj / "logo.png").write_bytes(b"\x89PNG\x00\x02")  # binary
    (proj / "build.log").write_text("ignored\n")
    (proj / "model.bin").write_bytes(b"\x00\x01\x02")  # untracked binary
    return proj


def test_git_changes_lists_staged_unstaged_and_new_text_files_once(repo):
    assert sorted(ai.git_changes(str(repo))) == ["NOTES.md", "src/app.py", "src/util.py"]


def test_git_changes_of_a_subfolder_project_are_relative_to_it(repo):
    assert ai.git_changes(str(repo / "src")) == ["app.py", "util.py"]


def test_a_renamed_file_is_named_by_its_new_name(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "old_name.py").write_text("def f():\n    return 1\n" * 5)
    git(repo, "add", ".")
    git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "init")
    git(repo, "mv", "old_name.py", "new_name.py")
    assert ai.git_changes(str(repo)) == ["new_name.py"]


def test_no_repository_no_changes(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.py").write_text("x = 1\n")
    assert ai.git_changes(str(folder)) == []  # tmp_path is in no repository


def test_the_stop_hook_records_the_changed_files_with_its_thread(repo):
    out = installed_hook("stop", stop_payload("The CSV export is fixed: rows are now streamed in batches.",
                                              project=repo), repo)
    assert out.returncode == 0 and out.stdout == b""
    mem = ai.open_memory(str(repo))
    mem.flush()
    (thread,) = mem.threads.values()
    (msg,) = thread["messages"]
    assert sorted(msg["changed"]) == ["NOTES.md", "src/app.py", "src/util.py"]
    assert msg["resolved"] == "The CSV export is fixed: rows are now streamed in batches."
    assert ai.thread_changed(thread)[:3] and "Changed in git: " in mem.recall("CSV export")
    assert not failures(repo)


def test_a_hung_git_is_killed_at_the_limit_and_the_answer_still_stored(proj, tmp_path):
    """A git stand-in that never answers: the hook kills it (its whole process group) at the
    limit, exits 0 and stores the answer without changed files."""
    git(proj, "init", "-q")  # a repository, asked through the stand-in below
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    pids = tmp_path / "git.pids"
    (stand_in / "git").write_text(f"#!/bin/sh\necho $$ >> {pids}\nsleep 600 &\necho $! >> {pids}\nwait\n")
    (stand_in / "git").chmod(0o755)
    env = {"PATH": f"{stand_in}:{os.environ['PATH']}"}
    proc = installed_hook("stop", stop_payload("The deploy script now retries twice.", project=proj), proj,
                          env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout == b""
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2  # the stand-in was asked once, then the limit ended every git call

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return Path(f"/proc/{pid}/status").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()
    assert not any(alive(pid) for pid in started)  # no orphan left running
    mem = ai.open_memory(str(proj))
    mem.flush()
    (msg,) = [m for t in mem.threads.values() for m in t["messages"]]
    assert msg["text"] == "The deploy script now retries twice." and "changed" not in msg


# ---- the views: threads, thread ID, briefing (the must-show) ----

def test_threads_shows_changed_files_time_markers_and_resolved_outcomes(repo, tz):
    tz("UTC")  # the processes below inherit it
    cli("capture", "--source", "prompt", "--at", "2026-11-20T19:30:00Z",
        "The CSV export times out on large tables, please fix it", project=repo)
    installed_hook("stop", stop_payload("Le bug de l'export CSV est corrigé : les lignes sont envoyées par lots.",
                                        project=repo), repo)
    text = cli("threads", project=repo).stdout
    first, *rest = text.splitlines()
    assert first.endswith(")") and any(day in first for day in ("Monday", "Tuesday", "Wednesday", "Thursday",
                                                                 "Friday", "Saturday", "Sunday"))
    assert any(line.strip().startswith("Resolved: Le bug de l'export CSV est corrigé") for line in rest), text
    assert any(line.strip().startswith("Changed in git: ") and "src/app.py" in line for line in rest), text
    (row,) = cli_json("threads", project=repo)
    assert row["day_of_week"] in ai.WEEKDAYS and row["time_of_day"] in ("morning", "afternoon", "evening", "night")
    assert row["resolved"][0]["kind"] == "answer" and row["resolved"][0]["at"]
    assert sorted(row["changed"]) == ["NOTES.md", "src/app.py", "src/util.py"]
    one = cli_json("thread", row["id"], project=repo)
    assert one["resolved"] == row["resolved"] and one["changed"] == row["changed"]
    assert all(m["time_of_day"] and m["day_of_week"] for m in one["messages"])
    view = cli("thread", row["id"], project=repo).stdout
    assert "Resolved: " in view and "Changed in git: " in view
    assert "20 November 2026, Friday evening] The CSV export times out" in view


def test_the_briefing_names_the_changed_files_and_what_was_resolved(repo):
    installed_hook("stop", stop_payload("Fixed the CSV export timeout: rows are streamed in batches of 500.",
                                        project=repo), repo)
    ai.open_memory(str(repo)).flush()
    out = installed_hook("start", start_payload(project=repo), repo).stdout.decode()
    text = check_contract(out, "SessionStart")["hookSpecificOutput"]["additionalContext"]
    assert "Resolved: Fixed the CSV export timeout" in text
    assert "Changed in git: " in text and "src/app.py" in text


# ---- the optional Stop-hook reminder ----

def set_reminder(project, on):
    path = project / ".ai" / "config.json"
    cfg = json.loads(path.read_text())
    cfg["decision_reminder"] = on
    path.write_text(json.dumps(cfg))


def test_the_reminder_is_off_by_default(proj):
    assert installed_hook("stop", stop_payload("The login bug is fixed."), proj).stdout == b""


def test_the_reminder_asks_once_for_a_decision_record_after_a_fix(proj):
    set_reminder(proj, True)
    out = installed_hook("stop", stop_payload("The login bug is fixed: the session cookie was not renewed."), proj)
    doc = check_contract(out.stdout.decode(), "Stop")
    assert doc["decision"] == "block" and "Decision:" in doc["reason"]
    # The agent's answer to it comes with stop_hook_active: never a second block.
    again = installed_hook("stop", stop_payload("Decision: renew the cookie on every request; it is fixed.",
                                                active=True), proj)
    assert again.stdout == b""
    for text in ("The login bug is not fixed yet.", "Is the login bug fixed?", "I updated the README."):
        assert installed_hook("stop", stop_payload(text), proj).stdout == b"", text
    assert not failures(proj)


def test_a_real_stop_payload_is_captured_with_its_markers(proj):
    payload = json.loads(shared_path("fixtures", "claude-code", "hook-payloads-observed", "Stop.json").read_text())
    payload["cwd"] = str(proj)
    assert installed_hook("stop", payload, proj).stdout == b""
    mem = ai.open_memory(str(proj))
    mem.flush()
    (msg,) = [m for t in mem.threads.values() for m in t["messages"]]
    assert msg["source"] == "assistant" and msg["time_of_day"] and msg["day_of_week"] and "resolved" not in msg
    assert msg["turn"] == payload["prompt_id"] and SESSION != msg["session"]
