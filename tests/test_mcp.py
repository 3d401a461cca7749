"""The MCP server (`ai_smartness.py mcp`): the protocol driven line by line as a real process,
then by real clients: the official MCP Python SDK (a test dependency, tests/run.sh installs it)
and Claude Code itself with --mcp-config against the stand-in Messages API."""

import asyncio
import json
import os
import subprocess
import sys

import pytest

import ai_smartness as mod
from e2e_support import ClaudeRun, Sandbox, claude_bin
from fake_anthropic import FakeAnthropic, tool_results, tool_use
from support import SCRIPT, stop_daemons, unavailable

TOKEN = "narwhal4417"
NOTE = f"We decided to keep the billing ledger in SQLite WAL mode (ticket {TOKEN}) for crash safety."
TOOLS = {"recall", "search", "remember", "forget", "threads", "rules"}


def server(project, env=None):
    return subprocess.Popen([sys.executable, str(SCRIPT), "--project", str(project), "mcp"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, **(env or {})))


def exchange(project, *messages, env=None):
    """Send these messages (dicts, or raw bytes for a line), close stdin; returns (the parsed
    stdout lines, the exit code, stderr)."""
    lines = [m if isinstance(m, bytes) else json.dumps(m).encode() for m in messages]
    proc = server(project, env)
    out, err = proc.communicate(b"\n".join(lines) + b"\n", timeout=120)
    return [json.loads(line) for line in out.decode().splitlines()], proc.returncode, err.decode()


def request(mid, method, **params):
    return {"jsonrpc": "2.0", "id": mid, "method": method, "params": params}


def init(version="2025-11-25", mid=1):
    return request(mid, "initialize", protocolVersion=version, capabilities={},
                   clientInfo={"name": "test", "version": "0"})


def call(mid, name, **arguments):
    return request(mid, "tools/call", name=name, arguments=arguments)


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def by_id(replies):
    return {r["id"]: r for r in replies}


def text_of(reply):
    assert "result" in reply, reply
    return "\n".join(c["text"] for c in reply["result"]["content"] if c["type"] == "text")


@pytest.mark.parametrize("asked, answered", [("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"),
                                             ("2024-11-05", "2024-11-05"), ("1999-01-01", "2025-11-25")])
def test_initialize_negotiates_the_version_and_lists_every_tool(proj, asked, answered):
    replies, rc, _ = exchange(proj, init(asked), INITIALIZED, request(2, "tools/list"), request(3, "ping"))
    assert rc == 0
    assert len(replies) == 3, replies  # the notification gets no answer
    got = by_id(replies)
    result = got[1]["result"]
    assert result["protocolVersion"] == answered
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "ai_smartness"
    tools = {t["name"]: t for t in got[2]["result"]["tools"]}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool["inputSchema"]["type"] == "object" and tool["description"]
    assert tools["forget"]["annotations"]["destructiveHint"] is True
    assert tools["remember"]["annotations"] == {"readOnlyHint": False, "destructiveHint": False, "openWorldHint": False}
    assert tools["recall"]["annotations"]["readOnlyHint"] is True
    assert got[3]["result"] == {}


def test_remember_then_recall_search_threads_forget(proj):
    replies, rc, err = exchange(proj, init(), INITIALIZED, call(2, "remember", text=NOTE),
                                call(3, "recall", query="billing ledger"), call(4, "search", query="SQLite WAL"),
                                call(5, "threads"))
    assert rc == 0, err
    got = by_id(replies)
    assert not got[2]["result"]["isError"] and "1" in text_of(got[2]), got[2]
    assert TOKEN in text_of(got[3]) and "not instructions" in text_of(got[3])
    assert TOKEN in text_of(got[4])
    tid = text_of(got[5]).split()[0]
    assert mod.valid_id(tid)
    # The same text as the virtual Read: recall by thread id, then forget it.
    replies, rc, _ = exchange(proj, init(), call(2, "recall", query=tid), call(3, "forget", id=tid),
                              call(4, "forget", id=tid), call(5, "threads"))
    got = by_id(replies)
    assert TOKEN in text_of(got[2]) and tid in text_of(got[2])
    assert not got[3]["result"]["isError"]
    assert got[4]["result"]["isError"] and tid in text_of(got[4])  # already gone: not found
    assert tid not in text_of(got[5])
    stop_daemons(proj)


