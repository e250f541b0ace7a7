"""Training every model family against transformers + torch autograd, run live on tiny random models built with
transformers (2-4 layers, hidden 32) and loaded into encore from the same safetensors.

Gradients: one padded batch, loss = cross-entropy of the sequence-classification logits; the loss and EVERY
parameter gradient must agree within 1e-4 relative, measured per tensor as max|g - g_ref| / max|g_ref| (encore's
packed Q/K/V weight and bias against the concatenation of transformers' query/key/value tensors). Then 5 AdamW steps
(warmup + linear decay, clipping) match torch's loss at every step (1e-4 relative) and the final parameters (1e-4,
per tensor as above; the key bias, whose gradient is identically zero so Adam follows rounding noise, within
5 * lr absolute). Dropout: HF placement checked site by site with p = 1 (deterministic: train-mode logits equal
transformers'), a statistical check of the embeddings site, central differences with fixed dropout seeds, eval
unaffected. Gradient checkpointing: gradients bitwise equal to those without it, dropout on.

Fine-tuning over 50 steps: a small BertForSequenceClassification (dropout 0, identical init from the same
safetensors, identical batches), 50 AdamW steps with warmup/linear decay and clipping: encore's loss equals
torch's within 1e-4 relative at every step and the final parameters agree within 1e-4 (max|diff| / max|torch param|,
per tensor).
"""
import numpy as np
import pytest
import torch
import transformers as T

import encore

REL = 1e-4
H, LAYERS, HEADS, FF, VOCAB, MAXPOS, LABELS = 32, 2, 4, 37, 99, 40, 3


@pytest.fixture(autouse=True)
def _grad_on():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.enable_grad():
        yield
    torch.set_num_threads(threads)


BERT_NAMES = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
              "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm")


def _no_dropout(family):
    if family == "distilbert":
        return dict(dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0)
    if family == "albert":
        return dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
    return dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def build(family, **dropout):
    """(config class kwargs, task model class, base prefix, per-layer HF names of (q, k, v, o, ln1, ffn_in, ffn_out,
    ln2), encore layer prefix -> HF layer prefix)."""
    common = dict(vocab_size=VOCAB, max_position_embeddings=MAXPOS, num_labels=LABELS)
    bert_like = dict(hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FF, **common)
    bert_names = BERT_NAMES
    kw = {**_no_dropout(family), **dropout}
    if family == "bert":
        return T.BertForSequenceClassification(T.BertConfig(**bert_like, **kw)), "bert.", bert_names
    if family == "roberta":
        return (T.RobertaForSequenceClassification(T.RobertaConfig(**bert_like, pad_token_id=1, **kw)), "roberta.",
                bert_names)
    if family == "xlm-roberta":
        return (T.XLMRobertaForSequenceClassification(T.XLMRobertaConfig(**bert_like, pad_token_id=1, **kw)),
                "roberta.", bert_names)
    if family == "electra":  # embedding_size != hidden_size: embeddings_project is trained too
        return (T.ElectraForSequenceClassification(T.ElectraConfig(**bert_like, embedding_size=16, **kw)), "electra.",
                bert_names)
    if family == "mpnet":
        return (T.MPNetForSequenceClassification(T.MPNetConfig(**bert_like, **kw)),
                "mpnet.", ("attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o",
                           "attention.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm"))
    if family == "albert":  # 4 steps over 2 groups: each shared layer runs twice; factorized embeddings (16 -> 32)
        cfg = T.AlbertConfig(embedding_size=16, hidden_size=H, num_hidden_layers=4, num_hidden_groups=2,
                             inner_group_num=1, num_attention_heads=HEADS, intermediate_size=FF, hidden_act="gelu_new",
                             **common, **kw)
        return (T.AlbertForSequenceClassification(cfg), "albert.",
                ("attention.query", "attention.key", "attention.value", "attention.dense", "attention.LayerNorm",
                 "ffn", "ffn_output", "full_layer_layer_norm"))
    if family == "distilbert":
        cfg = T.DistilBertConfig(dim=H, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FF, **common, **kw)
        return (T.DistilBertForSequenceClassification(cfg), "distilbert.",
                ("attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin", "sa_layer_norm",
                 "ffn.lin1", "ffn.lin2", "output_layer_norm"))
    raise ValueError(family)


