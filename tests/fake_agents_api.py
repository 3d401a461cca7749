"""Scripted stand-ins of the model APIs of Codex CLI and Gemini CLI (stdlib only), for the
end-to-end tests of tests/test_agents.py.

- FakeResponses: OpenAI's Responses API as Codex CLI calls it through a custom model provider
  (`base_url` + `wire_api = "responses"`): `POST /v1/responses`, answered as SSE.
- FakeGemini: the Gemini API as Gemini CLI calls it with GOOGLE_GEMINI_BASE_URL:
  `POST /v1beta/models/<model>:generateContent` (JSON) or `:streamGenerateContent?alt=sse`.

A script is a list of steps: step i answers the request that already holds i tool results; a
step is a str (the model's text) or a (tool name, arguments) pair (a tool call). Past its end,
the model says DEFAULT_TEXT. Every request body is kept in `bodies`.

    with FakeResponses([("exec_command", {"cmd": "cat notes.txt"}), "All done."]) as api:
        ...point the CLI at api.url...
        assert "quokka" in request_text(api.bodies[-1])
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_TEXT = "Done."


def request_text(body):
    """Every string of a request body, joined: what the model was shown."""
    out = []

    def walk(value):
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
    walk(body)
    return "\n".join(out)


class _Fake:
    """The server shared by both stand-ins: records bodies, answers `reply(body, path)`."""

    def __init__(self, script=()):
        self.script, self.bodies, self.errors = list(script), [], []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(404, "application/json", b"{}")

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                fake.bodies.append({"path": self.path, "body": body})
                try:
                    kind, data = fake.reply(body, self.path)
                except Exception as exc:  # a broken script must not hang the CLI in retries
                    fake.errors.append(repr(exc))
                    kind, data = fake.reply({}, self.path)
                self._send(200, kind, data)

            def _send(self, code, kind, data):
                self.send_response(code)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def step(self, done):
        return self.script[done] if done < len(self.script) else DEFAULT_TEXT

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class FakeResponses(_Fake):
    """The Responses API, streamed: one output item per request."""

    def reply(self, body, path):
        items = body.get("input") or []
        done = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call_output")
        step = self.step(done)
        if isinstance(step, tuple):
            item = {"type": "function_call", "name": step[0], "arguments": json.dumps(step[1]),
                    "call_id": "call_%d" % done}
        else:
            item = {"type": "message", "role": "assistant", "id": "msg_%d" % done,
                    "content": [{"type": "output_text", "text": step}]}
        usage = {"input_tokens": 1, "input_tokens_details": None, "output_tokens": 1,
                 "output_tokens_details": None, "total_tokens": 2}
        events = [{"type": "response.created", "response": {"id": "resp_%d" % done}},
                  {"type": "response.output_item.done", "item": item},
                  {"type": "response.completed", "response": {"id": "resp_%d" % done, "usage": usage}}]
        data = "".join("event: {}\ndata: {}\n\n".format(e["type"], json.dumps(e)) for e in events)
        return "text/event-stream", data.encode()


class FakeGemini(_Fake):
    """generateContent and streamGenerateContent: one candidate per request."""

    def reply(self, body, path):
        done = sum(1 for c in body.get("contents") or () for p in c.get("parts") or ()
                   if isinstance(p, dict) and "functionResponse" in p)
        step = self.step(done)
        part = {"functionCall": {"name": step[0], "args": step[1]}} if isinstance(step, tuple) else {"text": step}
        chunk = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}}
        if "alt=sse" in path:
            return "text/event-stream", (f"data: {json.dumps(chunk)}\r\n\r\n").encode()
        return "application/json", json.dumps(chunk).encode()
