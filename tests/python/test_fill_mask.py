"""Masked-LM heads, encore.FillMask / `encore fill-mask` (issue 12 item 6) and the warning for heads encore cannot run.

* The masked-LM logits (B, T, vocab) of every family's *ForMaskedLM (and BertForPreTraining, and an untied decoder)
  vs transformers on random-initialised checkpoints: within 1e-5 * max(1, max |logit|) at real tokens (measured
  <= 3.9e-6 on logits of size <= 5.7, a margin of 12x or more).
* FillMask vs transformers' pipeline("fill-mask") on a random BERT (MiniLM's WordPiece) and RoBERTa (a byte-level BPE
  trained in the test): token ids and their order identical, token_str and sequence identical, scores within 1e-5
  (probabilities; the test also holds them to 1e-4 relative).
* A *ForMultipleChoice checkpoint loads as its base model with a warning naming it (a
  Python UserWarning; "encore: warning:" on the CLI's stderr), and FillMask / TextClassifier refuse it by name.
  A warning, not an error: the encoder underneath is what embedding and feature extraction read. A head encore
  runs whose weights are absent (base weights saved under BertForMaskedLM, as sentence-transformers saves some
  models) loads without a warning, as transformers does.
"""
import json
import os
import pathlib
import subprocess
import warnings

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import transformers as T  # noqa: E402
from pipeline_models import save_model  # noqa: E402

import encore  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))
IDS = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
           max_position_embeddings=64, initializer_range=0.2)
FAMILIES = {
    "bert": lambda: (T.BertConfig(**IDS), T.BertForMaskedLM),
    "bert-pretraining": lambda: (T.BertConfig(**IDS), T.BertForPreTraining),
    "bert-untied": lambda: (T.BertConfig(**IDS, tie_word_embeddings=False), T.BertForMaskedLM),
    "roberta": lambda: (T.RobertaConfig(**IDS, pad_token_id=1), T.RobertaForMaskedLM),
    "xlm-roberta": lambda: (T.XLMRobertaConfig(**IDS, pad_token_id=1), T.XLMRobertaForMaskedLM),
    "distilbert": lambda: (T.DistilBertConfig(vocab_size=300, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                              max_position_embeddings=64, initializer_range=0.2), T.DistilBertForMaskedLM),
    "electra-generator": lambda: (T.ElectraConfig(**IDS, embedding_size=16), T.ElectraForMaskedLM),
    "albert": lambda: (T.AlbertConfig(**IDS, embedding_size=16), T.AlbertForMaskedLM),
    "mpnet": lambda: (T.MPNetConfig(**IDS, pad_token_id=1), T.MPNetForMaskedLM),
}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_masked_lm_logits_match_transformers(name, tmp_path):
    cfg, cls = FAMILIES[name]()
    torch.manual_seed(0)
    model = cls(cfg).eval()
    model.save_pretrained(tmp_path, safe_serialization=True)
    ids = torch.randint(5, 300, (2, 11))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    want = (out.prediction_logits if name == "bert-pretraining" else out.logits).numpy()
    enc = encore.AutoModel.load(str(tmp_path))
    assert enc.config["head"] == "masked_lm"
    got = enc(ids.numpy(), mask.numpy(), return_dict=True)["logits"]
    assert got.shape == want.shape == (2, 11, 300)
    real = mask.numpy().astype(bool)
    err = np.abs(got[real] - want[real]).max()
    assert err <= 1e-5 * max(1.0, np.abs(want).max()), (err, np.abs(want).max())
    print(f"{name}: max |logit diff| {err:.1e} (max |logit| {np.abs(want).max():.1f})")


TEXTS = {
    "bert": ["Paris is the [MASK] of France.", "The moon formed about 4.5 billion [MASK] ago.", "[MASK]",
             "A man is [MASK] food and [MASK] music."],
    "roberta": ["Paris is the<mask> of France.", "The moon formed about 4.5 billion<mask> ago.", "<mask>",
                "A man is<mask> food and<mask> music."],
}


@pytest.fixture(scope="module")
def mlm_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm")
    return {"bert": save_model(root / "bert", "bert", T.BertForMaskedLM, initializer_range=0.5),
            "roberta": save_model(root / "roberta", "roberta", T.RobertaForMaskedLM, initializer_range=0.5)}


