#!/usr/bin/env python3
"""Model files for bench/compare.py, made offline and cached outside git.

    python3 bench/compare_prepare.py bert-base            # prints the directory of the random BERT-base
    python3 bench/compare_prepare.py modernbert-base      # ... of the random ModernBERT-base
    python3 bench/compare_prepare.py artifacts NAME MODEL_DIR   # prints JSON: ONNX (optimized, int8), CT2 dirs

Cache: $ENCORE_BENCH_CACHE, else ~/.cache/encore-bench. Each artifact set lives in a directory keyed by the
model's config.json, weight file size/mtime and the converter versions, and is built in a temporary directory
renamed into place when complete, so an interrupted run leaves nothing half-made behind. A step that fails is
recorded with its reason (the engine is then reported "not available" with that reason), not retried each run
unless the cache entry is removed.
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile
import traceback


def cache_dir():
    d = os.environ.get("ENCORE_BENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "encore-bench")
    os.makedirs(d, exist_ok=True)
    return d


# Random models of a published shape, for the scenarios that have no small real checkpoint on PyPI: name ->
# (transformers config class, model class). The default config of each is the base model's shape.
RANDOM_MODELS = {
    "bert-base": ("BertConfig", "BertModel"),  # 12 layers x 768, 12 heads, 3072, gelu, post-LN, eps 1e-12
    "modernbert-base": ("ModernBertConfig", "ModernBertModel"),  # 22 layers x 768, 12 heads, GeGLU 1152, RoPE
    # Qwen3-0.6B's (and Qwen3-Embedding-0.6B's) layers: 28 x 1024, 16 heads of 128 over 8 kv heads, SwiGLU 3072,
    # RoPE base 1e6; the vocabulary cut from 151,936 to 32,768 so the fp32 ONNX export (1.9 GB) stays under
    # protobuf's 2 GiB (the table is only gathered from: the compute is the real model's, RSS ~0.5 GB lower)
    "qwen3-0.6b": ("Qwen3Config", "Qwen3Model", dict(
        hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        intermediate_size=3072, vocab_size=32768, max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}


def ensure_random_model(name):
    """A randomly initialised transformers model of RANDOM_MODELS[name]'s config (the class's defaults, updated by
    the entry's keyword arguments if it has them), seed 0, safetensors."""
    out = os.path.join(cache_dir(), f"{name}-random")
    if os.path.exists(os.path.join(out, "model.safetensors")):
        return out
    import torch
    import transformers
    config_class, model_class = (getattr(transformers, n) for n in RANDOM_MODELS[name][:2])
    kwargs = RANDOM_MODELS[name][2] if len(RANDOM_MODELS[name]) > 2 else {}
    torch.manual_seed(0)
    model = model_class(config_class(**kwargs)).eval()
    tmp = tempfile.mkdtemp(dir=cache_dir(), prefix=f".{name}-")
    model.save_pretrained(tmp, safe_serialization=True)
    os.rename(tmp, out)
    return out


def _versions():
    vs = {}
    for mod in ("torch", "transformers", "onnx", "onnxruntime", "ctranslate2"):
        try:
            vs[mod] = __import__(mod).__version__
        except Exception as e:  # a missing peer library is recorded, not fatal
            vs[mod] = f"missing ({type(e).__name__})"
    return vs


def _key(model_dir, versions):
    h = hashlib.sha1()
    with open(os.path.join(model_dir, "config.json"), "rb") as f:
        h.update(f.read())
    st = os.stat(os.path.join(model_dir, "model.safetensors"))
    h.update(f"{st.st_size}:{st.st_mtime_ns}:{os.path.realpath(model_dir)}".encode())
    h.update(json.dumps(versions, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _export_onnx(model_dir, path):
    """torch.onnx.export of the checkpoint's base model (AutoModel, eager attention), dynamic batch and sequence.

    For BERT, the TorchScript exporter (dynamo=False) of the eager attention graph is what onnxruntime's BERT
    fusions recognise: it fuses every layer into Attention + SkipLayerNormalization + BiasGelu and the embeddings
    into EmbedLayerNormalization; the sdpa graph leaves attention unfused. The inputs are those of the model's
    forward among input_ids, attention_mask, token_type_ids (ModernBERT has no token types). Returns the config
    and the input names.
    """
    import inspect
    import torch
    from transformers import AutoModel
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    takes = inspect.signature(model.forward).parameters
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in takes]

    class LastHidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *inputs):
            return self.m(**dict(zip(names, inputs))).last_hidden_state

    ids = torch.randint(1000, 2000, (2, 16))
    example = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    axes = {n: {0: "batch", 1: "sequence"} for n in names + ["last_hidden_state"]}
    with torch.no_grad():
        torch.onnx.export(LastHidden(model), tuple(example[n] for n in names), path,
                          dynamo=False, input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes=axes, opset_version=17)
    return model.config, names


