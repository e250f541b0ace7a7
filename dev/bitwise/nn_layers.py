"""nn layers' init (seeded), forward (train with dropout, eval) and backward in every layout, dumped for a
bit-for-bit comparison of two builds. argv: out.npz"""
import sys
import numpy as np
import encore
from encore import nn as enn
print(encore.__file__)
res = {}
rng = np.random.default_rng(0)
E, H, F = 16, 4, 24
for bf in (False, True):
    for nf in (False, True):
        tag = f"bf{bf}_nf{nf}"
        encore.manual_seed(42)
        layer = enn.TransformerEncoderLayer(E, H, F, 0.2, "gelu", batch_first=bf, norm_first=nf)
        enc = enn.TransformerEncoder(layer, 2)
        dec_layer = enn.TransformerDecoderLayer(E, H, F, 0.2, "relu", batch_first=bf, norm_first=nf)
        dec = enn.TransformerDecoder(dec_layer, 2)
        tr = enn.Transformer(E, H, 1, 1, F, 0.1, batch_first=bf, norm_first=nf)
        for name, m in (("layer", layer), ("enc", enc), ("declayer", dec_layer), ("dec", dec), ("tr", tr)):
            for k, v in m.state_dict().items():
                res[f"{tag}/{name}/init/{k}"] = np.asarray(v)
        shape = (2, 7, E) if bf else (7, 2, E)
        x = rng.standard_normal(shape).astype(np.float32)
        mem = rng.standard_normal(shape).astype(np.float32)
        g = rng.standard_normal(shape).astype(np.float32)
        for name, m in (("layer", layer), ("enc", enc)):
            for unb in (False, True):
                xi, gi = (x[0], g[0]) if unb else (x, g)
                m.train(); m.zero_grad(); encore.manual_seed(5)
                res[f"{tag}/{name}/{unb}/y"] = np.asarray(m(xi))
                res[f"{tag}/{name}/{unb}/dx"] = np.asarray(m.backward(gi))
                for k, v in m.grads().items():
                    res[f"{tag}/{name}/{unb}/g/{k}"] = v.copy()
                m.eval()
                res[f"{tag}/{name}/{unb}/eval"] = np.asarray(m(xi))
        m = dec_layer
        for unb in (False, True):
            xi, mi, gi = (x[0], mem[0], g[0]) if unb else (x, mem, g)
            m.train(); m.zero_grad(); encore.manual_seed(6)
            res[f"{tag}/declayer/{unb}/y"] = np.asarray(m(xi, mi))
            dx, dm = m.backward(gi)
            res[f"{tag}/declayer/{unb}/dx"] = np.asarray(dx)
            res[f"{tag}/declayer/{unb}/dm"] = np.asarray(dm)
            for k, v in m.grads().items():
                res[f"{tag}/declayer/{unb}/g/{k}"] = v.copy()
            m.eval()
            res[f"{tag}/declayer/{unb}/eval"] = np.asarray(m(xi, mi))
            dec.eval()
            res[f"{tag}/dec/{unb}/eval"] = np.asarray(dec(xi, mi))
            tr.eval()
            res[f"{tag}/tr/{unb}/eval"] = np.asarray(tr(xi, xi))
np.savez(sys.argv[1], **res)
print(len(res), "arrays")