def test_forget_cuts_a_text_out_of_the_memory(proj):
    secret = "plumtree-garage-47-lantern"  # no secret pattern knows it
    replies, rc, err = exchange(proj, init(), INITIALIZED, call(2, "remember", text=f"Staging passphrase {secret} for {TOKEN}"),
                                call(3, "forget", text=secret), call(4, "forget"), call(5, "search", query=TOKEN))
    assert rc == 0, err
    got = by_id(replies)
    assert not got[3]["result"]["isError"], got[3]
    assert got[4]["result"]["isError"]  # a thread id or a text: one of them
    assert TOKEN in text_of(got[5]) and secret not in text_of(got[5]) and mod.FORGOTTEN_MARK in text_of(got[5])
    stop_daemons(proj)


def test_remember_goes_through_the_capture_path_redacted(proj):
    secret = "sk-ant-api03-" + "x7Kq9" * 12
    replies, rc, _ = exchange(proj, init(), call(2, "remember", text=f"The deploy key is {secret} for {TOKEN} prod"),
                              call(3, "remember", text="ok"), call(4, "recall", query=TOKEN))
    got = by_id(replies)
    assert "1" in text_of(got[2])
    assert not got[3]["result"]["isError"]  # noise is not an error: nothing stored, said so
    assert secret not in json.dumps(replies) and TOKEN in text_of(got[4])
    stored = "".join(p.read_text() for p in (proj / ".ai" / "db" / "threads").glob("*.json"))
    assert TOKEN in stored and secret not in stored
    stop_daemons(proj)


def test_remember_proposes_the_transcript_then_keeps_the_chosen(proj, tmp_path):
    transcript = tmp_path / "session.jsonl"
    records = [{"type": "user", "message": {"role": "user", "content": "How should the cache expire entries?"}},
               {"type": "assistant", "message": {"role": "assistant", "content": [
                   {"type": "text", "text": f"Use an LRU with a 10 minute TTL ({TOKEN}); the hit rate stays high."}]}},
               {"type": "summary", "summary": "ignored"},
               "not json"]
    transcript.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    replies, _, _ = exchange(proj, init(), call(2, "remember", transcript=str(transcript)),
                             call(3, "remember", transcript=str(transcript), keep=[2]),
                             call(4, "search", query="LRU TTL cache"),
                             call(5, "remember", transcript=str(tmp_path / "nope.jsonl")),
                             call(6, "remember", keep=[1]), call(7, "remember"))
    got = by_id(replies)
    listing = text_of(got[2])
    assert "1. [user] How should the cache" in listing and "2. [assistant] Use an LRU" in listing
    assert "ignored" not in listing
    assert TOKEN in text_of(got[4]) and "How should the cache" not in text_of(got[4])
    for mid in (5, 6, 7):
        assert got[mid]["result"]["isError"], got[mid]
    stop_daemons(proj)


def test_rules_list_add_remove(proj):
    replies, _, _ = exchange(proj, init(), call(2, "rules", action="add", text="Always run the linter before committing"),
                             call(3, "rules"), call(4, "rules", action="remove", number=1), call(5, "rules"),
                             call(6, "rules", action="remove", number=9), call(7, "rules", action="remove"))
    got = by_id(replies)
    assert "1. Always run the linter" in text_of(got[3])
    assert not got[4]["result"]["isError"]
    assert "Always run the linter" not in text_of(got[5])
    assert got[6]["result"]["isError"] and got[7]["result"]["isError"]
    stop_daemons(proj)


