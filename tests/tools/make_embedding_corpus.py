#!/usr/bin/env python3
"""Writes tests/data/embedding_corpus.jsonl: >= 300 varied texts for the sentence-embedding parity test.

Real English comes from the first sentences of docstrings in Python's standard library (PSF licence); the rest
are hand-written cases that stress tokenization and length: accents, CJK, other scripts, emoji, code, numbers,
URLs, whitespace-only, empty, and texts longer than the model's 256-token window.
Regenerate: python3 tests/tools/make_embedding_corpus.py
"""
import collections, csv, datetime, email, functools, http.client, inspect, itertools, json, logging, os, pathlib
import re, statistics, string, textwrap, unittest, urllib.parse

HANDWRITTEN = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A monkey is playing drums.", "A cheetah is running behind its prey.",
    "Café crème brûlée à la française, s'il vous plaît.", "Ångström, façade, naïve, coöperate, résumé.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.", "¿Dónde está la biblioteca? ¡Aquí!",
    "我爱自然语言处理。", "東京は日本の首都です。", "서울은 한국의 수도입니다.", "北京欢迎你，欢迎来到中国！",
    "Привет, как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "I love pizza 🍕🍕🍕!", "Family: 👨‍👩‍👧‍👦 and flags 🇫🇷🇯🇵", "Thumbs up 👍🏽 and hearts ❤️💙",
    "def square(x):\n    return x ** 2", "SELECT name, COUNT(*) FROM users WHERE id > 42 GROUP BY name;",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }", "<div class=\"main\"><p>Hello</p></div>",
    "https://example.com/path?query=1&lang=en#section", "Email me at someone@example.org, or call +1-555-0100.",
    "3.14159 2.71828 1.41421 42 1,000,000 1e-9", "Version v2.13.0-rc1 released on 2026-11-21.",
    "   ", "\t\t", " \n ", "", "a", "?", "...", "Hello,world!No spaces here.", "ALL CAPS SENTENCE FOR SHOUTING",
    "mIxEd CaSe TeXt", "Zero\u200bwidth\u200bspaces", "Combining: e\u0301 a\u0300 o\u0308", "Control\x07chars\x1b here",
    "tab\tseparated\tvalues", "line one\nline two\nline three", "Ｆｕｌｌｗｉｄｔｈ ｌｅｔｔｅｒｓ", "ﬁ ﬂ ligatures",
    "supercalifragilisticexpialidocious " * 3, "x" * 300, "antidisestablishmentarianism",
]


def docstring_sentences():
    out = []
    for mod in [collections, csv, datetime, email, functools, http.client, inspect, itertools, json, logging, os,
                pathlib, re, statistics, string, textwrap, unittest, urllib.parse]:
        for name, obj in sorted(vars(mod).items()):
            if name.startswith("_"):
                continue
            doc = inspect.getdoc(obj) if callable(obj) or inspect.isclass(obj) else None
            if not doc or getattr(obj, "__module__", None) not in (mod.__name__, None):
                continue
            first = " ".join(doc.split("\n\n")[0].split())
            if 20 <= len(first) <= 400 and first not in out:
                out.append(first)
    return out


def main():
    sentences = docstring_sentences()[:300]
    long_texts = [" ".join(sentences[i:i + 40]) for i in range(0, 120, 40)]  # well past 256 tokens
    texts = HANDWRITTEN + sentences + long_texts
    path = pathlib.Path(__file__).resolve().parents[1] / "data" / "embedding_corpus.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    print(f"wrote {len(texts)} texts to {path}")


if __name__ == "__main__":
    main()
