"""T5 encoder (model_type "t5" / "mt5") against transformers 5.23's T5EncoderModel / MT5EncoderModel and the encoder
of T5ForConditionalGeneration, run live on random checkpoints built here with save_pretrained (weights perturbed so
no norm sits at 1), and sentence-t5 (Transformer + mean Pooling + Dense without bias + Normalize) through
encore.SentenceEncoder against sentence-transformers.

Configurations: feed_forward_proj "relu" (DenseReluDense wi/wo), "gated-gelu" (gelu_new, wi_0 gate, wi_1 up) and
"gated-silu"; T5 v1.1 / mT5 shapes where heads·d_kv != d_model; relative_attention_num_buckets /
relative_attention_max_distance 8/20 (sequences of 23 tokens reach the clamped last bucket) and 32/128 (the
log-spaced buckets); a full T5ForConditionalGeneration checkpoint whose decoder encore ignores.

Tolerances (measured on this machine in brackets): last_hidden_state and every hidden_states entry within 1e-5 max
abs (fp32; <= 2.4e-6 on outputs up to 3.5), on every position of a padded mixed-length batch (transformers computes
padded positions too: their keys are masked, every row has a real key) and, padding-free, on real positions with
exact zeros at padding. Gradients: every parameter within 1e-4 relative per tensor vs torch autograd (<= 1.3e-6;
relative_attention_bias <= 1.0e-6). bf16 cosine >= 0.999 (>= 0.99994), int8 >= 0.995 (>= 0.9993) to fp32 per
token. sentence-t5 embeddings within 1e-5 (<= 1.6e-7).
"""
import json
import pathlib
import shutil

import numpy as np
import pytest
import torch
import transformers as T

import encore
from conftest import (assert_attentions_match, assert_checkpointing_is_bitwise, assert_every_gradient_matches,
                      assert_load_refused, assert_loss_close, assert_low_precision_close, assert_missing_weight_named,
                      backward_through_reference, max_diff, padded_batch, perturbed, save_random_checkpoints,
                      write_config)

TOL = 1e-5

