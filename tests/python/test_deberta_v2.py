"""DeBERTa-v2/v3 (model_type "deberta-v2") against transformers 5.23's DebertaV2Model, DebertaV2For{Sequence,Token}
Classification, DebertaV2ForQuestionAnswering and DebertaV2ForMaskedLM, run live on random checkpoints built here
with save_pretrained (weights perturbed so no norm sits at 1 and no bias at 0).

Configurations:
  v3        DeBERTa-v3's shape: relative_attention, position_buckets 256 (a tiny model with max_position_embeddings
            512, so distances beyond 128 fall in log buckets: the "long" batch reaches them), share_att_key,
            pos_att_type "p2c|c2p" (the string form), norm_rel_ebd "layer_norm", position_biased_input false,
            type_vocab_size 0, layer_norm_eps 1e-7;
  v2        DeBERTa-v2's: absolute positions, token types (type_vocab_size 2), max_relative_positions 24 without
            buckets (so distances beyond 24 clamp), separate pos_key_proj / pos_query_proj, no rel LayerNorm,
            pos_att_type ["c2p", "p2c"] (the list form);
  c2p-only  buckets 16 over max_relative_positions 64, one term (scale √(2d));
  embed     embedding_size 24 != hidden_size 32 (embed_proj), buckets, p2c only;
  no-rel    relative_attention false (plain BERT-like attention with DeBERTa's layers);
plus the heads (sequence classification through the ContextPooler on v3's and v2's shapes, token classification,
question answering, masked LM in both layouts: legacy cls.predictions and lm_predictions.lm_head).

Tolerances: last_hidden_state, every hidden_states entry and logits within 1e-5 max abs (fp32; measured <= 1.2e-6
on hidden states of magnitude <= 4, <= 4.2e-7 on logits) on real positions
(transformers masks a padded query row entirely - softmax over finfo.min everywhere - so padded positions are not
defined; encore's padding-free forward gives exact zeros there, which is checked).
"""
import json
import pathlib
import shutil

import numpy as np
import pytest
import torch
import transformers as T

import encore

TOL = 1e-5

BASE = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48, vocab_size=150,
            max_position_embeddings=512, pad_token_id=0, hidden_act="gelu", layer_norm_eps=1e-7)
V3 = dict(BASE, relative_attention=True, position_buckets=256, max_relative_positions=-1, share_att_key=True,
          pos_att_type="p2c|c2p", norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0)
V2 = dict(BASE, relative_attention=True, max_relative_positions=24, share_att_key=False,
          pos_att_type=["c2p", "p2c"], position_biased_input=True, type_vocab_size=2, max_position_embeddings=300)
LENGTHS = [17, 9, 1, 23]
LONG = [300, 140, 290]

# (name, config kwargs, model class, batch lengths)
CASES = [
    ("v3", V3, T.DebertaV2Model, LENGTHS),
    ("v3-long", V3, T.DebertaV2Model, LONG),
    ("v2", V2, T.DebertaV2Model, LENGTHS),
    ("v2-long", V2, T.DebertaV2Model, [300, 45]),
    ("c2p-only", dict(BASE, relative_attention=True, position_buckets=16, max_relative_positions=64,
                      pos_att_type=["c2p"], position_biased_input=False, norm_rel_ebd="layer_norm"),
     T.DebertaV2Model, [70, 33]),
    ("embed", dict(V3, embedding_size=24, position_buckets=16, max_relative_positions=64, pos_att_type=["p2c"],
                   share_att_key=False, type_vocab_size=3), T.DebertaV2Model, LENGTHS),
    ("no-rel", dict(BASE, relative_attention=False, position_biased_input=True, type_vocab_size=2),
     T.DebertaV2Model, LENGTHS),
    ("seqcls", dict(V3, num_labels=3, pooler_hidden_act="gelu", pooler_dropout=0.1, cls_dropout=0.2),
     T.DebertaV2ForSequenceClassification, LENGTHS),
    ("seqcls-v2", dict(V2, num_labels=2, pooler_hidden_act="tanh"), T.DebertaV2ForSequenceClassification, LENGTHS),
    ("tokcls", dict(V3, num_labels=5), T.DebertaV2ForTokenClassification, LENGTHS),
    ("qa", dict(V2), T.DebertaV2ForQuestionAnswering, LENGTHS),
    ("mlm-legacy", dict(V3, embedding_size=24, legacy=True), T.DebertaV2ForMaskedLM, LENGTHS),
    ("mlm", dict(V3, legacy=False), T.DebertaV2ForMaskedLM, LENGTHS),
]
BY_NAME = {c[0]: c for c in CASES}


