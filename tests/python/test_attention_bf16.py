"""bf16 and int8 models run attention's two matmuls with bf16 inputs (kernels::attention_fused_bf16_ref); every
family whose inference attention is the fused kernel stays close to transformers' fp32 forward in those dtypes,
padded and padding-free: BERT, RoBERTa, DistilBERT, ALBERT, ELECTRA, MPNet (relative position bias), ModernBERT
(local sliding windows and global layers; sequences longer than one 128-key tile), DeBERTa-v2 (disentangled
attention bias, scale 1/sqrt(3d)), T5 (unscaled scores + bias).

Each model runs twice in the same process: the default (bf16 attention) and ENCORE_ATTENTION=f32 (fp32 attention,
same bf16/int8 Linears; encore reads it per call). Tolerances, on every real token of a mixed-length batch:
  * cosine(encore, transformers fp32) >= 0.999 for bf16 and >= 0.995 for int8: the product requirements
    test_dtypes.py and test_int8.py hold MiniLM to. Measured (this host, 2026-11-25) minima over the 9 families,
    both paths: bf16 0.999967, int8 0.999685 (both T5: unscaled scores, the sharpest softmax here); ~30x margin.
  * the loss 1 - cos with bf16 attention at most 3x the loss with fp32 attention plus 2e-4: bf16 attention may
    add its rounding (q, k, v, p to 8 significant bits), not change the model. Measured: equal to 6 digits except
    T5 (bf16 3.3e-5 vs 3.1e-5; int8 3.15e-4 vs 2.53e-4), ModernBERT and DeBERTa int8 (1e-6 apart).
  * where the CPU has AVX512-BF16 (and VNNI for int8), the two runs must differ: the bf16 kernel really ran
    (it does in all 9 families on this host).
"""

import numpy as np
import pytest
import torch
import transformers as T

import encore
from conftest import padded_batch, save_random_checkpoints

SMALL = dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=75, vocab_size=120,
             max_position_embeddings=320)
DEBERTA = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48, vocab_size=150,
               max_position_embeddings=512, pad_token_id=0, hidden_act="gelu", layer_norm_eps=1e-7,
               relative_attention=True, position_buckets=256, max_relative_positions=-1, share_att_key=True,
               pos_att_type="p2c|c2p", norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0)
MODERNBERT = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48, vocab_size=120,
                  max_position_embeddings=1024, local_attention=40, global_attn_every_n_layers=2, pad_token_id=0,
                  bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, attn_implementation="eager")
LENGTHS = [37, 200, 9, 1, 150]  # 200 and 150 keys: two key tiles, the online softmax rescales

# (name, config, model class)
CASES = [
    ("bert", lambda: T.BertConfig(**SMALL), T.BertModel),
    ("roberta", lambda: T.RobertaConfig(**SMALL, pad_token_id=1, type_vocab_size=1), T.RobertaModel),
    ("distilbert", lambda: T.DistilBertConfig(dim=48, n_layers=3, n_heads=4, hidden_dim=75, vocab_size=120,
                                              max_position_embeddings=320), T.DistilBertModel),
    ("albert", lambda: T.AlbertConfig(**SMALL, embedding_size=24), T.AlbertModel),
    ("electra", lambda: T.ElectraConfig(**SMALL, embedding_size=24), T.ElectraModel),
    ("mpnet", lambda: T.MPNetConfig(**SMALL), T.MPNetModel),
    ("modernbert", lambda: T.ModernBertConfig(**MODERNBERT), T.ModernBertModel),
    ("deberta-v2", lambda: T.DebertaV2Config(**DEBERTA), T.DebertaV2Model),
    ("t5", lambda: T.T5Config(vocab_size=120, d_model=32, d_kv=8, d_ff=48, num_layers=3, num_heads=4,
                              relative_attention_num_buckets=8, relative_attention_max_distance=20, pad_token_id=0,
                              eos_token_id=1, decoder_start_token_id=0, feed_forward_proj="relu"), T.T5EncoderModel),
]
MIN_COS = {"bf16": 0.999, "int8": 0.995}


def cpu_flags():
    try:
        with open("/proc/cpuinfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_random_checkpoints(tmp_path_factory, CASES, lambda case: case[2](case[1]()), seed=500)


def token_cosines(a, b, real):
    a, b = np.asarray(a)[real], np.asarray(b)[real]
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


@pytest.mark.parametrize("skip_padding", [False, True], ids=["padded", "padding-free"])
@pytest.mark.parametrize("dtype", ["bf16", "int8"])
@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_family_close_to_fp32_with_bf16_attention(saved, name, dtype, skip_padding, monkeypatch):
    path, model = saved[name]
    cfg = model.config
    ids, mask = padded_batch(LENGTHS, cfg.vocab_size, cfg.pad_token_id if cfg.pad_token_id is not None else 0,
                             seed=len(name))
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    enc = encore.AutoModel.load(path, dtype=dtype)
    monkeypatch.delenv("ENCORE_ATTENTION", raising=False)
    got = enc(ids, mask, return_dict=True, skip_padding=skip_padding)["last_hidden_state"]
    monkeypatch.setenv("ENCORE_ATTENTION", "f32")
    got_f32 = enc(ids, mask, return_dict=True, skip_padding=skip_padding)["last_hidden_state"]
    real = mask.astype(bool)
    cos, cos_f32 = token_cosines(got, ref, real), token_cosines(got_f32, ref, real)
    print(f"\n{name} {dtype} {'padding-free' if skip_padding else 'padded'}: min cosine to fp32 "
          f"{cos.min():.6f} (fp32 attention {cos_f32.min():.6f})")
    assert cos.min() >= MIN_COS[dtype], name
    assert 1 - cos.min() <= 3 * (1 - cos_f32.min()) + 2e-4, name
    flags = cpu_flags()
    if "avx512_bf16" in flags and (dtype == "bf16" or "avx512_vnni" in flags):
        assert not np.array_equal(np.asarray(got), np.asarray(got_f32)), f"{name}: bf16 attention did not run"
