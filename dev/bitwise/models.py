"""Dumps, for every family, eval outputs (padded and padding-free, hidden states, attentions, pooler, logits) and
a dropout-on training step's loss + every gradient, to compare two builds bit for bit. argv: out.npz model_root"""
import os, sys
import numpy as np
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python"))
import test_model_training as tm
import encore

out, root = sys.argv[1], sys.argv[2]
res = {}
for fam in tm.FAMILIES:
    d = os.path.join(root, fam)
    if not os.path.exists(os.path.join(d, "config.json")):
        os.makedirs(d, exist_ok=True)
        torch.manual_seed(0)
        ref, _, _ = tm.build(fam, **tm._dropout_kwargs(fam, 0.1, 0.1, 0.1))
        ref.save_pretrained(d, safe_serialization=True)
    ids, mask, types, labels = tm.batch(np.random.default_rng(9), fam)
    m = encore.AutoModel.load(d)
    for sp in (False, True):
        r = m(ids, mask, types, return_dict=True, output_hidden_states=True, output_attentions=not sp, skip_padding=sp)
        for k, v in r.items():
            if isinstance(v, (list, tuple)):
                for i, x in enumerate(v):
                    res[f"{fam}/eval{sp}/{k}/{i}"] = np.asarray(x)
            elif v is not None:
                res[f"{fam}/eval{sp}/{k}"] = np.asarray(v)
    m.train()
    params = m.parameters_module()
    for ckpt in (False, True):
        m.gradient_checkpointing = ckpt
        params.zero_grad()
        encore.manual_seed(3)
        loss = tm.encore_loss_and_backward(m, ids, mask, types, labels)
        res[f"{fam}/train{ckpt}/loss"] = np.asarray(loss)
        for k, g in params.grads().items():
            res[f"{fam}/train{ckpt}/grad/{k}"] = g.copy()
    res[f"{fam}/names"] = np.array(list(params.grads().keys()))
np.savez(out, **res)
print(len(res), "arrays")
