#!/usr/bin/env python3
"""Engine adapters and the worker process of bench/compare.py.

Every engine runs in its own worker process (`python3 bench/compare_engines.py --worker`), so that its peak RSS
is its own and its libraries (torch, onnxruntime, ctranslate2, encore) never share a process or a thread pool.
The orchestrator drives all workers round-robin over pipes; only one worker computes at any time.

One call of an engine = numpy int64 (B, T) input_ids / attention_mask / token_type_ids in, numpy float32
(B, T, H) last_hidden_state out; input and output conversions are part of the timed call, since a user pays them.

Protocol: length-prefixed pickles on the worker's stdin/stdout; the worker's own fd 1 is redirected to stderr
so that library prints cannot corrupt it. Requests are (command, payload) and replies (status, payload).
"""
import os
import pickle
import struct
import sys
import time
import traceback

import numpy as np

# (family, dtype) -> what is measured; the keys are the engine names "family:dtype" of the CLI.
ENGINES = {
    ("encore", "fp32"): "encore.AutoModel",
    ("encore", "bf16"): "encore.AutoModel.load(path, dtype='bf16')",
    ("encore", "int8"): "encore.AutoModel.load(path, dtype='int8')",
    ("torch-eager", "fp32"): "transformers AutoModel (BertModel, ModernBertModel, ...), eager PyTorch "
                             "(attn_implementation='sdpa', the default)",
    ("torch-eager", "bf16"): "transformers AutoModel.to(torch.bfloat16) (bf16 weights and activations, not autocast)",
    ("torch-fastpath", "fp32"): "BertModel embeddings + nn.TransformerEncoder fast path (nested tensors for padding; "
                                "BERT only)",
    ("torch-fastpath", "bf16"): "the same, .to(torch.bfloat16)",
    ("onnxruntime", "fp32"): "ONNX export + onnxruntime.transformers optimizer (model_type='bert')",
    ("onnxruntime", "int8"): "the optimized ONNX model + onnxruntime quantize_dynamic (per-channel int8 weights of "
                             "MatMul and Attention, dynamic u8 activations)",
    ("ctranslate2", "fp32"): "TransformersConverter, ctranslate2.Encoder compute_type='float32'",
    ("ctranslate2", "bf16"): "ctranslate2.Encoder compute_type='bfloat16'",
    ("ctranslate2", "int8"): "ctranslate2.Encoder compute_type='int8'",
}


class Unavailable(Exception):
    """The engine cannot run here (missing feature, failed conversion): reported with its reason, never timed."""


def _torch(threads):
    import torch
    torch.set_num_threads(threads)
    return torch


def _load_auto(torch, model_dir, attn="sdpa"):
    """transformers' base model of the checkpoint, and a function of (ids, mask, types) -> its keyword inputs
    (token_type_ids only for models whose forward takes them: ModernBERT has none)."""
    import inspect
    from transformers import AutoModel
    model = AutoModel.from_pretrained(model_dir, attn_implementation=attn).eval()
    with_types = "token_type_ids" in inspect.signature(model.forward).parameters

    def kwargs(ids, mask, types):
        kw = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        if with_types:
            kw["token_type_ids"] = torch.from_numpy(types)
        return kw
    return model, kwargs


def _load_bert(torch, model_dir, attn="sdpa"):
    from transformers import BertModel
    import json
    with open(os.path.join(model_dir, "config.json")) as f:
        model_type = json.load(f).get("model_type")
    if model_type != "bert":
        raise Unavailable(f"the nn.TransformerEncoder fast path is set up for BERT only, not {model_type!r}")
    return BertModel.from_pretrained(model_dir, attn_implementation=attn).eval()


def load_reference(model_dir, threads):
    """transformers' base model, fp32, plain eager attention: the oracle every engine is checked against."""
    torch = _torch(threads)
    model, kwargs = _load_auto(torch, model_dir, attn="eager")

    def run(ids, mask, types):
        with torch.inference_mode():
            return model(**kwargs(ids, mask, types)).last_hidden_state.numpy()
    return run, (f"transformers {type(model).__name__} fp32 attn_implementation='eager', "
                 f"torch {torch.__version__}")


