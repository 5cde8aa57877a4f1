"""Size limits, checked before anything is allocated: a file or flag that asks for more is refused in one line
(the model's sizes by ``elmo.config``, input lines by ``elmo.embed_file``, flags by ``elmo.cli.common``, training
settings by ``elmo.training.config``, a vocabulary's softmax by ``elmo.training.softmax``).

Every limit is far above the largest released model (``original-5.5b``: LSTM cells 4,096, projections 512, 2
layers, 2,048 CNN filters, 2 highway layers, 50 characters per token, 93.6 M parameters) and far below what would
exhaust a machine before an error could be raised.
"""

from __future__ import annotations

from numbers import Integral

# ---- a model's shape (options.json / config.json) ----------------------------------------------------------------
MODEL_LIMITS: dict[str, int] = {
    "lstm.dim": 32_768,  # memory cells per LSTM layer
    "lstm.projection_dim": 8_192,  # projected state, the token vector's half
    "lstm.n_layers": 16,  # layers per direction
    "char_cnn.embedding.dim": 4_096,  # one character's embedding
    "char_cnn.filter_width": 64,  # one convolution's width, in characters
    "char_cnn.filter_num": 65_536,  # one convolution's outputs
    "char_cnn.n_filters": 65_536,  # all convolutions' outputs together: the highway width
    "char_cnn.filters": 64,  # convolutions
    "char_cnn.n_highway": 16,  # highway layers
    "char_cnn.max_characters_per_token": 1_024,  # character slots per token
}
MAX_PARAMETERS = 2_000_000_000  # a whole biLM (8 GB in float32); the largest released one has 93.6 M
MAX_SOFTMAX_PARAMETERS = 2_000_000_000  # a language model's softmax, words x (projection + 1): 8 GB in float32, and
# as much again for Adagrad (bilm-tf's 793,471 words x 513: 407 M)
# ---- readouts of the layers (ScalarMix, ComponentProjection, Elmo) ---------------------------------------------
MAX_MIX_LAYERS = 1_024  # layers one scalar mix weighs (a biLM has 2 L + 1 components at most: 33)
MAX_READOUT_DIM = 65_536  # a component's width or a projection's output width
MAX_READOUTS = 1_024  # Elmo's num_output_representations (the paper uses one or two)
MAX_CONFIG_BYTES = 1 << 20  # an options.json / config.json file (a model's takes under a kilobyte)

# ---- input text (elmo embed) -------------------------------------------------------------------------------------
MAX_TOKENS_PER_LINE = 100_000  # one sentence; a longer line is refused, naming it (split it into sentences)
MAX_LINE_BYTES = 64 * 1024 * 1024  # one line's bytes, read before it is split: a longer line is refused

# ---- command-line numbers ----------------------------------------------------------------------------------------
MAX_BATCH_SIZE = 65_536  # sentences per batch (elmo embed), rows per process (elmo train)
MAX_TRAINING_BATCH_TOKENS = 1_000_000  # rows x unroll steps of one process's batch (bilm-tf's: 128 x 20 = 2,560);
# its character ids alone take 800 bytes a token, both directions
MAX_COUNT = 10**12  # steps, sentences, neighbours and other counts
MAX_LABELS = 100_000  # a task's labels (tags or classes)
MAX_HEAD_HIDDEN = 8_192  # a task head's BiLSTM size (`elmo task train --hidden`; the default is 128)
MAX_HEAD_LEARNING_RATE = 1e6  # far beyond any useful rate; near float32's limit Adam's arithmetic overflows
MAX_WORD_VECTOR_DIM = 65_536  # `elmo probe word2vec --dim` (the default is 256): its matrices are words x dim
MAX_MINUTES = 10**7  # about 19 years



def is_digits(text: str) -> bool:
    """True for a non-empty run of ASCII digits: text ``int`` reads as a whole number (``str.isdigit`` also takes "²",
    which ``int`` refuses). How text from a file, a flag or the environment is checked before ``int``."""
    return text.isascii() and text.isdigit()


def is_whole(value: object, low: int = 1, high: int | None = None) -> bool:
    """True for a whole number (an ``int`` or a NumPy integer, not a bool) from ``low`` to ``high`` (None: no upper
    bound): how the Python API checks a count or a size before using it."""
    if not isinstance(value, Integral) or isinstance(value, bool):
        return False
    return low <= value and (high is None or value <= high)
