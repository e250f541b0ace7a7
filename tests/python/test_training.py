"""Optimisation against torch, run live: losses and their gradients, clipping, schedules, and 50 AdamW steps on
a 2-layer encoder (dropout 0, identical init and batches): the loss equals torch's within 1e-4 relative at every
step and the final parameters agree within 1e-4 (max|diff| / max|torch param|)."""
import math

import numpy as np
import pytest
import torch

import encore
from encore import nn as enn


@pytest.fixture(autouse=True)
def _grad_on():
    fastpath, threads = torch.backends.mha.get_fastpath_enabled(), torch.get_num_threads()
    torch.backends.mha.set_fastpath_enabled(False)
    torch.set_num_threads(1)
    with torch.enable_grad():
        yield
    torch.backends.mha.set_fastpath_enabled(fastpath)  # restore: other files rely on the session's settings
    torch.set_num_threads(threads)


def test_cross_entropy_and_mse_match_torch():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((7, 5)).astype(np.float32) * 3
    y = np.array([0, 4, -100, 2, 2, 1, -100])
    zt = torch.tensor(z, requires_grad=True)
    lt = torch.nn.functional.cross_entropy(zt, torch.from_numpy(y))
    lt.backward()
    loss, grad = encore.losses.cross_entropy(z, y)
    assert abs(loss - lt.item()) <= 1e-6 * max(1, abs(lt.item()))
    np.testing.assert_allclose(grad, zt.grad.numpy(), atol=1e-7)
    with pytest.raises(encore.Error, match="label 5 at 0 is outside"):
        encore.losses.cross_entropy(z, np.array([5, 0, 0, 0, 0, 0, 0]))
    p, t = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    pt = torch.tensor(p, requires_grad=True)
    torch.nn.functional.mse_loss(pt, torch.from_numpy(t)).backward()
    loss, grad = encore.losses.mse(p, t)
    assert abs(loss - float(((p - t) ** 2).mean())) <= 1e-6
    np.testing.assert_allclose(grad, pt.grad.numpy(), atol=1e-7)


def test_multiple_negatives_ranking_matches_sentence_transformers_formula():
    """scores = scale * cos_sim(a, p); loss = CE(scores, arange(B)) - sentence-transformers' definition."""
    rng = np.random.default_rng(1)
    a, p = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((6, 8)).astype(np.float32)
    at, pt = torch.tensor(a, requires_grad=True), torch.tensor(p, requires_grad=True)
    scores = 20.0 * torch.nn.functional.normalize(at, dim=1) @ torch.nn.functional.normalize(pt, dim=1).T
    lt = torch.nn.functional.cross_entropy(scores, torch.arange(6))
    lt.backward()
    loss, da, dp = encore.losses.multiple_negatives_ranking(a, p, 20.0)
    assert abs(loss - lt.item()) <= 1e-5 * max(1, abs(lt.item()))
    np.testing.assert_allclose(da, at.grad.numpy(), atol=1e-5)
    np.testing.assert_allclose(dp, pt.grad.numpy(), atol=1e-5)


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_schedules_match_transformers(schedule):
    import transformers
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    make = {"constant": transformers.get_constant_schedule_with_warmup,
            "linear": transformers.get_linear_schedule_with_warmup,
            "cosine": transformers.get_cosine_schedule_with_warmup}[schedule]
    kwargs = {} if schedule == "constant" else {"num_training_steps": 50}
    sched = make(opt, num_warmup_steps=7, **kwargs)
    for step in range(50):
        want = opt.param_groups[0]["lr"]
        got = encore.optim.learning_rate_at(step, 0.1, 7, 50, schedule)
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), (step, got, want)
        opt.step()
        sched.step()


