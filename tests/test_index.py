"""The memory's index structures: row handles, compact BM25 postings, block vector tables,
index terms, and the numpy paths against their stdlib twins."""
import math
import random
from array import array

import pytest

import ai_smartness as ais
import topics_data

np = pytest.importorskip("numpy")


def naive_bm25(docs, query, k1=1.2, b=0.75):
    """Okapi BM25 straight from the formula, over {doc: tokens}."""
    n = len(docs)
    avg = sum(map(len, docs.values())) / n
    out = {}
    for tok in set(query):
        holders = [d for d, toks in docs.items() if tok in toks]
        idf = math.log(1 + (n - len(holders) + 0.5) / (len(holders) + 0.5))
        for d in holders:
            tf = docs[d].count(tok)
            out[d] = out.get(d, 0.0) + idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(docs[d]) / avg))
    return out


def random_docs(seed, count=300):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(60)]
    return {f"d{i:04d}": [rng.choice(vocab[:rng.randint(5, 60)]) for _ in range(rng.randint(1, 40))]
            for i in range(count)}


def test_rows_reuse_freed_rows_and_never_grow_past_the_most_keys_held():
    rows = ais.Rows()
    assert [rows.add(k) for k in "abc"] == [0, 1, 2]
    assert rows.add("b") == 1  # a known key keeps its row
    assert rows.discard("b") == 1 and rows.discard("b") is None
    assert rows.add("d") == 1 and rows.keys == ["a", "d", "c"] and len(rows) == 3


def test_bm25_postings_match_the_formula_through_adds_removes_and_bulk_loading():
    docs = random_docs(1)
    docs["dbig"] = ["w1"] * 300 + ["w2"] * 3  # a frequency past 255 goes to `big`
    incremental, bulk = ais.LexicalIndex(), ais.LexicalIndex()
    bulk.bulk()
    for doc, toks in docs.items():
        incremental.add(doc, toks)
        bulk.add(doc, toks)
    bulk.flush()
    assert incremental.big == bulk.big == {("w1", incremental.rows.of["dbig"]): 300}
    for tok in {t for toks in docs.values() for t in toks}:
        assert sorted(incremental.postings[tok]) == sorted(bulk.postings[tok])
    rng = random.Random(2)
    for doc in rng.sample(sorted(docs), 120) + ["dbig"]:
        # Half the removals give the tokens back, half do not, one gives the wrong ones.
        toks = docs.pop(doc)
        given = toks if rng.random() < 0.5 else (["w0"] * len(toks) if doc == "d0000" else None)
        incremental.remove(doc, given)
        bulk.remove(doc, given)
    assert not incremental.big and not bulk.big
    for query in (["w1"], ["w3", "w7", "w7"], ["w59", "nothing"], ["w0", "w1", "w2", "w4"]):
        expected = naive_bm25(docs, query)
        for index in (incremental, bulk):
            got = index.scores(query)
            assert got.keys() == expected.keys()
            assert all(got[d] == pytest.approx(v, rel=1e-12) for d, v in expected.items())
            vector = index.score_vector(np, query, len(index.rows.keys))
            assert {index.rows.keys[r]: v for r, v in enumerate(vector.tolist()) if v} == got


def test_bm25_frequencies_past_255_score_as_counted():
    index = ais.LexicalIndex()
    index.add("a", ["x"] * 400 + ["y"])
    index.add("b", ["x"] * 2 + ["y"] * 10)
    docs = {"a": ["x"] * 400 + ["y"], "b": ["x"] * 2 + ["y"] * 10}
    assert index.scores(["x"]) == pytest.approx(naive_bm25(docs, ["x"]))
    vector = index.score_vector(np, ["x"], 2)
    assert vector.tolist() == pytest.approx([naive_bm25(docs, ["x"])[d] for d in "ab"])


def unit(rng, dim=384):
    vec = [rng.gauss(0, 1) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in vec))
    return array("f", [v / norm for v in vec])


