"""encore.TokenClassifier / `encore ner` (issue 12 item 2) against transformers 5.23's pipeline("token-classification")
run live, for every aggregation strategy (none, simple, first, average, max), on checkpoints saved in the test:

  * bert     a random BertForTokenClassification with all-MiniLM-L6-v2's WordPiece tokenizer (uncased, "##" sub-words,
             [UNK] for emoji; the pipeline's word-aware sub-word rule);
  * roberta  a random RobertaForTokenClassification with a byte-level BPE trained here on stdlib docstrings (600 tokens,
             so most words split; no continuing-subword prefix: the pipeline's space heuristic, "Ġ" words, and the
             decoder's U+FFFD for a non-ASCII char decoded twice; model_max_length 64, so the long text is truncated);
  * minilm   all-MiniLM-L6-v2's real encoder weights under a seeded random token-classification head.

Labels: B-/I- PER, LOC, ORG, MISC, "O" and "DATE" (a label without a prefix). The heads are crafted so that random
weights tag most tokens with varied labels: classifier weights N(0, 32/hidden) (not std 0.02: softmax peaks spread
over 0.3..1.0), and "O" gets bias +1 so that a share of the tokens is left out and entities have boundaries. The test
asserts that the corpus meets what it is meant to cover (multi-token groups, words split into differently-labelled
sub-words, punctuation entities, adjacent entities of one type, strategies that disagree), so a degenerate head fails.

stride= (long texts in overlapping windows, entities merged as the pipeline's aggregate_overlapping_entities) is
compared too, for the four grouping strategies, strides 0 and 5, windows of 32 (bert) and 64 (roberta) tokens.

Compared: entity lists identical (entity / entity_group, word, start, end, index), scores within 1e-5 (float32;
measured max differences: bert 1.1e-6, roberta 1.0e-6, minilm 2.2e-6, so the margin is 4.6x or more; printed with -s). Also ignore_labels=[] (the
"O" groups kept), a single str, the aggregation= alias, the CLI's JSON lines, and the errors.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import transformers as T  # noqa: E402
from train_data import MINILM, TOKENIZER_FILES  # noqa: E402

import encore  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
ENCORE_BIN = pathlib.Path(os.environ.get("ENCORE_BIN", REPO / "build" / "encore"))
sys.path.insert(0, str(REPO / "tests" / "tools"))
from trained_tokenizers import training_texts  # noqa: E402

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "DATE", "B-MISC", "I-MISC"]
STRATEGIES = ["none", "simple", "first", "average", "max"]
SCORE_TOL = 1e-5
CORPUS = [
    "Arnold Schwarzenegger visited Kraków, Poland on 2026-11-24 with the U.S.A. delegation 🙂 and Tokenization-Inc.",
    "Mr. O'Neil-Smith (CEO of Acme-Corp) met Dr. Müller in São Paulo; they didn't discuss Zürich's pre-IPO plans.",
    "Héllo   wörld!!\tnaïve café\n new  line",
    " leading space, trailing space ",
    "",
    "x",
    "New York City, New Jersey and Los Angeles are places; Barack Obama and Angela Merkel are people.",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopic!",
    "Ünïcödé ñames: Владимир Путин, 東京, Αθήνα, and emoji 👩‍🔬🚀 in #hashtags @mentions e-mail@example.com.",
    "The quick brown fox jumps over the lazy dog. " * 12,  # beyond the roberta tokenizer's 64 tokens: truncated
]


def head(model, seed):
    """The crafted classifier: N(0, 32/hidden) weights (varied labels on random features: logits of std ~5 on a
    unit-scale hidden state), bias +1 on "O"."""
    g = torch.Generator().manual_seed(seed)
    w = model.classifier.weight
    with torch.no_grad():
        w.copy_(torch.randn(w.shape, generator=g) * (32 / w.shape[1]) ** 0.5)
        model.classifier.bias.zero_()
        model.classifier.bias[0] = 1.0
    return model


def label_config(**kw):
    return dict(num_labels=len(LABELS), id2label=dict(enumerate(LABELS)), label2id={l: i for i, l in enumerate(LABELS)},
                **kw)


def save_bert(d):
    torch.manual_seed(0)
    cfg = T.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                       max_position_embeddings=128, **label_config())
    head(T.BertForTokenClassification(cfg).eval(), 0).save_pretrained(d)
    for f in TOKENIZER_FILES:
        shutil.copy(MINILM / f, d / f)
    return d


def save_minilm(d):
    m = T.BertForTokenClassification.from_pretrained(str(MINILM), **label_config()).eval()
    head(m, 2).save_pretrained(d)
    for f in TOKENIZER_FILES:
        shutil.copy(MINILM / f, d / f)
    return d


def save_roberta(d):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(training_texts([]), trainers.BpeTrainer(
        vocab_size=600, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, special=True)]))
    bpe.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=False)
    T.PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                              pad_token="<pad>", mask_token="<mask>", model_max_length=64).save_pretrained(d)
    torch.manual_seed(1)
    cfg = T.RobertaConfig(vocab_size=bpe.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=64, max_position_embeddings=130, pad_token_id=1, **label_config())
    head(T.RobertaForTokenClassification(cfg).eval(), 1).save_pretrained(d)
    return d


SAVERS = {"bert": save_bert, "roberta": save_roberta, "minilm": save_minilm}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ner")
    return {name: save(root / name) for name, save in SAVERS.items()}


@pytest.fixture(scope="module")
def references(checkpoints):
    """The pipeline's entities per model and strategy, computed once."""
    out = {}
    for name, d in checkpoints.items():
        pipe = T.pipeline("token-classification", model=str(d), device="cpu")
        with _quiet():
            out[name] = {s: pipe(CORPUS, aggregation_strategy=s) for s in STRATEGIES}
            out[name]["simple-keep-O"] = pipe(CORPUS, aggregation_strategy="simple", ignore_labels=[])
    return out


