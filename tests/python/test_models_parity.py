"""Every supported architecture, randomly initialised by transformers offline and saved with save_pretrained
(safetensors), against transformers' own forward pass, run live.

Tolerances: last_hidden_state, pooler_output and logits within 1e-5 max abs on mixed-length padded batches
(everywhere with skip_padding=False; on real positions, with exact zeros at padding, for the default
padding-free forward); a sequence alone vs inside a padded batch within 1e-5 on its real positions.
"""
import numpy as np
import pytest
import torch
import transformers as T

import encore

TOL = 1e-5

SMALL = dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=75, vocab_size=120,
             max_position_embeddings=80)

# (name, config factory, model class); each family's base model and its task heads.
CASES = [
    ("bert", lambda: T.BertConfig(**SMALL), T.BertModel),
    ("bert-gelu-tanh", lambda: T.BertConfig(**SMALL, hidden_act="gelu_new", type_vocab_size=3), T.BertModel),
    ("bert-seqcls", lambda: T.BertConfig(**SMALL, num_labels=3), T.BertForSequenceClassification),
    ("bert-tokcls", lambda: T.BertConfig(**SMALL, num_labels=5), T.BertForTokenClassification),
    ("roberta", lambda: T.RobertaConfig(**SMALL, pad_token_id=1, type_vocab_size=1), T.RobertaModel),
    ("roberta-seqcls", lambda: T.RobertaConfig(**SMALL, pad_token_id=1, num_labels=2), T.RobertaForSequenceClassification),
    ("xlm-roberta", lambda: T.XLMRobertaConfig(**SMALL, pad_token_id=1), T.XLMRobertaModel),
    ("distilbert", lambda: T.DistilBertConfig(dim=48, n_layers=3, n_heads=4, hidden_dim=75, vocab_size=120,
                                              max_position_embeddings=80), T.DistilBertModel),
    ("distilbert-seqcls", lambda: T.DistilBertConfig(dim=48, n_layers=2, n_heads=4, hidden_dim=75, vocab_size=120,
                                                     max_position_embeddings=80, num_labels=4),
     T.DistilBertForSequenceClassification),
    ("albert-shared", lambda: T.AlbertConfig(**{**SMALL, "num_hidden_layers": 4}, embedding_size=24,
                                             num_hidden_groups=2, inner_group_num=2), T.AlbertModel),
    ("albert-seqcls", lambda: T.AlbertConfig(**SMALL, embedding_size=24, num_labels=3), T.AlbertForSequenceClassification),
    ("electra", lambda: T.ElectraConfig(**SMALL, embedding_size=24), T.ElectraModel),
    ("electra-seqcls", lambda: T.ElectraConfig(**SMALL, embedding_size=48, num_labels=3), T.ElectraForSequenceClassification),
    ("mpnet", lambda: T.MPNetConfig(**SMALL), T.MPNetModel),
    ("mpnet-seqcls", lambda: T.MPNetConfig(**SMALL, num_labels=2), T.MPNetForSequenceClassification),
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (directory, torch model in eval mode); weights perturbed so no parameter sits at a trivial value."""
    out = {}
    for i, (name, make_config, cls) in enumerate(CASES):
        torch.manual_seed(100 + i)
        model = cls(make_config()).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        d = tmp_path_factory.mktemp(name)
        model.save_pretrained(d, safe_serialization=True)
        out[name] = (str(d), model)
    return out


def batch(model, lengths, seed):
    cfg = model.config
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    rng = np.random.default_rng(seed)
    T_ = max(lengths)
    ids = np.full((len(lengths), T_), pad, dtype=np.int64)
    mask = np.zeros((len(lengths), T_), dtype=np.int64)
    for b, n in enumerate(lengths):
        ids[b, :n] = rng.integers(pad + 1, cfg.vocab_size, n)
        mask[b, :n] = 1
    types = None
    if getattr(cfg, "type_vocab_size", 0) and cfg.type_vocab_size > 1:
        types = (rng.integers(0, cfg.type_vocab_size, ids.shape) * mask).astype(np.int64)
    return ids, mask, types


def torch_forward(model, ids, mask, types):
    kw = dict(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    if types is not None:
        kw["token_type_ids"] = torch.from_numpy(types)
    with torch.no_grad():
        return model(**kw, output_hidden_states=True)


def max_diff(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


@pytest.mark.parametrize("skip_padding", [False, True], ids=["padded", "padding-free"])
@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_matches_transformers(saved, name, skip_padding):
    """skip_padding=False computes padded positions too and must equal transformers everywhere; the default
    padding-free forward must equal it on real positions and give exactly 0 at padded ones."""
    path, model = saved[name]
    enc = encore.AutoModel.load(path)
    ids, mask, types = batch(model, [17, 9, 1, 23], seed=len(name))
    ref = torch_forward(model, ids, mask, types)
    got = enc(ids, mask, types, return_dict=True, output_hidden_states=True, skip_padding=skip_padding)
    real = mask.astype(bool)

    def compare(a, b, what):
        a, b = np.asarray(a), np.asarray(b)
        if skip_padding and a.ndim == 3:  # (B, T, C): real positions vs transformers, zeros at padding
            assert np.all(a[~real] == 0), f"{name}: {what} not 0 at padded positions"
            a, b = a[real], b[real]
        d = max_diff(a, b)
        assert d <= TOL, f"{name}: {what} max abs diff {d:.2e}"

    hidden_ref = ref.hidden_states[-1].numpy()
    assert np.abs(hidden_ref).max() > 0.1  # a real signal, not zeros
    compare(got["last_hidden_state"], hidden_ref, "last_hidden_state")
    assert len(got["hidden_states"]) == len(ref.hidden_states)
    for i, (a, b) in enumerate(zip(got["hidden_states"], ref.hidden_states)):
        compare(a, b.numpy(), f"hidden_states[{i}]")
    if getattr(ref, "pooler_output", None) is not None:
        compare(got["pooler_output"], ref.pooler_output.numpy(), "pooler_output")
    if getattr(ref, "logits", None) is not None:
        assert got["logits"] is not None, f"{name}: encore found no classification head"
        logits, ref_logits = np.asarray(got["logits"]), ref.logits.numpy()
        if skip_padding and logits.ndim == 3:  # token classification: the head of a 0 hidden state at padding
            logits, ref_logits = logits[real], ref_logits[real]
        d = max_diff(logits, ref_logits)
        assert d <= TOL, f"{name}: logits max abs diff {d:.2e}"
        assert enc.config["num_labels"] == model.config.num_labels


@pytest.mark.parametrize("name", ["bert", "roberta", "distilbert", "albert-shared", "electra", "mpnet"])
def test_padding_invariance(saved, name):
    path, model = saved[name]
    enc = encore.AutoModel.load(path)
    ids, mask, types = batch(model, [20, 6, 13], seed=7)
    together = enc(ids, mask, types)
    for b in range(ids.shape[0]):
        n = int(mask[b].sum())
        alone = enc(ids[b:b + 1, :n], mask[b:b + 1, :n], None if types is None else types[b:b + 1, :n])
        d = max_diff(alone[0], together[b, :n])
        assert d <= TOL, f"{name}: sequence {b} alone vs batched differs by {d:.2e}"


def test_attentions_match(saved):
    path, model = saved["bert"]
    enc = encore.AutoModel.load(path)
    ids, mask, types = batch(model, [11, 5], seed=3)
    model.config._attn_implementation = "eager"  # weights need the eager path
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                    token_type_ids=torch.from_numpy(types), output_attentions=True)
    got = enc(ids, mask, types, output_attentions=True)
    # one attention map per layer on both sides: zip() alone would pass on an empty or short list
    assert len(got["attentions"]) == len(ref.attentions) == model.config.num_hidden_layers
    for a, b in zip(got["attentions"], ref.attentions):
        # padded keys: encore gives exactly 0, transformers exp(finfo.min - max) = 0 as well
        assert max_diff(a, b.numpy()) <= TOL
