#!/usr/bin/env python3
"""Writes tests/data/tokenizer_cases.json: the oracle of tests/cpp/test_tokenizer.cpp.

Every expected value is computed here by the Python `tokenizers` library (0.23), never by encore. Each case is a
small tokenizer.json (built below from tiny hand-made vocabularies, so the file stays small and readable), an
input (text or pair), add_special_tokens, and what the library returns: ids, tokens, type_ids, char offsets,
special_tokens_mask, attention_mask, plus decode(ids). The C++ test loads each tokenizer.json with
encore::Tokenizer::from_json and must reproduce all of it.

Regenerate: python3 tests/tools/gen_tokenizer_cases.py
"""
import json
import pathlib

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

TEXTS = [
    "Hello, world!", "  Héllo   wörld  ", "e\u0301te\u0301 NAÏVE", "ﬁ ① ½ Ｆｕｌｌ", "İstanbul", "中文字 and 日本",
    "don't stop", "a\tb\nc\r\nd", "zero\u200bwidth soft\u00adhyphen", "", "   ", "😀👍🏽!", "x" * 30, "12345 678",
    "[CLS] hi [MASK]", "<mask> is <s>", "hello-world, foo.bar", "ǅ Ω Å ẞ", "\u0301start", "end\u0301",
]
PAIR = ("First sentence here.", "And a second one!")


def wordpiece_tok(**bert_norm):
    vocab = {t: i for i, t in enumerate(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",", "!", ".", "-", "'", "h", "##e", "##l",
         "##o", "e", "##te", "te", "na", "##ive", "##ï", "##ve", "don", "t", "stop", "a", "b", "c", "d", "zero",
         "##width", "soft", "##hy", "##ph", "##en", "中", "文", "字", "and", "日", "本", "x", "##x", "1", "##2",
         "##3", "##45", "678", "hi", "is", "foo", "bar", "first", "sentence", "here", "second", "one", "ist",
         "##an", "##bu", "##l", "fi", "½", "full", "##ul", "i", "istanbul", "ω", "å", "ß", "ǆ", "end", "start",
         "He", "##llo", "Hé", "wö", "##rld", "NA", "##Ï", "##VE", "İ", "##stanbul", "F"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=12))
    tok.normalizer = normalizers.BertNormalizer(**bert_norm)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", AddedToken("[MASK]", lstrip=True)])
    return tok


def char_probe(normalizer, pre_tokenizer=None):
    """Unigram over single chars: one token per normalized char, so offsets show the normalizer's alignments."""
    chars = sorted(set("".join(TEXTS + list(PAIR)) + "abcdefghijklmnopqrstuvwxyz ▁\"") |
                   set(c for t in TEXTS for c in normalizers.NFKC().normalize_str(t)))
    vocab = [("<unk>", 0.0)] + [(c, -1.0) for c in chars if c.strip() or c == " "]
    tok = Tokenizer(models.Unigram(vocab, unk_id=0))
    tok.normalizer = normalizer
    if pre_tokenizer:
        tok.pre_tokenizer = pre_tokenizer
    return tok


def bytelevel_bpe(add_prefix_space):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    from tokenizers import trainers  # noqa: PLC0415
    tok.train_from_iterator(["Hello, world! Hello there, my friend.", "The world is big; hello again."] * 20,
                            trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                special_tokens=["<s>", "</s>", AddedToken("<mask>", lstrip=True, special=True)]))
    tok.post_processor = processors.RobertaProcessing(("</s>", 1), ("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=add_prefix_space)
    return tok


def unigram_sp():
    pieces = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0), ("▁", -2.0), ("▁hello", -3.0), ("▁he", -4.0),
              ("llo", -4.0), ("▁world", -3.5), ("!", -3.0), (",", -3.0), ("▁w", -5.0), ("orld", -5.5),
              ("e", -6.0), ("t", -6.0), ("▁t", -5.0), ("x", -4.0), ("xx", -7.5), ("xxx", -11.4)]
    tok = Tokenizer(models.Unigram(pieces, unk_id=0))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 1), ("</s>", 2)])
    return tok


def tokenizers_under_test():
    return {
        "bert_uncased": wordpiece_tok(),
        "bert_cased": wordpiece_tok(lowercase=False, strip_accents=None),
        "bert_lower_keep_accents": wordpiece_tok(lowercase=True, strip_accents=False),
        "bert_no_chinese": wordpiece_tok(handle_chinese_chars=False, clean_text=False),
        "probe_nfc": char_probe(normalizers.NFC()),
        "probe_nfd": char_probe(normalizers.NFD()),
        "probe_nfkc": char_probe(normalizers.NFKC()),
        "probe_nfkd_strip_lower": char_probe(normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(),
                                                                   normalizers.Lowercase()])),
        "probe_strip_replace_prepend": char_probe(normalizers.Sequence([
            normalizers.Strip(), normalizers.Replace("l", "LL"), normalizers.Replace(Regex(r"\s+"), "_"),
            normalizers.Prepend("▁")])),
        "probe_whitespace": char_probe(normalizers.Lowercase(), pre_tokenizers.Whitespace()),
        "probe_punct_digits": char_probe(normalizers.NFC(), pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(),
            pre_tokenizers.Digits(individual_digits=True)])),
        "probe_metaspace_first": char_probe(normalizers.NFC(), pre_tokenizers.Metaspace(prepend_scheme="first")),
        "bytelevel_bpe": bytelevel_bpe(False),
        "bytelevel_bpe_prefix": bytelevel_bpe(True),
        "unigram_sp": unigram_sp(),
    }


