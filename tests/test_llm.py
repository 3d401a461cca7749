"""The LLM layer (section 5, LLM backends): each backend over HTTP against the stand-in, the
faults that must fall back (None, counted, logged), the ledger and its caps, redaction before
sending, and the anti-loop guards. The real `claude` CLI as a backend: test_e2e_llm.py."""
import json
import os
import subprocess
import threading

import pytest

import ai_smartness as ai
from fake_anthropic import (LLM_MARKER, FakeAnthropic, http_error, huge, malformed_body, overloaded,
                            request_text, slow)
from support import log_records, wait_for

SECRET = "sk-ant-api03-" + "Q7x" * 30


def make_llm(tmp_path, backend="anthropic", **llm):
    store = ai.Store(str(tmp_path / ".ai")).ensure()
    return ai.LLM(store, {"llm": dict({"backend": backend}, **llm)})


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "dummy-key")


def failed_calls(tmp_path):
    return [r for r in log_records(tmp_path) if r.get("msg") == "llm call failed: the heuristics answer"]


def test_the_marker_matches_the_stand_in():
    assert ai.LLM_PROMPT_MARKER == LLM_MARKER


def test_off_by_default_sends_nothing(tmp_path):
    llm = ai.LLM(ai.Store(str(tmp_path / ".ai")).ensure(), ai.DEFAULT_CONFIG)
    assert ai.DEFAULT_CONFIG["llm"]["backend"] == "off"
    assert not llm.enabled and not llm.available("titles")
    assert llm.ask_json("titles", "s", "u") is None
    llm.note_captures(10)
    assert not (tmp_path / ".ai" / "llm_usage.json").exists()


def test_anthropic_answer_is_parsed_redacted_and_counted(tmp_path, key):
    with FakeAnthropic(llm=['Here you go:\n```json\n{"title": "JWT rotation", "topics": ["jwt"]}\n```']) as api:
        llm = make_llm(tmp_path, base_url=api.url)
        assert llm.enabled and llm.available("titles")
        out = llm.ask_json("titles", "Title these threads. key=" + SECRET, "thread 1: " + SECRET, max_tokens=300)
        (body,) = api.bodies("llm")
        headers = [r.headers for r in api.requests if r.kind == "llm"][0]
    assert out == {"title": "JWT rotation", "topics": ["jwt"]}
    sent = json.dumps(body)
    assert SECRET not in sent and "[REDACTED" in sent
    assert body["model"] == "claude-haiku-4-5" and body["max_tokens"] == 300
    assert request_text(body).startswith(LLM_MARKER)
    assert headers.get("x-api-key") == "dummy-key" and headers.get("anthropic-version")
    report = llm.report()
    assert report["today"]["calls"] == 1 and report["today"]["failures"] == 0
    assert report["today"]["tokens"] > 0 and report["purposes"]["titles"]["calls"] == 1
    assert report["last_call"]["ok"] and report["last_error"] is None
    assert report["left"]["calls"] == ai.DEFAULT_CONFIG["llm"]["max_calls_per_day"] - 1


def test_openai_compatible_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_LLM_KEY", "local-key")
    with FakeAnthropic(llm=['[{"id": "t1", "title": "Auth"}]']) as api:
        llm = make_llm(tmp_path, "openai-compatible", base_url=api.url + "/v1", model="qwen2.5-coder",
                       api_key_env="LOCAL_LLM_KEY")
        assert llm.enabled
        assert llm.ask_json("titles", "sys", "user " + SECRET) == [{"id": "t1", "title": "Auth"}]
        (body,) = api.bodies("chat")
        (rec,) = [r for r in api.requests if r.kind == "chat"]
    assert body["model"] == "qwen2.5-coder" and [m["role"] for m in body["messages"]] == ["system", "user"]
    assert SECRET not in json.dumps(body) and rec.headers.get("authorization") == "Bearer local-key"
    assert llm.report()["today"]["tokens"] > 0


def test_openai_compatible_faults_fall_back(tmp_path):
    with FakeAnthropic(llm=[http_error(500), "no json"]) as api:
        llm = make_llm(tmp_path, "openai-compatible", base_url=api.url + "/v1", model="m", failure_pause_seconds=0)
        assert llm.ask_json("titles", "s", "u") is None and llm.ask_json("titles", "s", "u") is None
    assert [e["error"] for e in failed_calls(tmp_path)] == ["HTTP 500 api_error", "no JSON object or array in the answer"]


