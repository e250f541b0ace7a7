#!/usr/bin/env python3
"""Writes tests/data/tokenizer_corpus.jsonl: the strings the tokenizer parity test encodes (one JSON string a line).

Hand-written cases aim at what tokenizers get wrong: accents in composed and decomposed form, compatibility
characters (NFKC), CJK, other scripts with combining marks (Arabic, Hindi, Thai, Vietnamese...), emoji with ZWJ
and skin tones, zero-width and control characters, odd whitespace, apostrophes (GPT-2's contractions), numbers
in many scripts, code, URLs, text around special tokens, empty and whitespace-only strings, and long inputs.
English prose comes from the first paragraphs of docstrings of Python's standard library (PSF licence), and a
seeded generator adds random mixes of all of the above.
Regenerate: python3 tests/tools/make_tokenizer_corpus.py   (read the file with split("\\n"): it holds raw U+2028)
"""
import collections, datetime, email, functools, inspect, itertools, json, logging, os, pathlib, random, re
import string, textwrap, unittest, urllib.parse

HANDWRITTEN = [
    # plain English, punctuation, case
    "Hello world!", "Hello, world! How are you today?", "The quick brown fox jumps over the lazy dog.",
    "ALL CAPS SENTENCE FOR SHOUTING", "mIxEd CaSe TeXt", "CamelCaseIdentifierName", "snake_case_name kebab-case-name",
    "Hello,world!No spaces here.", "!!!???...", "----====____", "(parentheses) [brackets] {braces} <angles>",
    "\"double quotes\" 'single quotes' `backticks` ``latex quotes''", "“curly” ‘quotes’ «guillemets» „German“",
    # contractions (GPT-2 pattern) and apostrophes
    "don't I'm we're they've he'll she'd it's", "'tis rock 'n' roll O'Neil's", "DON'T I'M WE'RE", "can’t won’t",
    "'s 't 're 've 'm 'll 'd", "x's y't z're", "'''", "it''s",
    # accents, composed and decomposed
    "Café crème brûlée à la française, s'il vous plaît.", "Ångström, façade, naïve, coöperate, résumé.",
    "Cafe\u0301 cre\u0300me bru\u0302le\u0301e", "a\u0300\u0316b o\u0308\u0304 e\u0301\u0301", "\u0301leading mark",
    "Ω ohm sign vs Ω omega, Å angstrom vs Å", "Tiếng Việt có dấu: Nguyễn Thị Minh Khai", "ǅ ǈ ǋ titlecase",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.", "¿Dónde está la biblioteca? ¡Aquí!",
    "İstanbul ıi İI", "ΣΊΣΥΦΟΣ σίσυφος", "Straße STRASSE ẞ", "Ǆemal ǆ", "ŉ ǰ ΐ",
    # compatibility characters (NFKC/NFKD)
    "ﬁ ﬂ ﬀ ﬃ ligatures", "Ｆｕｌｌｗｉｄｔｈ ｌｅｔｔｅｒｓ １２３", "ｶﾀｶﾅ ﾊﾟﾋﾟ halfwidth", "① ② ⑳ ⑴ ⒜",
    "½ ¼ ¾ x² y³ H₂O", "™ ℃ ℉ № ℡", "… ‥ ‼ ⁇", "㎏ ㎞ ㍻ ㈱", "Ⅻ ⅻ Ⅳ", "Ⓐ ⓑ 🄰", "ﷺ ﷻ", "ﾞﾟ゛゜",
    "𝐇𝐞𝐥𝐥𝐨 𝕎𝕠𝕣𝕝𝕕", "µ μ", "ſ long s", "\u00b5\u212b\u2126",
    # CJK and Korean
    "我爱自然语言处理。", "東京は日本の首都です。", "北京欢迎你，欢迎来到中国！", "日本語とEnglishの混在テキスト",
    "서울은 한국의 수도입니다.", "\u1112\u1161\u11ab\u1100\u1173\u11af jamo", "한국어 텍스트 처리", "㐀㐁 𠀀𠀁 𪜀 CJK ext",
    "ひらがな カタカナ 漢字", "中文，标点。符号！", "「引用」『二重』【括弧】",
    # other scripts
    "Привет, как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "مَرْحَبًا بِالْعَالَمِ", "שלום עולם", "שָׁלוֹם",
    "नमस्ते दुनिया", "हिन्दी में लिखा गया पाठ", "สวัสดีชาวโลก", "ภาษาไทยไม่มีช่องว่างระหว่างคำ", "தமிழ் மொழி",
    "বাংলা ভাষা", "ქართული ენა", "Հայերեն լեզու", "አማርኛ ቋንቋ", "བོད་ཡིག", "ελληνικά ΕΛΛΗΝΙΚΆ", "Ελλάδα",
    "Українська мова, ґ є ї", "Қазақ тілі", "ᠮᠣᠩᠭᠣᠯ", "ꦧꦱꦗꦮ", "𐌰𐌱𐌲 gothic",
    # emoji
    "I love pizza 🍕🍕🍕!", "Family: 👨‍👩‍👧‍👦 and flags 🇫🇷🇯🇵🇺🇸", "Thumbs up 👍🏽 and hearts ❤️💙",
    "keycaps 1️⃣ #️⃣ *️⃣", "🥰🫠🥲 new emoji", "😀", "🏳️‍🌈 🏴󠁧󠁢󠁳󠁣󠁴󠁿", ":-) ;-) :D <3", "☃ ☂ ★ ♥ ♠",
    # zero-width, control, odd whitespace
    "Zero\u200bwidth\u200bspaces", "zw\u200cnj zw\u200dj", "\ufeffBOM at start", "soft\u00adhyphen",
    "word\u2060joiner", "left\u200eto\u200fright", "rtl \u202eoverride\u202c end", "Control\x07chars\x1b here",
    "nul\x00char", "del\x7fchar", "c1\x85next\x9fline", "tab\tseparated\tvalues", "line one\nline two\nline three",
    "windows\r\nline\r\nendings", "vertical\x0btab form\x0cfeed", "non\u00a0breaking\u00a0space",
    "em\u2003space ideographic\u3000space", "line\u2028separator para\u2029separator", "\u3000\u3000indented",
    "private \ue000 use \U000f0000", "unassigned \u0378 \U000e0001 tag", "noncharacter \uffff \U0010ffff",
    "replacement \ufffd char", "a  b   c    d", "  leading spaces", "trailing spaces   ", " \t mixed \n\t ",
    "   ", "\t\t", " \n ", "\n", "", " ", "a", "?", ".", "'", "Ġ", "▁", "##", "##ing", "<0x41>",
    # numbers
    "3.14159 2.71828 1.41421 42 1,000,000 1e-9", "12345678901234567890", "٣٤٥ ۱۲۳ १२३ ๑๒๓ ௧௨௩",
    "Version v2.13.0-rc1 released on 2026-11-21.", "1st 2nd 3rd 4th 21st", "$100 €50 £30 ¥1000 ₹500",
    "+1-555-0100 (555) 555-0199", "0x1F 0b1010 0o777 1_000_000", "IPv4 192.168.0.1 IPv6 ::1",
    # code, URLs, markup
    "def square(x):\n    return x ** 2", "SELECT name, COUNT(*) FROM users WHERE id > 42 GROUP BY name;",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }", "<div class=\"main\"><p>Hello</p></div>",
    "https://example.com/path?query=1&lang=en#section", "Email me at someone@example.org, or call +1-555-0100.",
    "C:\\Users\\name\\file.txt /usr/local/bin/python3", "{\"key\": [1, 2, {\"nested\": null}]}",
    "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$", "# Heading\n\n* bullet\n* **bold** _italic_", "a==b!=c<=d>=e->f=>g",
    "std::vector<std::pair<int, float>> v;", "#include <iostream>", "git commit -m \"fix: bug\"",
    # around special tokens of the test tokenizers
    "[CLS] already has special tokens [SEP]", "[MASK] fills the [MASK].", "a[MASK]b", "[UNK] [PAD] [cls] [Mask]",
    "<s>Hello</s>", "<mask> token", "The capital of France is <mask>.", "a<mask>b", "  <mask>  ", "<pad><unk>",
    "</s></s>", "<s> <s>", "ENCORE is a word, encore is not", "encoreENCOREencore",
    # long and repetitive
    "supercalifragilisticexpialidocious " * 3, "x" * 300, "antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis", "ab" * 500, "a" * 2000, "é" * 500, "中" * 400, "😀" * 200,
    "!" * 300, " " * 200, "\n" * 50, "word " * 600, "Ĳ" * 120, "日本" * 150 + " end",
]


