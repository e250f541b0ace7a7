#!/usr/bin/env python3
"""Writes tests/data/precompiled_charsmap_nmt_nfkc.bin: a real SentencePiece precompiled_charsmap.

This is the blob XLM-R, ALBERT, T5 and mBART tokenizer.json files carry (base64) in their "Precompiled"
normalizer: SentencePiece's built-in "nmt_nfkc" rule compiled to a darts-clone double-array trie plus the
replacement strings. No hub is reachable here, so it is taken from a tiny SentencePiece model trained on the
spot (the charsmap depends only on the normalization rule, not on the training text), by reading field
ModelProto.normalizer_spec (3) -> NormalizerSpec.precompiled_charsmap (2) out of the serialized model.
Needs: pip install sentencepiece.   Regenerate: python3 tests/tools/make_precompiled_charsmap.py
"""
import io
import pathlib

import sentencepiece as spm


def read_varint(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def fields(buf):
    """(field number, wire type, value) of a serialized protobuf message (varint and length-delimited only)."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        else:
            raise ValueError(f"wire type {wire}")
        yield num, wire, value


def main():
    text = "\n".join(["Hello world.", "Ｆｕｌｌｗｉｄｔｈ ｌｅｔｔｅｒｓ", "ﬁ ligature ① ½", "Café naïve résumé"] * 50)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text.split("\n")), model_writer=model, vocab_size=40,
                                   model_type="unigram", normalization_rule_name="nmt_nfkc", minloglevel=2,
                                   hard_vocab_limit=False)
    spec = next(v for n, w, v in fields(model.getvalue()) if n == 3 and w == 2)
    charsmap = next(v for n, w, v in fields(spec) if n == 2 and w == 2)
    path = pathlib.Path(__file__).resolve().parents[1] / "data" / "precompiled_charsmap_nmt_nfkc.bin"
    path.write_bytes(charsmap)
    print(f"wrote {len(charsmap)} bytes to {path}")


if __name__ == "__main__":
    main()