def test_protocol_errors_are_answers_never_a_crash(proj):
    replies, rc, err = exchange(
        proj, b"{not json", b"[1, 2]", b'"text"', {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}, request(2, "resources/list"),
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": [1]},
        request(4, "tools/call", name="nope", arguments={}),
        call(5, "search", query="x", limit=0), call(6, "search", query=7), call(7, "recall", query="x", extra=1),
        call(8, "forget", id="../../etc"), call(9, "search"),
        {"jsonrpc": "2.0", "id": 10, "result": {}}, {"jsonrpc": "2.0", "method": "notifications/cancelled"},
        b"", b"   ", {"jsonrpc": "2.0", "id": 12, "method": 7}, {"jsonrpc": "2.0", "id": 13}, request(11, "ping"))
    assert rc == 0, err
    got = [(r.get("id"), r.get("error", {}).get("code"), r.get("result", {}).get("isError")) for r in replies]
    assert got == [(None, -32700, None), (None, -32600, None), (None, -32600, None), (1, -32600, None),
                   (None, -32600, None), (2, -32601, None), (3, -32602, None), (4, -32602, None),
                   (5, None, True), (6, None, True), (7, None, True), (8, None, True), (9, None, True),
                   (12, -32600, None), (13, -32600, None), (11, None, None)]
    assert "limit" in text_of(replies[8]) and "extra" in text_of(replies[10])


def test_an_oversized_message_is_refused_and_skipped(proj, monkeypatch):
    big = json.dumps(call(1, "search", query="y" * (mod.MCP_MAX_MESSAGE + 10))).encode()
    replies, rc, _ = exchange(proj, big, request(2, "ping"))
    assert rc == 0
    assert [(r["id"], r.get("error", {}).get("code")) for r in replies] == [(None, -32700), (2, None)]


def test_stdout_holds_only_protocol_lines_whatever_prints(proj, tmp_path):
    # A library that prints while a tool runs (sitecustomize patches the CLI's recall to print).
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import builtins, os\n"
        "_print = builtins.print\n"
        "def noisy(*a, **k):\n"
        "    _print('library noise', file=__import__('sys').__stdout__)\n"
        "    os.write(1, b'fd noise\\n')\n"
        "    return _print(*a, **k)\n"
        "builtins.print = noisy\n")
    env = {"PYTHONPATH": str(site)}
    lines = [init(), call(2, "remember", text=NOTE), call(3, "recall", query="billing")]
    proc = server(proj, env)
    out, err = proc.communicate(b"\n".join(json.dumps(m).encode() for m in lines) + b"\n", timeout=120)
    assert proc.returncode == 0
    replies = [json.loads(line) for line in out.decode().splitlines()]
    assert [r["id"] for r in replies] == [1, 2, 3] and TOKEN in text_of(replies[2])
    assert b"fd noise" in err and b"library noise" in err
    stop_daemons(proj)


def test_a_tool_bug_is_an_error_answer_and_logged(proj, monkeypatch):
    class Fake:
        store = mod.Store(str(proj / ".ai")).ensure()
        project, lang = str(proj), "en"
    sent = []
    srv = mod.McpServer(Fake(), sent.append)
    monkeypatch.setitem(mod.MCP_TOOLS, "threads", mod.McpTool("threads", "t", "d", {"type": "object"}, "reads",
                                                             lambda cli, args: 1 / 0))
    reply = srv.reply(json.dumps(call(1, "threads")).encode())
    assert reply["error"]["code"] == -32603 and "ZeroDivisionError" in reply["error"]["message"]
    assert "mcp request failed" in (proj / ".ai" / "logs" / "ai_smartness.log").read_text()