class _quiet:
    """The pipeline warns on every call for the roberta tokenizer ("fallback heuristic"): expected, not shown."""
    def __enter__(self):
        import warnings
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.filterwarnings("ignore", message="Tokenizer does not support real words")

    def __exit__(self, *a):
        return self._w.__exit__(*a)


def compare(want, got, what):
    """Identical entity lists but for the scores, which must be within SCORE_TOL; returns the max score difference."""
    assert len(want) == len(got), what
    worst = 0.0
    for i, (w, g) in enumerate(zip(want, got)):
        strip = lambda rows: [{k: (int(v) if k in ("start", "end", "index") else v) for k, v in r.items() if k != "score"}
                              for r in rows]
        assert strip(g) == strip(w), f"{what}: text {i} {CORPUS[i]!r}"
        assert [list(r) for r in g] == [list(r) for r in w], f"{what}: key order"
        for a, b in zip(w, g):
            worst = max(worst, abs(float(a["score"]) - b["score"]))
    assert worst <= SCORE_TOL, (what, worst)
    return worst


@pytest.mark.parametrize("name", list(SAVERS))
def test_entities_match_the_pipeline(name, checkpoints, references):
    clf = encore.TokenClassifier(checkpoints[name])
    assert clf.labels == LABELS and clf.num_labels == len(LABELS)
    worst = 0.0
    for s in STRATEGIES:
        worst = max(worst, compare(references[name][s], clf(CORPUS, aggregation_strategy=s, batch_size=3), f"{name}/{s}"))
    worst = max(worst, compare(references[name]["simple-keep-O"], clf(CORPUS, aggregation_strategy="simple",
                                                                       ignore_labels=[]), f"{name}/simple ignore_labels=[]"))
    print(f"{name}: max |score - pipeline's| = {worst:.2e}")
    # one text alone is a list of dicts; the aggregation= spelling is the same option
    assert clf(CORPUS[0], aggregation="first") == clf([CORPUS[0]], aggregation_strategy="first")[0]
    assert encore.TokenClassifier(checkpoints[name], aggregation_strategy="max")(CORPUS) == clf(CORPUS, aggregation="max")


def test_corpus_covers_what_the_strategies_disagree_on(references):
    """The comparison above means something only if the outputs hold the cases the pipeline's rules are about."""
    for name, ref in references.items():
        flat = {s: [e for text in ref[s] for e in text] for s in ref}
        tokens = flat["none"]
        assert len(tokens) > 100 and len({e["entity"] for e in tokens}) >= 7, name  # most labels but "O" occur
        if name != "roberta":
            assert any(e["word"].startswith("##") for e in tokens), name  # sub-word tokens tagged
            assert any(e["word"] == "🙂" for e in tokens), name  # [UNK]'s word is the text it covers
        simple = flat["simple"]
        assert any(" " in e["word"].strip() for e in simple), name  # groups of several words
        assert any(e["word"].strip() in {",", ".", "!", ";", "(", ")", "-"} for e in simple), name  # punctuation
        assert any(e["entity_group"] == "DATE" for e in simple), name  # a label without B-/I-
        # adjacent entities: one ends where the next starts, or two B- of one type in a row stay apart
        assert any(a["end"] >= b["start"] - 1 and a["entity_group"] == b["entity_group"]
                   for text in ref["simple"] for a, b in zip(text, text[1:])), name
        # words whose sub-words disagree: the word-level strategies differ from each other and from simple
        assert flat["first"] != flat["average"] != flat["max"] and flat["first"] != flat["simple"], name
        assert len(flat["simple-keep-O"]) > len(simple), name