def test_what_is_sent_is_cut_after_redaction(tmp_path, key):
    with FakeAnthropic(llm=['{"ok": 1}']) as api:
        llm = make_llm(tmp_path, base_url=api.url)
        assert llm.ask_json("synthesis", "s" * 50000, SECRET + " " + "word " * 50000) == {"ok": 1}
        (body,) = api.bodies("llm")
    user = body["messages"][0]["content"]
    assert len(user) <= len(LLM_MARKER) + 1 + ai.LLM_MAX_USER_CHARS and SECRET not in user
    assert len(body["system"]) <= ai.LLM_MAX_SYSTEM_CHARS + 1 + len(ai.LLM_JSON_ONLY)


def test_a_backend_without_what_it_needs_is_not_enabled(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert "ANTHROPIC_API_KEY" in make_llm(tmp_path).problem
    assert not make_llm(tmp_path, "openai-compatible").enabled  # no base_url, no model
    llm = make_llm(tmp_path, "claude-cli", cli_path="claude")  # not absolute
    assert not llm.enabled and "cli_path" in llm.problem
    assert make_llm(tmp_path, "nonsense").backend == "off"


@pytest.mark.parametrize("fault, error", [
    (http_error(429), "HTTP 429 rate_limit_error"), (http_error(500), "HTTP 500 api_error"),
    (overloaded(), "HTTP 529 overloaded_error"), (malformed_body(), "not a JSON object"),
    ("Sure! {\"title\": \"unterminated", "no JSON"), (huge(ai.LLM_MAX_ANSWER_BYTES + 10), "bytes"),
    (slow(3.0, '{"late": true}'), "timed out"),
])
def test_faults_fall_back_counted_and_logged(tmp_path, key, fault, error):
    with FakeAnthropic(llm=[fault]) as api:
        llm = make_llm(tmp_path, base_url=api.url, timeout_seconds=1.0)
        assert llm.ask_json("decide", "sys", "user") is None
    report = llm.report()
    assert report["today"]["calls"] == 1 and report["today"]["failures"] == 1
    assert error in report["last_error"]["error"], report["last_error"]
    (line,) = failed_calls(tmp_path)
    assert line["purpose"] == "decide" and error in line["error"]


def test_unreachable_backend_falls_back(tmp_path, key):
    with FakeAnthropic() as api:
        url = api.url
    llm = make_llm(tmp_path, base_url=url)
    assert llm.ask_json("titles", "s", "u") is None
    assert llm.report()["today"]["failures"] == 1


def test_daily_call_cap_makes_exactly_n_calls(tmp_path, key):
    with FakeAnthropic(llm=lambda body: '{"ok": 1}') as api:
        llm = make_llm(tmp_path, base_url=api.url, max_calls_per_day=3, max_calls_per_capture=0)
        answers = [llm.ask_json("titles", "s", "u") for _ in range(5)]
        assert len(api.bodies("llm")) == 3
    assert answers == [{"ok": 1}] * 3 + [None] * 2
    report = llm.report()
    assert report["capped"] == "max_calls_per_day" and report["left"]["calls"] == 0
    assert not llm.available("titles")
    capped = [r for r in log_records(tmp_path) if r.get("msg", "").startswith("llm cap reached")]
    assert len(capped) == 1  # logged once, not once per refused call


def test_daily_token_cap(tmp_path, key):
    with FakeAnthropic(llm=lambda body: '{"ok": 1}') as api:
        llm = make_llm(tmp_path, base_url=api.url, max_tokens_per_day=20, max_calls_per_capture=0)
        assert llm.ask_json("titles", "s", "u " * 100) == {"ok": 1}  # the call that passes the cap
        assert llm.ask_json("titles", "s", "u") is None
        assert len(api.bodies("llm")) == 1
    assert llm.report()["capped"] == "max_tokens_per_day"


def test_captures_earn_calls(tmp_path, key):
    with FakeAnthropic(llm=lambda body: '{"ok": 1}') as api:
        llm = make_llm(tmp_path, base_url=api.url, max_calls_per_capture=0.2)
        assert [llm.ask_json("titles", "s", "u") for _ in range(ai.LLM_CALL_BURST + 1)][-1] is None
        assert llm.report()["capped"] == "max_calls_per_capture"
        assert llm.ask_json("synthesis", "s", "u") == {"ok": 1}  # not paid for by captures
        llm.note_captures(10)  # two more calls earned
        assert [llm.ask_json("titles", "s", "u") for _ in range(3)] == [{"ok": 1}, {"ok": 1}, None]
        assert len(api.bodies("llm")) == ai.LLM_CALL_BURST + 3
    assert llm.report()["today"]["captures"] == 10


def test_concurrent_callers_share_the_cap(tmp_path, key):
    with FakeAnthropic(llm=lambda body: '{"ok": 1}') as api:
        llms = [make_llm(tmp_path, base_url=api.url, max_calls_per_day=5, max_calls_per_capture=0)
                for _ in range(4)]
        threads = [threading.Thread(target=lambda m=m: [m.ask_json("bridge", "s", "u") for _ in range(4)])
                   for m in llms]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(api.bodies("llm")) == 5


def test_ledger_keeps_days_and_survives_a_corrupt_file(tmp_path, key):
    llm = make_llm(tmp_path, base_url="http://127.0.0.1:9")
    usage = tmp_path / ".ai" / "llm_usage.json"
    days = {"2020-01-%02d" % d: {"calls": 1} for d in range(1, 30)}
    usage.write_text(json.dumps({"days": days}))
    llm.ask_json("titles", "s", "u")
    assert len(json.loads(usage.read_text())["days"]) == ai.LLM_LEDGER_DAYS
    usage.write_text("{not json")
    assert llm.available("titles")  # quarantined, started over
    assert llm.ask_json("titles", "s", "u") is None and llm.report()["today"]["calls"] == 1


def test_a_failing_backend_is_paused_longer_each_time(tmp_path, key, monkeypatch):
    clock = [1_800_000_000.0]
    monkeypatch.setattr(ai.time, "time", lambda: clock[0])
    with FakeAnthropic(llm=[http_error(429), http_error(429), "not json", '{"ok": 1}']) as api:
        llm = make_llm(tmp_path, base_url=api.url, failure_pause_seconds=30, max_calls_per_capture=0)
        assert llm.ask_json("titles", "s", "u") is None  # 429: paused 30 s
        assert not llm.available("titles") and llm.ask_json("titles", "s", "u") is None
        assert llm.report()["capped"] == "paused" and llm.report()["paused_until"]
        clock[0] += 31
        assert llm.ask_json("titles", "s", "u") is None  # 429 again: paused 60 s
        clock[0] += 31
        assert not llm.available("titles")
        clock[0] += 30
        assert llm.ask_json("titles", "s", "u") is None  # a bad answer: the backend works, no pause
        assert llm.ask_json("titles", "s", "u") == {"ok": 1}
        assert len(api.bodies("llm")) == 4
    report = llm.report()
    assert report["today"]["calls"] == 4 and report["today"]["failures"] == 3 and report["paused_until"] is None
    assert not any("cap" in w for w in ai.llm_warnings(report, "en"))


def test_first_json():
    assert ai.first_json('noise [1, 2] {"a": 1}') == [1, 2]
    assert ai.first_json('{broken {"a": {"b": 2}} tail') == {"a": {"b": 2}}
    assert ai.first_json("no json here") is None


def test_config_coerces_the_llm_block(tmp_path):
    store = ai.Store(str(tmp_path / ".ai")).ensure()
    (tmp_path / ".ai" / "config.json").write_text(json.dumps({"llm": {
        "backend": "gpt", "max_calls_per_day": -5, "timeout_seconds": "slow"}}))
    cfg = store.config()["llm"]
    assert cfg["backend"] == "off" and cfg["max_calls_per_day"] == 0
    assert cfg["timeout_seconds"] == ai.DEFAULT_CONFIG["llm"]["timeout_seconds"]


def test_claude_cli_command_keeps_hooks_and_project_settings_out():
    llm = ai.LLM.__new__(ai.LLM)
    llm.cli_path, llm.model = "/usr/bin/claude", "haiku"
    cmd = ai.claude_cli_command(llm, "SYSTEM")
    assert cmd[:2] == ["/usr/bin/claude", "-p"]
    assert cmd[cmd.index("--settings") + 1] == '{"disableAllHooks": true}'
    assert cmd[cmd.index("--setting-sources") + 1] == "user"
    assert cmd[cmd.index("--tools") + 1] == ""
    assert {"--strict-mcp-config", "--no-session-persistence", "--disable-slash-commands"} <= set(cmd)


def test_a_capture_of_the_products_own_prompt_is_dropped():
    assert ai.prepare_capture(LLM_MARKER + "\nTitle these threads: ...", "prompt") is None
    assert ai.prepare_capture("What does " + LLM_MARKER + " mean in the code?", "prompt") is not None


def test_the_daemon_counts_captures_and_follows_config_edits(proj, monkeypatch):
    """The daemon's LLM earns calls with the captures it applies, and a config edit (the switch
    turned off) takes effect without a restart."""
    from conftest import cli, hook
    from support import bash_payload, wait_for
    monkeypatch.setenv("ANTHROPIC_API_KEY", "dummy-key")
    config = proj / ".ai" / "config.json"
    config.write_text(json.dumps({"daemon_idle_seconds": 30, "llm": {
        "backend": "anthropic", "base_url": "http://127.0.0.1:9"}}))
    assert cli("daemon", "start", project=proj).returncode == 0
    for i in range(4):
        assert hook("capture", bash_payload("llm-daemon-%d" % i, i), proj).returncode == 0
    usage = proj / ".ai" / "llm_usage.json"

    def captures():
        doc = json.loads(usage.read_text()) if usage.exists() else {}
        return sum(d.get("captures", 0) for d in doc.get("days", {}).values())
    assert wait_for(lambda: captures() == 4, timeout=60), captures()
    assert any(r.get("msg") == "llm configured" and r.get("enabled") for r in log_records(proj))
    config.write_text(json.dumps({"daemon_idle_seconds": 30, "llm": {"backend": "off"}, "language": "en"}))
    os.utime(config, ns=(1, 1))  # another mtime whatever the clock's resolution
    assert hook("capture", bash_payload("llm-daemon-off", 9), proj).returncode == 0
    assert wait_for(lambda: not ai.Store(str(proj / ".ai")).inbox_pending(), timeout=60)
    assert captures() == 4  # off: the ledger is left alone


def test_claude_cli_is_killed_when_its_caller_gives_up(tmp_path):
    """A stand-in `claude` that never answers: killed at the timeout, its whole process group."""
    fake = tmp_path / "claude"
    pidfile = tmp_path / "child.pid"
    fake.write_text("#!/bin/sh\nsleep 300 &\necho $! > '%s'\nwait\n" % pidfile)
    fake.chmod(0o755)
    llm = make_llm(tmp_path, "claude-cli", cli_path=str(fake), timeout_seconds=1.0)
    assert llm.enabled and llm.ask_json("titles", "s", "u") is None
    assert "timed out" in llm.report()["last_error"]["error"]
    child = int(pidfile.read_text())
    assert wait_for(lambda: not os.path.exists("/proc/%d" % child) or
                    open("/proc/%d/stat" % child).read().rsplit(")", 1)[1].split()[0] == "Z", timeout=10)


def test_install_sets_the_llm_switch(tmp_path):
    """install.sh --llm: claude-cli gets the absolute path of the `claude` on PATH (a link is
    kept as a link), none on PATH leaves it off, a re-run changes nothing, off switches back."""
    from support import ROOT
    project, home, bin_dir = tmp_path / "p", tmp_path / "install_home", tmp_path / "bin"
    for d in (project, home, bin_dir):
        d.mkdir()
    (bin_dir / "claude").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "claude").chmod(0o755)

    def install(*args, path=os.environ["PATH"]):
        env = dict(os.environ, HOME=str(home), PATH=path, AI_SMARTNESS_HOME=str(home / "ais"))
        done = subprocess.run(["bash", str(ROOT / "install.sh"), "--no-embeddings", *args, str(project)], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        config = json.loads((project / ".ai" / "config.json").read_text()) if done.returncode == 0 else None
        return done, config

    done, config = install("--llm", "claude-cli", path="/usr/bin:/bin")
    assert "no claude command on PATH" in done.stderr and config["llm"] == {"backend": "off"}
    done, config = install("--llm", "claude-cli", path="%s:/usr/bin:/bin" % bin_dir)
    assert config["llm"] == {"backend": "claude-cli", "cli_path": str(bin_dir.resolve() / "claude")}, done.stdout
    assert "llm kept" in install("--llm", "claude-cli", path="%s:/usr/bin:/bin" % bin_dir)[0].stdout
    assert install()[1]["llm"]["backend"] == "claude-cli"  # no --llm: left as it is
    assert install("--llm", "off")[1]["llm"]["backend"] == "off"
    assert install("--llm", "gpt")[0].returncode == 2