@pytest.mark.parametrize("value, schema, problems", [
    ({"a": 1}, {"type": "object", "properties": {"a": {"type": "integer", "minimum": 2}}}, 1),
    ({"a": True}, {"type": "object", "properties": {"a": {"type": "integer"}}}, 1),
    ({"a": [1, "x"]}, {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}, 1),
    ({"a": "z"}, {"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "y"]}}}, 1),
    ({}, {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, 1),
    ({"a": "x", "b": 1}, {"type": "object", "properties": {"a": {"type": "string"}}}, 0),
    ({"a": "x"}, {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]$"}}}, 0),
])
def test_schema_errors(value, schema, problems):
    assert len(mod.schema_errors(value, schema)) == problems


# ---- the official MCP Python SDK's client ----

def sdk():
    try:
        from mcp import Client, StdioServerParameters
    except ImportError:
        unavailable("the MCP Python SDK is absent (tests/run.sh installs it: pip install mcp)")
    return Client, StdioServerParameters


@pytest.mark.filterwarnings("ignore:ping is removed")  # the SDK's note on the stateless revision
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_official_sdk_client_drives_every_tool(proj, mode):
    Client, Params = sdk()
    params = Params(command=sys.executable, args=[str(SCRIPT), "--project", str(proj), "mcp"],
                    env={"AI_SMARTNESS_EMBEDDER": "fake", "HOME": os.environ["HOME"]})

    async def session():
        async with Client(params, mode=mode) as client:
            assert client.server_info.name == "ai_smartness"
            listed = await client.list_tools()
            names = {t.name for t in listed.tools}
            texts = {}
            for name, args in [("remember", {"text": NOTE}), ("recall", {"query": "billing ledger"}),
                               ("search", {"query": "SQLite WAL", "limit": 3}), ("threads", {}),
                               ("rules", {"action": "add", "text": "Never commit generated files"}),
                               ("rules", {}), ("search", {"query": ""})]:
                result = await client.call_tool(name, args)
                texts.setdefault(name, []).append(("".join(c.text for c in result.content), result.is_error))
            tid = texts["threads"][0][0].split()[0]
            result = await client.call_tool("forget", {"id": tid})
            texts["forget"] = [("".join(c.text for c in result.content), result.is_error)]
            await client.send_ping()
            return names, texts, client.protocol_version

    names, texts, version = asyncio.run(session())
    assert names == TOOLS and version == "2025-11-25"
    assert texts["remember"][0][1] is False
    assert TOKEN in texts["recall"][0][0] and TOKEN in texts["search"][0][0]
    assert "Never commit generated files" in texts["rules"][1][0]
    assert texts["search"][1][1] is True  # an empty query: an error result, not a crash
    assert texts["forget"][0][1] is False
    stop_daemons(proj)


# ---- Claude Code itself ----

def test_claude_code_calls_recall_and_the_model_gets_the_memory(tmp_path):
    claude = claude_bin()
    if not claude:
        unavailable("real Claude Code CLI not found: set AI_SMARTNESS_CLAUDE_BIN (tests/run.sh does)")
    box = Sandbox(tmp_path, claude)
    try:
        env = box.env
        capture = subprocess.run([sys.executable, str(SCRIPT), "--project", str(box.project), "capture", NOTE],
                                 env=env, capture_output=True, text=True, timeout=120)
        assert capture.returncode == 0, capture.stderr
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"ai_smartness": {
            "command": sys.executable, "args": [str(SCRIPT), "--project", str(box.project), "mcp"]}}}))
        script = [tool_use("mcp__ai_smartness__recall", {"query": "billing ledger"}, id="toolu_mcp_recall"),
                  "All done."]
        with FakeAnthropic(script) as api:
            out, err = tmp_path / "claude.out", tmp_path / "claude.err"
            with open(out, "wb") as o, open(err, "wb") as e:
                proc = subprocess.run([claude, "-p", "What did we decide about the billing ledger?",
                                       "--output-format", "json", "--mcp-config", str(config), "--strict-mcp-config",
                                       "--allowedTools", "mcp__ai_smartness__recall"],
                                      cwd=box.project, env=dict(env, ANTHROPIC_BASE_URL=api.url),
                                      stdin=subprocess.DEVNULL, stdout=o, stderr=e, timeout=180)
            run = ClaudeRun(proc.returncode, out.read_text(errors="replace"), err.read_text(errors="replace"))
            assert proc.returncode == 0 and run.result and run.result.get("result") == "All done.", run
            bodies = api.bodies()
        offered = [t.get("name") for t in bodies[0].get("tools", [])]
        assert "mcp__ai_smartness__recall" in offered and "mcp__ai_smartness__remember" in offered, offered
        results = [r for r in tool_results(bodies[1]) if r["tool_use_id"] == "toolu_mcp_recall"]
        assert results and not results[0]["is_error"], tool_results(bodies[1])
        assert TOKEN in results[0]["text"] and "not instructions" in results[0]["text"], results[0]
    finally:
        stop_daemons(box.project, under=tmp_path)


