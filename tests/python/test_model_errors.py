"""Bad checkpoints and bad inputs give a clear encore.Error naming what is wrong - never a crash or a silent
wrong answer. Each case builds its broken input from a valid tiny BERT saved by transformers."""
import json
import os
import shutil
import struct

import numpy as np
import pytest
import torch
import transformers as T

import encore


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory):
    torch.manual_seed(0)
    m = T.BertModel(T.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=20,
                                 vocab_size=30, max_position_embeddings=12)).eval()
    d = tmp_path_factory.mktemp("good")
    m.save_pretrained(d, safe_serialization=True)
    return str(d)


def copy_dir(src, tmp_path, name="m"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path, header, data, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def expect_error(path, *needles):
    with pytest.raises(encore.Error) as e:
        encore.AutoModel.load(str(path))
    msg = str(e.value)
    for n in needles:
        assert n in msg, f"error message {msg!r} lacks {n!r}"


def test_good_model_loads(good_dir):
    m = encore.AutoModel.load(good_dir)
    out = m(np.array([[2, 5, 7]]), np.array([[1, 1, 1]]))
    assert out.shape == (1, 3, 16) and np.isfinite(out).all()


def test_truncated_file(good_dir, tmp_path):
    d = copy_dir(good_dir, tmp_path)
    p = d / "model.safetensors"
    raw = open(p, "rb").read()
    open(p, "wb").write(raw[: len(raw) - 100])
    expect_error(d, "past the data section")
    open(p, "wb").write(raw[:5])
    expect_error(d, "truncated")


@pytest.mark.parametrize("mutate, needle", [
    (lambda h: h.__setitem__("embeddings.word_embeddings.weight", {**h["embeddings.word_embeddings.weight"], "dtype": "F99"}), "unknown dtype"),
    (lambda h: h.__setitem__("embeddings.word_embeddings.weight", {**h["embeddings.word_embeddings.weight"], "shape": [31, 16]}), "needs"),
    (lambda h: h.__setitem__("embeddings.word_embeddings.weight", {**h["embeddings.word_embeddings.weight"], "shape": [-1, 16]}), "non-negative"),
    (lambda h: h.__setitem__("embeddings.word_embeddings.weight", {**h["embeddings.word_embeddings.weight"], "data_offsets": [10, 5]}), "begin > end"),
    (lambda h: h.__setitem__("embeddings.word_embeddings.weight", {**h["embeddings.word_embeddings.weight"], "data_offsets": [0, 2 ** 62]}), "past the data section"),
    (lambda h: h.__setitem__("pooler.dense.bias", {**h["pooler.dense.bias"], "data_offsets": h["pooler.dense.weight"]["data_offsets"][:1] + [h["pooler.dense.weight"]["data_offsets"][0] + 64]}), "overlap"),
])
def test_corrupt_header_fields(good_dir, tmp_path, mutate, needle):
    d = copy_dir(good_dir, tmp_path)
    header, data = read_st(d / "model.safetensors")
    mutate(header)
    write_st(d / "model.safetensors", header, data)
    expect_error(d, needle)


def test_header_not_json_and_duplicates(good_dir, tmp_path):
    d = copy_dir(good_dir, tmp_path)
    header, data = read_st(d / "model.safetensors")
    write_st(d / "model.safetensors", None, data, raw_header=b"{not json" + b" " * 20)
    expect_error(d, "not valid JSON")
    write_st(d / "model.safetensors", None, data, raw_header=b"[1, 2, 3]")
    expect_error(d, "not a JSON object")
    body = json.dumps(header)[1:-1]
    first = body.split(', "')[0]
    write_st(d / "model.safetensors", None, data, raw_header=("{" + first + ", " + body + "}").encode())
    expect_error(d, "duplicate tensor name")
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", 2 ** 40) + b"{}")
    expect_error(d, "exceeds the 100 MB limit")


def test_shape_disagrees_with_config(good_dir, tmp_path):
    d = copy_dir(good_dir, tmp_path)
    cfg = json.load(open(d / "config.json"))
    cfg["intermediate_size"] = 24
    json.dump(cfg, open(d / "config.json", "w"))
    expect_error(d, "encoder.layer.0.intermediate.dense.weight", "(20, 16)", "(24, 16)")


def test_missing_tensors_are_listed(good_dir, tmp_path):
    d = copy_dir(good_dir, tmp_path)
    header, data = read_st(d / "model.safetensors")
    del header["encoder.layer.0.output.dense.weight"]
    del header["embeddings.LayerNorm.bias"]
    write_st(d / "model.safetensors", header, data)
    expect_error(d, "missing 2 tensor(s)", "encoder.layer.0.output.dense.weight", "embeddings.LayerNorm.bias",
                 "never randomly initialised")


@pytest.mark.parametrize("field, value, needle", [
    ("num_attention_heads", 3, "not divisible"),
    ("hidden_size", 10 ** 9, "/hidden_size: expected an integer in [1, "),
    ("num_hidden_layers", 0, "/num_hidden_layers: expected an integer in [1, "),
    ("hidden_act", "mish", "not supported"),
    ("model_type", "gpt2", "supported: albert, bert"),
    ("hidden_size", "wide", "/hidden_size: expected an integer"),
])
def test_impossible_configs(good_dir, tmp_path, field, value, needle):
    d = copy_dir(good_dir, tmp_path)
    cfg = json.load(open(d / "config.json"))
    cfg[field] = value
    json.dump(cfg, open(d / "config.json", "w"))
    expect_error(d, needle)


def test_pickle_refused_and_missing_files(good_dir, tmp_path):
    d = copy_dir(good_dir, tmp_path)
    os.rename(d / "model.safetensors", d / "pytorch_model.bin")
    expect_error(d, "pickle", "save_pretrained")
    os.remove(d / "pytorch_model.bin")
    expect_error(d, "no model.safetensors")
    expect_error(tmp_path / "nowhere", "does not exist")


def test_sharded_index_and_traversal(good_dir, tmp_path):
    d = copy_dir(good_dir, tmp_path)
    header, _ = read_st(d / "model.safetensors")
    os.rename(d / "model.safetensors", d / "model-00001-of-00001.safetensors")
    names = [k for k in header if k != "__metadata__"]
    index = {"metadata": {}, "weight_map": {k: "model-00001-of-00001.safetensors" for k in names}}
    json.dump(index, open(d / "model.safetensors.index.json", "w"))
    ref = encore.AutoModel.load(good_dir)(np.array([[1, 2, 3]]))
    np.testing.assert_array_equal(encore.AutoModel.load(str(d))(np.array([[1, 2, 3]])), ref)
    index["weight_map"][names[0]] = "../../etc/passwd"
    json.dump(index, open(d / "model.safetensors.index.json", "w"))
    expect_error(d, "outside the model directory")


def test_bad_inputs(good_dir):
    m = encore.AutoModel.load(good_dir)
    with pytest.raises(encore.Error, match="exceeds max_position_embeddings"):
        m(np.ones((1, 13), np.int64))
    with pytest.raises(encore.Error, match="index 30 .* out of range"):
        m(np.array([[1, 30]]))
    with pytest.raises(encore.Error, match="empty input"):
        m(np.zeros((1, 0), np.int64))
    with pytest.raises(encore.Error, match="attention_mask"):
        m(np.ones((2, 3), np.int64), np.ones((2, 4), np.int64))
    with pytest.raises(encore.Error, match="integer dtype"):
        m(np.ones((1, 3), np.float32))


@pytest.mark.parametrize("buckets", [2, 3, 512])
def test_mpnet_bucket_counts_without_defined_buckets(tmp_path, buckets):
    """MPNet's bidirectional relative buckets are exact up to num_buckets/4 and log-spaced from there to the fixed
    max_distance 128: fewer than 4 buckets divides by zero in transformers' formula, and num_buckets/4 >= 128 takes
    the log of a number <= 1. Either is refused at load, naming the config key (it used to divide by zero)."""
    torch.manual_seed(0)
    m = T.MPNetModel(T.MPNetConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=20,
                                   vocab_size=30, max_position_embeddings=12, relative_attention_num_buckets=8))
    m.save_pretrained(tmp_path, safe_serialization=True)
    cfg = json.load(open(tmp_path / "config.json"))
    cfg["relative_attention_num_buckets"] = buckets
    json.dump(cfg, open(tmp_path / "config.json", "w"))
    expect_error(tmp_path, "relative_attention_num_buckets: expected an integer in [4, 511]")