def test_fifty_adamw_steps_match_torch():
    rng = np.random.default_rng(2)
    torch.manual_seed(0)
    kw = dict(dim_feedforward=48, dropout=0.0, activation="gelu", batch_first=True)
    tmodel = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, **kw), 2,
                                         norm=torch.nn.LayerNorm(32), enable_nested_tensor=False)
    emodel = enn.TransformerEncoder(enn.TransformerEncoderLayer(32, 4, **kw), 2, norm=enn.LayerNorm(32))
    emodel.load_state_dict({k: v.detach().numpy().copy() for k, v in tmodel.state_dict().items()})
    tmodel.train(); emodel.train()
    topt = torch.optim.AdamW(tmodel.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.05)
    eopt = encore.optim.AdamW(emodel, lr=3e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.05)
    target_w = rng.standard_normal((32, 32)).astype(np.float32) * 0.2
    key_grad_max, lr_sum = 0.0, 0.0
    for step in range(50):
        lr = encore.optim.learning_rate_at(step, 3e-3, 5, 50, "linear")
        for g in topt.param_groups:
            g["lr"] = lr
        eopt.lr = lr
        x = rng.standard_normal((4, 9, 32)).astype(np.float32)
        kpm = np.zeros((4, 9), bool)
        kpm[2, 6:] = True
        target = np.tanh(x @ target_w)
        # torch
        topt.zero_grad()
        yt = tmodel(torch.from_numpy(x), src_key_padding_mask=torch.from_numpy(kpm))
        lt = torch.nn.functional.mse_loss(yt, torch.from_numpy(target))
        lt.backward()
        tnorm = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 1.0).item()
        topt.step()
        # encore
        eopt.zero_grad()
        ye = emodel(x, src_key_padding_mask=kpm)
        le, dy = encore.losses.mse(ye, target)
        emodel.backward(dy)
        for name, g in emodel.grads().items():
            if name.endswith("self_attn.in_proj_bias"):
                E = g.shape[0] // 3
                # b_k's gradient is exactly zero in exact arithmetic (see below): float32 rounding only, measured
                # ~1e-7 of b_q's; a backward that gave b_k a real gradient would fail this bound (margin 100x).
                assert np.abs(g[E:2 * E]).max() <= 1e-5 * np.abs(g[:E]).max(), f"step {step}: {name} b_k gradient"
                key_grad_max = max(key_grad_max, float(np.abs(g[E:2 * E]).max()))
        lr_sum += lr
        enorm = encore.optim.clip_grad_norm_(emodel, 1.0)
        eopt.step()
        assert abs(le - lt.item()) <= 1e-4 * abs(lt.item()), f"step {step}: loss {le} vs torch {lt.item()}"
        assert abs(enorm - tnorm) <= 1e-4 * tnorm, f"step {step}: grad norm {enorm} vs {tnorm}"
    final = emodel.state_dict()
    for name, p in tmodel.named_parameters():
        want, got = p.detach().numpy(), final[name]
        if name.endswith("self_attn.in_proj_bias"):
            # The key bias b_k has an exactly zero gradient (softmax is invariant to adding q·b_k to every key), so
            # each library feeds Adam its own rounding noise and the two b_k drift apart: not comparable to each
            # other. Bounded instead by what AdamW can do with gradients |g| <= G from b_k = 0: |m_hat| <= G, so a
            # step moves b_k by at most lr * G / eps, and decoupled weight decay only shrinks it; encore's b_k must
            # stay within sum(lr) * G / eps (G measured above; measured: |b_k| 2.2e-6, G 4.4e-10, bound 3.3e-5).
            # q and v biases are compared like every other parameter.
            E = want.shape[0] // 3
            key_bound = lr_sum * key_grad_max / 1e-6
            assert np.abs(got[E:2 * E]).max() <= key_bound, f"{name}: b_k {np.abs(got[E:2 * E]).max():.2e} > {key_bound:.2e}"
            want, got = np.concatenate([want[:E], want[2 * E:]]), np.concatenate([got[:E], got[2 * E:]])
        d = np.abs(got - want).max() / np.abs(want).max()
        assert d <= 1e-4, f"{name}: final parameter rel diff {d:.2e}"