REGEX_CASES = [
    (r"\s+", "a  b\t\nc\u00a0d\u3000e"), (r" {2,}", "a  b   c d"), (r"\d+", "a1b22c٣٤५x"), (r"\w+", "x²y ½ ₂ é\u0301 a_b ①"),
    (r"[^\w\s]+", "'™½™ a.b"), (r"\p{L}+|\p{N}+", "abc123 δέ٣"), (r"[a-c]+|[^a-c\s]+", "abcxyz cab"),
    (r"(?i:'s|'t)|\p{L}+", "IT'S it's 'T"), (r"\s+(?!\S)|\s+", "a   b  \n c   "), (r"\p{N}{1,3}", "1234567 12"),
    (r"[^\r\n\p{L}\p{N}]?\p{L}+", "hello, world;foo"), (r"a*?b|a+", "aaab aa b"), (r"x(?=y)|z", "xy xz z"),
    (r"^a|b$", "aab ab"), (r"\.", "a.b..c"), (r"[.!?]+", "Hi!! What?... ok."), (r"colou?r", "color colour colr"),
    (r"(ab)+c", "ababc abc ac"), (r"\P{L}+", "ab12!?cd"), (r"[\p{Lu}]+", "ABcDEf"), (r"\x41|\u00e9", "AéB"),
    # Oniguruma features a re-implementation would get wrong: possessive and atomic groups (no backtracking into
    # them), word boundaries, lookbehind, POSIX brackets, class intersection, scripts, \X and \R, inline flags
    (r"\p{L}++", "ab cd"), (r"a++a|b", "aaa b"), (r"(?>a+)b|a", "aab aa"), (r"\s*+\S", "  x y"),
    (r"\b\w+\b", "it's a-b c_d é1"), (r"\B.", "abc de"), (r"(?<=\s)\w+", "a bc  de"), (r"(?<!a)b", "ab bb cb"),
    (r"[[:alpha:]]+|[[:digit:]]+", "ab12 é٣"), (r"[\p{L}&&[^a-z]]+", "abCDé x"), (r"\p{Han}+|\p{Hiragana}+", "日本語ですね"),
    (r"\X", "e\u0301a👍🏽"), (r"\R", "a\r\nb\nc\u2028d"), (r"(?i)straße|ǅ", "STRASSE straße ǆ Ǆ"),
    (r"\h+", "a \t\u00a0b"), (r"\d{2,}?", "12345"), (r"(?:ab|a)(?:c|bcd)", "abcd"),
    # patterns that match the empty string: which empty matches split (the gaps) follows the onig crate's iterator
    (r"x*", "axxb"), (r"(?=b)", "abab"), (r"\b", "ab cd"), (r"a*?", "aa b"), (r"$|a", "aa"),
]
GPT2_CASES = ["Hello world", "  two spaces", "I'm don't they've 're", "a\n\nb", "x  \t y ", "123abc!!! ?", "'s'S",
              "日本語テキスト 😀 ok", "trailing   ", "\u00a0nbsp\u2003em"]


def char_spans(text, pieces):
    return [list(o) for _, o in pieces]


def main():
    cases = []
    toks = tokenizers_under_test()  # built once: the cases must come from exactly the serialized tokenizers
    for name, tok in toks.items():
        tok = Tokenizer.from_str(tok.to_str())
        inputs = [(t, None, True) for t in TEXTS] + [(TEXTS[0], None, False), (PAIR[0], PAIR[1], True),
                                                     (PAIR[0], PAIR[1], False)]
        for text, pair, special in inputs:
            e = tok.encode(text, pair, add_special_tokens=special)
            cases.append({
                "tokenizer": name, "text": text, "pair": pair, "add_special_tokens": special,
                "ids": e.ids, "tokens": e.tokens, "type_ids": e.type_ids, "char_offsets": [list(o) for o in e.offsets],
                "special_tokens_mask": e.special_tokens_mask, "attention_mask": e.attention_mask,
                "sequence_ids": [-1 if s is None else s for s in e.sequence_ids],
                "decoded": tok.decode(e.ids),
            })
    regex_cases = []
    for pattern, text in REGEX_CASES:
        found = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True).pre_tokenize_str(text)
        gaps = pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(text)
        regex_cases.append({"pattern": pattern, "text": text, "char_matches": char_spans(text, found),
                            "char_gaps": char_spans(text, gaps)})
    gpt2_cases = []
    for text in GPT2_CASES:
        found = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(text)
        gpt2_cases.append({"text": text, "char_pieces": char_spans(text, found)})
    out = {"generator": "tests/tools/gen_tokenizer_cases.py", "regex_cases": regex_cases, "gpt2_cases": gpt2_cases,
           "tokenizers": {n: json.loads(t.to_str()) for n, t in toks.items()}}
    path = pathlib.Path(__file__).resolve().parents[1] / "data" / "tokenizer_cases.json"
    body = json.dumps(out, ensure_ascii=False)[:-1]  # one case a line, for readable diffs
    body += ', "cases": [\n' + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]}\n"
    path.write_text(body, encoding="utf-8")
    print(f"wrote {len(cases)} cases for {len(out['tokenizers'])} tokenizers to {path}")


if __name__ == "__main__":
    main()
