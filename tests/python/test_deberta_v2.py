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
  conv      v2 with deberta-v2-xlarge's ConvLayer (conv_kernel_size 3, conv_groups 2, conv_act gelu); also
            conv-seqcls (v3, kernel 5, the default tanh) under the sequence classifier;
plus the heads (sequence classification through the ContextPooler on v3's and v2's shapes, token classification,
question answering, masked LM in both layouts: legacy cls.predictions and lm_predictions.lm_head).

Tolerances: last_hidden_state, every hidden_states entry and logits within 1e-5 max abs (fp32; measured <= 1.2e-6
on hidden states of magnitude <= 4, <= 4.2e-7 on logits) on real positions
(transformers masks a padded query row entirely - softmax over finfo.min everywhere - so padded positions are not
defined; encore's padding-free forward gives exact zeros there, which is checked).

Beyond the forward: bf16 / int8 within cosine 0.999 / 0.995 of fp32 (measured >= 0.999998 both); training, the loss
and EVERY parameter gradient vs torch autograd through transformers within 1e-4 relative per tensor (measured
<= 6.4e-6; the biases the softmax cannot see - shift_invariant - must be rounding noise on both sides), gradient
checkpointing bitwise equal to plain training under dropout; export_hf loading strictly into transformers (outputs
within 1e-5); DeBERTa-v3's tokenizer.json (transformers' DebertaV2Tokenizer: Unigram, Metaspace, [CLS]/[SEP]
template) token for token equal to HF tokenizers; a sentence-transformers directory vs SentenceTransformer.encode
within 1e-5 (measured 1.5e-7); `encore train` writing what transformers loads; unsupported config fields and
missing weights refused by name.
"""
import copy
import json
import pathlib

import numpy as np
import pytest
import torch
import transformers as T

import encore
from conftest import (assert_checkpointing_is_bitwise, assert_every_gradient_matches, assert_load_refused,
                      assert_loss_close, assert_low_precision_close, assert_missing_weight_named,
                      backward_through_reference, max_diff, perturbed, save_random_checkpoints, write_config)

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
    ("conv", dict(V2, conv_kernel_size=3, conv_groups=2, conv_act="gelu"), T.DebertaV2Model, LENGTHS),
    ("seqcls", dict(V3, num_labels=3, pooler_hidden_act="gelu", pooler_dropout=0.1, cls_dropout=0.2),
     T.DebertaV2ForSequenceClassification, LENGTHS),
    ("seqcls-v2", dict(V2, num_labels=2, pooler_hidden_act="tanh"), T.DebertaV2ForSequenceClassification, LENGTHS),
    ("tokcls", dict(V3, num_labels=5), T.DebertaV2ForTokenClassification, LENGTHS),
    ("conv-seqcls", dict(V3, conv_kernel_size=5, num_labels=2), T.DebertaV2ForSequenceClassification, LENGTHS),
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
    return save_random_checkpoints(tmp_path_factory, CASES, lambda case: case[2](T.DebertaV2Config(**case[1])),
                                   seed=300)


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


ERRORS = [
    ("conv", "v2", dict(conv_kernel_size=4), "conv_kernel_size 4 is even"),
    ("conv_groups", "v2", dict(conv_kernel_size=3, conv_groups=3), "conv_groups 3"),
    ("pos_att_type", "v3", dict(pos_att_type=["c2p", "p2p"]), "pos_att_type 'p2p'"),
    ("norm_rel_ebd", "v3", dict(norm_rel_ebd="batch_norm"), "norm_rel_ebd 'batch_norm'"),
    ("head_size", "v3", dict(attention_head_size=16), "attention_head_size 16"),
    ("pooler_size", "seqcls", dict(pooler_hidden_size=16), "pooler_hidden_size 16"),
    ("buckets", "v3", dict(position_buckets=4, max_relative_positions=3), "position_buckets 4"),
    ("activation", "v3", dict(hidden_act="swishy"), "swishy"),
]


@pytest.mark.parametrize("base,changes,message", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_unsupported_config_is_refused(saved, tmp_path, base, changes, message):
    assert_load_refused(write_config(saved[base][0], tmp_path / "m", **changes), message, names="config.json")


def test_missing_weight_and_bad_inputs(saved, tmp_path):
    for base, name in [("v2", "encoder.layer.1.attention.self.pos_query_proj.weight"),
                       ("v3", "encoder.LayerNorm.bias"), ("seqcls", "pooler.dense.weight")]:
        assert_missing_weight_named(saved[base][0], tmp_path / base, name)
    enc = encore.AutoModel.load(saved["v2"][0])  # absolute positions: at most max_position_embeddings 300
    with pytest.raises(encore.Error, match="exceeds max_position_embeddings 300"):
        enc(np.ones((1, 301), dtype=np.int64))
    with pytest.raises(encore.Error, match="input_ids"):
        enc(np.full((1, 4), 150, dtype=np.int64))  # vocab_size 150
    with pytest.raises(encore.Error, match="token_type_ids"):
        enc(np.ones((1, 4), dtype=np.int64), np.ones((1, 4), dtype=np.int64), np.full((1, 4), 2, dtype=np.int64))


@pytest.mark.parametrize("dtype,floor", [("bfloat16", 0.999), ("int8", 0.995)])
def test_bf16_int8_close_to_fp32(saved, dtype, floor):
    """The layers' GEMMs (and the relative projections) in bf16 / int8: every real token's vector within cosine
    `floor` of fp32's, logits too; and not fp32's bits (the dtype ran)."""
    for name in ["v3-long", "v2", "seqcls"]:
        path, model = saved[name]
        ids, mask, types = batch(model.config, BY_NAME[name][3], seed=1)
        real = mask.astype(bool)
        ref = encore.AutoModel.load(path)(ids, mask, types, return_dict=True)
        got = encore.AutoModel.load(path, dtype=dtype)(ids, mask, types, return_dict=True)
        for key in ["last_hidden_state"] + (["logits"] if name == "seqcls" else []):
            a, b = np.asarray(got[key]), np.asarray(ref[key])
            if key == "last_hidden_state":
                a, b = a[real], b[real]
            assert_low_precision_close(a, b, floor, f"{name} {dtype} {key}")


NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pooler_dropout=0.0, cls_dropout=0.0)
GRAD_REL = 1e-4
GRAD_CASES = ["v3", "v2", "embed", "c2p-only", "no-rel", "conv", "seqcls", "seqcls-v2", "tokcls", "qa", "conv-seqcls"]


@pytest.fixture
def _torch_grad():
    with torch.enable_grad():
        yield


def shift_invariant(param, cfg):
    """Biases whose gradient is 0 in exact arithmetic (adding b to every key (or every c2p position key) adds
    q_i·b to all of query i's scores, which the softmax ignores; only the p2c term (k_j + b)·Qr[row(i - j)] varies
    with the key, so key_proj.bias learns only through it. The same holds for the relative LayerNorm's bias,
    which moves every projected relative row by one vector.)"""
    p2c = cfg.relative_attention and "p2c" in (cfg.pos_att_type or [])
    return param.endswith("pos_key_proj.bias") or (
        param.endswith(("self.key_proj.bias", "encoder.LayerNorm.bias")) and not p2c)


@pytest.mark.parametrize("name", GRAD_CASES)
def test_every_parameter_gradient_matches_torch_autograd(name, tmp_path, _torch_grad):
    """Training: one padded batch, dropout 0 (so both sides compute the same function), loss = sum(R * output) with
    a fixed random R over the logits, or over the real tokens' last hidden state for base models; the loss and
    EVERY parameter gradient vs torch autograd through transformers within 1e-4 relative per tensor,
    max|g - g_ref| / max|g_ref|."""
    _, kwargs, cls, lengths = BY_NAME[name]
    torch.manual_seed(77)
    ref = perturbed(cls(T.DebertaV2Config(**{**kwargs, **NO_DROPOUT})))
    ref.save_pretrained(tmp_path, safe_serialization=True)
    ref.train()
    enc = encore.AutoModel.load(str(tmp_path)).train()
    params = enc.parameters_module()
    ids, mask, types = batch(ref.config, lengths, seed=21)
    real = mask.astype(bool)
    out = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
              token_type_ids=torch.from_numpy(types))
    has_logits = cls is not T.DebertaV2Model
    if cls is T.DebertaV2ForQuestionAnswering:
        target = torch.stack([out.start_logits, out.end_logits], -1)
    else:
        target = out.logits if has_logits else out.last_hidden_state
    r = backward_through_reference(target, real)  # padded positions: not defined, nothing reads them
    params.zero_grad()
    res = enc(ids, mask, types, return_dict=True)
    assert_loss_close(res["logits"] if has_logits else res["last_hidden_state"], target, r, GRAD_REL)
    if has_logits:
        enc.backward(d_logits=r)
    else:
        enc.backward(d_last_hidden_state=r)
    task = cls is not T.DebertaV2Model
    worst = assert_every_gradient_matches(
        params.grads(), dict(ref.named_parameters()),
        lambda n: "deberta." + n if task and not n.startswith(("pooler.", "classifier.", "qa_outputs.")) else n,
        GRAD_REL, name, near_zero=lambda n: shift_invariant(n, ref.config))
    print(f"{name}: worst gradient rel diff {worst:.2e}")


@pytest.mark.parametrize("name", ["seqcls", "conv-seqcls"])
def test_gradient_checkpointing_and_dropout_give_the_same_gradients(saved, name):
    """Dropout 0.2 at every site (embeddings, relative embeddings, attention probabilities and output, FFN,
    the ConvLayer after layer 0 (conv-seqcls: a step between layers, not re-run by checkpointing), pooler,
    classifier): the same seed gives bitwise the same logits and gradients with and without gradient
    checkpointing; and dropout does act (different logits from eval)."""
    path, model = saved[name]
    ids, mask, types = batch(model.config, LENGTHS, seed=13)
    r = np.random.default_rng(2).standard_normal((len(LENGTHS), model.config.num_labels)).astype(np.float32)
    assert_checkpointing_is_bitwise(path, (ids, mask, types), "logits", r)


@pytest.mark.parametrize("base,kind", [("v3", "sequence"), ("v2", "token"), ("v2", None), ("seqcls-v2", "loaded"),
                                       ("tokcls", "loaded"), ("qa", "loaded")])
def test_export_loads_into_transformers(saved, base, kind):
    """add_sequence_classifier / add_token_classifier on a base checkpoint (or none, or a task checkpoint as
    loaded), then export_hf: the tensors load into the transformers class export_hf names strictly, and its
    outputs equal encore's within 1e-5."""
    path, model = saved[base]
    enc = encore.AutoModel.load(path)
    if kind in ("sequence", "token"):
        getattr(enc, f"add_{kind}_classifier")(3, seed=5)
    arch, tensors = enc.export_hf()
    cls = {"sequence": T.DebertaV2ForSequenceClassification, "token": T.DebertaV2ForTokenClassification,
           None: T.DebertaV2Model, "loaded": type(model)}[kind]
    assert arch == cls.__name__
    ref = cls(copy.deepcopy(model.config) if kind == "loaded" else T.DebertaV2Config(**BY_NAME[base][1], num_labels=3))
    ref.eval()
    ref.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}, strict=True)
    ids, mask, types = batch(ref.config, LENGTHS, seed=8)
    real = mask.astype(bool)
    out = run_ref(ref, ids, mask, types)
    if cls is T.DebertaV2ForQuestionAnswering:
        want = torch.stack([out.start_logits, out.end_logits], -1).numpy()
    else:
        want = (out.last_hidden_state if cls is T.DebertaV2Model else out.logits).numpy()
    got = np.asarray(enc(ids, mask, types, return_dict=True)["last_hidden_state" if kind is None else "logits"])
    if got.ndim == 3:
        got, want = got[real], want[real]
    assert np.abs(want).max() > 1e-3  # a new head's logits are small (weights N(0, 0.02))
    assert max_diff(got, want) <= TOL