def test_training_reduces_the_loss():
    """Real learning on a learnable task: every position outputs the normalised mean of its sequence (needs
    attention; no positions needed). The loss falls by 5x in 200 steps (measured: 1.29 -> 0.12)."""
    rng = np.random.default_rng(3)
    encore.manual_seed(0)
    model = enn.TransformerEncoder(enn.TransformerEncoderLayer(16, 2, 32, 0.0, batch_first=True, norm_first=True), 2,
                                   norm=enn.LayerNorm(16)).train()
    opt = encore.optim.AdamW(model, lr=1e-2, weight_decay=0.0)
    losses = []
    for step in range(200):
        x = rng.standard_normal((8, 6, 16)).astype(np.float32)
        target = np.repeat(x.mean(1, keepdims=True), 6, axis=1)
        target = (target - target.mean(-1, keepdims=True)) / target.std(-1, keepdims=True)
        opt.zero_grad()
        loss, dy = encore.losses.mse(model(x), target)
        model.backward(dy)
        opt.step()
        losses.append(loss)
    assert np.mean(losses[-10:]) < np.mean(losses[:10]) / 5, (losses[:3], losses[-3:])


def test_adamw_and_clipping_skip_parameters_without_gradient(tmp_path):
    """torch.optim.AdamW skips a parameter whose .grad is None (no decay, no moment update, its own step count
    unchanged) and clip_grad_norm_ ignores it. Oracle: torch's AdamW and clip_grad_norm_ on the same parameters
    fed encore's gradients (copied, so only the optimizers differ). A tiny BertModel; steps 0-1 backpropagate
    from last_hidden_state only, so the pooler gets no gradient; steps 2-4 also from pooler_output, so the
    pooler's first update is at its own step 1 while the others are at 3 (bias correction per parameter).
    Tolerance: parameters within 1e-6 absolute after 5 steps (element-wise float32 updates, op order differs); the
    pooler bit-identical to its start after steps 0-1; clip norms within 1e-6 relative."""
    from test_model_training import BERT_NAMES, hf_names
    from train_data import save_tiny_bert
    import transformers as T
    tiny = save_tiny_bert(tmp_path)
    model = encore.AutoModel.load(str(tiny))
    model.set_dropout(0.0)
    model.train()
    mod = model.parameters_module()
    ref = T.BertModel.from_pretrained(tiny)
    tparams = dict(ref.named_parameters())
    pooler_start = {k: v.detach().numpy().copy() for k, v in tparams.items() if k.startswith("pooler.")}
    kw = dict(lr=1e-2, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.1)
    eopt, topt = encore.optim.AdamW(mod, **kw), torch.optim.AdamW(ref.parameters(), **kw)
    rng = np.random.default_rng(4)
    ids = rng.integers(1000, 1200, (3, 7))
    mask = np.ones((3, 7), np.int64)
    mask[1, 5:] = 0
    for step in range(5):
        eopt.zero_grad()
        topt.zero_grad()
        out = model(ids, mask, np.zeros_like(ids), return_dict=True)
        d_last = rng.standard_normal(out["last_hidden_state"].shape).astype(np.float32)
        d_pool = rng.standard_normal(out["pooler_output"].shape).astype(np.float32) if step >= 2 else None
        model.backward(d_last_hidden_state=d_last, d_pooler_output=d_pool)
        grads = mod.grads()
        assert any(k.startswith("pooler.") for k in grads) == (step >= 2), sorted(grads)
        for name, g in grads.items():
            parts = [tparams[n] for n in hf_names(name, "", BERT_NAMES)]
            for p, chunk in zip(parts, np.split(g, len(parts))):
                p.grad = torch.from_numpy(chunk.copy())
        assert all((p.grad is None) == (n.startswith("pooler.") and step < 2) for n, p in tparams.items())
        enorm = encore.optim.clip_grad_norm_(mod, 0.5)
        tnorm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5).item()
        assert tnorm > 0.5 and abs(enorm - tnorm) <= 1e-6 * tnorm, (step, enorm, tnorm)  # clipping is active
        eopt.step()
        topt.step()
        if step == 1:
            now = mod.state_dict()
            for k, v in pooler_start.items():
                assert np.array_equal(now[k], v), k  # bitwise: never touched
                assert np.array_equal(tparams[k].detach().numpy(), v), k
    assert eopt.steps == 5
    final = mod.state_dict()
    for name, got in final.items():
        want = np.concatenate([tparams[n].detach().numpy() for n in hf_names(name, "", BERT_NAMES)])
        d = np.abs(got - want).max()
        assert d <= 1e-6, f"{name}: {d:.2e}"
    for k, v in pooler_start.items():
        assert np.abs(final[k] - v).max() > 1e-3, k  # and updated once it had gradients