def test_config_asking_for_a_million_layers_stops_at_the_missing_ones(tmp_path):
    """ALBERT's num_hidden_groups x inner_group_num layers (1000 x 1000 here) with a checkpoint holding only the word
    embeddings: refused after listing 1000 missing tensors, within seconds and without building a million layers.
    Before: killed by a 60 s timeout at 10 GB RSS (hidden size 2: 20 s and 4.3 GB, then 6,882,953 missing tensors)."""
    import subprocess
    import sys
    from safetensors.numpy import save_file

    d = tmp_path / "albert_groups"
    d.mkdir()
    json.dump(dict(model_type="albert", hidden_size=2, num_attention_heads=1, intermediate_size=2,
                   num_hidden_layers=1000, num_hidden_groups=1000, inner_group_num=1000, vocab_size=10,
                   embedding_size=2, max_position_embeddings=8), open(d / "config.json", "w"))
    save_file({"embeddings.word_embeddings.weight": np.zeros((10, 2), np.float32)}, str(d / "model.safetensors"))
    # peak RSS from VmHWM: this process's memory since exec (ru_maxrss would count the forking pytest's too)
    code = ("import encore, sys\n"
            "try:\n    encore.AutoModel.load(sys.argv[1])\nexcept encore.ModelFormatError as e:\n"
            "    print(str(e)[:120].replace('\\n', ' '), '...', str(e)[-60:].replace('\\n', ' '))\n"
            "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])\n")
    r = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr[-2000:]
    message, max_rss_kb = r.stdout.strip().rsplit("\n", 1)
    assert "are missing 1000 tensor(s)" in message and "(stopped looking: the model may need more)" in message
    assert int(max_rss_kb) < 1_000_000, f"max RSS {int(max_rss_kb) // 1024} MB"  # ~150 MB measured


