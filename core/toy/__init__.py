"""The instrumented toy transformer: a whole decoder-only LM you can read in one file (``model.py``),
its byte tokenizer, loading and tracing (``run.py``), training (``train.py``), the word-order demo
and its figures. Imports only ``core.engine``.
"""

from core.toy.model import POSITIONS, ToyConfig, ToyTransformer
from core.toy.run import ASSETS, CONFIG_FILE, LOSS_FILE, WEIGHTS_FILE, facts_of, full_logits, load_loss_curve, load_trained, trace_toy, wrap
from core.toy.tokenizer import ByteTokenizer
from core.toy.word_order import WORD_ORDER_SETTINGS, word_order_demo

__all__ = [
           "ASSETS",
           "CONFIG_FILE",
           "LOSS_FILE",
           "POSITIONS",
           "WEIGHTS_FILE",
           "WORD_ORDER_SETTINGS",
           "ByteTokenizer",
           "ToyConfig",
           "ToyTransformer",
           "facts_of",
           "full_logits",
           "load_loss_curve",
           "load_trained",
           "trace_toy",
           "word_order_demo",
           "wrap",
]