SMALL = dict(vocab_size=120, d_model=32, d_kv=8, d_ff=48, num_layers=3, num_heads=4, relative_attention_num_buckets=8,
             relative_attention_max_distance=20, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
LENGTHS = [17, 9, 1, 23]

# (name, config class, config kwargs, model class)
CASES = [
    ("relu", T.T5Config, dict(SMALL, feed_forward_proj="relu"), T.T5EncoderModel),
    ("gated-gelu", T.T5Config, dict(SMALL, d_kv=12, num_heads=3, d_ff=40, feed_forward_proj="gated-gelu",
                                    relative_attention_num_buckets=32, relative_attention_max_distance=128),
     T.T5EncoderModel),
    ("gated-silu", T.T5Config, dict(SMALL, num_heads=2, feed_forward_proj="gated-silu"), T.T5EncoderModel),
    ("mt5", T.MT5Config, dict(SMALL, d_kv=6, num_heads=5, feed_forward_proj="gated-gelu", tie_word_embeddings=False),
     T.MT5EncoderModel),
    ("full-t5", T.T5Config, dict(SMALL, num_decoder_layers=2, feed_forward_proj="gated-gelu"),
     T.T5ForConditionalGeneration),
]
BY_NAME = {c[0]: c for c in CASES}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (directory, torch model in eval mode)."""
    return save_random_checkpoints(tmp_path_factory, CASES,
                                   lambda case: case[3](case[1](**case[2], attn_implementation="eager")), seed=300)


def encoder_of(model):
    return model.encoder if isinstance(model, T.T5ForConditionalGeneration) else model


def batch(cfg, lengths, seed):
    return padded_batch(lengths, cfg.vocab_size, cfg.pad_token_id, seed, first_id=2)


@pytest.mark.parametrize("skip_padding", [False, True], ids=["padded", "padding-free"])
@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_matches_transformers(saved, name, skip_padding):
    path, model = saved[name]
    cfg = model.config
    enc = encore.AutoModel.load(path)
    assert enc.config["model_type"] == cfg.model_type
    ids, mask = batch(cfg, LENGTHS, seed=len(name))
    with torch.no_grad():
        ref = encoder_of(model)(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                                output_hidden_states=True)
    got = enc(ids, mask, return_dict=True, output_hidden_states=True, skip_padding=skip_padding)
    real = mask.astype(bool)
    compared = real if skip_padding else np.ones_like(real)

    def compare(a, b, what):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{name}: {what} shape {a.shape} vs {b.shape}"
        if skip_padding:
            assert np.all(a[~real] == 0), f"{name}: {what} not 0 at padded positions"
        d = max_diff(a[compared], b[compared])
        assert d <= TOL, f"{name}: {what} max abs diff {d:.2e}"

    assert np.abs(ref.last_hidden_state.numpy()).max() > 0.1  # a real signal
    compare(got["last_hidden_state"], ref.last_hidden_state.numpy(), "last_hidden_state")
    assert len(got["hidden_states"]) == len(ref.hidden_states) == cfg.num_layers + 1
    for i, (a, b) in enumerate(zip(got["hidden_states"], ref.hidden_states)):
        compare(a, b.numpy(), f"hidden_states[{i}]")


def test_attentions_and_sequence_alone(saved):
    """Per layer (B, heads, T, T) probabilities on real keys; each sequence alone equals itself in the batch."""
    path, model = saved["relu"]
    enc = encore.AutoModel.load(path)
    ids, mask = batch(model.config, [15, 6], seed=3)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), output_attentions=True)
    got = enc(ids, mask, output_attentions=True)
    assert_attentions_match(got["attentions"], ref.attentions, mask.astype(bool), model.config.num_layers, TOL)
    together = enc(ids, mask)
    for b, n in enumerate([15, 6]):
        assert max_diff(enc(ids[b:b + 1, :n])[0], together[b, :n]) <= TOL


SENSITIVITY = [  # each config rule moves the output far beyond the tolerance, so the parity above tests it
    ("buckets", dict(relative_attention_num_buckets=16)),
    ("max-distance", dict(relative_attention_max_distance=10)),
    ("epsilon", dict(layer_norm_epsilon=0.3)),
]


@pytest.mark.parametrize("changes", [c[1] for c in SENSITIVITY], ids=[c[0] for c in SENSITIVITY])
def test_each_rule_matters(saved, tmp_path, changes):
    path, model = saved["relu"]
    ids, mask = batch(model.config, LENGTHS, seed=11)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    if "relative_attention_num_buckets" in changes:  # the table must keep its shape: pad it with new rows
        from safetensors.numpy import load_file, save_file
        dst = write_config(path, tmp_path / "m", **changes)
        w = load_file(f"{dst}/model.safetensors")
        name = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        w[name] = np.concatenate([w[name], w[name][::-1]])
        save_file(w, f"{dst}/model.safetensors", metadata={"format": "pt"})
    else:
        dst = write_config(path, tmp_path / "m", **changes)
    real = mask.astype(bool)  # the default padding-free forward gives zeros at padding
    assert max_diff(encore.AutoModel.load(path)(ids, mask)[real], ref[real]) <= TOL
    assert max_diff(encore.AutoModel.load(dst)(ids, mask)[real], ref[real]) > 100 * TOL


ERRORS = [
    ("proj", dict(feed_forward_proj="gated-gelu-x"), "feed_forward_proj 'gated-gelu-x'"),
    ("act", dict(feed_forward_proj="quick_gelu"), "feed_forward_proj 'quick_gelu'"),
    ("decoder", dict(is_decoder=True), "is_decoder"),
    ("distance", dict(relative_attention_max_distance=2), "relative_attention_max_distance 2"),
]


@pytest.mark.parametrize("changes,message", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_unsupported_config_is_refused(saved, tmp_path, changes, message):
    assert_load_refused(write_config(saved["relu"][0], tmp_path / "m", **changes), message, names="config.json")


def test_missing_weight_and_bad_inputs(saved, tmp_path):
    assert_missing_weight_named(saved["relu"][0], tmp_path / "m", "encoder.block.2.layer.1.DenseReluDense.wo.weight")
    enc = encore.AutoModel.load(saved["relu"][0])
    with pytest.raises(encore.Error, match="input_ids"):
        enc(np.full((1, 4), 120, dtype=np.int64))  # vocab_size 120
    enc.train()
    with pytest.raises(encore.Error, match="d_pooler given but t5 has no pooler"):
        enc(np.ones((1, 4), dtype=np.int64))
        enc.backward(d_pooler_output=np.ones((1, 32), np.float32))


@pytest.mark.parametrize("dtype,floor", [("bfloat16", 0.999), ("int8", 0.995)])
def test_bf16_int8_close_to_fp32(saved, dtype, floor):
    """The blocks' GEMMs in bf16 / int8: every real token's vector within cosine `floor` of fp32's, and not fp32's
    bits (the dtype ran)."""
    for name in ["relu", "gated-gelu"]:
        path, model = saved[name]
        ids, mask = batch(model.config, LENGTHS, seed=1)
        real = mask.astype(bool)
        a = np.asarray(encore.AutoModel.load(path, dtype=dtype)(ids, mask))[real]
        b = np.asarray(encore.AutoModel.load(path)(ids, mask))[real]
        assert_low_precision_close(a, b, floor, f"{name} {dtype}")


GRAD_REL = 1e-4


@pytest.fixture
def _torch_grad():
    with torch.enable_grad():
        yield


@pytest.mark.parametrize("name", ["relu", "gated-gelu", "mt5"])
def test_every_parameter_gradient_matches_torch_autograd(saved, name, _torch_grad):
    """Training: one padded batch, dropout 0 on both sides (torch in eval mode, encore set_dropout(0)), loss =
    sum(R * last_hidden_state) with a fixed random R on the real tokens; the loss and EVERY parameter gradient
    (relative_attention_bias's included: attention's dScores summed over all blocks, scattered by bucket) vs torch
    autograd within 1e-4 relative per tensor, max|g - g_ref| / max|g_ref|."""
    import copy
    path, model = saved[name]
    ref = copy.deepcopy(model).eval()
    enc = encore.AutoModel.load(path).train()
    enc.set_dropout(0.0)
    params = enc.parameters_module()
    ids, mask = batch(ref.config, LENGTHS, seed=21)
    real = mask.astype(bool)
    out = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    r = backward_through_reference(out, real)
    params.zero_grad()
    assert_loss_close(enc(ids, mask, return_dict=True)["last_hidden_state"], out, r, GRAD_REL)
    enc.backward(d_last_hidden_state=r)
    hf = {n: p for n, p in ref.named_parameters() if n != "lm_head.weight"}  # mT5's untied head: not the encoder
    assert_every_gradient_matches(params.grads(), hf, lambda n: n, GRAD_REL, name)


def test_gradient_checkpointing_and_dropout(saved):
    """Dropout 0.2 at every site: the same seed gives bitwise the same output and gradients with and without
    gradient checkpointing, and dropout does act (the output differs from eval)."""
    path, model = saved["gated-gelu"]
    ids, mask = batch(model.config, LENGTHS, seed=13)
    r = np.random.default_rng(2).standard_normal((len(LENGTHS), max(LENGTHS), model.config.d_model)).astype(np.float32)
    assert_checkpointing_is_bitwise(path, (ids, mask), "last_hidden_state", r)


@pytest.mark.parametrize("name", ["gated-gelu", "full-t5"])
def test_export_loads_into_transformers(saved, tmp_path, name):
    """export_hf after every parameter moved (load_state_dict): written as model.safetensors next to the config,
    transformers' T5EncoderModel loads it with nothing missing or unexpected (a full T5 checkpoint exports its
    encoder), and its output equals encore's within 1e-5."""
    from safetensors.numpy import save_file
    path, model = saved[name]
    enc = encore.AutoModel.load(path).train()  # train() copies the mapped weights into writable memory
    enc.train(False)
    params = enc.parameters_module()
    rng = np.random.default_rng(6)
    # move every parameter, so a stale name or a stale copy would show
    params.load_state_dict({k: np.asarray(v) + rng.standard_normal(np.shape(v)).astype(np.float32) * 0.02
                            for k, v in params.state_dict().items()})
    arch, tensors = enc.export_hf()
    assert arch == "T5EncoderModel"
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp_path / "model.safetensors"),
              metadata={"format": "pt"})
    cfg = json.loads((pathlib.Path(path) / "config.json").read_text())
    cfg["architectures"] = [arch]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    back, info = T.T5EncoderModel.from_pretrained(str(tmp_path), output_loading_info=True, attn_implementation="eager")
    assert not any(info.values()), info
    ids, mask = batch(model.config, LENGTHS, seed=8)
    with torch.no_grad():
        want = back.eval()(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    got = enc(ids, mask, skip_padding=False)
    assert max_diff(got, want.numpy()) <= TOL
    with torch.no_grad():
        old = encoder_of(model)(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    assert max_diff(got, old.last_hidden_state.numpy()) > 100 * TOL  # the changed weights were exported


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer and sentence-t5
# ---------------------------------------------------------------------------------------------------------------
TEXTS = ["a", "Sentence-T5 pools the encoder's tokens by their mean.", "relative position buckets " * 9,
         "short  text   with spaces", "Ünïcödé  ｆｕｌｌｗｉｄｔｈ ①② and émojis 🙂", "the final layer norm is RMS " * 4]


@pytest.fixture(scope="module")
def t5_tokenizer(tmp_path_factory):
    """A T5-shaped tokenizer.json trained here: Unigram (pad 0, </s> 1, <unk> 2 as T5's), normalizer Precompiled (a
    real SentencePiece nmt_nfkc charsmap) + Replace(' {2,}', ' '), pre-tokenizer WhitespaceSplit + Metaspace,
    TemplateProcessing appending </s>; saved with transformers' PreTrainedTokenizerFast (tokenizer.json and
    tokenizer_config.json). Returns (directory, tokenizers.Tokenizer)."""
    import sys
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools"))
    from trained_tokenizers import CHARSMAP, training_texts
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(CHARSMAP.read_bytes()),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(training_texts(TEXTS), trainers.UnigramTrainer(
        vocab_size=600, show_progress=False, unk_token="<unk>", special_tokens=["<pad>", "</s>", "<unk>"]))
    assert [tok.token_to_id(t) for t in ["<pad>", "</s>", "<unk>"]] == [0, 1, 2]
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    d = tmp_path_factory.mktemp("t5tok")
    T.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                              model_max_length=512).save_pretrained(str(d))
    return d, Tokenizer.from_file(str(d / "tokenizer.json"))


def test_tokenizer_ids_match_hf_tokenizers(t5_tokenizer):
    """encore.Tokenizer on that tokenizer.json: ids, tokens and offsets equal HF tokenizers' on every text (</s>
    appended), pairs too."""
    d, tok = t5_tokenizer
    ours = encore.Tokenizer.load(str(d / "tokenizer.json"))
    for text in TEXTS:
        want, got = tok.encode(text), ours.encode(text)
        assert list(got.ids) == want.ids and want.ids[-1] == 1, text
        assert list(got.tokens) == want.tokens, text
        assert [tuple(o) for o in got.offsets] == [tuple(o) for o in want.offsets], text
    want, got = tok.encode(TEXTS[1], TEXTS[3]), ours.encode(TEXTS[1], TEXTS[3])
    assert list(got.ids) == want.ids


@pytest.fixture(scope="module")
def sentence_t5(t5_tokenizer, tmp_path_factory):
    """A sentence-t5 directory (Transformer(T5EncoderModel, gated-gelu) + Pooling mean + Dense(32 -> 24, no bias,
    Identity) + Normalize) saved by sentence-transformers; (its path, the SentenceTransformer)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Dense, Normalize, Pooling, Transformer
    tok_dir, tok = t5_tokenizer
    torch.manual_seed(17)
    cfg = T.T5Config(**dict(SMALL, vocab_size=tok.get_vocab_size(), d_kv=12, num_heads=3, feed_forward_proj="gated-gelu",
                            relative_attention_num_buckets=32, relative_attention_max_distance=128))
    root = tmp_path_factory.mktemp("st5")
    perturbed(T.T5EncoderModel(cfg)).save_pretrained(root / "hf", safe_serialization=True)
    for f in tok_dir.iterdir():
        shutil.copy(f, root / "hf" / f.name)
    st = SentenceTransformer(modules=[Transformer(str(root / "hf"), max_seq_length=64), Pooling(32, pooling_mode="mean"),
                                      Dense(32, 24, bias=False, activation_function=torch.nn.Identity()), Normalize()],
                             device="cpu")
    st.save(str(root / "st"))
    return root / "st", st


def test_sentence_t5_matches_sentence_transformers(sentence_t5):
    """encore.SentenceEncoder vs SentenceTransformer.encode on that directory: within 1e-5 max abs (unit vectors)."""
    path, st = sentence_t5
    ref = st.encode(TEXTS, batch_size=4)
    assert ref.shape == (len(TEXTS), 24)
    got = encore.SentenceEncoder(str(path)).encode(TEXTS, batch_size=4)
    d = max_diff(got, ref)
    assert d <= TOL, f"sentence embeddings differ by {d:.2e}"


def test_quantize_cli(saved, tmp_path):
    """`encore quantize` names T5's Linear weights (q, k, v, o, wi, wo per block) and the int8 checkpoint runs
    exactly as int8 on the fly; the full T5ForConditionalGeneration checkpoint quantizes its encoder's (wi_0 and
    wi_1 too)."""
    import os
    import subprocess
    root = pathlib.Path(__file__).resolve().parents[2]
    binary = os.environ.get("ENCORE_BIN", str(root / "build" / "encore"))
    for name, per_block in [("relu", 6), ("full-t5", 7)]:
        path, model = saved[name]
        out = subprocess.run([binary, "quantize", path, str(tmp_path / name)], capture_output=True, text=True,
                             check=True)
        assert f"{per_block * model.config.num_layers} encoder Linear weights stored int8" in out.stdout, out.stdout
        ids, mask = batch(model.config, LENGTHS, seed=2)
        on_the_fly = encore.AutoModel.load(path, dtype="int8")(ids, mask)
        stored = encore.AutoModel.load(str(tmp_path / name), dtype="int8")(ids, mask)
        np.testing.assert_array_equal(stored, on_the_fly)



def test_train_embedding_writes_what_sentence_transformers_loads(sentence_t5, tmp_path):
    """encore.train_embedding (in-batch MultipleNegativesRankingLoss, 4 AdamW steps) on a T5 sentence encoder
    (sentence-t5's directory without its Dense module: encore's embedding trainer refuses Dense modules by name):
    finite losses; the written directory loads in sentence-transformers and gives encore's embeddings (cosine
    >= 0.99999), which moved away from the untrained ones."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer
    path, _ = sentence_t5
    st = SentenceTransformer(modules=[Transformer(str(path), max_seq_length=64), Pooling(32, pooling_mode="mean"),
                                      Normalize()], device="cpu")
    st.save(str(tmp_path / "st"))
    rng = np.random.default_rng(3)
    words = "relative position buckets encoder mean pooling dense layer norm tokens sentence".split()
    with open(tmp_path / "pairs.jsonl", "w") as f:
        for _ in range(32):
            w = list(rng.choice(words, 5))
            f.write(json.dumps({"anchor": " ".join(w[:2]), "positive": " ".join(w)}) + "\n")
    with pytest.raises(encore.Error, match="Dense.* is not trainable yet"):
        encore.train_embedding(str(path), str(tmp_path / "pairs.jsonl"), steps=1)
    out = tmp_path / "trained"
    r = encore.train_embedding(str(tmp_path / "st"), str(tmp_path / "pairs.jsonl"), steps=4, batch_size=8, lr=1e-3,
                               seed=0, output=str(out))
    assert len(r["losses"]) == 4 and all(np.isfinite(r["losses"])), r["losses"]
    got = encore.SentenceEncoder(str(out)).encode(TEXTS)
    ref = SentenceTransformer(str(out), device="cpu").encode(TEXTS)
    assert ((got * ref).sum(-1)).min() >= 0.99999
    assert max_diff(got, st.encode(TEXTS)) > 1e-3