def ensure_artifacts(name, model_dir):
    versions = _versions()
    root = os.path.join(cache_dir(), "artifacts", f"{name}-{_key(model_dir, versions)}")
    manifest = os.path.join(root, "artifacts.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            return json.load(f)
    os.makedirs(os.path.dirname(root), exist_ok=True)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(root), prefix=".tmp-")
    art = {"versions": versions, "model_dir": model_dir}

    def step(name, fn):
        try:
            fn()
        except Exception as e:  # the reason is shown in RESULTS.md in place of a number
            art[name + "_error"] = f"{name} failed: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
            traceback.print_exc()

    raw, opt, q8 = (os.path.join(tmp, n) for n in ("model.onnx", "model.opt.onnx", "model.opt.int8.onnx"))

    def onnx_export():
        cfg, names = _export_onnx(model_dir, raw)
        art["onnx_inputs"] = names
        from onnxruntime.transformers.optimizer import optimize_model
        # onnxruntime's transformer optimizer knows BERT-shaped graphs ("bert" covers RoBERTa, XLM-R, ...); other
        # families get its generic fusions (LayerNormalization, Gelu, SkipLayerNormalization where they match).
        om = optimize_model(raw, model_type="bert", num_heads=cfg.num_attention_heads, hidden_size=cfg.hidden_size)
        art["onnx_fusions"] = {k: v for k, v in om.get_fused_operator_statistics().items() if v}
        om.save_model_to_file(opt)
        art["onnx_optimized"] = os.path.join(root, "model.opt.onnx")
        os.remove(raw)

    def onnx_int8():
        if "onnx_optimized" not in art:
            raise RuntimeError("no optimized ONNX model to quantize")
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.quantization.shape_inference import quant_pre_process
        # The quantizer needs every tensor's type; the fused contrib ops (Attention, SkipLayerNormalization) have
        # none until symbolic shape inference has run (quant_pre_process, without re-optimizing the graph).
        pre = os.path.join(tmp, "model.opt.shapes.onnx")
        quant_pre_process(opt, pre, skip_optimization=True)
        # Per-channel weight scales: per-tensor ones cost all-MiniLM-L6-v2 its accuracy (mean token cosine to
        # fp32 0.91 vs 0.98 here). Embedding tables stay fp32: they are looked up, not multiplied.
        quantize_dynamic(pre, q8, weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Attention"])
        os.remove(pre)
        import collections
        import onnx
        ops = collections.Counter(n.op_type for n in onnx.load(q8, load_external_data=False).graph.node)
        art["onnx_int8_ops"] = {k: v for k, v in sorted(ops.items()) if k.startswith(("Q", "MatMulInteger"))}
        art["onnx_int8"] = os.path.join(root, "model.opt.int8.onnx")

    def ct2():
        from ctranslate2.converters import TransformersConverter
        src = model_dir
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
        if config.get("model_type") == "qwen3":  # its converter makes a Generator, not the Encoder the bench runs
            raise RuntimeError("ctranslate2 converts qwen3 to a decoder (Generator); the bench runs Encoders")
        if config.get("model_type") == "bert" and "position_embedding_type" not in config:
            # The converter reads config.position_embedding_type, which transformers 5 no longer writes; convert
            # from a view of the model directory whose config.json states BERT's default ("absolute").
            src = os.path.join(tmp, "ct2-source")
            os.makedirs(src)
            for name in os.listdir(model_dir):
                if name != "config.json":
                    os.symlink(os.path.join(os.path.realpath(model_dir), name), os.path.join(src, name))
            with open(os.path.join(src, "config.json"), "w") as f:
                json.dump(dict(config, position_embedding_type="absolute"), f, indent=1)
            art["ct2_note"] = "config.json given position_embedding_type='absolute' for the converter"
        TransformersConverter(src).convert(os.path.join(tmp, "ct2"), quantization=None, force=True)
        if src != model_dir:
            shutil.rmtree(src)
        art["ct2"] = os.path.join(root, "ct2")

    step("onnx_optimized", onnx_export)
    step("onnx_int8", onnx_int8)
    step("ct2", ct2)
    with open(os.path.join(tmp, "artifacts.json"), "w") as f:
        json.dump(art, f, indent=1)
    if os.path.exists(root):
        shutil.rmtree(root)
    os.rename(tmp, root)
    return art


def main():
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # libraries print progress; only the answer goes to stdout
    if len(sys.argv) == 2 and sys.argv[1] in RANDOM_MODELS:
        out.write(ensure_random_model(sys.argv[1]) + "\n")
    elif sys.argv[1:2] == ["artifacts"] and len(sys.argv) == 4:
        json.dump(ensure_artifacts(sys.argv[2], sys.argv[3]), out)
    else:
        sys.exit(__doc__)
    out.flush()


if __name__ == "__main__":
    main()