def load_encore(model_dir, dtype, threads, encore_python):
    sys.path.insert(0, encore_python)
    import encore
    encore.set_num_threads(threads)
    if dtype == "fp32":
        model = encore.AutoModel.load(model_dir)
    else:
        try:
            model = encore.AutoModel.load(model_dir, dtype=dtype)
        except TypeError:  # the binding has no dtype= argument yet
            raise Unavailable("encore.AutoModel.load has no dtype= argument in this build") from None
        except (encore.Error, ValueError) as e:  # the argument exists but this dtype is not offered (yet)
            raise Unavailable(f"encore.AutoModel.load(dtype={dtype!r}) refused: {e}")

    def run(ids, mask, types):
        return model(ids, mask, types)
    return run, encore.runtime_info()


def load_torch_eager(model_dir, dtype, threads):
    torch = _torch(threads)
    model, kwargs = _load_auto(torch, model_dir)
    if dtype == "bf16":
        model = model.to(torch.bfloat16)

    def run(ids, mask, types):
        with torch.inference_mode():
            return model(**kwargs(ids, mask, types)).last_hidden_state.float().numpy()
    return run, f"torch {torch.__version__} threads={torch.get_num_threads()}"


def bert_as_transformer_encoder(torch, bert):
    """nn.TransformerEncoder (post-LN, exact GELU, eps from the config, batch_first) holding BertModel's weights."""
    cfg = bert.config
    if cfg.hidden_act != "gelu" or getattr(cfg, "position_embedding_type", "absolute") != "absolute":
        raise Unavailable(f"nn.TransformerEncoder has no equivalent of hidden_act={cfg.hidden_act!r}")
    layer = torch.nn.TransformerEncoderLayer(cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size,
                                             dropout=0.0, activation="gelu", layer_norm_eps=cfg.layer_norm_eps,
                                             batch_first=True, norm_first=False)
    enc = torch.nn.TransformerEncoder(layer, cfg.num_hidden_layers, enable_nested_tensor=True).eval()
    with torch.no_grad():
        for src, dst in zip(bert.encoder.layer, enc.layers):
            att = src.attention.self
            dst.self_attn.in_proj_weight.copy_(torch.cat([att.query.weight, att.key.weight, att.value.weight]))
            dst.self_attn.in_proj_bias.copy_(torch.cat([att.query.bias, att.key.bias, att.value.bias]))
            pairs = [(dst.self_attn.out_proj, src.attention.output.dense), (dst.norm1, src.attention.output.LayerNorm),
                     (dst.linear1, src.intermediate.dense), (dst.linear2, src.output.dense),
                     (dst.norm2, src.output.LayerNorm)]
            for d, s in pairs:
                d.weight.copy_(s.weight)
                d.bias.copy_(s.bias)
    return enc


def load_torch_fastpath(model_dir, dtype, threads):
    torch = _torch(threads)
    bert = _load_bert(torch, model_dir)
    enc = bert_as_transformer_encoder(torch, bert)
    emb = bert.embeddings
    del bert.encoder
    if dtype == "bf16":
        emb, enc = emb.to(torch.bfloat16), enc.to(torch.bfloat16)
    torch.backends.mha.set_fastpath_enabled(True)

    def run(ids, mask, types):
        with torch.inference_mode():
            x = emb(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types))
            # A padding mask turns on the nested-tensor path; without padding the dense fast path is the one to
            # use (transformers likewise drops an all-ones mask before sdpa).
            pad = torch.from_numpy(mask) == 0
            out = enc(x, src_key_padding_mask=pad if bool(pad.any()) else None)
            return out.float().numpy()
    return run, f"torch {torch.__version__} threads={torch.get_num_threads()}"


