"""A scripted stand-in of the Anthropic Messages API for end-to-end tests (stdlib only).

Enough of the API for the real Claude Code CLI in `-p` mode (see ../shared/CLAUDE_CODE_HOOKS.md §1):
`HEAD /` (reachability check), `POST /v1/messages[?beta=true]` answered as streaming SSE (or plain
JSON when the request says `"stream": false`), `POST /v1/messages/count_tokens`, a JSON 404 for the rest.

    with FakeAnthropic([tool_use("Read", {"file_path": path}), "All done."]) as api:
        env["ANTHROPIC_BASE_URL"] = api.url
        ...run claude...
        body = api.bodies()[-1]          # last scripted request
        assert "quokka" in request_text(body)

A script decides each reply of the conversation ("main" requests, those that offer tools):
- a list: step i answers the request that already holds i assistant messages; past its end the
  model says DEFAULT_TEXT, so a Stop hook that makes the model run again cannot hang a test;
- a callable `script(body) -> reply`;
- None: every request gets DEFAULT_TEXT.
A reply (or a list step, which may also be a callable) is a str (one text block), one block
from `text()` / `tool_use()`, a list of blocks, or None (DEFAULT_TEXT). Requests without tools are
side requests of the CLI (titles, quota probes): they get SIDE_TEXT and never consume a step.
A script that raises is answered with a text naming the error (not an HTTP error, which the
CLI would retry for minutes) and the error is kept in `api.errors`.

The product's own LLM calls (ai_smartness's LLM: their user message holds LLM_MARKER) are
answered by a second script, `llm`: a list consumed one reply per call (past its end: LLM_TEXT),
or a callable `llm(body) -> reply`. Besides a reply, a step may be a `Fault`: `http_error(429)`,
`overloaded()`, `slow(seconds, reply)`, `malformed_body()`; `huge(n)` is a reply of n characters.
They are recorded with kind "llm" on `/v1/messages` and "chat" on the OpenAI-compatible route
`POST /v1/chat/completions` (answered from the same script):

    with FakeAnthropic(llm=['{"title": "Auth"}', http_error(429), slow(5)]) as api:
        ...
        api.bodies("llm")
"""

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# What the model says when the script has nothing (more) to say.
DEFAULT_TEXT = "Done."
# Answer to side requests of the CLI (no tools offered): short, so nothing waits on it.
SIDE_TEXT = "OK"
# The first line of every user message ai_smartness's LLM sends (ai_smartness.LLM_PROMPT_MARKER),
# and what the stand-in answers such a call when its `llm` script has nothing (more) to say.
LLM_MARKER = "[ai_smartness internal request: not a user prompt]"
LLM_TEXT = "{}"
# HTTP status and error type of the API's failures.
ERROR_TYPES = {429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


class Fault:
    """How the stand-in answers one LLM call instead of a plain reply: an HTTP error (status,
    error type), a reply after `delay` seconds, or a raw body that is not JSON."""

    def __init__(self, status=200, error_type=None, delay=0.0, reply=None, raw=None):
        self.status, self.error_type, self.delay, self.reply, self.raw = status, error_type, delay, reply, raw

    def __repr__(self):
        return "Fault(status=%r, delay=%r)" % (self.status, self.delay)


def http_error(status):
    return Fault(status, ERROR_TYPES.get(status, "api_error"))


def overloaded():
    return http_error(529)


def slow(seconds, reply=None):
    return Fault(delay=seconds, reply=reply)


def malformed_body():
    return Fault(raw=b'{"type": "message", "content": [{"type": "text", "text": "unterminated')


def huge(n):
    """A reply of about n characters that is one valid JSON value."""
    return '{"title": "%s"}' % ("x" * max(0, n - 13))


def is_llm_call(body):
    """A request of ai_smartness's own LLM (its marker in a message)."""
    return LLM_MARKER in request_text(body)


# ==== Reply blocks and request inspection ====

def text(s):
    """A text content block."""
    return {"type": "text", "text": s}


def tool_use(name, input, id=None):
    """A tool_use content block; `id` lets a test find the matching tool_result later."""
    block = {"type": "tool_use", "name": name, "input": input}
    if id:
        block["id"] = id
    return block


def turn(body):
    """How many assistant messages the conversation already holds (0 for the first request)."""
    return sum(1 for m in body.get("messages") or () if m.get("role") == "assistant")


def content_texts(content):
    """All text of one message content (a string or blocks), tool_result contents and
    tool_use inputs included, in order."""
    if isinstance(content, str):
        return [content]
    out = []
    for block in content or ():
        if isinstance(block, str):
            out.append(block)
        elif not isinstance(block, dict):
            continue
        elif block.get("type") == "tool_result":
            out.extend(content_texts(block.get("content")))
        elif block.get("type") == "tool_use":
            out.append(json.dumps(block.get("input"), ensure_ascii=False))
        elif isinstance(block.get("text"), str):
            out.append(block["text"])
    return out


def request_text(body):
    """Everything the model reads in `messages` (system entries, prompts, tool results), joined
    by newlines; the top-level system prompt, the CLI's own, is left out."""
    parts = []
    for message in body.get("messages") or ():
        parts.extend(content_texts(message.get("content")))
    return "\n".join(parts)


def system_entries(body):
    """Texts of the `role: "system"` entries of `messages` (hook contexts land there)."""
    return ["\n".join(content_texts(m.get("content")))
            for m in body.get("messages") or () if m.get("role") == "system"]


def user_prompt(body):
    """The user's prompt: the last text block of the first user message that is not a
    <system-reminder> the CLI prepends."""
    for message in body.get("messages") or ():
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [t for t in content_texts(content) if not t.lstrip().startswith("<system-reminder>")]
        return texts[-1] if texts else ""
    return ""


def tool_results(body):
    """Every tool_result of the request: dicts with tool_use_id, is_error, text."""
    out = []
    for message in body.get("messages") or ():
        content = message.get("content")
        if isinstance(content, str):
            continue
        for block in content or ():
            if isinstance(block, dict) and block.get("type") == "tool_result":
                out.append({"tool_use_id": block.get("tool_use_id"),
                            "is_error": bool(block.get("is_error")),
                            "text": "\n".join(content_texts(block.get("content")))})
    return out


# ==== Script evaluation ====

def _as_blocks(reply):
    if reply is None:
        return [text(DEFAULT_TEXT)]
    if isinstance(reply, str):
        return [text(reply)]
    if isinstance(reply, dict):
        return [reply]
    return list(reply)


def _reply_for(script, body):
    if script is None:
        return None
    if callable(script):
        return script(body)
    steps = list(script)
    step = steps[turn(body)] if turn(body) < len(steps) else None
    return step(body) if callable(step) else step


# ==== Server ====

class Recorded:
    """One request the stand-in received. kind: main | side | count_tokens | other."""

    def __init__(self, method, path, headers, body, kind):
        self.method, self.path, self.headers, self.body, self.kind = method, path, headers, body, kind

    def __repr__(self):
        return "Recorded(%s %s, kind=%s)" % (self.method, self.path, self.kind)


class FakeAnthropic:
    """Context manager running the stand-in on 127.0.0.1 with an ephemeral port."""

    def __init__(self, script=None, host="127.0.0.1", llm=None):
        self.script = script
        self.llm = llm
        self._llm_calls = itertools.count()
        self.host = host
        self.requests = []   # every Recorded request, in arrival order
        self.errors = []     # exceptions raised by the script, as strings
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = self._thread = None
        self.url = None

    def __enter__(self):
        fake = self

        class Handler(_Handler):
            api = fake

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self.url = "http://%s:%d" % (self.host, self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-anthropic",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def bodies(self, kind="main"):
        """Bodies of the recorded requests of one kind (default: the scripted conversation)."""
        with self._lock:
            return [r.body for r in self.requests if r.kind == kind]

    def _record(self, recorded):
        with self._lock:
            self.requests.append(recorded)

    def _next_id(self, prefix):
        with self._lock:
            return "%s_fake_%04d" % (prefix, next(self._ids))

    def llm_reply(self, body):
        """The `llm` script's step for this call: a reply (text) or a Fault."""
        index = next(self._llm_calls)
        if callable(self.llm):
            step = self.llm(body)
        else:
            steps = list(self.llm or ())
            step = steps[index] if index < len(steps) else None
        step = step(body) if callable(step) else step
        return LLM_TEXT if step is None else step

    def _answer(self, body, kind):
        """(blocks, stop_reason) for a /v1/messages body; ids filled in."""
        if kind == "llm":
            blocks = _as_blocks(body.get("_reply"))
        elif kind == "side":
            blocks = [text(SIDE_TEXT)]
        else:
            try:
                blocks = _as_blocks(_reply_for(self.script, body))
            except Exception as e:  # a broken script must end the run, not stall it in retries
                with self._lock:
                    self.errors.append("%s: %s" % (type(e).__name__, e))
                blocks = [text("fake_anthropic script error: %s: %s" % (type(e).__name__, e))]
        blocks = [dict(b, id=b.get("id") or self._next_id("toolu")) if b.get("type") == "tool_use"
                  else dict(b) for b in blocks]
        stop = "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn"
        return blocks, stop


def _estimate_tokens(obj):
    return max(1, len(json.dumps(obj, ensure_ascii=False)) // 4)


def _sse(event, data):
    return ("event: %s\ndata: %s\n\n" % (event, json.dumps(data))).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, every answer carries Content-Length
    api = None                      # the FakeAnthropic, set by a subclass per server

    def log_message(self, *args):   # quiet: pytest output is for the test
        pass

    # -- plumbing --

    def _read_body(self):
        # The CLI sends plain JSON with a Content-Length (no chunking, no compression).
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def _send(self, status, payload, content_type="application/json"):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", self.api._next_id("req"))
        self.end_headers()
        if self.command != "HEAD":
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # a client that gave up (timed out on a slow answer): nothing to tell it

    def _record(self, body, kind):
        self.api._record(Recorded(self.command, self.path, dict(self.headers.items()), body, kind))

    # -- routes --

    def do_HEAD(self):
        self._record(None, "other")
        self._send(200, b"", "text/plain")

    def do_GET(self):
        self._record(None, "other")
        if self.path.split("?")[0] == "/":
            self._send(200, {"ok": True})
        else:
            self._not_found()

    def do_POST(self):
        body = self._read_body()
        route = self.path.split("?")[0].rstrip("/")
        if route == "/v1/messages/count_tokens":
            self._record(body, "count_tokens")
            self._send(200, {"input_tokens": _estimate_tokens(body.get("messages"))})
        elif route == "/v1/messages":
            kind = "llm" if is_llm_call(body) else "main" if body.get("tools") else "side"
            self._record(body, kind)
            if kind == "llm":
                self._llm_call(body, self._messages)
            else:
                self._messages(body, kind)
        elif route == "/v1/chat/completions":
            self._record(body, "chat")
            self._llm_call(body, self._chat)
        else:
            self._record(body, "other")
            self._not_found()

    def _not_found(self):
        self._send(404, {"type": "error", "error": {"type": "not_found_error",
                                                    "message": "fake_anthropic: no route %s %s"
                                                    % (self.command, self.path)}})

    def _llm_call(self, body, send):
        """Answer one of the product's LLM calls with its `llm` step, faults included."""
        step = self.api.llm_reply(body)
        fault = step if isinstance(step, Fault) else Fault(reply=step)
        if fault.delay:
            time.sleep(fault.delay)
        if fault.raw is not None:
            self._send(fault.status, fault.raw)
        elif fault.status != 200:
            self._send(fault.status, {"type": "error", "error": {
                "type": fault.error_type, "message": "fake_anthropic: scripted %d" % fault.status}})
        else:
            send(dict(body, _reply=LLM_TEXT if fault.reply is None else fault.reply), "llm")

    def _chat(self, body, kind):
        """An OpenAI chat completion of the step's text."""
        text = "".join(b.get("text", "") for b in _as_blocks(body.get("_reply")))
        self._send(200, {"id": self.api._next_id("chatcmpl"), "object": "chat.completion",
                         "model": body.get("model") or "local-fake",
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text}}],
                         "usage": {"prompt_tokens": _estimate_tokens(body.get("messages")),
                                   "completion_tokens": _estimate_tokens(text)}})

    def _messages(self, body, kind):
        blocks, stop = self.api._answer(body, kind)
        message_id = self.api._next_id("msg")
        model = body.get("model") or "claude-fake"
        usage = {"input_tokens": _estimate_tokens(body.get("messages")),
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        output_tokens = _estimate_tokens(blocks)
        if not body.get("stream"):
            self._send(200, {"id": message_id, "type": "message", "role": "assistant", "model": model,
                             "content": blocks, "stop_reason": stop, "stop_sequence": None,
                             "usage": dict(usage, output_tokens=output_tokens)})
            return
        # The whole stream is known up front, so it goes out as one body with a length.
        out = [_sse("message_start", {"type": "message_start", "message": {
            "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": dict(usage, output_tokens=1)}})]
        for index, block in enumerate(blocks):
            if block["type"] == "tool_use":
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            else:
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block.get("text", "")}
            out.append(_sse("content_block_start",
                            {"type": "content_block_start", "index": index, "content_block": start}))
            out.append(_sse("content_block_delta",
                            {"type": "content_block_delta", "index": index, "delta": delta}))
            out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        out.append(_sse("message_delta", {"type": "message_delta",
                                          "delta": {"stop_reason": stop, "stop_sequence": None},
                                          "usage": {"output_tokens": output_tokens}}))
        out.append(_sse("message_stop", {"type": "message_stop"}))
        self._send(200, b"".join(out), "text/event-stream")
