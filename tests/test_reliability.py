"""The standing reliability suite of the hooks and the daemon (fast enough for CI):
generated payloads for every hook, in-process through answer() and through the installed
command; concurrent hooks from three sessions while the daemon is killed; a daemon that
lost its socket. Every hook must exit 0 with an empty stderr and print nothing or one
contract-valid JSON object, and nothing journaled may be lost or stored twice."""
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import ai_smartness as ai
from conftest import cli
from support import DEADLINE, check_contract, event_hooks, failures, installed_hook

EVENT_OF = event_hooks()


def run_hook(name, payload, project):
    return installed_hook(name, payload, project, env={"AI_SMARTNESS_EMBEDDER": "hash"})


# ---- generated payloads ----

STRINGS = ["", " ", "x", "\u00e9\U0001F600", "\ud800", "a\udcffb", "\x00\x1b[31m", "\u202eevil", "C:\\a\\b.py",
           ".ai/recall/q", "../../etc/passwd", "/proc/self/mem", "sk-ant-api03-" + "A" * 40, "1e300", "nan"]


def gen_string(rng):
    pick = rng.random()
    if pick < 0.5:
        return rng.choice(STRINGS)
    if pick < 0.8:
        return " ".join(rng.choice(["parser", "invoice", "webhook", "the", "module", "retry", "é", "日本"])
                        for _ in range(rng.randint(1, 30)))
    if pick < 0.9:
        return "/.ai/recall/x" * rng.randint(1, 2000)
    return rng.choice("ab\ud800\n{[\"") * rng.randint(1000, 70000)


