"""Writing the weights of a loaded, never-trained model: load_state_dict, an optimizer step, numpy views.

A loaded model's weights are views of the checkpoint's read-only file mapping (test_weight_memory.py), and in eval
mode forward() reads prepared copies of them. So a write must (1) move the written tensor to memory of its own
first, never into the mapping (the process used to fault), (2) drop the prepared copies so that the next forward
sees the new values, and (3) leave the checkpoint file as it was. numpy views of weights still in the mapping are
read-only: a write through them is refused by numpy instead of faulting.

Oracle: transformers. Checkpoint A and checkpoint B are two random initialisations of one config, for each family.
encore loads A, takes B's weights (encore's own loader reads B's names into encore's keys) through
`parameters_module().load_state_dict`, and must then give transformers' B outputs within 1e-5 (the parity
tolerance of test_models_parity.py; A and B differ by ~1 in these outputs, so a stale prepared copy cannot pass).
"""
import hashlib
import os

import numpy as np
import pytest
import torch
import transformers as T

import encore

TOL = 1e-5
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=40, vocab_size=120,
             max_position_embeddings=80)

# (name, config factory, model class): the base model of each family, and one task head.
CASES = [
    ("bert", lambda: T.BertConfig(**SMALL), T.BertModel),
    ("bert-seqcls", lambda: T.BertConfig(**SMALL, num_labels=3), T.BertForSequenceClassification),
    ("roberta", lambda: T.RobertaConfig(**SMALL, pad_token_id=1), T.RobertaModel),
    ("distilbert", lambda: T.DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=40, vocab_size=120,
                                              max_position_embeddings=80), T.DistilBertModel),
    ("albert", lambda: T.AlbertConfig(**SMALL, embedding_size=16), T.AlbertModel),
    ("electra", lambda: T.ElectraConfig(**SMALL, embedding_size=16), T.ElectraModel),
    ("mpnet", lambda: T.MPNetConfig(**SMALL), T.MPNetModel),
    ("modernbert", lambda: T.ModernBertConfig(**dict(SMALL, num_hidden_layers=3), local_attention=8, pad_token_id=0,
                                              bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
                                              attn_implementation="eager"), T.ModernBertModel),
    ("deberta-v2", lambda: T.DebertaV2Config(**SMALL, relative_attention=True, position_buckets=16,
                                             max_relative_positions=-1, share_att_key=True, pos_att_type="p2c|c2p",
                                             norm_rel_ebd="layer_norm", position_biased_input=False,
                                             type_vocab_size=0, pad_token_id=0), T.DebertaV2Model),
    ("t5", lambda: T.T5Config(vocab_size=120, d_model=32, d_kv=8, d_ff=40, num_layers=2, num_heads=4,
                              relative_attention_num_buckets=8, relative_attention_max_distance=20, pad_token_id=0,
                              eos_token_id=1, decoder_start_token_id=0, feed_forward_proj="gated-gelu",
                              attn_implementation="eager"), T.T5EncoderModel),
    ("qwen3", lambda: T.Qwen3Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                    head_dim=8, intermediate_size=40, vocab_size=120, max_position_embeddings=80,
                                    pad_token_id=0, attn_implementation="eager"), T.Qwen3Model),
]
NAMES = [c[0] for c in CASES]


