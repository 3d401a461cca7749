"""Bad input never costs a traceback or a command: every CLI error is one line with the
documented exit code (F8), and a bad `--at`, inbox entry, thread, bridge or config value is
refused, quarantined or coerced with a log line while the command still works (F6)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import ai_smartness as ais
from conftest import ROOT, SCRIPT, cli, hook

TEXT = "the invoices importer keeps the old tool's dates"


def one_line_error(proc, code):
    """The process-level contract: the exit code, nothing on stdout, one line on stderr."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("\n"), proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr


def log_records(project, msg):
    path = project / ".ai" / "logs" / "ai_smartness.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["msg"] == msg]


def run_main(project, *argv):
    """The CLI in-process: main() with its exit code."""
    return ais.main(["--project", str(project), *argv])


def quarantined(project):
    return os.listdir(project / ".ai" / "db" / "quarantine")


# -- F8: one line, the documented exit code --

def _file(tmp_path, project):
    path = tmp_path / "a_file"
    path.write_text("x")
    return path


BAD_PROJECTS = [
    pytest.param(_file, 2, id="a-file"),
    pytest.param(lambda tmp_path, project: tmp_path / "nonexistent" / "deep" / "proj", 2, id="nonexistent"),
    pytest.param(lambda tmp_path, project: "/proc/1", 1, id="proc"),
    pytest.param(lambda tmp_path, project: "/sys/kernel", 1, id="sys"),
]


@pytest.mark.parametrize("make, code", BAD_PROJECTS)
def test_a_bad_project_is_one_line_and_creates_nothing(tmp_path, project, make, code):
    path = make(tmp_path, project)
    if str(path).startswith(("/proc/", "/sys/")) and not os.path.isdir(path):
        pytest.skip(f"{path} is absent on this machine")
    if os.path.isdir(os.path.join(path, ".ai")):
        pytest.skip(f"{path}/.ai exists on this machine")
    one_line_error(cli("status", project=path), code)
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("argv, code, says", [
    (["capture", "--at", "1e300", TEXT], 2, "--at must be a time"),
    (["capture", "--at", "nan", TEXT], 2, "--at must be a time"),
    (["capture", "--at", "-1e20", TEXT], 2, "--at must be a time"),  # a value, not an option
    (["capture", "--at", "10000-01-01", TEXT], 2, "--at must be a time"),
    (["capture", "--at", "yesterday", TEXT], 2, "--at must be a time"),
    (["rules", "remove"], 2, "needs the rule's number"),
    (["rules", "remove", "first"], 2, "needs the rule's number"),
    (["rules", "remove", "7"], 3, "not found: 7"),
    (["forget", "t_missing"], 3, "not found: t_missing"),
    (["thread", "t_missing"], 3, "not found: t_missing"),
    (["threads", "--limit", "many"], 2, "invalid count value"),
    (["threads", "--limit", "-1"], 2, "must be 1 or more"),
    (["search", "invoices", "--limit", "0"], 2, "must be 1 or more"),
    (["context", "invoices", "--budget", "-5"], 2, "must be 1 or more"),
    (["no-such-command"], 2, "invalid choice"),
])
def test_bad_input_is_one_line_with_its_exit_code(project, argv, code, says):
    assert says in one_line_error(cli(*argv, project=project), code)
    inbox = project / ".ai" / "inbox"
    assert not inbox.exists() or os.listdir(inbox) == []  # nothing journaled


def test_a_bad_at_is_refused_before_anything_is_journaled(project):
    """F6 (a): the entry used to be journaled first, then every command failed on it."""
    store = ais.Store(str(project / ".ai")).ensure()
    for bad in ("1e300", "nan", "inf", "-1e20", -5, 1e300, float("nan")):
        with pytest.raises(ais.UsageError):
            ais.prepare_capture(TEXT, at=bad)
    assert ais.prepare_capture(TEXT, at="2023-05-08T10:00:00Z")["ts"] == 1683540000.0
    assert ais.prepare_capture(TEXT, at="0")["ts"] == 0.0
    mem = ais.open_memory(project)
    with pytest.raises(ais.UsageError):
        mem.capture(TEXT, at="1e300")
    assert store.inbox_pending() == []
    assert mem.capture(TEXT, at="2023-05-08")["action"] == "NEW_THREAD"
    assert run_main(project, "status") == 0