FAMILIES = ["bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "mpnet"]
LAYER_PARTS = {"norm1": 4, "linear1": 5, "linear2": 6, "norm2": 7}


def hf_names(name, base, names):
    """encore parameter name -> the transformers names it stands for (packed Q/K/V -> three)."""
    if name.startswith(("classifier", "pre_classifier")):
        return [name]
    for marker in (".self_attn.", ".linear1.", ".linear2.", ".norm1.", ".norm2."):
        if marker in name:
            layer, rest = name.split(marker, 1)
            part = marker.strip(".")
            kind = name.rsplit(".", 1)[1].replace("in_proj_", "")
            p = base + layer + "."
            if part == "self_attn" and rest.startswith("in_proj"):
                return [p + names[i] + "." + kind for i in range(3)]
            if part == "self_attn":
                return [p + names[3] + "." + rest.split(".", 1)[1]]
            return [p + names[LAYER_PARTS[part]] + "." + rest]
    return [base + name]


def make_model(family, tmp_path, seed=0, **dropout):
    torch.manual_seed(seed)
    ref, base, names = build(family, **dropout)
    ref.save_pretrained(tmp_path, safe_serialization=True)
    ref.train()
    model = encore.AutoModel.load(str(tmp_path)).train()
    return ref, model, base, names


def batch(rng, family, B=5):
    pad = 1 if family in ("roberta", "xlm-roberta", "mpnet") else 0
    lengths = rng.integers(3, 17, B)
    lengths[0] = 16
    ids = np.full((B, lengths.max()), pad, np.int64)
    mask = np.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n] = rng.integers(2, VOCAB, n)
        mask[b, :n] = 1
    types = None if family in ("distilbert", "mpnet", "roberta", "xlm-roberta") else \
        (rng.integers(0, 2, ids.shape) * mask).astype(np.int64)
    return ids, mask, types, rng.integers(0, LABELS, B)


