"""Extractive question answering (issue 12 item 6): the *ForQuestionAnswering heads of every family encore runs, live
against transformers 5.23, on random-initialised checkpoints saved in the test.

* Heads: qa_outputs Linear(hidden, 2) (ModernBERT: head.{dense,norm} + classifier) - the (B, T, 2) logits, start
  and end, of BERT, RoBERTa, XLM-R, DistilBERT, ALBERT, ELECTRA, MPNet and ModernBERT within 1e-5 * max(1, |logit|)
  of transformers' start_logits/end_logits at real tokens of a padded batch (measured figures printed with -s).
"""
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import transformers as T  # noqa: E402

import encore  # noqa: E402

DIMS = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, initializer_range=0.2)
FAMILIES = {
    "bert": lambda: (T.BertConfig(**DIMS), T.BertForQuestionAnswering),
    "roberta": lambda: (T.RobertaConfig(**DIMS, pad_token_id=1), T.RobertaForQuestionAnswering),
    "xlm-roberta": lambda: (T.XLMRobertaConfig(**DIMS, pad_token_id=1), T.XLMRobertaForQuestionAnswering),
    "distilbert": lambda: (T.DistilBertConfig(vocab_size=300, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                              max_position_embeddings=64, initializer_range=0.2),
                           T.DistilBertForQuestionAnswering),
    "albert": lambda: (T.AlbertConfig(**DIMS, embedding_size=16), T.AlbertForQuestionAnswering),
    "electra": lambda: (T.ElectraConfig(**DIMS, embedding_size=16), T.ElectraForQuestionAnswering),
    "mpnet": lambda: (T.MPNetConfig(**DIMS, pad_token_id=1), T.MPNetForQuestionAnswering),
    "modernbert": lambda: (T.ModernBertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=3,
                                              num_attention_heads=4, intermediate_size=48, max_position_embeddings=64,
                                              local_attention=8, global_attn_every_n_layers=2, pad_token_id=0, bos_token_id=1,
                                              eos_token_id=2, cls_token_id=1, sep_token_id=2,
                                              initializer_range=0.2, attn_implementation="eager"),
                           T.ModernBertForQuestionAnswering),
}
LOGIT_TOL = 1e-5  # relative to max(1, max |logit|)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_question_answering_logits_match_transformers(name, tmp_path):
    cfg, cls = FAMILIES[name]()
    torch.manual_seed(0)
    model = cls(cfg).eval()
    with torch.no_grad():  # the QA head is drawn wide, so its logits are not all near 0
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tmp_path, safe_serialization=True)
    assert {n for n in model.state_dict() if "qa_outputs" in n or n.startswith(("classifier", "head."))}
    ids = torch.randint(5, 300, (2, 13))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    want = torch.stack([out.start_logits, out.end_logits], -1).numpy()
    enc = encore.AutoModel.load(str(tmp_path))
    assert enc.config["head"] == "question_answering"
    got = enc(ids.numpy(), mask.numpy(), return_dict=True)["logits"]
    assert got.shape == want.shape == (2, 13, 2)
    real = mask.numpy().astype(bool)
    err, scale = np.abs(got[real] - want[real]).max(), max(1.0, np.abs(want).max())
    assert err <= LOGIT_TOL * scale, (err, scale)
    assert np.abs(want[real]).std() > 0.1  # logits that tell tokens apart
    print(f"{name}: max |start/end logit diff| {err:.1e} (max |logit| {np.abs(want).max():.2f})")


def test_question_answering_head_with_other_than_two_outputs_is_refused(tmp_path):
    cfg = T.BertConfig(**DIMS, num_labels=3)
    T.BertForQuestionAnswering(cfg).save_pretrained(tmp_path, safe_serialization=True)
    with pytest.raises(encore.ModelFormatError, match="question-answering head has 2 outputs.*num_labels is 3"):
        encore.AutoModel.load(str(tmp_path))