# ---- install.sh --mcp ----

FOREIGN_MCP = '{\n    "mcpServers": {"other": {"command": "npx", "args": ["-y", "other-server"]}},\n    "x": 1\n}\n'


@pytest.mark.parametrize("original", [None, FOREIGN_MCP, '{"mcpServers":{}}'], ids=["none", "foreign", "empty"])
def test_install_mcp_registers_the_server_and_uninstall_gives_back_the_bytes(tmp_path, original):
    from test_install import ok, run, snapshot
    home, target = tmp_path / "home_i", tmp_path / "my proj's dir"
    home.mkdir()
    target.mkdir()
    if original is not None:
        (target / ".mcp.json").write_text(original)
    before = snapshot(target)
    proc = ok(run(home, "--no-embeddings", "--mcp", target, cwd=target))
    assert "[mcp_servers.ai_smartness]" in proc.stdout and "Cursor" in proc.stdout
    doc = json.loads((target / ".mcp.json").read_text())
    entry = doc["mcpServers"]["ai_smartness"]
    assert entry["args"] == [str(target / ".ai" / "ai_smartness.py"), "--project", str(target), "mcp"]
    if original == FOREIGN_MCP:
        assert doc["mcpServers"]["other"] == json.loads(FOREIGN_MCP)["mcpServers"]["other"] and doc["x"] == 1
    # The registered command is a working server.
    proc_srv = subprocess.run([entry["command"], *entry["args"]], capture_output=True, timeout=120,
                              input=(json.dumps(init()) + "\n" + json.dumps(request(2, "tools/list")) + "\n").encode())
    tools = {t["name"] for t in by_id([json.loads(x) for x in proc_srv.stdout.splitlines()])[2]["result"]["tools"]}
    assert tools == TOOLS
    installed = (target / ".mcp.json").read_bytes()
    proc = ok(run(home, "--no-embeddings", "--mcp", target))
    assert "already registered" in proc.stdout and (target / ".mcp.json").read_bytes() == installed
    ok(run(home, "--uninstall", "--purge", target))
    assert snapshot(target) == before


def test_install_mcp_leaves_a_foreign_server_of_our_name_alone(tmp_path):
    from test_install import ok, run
    home, target = tmp_path / "home_i", tmp_path / "proj"
    home.mkdir()
    target.mkdir()
    theirs = '{"mcpServers": {"ai_smartness": {"command": "their-own"}}}'
    (target / ".mcp.json").write_text(theirs)
    proc = ok(run(home, "--no-embeddings", "--mcp", target))
    assert "not ours" in proc.stderr and (target / ".mcp.json").read_text() == theirs
    ok(run(home, "--uninstall", target))
    assert (target / ".mcp.json").read_text() == theirs
    stop_daemons(target)


def test_install_mcp_refuses_a_broken_mcp_json_before_any_change(tmp_path):
    from test_install import run, snapshot
    home, target = tmp_path / "home_i", tmp_path / "proj"
    home.mkdir()
    target.mkdir()
    (target / ".mcp.json").write_text('{"mcpServers": [1]}')
    before = snapshot(target)
    proc = run(home, "--no-embeddings", "--mcp", target)
    assert proc.returncode != 0 and "mcpServers" in proc.stderr
    assert snapshot(target) == before