@pytest.mark.parametrize("numpy_there", [True, False])
def test_vector_table_keeps_vectors_by_key_across_blocks(monkeypatch, numpy_there):
    if not numpy_there:
        monkeypatch.setattr(ais, "numpy_or_none", lambda: None)
    monkeypatch.setattr(ais.VectorTable, "BLOCK", 16)  # several blocks from a few vectors
    rng = random.Random(3)
    table = ais.VectorTable()
    vecs = {f"k{i}": unit(rng, 8) for i in range(50)}
    table.put_many(list(vecs)[:20], list(vecs.values())[:20])  # rows across a block boundary
    for key in list(vecs)[20:]:
        table[key] = vecs[key]
    for key in list(vecs)[::3]:
        assert table.pop(key) == vecs.pop(key)
    table["late"] = vecs["late"] = unit(rng, 8)  # takes a freed row
    assert len(table) == len(vecs) and set(table) == set(vecs) and "k0" not in table
    assert all(list(table[k]) == pytest.approx(list(v), abs=1e-7) for k, v in vecs.items())
    q = unit(rng, 8)
    expected = {k: sum(a * b for a, b in zip(v, q)) for k, v in vecs.items()}
    assert table.scores(q) == pytest.approx(expected, abs=1e-6)
    some = list(vecs)[5:12]
    assert table.scores(q, some) == pytest.approx({k: expected[k] for k in some}, abs=1e-6)
    best = sorted(expected, key=lambda k: -expected[k])[:5]
    assert [k for k, _ in table.top(q, 5)] == best
    with pytest.raises(KeyError):
        table["k0"]


def test_quantized_vectors_keep_cosines_within_1e_5():
    rng = random.Random(4)
    table = ais.VectorTable(quantize_above=100)
    vecs = {f"k{i}": unit(rng) for i in range(140)}
    for key in list(vecs)[:90]:
        table[key] = vecs[key]
    assert not table.quantized
    table.put_many(list(vecs)[90:], list(vecs.values())[90:])  # crosses the threshold mid-batch
    assert table.quantized and table._blocks[0].dtype == np.int16
    for _ in range(5):
        q = unit(rng)
        expected = {k: sum(a * b for a, b in zip(v, q)) for k, v in vecs.items()}
        got = table.scores(q)
        assert max(abs(got[k] - expected[k]) for k in vecs) < 1e-5
        rows = np.array([table.rows.of[k] for k in list(vecs)[::7]])
        at, present = table.cosines_at(rows, q)
        assert present.all() and at.tolist() == pytest.approx([got[k] for k in list(vecs)[::7]], abs=1e-6)


def regex_terms(text):
    """terms() by the general (regex) path, which non-ASCII text takes."""
    text = text.lower()
    chains = ais._CHAIN_RE.findall(text)
    idents = [w for w in chains if "_" in w or "." in w]
    parts = ais._PART_RE.findall(text) if idents else chains
    return [t for t in map(ais._term, parts) if t] + idents


@pytest.mark.parametrize("text", [
    "Fix the tenant_id filter in auth.py before v2.1 ships",
    "don't split... on dots. Or _leading_ and trailing_ underscores__",
    "x.y_z.w a_.b ._c 3.14 e.g. U.S.A. __init__.py -- path/to/file.js:12",
    "ALL CAPS, MixedCase, snake_case_name, CamelCaseName; tabs\tand\nnewlines",
    "",
])
def test_ascii_terms_fast_path_matches_the_regex_path(text):
    assert ais.terms(text) == regex_terms(text)


def test_terms_of_every_captured_text_match_the_regex_path():
    for _, text in topics_data.interleaved():
        assert ais.terms(text) == regex_terms(text)
    assert "auth.py" in ais.terms("Résumé: l'erreur vient de auth.py")  # non-ASCII: the regex path


def test_numpy_and_stdlib_retrieval_rank_the_same(project, monkeypatch):
    # Small thresholds put this store on the large-store paths: dense scores for candidate
    # threads only, fusion for the best few, int16 message vectors.
    monkeypatch.setattr(ais, "FULL_SCAN_MESSAGES", 12)
    monkeypatch.setattr(ais, "FUSION_POOL", 8)
    mem = ais.open_memory(str(project))
    for _, text in topics_data.interleaved():
        mem.capture(text)
    mem.capture("The Postgres migration depends on the JWT refresh token table being created first")
    queries = ("JWT refresh token", "Postgres migration rollback", "CSS layout bug in the sidebar",
               "which table does the migration create?", "nothing matches zebra")
    with_numpy = ais.open_memory(str(project))
    with_numpy.load()
    assert with_numpy.mvec.quantized
    monkeypatch.setattr(ais, "numpy_or_none", lambda: None)
    stdlib = ais.open_memory(str(project))
    stdlib.load()
    assert stdlib.mvec.np is None
    for query in queries:
        a, b = with_numpy.search(query, 10), stdlib.search(query, 10)
        assert [h["message_id"] for h in a] == [h["message_id"] for h in b], query
        assert [h["score"] for h in a] == pytest.approx([h["score"] for h in b], abs=2e-4)