def test_cli_ner_matches_the_pipeline(checkpoints, references, tmp_path):
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS))
    for name in ("bert", "roberta"):
        for s in ("none", "first"):
            r = subprocess.run([str(ENCORE_BIN), "ner", "--model", str(checkpoints[name]), "-i", str(texts),
                                "--aggregation", s], capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            got = [json.loads(line) for line in r.stdout.splitlines()]
            compare(references[name][s], got, f"cli {name}/{s}")
    plain = tmp_path / "texts.txt"
    plain.write_text(CORPUS[0] + "\n" + CORPUS[6] + "\n")
    r = subprocess.run([str(ENCORE_BIN), "ner", "--model", str(checkpoints["bert"]), "-i", str(plain), "--aggregation",
                        "average", "--ignore-labels", ""], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in r.stdout.splitlines()]
    pipe = T.pipeline("token-classification", model=str(checkpoints["bert"]), device="cpu")
    compare(pipe([CORPUS[0], CORPUS[6]], aggregation_strategy="average", ignore_labels=[]), got, "cli average keep O")
    r = subprocess.run([str(ENCORE_BIN), "ner", "--model", str(checkpoints["bert"]), "-i", str(plain), "--aggregation",
                        "max", "--ignore-labels", "O,LOC", "--ignore-labels", "MISC"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in r.stdout.splitlines()]
    want = pipe([CORPUS[0], CORPUS[6]], aggregation_strategy="max", ignore_labels=["O", "LOC", "MISC"])
    assert any(want) and all(e["entity_group"] not in ("LOC", "MISC") for text in want for e in text)
    compare(want, got, "cli max ignoring O, LOC, MISC")


LONG = [CORPUS[0] * 3, CORPUS[1] + " " + CORPUS[6], "short one", "", CORPUS[-1]]


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_stride_windows_match_the_pipeline(name, checkpoints, tmp_path):
    """stride=: long texts read whole in overlapping windows, entities merged as aggregate_overlapping_entities.
    The bert copy's tokenizer_config says model_max_length 32, so the long texts take 3-6 windows."""
    d = checkpoints[name]
    if name == "bert":
        d = tmp_path / "bert32"
        shutil.copytree(checkpoints["bert"], d)
        cfg = json.loads((d / "tokenizer_config.json").read_text())
        (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "model_max_length": 32}))
    pipe, clf = T.pipeline("token-classification", model=str(d), device="cpu"), encore.TokenClassifier(d)
    assert clf.max_length == (32 if name == "bert" else 64)
    with _quiet():
        for stride in (0, 5):
            for s in STRATEGIES[1:]:
                compare(pipe(LONG, aggregation_strategy=s, stride=stride), clf(LONG, aggregation_strategy=s, stride=stride),
                        f"{name} stride {stride} {s}")
    texts = tmp_path / "long.jsonl"
    texts.write_text("".join(json.dumps({"text": t}) + "\n" for t in LONG))
    r = subprocess.run([str(ENCORE_BIN), "ner", "--model", str(d), "-i", str(texts), "--aggregation", "first",
                        "--stride", "5"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with _quiet():
        compare(pipe(LONG, aggregation_strategy="first", stride=5), [json.loads(x) for x in r.stdout.splitlines()],
                f"cli {name} stride 5")
    with pytest.raises(encore.UsageError, match="needs an aggregation strategy other than none"):
        clf(LONG, stride=5)
    with pytest.raises(encore.UsageError, match=f"stride {clf.max_length - 2} must be in 0..{clf.max_length - 3} "):
        clf(LONG, aggregation_strategy="simple", stride=clf.max_length - 2)  # 2 special tokens: no room left


def test_errors_name_the_problem(checkpoints, tiny_bert, tmp_path):
    clf = encore.TokenClassifier(checkpoints["bert"])
    with pytest.raises(encore.UsageError, match="'medium' is not one of none, simple, first, average, max"):
        clf(CORPUS, aggregation_strategy="medium")
    with pytest.raises(encore.UsageError, match="disagree"):
        clf(CORPUS, aggregation_strategy="first", aggregation="max")
    with pytest.raises(encore.UsageError, match=r"inputs\[1\] is a int, not a str"):
        clf(["a", 3])
    with pytest.raises(encore.UsageError, match="not a str"):
        clf(CORPUS, ignore_labels="O")
    with pytest.raises(encore.ModelFormatError, match="without a token-classification head"):
        encore.TokenClassifier(tiny_bert)
    r = subprocess.run([str(ENCORE_BIN), "ner", "--model", str(tiny_bert), "x"], capture_output=True, text=True)
    assert r.returncode == 3 and "without a token-classification head" in r.stderr, r.stderr
    r = subprocess.run([str(ENCORE_BIN), "ner", "--model", str(checkpoints["bert"]), "--aggregation", "medium", "x"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--aggregation" in r.stderr, r.stderr
    assert clf(CORPUS[4]) == [] and clf([]) == []