def test_an_unexpected_error_is_one_line_and_its_traceback_is_logged(project, monkeypatch, capsys):
    def broken(cli, args):
        raise KeyError("boom")
    monkeypatch.setattr(ais, "do_status", broken)
    assert run_main(project, "status") == 1
    err = capsys.readouterr().err
    assert err == "ai_smartness: KeyError: 'boom'\n"
    assert "Traceback" in log_records(project, "command failed")[0]["error"]


def test_daemon_start_on_a_read_only_data_dir_is_one_line(project):
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("unshare or mount missing")
    assert cli("status", project=project).returncode == 0
    ai = project / ".ai"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode().strip()}")
    script = (f"mount --bind '{ai}' '{ai}' && mount -o remount,bind,ro '{ai}' && "
              f"exec '{sys.executable}' '{SCRIPT}' --project '{project}' daemon start")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    if "mount" in proc.stderr and proc.returncode == 32:
        pytest.skip(f"read-only bind mount refused: {proc.stderr.strip()}")
    assert proc.returncode in (1, 4), proc.stderr
    one_line_error(proc, proc.returncode)


# -- F6 (a): an old poisoned inbox entry is quarantined, the drain goes on --

@pytest.mark.parametrize("field, value", [
    ("ts", 1e300), ("ts", "2023-01-01"), ("ts", None), ("ts", -1e20), ("text", 42),
    ("id", "../escape"), ("origin", "nowhere"), ("source", ["prompt"]), ("file", 3),
])
def test_a_poisoned_inbox_entry_is_quarantined_and_the_drain_goes_on(project, field, value):
    store = ais.Store(str(project / ".ai")).ensure()
    good = ais.prepare_capture(TEXT)
    bad_name = store.inbox_append(ais.prepare_capture("a note about the quarterly report"))
    path = project / ".ai" / "inbox" / f"{bad_name}.json"
    entry = json.loads(path.read_text())
    entry[field] = value
    path.write_text(json.dumps(entry))
    store.inbox_append(good)
    assert run_main(project, "status") == 0  # its load drains the inbox
    assert store.inbox_pending() == []
    assert [n.split(".json")[0] for n in quarantined(project)] == [bad_name]
    mem = ais.open_memory(project)
    mem.ensure_loaded()
    assert [m["text"] for t in mem.threads.values() for m in t["messages"]] == [TEXT]
    assert log_records(project, "record quarantined")


def test_status_after_a_capture_with_a_bad_at_works(project):
    """The F6 (a) reproduction as real processes."""
    one_line_error(cli("capture", "--at", "1e300", TEXT, project=project), 2)
    proc = cli("status", "--json", project=project)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["inbox_pending"] == 0


# -- F6 (b): a malformed thread or bridge is quarantined at load and reported --

def good_thread(tid="t_good"):
    return {"schema": 1, "id": tid, "status": "active", "title": "invoices", "last_active": "2023-05-08T10:00:00Z",
            "messages": [{"id": "m1", "ts": "2023-05-08T10:00:00Z", "text": "invoices are imported"}]}


def _msg(**fields):
    thread = good_thread("t_bad")
    thread["messages"][0].update(fields)
    thread["messages"][0] = {k: v for k, v in thread["messages"][0].items() if v is not ...}
    return thread


