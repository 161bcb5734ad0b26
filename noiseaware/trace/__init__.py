"""The trace: the released iterates and noisy gradients of a DP-SGD run, with its settings
(docs/trace-format.md), and its site map (`sites`): the flat parameter vector ⇄ the model's named sites; a run kept
as its window sums and a sample of rows instead, `WindowedTrace` (`windowed`, docs/windowed.md). Both are a `Run`
(`run`): their `RunSettings`, their `Moments` after a burn-in (`moments`), their rows where they kept them."""

from ..util.deprecation import deprecated_names
from .convention import Convention
from .core import Trace
from .data import BURN_IN
from .files import SCHEMA, SCHEMA_VERSION
from .moments import Moments
from .run import Run, RunSettings, kept_steps
from .validation import VARIATIONAL_FAMILIES, TraceError
from .windowed import WindowedTrace, windowed

__all__ = [
    "BURN_IN",
    "Convention",
    "Moments",
    "Run",
    "RunSettings",
    "SCHEMA",
    "SCHEMA_VERSION",
    "VARIATIONAL_FAMILIES",
    "Trace",
    "TraceError",
    "WindowedTrace",
    "kept_steps",
    "windowed",
]

DEPRECATED = {"TraceSummary": ("WindowedTrace", WindowedTrace), "summarize": ("windowed", windowed)}
"""Old public names kept for one release: old name → (new name, object)."""

__getattr__ = deprecated_names(__name__, DEPRECATED)