def test_type_vocab_size_zero_with_stored_token_types_is_refused(good_dir, tmp_path):
    """type_vocab_size 0 means no token-type term; with the table in the checkpoint that silently dropped it (max abs
    diff 0.566 on all-MiniLM-L6-v2). transformers refuses the shape too."""
    d = copy_dir(good_dir, tmp_path)
    cfg = json.load(open(d / "config.json"))
    cfg["type_vocab_size"] = 0
    json.dump(cfg, open(d / "config.json", "w"))
    with pytest.raises(Exception):
        T.BertModel.from_pretrained(str(d))
    expect_error(d, "/type_vocab_size: 0", "embeddings.token_type_embeddings.weight")


@pytest.mark.parametrize("pad", [30, 400])
def test_pad_token_id_outside_the_vocabulary_is_refused_at_load(good_dir, tmp_path, pad):
    """A pad id past the word embeddings (vocab_size 30) failed only when a batch needed padding, blaming the input
    ("input_ids: index 30 ... out of range"). transformers' nn.Embedding(padding_idx=) refuses it at load."""
    d = copy_dir(good_dir, tmp_path)
    cfg = json.load(open(d / "config.json"))
    cfg["pad_token_id"] = pad
    json.dump(cfg, open(d / "config.json", "w"))
    with pytest.raises(Exception):
        T.BertModel.from_pretrained(str(d))
    expect_error(d, "/pad_token_id: expected an integer in [0, 29]", f"got number {pad}")


def test_safetensors_header_nested_past_the_limit_is_refused(good_dir, tmp_path):
    """A header value nested 100,000 deep (within the header size limit) is refused before it is parsed: printing
    it in an error message recursed once per level."""
    d = copy_dir(good_dir, tmp_path)
    header, data = read_st(d / "model.safetensors")
    raw = json.dumps(header).encode()
    raw = raw[:-1] + b', "__metadata__": {"x": ' + b"[" * 100000 + b"]" * 100000 + b"}}"
    write_st(d / "model.safetensors", None, data, raw_header=raw)
    expect_error(d, "model.safetensors", "header: arrays and objects nested more than 128 levels deep")