def torch_inputs(ids, mask, types):
    kw = dict(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    if types is not None:
        kw["token_type_ids"] = torch.from_numpy(types)
    return kw


def torch_loss(ref, ids, mask, types, labels):
    return torch.nn.functional.cross_entropy(ref(**torch_inputs(ids, mask, types)).logits, torch.from_numpy(labels))


def encore_loss_and_backward(model, ids, mask, types, labels):
    res = model(ids, mask, types, return_dict=True)
    loss, dlogits = encore.losses.cross_entropy(res["logits"], labels)
    model.backward(d_logits=dlogits)
    return loss


def rel(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_parameter_gradient_matches_transformers(family, tmp_path):
    ref, model, base, names = make_model(family, tmp_path)
    params = model.parameters_module()
    ids, mask, types, labels = batch(np.random.default_rng(1), family)
    lt = torch_loss(ref, ids, mask, types, labels)
    lt.backward()
    params.zero_grad()
    le = encore_loss_and_backward(model, ids, mask, types, labels)
    assert abs(le - lt.item()) <= REL * abs(lt.item()), (le, lt.item())
    hf = dict(ref.named_parameters())
    covered = set()
    grads = params.grads()
    for name, g in grads.items():
        parts = hf_names(name, base, names)
        covered.update(parts)
        want = np.concatenate([hf[n].grad.numpy() for n in parts]) if len(parts) > 1 else hf[parts[0]].grad.numpy()
        assert g.shape == want.shape, name
        assert np.abs(want).max() > 0, f"{name}: reference gradient is zero - the test would not see a wrong one"
        assert rel(g, want) <= REL, f"{family} {name}: gradient rel diff {rel(g, want):.2e}"
    assert covered == set(hf), f"not compared: {sorted(set(hf) - covered)}; unknown: {sorted(covered - set(hf))}"


@pytest.mark.parametrize("family", FAMILIES)
def test_adamw_steps_match_torch(family, tmp_path):
    ref, model, base, names = make_model(family, tmp_path)
    params = model.parameters_module()
    lr, steps = 2e-3, 5
    topt = torch.optim.AdamW(ref.parameters(), lr=lr, weight_decay=0.01)
    eopt = encore.optim.AdamW(params, lr=lr, weight_decay=0.01)
    rng = np.random.default_rng(2)
    for step in range(steps):
        lr_now = encore.optim.learning_rate_at(step, lr, 2, steps, "linear")
        for g in topt.param_groups:
            g["lr"] = lr_now
        eopt.lr = lr_now
        ids, mask, types, labels = batch(rng, family)
        topt.zero_grad()
        lt = torch_loss(ref, ids, mask, types, labels)
        lt.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        topt.step()
        eopt.zero_grad()
        le = encore_loss_and_backward(model, ids, mask, types, labels)
        encore.optim.clip_grad_norm_(params, 1.0)
        eopt.step()
        assert abs(le - lt.item()) <= REL * abs(lt.item()), f"step {step}: loss {le} vs torch {lt.item()}"
    hf = dict(ref.named_parameters())
    for name, p in params.state_dict().items():
        parts = hf_names(name, base, names)
        want = np.concatenate([hf[n].detach().numpy() for n in parts]) if len(parts) > 1 else hf[parts[0]].detach().numpy()
        got = p
        if name.endswith("in_proj_bias"):  # the key bias: zero gradient, Adam follows rounding noise
            E = want.shape[0] // 3
            assert np.abs(got[E:2 * E] - want[E:2 * E]).max() <= steps * lr
            want, got = np.concatenate([want[:E], want[2 * E:]]), np.concatenate([got[:E], got[2 * E:]])
        assert rel(got, want) <= REL, f"{family} {name}: final parameter rel diff {rel(got, want):.2e}"


def _dropout_kwargs(family, hidden, attention, classifier):
    if family == "distilbert":
        return dict(dropout=hidden, attention_dropout=attention, seq_classif_dropout=classifier)
    if family == "albert":
        return dict(hidden_dropout_prob=hidden, attention_probs_dropout_prob=attention, classifier_dropout_prob=classifier)
    if family == "mpnet":  # the head uses hidden_dropout_prob; no separate classifier probability
        return dict(hidden_dropout_prob=hidden, attention_probs_dropout_prob=attention)
    return dict(hidden_dropout_prob=hidden, attention_probs_dropout_prob=attention, classifier_dropout=classifier)


SITES = [("hidden", (1.0, 0.0, 0.0)), ("attention_probs", (0.0, 1.0, 0.0)), ("classifier", (0.0, 0.0, 1.0))]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("site,probs", SITES, ids=[s for s, _ in SITES])
def test_dropout_sites_match_transformers_with_p_one(family, site, probs, tmp_path):
    """p = 1 at one site drops everything there (deterministically, in both libraries): the train-mode logits then
    agree only if encore drops at the same places as transformers."""
    if family == "mpnet" and site == "classifier":
        pytest.skip("MPNet's head has no separate dropout probability")
    ref, model, _, _ = make_model(family, tmp_path, **_dropout_kwargs(family, *probs))
    ids, mask, types, labels = batch(np.random.default_rng(3), family)
    kw = torch_inputs(ids, mask, types)
    with torch.no_grad():
        want = ref(**kw).logits.numpy()
        ref.eval()
        want_eval = ref(**kw).logits.numpy()
    got = model(ids, mask, types, return_dict=True)["logits"]
    # the site moves the logits 100x more than the tolerance below: a misplaced dropout would be seen
    assert rel(want, want_eval) > 1e-3
    assert rel(got, want) <= 1e-5, f"{family}: dropout at {site}: rel diff {rel(got, want):.2e}"
    model.eval()
    assert rel(model(ids, mask, types, return_dict=True)["logits"], want_eval) <= 1e-5  # eval: no dropout


def test_embedding_dropout_statistics(tmp_path):
    """hidden_states[0] is the embeddings' output after dropout (as in transformers): a fraction p of it is zero and
    the rest is the eval value scaled by 1/(1-p). 8*32*32 = 8192 elements: the zero fraction's standard deviation
    is 0.005 at p = 0.3; tolerance 0.03 (6 sigma)."""
    p = 0.3
    _, model, _, _ = make_model("bert", tmp_path, **_dropout_kwargs("bert", p, 0.0, 0.0))
    rng = np.random.default_rng(4)
    ids = rng.integers(2, VOCAB, (8, 32)).astype(np.int64)
    encore.manual_seed(7)
    train = model(ids, output_hidden_states=True, return_dict=True)["hidden_states"][0]
    model.eval()
    ev = model(ids, output_hidden_states=True, return_dict=True)["hidden_states"][0]
    dropped = train == 0
    assert abs(dropped.mean() - p) <= 0.03, dropped.mean()
    assert np.allclose(train[~dropped], ev[~dropped] / (1 - p), rtol=1e-6, atol=0)
    model.train()
    encore.manual_seed(8)
    other = model(ids, output_hidden_states=True, return_dict=True)["hidden_states"][0]
    assert ((other == 0) != dropped).mean() > 0.2  # another seed, another mask


@pytest.mark.parametrize("family", ["bert", "albert", "mpnet", "distilbert"])
def test_gradients_with_dropout_match_central_differences(family, tmp_path):
    """With dropout at every site (p = 0.1), the backward must use the forward's masks: d(loss)/d(param) for a few
    entries of several parameters against central differences of encore's own loss with the same seed
    (encore.manual_seed before each forward). float32, eps 1e-2: tolerance 3e-2 * max(1, |numeric|) + 1e-3."""
    _, model, _, _ = make_model(family, tmp_path, **_dropout_kwargs(family, 0.1, 0.1, 0.1))
    params = model.parameters_module()
    ids, mask, types, labels = batch(np.random.default_rng(5), family, B=3)

    def loss():
        encore.manual_seed(11)
        res = model(ids, mask, types, return_dict=True)
        return encore.losses.cross_entropy(res["logits"], labels)[0]

    params.zero_grad()
    encore.manual_seed(11)
    encore_loss_and_backward(model, ids, mask, types, labels)
    grads = {k: v.copy() for k, v in params.grads().items()}
    sd = params.state_dict()
    rng = np.random.default_rng(6)
    checked = 0
    for name in sorted(sd):
        if not any(s in name for s in ("word_embeddings", "in_proj_weight", "linear1.weight", "norm2.weight",
                                       "classifier", "relative_attention_bias", "mapping_in.weight")):
            continue
        g = grads[name]
        flat = np.argsort(-np.abs(g).ravel())[:2].tolist() + [int(rng.integers(g.size))]
        for i in flat:
            idx = np.unravel_index(i, g.shape)
            orig = sd[name][idx]
            vals = []
            for delta in (1e-2, -1e-2):
                sd[name][idx] = orig + delta
                params.load_state_dict(sd)
                vals.append(loss())
            sd[name][idx] = orig
            params.load_state_dict(sd)
            num = (vals[0] - vals[1]) / 2e-2
            assert abs(num - g[idx]) <= 3e-2 * max(1.0, abs(num)) + 1e-3, (name, idx, num, g[idx])
            checked += 1
    assert checked >= 12


@pytest.mark.parametrize("family", FAMILIES)
def test_gradient_checkpointing_gives_the_same_gradients(family, tmp_path):
    """Dropout on everywhere (p = 0.1, so the recomputed forward must redraw the same masks): every gradient with
    gradient checkpointing is bitwise the one without, and so is the loss."""
    _, model, _, _ = make_model(family, tmp_path, **_dropout_kwargs(family, 0.1, 0.1, 0.1))
    params = model.parameters_module()
    ids, mask, types, labels = batch(np.random.default_rng(9), family)
    out = []
    for ckpt in (False, True):
        model.gradient_checkpointing = ckpt
        assert model.gradient_checkpointing == ckpt
        params.zero_grad()
        encore.manual_seed(3)
        loss = encore_loss_and_backward(model, ids, mask, types, labels)
        out.append((loss, {k: v.copy() for k, v in params.grads().items()}))
    assert out[0][0] == out[1][0]
    for name, g in out[0][1].items():
        assert np.array_equal(g, out[1][1][name]), f"{family} {name}: checkpointed gradient differs"
        assert np.abs(g).max() > 0 or "key" in name or name.endswith("in_proj_bias"), name


def test_nn_encoder_gradient_checkpointing_is_bitwise():
    from encore import nn as enn
    layer = enn.TransformerEncoderLayer(16, 4, 24, 0.2, "gelu", batch_first=True)
    enc = enn.TransformerEncoder(layer, 3, share_parameters=False).train()
    x = np.random.default_rng(0).standard_normal((2, 7, 16)).astype(np.float32)
    g = np.random.default_rng(1).standard_normal((2, 7, 16)).astype(np.float32)
    res = []
    for ckpt in (False, True):
        enc.gradient_checkpointing = ckpt
        enc.zero_grad()
        encore.manual_seed(5)
        y = enc(x)
        dx = enc.backward(g)
        res.append((y, dx, {k: v.copy() for k, v in enc.grads().items()}))
    assert np.array_equal(res[0][0], res[1][0]) and np.array_equal(res[0][1], res[1][1])
    for k in res[0][2]:
        assert np.array_equal(res[0][2][k], res[1][2][k]), k


def test_fifty_steps_bert_sequence_classification(tmp_path):
    torch.manual_seed(0)
    cfg = T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
                       max_position_embeddings=40, num_labels=3, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0)
    ref = T.BertForSequenceClassification(cfg)
    ref.save_pretrained(tmp_path, safe_serialization=True)
    ref.train()
    model = encore.AutoModel.load(str(tmp_path)).train()
    params = model.parameters_module()
    topt = torch.optim.AdamW(ref.parameters(), lr=2e-3, weight_decay=0.01)
    eopt = encore.optim.AdamW(params, lr=2e-3, weight_decay=0.01)
    rng = np.random.default_rng(0)
    losses = []
    for step in range(50):
        lr = encore.optim.learning_rate_at(step, 2e-3, 5, 50, "linear")
        for g in topt.param_groups:
            g["lr"] = lr
        eopt.lr = lr
        lengths = rng.integers(3, 17, 6)
        ids = np.zeros((6, lengths.max()), np.int64)
        mask = np.zeros_like(ids)
        for b, n in enumerate(lengths):
            ids[b, :n] = rng.integers(1, 99, n)
            mask[b, :n] = 1
        types = (rng.integers(0, 2, ids.shape) * mask).astype(np.int64)
        labels = rng.integers(0, 3, 6)
        # torch
        topt.zero_grad()
        out = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                  token_type_ids=torch.from_numpy(types))
        lt = torch.nn.functional.cross_entropy(out.logits, torch.from_numpy(labels))
        lt.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        topt.step()
        # encore
        eopt.zero_grad()
        res = model(ids, mask, types, return_dict=True)
        le, dlogits = encore.losses.cross_entropy(res["logits"], labels)
        model.backward(d_logits=dlogits)
        encore.optim.clip_grad_norm_(params, 1.0)
        eopt.step()
        assert abs(le - lt.item()) <= 1e-4 * abs(lt.item()), f"step {step}: loss {le} vs torch {lt.item()}"
        losses.append(le)
    hf = dict(ref.named_parameters())
    for name, p in params.state_dict().items():
        parts = [hf[n].detach().numpy() for n in hf_names(name, "bert.", BERT_NAMES)]
        want = np.concatenate(parts) if len(parts) > 1 else parts[0]
        got = p
        if name.endswith("in_proj_bias"):  # key bias: identically zero gradient, Adam follows noise (see test_training.py)
            E = want.shape[0] // 3
            assert np.abs(got[E:2 * E] - want[E:2 * E]).max() <= 50 * 2e-3
            want, got = np.concatenate([want[:E], want[2 * E:]]), np.concatenate([got[:E], got[2 * E:]])
        d = np.abs(got - want).max() / np.abs(want).max()
        assert d <= 1e-4, f"{name}: final parameter rel diff {d:.2e}"
    assert len(params.state_dict()) == len(hf) - 8  # per layer, query/key/value weight+bias (6) packed into 2