def uses_types(cfg):
    return cfg.type_vocab_size > 0


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (directory, torch model in eval mode); cases sharing a config share a checkpoint."""
    out = {}
    for i, (name, kwargs, cls, _) in enumerate(CASES):
        torch.manual_seed(300 + i)
        model = cls(T.DebertaV2Config(**kwargs)).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        d = tmp_path_factory.mktemp(name)
        model.save_pretrained(d, safe_serialization=True)
        out[name] = (str(d), model)
    return out


def batch(cfg, lengths, seed):
    rng = np.random.default_rng(seed)
    ids = np.full((len(lengths), max(lengths)), cfg.pad_token_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n] = rng.integers(3, cfg.vocab_size, n)
        mask[b, :n] = 1
        if cfg.type_vocab_size > 0:
            types[b, n // 2:n] = rng.integers(0, cfg.type_vocab_size)
    return ids, mask, types


def max_diff(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


def run_ref(model, ids, mask, types, **kw):
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                     token_type_ids=torch.from_numpy(types), **kw)


@pytest.mark.parametrize("skip_padding", [False, True], ids=["padded", "padding-free"])
@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_matches_transformers(saved, name, skip_padding):
    path, model = saved[name]
    cfg = model.config
    enc = encore.AutoModel.load(path)
    ids, mask, types = batch(cfg, BY_NAME[name][3], seed=len(name))
    ref = run_ref(model, ids, mask, types, output_hidden_states=True)
    got = enc(ids, mask, types, return_dict=True, output_hidden_states=True, skip_padding=skip_padding)
    real = mask.astype(bool)

    def compare(a, b, what):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{name}: {what} shape {a.shape} vs {b.shape}"
        if skip_padding:
            assert np.all(a[~real] == 0), f"{name}: {what} not 0 at padded positions"
        d = max_diff(a[real], b[real])
        assert d <= TOL, f"{name}: {what} max abs diff {d:.2e}"

    assert np.abs(ref.hidden_states[-1].numpy()).max() > 0.1  # a real signal
    last = got["last_hidden_state"]
    compare(last, ref.hidden_states[-1].numpy(), "last_hidden_state")
    assert len(got["hidden_states"]) == len(ref.hidden_states) == cfg.num_hidden_layers + 1
    for i, (a, b) in enumerate(zip(got["hidden_states"], ref.hidden_states)):
        compare(a, b.numpy(), f"hidden_states[{i}]")
    ref_logits = getattr(ref, "logits", None)
    if isinstance(model, T.DebertaV2ForQuestionAnswering):  # encore: (B, T, 2) = start, end
        ref_logits = torch.stack([ref.start_logits, ref.end_logits], -1)
    if ref_logits is None:
        assert got.get("logits") is None
        return
    logits, ref_logits = np.asarray(got["logits"]), ref_logits.numpy()
    assert logits.shape == ref_logits.shape
    if logits.ndim == 3:  # per position, as the hidden states
        logits, ref_logits = logits[real], ref_logits[real]
    assert np.abs(ref_logits).max() > 0.01
    d = max_diff(logits, ref_logits)
    assert d <= TOL, f"{name}: logits max abs diff {d:.2e}"
    head = {"DebertaV2ForSequenceClassification": "sequence_classification",
            "DebertaV2ForTokenClassification": "token_classification",
            "DebertaV2ForMaskedLM": "masked_lm",
            "DebertaV2ForQuestionAnswering": "question_answering"}[type(model).__name__]
    assert enc.config["head"] == head
    if head not in ("masked_lm", "question_answering"):
        assert enc.config["num_labels"] == cfg.num_labels