@pytest.mark.parametrize("cls", ["T5ForSequenceClassification", "T5ForQuestionAnswering"])
def test_task_heads_encore_does_not_run_are_warned(tmp_path, cls):
    """T5's task checkpoints whose heads read the decoder load as the encoder with a warning naming the head, never silently without logits; the encoder's output is transformers'."""
    torch.manual_seed(41)
    model = perturbed(getattr(T, cls)(T.T5Config(**SMALL, num_labels=3, attn_implementation="eager")))
    model.save_pretrained(tmp_path, safe_serialization=True)
    with pytest.warns(UserWarning, match=f"T5 \\*{cls[2:]} checkpoint: encore runs only the T5 encoder"):
        enc = encore.AutoModel.load(str(tmp_path))
    ids, mask = batch(model.config, LENGTHS, seed=9)
    got = enc(ids, mask, return_dict=True, skip_padding=False)
    assert got.get("logits") is None
    base = getattr(model, "transformer", model)  # T5ForQuestionAnswering keeps shared/encoder/decoder at the top
    encoder = getattr(base, "encoder", base)
    with torch.no_grad():
        want = encoder(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    assert max_diff(got["last_hidden_state"], want.numpy()) <= TOL



def test_token_classification_matches_transformers(tmp_path, _torch_grad):
    """T5ForTokenClassification (T5EncoderModel under "transformer." + dropout + "classifier"): logits within 1e-5 on
    every position (padded) and real positions (padding-free); training: the loss and every parameter gradient (the
    classifier's included) within 1e-4 relative of torch autograd; export_hf loads into T5ForTokenClassification
    strictly with the same logits. Logits tolerance 1e-5·max(1, |logit|) as test_question_answering's (measured 9.5e-6
    on logits up to 15.8; gradients <= 9.3e-7)."""
    import copy
    torch.manual_seed(43)
    cfg = T.T5Config(**dict(SMALL, feed_forward_proj="gated-gelu"), num_labels=5, attn_implementation="eager")
    model = perturbed(T.T5ForTokenClassification(cfg))
    model.save_pretrained(tmp_path / "m", safe_serialization=True)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the head runs: no unrunnable-head warning
        enc = encore.AutoModel.load(str(tmp_path / "m"))
    assert enc.config["head"] == "token_classification" and enc.config["num_labels"] == 5
    ids, mask = batch(cfg, LENGTHS, seed=12)
    real = mask.astype(bool)
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    assert np.abs(want).max() > 0.1
    ltol = TOL * max(1.0, float(np.abs(want).max()))
    for skip_padding in [False, True]:
        got = np.asarray(enc(ids, mask, return_dict=True, skip_padding=skip_padding)["logits"])
        sel = real if skip_padding else np.ones_like(real)
        assert got.shape == want.shape and max_diff(got[sel], want[sel]) <= ltol, skip_padding
    ref = copy.deepcopy(model).eval()
    train = encore.AutoModel.load(str(tmp_path / "m")).train()
    train.set_dropout(0.0)
    params = train.parameters_module()
    params.zero_grad()
    out = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits
    r = backward_through_reference(out, real, seed=5)
    logits = np.asarray(train(ids, mask, return_dict=True)["logits"])
    assert max_diff(logits, out.detach().numpy()) <= ltol
    train.backward(d_logits=r)
    assert_every_gradient_matches(params.grads(), dict(ref.named_parameters()),
                                  lambda n: n if n.startswith("classifier.") else "transformer." + n, GRAD_REL,
                                  "token classification")
    arch, tensors = enc.export_hf()
    assert arch == "T5ForTokenClassification"
    back = T.T5ForTokenClassification(cfg).eval()
    missing, unexpected = back.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()},
                                               strict=False)
    assert not unexpected and set(missing) <= {"transformer.encoder.embed_tokens.weight"}, (missing, unexpected)
    with torch.no_grad():
        again = back(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    assert max_diff(again, want) <= ltol