BAD_THREADS = {
    "message-without-id": _msg(id=...),
    "message-id-not-text": _msg(id=7),
    "message-text-not-text": _msg(text={"a": 1}),
    "message-without-ts": _msg(ts=...),
    "message-ts-nan": _msg(ts="nan"),
    "message-ts-1e300": _msg(ts=1e300),
    "message-ts-garbage": _msg(ts="2023-99-99"),
    "message-session-a-list": _msg(session=["s"]),
    "message-file-a-number": _msg(file=3),
    "message-not-a-dict": dict(good_thread("t_bad"), messages=["hello"]),
    "last-active-garbage": dict(good_thread("t_bad"), last_active="soon"),
    "weight-not-a-number": dict(good_thread("t_bad"), weight="heavy"),
    "topics-not-a-list": dict(good_thread("t_bad"), topics="invoices"),
    "topics-not-text": dict(good_thread("t_bad"), topics=["invoices", 7]),
    "title-not-text": dict(good_thread("t_bad"), title=["x"]),
    "parent-id-a-list": dict(good_thread("t_bad"), parent_id=["t_good"]),
    "continued-in-a-path": dict(good_thread("t_bad"), continued_in="../t_good"),
    "nested-too-deep": "[" * 100000,
    "the-review-repro": {"schema": 1, "id": "t_bad", "status": "active", "messages": [{"no": 1}], "title": "x"},
}


@pytest.mark.parametrize("name", BAD_THREADS)
def test_a_malformed_thread_is_quarantined_and_commands_work(project, name, capsys):
    threads = project / ".ai" / "db" / "threads"
    ais.Store(str(project / ".ai")).ensure()
    (threads / "t_good.json").write_text(json.dumps(good_thread()))
    bad = BAD_THREADS[name]
    (threads / "t_bad.json").write_text(bad if isinstance(bad, str) else json.dumps(bad))
    assert run_main(project, "status") == 0
    assert quarantined(project)[0].startswith("t_bad.json.")
    for argv in (["export"], ["threads", "--status", "all"], ["search", "invoices"], ["context", "invoices"]):
        assert run_main(project, *argv) == 0, argv
    capsys.readouterr()
    assert run_main(project, "health", "--json") == 0
    health = json.loads(capsys.readouterr().out)
    assert health["threads"] == 1 and len(health["quarantined"]) == 1 and health["warnings"]


def test_a_thread_missing_optional_fields_is_kept(project):
    """Fields a writer always sets but an older record may lack start empty, not quarantined."""
    store = ais.Store(str(project / ".ai")).ensure()
    thread = good_thread()
    del thread["last_active"]
    (project / ".ai" / "db" / "threads" / "t_good.json").write_text(json.dumps(thread))
    assert [t["id"] for t in store.iter_threads()] == ["t_good"]
    assert quarantined(project) == []
    assert ais.ts_of(thread, "last_active") == 0.0


@pytest.mark.parametrize("change", [{"confidence": "high"}, {"confidence": None}, {"last_used": "later"},
                                    {"propagation_depth": "deep"}, {"source_id": 5}])
def test_a_malformed_bridge_is_quarantined(project, change):
    store = ais.Store(str(project / ".ai")).ensure()
    bridge = {"schema": 1, "id": "b_bad", "source_id": "t1", "target_id": "t2", "relation_type": "extends",
              "confidence": 0.5, "propagation_depth": 0, "last_used": "2023-05-08T10:00:00Z"}
    (project / ".ai" / "db" / "bridges" / "b_bad.json").write_text(json.dumps(dict(bridge, **change)))
    assert list(store.iter_bridges()) == []
    assert quarantined(project)[0].startswith("b_bad.json.")
    assert run_main(project, "bridges") == 0


def test_ts_of_reads_stored_times():
    assert ais.ts_of({"t": "2023-05-08T10:00:00Z"}, "t") == 1683540000.0
    assert ais.ts_of({}, "t") == 0.0
    assert ais.ts_of({"t": "nan"}, "t") == 0.0 and ais.ts_of({"t": 1e300}, "t") == 0.0


# -- F6 (c): mistyped config values are coerced with a log line --

