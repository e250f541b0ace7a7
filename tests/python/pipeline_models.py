"""Random-initialised task checkpoints for the pipeline tests (text classification, fill-mask, sparse encoding),
saved by transformers' save_pretrained with a tokenizer nothing downloads: MiniLM's WordPiece files for BERT, and
for RoBERTa a byte-level BPE trained here (tokenizers' BpeTrainer on a fixed text, RoBERTa's special tokens and
post-processor) wrapped in RobertaTokenizerFast."""
import functools
import json
import shutil

import torch
import transformers as T
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from train_data import MINILM, TOKENIZER_FILES

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=128)
ROBERTA_VOCAB = 1000

# The BPE's training text: English with punctuation and digits, so the test sentences split into known pieces.
BPE_TEXT = ("The quick brown fox jumps over the lazy dog. Paris is the capital of France, and Berlin is the capital "
            "of Germany. A man is eating food; someone is playing music. The moon formed about 4.5 billion years "
            "ago. This movie was great, really wonderful! That meal was awful, truly boring. Cheese is made from "
            "milk. How old is the moon? Lunar rocks were dated with radiometric methods in 1969 and 1972.")


def save_config_fields(d, **fields):
    """Adds (or replaces) top-level fields of d/config.json."""
    c = json.loads((d / "config.json").read_text())
    c.update(fields)
    (d / "config.json").write_text(json.dumps(c, indent=2))


def copy_minilm_tokenizer(d):
    for f in TOKENIZER_FILES:
        shutil.copy(MINILM / f, d / f)


@functools.lru_cache(maxsize=1)
def roberta_tokenizer() -> T.PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([BPE_TEXT] * 4 + BPE_TEXT.split(". "), trainers.BpeTrainer(
        vocab_size=ROBERTA_VOCAB, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, special=True)]))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                                                      trim_offsets=True, add_prefix_space=False)
    return T.RobertaTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                  cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
                                  model_max_length=SMALL["max_position_embeddings"] - 2)


def save_model(d, family, model_class, seed=0, initializer_range=0.2, **config):
    """family 'bert' (MiniLM's tokenizer, vocab 30522) or 'roberta' (the trained BPE); model_class a transformers
    class such as BertForSequenceClassification; config: extra config fields (num_labels, id2label, problem_type).
    A wide initializer_range spreads the logits so that scores and rankings can tell inputs apart."""
    torch.manual_seed(seed)
    if family == "bert":
        cfg = T.BertConfig(vocab_size=30522, initializer_range=initializer_range, **SMALL, **config)
    else:
        tok = roberta_tokenizer()
        cfg = T.RobertaConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                              eos_token_id=tok.eos_token_id, initializer_range=initializer_range, **SMALL, **config)
    model_class(cfg).eval().save_pretrained(d, safe_serialization=True)
    if family == "bert":
        copy_minilm_tokenizer(d)
    else:
        roberta_tokenizer().save_pretrained(d)
    return d
