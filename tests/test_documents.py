"""Document sources: real files in tmp_path, the real ``datasets`` library (streaming, offline), no mocks."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import unicodedata
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spade_gym.documents import (
    DEFAULT_MAX_TOKENS,
    BuiltinDocuments,
    Document,
    DocumentError,
    DocumentSource,
    HFDocuments,
    LocalDocuments,
    cap_tokens,
    clean_text,
    load_documents,
)
from spade_gym.errors import SpadeError

# ------------------------------------------------------------------------------------------------ helpers


def prose(i: int, words: int = 40) -> str:
    """A distinct, clean English-like document."""
    rng = random.Random(i)
    vocab = "river stone market ledger orbit prime harvest signal engine garden tower cipher".split()
    body = " ".join(rng.choice(vocab) for _ in range(words))
    return f"Document {i}: {body}."


def write_jsonl(path: Path, rows: list[Any], raw_lines: dict[int, str] | None = None) -> Path:
    """One JSON value per line; ``raw_lines`` inserts verbatim lines at 0-based positions."""
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    for at, line in sorted((raw_lines or {}).items()):
        lines.insert(at, line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_parquet(path: Path, columns: dict[str, list[Any]], row_group_size: int = 4) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def texts(docs: list[Document]) -> list[str]:
    return [d.text for d in docs]


@pytest.fixture()
def corpus_jsonl(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl", [{"text": prose(i), "id": i} for i in range(30)])


# ------------------------------------------------------------------------------------------------ cleaning


def test_clean_text_normalises_whitespace_controls_and_unicode() -> None:
    raw = "  Title\r\nfirst line   \r\n\r\n\r\n\r\nsecond\x00 line\x07\tkept\x85third\u2028fourth \x0c end\ufeff  "
    assert clean_text(raw) == "Title\nfirst line\n\nsecond line\tkept\nthird\nfourth\n end"  # indentation kept
    assert clean_text("cafe\u0301 au lait, s'il vous plait") == "caf\u00e9 au lait, s'il vous plait"  # NFC
    assert unicodedata.is_normalized("NFC", clean_text("e\u0301" * 30) or "")


def test_clean_text_strips_nul_and_lone_surrogates() -> None:
    text = clean_text("valid text\x00 with a NUL and a lone \ud800surrogate\udfff here")
    assert text == "valid text with a NUL and a lone surrogate here"
    text.encode("utf-8")  # would raise on a surrogate
    # JSON escapes can smuggle lone surrogates in: decoded, then cleaned away.
    decoded = json.loads('"a JSON string with \\ud83d half of an emoji pair"')
    assert clean_text(decoded) == "a JSON string with  half of an emoji pair"


@pytest.mark.parametrize(
    "text",
    [
        "数学是研究数量、结构、变化以及空间等概念的一门学科。欧几里得的《几何原本》影响了两千年。",
        "الرياضيات هي دراسة الكميات والبنى والتغير والفضاء، وقد تطورت عبر قرون طويلة.",
        "Математика — наука о структурах, порядке и отношениях, исторически сложившаяся на основе счёта.",
        "गणित ऐसी विद्याओं का समूह है जो संख्याओं, मात्राओं, परिमाणों, रूपों और उनके आपसी रिश्तों का अध्ययन करती हैं।",
        "数学（すうがく）は、数・量・図形などに関する学問であり、理学の一種である。",
        "Emoji and symbols stay: 2 + 3 = 5, 10 % off, \u00a35, \u20ac7, 30 \u00b0C \u2192 86 \u00b0F \U0001f642",
    ],
)
def test_clean_text_keeps_other_scripts_unchanged(text: str) -> None:
    assert clean_text(text) == text


def test_clean_text_rejects_binary_junk_and_short_text() -> None:
    assert clean_text(bytes(range(256)).decode("latin-1")) is None
    rng = random.Random(7)
    noise = bytes(rng.randrange(256) for _ in range(4000))
    assert clean_text(noise.decode("utf-8", errors="replace")) is None
    assert clean_text(noise.decode("latin-1")) is None
    assert clean_text(noise.decode("utf-8", errors="surrogateescape")) is None
    assert clean_text("\ue000\ue001\ue002 private use " * 5) is None  # mostly Co code points
    assert clean_text("") is None
    assert clean_text("   \n\n\t  ") is None
    assert clean_text("too short") is None
    assert clean_text("x" * 19) is None and clean_text("x" * 20) == "x" * 20
    # A stray replacement character or two in a long text is not junk.
    assert clean_text("a mostly fine text with one \ufffd replacement character in it, and more words") is not None
    with pytest.raises(TypeError, match="expects str, got bytes"):
        clean_text(b"bytes are not text")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ token caps


def test_cap_tokens_regex_cuts_exactly_at_a_token_boundary() -> None:
    text = " ".join(f"word{i}" for i in range(500))  # no sentence ends: the cut is exact
    capped, count, truncated = cap_tokens(text, 50)
    assert (count, truncated) == (50, True)
    assert capped == " ".join(f"word{i}" for i in range(50))
    assert cap_tokens("short text, seven tokens", 50) == ("short text, seven tokens", 5, False)
    assert cap_tokens(text, 500) == (text, 500, False)  # exactly at the budget: not truncated
    with pytest.raises(ValueError, match="max_tokens must be at least 1, got 0"):
        cap_tokens(text, 0)


def test_token_count_is_the_same_on_the_ascii_fast_path() -> None:
    rng = random.Random(5)
    for _ in range(300):
        text = "".join(chr(rng.randrange(128)) for _ in range(rng.randrange(1, 80)))
        expected = len(re.findall(r"\w+|[^\w\s]", text))
        assert cap_tokens(text, 10**6)[1] == expected
        assert cap_tokens(text + " \u00e9", 10**6)[1] == expected + 1  # the general (regex) path


def test_cap_tokens_prefers_a_sentence_end_near_the_cut() -> None:
    text = "One two three four five six seven eight nine. " + "ten eleven twelve thirteen fourteen " * 4
    capped, count, truncated = cap_tokens(text, 11)
    assert truncated and capped == "One two three four five six seven eight nine."
    assert count == 10


def test_cap_tokens_cjk_counts_characters_not_whole_runs() -> None:
    text = "数学是研究数量结构变化以及空间等概念的一门学科"
    capped, count, truncated = cap_tokens(text, 5)
    assert (capped, count, truncated) == ("数学是研究", 5, True)


def test_cap_tokens_with_a_real_tokenizer_is_exact_and_logarithmic() -> None:
    calls = 0

    def byte_tokenizer(s: str) -> list[int]:
        nonlocal calls
        calls += 1
        return list(s.encode("utf-8"))

    text = " ".join(f"token{i}" for i in range(2000)) + " ünïcödé " * 50
    for budget in (1, 7, 100, 1001):
        calls = 0
        capped, count, truncated = cap_tokens(text, budget, byte_tokenizer)
        assert truncated and count == len(capped.encode()) <= budget
        assert text.startswith(capped)
        if budget >= 100:  # at a word boundary, and the next word would not fit
            assert budget - count <= len(" token1999")
        assert calls <= 40, calls
    capped, count, truncated = cap_tokens("fits easily", 100, byte_tokenizer)
    assert (capped, count, truncated) == ("fits easily", 11, False)
    # Never splits a character from its combining marks.
    marks = "नमस्ते दुनिया " * 20
    capped, count, _ = cap_tokens(marks, 40, byte_tokenizer)
    assert count <= 40 and unicodedata.category(marks[len(capped)])[0] != "M"


# ------------------------------------------------------------------------------------------------ builtin


def test_builtin_corpus_is_large_varied_clean_and_well_sized() -> None:
    source = BuiltinDocuments()
    assert len(source) >= 64
    docs = source.sample(len(source))
    assert len({d.source["id"] for d in docs}) == len(source)  # one epoch: each document once
    topics: set[str] = set()
    for doc in docs:
        assert 80 <= len(doc.text.split()) <= 200, doc.source["id"]
        assert clean_text(doc.text) == doc.text
        assert doc.title and doc.source["kind"] == "builtin" and not doc.source["truncated"]
        assert doc.source["tokens"] <= DEFAULT_MAX_TOKENS
    raw = Path(__file__).resolve().parents[1] / "src" / "spade_gym" / "data" / "documents.jsonl"
    for line in raw.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        assert set(entry) == {"id", "title", "topic", "text"}
        topics.add(entry["topic"])
    assert len(topics) >= 15


def test_builtin_sampling_is_seeded_and_cycles_epochs() -> None:
    a, b, c = BuiltinDocuments(seed=3), BuiltinDocuments(seed=3), BuiltinDocuments(seed=4)
    first = a.sample(10)
    assert first == b.sample(10)
    assert texts(first) != texts(c.sample(10))
    n = len(a)
    rest = a.sample(n - 10)
    epoch0 = [d.source["id"] for d in first + rest]
    epoch1 = [d.source["id"] for d in a.sample(n)]
    assert sorted(epoch0) == sorted(epoch1) and epoch0 != epoch1  # a new permutation
    assert a.stats["epoch"] == 1
    assert a.sample(0) == []
    with pytest.raises(ValueError, match="n must be >= 0, got -1"):
        a.sample(-1)


# ------------------------------------------------------------------------------------------------ local files


def test_jsonl_skips_malformed_lines_and_rows_without_text(tmp_path: Path) -> None:
    rows = [{"text": prose(i), "title": f"T{i}", "id": f"doc-{i}"} for i in range(6)]
    path = write_jsonl(
        tmp_path / "mixed.jsonl",
        rows,
        raw_lines={
            1: "{not json at all",
            3: json.dumps({"body": "no text field here, but long enough"}),
            4: json.dumps("A plain JSON string line is a document too."),
            5: json.dumps({"text": 42}),
            6: "",
            7: json.dumps([1, 2, 3]),
        },
    )
    source = LocalDocuments(path, seed=1, shuffle_buffer=0)  # file order: the first problem is line 2
    with pytest.warns(UserWarning, match=r"mixed\.jsonl: line 2: not valid JSON"):
        docs = source.sample(7)
    got = {d.text for d in docs}
    assert got == {prose(i) for i in range(6)} | {"A plain JSON string line is a document too."}
    assert source.stats["malformed"] == 4 and source.stats["accepted"] == 7
    line_of = {d.text: d.source["line"] for d in docs}
    lines = path.read_text().splitlines()
    for text, line in line_of.items():
        entry = json.loads(lines[line - 1])  # a JSON string, or an object with the text under "text"
        assert (entry if isinstance(entry, str) else entry.get("text")) == text
    by_text = {d.text: d for d in docs}
    assert by_text[prose(2)].title == "T2" and by_text[prose(2)].source["id"] == "doc-2"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning is given once per source
        source.sample(20)


def test_parquet_rows_row_groups_nulls_and_provenance(tmp_path: Path) -> None:
    n = 23
    values: list[str | None] = [prose(i) for i in range(n)]
    values[5] = None
    values[9] = "\x00\x01\x02" * 50  # junk
    path = write_parquet(
        tmp_path / "docs.parquet",
        {"text": values, "title": [f"Title {i}" for i in range(n)], "id": list(range(n))},
        row_group_size=5,
    )
    source = LocalDocuments(path, shuffle_buffer=4, seed=2)
    with pytest.warns(UserWarning, match="row 5"):
        docs = source.sample(n - 2)
    assert {d.source["row"] for d in docs} == set(range(n)) - {5, 9}
    for doc in docs:
        row = doc.source["row"]
        assert doc.text == values[row] and doc.title == f"Title {row}" and doc.source["id"] == row
        assert doc.source["kind"] == "parquet" and doc.source["path"] == str(path)
    assert source.stats["rejected"] == 1 and source.stats["malformed"] == 1
    again = LocalDocuments(path, shuffle_buffer=4, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert again.sample(n - 2) == docs
    other = LocalDocuments(path, shuffle_buffer=4, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [d.source["row"] for d in other.sample(n - 2)] != [d.source["row"] for d in docs]


def test_parquet_without_the_text_column_is_a_clear_error(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "other.parquet", {"body": [prose(i) for i in range(3)]})
    with pytest.warns(UserWarning), pytest.raises(DocumentError, match=r"no column 'text' \(columns: body\)"):
        LocalDocuments(path)  # found when the source is built
    assert LocalDocuments(path, text_field="body").sample(3)


def test_corrupt_parquet_is_a_document_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 this is not really parquet" * 10)
    write_parquet(tmp_path / "good.parquet", {"text": [prose(1)]})
    with pytest.warns(UserWarning), pytest.raises(DocumentError, match="1 file.*skipped.*not a readable parquet file"):
        LocalDocuments(path).sample()
    with pytest.warns(UserWarning, match="broken.parquet"):
        folder = LocalDocuments(tmp_path)  # the broken file is skipped, the good one read
    assert texts(folder.sample(2)) == [prose(1)] * 2
    assert folder.stats["skipped_files"] == 1 and folder.stats["malformed"] == 0


def test_txt_folder_each_file_one_document(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    for i in range(3):
        (folder / f"n{i}.txt").write_text(prose(i) + "\n\n\n\nSecond paragraph.", encoding="utf-8")
    (folder / "sub" / "deep.txt").write_text(prose(9), encoding="utf-8")
    (folder / "readme.md").write_text("ignored: not a supported type", encoding="utf-8")
    (folder / ".hidden.txt").write_text(prose(99), encoding="utf-8")
    source = LocalDocuments(folder)
    docs = source.sample(4)
    assert {d.source["path"] for d in docs} == {str(folder / f"n{i}.txt") for i in range(3)} | {
        str(folder / "sub" / "deep.txt")
    }
    assert all(d.source["kind"] == "file" and "line" not in d.source for d in docs)
    assert prose(0) + "\n\nSecond paragraph." in texts(docs)
    assert len(source.sample(8)) == 8  # cycles


def test_mixed_folder_of_jsonl_parquet_and_txt(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"text": prose(i)} for i in range(3)])
    write_parquet(tmp_path / "b.parquet", {"text": [prose(i) for i in range(10, 13)]})
    (tmp_path / "c.txt").write_text(prose(20), encoding="utf-8")
    docs = LocalDocuments(tmp_path, seed=5).sample(7)
    assert set(texts(docs)) == {prose(i) for i in (0, 1, 2, 10, 11, 12, 20)}
    assert {d.source["kind"] for d in docs} == {"file", "parquet"}


def test_txt_with_invalid_utf8_is_kept_when_mostly_text_and_rejected_when_binary(tmp_path: Path) -> None:
    ok = tmp_path / "ok.txt"
    ok.write_bytes(prose(1).encode() + b" \xff " + prose(2).encode())
    doc = LocalDocuments(ok).sample()[0]
    assert "\ufffd" in doc.text
    binary = tmp_path / "blob.txt"
    rng = random.Random(3)
    binary.write_bytes(bytes(rng.randrange(256) for _ in range(5000)))
    with pytest.raises(DocumentError, match=r"1 rejected as junk"):
        LocalDocuments(binary).sample()


def test_folder_without_usable_documents_names_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "junkdir"
    folder.mkdir()
    (folder / "a.txt").write_bytes(bytes(range(256)) * 4)
    (folder / "b.txt").write_text("tiny", encoding="utf-8")
    (folder / "c.jsonl").write_text('{"text": "\\u0000\\u0001\\u0002\\u0003 junk"}\n', encoding="utf-8")
    with pytest.raises(DocumentError) as info:
        LocalDocuments(folder)  # an all-junk corpus fails when the source is built
    message = str(info.value)
    assert "junkdir" in message and "read 3 record(s)" in message and "3 rejected" in message
    assert isinstance(info.value, SpadeError) and info.value.category == "DOCUMENTS"


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("missing.jsonl", None, "does not exist"),
        ("empty.jsonl", "", "is empty"),
        (
            "table.csv",
            "text\nhello world, long enough\n",
            r"unsupported document file type '\.csv'.*\.jsonl, \.parquet, \.txt",
        ),
    ],
)
def test_bad_paths_raise_document_error(tmp_path: Path, name: str, content: str | None, match: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(DocumentError, match=match):
        LocalDocuments(path)


def test_empty_folder_and_blank_file(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.md").write_text("not supported", encoding="utf-8")
    with pytest.raises(DocumentError, match="holds no .jsonl, .parquet, .txt file"):
        LocalDocuments(tmp_path / "empty")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n   \n", encoding="utf-8")
    with pytest.raises(DocumentError, match="no usable document.*read 0 record"):
        LocalDocuments(blank).sample()


def test_many_rejects_in_a_row_raise_instead_of_spinning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import spade_gym.documents as documents

    monkeypatch.setattr(documents, "MAX_CONSECUTIVE_REJECTS", 50)
    junk = [{"text": "short"} for _ in range(120)]
    with pytest.raises(DocumentError, match="the first 50 documents of .* are all unusable"):
        LocalDocuments(write_jsonl(tmp_path / "junk_first.jsonl", junk + [{"text": prose(1)}]))
    source = LocalDocuments(write_jsonl(tmp_path / "junk_after.jsonl", [{"text": prose(1)}] + junk), shuffle_buffer=0)
    assert texts(source.sample()) == [prose(1)]
    with pytest.raises(DocumentError, match="50 documents in a row were unusable"):
        source.sample()


# ------------------------------------------------------------------------------------------------ provenance


def test_provenance_is_small_json_and_hashes_the_text(corpus_jsonl: Path) -> None:
    long_text = "All work and no play. " * 2000
    path = write_jsonl(corpus_jsonl.parent / "long.jsonl", [{"text": long_text, "title": "Long"}])
    for source in (BuiltinDocuments(), LocalDocuments(corpus_jsonl), LocalDocuments(path, max_tokens=64)):
        for doc in source.sample(3):
            encoded = json.dumps(doc.source)
            assert len(encoded) < 600 and doc.text not in encoded
            assert doc.source["sha256"] == hashlib.sha256(doc.text.encode()).hexdigest()
            assert isinstance(doc.source["tokens"], int) and isinstance(doc.source["truncated"], bool)
    capped = LocalDocuments(path, max_tokens=64).sample()[0]
    assert capped.source["truncated"] and capped.source["tokens"] <= 64 and capped.title == "Long"
    exact = LocalDocuments(path, max_tokens=64, tokenizer=lambda s: list(s.encode())).sample()[0]
    assert exact.source["tokens"] == len(exact.text.encode()) <= 64


def test_sources_satisfy_the_protocol_and_describe_themselves(corpus_jsonl: Path) -> None:
    for source in (BuiltinDocuments(), LocalDocuments(corpus_jsonl)):
        assert isinstance(source, DocumentSource)
        source.sample(2)
        line = source.describe()
        assert "\n" not in line and "epoch 0" in line and "2 sampled" in line


# ------------------------------------------------------------------------------------------------ resume


def resume_check(make: Callable[[], DocumentSource], first: int = 5, then: int = 5) -> None:
    """sample ``first``, save, sample ``then`` (A); a fresh source loading the state samples A again."""
    source = make()
    source.sample(first)
    state = json.loads(json.dumps(source.state_dict()))  # checkpoints are JSON
    expected = source.sample(then)
    fresh = make()
    fresh.load_state_dict(state)
    assert fresh.sample(then) == expected


def test_resume_builtin() -> None:
    resume_check(lambda: BuiltinDocuments(seed=11))
    resume_check(lambda: BuiltinDocuments(seed=11), first=len(BuiltinDocuments()) - 2, then=6)  # across an epoch


def test_resume_local(tmp_path: Path, corpus_jsonl: Path) -> None:
    resume_check(lambda: LocalDocuments(corpus_jsonl, shuffle_buffer=8, seed=3))
    resume_check(lambda: LocalDocuments(corpus_jsonl, shuffle_buffer=8, seed=3), first=27, then=10)
    pq = write_parquet(tmp_path / "r.parquet", {"text": [prose(i) for i in range(40)]}, row_group_size=7)
    resume_check(lambda: LocalDocuments(pq, shuffle_buffer=10, seed=4), first=13, then=12)


def test_reseed_restarts_the_stream_like_a_fresh_source(corpus_jsonl: Path) -> None:
    makers: list[Callable[[int], DocumentSource]] = [
        lambda seed: BuiltinDocuments(seed=seed),
        lambda seed: LocalDocuments(corpus_jsonl, shuffle_buffer=8, seed=seed),
        lambda seed: HFDocuments("json", data_files=str(corpus_jsonl), shuffle_buffer=8, seed=seed),
    ]
    for make in makers:
        source = make(1)
        source.sample(40)  # into the second epoch for the small corpora
        source.reseed(7)
        assert source.sample(6) == make(7).sample(6)
        assert source.state_dict()["config"]["seed"] == 7


def test_building_a_local_source_reads_nothing_of_its_stream(corpus_jsonl: Path) -> None:
    source = LocalDocuments(corpus_jsonl, shuffle_buffer=8)
    assert source.stats == {"read": 0, "accepted": 0, "rejected": 0, "malformed": 0, "epoch": 0, "skipped_files": 0}
    assert source.state_dict()["emitted"] == 0


def test_resume_rejects_a_foreign_state(corpus_jsonl: Path) -> None:
    state = BuiltinDocuments(seed=1).state_dict()
    with pytest.raises(DocumentError, match="cannot load a 'builtin'"):
        LocalDocuments(corpus_jsonl).load_state_dict(state)
    with pytest.raises(DocumentError, match="seed=1"):
        BuiltinDocuments(seed=2).load_state_dict(state)


# ------------------------------------------------------------------------------------------------ Hugging Face


def test_hf_streaming_json_samples_seeded_and_resumes_exactly(corpus_jsonl: Path) -> None:
    make = lambda: HFDocuments("json", data_files=str(corpus_jsonl), shuffle_buffer=8, seed=2)  # noqa: E731
    source = make()
    docs = source.sample(12)
    assert all(d.source["kind"] == "hf" and d.source["dataset"] == "json" for d in docs)
    assert [d.source["index"] for d in docs] == list(range(12))
    assert {d.source["id"] for d in docs} <= set(range(30))
    assert texts(make().sample(12)) == texts(docs)
    assert texts(HFDocuments("json", data_files=str(corpus_jsonl), shuffle_buffer=8, seed=9).sample(12)) != texts(docs)
    resume_check(make)
    resume_check(make, first=28, then=6)  # across an epoch boundary
    assert isinstance(source, DocumentSource)


def test_hf_fast_resume_uses_the_datasets_state(corpus_jsonl: Path) -> None:
    make = lambda: HFDocuments("json", data_files=str(corpus_jsonl), shuffle_buffer=1, resume="fast")  # noqa: E731
    source = make()
    source.sample(7)
    state = source.state_dict()
    assert state["hf_state"] is not None and state["epoch"] == 0 and state["emitted"] == 7
    resume_check(make, first=7, then=6)  # with no buffer to lose, the fast resume is exact too


def test_hf_streaming_parquet(tmp_path: Path) -> None:
    # One source only: datasets' parquet stream sleeps 5 s each time an iterator of it closes
    # (datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN, for apache/arrow#45214).
    path = write_parquet(tmp_path / "p.parquet", {"text": [prose(i) for i in range(20)], "title": ["t"] * 20})
    source = HFDocuments("parquet", data_files=str(path), shuffle_buffer=4, seed=1)
    docs = source.sample(6)
    assert {d.text for d in docs} <= {prose(i) for i in range(20)} and all(d.title == "t" for d in docs)
    assert docs[0].source == {
        "kind": "hf",
        "dataset": "parquet",
        "config": None,
        "split": "train",
        "seed": 1,
        "epoch": 0,
        "index": 0,
        "sha256": hashlib.sha256(docs[0].text.encode()).hexdigest(),
        "tokens": docs[0].source["tokens"],
        "truncated": False,
    }


def test_hf_load_errors_are_document_errors(corpus_jsonl: Path) -> None:
    with pytest.raises(DocumentError, match="no-such-user/no-such-dataset"):
        HFDocuments("no-such-user/no-such-dataset")
    with pytest.raises(DocumentError, match=r"has no column 'body' \(columns: text, id\)"):
        HFDocuments("json", data_files=str(corpus_jsonl), text_field="body")
    with pytest.raises(DocumentError, match="could not load"):
        HFDocuments("json", data_files=str(corpus_jsonl.parent / "absent.jsonl"))


# ------------------------------------------------------------------------------------------------ load_documents


def test_load_documents_specs(corpus_jsonl: Path) -> None:
    assert isinstance(load_documents(None), BuiltinDocuments)
    assert isinstance(load_documents("builtin", seed=4), BuiltinDocuments)
    local = load_documents(str(corpus_jsonl), shuffle_buffer=4)
    assert isinstance(local, LocalDocuments) and local.shuffle_buffer == 4
    assert isinstance(load_documents(corpus_jsonl.parent), LocalDocuments)
    hf = load_documents("hf:json", data_files=str(corpus_jsonl), shuffle_buffer=4)
    assert isinstance(hf, HFDocuments) and hf.sample(1)
    with pytest.raises(DocumentError, match=r"not a known source.*'hf:wikitext'"):
        load_documents("wikitext")
    with pytest.raises(DocumentError, match="no such file or folder"):
        load_documents(str(corpus_jsonl.parent / "nope.jsonl"))
    with pytest.raises(DocumentError, match="empty document source"):
        load_documents("  ")
    with pytest.raises(DocumentError, match="names no dataset"):
        load_documents("hf:")
    with pytest.raises(TypeError, match="data_files apply only to 'hf:' sources"):
        load_documents("builtin", data_files="x.jsonl")


def test_a_missing_optional_dependency_names_the_extra() -> None:
    from spade_gym.documents import _import_optional

    with pytest.raises(
        DocumentError, match=r"needs the optional package 'no_such_module_xyz': pip install -e '\.\[data\]' in a clone"
    ):
        _import_optional("no_such_module_xyz", "reading things")


def test_import_does_not_pull_heavy_dependencies() -> None:
    code = (
        "import sys, spade_gym.documents as d; d.clean_text('hello there, general text'); "
        "print(sorted(m for m in ('datasets', 'pyarrow', 'torch', 'pandas') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"