def docstring_paragraphs():
    out = []
    for mod in [collections, datetime, email, functools, inspect, itertools, json, logging, os, pathlib, re,
                string, textwrap, unittest, urllib.parse]:
        for name, obj in sorted(vars(mod).items()):
            if name.startswith("_"):
                continue
            doc = inspect.getdoc(obj) if callable(obj) or inspect.isclass(obj) else None
            if not doc or getattr(obj, "__module__", None) not in (mod.__name__, None):
                continue
            para = doc.split("\n\n")[0]
            if 20 <= len(para) <= 600 and para not in out:
                out.append(para)
    return out


def random_mixes(n, seed=1234):
    rng = random.Random(seed)
    pools = [
        string.ascii_letters + string.digits, string.punctuation, " \t\n", "àéîõüçñßøåæœ", "中文日本語한국어",
        "абвгдеёжз", "αβγδεζ", "مرحبا", "नमस्ते", "สวัสดี", "😀👍🏽🇫🇷❤️", "\u0301\u0308\u0323\u200b\u200d\u00a0",
        "ﬁ①½™…", "'", "0123456789",
    ]
    out = []
    for _ in range(n):
        k = rng.randint(1, 60)
        out.append("".join(rng.choice(rng.choice(pools)) for _ in range(k)))
    return out


def main():
    paragraphs = docstring_paragraphs()[:160]
    long_texts = [" ".join(paragraphs[i:i + 25]) for i in range(0, 100, 25)]  # thousands of chars each
    texts = HANDWRITTEN + paragraphs + long_texts + random_mixes(60)
    path = pathlib.Path(__file__).resolve().parents[1] / "data" / "tokenizer_corpus.jsonl"
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    print(f"wrote {len(texts)} texts to {path}")


if __name__ == "__main__":
    main()