def test_mistyped_config_is_coerced_with_one_log_line_per_key(project, capsys):
    ai = project / ".ai"
    ais.Store(str(ai)).ensure()
    (ai / "config.json").write_text(json.dumps({
        "thresholds": [], "inject_budget": "abc", "half_life_days": float("nan"), "language": "xx",
        "mode": 3, "guardcode": "yes", "bridge_cap": 10 ** 9, "briefing_budget": 400.0, "hook_budget_ms": True,
        "embedder": "gpt", "extra": {"kept": 1}}))
    cfg = ais.Store(str(ai)).config()
    d = ais.DEFAULT_CONFIG
    assert cfg["thresholds"] == d["thresholds"] and cfg["inject_budget"] == d["inject_budget"]
    assert cfg["half_life_days"] == d["half_life_days"] and cfg["language"] == "en" and cfg["mode"] == "normal"
    assert cfg["guardcode"] is True and cfg["hook_budget_ms"] == d["hook_budget_ms"] and cfg["embedder"] == "auto"
    assert cfg["bridge_cap"] == 1000 and cfg["briefing_budget"] == 400 and type(cfg["briefing_budget"]) is int
    assert cfg["extra"] == {"kept": 1}
    keys = sorted(r["key"] for r in log_records(project, "config coerced"))
    assert keys == sorted(["thresholds", "inject_budget", "half_life_days", "language", "mode", "guardcode",
                           "bridge_cap", "hook_budget_ms", "embedder"])
    for argv in (["context", "invoices"], ["capture", TEXT], ["status"], ["health"]):
        assert run_main(project, *argv) == 0, argv
    assert "Traceback" not in capsys.readouterr().err


def test_config_values_in_a_dict_are_coerced_one_by_one(project):
    ai = project / ".ai"
    ais.Store(str(ai)).ensure()
    (ai / "config.json").write_text(json.dumps({"thresholds": {"continue": "0.4", "bridge": 2.5, "reactivate": 0.6}}))
    th = ais.Store(str(ai)).config()["thresholds"]
    assert th["continue"] == 0.35 and th["bridge"] == 1.0 and th["reactivate"] == 0.6
    assert th["fork_min_messages"] == 3
    assert sorted(r["key"] for r in log_records(project, "config coerced")) == ["thresholds.bridge",
                                                                                  "thresholds.continue"]


def test_a_config_that_is_not_an_object_falls_back_to_defaults(project):
    ai = project / ".ai"
    ais.Store(str(ai)).ensure()
    (ai / "config.json").write_text("[1, 2]")
    assert ais.Store(str(ai)).config() == ais.DEFAULT_CONFIG
    assert log_records(project, "config coerced")


def test_the_hook_runs_with_a_mistyped_config(project):
    ai = project / ".ai"
    ais.Store(str(ai)).ensure()
    (ai / "config.json").write_text(json.dumps({"thresholds": [], "inject_budget": "abc", "hook_budget_ms": "x"}))
    proc = hook("inject", {"session_id": "s", "prompt": "how are the invoices imported?"}, project)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr
    assert not log_records(project, "hook failed")
    assert log_records(project, "config coerced")
    mem = ais.open_memory(project)
    mem.drain()
    assert [m["text"] for t in mem.threads.values() for m in t["messages"]] == ["how are the invoices imported?"]


# -- health --

def test_health_reports_stale_temp_files_and_dropped_captures(project, monkeypatch, capsys):
    store = ais.Store(str(project / ".ai")).ensure()
    monkeypatch.setattr(ais.Store, "stale_temp_files", lambda self: ["a.json.tmp1", "b.json.tmp2"], raising=False)
    store.log.error("capture dropped", error="ENOSPC")
    store.log.error("capture dropped", error="EROFS")
    store.log.info("capture dropped later")  # not this message
    assert run_main(project, "health", "--json") == 0
    health = json.loads(capsys.readouterr().out)
    assert health["stale_temp_files"] == 2 and health["dropped_captures"] == 2
    assert any("temp files" in w for w in health["warnings"])
    assert any("could not be journaled" in w for w in health["warnings"])
    assert run_main(project, "health") == 0
    out = capsys.readouterr().out
    assert "Stale temp files: 2" in out and "Dropped captures: 2" in out


