"""The trace: the released iterates and noisy gradients of a DP-SGD run, with its settings
(docs/trace-format.md), and its site map (`sites`): the flat parameter vector ⇄ the model's named sites; a run kept
as its window sums and a sample of rows instead, `TraceSummary` (`summaries`, docs/summaries.md)."""

from .convention import Convention
from .core import Trace
from .data import BURN_IN, kept_steps
from .files import SCHEMA, SCHEMA_VERSION
from .summaries import TraceSummary, summarize
from .validation import VARIATIONAL_FAMILIES, TraceError

__all__ = [
    "BURN_IN",
    "Convention",
    "SCHEMA",
    "SCHEMA_VERSION",
    "VARIATIONAL_FAMILIES",
    "Trace",
    "TraceError",
    "TraceSummary",
    "kept_steps",
    "summarize",
]
