#!/usr/bin/env python3
"""What the optional LLM costs on a real replay: calls and tokens per capture, beside the
heuristic run's retrieval figures.

usage: python bench/llm_cost.py [--data FILE] [--limit-conversations N] [--embedder hash|minilm]
                                [--budget N] [--answer P,P] [--json]

Each LoCoMo conversation is replayed twice through the product, as bench/locomo.py does it
(its run_product: every turn captured, then every question of categories 1-4 put to context
and search): once with the LLM off (the heuristics alone), once with the anthropic backend
pointed at the stand-in Messages API (tests/fake_anthropic.py, served in-process on
127.0.0.1). In the second run each capture is followed by what the daemon does after a drain
(LLM.note_captures, then LLMWork.run: a pass only when one is due), and the final drain by a
forced pass. The per-capture cap (llm.max_calls_per_capture) is switched off, so the figures
are those of the batching alone. Calls and tokens are read from the product's own ledger
(llm_usage.json); the stand-in counts tokens as 4 characters each. The stand-in answers the
JSON each prompt asks for from the data it is sent (titles and summaries made of the
thread's words, the candidate thread sharing the most words with a borderline message...):
its judgement is a rule of thumb, so the LLM run's retrieval figures show that nothing
breaks, not what a real model would add. Exit codes as bench/locomo.py's.
"""

import argparse
import json
import os
import re
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(os.path.dirname(BENCH), "tests"))
import locomo  # noqa: E402  (the replay and the metrics are bench/locomo.py's)
from fake_anthropic import LLM_MARKER, FakeAnthropic, request_text  # noqa: E402

# The default replay (LoCoMo dev, beside the project).
DEFAULT_DATA = os.path.join(os.path.dirname(BENCH), "..", "shared", "bench", "locomo_dev.json")
# Words the stand-in takes from what it titles, summarises or condenses.
TITLE_WORDS, SUMMARY_WORDS, TOPIC_WORDS = 6, 24, 4
# The purposes of the batched prompts, told apart by a key of their items, and the key of
# the list each answer holds.
SHAPES = {"messages": "titles", "threads": "borderline", "a": "bridges", "source": "outputs", "newer": "rules"}
PURPOSES = tuple(SHAPES.values())
ANSWER_KEYS = {"titles": "threads", "borderline": "items", "bridges": "bridges", "outputs": "outputs", "rules": "pairs"}
# Words (at least, and as a share of its own) a borderline message must share with a candidate
# thread for the stand-in to pick it.
SHARED_WORDS, SHARED_SHARE = 3, 0.0


def words(text):
    """Its content words: a LoCoMo turn's "Speaker:" says who talks, not what about."""
    return [w for w in locomo.tokenize(re.sub(r"(?:^|(?<=\s))[A-Z]\w*:", " ", text)) if len(w) > 2]


def stand_in(body, purposes=PURPOSES):
    """The stand-in model: the JSON answer to one of the product's prompts (told apart by
    the shape of what it is sent); "{}" (nothing to change) for a purpose not in `purposes`."""
    data = json.JSONDecoder().raw_decode(request_text(body).split(LLM_MARKER, 1)[-1].lstrip())[0]
    if "transcript" in data:
        return json.dumps({"decisions": [], "open_questions": [], "next_steps": [],
                           "state": " ".join(data["transcript"][-1]["text"].split()[:SUMMARY_WORDS])})
    items = data.get("items") or []
    first = next(iter(items), {})
    purpose = next((v for k, v in SHAPES.items() if k in first), None)
    if purpose not in purposes:
        return "{}"
    out = []
    for item in items:
        if "messages" in item:  # titles
            text = " ".join(item["messages"])
            ranked = sorted(set(words(text)), key=lambda w: (-text.lower().count(w), w))
            out.append({"id": item["id"], "title": " ".join(item["messages"][0].split()[:TITLE_WORDS]),
                        "summary": " ".join(item["messages"][-1].split()[:SUMMARY_WORDS]),
                        "topics": ranked[:TOPIC_WORDS]})
        elif "threads" in item:  # borderline: the thread sharing the most words, if enough
            mine = set(words(item["message"]))
            best = max(item["threads"], default=None,
                       key=lambda t: len(mine & set(words(t["title"] + " " + t["summary"]))))
            shared = len(mine & set(words(best["title"] + " " + best["summary"]))) if best else 0
            sure = shared >= max(SHARED_WORDS, SHARED_SHARE * len(mine))
            out.append({"id": item["id"], "thread": best["id"] if sure else None,
                        "reason": f"{shared} words in common"})
        elif "a" in item:  # bridges
            out.append({"id": item["id"], "type": "extends", "reason": "the same subject goes on"})
        elif "source" in item:  # long outputs
            out.append({"id": item["id"], "keep": True, "condensed": " ".join(item["text"].split()[:SUMMARY_WORDS])})
        elif "newer" in item:  # rules
            out.append({"id": item["id"], "replaces": False, "reason": "both hold"})
    return json.dumps({ANSWER_KEYS[purpose]: out})