# -- one registration per command --

def test_every_command_is_registered_once_with_its_function():
    import argparse
    parser = ais.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert not hasattr(ais, "COMMANDS")
    for name, p in sub.choices.items():
        if name == "hook":
            continue
        func = p.get_default("func")
        assert func is getattr(ais, f"do_{name}"), name
        has_json = any("--json" in a.option_strings for a in p._actions)
        assert has_json == (name not in ("export", "mcp")), name  # they speak JSON on stdout already


def test_the_documented_exit_codes_hold():
    """README, the module docstring and --help give the same codes, and the error classes match."""
    codes = "0 ok, 1 internal error, 2 usage error, 3 not found, 4 daemon unavailable"
    assert codes in (ROOT / "README.md").read_text().replace("\n", " ")
    assert codes in cli("--help").stdout.replace("\n", " ")
    assert (ais.AiError.exit_code, ais.UsageError.exit_code, ais.NotFound.exit_code,
            ais.DaemonError.exit_code) == (1, 2, 3, 4)


def test_the_llm_switch_is_off_by_default():
    assert ais.DEFAULT_CONFIG["llm"]["backend"] == "off"
    result = ais.decide([], [], ais.DEFAULT_CONFIG)
    assert "llm_used" not in result


def test_the_daemon_starts_and_serves_over_a_malformed_thread_and_a_mistyped_config(project):
    """F6 (b) and (c) for the daemon: every start used to die in its warm-up."""
    ai = project / ".ai"
    ais.Store(str(ai)).ensure()
    (ai / "db" / "threads" / "t_good.json").write_text(json.dumps(good_thread()))
    (ai / "db" / "threads" / "t_bad.json").write_text(json.dumps(BAD_THREADS["the-review-repro"]))
    (ai / "config.json").write_text(json.dumps({"thresholds": [], "inject_budget": "abc"}))
    proc = cli("daemon", "start", project=project)
    assert proc.returncode == 0, proc.stderr
    health = json.loads(cli("health", "--json", project=project).stdout)
    assert health["daemon"]["running"] and health["daemon"]["served_by"] == "daemon"
    assert health["threads"] == 1 and len(health["quarantined"]) == 1
    ctx = json.loads(cli("context", "how are invoices imported", "--json", project=project).stdout)
    assert ctx["served_by"] == "daemon"


@pytest.mark.parametrize("state", [{"generation": "x"}, {"generation": 2, "changes": [["a", ["t1"]]]},
                                   {"generation": 2, "changes": "abc"}])
def test_a_malformed_generation_state_is_quarantined_and_commands_work(project, state):
    ais.open_memory(project).capture(TEXT)
    (project / ".ai" / "db" / "state.json").write_text(json.dumps(state))
    for argv in (["capture", "another note about the invoices and their dates"], ["status"], ["context", "invoices"]):
        assert run_main(project, *argv) == 0, argv
    assert quarantined(project)[0].startswith("state.json.")
    assert ais.Store(str(project / ".ai")).state()["generation"] >= 1


@pytest.mark.parametrize("name, content, argv", [
    ("config.json", {"thresholds": [], "inject_budget": "abc"}, ["context", "invoices"]),
    ("db/threads/t_bad.json", BAD_THREADS["the-review-repro"], ["status"]),
    ("db/threads/t_bad.json", BAD_THREADS["message-without-id"], ["export"]),
])
def test_the_review_reproductions_as_real_processes(project, name, content, argv):
    """F8's cases that used to print a traceback now work, with nothing on stderr."""
    ais.Store(str(project / ".ai")).ensure()
    (project / ".ai" / "db" / "threads" / "t_good.json").write_text(json.dumps(good_thread()))
    (project / ".ai" / name).write_text(json.dumps(content))
    proc = cli(*argv, project=project)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout, proc.stderr