TEXTS = ["The film  was unbelievable!", "a", "", "  leading and trailing spaces  ", "tabs\tand\nnew\r\nlines",
         "Déberta tokenizer: é vs e\u0301 (NFC), ü, 😀 unknown", "good, bad; GREAT - 3.14 $5 #tags @x [MASK] done",
         "the " * 40]
PAIRS = [("is the film good?", "The film was great."), ("a", "b c"), ("", "empty first")]


def deberta_v3_tokenizer(**kwargs):
    """transformers 5.23's DebertaV2Tokenizer (what DeBERTa-v3 checkpoints load: Unigram, normalizer Replace
    (whitespace runs) + NFC + right Strip, Metaspace pre-tokenizer, [CLS] $A [SEP] ($B [SEP]) template) over a
    small Unigram vocabulary of whole words, subwords and single characters with [PAD] 0, [CLS] 1, [SEP] 2,
    [UNK] 3 as in DeBERTa-v3 and [MASK] last."""
    import string
    vocab = [("[PAD]", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[UNK]", 0.0), ("▁", -2.0)]
    for w in "the a an is was film good bad great deberta token izer un believ able ing ed s er lead space".split():
        vocab += [("▁" + w, -3.0 - 0.1 * len(w)), (w, -5.0 - 0.1 * len(w))]
    vocab += [(ch, -8.0) for ch in string.ascii_letters + string.digits + string.punctuation + "éü"]
    vocab.append(("[MASK]", 0.0))
    return T.DebertaV2Tokenizer(vocab=vocab, **kwargs)


@pytest.mark.parametrize("kwargs", [{}, dict(do_lower_case=True, split_by_punct=True)], ids=["v3", "lower-punct"])
def test_tokenizer_matches_hf(tmp_path, kwargs):
    """encore.Tokenizer on the tokenizer.json transformers writes for DeBERTa-v3: ids, token type ids and tokens
    equal HF tokenizers' exactly, single texts and pairs."""
    hf = deberta_v3_tokenizer(**kwargs)
    hf.save_pretrained(tmp_path)
    from tokenizers import Tokenizer as HfTokenizer
    ref = HfTokenizer.from_file(str(tmp_path / "tokenizer.json"))
    got = encore.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in TEXTS:
        a, b = got.encode(text), ref.encode(text)
        assert a.ids == b.ids and a.tokens == b.tokens, (text, a.tokens, b.tokens)
        assert a.ids == hf(text)["input_ids"]
    for first, second in PAIRS:
        a, b = got.encode(first, second), ref.encode(first, second)
        assert (a.ids, a.type_ids) == (b.ids, b.type_ids), (first, second)
    assert any(3 in ref.encode(t).ids for t in TEXTS)  # the unknown piece is exercised


@pytest.fixture(scope="module")
def st_dir(tmp_path_factory):
    """A sentence-transformers directory: a DeBERTa-v3-shaped model (vocabulary of deberta_v3_tokenizer) + mean
    pooling; (its path, the SentenceTransformer)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling, Transformer
    tok = deberta_v3_tokenizer()
    torch.manual_seed(8)
    model = perturbed(T.DebertaV2Model(T.DebertaV2Config(**dict(V3, vocab_size=len(tok)))))
    root = tmp_path_factory.mktemp("st")
    model.save_pretrained(root / "hf", safe_serialization=True)
    tok.save_pretrained(root / "hf")
    st = SentenceTransformer(modules=[Transformer(str(root / "hf"), max_seq_length=128), Pooling(32, pooling_mode="mean")],
                             device="cpu")
    st.save(str(root / "st"))
    return root / "st", st


def test_sentence_encoder_mean_pooling(st_dir):
    """encore.SentenceEncoder vs SentenceTransformer.encode on that directory, texts of 3-42 tokens batched
    together, within 1e-5."""
    path, st = st_dir
    texts = [t for t in TEXTS if t]
    ref = st.encode(texts, batch_size=4)
    got = encore.SentenceEncoder(str(path)).encode(texts, batch_size=4)
    assert np.abs(ref).max() > 0.1
    d = max_diff(got, ref)
    print(f"sentence embeddings max abs diff {d:.2e}")
    assert d <= TOL, f"sentence embeddings differ by {d:.2e}"


def test_encore_train_writes_what_transformers_loads(st_dir, tmp_path):
    """`encore train` fine-tunes the sentence encoder's DeBERTa for classification (a new ContextPooler head, 6
    AdamW steps); transformers loads the checkpoint as DebertaV2ForSequenceClassification with no missing or
    unexpected weight, and its logits equal encore's on the same directory within 1e-5; training moved them."""
    import os
    import subprocess
    root = pathlib.Path(__file__).resolve().parents[2]
    binary = os.environ.get("ENCORE_BIN", str(root / "build" / "encore"))
    path, _ = st_dir
    rng = np.random.default_rng(0)
    words = "good bad great awful fine terrible nice poor lovely horrible".split()
    with open(tmp_path / "train.jsonl", "w") as f:
        for _ in range(48):
            w = int(rng.integers(len(words)))
            f.write(json.dumps({"text": f"this film is {words[w]} and {words[int(rng.integers(len(words)))]}",
                                "label": w % 2}) + "\n")
    out = tmp_path / "out"
    run = subprocess.run([binary, "train", "--model", str(path), "--data", str(tmp_path / "train.jsonl"), "--steps", "6",
                          "--batch-size", "8", "--lr", "1e-3", "--output", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    ref, info = T.DebertaV2ForSequenceClassification.from_pretrained(str(out), output_loading_info=True)
    assert not any(info.values()), info
    ids, mask, types = batch(ref.config, LENGTHS, seed=3)
    want = run_ref(ref.eval(), ids, mask, types).logits.numpy()
    got = encore.AutoModel.load(str(out))(ids, mask, types, return_dict=True)["logits"]
    assert np.abs(want).max() > 0.01
    assert max_diff(got, want) <= TOL
    before = T.DebertaV2Model.from_pretrained(str(path)).embeddings.word_embeddings.weight
    assert float((ref.deberta.embeddings.word_embeddings.weight - before).abs().max()) > 1e-4


def test_quantize_and_info_cli(saved, tmp_path):
    """`encore quantize` stores DeBERTa's 6 encoder Linear weights per layer int8 and that checkpoint runs exactly
    as int8 on the fly; `encore info` names the family and head; a *ForMultipleChoice checkpoint loads as its base
    model with the unrunnable-head warning."""
    import os
    import subprocess
    root = pathlib.Path(__file__).resolve().parents[2]
    binary = os.environ.get("ENCORE_BIN", str(root / "build" / "encore"))
    path, model = saved["seqcls-v2"]
    out = subprocess.run([binary, "quantize", path, str(tmp_path / "q")], capture_output=True, text=True, check=True)
    assert f"{6 * model.config.num_hidden_layers} encoder Linear weights stored int8" in out.stdout, out.stdout
    ids, mask, types = batch(model.config, LENGTHS, seed=2)
    on_the_fly = encore.AutoModel.load(path, dtype="int8")(ids, mask, types, return_dict=True)
    stored = encore.AutoModel.load(str(tmp_path / "q"), dtype="int8")(ids, mask, types, return_dict=True)
    np.testing.assert_array_equal(stored["logits"], on_the_fly["logits"])
    np.testing.assert_array_equal(stored["last_hidden_state"], on_the_fly["last_hidden_state"])
    deberta_v3_tokenizer().save_pretrained(tmp_path / "q")
    info = subprocess.run([binary, "info", str(tmp_path / "q")], capture_output=True, text=True, check=True).stdout
    assert "DebertaV2ForSequenceClassification (model_type deberta-v2), head: sequence_classification" in info, info
    torch.manual_seed(5)
    T.DebertaV2ForMultipleChoice(T.DebertaV2Config(**V3)).save_pretrained(tmp_path / "mc")
    with pytest.warns(UserWarning, match="DebertaV2ForMultipleChoice checkpoint: encore does not run its task head"):
        enc = encore.AutoModel.load(str(tmp_path / "mc"))
    assert enc.config["head"] == ""