BASE = {"bert": T.BertModel, "roberta": T.RobertaModel, "xlm-roberta": T.XLMRobertaModel,
        "distilbert": T.DistilBertModel, "albert": T.AlbertModel, "electra": T.ElectraModel, "mpnet": T.MPNetModel}


@pytest.mark.parametrize("family", FAMILIES)
def test_new_sequence_classifier_is_the_family_head(family, tmp_path):
    """add_sequence_classifier on a base checkpoint builds the family's *ForSequenceClassification head: with its
    weights copied into transformers' task model (over the same base weights), the eval logits agree (1e-5
    relative), and the head's parameters are named as transformers names them."""
    ref, base, _ = build(family)
    cfg = ref.config
    torch.manual_seed(0)
    BASE[family](cfg).save_pretrained(tmp_path, safe_serialization=True)
    model = encore.AutoModel.load(str(tmp_path))
    model.add_sequence_classifier(LABELS, seed=3)
    assert model.config["head"] == "sequence_classification"
    heads = {k: v for k, v in model.parameters_module().state_dict().items() if k.startswith(("classifier", "pre_"))}
    task = type(ref).from_pretrained(tmp_path, num_labels=LABELS).eval()
    task_params = dict(task.named_parameters())
    assert set(heads) == {k for k in task_params if not k.startswith(base)}
    with torch.no_grad():
        for k, v in heads.items():
            assert 0.015 < v.std() < 0.025 if v.ndim == 2 else not v.any(), k  # normal(0, 0.02), zero bias
            task_params[k].copy_(torch.from_numpy(v))
    ids, mask, types, _ = batch(np.random.default_rng(4), family)
    kw = torch_inputs(ids, mask, types)
    with torch.no_grad():
        want = task(**kw).logits.numpy()
    assert rel(model(ids, mask, types, return_dict=True)["logits"], want) <= 1e-5


