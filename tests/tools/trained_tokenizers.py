"""Tokenizers of every family, trained here offline with the Hugging Face `tokenizers` trainers (nothing is
downloaded), for the parity tests (tests/python/test_tokenizer_parity.py) and the throughput benchmark
(bench/tokenizers.py).

build_all(training_texts(corpus)) -> {name: tokenizers.Tokenizer}:
  roberta_bpe (byte-level BPE, RobertaProcessing), gpt2_bpe, llama3_split_bpe (a Split regex + byte-level BPE),
  llama_bpe_bytefallback, bpe_suffix, bpe_prefix, xlmr_unigram (a real SentencePiece nmt_nfkc Precompiled
  charsmap + Replace regex, Metaspace, Unigram), albert_unigram, unigram_bytefallback, wordpiece_nfd,
  wordpiece_nfkc, wordlevel_split (Split pre-tokenizers with every behavior).
"""
from __future__ import annotations

import importlib
import inspect
import json
import pathlib

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

CHARSMAP = pathlib.Path(__file__).resolve().parents[1] / "data" / "precompiled_charsmap_nmt_nfkc.bin"


def training_texts(corpus: list[str]) -> list[str]:
    """Docstrings of stdlib modules (~300 kB of English) plus `corpus` (the test corpus: scripts, emoji...)."""
    texts = []
    for m in ["collections", "os", "re", "json", "inspect", "functools", "itertools", "pathlib", "logging",
              "argparse", "unittest", "email", "http.client", "urllib.parse", "datetime", "string", "textwrap",
              "typing", "subprocess", "threading", "asyncio", "decimal", "fractions", "statistics", "random", "csv"]:
        mod = importlib.import_module(m)
        for _, obj in sorted(vars(mod).items()):
            doc = inspect.getdoc(obj) if callable(obj) or inspect.isclass(obj) else None
            if doc:
                texts.append(doc)
    return texts + corpus


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