def check_candidates(got, want):
    assert [c["token"] for c in got] == [c["token"] for c in want], (got, want)
    for g, w in zip(got, want):
        assert set(g) == {"score", "token", "token_str", "sequence"}
        assert g["token_str"] == w["token_str"] and g["sequence"] == w["sequence"], (g, w)
        assert abs(g["score"] - w["score"]) <= 1e-5 and abs(g["score"] - w["score"]) <= 1e-4 * w["score"], (g, w)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_fill_mask_matches_the_pipeline(mlm_checkpoints, family):
    d = mlm_checkpoints[family]
    pipe, fm = T.pipeline("fill-mask", model=str(d), device="cpu"), encore.FillMask(d)
    assert fm.mask_token == pipe.tokenizer.mask_token and fm.mask_token_id == pipe.tokenizer.mask_token_id
    texts = TEXTS[family]
    for top_k in (5, 2):
        for text in texts:
            want, got = pipe(text, top_k=top_k), fm(text, top_k=top_k)
            if isinstance(want[0], list):  # several masks: one list per mask
                assert len(got) == len(want) and all(isinstance(g, list) for g in got)
                for g, w in zip(got, want):
                    check_candidates(g, w)
            else:
                check_candidates(got, want)
    many_want, many_got = pipe(texts[:2]), fm(texts[:2], batch_size=2)
    assert len(many_got) == 2
    for g, w in zip(many_got, many_want):
        check_candidates(g, w)
    check_candidates(fm([texts[0]]), pipe([texts[0]]))  # a one-element list is unwrapped, as the pipeline does
    scores = [c["score"] for c in fm(texts[0], top_k=5)]
    assert scores[0] > 5 * np.median([c["score"] for c in fm(texts[0], top_k=50)]), scores  # a peaked distribution


def test_cli_fill_mask_matches_the_pipeline(mlm_checkpoints, tmp_path):
    d = mlm_checkpoints["bert"]
    pipe = T.pipeline("fill-mask", model=str(d), device="cpu")
    f = tmp_path / "texts.jsonl"
    f.write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(TEXTS["bert"])))
    res = subprocess.run([str(BIN), "fill-mask", "--model", d, "-i", f, "--field", "body", "-k", "3"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(lines) == len(TEXTS["bert"])
    for line, text in zip(lines, TEXTS["bert"]):
        want = pipe(text, top_k=3)
        if isinstance(want[0], list):
            for g, w in zip(line, want, strict=True):
                check_candidates(g, w)
        else:
            check_candidates(line, want)


def test_fill_mask_errors(mlm_checkpoints, tmp_path):
    fm = encore.FillMask(mlm_checkpoints["bert"])
    with pytest.raises(encore.InputError, match="text 1 has no mask token \\[MASK\\]"):
        fm(["a [MASK] b", "no mask here"])
    with pytest.raises(encore.UsageError, match="top_k"):
        fm("a [MASK]", top_k=0)
    with pytest.raises(encore.UsageError, match="inputs must be"):
        fm(7)
    clf = save_model(tmp_path / "clf", "bert", T.BertForSequenceClassification, num_labels=2)
    with pytest.raises(encore.ModelFormatError, match="BertForSequenceClassification checkpoint without a masked-LM"):
        encore.FillMask(clf)
    res = subprocess.run([str(BIN), "fill-mask", "--model", mlm_checkpoints["bert"], "no mask"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 3 and "no mask token" in res.stderr, res.stderr


@pytest.mark.parametrize("cls", ["BertForMultipleChoice"])
def test_a_head_encore_cannot_run_is_named(cls, tmp_path):
    d = save_model(tmp_path / "m", "bert", getattr(T, cls))
    with pytest.warns(UserWarning, match=f"is a {cls} checkpoint: encore does not run its task head.*base model"):
        model = encore.AutoModel.load(str(d))
    assert model.config["head"] == "" and model(np.array([[101, 2023, 102]]), return_dict=True)["logits"] is None
    with pytest.warns(UserWarning, match=cls):
        encore.SentenceEncoder(d)  # embeddings from the base model still work
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(encore.ModelFormatError, match=f"{cls} checkpoint without a masked-LM head"):
            encore.FillMask(d)
        with pytest.raises(encore.ModelFormatError, match=f"{cls} checkpoint without a sequence-classification"):
            encore.TextClassifier(d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a filter that makes the warning an error makes the load fail with it
        with pytest.raises(encore.Error, match=cls):
            encore.AutoModel.load(str(d))
    res = subprocess.run([str(BIN), "info", d], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and f"encore: warning: '{d}' is a {cls} checkpoint" in res.stderr, res.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        encore.AutoModel.load(str(save_model(tmp_path / "ok", "bert", T.BertForMaskedLM)))  # no warning for a head it runs
        base_only = save_model(tmp_path / "base", "bert", T.BertModel)  # base weights under an MLM architecture name,
        cfg = json.loads((base_only / "config.json").read_text())      # as sentence-transformers saves all-mpnet-base-v2
        cfg["architectures"] = ["BertForMaskedLM"]
        (base_only / "config.json").write_text(json.dumps(cfg))
        assert encore.AutoModel.load(str(base_only)).config["head"] == ""