def sha1(path):
    return hashlib.sha1(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> ((dir A, dir B), transformers model B in eval mode)."""
    out = {}
    for i, (name, make_config, cls) in enumerate(CASES):
        dirs = []
        for which in range(2):
            torch.manual_seed(1000 + 10 * i + which)
            model = cls(make_config()).eval()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)  # no parameter at a trivial value (norm scales of 1, zero biases)
            d = tmp_path_factory.mktemp(f"{name}-{'AB'[which]}")
            model.save_pretrained(d, safe_serialization=True)
            dirs.append(str(d))
        out[name] = (tuple(dirs), model)
    return out


def batch(seed):
    rng = np.random.default_rng(seed)
    lengths = [11, 4, 7]
    ids = np.zeros((3, max(lengths)), np.int64)
    mask = np.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n] = rng.integers(3, 120, n)
        mask[b, :n] = 1
    return ids, mask


def reference(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    key = "logits" if hasattr(out, "logits") and out.logits is not None else "last_hidden_state"
    return key, out[key].numpy()


def encore_output(model, key, ids, mask):
    out = model(ids, attention_mask=mask, return_dict=True, skip_padding=False)
    return np.asarray(out[key])


def real(x, mask):
    """Padding positions are left out of comparisons of per-token outputs (transformers' values there are noise)."""
    return x[mask.astype(bool)] if x.ndim == 3 else x


@pytest.mark.parametrize("name", NAMES)
def test_load_state_dict_into_a_loaded_model(checkpoints, name):
    (dir_a, dir_b), ref_b = checkpoints[name]
    file_a = os.path.join(dir_a, "model.safetensors")
    before = sha1(file_a)
    ids, mask = batch(0)
    key, want = reference(ref_b, ids, mask)

    model = encore.AutoModel.load(dir_a)
    stale = encore_output(model, key, ids, mask)  # eval forward: prepared copies of A's weights now exist
    assert np.abs(real(stale, mask) - real(want, mask)).max() > 100 * TOL  # A and B really differ here

    weights_b = encore.AutoModel.load(dir_b).parameters_module().state_dict()
    model.parameters_module().load_state_dict({k: np.array(v) for k, v in weights_b.items()})
    got = encore_output(model, key, ids, mask)
    assert np.abs(real(got, mask) - real(want, mask)).max() <= TOL

    assert sha1(file_a) == before  # the checkpoint on disk is untouched
    again = encore.AutoModel.load(dir_a)  # and a fresh load still reads A
    assert np.array_equal(encore_output(again, key, ids, mask), stale)


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_load_state_dict_drops_low_precision_copies(checkpoints, dtype):
    """bf16/int8 forward reads converted/quantized copies: after load_state_dict it must follow B, not A.
    Checked as cosine >= 0.999 (bf16) / 0.995 (int8) to transformers' B, the dtype tolerances of the family tests;
    A's outputs score ~0 against B's."""
    (dir_a, dir_b), ref_b = checkpoints["bert"]
    ids, mask = batch(1)
    _, want = reference(ref_b, ids, mask)
    model = encore.AutoModel.load(dir_a, dtype=dtype)
    encore_output(model, "last_hidden_state", ids, mask)
    weights_b = encore.AutoModel.load(dir_b).parameters_module().state_dict()
    model.parameters_module().load_state_dict({k: np.array(v) for k, v in weights_b.items()})
    got = real(encore_output(model, "last_hidden_state", ids, mask), mask)
    w = real(want, mask)
    cos = (got * w).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(w, axis=-1)
    assert cos.min() >= (0.999 if dtype == "bf16" else 0.995)


def test_state_dict_views_of_the_mapping_are_read_only(checkpoints):
    (dir_a, _), _ = checkpoints["bert"]
    file_a = os.path.join(dir_a, "model.safetensors")
    before = sha1(file_a)
    model = encore.AutoModel.load(dir_a)
    params = model.parameters_module()
    sd = params.state_dict()
    name = "embeddings.word_embeddings.weight"
    assert not sd[name].flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        sd[name][0, 0] = 1.0
    _, tensors = model.export_hf()
    assert not tensors[name].flags.writeable
    # once a weight has been written through load_state_dict it is the model's own memory: views write through, as
    # torch's state_dict tensors share storage with the parameters
    params.load_state_dict({name: np.array(sd[name]) + 1.0}, strict=False)
    after = params.state_dict()[name]
    assert after.flags.writeable
    np.testing.assert_array_equal(after, np.array(sd[name]) + 1.0)
    after[0, 0] = 7.0
    assert params.state_dict()[name][0, 0] == 7.0
    assert sha1(file_a) == before