def gen_value(rng, depth=0):
    kind = rng.random()
    if depth > 4 or kind < 0.4:
        return gen_string(rng)
    if kind < 0.55:
        return rng.choice([0, -1, 2 ** 70, 1.5, float("1e308"), True, False, None])
    if kind < 0.75:
        return [gen_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    if kind < 0.8:
        deep = "x"
        for _ in range(rng.randint(10, 200)):
            deep = [deep] if rng.random() < 0.5 else {"k": deep}
        return deep
    return {rng.choice([gen_string(rng), "content", "file_path", "text", "\ud800"]): gen_value(rng, depth + 1)
            for _ in range(rng.randint(0, 5))}


def gen_payload(rng, name, project):
    """A payload shaped like `name`'s event, each field right, wrong or missing at random."""
    tools = list(ai.TOOL_ORIGINS) + ["Glob", "", "Read"]
    good = {
        "session_id": f"s{rng.randint(1, 3)}", "cwd": str(project), "hook_event_name": EVENT_OF[name],
        "transcript_path": rng.choice(["/proc/self/mem", "/nonexistent", str(project), "/dev/null"]),
        "prompt": gen_string(rng), "source": rng.choice(["startup", "resume", "compact"]),
        "tool_name": rng.choice(tools),
        "tool_input": {k: (gen_string(rng) if kind is str else gen_value(rng))
                       for k, (kind, _) in ai.TOOL_INPUT_FIELDS.items() if rng.random() < 0.4},
        "tool_response": gen_value(rng), "last_assistant_message": gen_string(rng), "reason": gen_string(rng),
        "trigger": "auto", "custom_instructions": gen_string(rng), "stop_hook_active": rng.random() < 0.5,
    }
    if rng.random() < 0.3:
        good["tool_input"]["file_path"] = rng.choice([".ai/recall/" + gen_string(rng), f"{project}/.ai/recall/q",
                                                      "vendor/.ai/recall/x", f"{project}/.ai/cache/recall/a.md"])
    payload = {}
    for key, value in good.items():
        roll = rng.random()
        if roll < 0.7:
            payload[key] = value
        elif roll < 0.9:
            payload[key] = gen_value(rng)
    for _ in range(rng.randint(0, 3)):
        payload[gen_string(rng)[:50]] = gen_value(rng)
    return payload


def test_generated_payloads_in_process(proj):
    """A few hundred seeded payloads straight into answer(), every hook: no exception, the
    contract holds, nothing logged as a hook failure."""
    store = ai.Store(ai.data_dir_of(str(proj))).ensure()
    rng = random.Random(14)
    for i in range(350):
        name = rng.choice(sorted(ai.HOOKS))
        payload = gen_payload(rng, name, proj)
        try:
            out = ai.answer(name, payload, store, None)
        except Exception as exc:  # noqa: BLE001 - any escape is the failure under test
            pytest.fail(f"payload {i} to {name} raised {exc!r}")
        check_contract(out, EVENT_OF[name])


def test_generated_payloads_through_the_installed_command(proj):
    rng = random.Random(1414)
    bad = []
    for i in range(21):
        name = sorted(ai.HOOKS)[i % len(ai.HOOKS)]
        payload = gen_payload(rng, name, proj)
        raw = json.dumps(payload).encode() if i % 7 else json.dumps(payload)[: rng.randint(0, 200)].encode()
        proc = run_hook(name, raw, proj)
        if proc.returncode != 0 or proc.stderr:
            bad.append((name, proc.returncode, proc.stderr[-500:]))
            continue
        check_contract(proc.stdout.decode("utf-8"), EVENT_OF[name])
    assert bad == []
    assert not failures(proj), failures(proj)


# ---- concurrent sessions, the daemon killed ----

def stored_messages(project):
    assert cli("daemon", "start", project=project, env={"AI_SMARTNESS_EMBEDDER": "hash"}).returncode == 0
    deadline = time.monotonic() + DEADLINE
    while list((project / ".ai" / "inbox").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    export = json.loads(cli("export", project=project).stdout)
    return [m["text"] for t in export["threads"] for m in t["messages"]]


def test_three_sessions_with_the_daemon_killed_lose_nothing(proj):
    sessions, per_session = 3, 12
    results, lock = [], threading.Lock()
    killed = threading.Event()

    def session(s):
        for i in range(per_session):
            marker = f"kiwi{s}x{i}y"
            jobs = [("inject", {"session_id": f"s{s}", "cwd": str(proj), "hook_event_name": "UserPromptSubmit",
                                "prompt": f"Session {s} prompt {i}: look at the {marker} parser module"}, marker + "p"),
                    ("capture", {"session_id": f"s{s}", "tool_name": "Bash", "hook_event_name": "PostToolUse",
                                 "tool_input": {"command": f"make check-{marker}"},
                                 "tool_response": {"stdout": f"build {marker} passed for the invoices", "stderr": ""}},
                     marker + "c")]
            if i % 4 == 0:
                jobs.append(("pretool", {"session_id": f"s{s}", "tool_name": "Read", "cwd": str(proj),
                                         "tool_input": {"file_path": ".ai/recall/parser"}}, None))
            for name, payload, _ in jobs:
                proc = run_hook(name, payload, proj)
                with lock:
                    results.append((name, proc.returncode, proc.stdout, proc.stderr))

    def killer():
        store = ai.Store(ai.data_dir_of(str(proj)))
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            pid = ai.daemon_info(store).get("pid")
            if pid and len(results) >= sessions * per_session // 2:
                os.kill(int(pid), signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.05)
    workers = [threading.Thread(target=session, args=(s,)) for s in range(sessions)] + [threading.Thread(target=killer)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
    assert killed.is_set(), "the daemon never ran, so it was never killed"
    assert [r[:2] for r in results if r[1] != 0 or r[3]] == []
    for name, _, out, _ in results:
        check_contract(out.decode("utf-8"), EVENT_OF[name])
    texts = "\n".join(stored_messages(proj))
    counts = {f"kiwi{s}x{i}y {kind}": texts.count(f"{kind} kiwi{s}x{i}y" if kind == "build" else f"the kiwi{s}x{i}y")
              for s in range(sessions) for i in range(per_session) for kind in ("build", "the")}
    assert {k: v for k, v in counts.items() if v != 1} == {}
    assert not failures(proj), failures(proj)


# ---- a daemon that lost its socket (F11) ----

def test_a_deleted_socket_is_bound_again_and_status_agrees_with_health(proj):
    assert cli("daemon", "start", project=proj).returncode == 0
    sock = json.loads((proj / ".ai" / "daemon.json").read_text())["socket"]
    os.unlink(sock)
    deadline = time.monotonic() + DEADLINE
    while not os.path.exists(sock) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(sock), "the daemon never bound its socket again"
    t0 = time.monotonic()
    status = cli("daemon", "status", "--json", project=proj)
    assert status.returncode == 0 and json.loads(status.stdout)["running"] is True
    assert time.monotonic() - t0 < 20
    health = json.loads(cli("health", "--json", project=proj).stdout)
    assert health["daemon"]["running"] is True


@pytest.fixture
def deaf_daemon(proj):
    """A process holding the daemon's run lock with no socket: alive, yet unreachable."""
    data = proj / ".ai"
    data.mkdir(exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)",
                               str(data / "daemon.run.lock")], stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"held\n"
    (data / "daemon.json").write_text(json.dumps({"schema": 1, "pid": holder.pid, "version": ai.VERSION,
                                                  "socket": str(data / "daemon.sock"), "ready": True}))
    yield holder
    holder.kill()
    holder.wait()


def test_status_reports_a_deaf_daemon_in_one_line(proj, deaf_daemon):
    t0 = time.monotonic()
    proc = cli("daemon", "status", project=proj)
    assert proc.returncode == 4 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "does not answer" in proc.stderr
    assert time.monotonic() - t0 < 20


def test_start_replaces_a_deaf_daemon(proj, deaf_daemon):
    t0 = time.monotonic()
    proc = cli("daemon", "start", project=proj)
    assert proc.returncode == 0, proc.stderr
    assert deaf_daemon.wait(10) is not None
    assert json.loads((proj / ".ai" / "daemon.json").read_text())["pid"] != deaf_daemon.pid
    assert time.monotonic() - t0 < 60  # not the 121 s wait of before