def with_llm(ais, url, usage):
    """bench/locomo.py's open_product, with the LLM on and run as the daemon runs it; each
    memory's ledger is added to `usage` when it closes."""
    plain = locomo.open_product

    def open_product(ais_, embedder):
        mem, project = plain(ais_, embedder)
        mem.llm = ais.LLM(mem.store, {"llm": {"backend": "anthropic", "base_url": url, "max_calls_per_capture": 0,
                                              "max_calls_per_day": 10 ** 6, "max_tokens_per_day": 10 ** 10}})
        capture, drain, inside = mem.capture, mem.drain, []

        def capture_then_pass(*a, **kw):
            inside.append(1)  # capture() drains: that drain is not the replay's last
            try:
                out = capture(*a, **kw)
            finally:
                inside.pop()
            mem.llm.note_captures(1)
            mem.llm_work.run()
            return out

        def drain_then_pass(*a, **kw):
            out = drain(*a, **kw)
            if not inside:
                mem.llm_work.run(force=True)
            return out

        def close():
            for day in (mem.store.llm_usage().get("days") or {}).values():
                for key in ("calls", "tokens", "failures", "captures"):
                    usage[key] = usage.get(key, 0) + day.get(key, 0)
                for purpose, spent in day.get("purposes", {}).items():
                    by_purpose = usage.setdefault("purposes", {})
                    by_purpose[purpose] = by_purpose.get(purpose, 0) + spent.get("calls", 0)
        mem.capture, mem.drain, mem.close = capture_then_pass, drain_then_pass, close
        return mem, project
    return open_product


def replay(ais, convs, args, results, timing):
    for conv in convs:
        locomo.run_product(ais, conv, args.embedder, args.budget, results, timing)


def main(argv=None):
    p = argparse.ArgumentParser(prog="llm_cost.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=DEFAULT_DATA, help="LoCoMo-format JSON file (default: LoCoMo dev)")
    p.add_argument("--limit-conversations", type=int, metavar="N", help="only the first N conversations")
    p.add_argument("--embedder", choices=("minilm", "hash"), default="hash")
    p.add_argument("--budget", type=int, default=locomo.BUDGET, help="context characters (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of markdown")
    p.add_argument("--answer", default=",".join(PURPOSES), metavar="P,P",
                   help="purposes the stand-in answers; the others get {} (default: all)")
    args = p.parse_args(argv)
    answered = set(args.answer.split(","))
    os.environ["AI_SMARTNESS_EMBEDDER"] = args.embedder
    os.environ.setdefault("ANTHROPIC_API_KEY", "stand-in")  # the stand-in checks no key
    try:
        convs = locomo.load_conversations(args.data)[:args.limit_conversations]
        ais = locomo.import_product()
        runs = {}
        for name in ("heuristics", "llm"):
            results, timing, usage = [], {"question_ms": [], "search_ms": [], "capture_ms": []}, {}
            with FakeAnthropic(llm=lambda body: stand_in(body, answered)) as api:
                if name == "llm":
                    locomo.open_product, plain = with_llm(ais, api.url, usage), locomo.open_product
                try:
                    replay(ais, convs, args, results, timing)
                finally:
                    if name == "llm":
                        locomo.open_product = plain
                sent = len(api.bodies("llm"))
            captures = sum(len(c["turns"]) for c in convs)
            runs[name] = {"results": locomo.aggregate(results)["overall"], "captures": captures,
                          "requests_seen_by_stand_in": sent, "usage": usage,
                          "calls_per_capture": round(usage.get("calls", 0) / captures, 4) if captures else 0.0,
                          "tokens_per_capture": round(usage.get("tokens", 0) / captures, 1) if captures else 0.0}
    except locomo.BenchError as e:
        print(f"llm_cost.py: error: {e}", file=sys.stderr)
        return 1
    report = {"data": os.path.abspath(args.data), "conversations": len(convs), "embedder": args.embedder,
              "answered": sorted(answered), "runs": runs}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"LLM cost on {len(convs)} LoCoMo conversations, {runs['llm']['captures']} captures, "
          f"embedder {args.embedder}, budget {args.budget}, stand-in answers {args.answer}\n")
    print("| run | calls | calls/capture | tokens | tokens/capture | failures | R@5 | R@10 | NDCG@10 | answer in ctx |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, run in runs.items():
        r, u = run["results"], run["usage"]
        print(f"| {name} | {u.get('calls', 0)} | {run['calls_per_capture']} | {u.get('tokens', 0)} | "
              f"{run['tokens_per_capture']} | {u.get('failures', 0)} | " +
              " | ".join(locomo.fmt(r[m]) for m in ("recall@5", "recall@10", "ndcg@10", "answer_recall")) + " |")
    print("\ncalls by purpose (llm run): " + json.dumps(runs["llm"]["usage"].get("purposes", {}), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