def load_onnxruntime(artifacts, dtype, threads):
    import onnxruntime as ort
    key = {"fp32": "onnx_optimized", "int8": "onnx_int8"}[dtype]
    path = artifacts.get(key)
    if not path:
        raise Unavailable(artifacts.get(key + "_error", f"no {key} artifact"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]

    def run(ids, mask, types):
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return sess.run(["last_hidden_state"], {n: feed[n] for n in names})[0]
    return run, f"onnxruntime {ort.__version__} intra_op_num_threads={threads}"


def load_ctranslate2(artifacts, dtype, threads):
    import ctranslate2
    path = artifacts.get("ct2")
    if not path:
        raise Unavailable(artifacts.get("ct2_error", "no ctranslate2 conversion"))
    compute = {"fp32": "float32", "bf16": "bfloat16", "int8": "int8"}[dtype]
    supported = sorted(ctranslate2.get_supported_compute_types("cpu"))
    if compute not in supported:
        raise Unavailable(f"ctranslate2 {ctranslate2.__version__} supports compute types {supported} on this CPU, "
                          f"not {compute}")
    enc = ctranslate2.Encoder(path, device="cpu", compute_type=compute, intra_threads=threads, inter_threads=1)

    def run(ids, mask, types):
        if types.any():
            raise ValueError("token_type_ids other than 0 are not passed to ctranslate2 here")
        lengths = mask.sum(axis=1, dtype=np.int32)
        out = enc.forward_batch(ctranslate2.StorageView.from_array(np.ascontiguousarray(ids, dtype=np.int32)),
                                lengths=ctranslate2.StorageView.from_array(lengths))
        return np.array(out.last_hidden_state, dtype=np.float32)
    return run, f"ctranslate2 {ctranslate2.__version__} compute_type={compute} intra_threads={threads}"


def load_engine(spec):
    family, dtype, threads = spec["family"], spec["dtype"], spec["threads"]
    if family == "reference":
        return load_reference(spec["model_dir"], threads)
    if family == "encore":
        return load_encore(spec["model_dir"], dtype, threads, spec["encore_python"])
    if family == "torch-eager":
        return load_torch_eager(spec["model_dir"], dtype, threads)
    if family == "torch-fastpath":
        return load_torch_fastpath(spec["model_dir"], dtype, threads)
    if family == "onnxruntime":
        return load_onnxruntime(spec["artifacts"], dtype, threads)
    if family == "ctranslate2":
        return load_ctranslate2(spec["artifacts"], dtype, threads)
    raise Unavailable(f"unknown engine {family}:{dtype}")


# ----------------------------------------------------------------------------------------------------- memory

def memory_kb():
    """(peak RSS, current RSS) of this process in kB, from /proc/self/status (VmHWM, VmRSS)."""
    vals = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                k, v = line.split(":")
                vals[k] = int(v.split()[0])
    return vals["VmHWM"], vals["VmRSS"]


def reset_peak_rss():
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ----------------------------------------------------------------------------------------------------- protocol

def send(f, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)))
    f.write(data)
    f.flush()


def recv(f):
    head = f.read(8)
    if len(head) < 8:
        raise EOFError("peer closed the pipe")
    (n,) = struct.unpack("<Q", head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError("peer closed the pipe mid-message")
    return pickle.loads(data)


def worker_main():
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # library prints go to stderr, never into the protocol
    sys.stdout = sys.stderr
    proto_in = os.fdopen(os.dup(0), "rb")
    run, inputs = None, None
    while True:
        try:
            cmd, payload = recv(proto_in)
        except EOFError:
            return
        try:
            if cmd == "quit":
                send(proto_out, ("ok", None))
                return
            if cmd == "load":
                t0 = time.perf_counter()
                try:
                    run, info = load_engine(payload)
                except Unavailable as e:
                    send(proto_out, ("unavailable", str(e)))
                    continue
                send(proto_out, ("ok", {"info": info, "load_s": time.perf_counter() - t0,
                                        "rss_kb": memory_kb()[1]}))
            elif cmd == "inputs":
                inputs = (payload["input_ids"], payload["attention_mask"], payload["token_type_ids"])
                send(proto_out, ("ok", {"peak_reset": reset_peak_rss(), "rss_kb": memory_kb()[1]}))
            elif cmd == "output":
                t0 = time.perf_counter()
                out = run(*inputs)
                dt = time.perf_counter() - t0
                send(proto_out, ("ok", {"seconds": dt, "output": np.asarray(out, dtype=np.float32)}))
            elif cmd == "run":
                t0 = time.perf_counter()
                run(*inputs)
                send(proto_out, ("ok", {"seconds": time.perf_counter() - t0}))
            elif cmd == "memory":
                hwm, rss = memory_kb()
                send(proto_out, ("ok", {"peak_kb": hwm, "rss_kb": rss}))
            else:
                send(proto_out, ("error", f"unknown command {cmd!r}"))
        except Exception:  # reported to the orchestrator, which marks the engine as failed
            send(proto_out, ("error", traceback.format_exc()))


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker_main()
    else:
        sys.exit("usage: compare_engines.py --worker (started by bench/compare.py)")