def test_encore_train_gradient_checkpointing_is_bitwise(tmp_path):
    """`encore train --gradient-checkpointing` (and train(gradient_checkpointing=True)) logs exactly the losses and
    gradient norms of the run without it, with dropout on (0.1 at every Hugging Face site)."""
    import csv
    import json
    import os
    import pathlib
    import subprocess
    root = pathlib.Path(__file__).resolve().parents[2]
    binary = pathlib.Path(os.environ.get("ENCORE_BIN", root / "build" / "encore"))
    model_dir = tmp_path / "model"
    ref, _, _ = build("roberta", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    ref.save_pretrained(model_dir, safe_serialization=True)
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = ["good", "bad", "film", "plot", "the", "was", "very"]
    tok = Tokenizer(models.WordLevel({w: i + 5 for i, w in enumerate(words)} | {"<unk>": 3}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(model_dir / "tokenizer.json"))
    rng = np.random.default_rng(0)
    with open(tmp_path / "data.jsonl", "w") as f:
        for _ in range(40):
            lab = int(rng.integers(0, LABELS))
            f.write(json.dumps({"text": f"the film was very {words[lab]}", "label": lab}) + "\n")
    logs = []
    for flag in ([], ["--gradient-checkpointing"]):
        log = tmp_path / f"log{len(logs)}.csv"
        res = subprocess.run([str(binary), "train", "--model", model_dir, "--data", tmp_path / "data.jsonl", "--steps",
                              "4", "--batch-size", "8", "--lr", "1e-3", "--threads", "1", "-q", "--log", log, *flag],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        logs.append([(r["loss"], r["grad_norm"]) for r in csv.DictReader(open(log))])
    assert len(logs[0]) == 4 and logs[0] == logs[1]
    py = [encore.train_classifier(str(model_dir), str(tmp_path / "data.jsonl"), steps=4, batch_size=8, lr=1e-3,
                                  gradient_checkpointing=c)["losses"] for c in (False, True)]
    assert py[0] == py[1]
