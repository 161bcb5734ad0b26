"""The older name of `windowing` (`summarizing`, `summary_of`, `SummaryState`, `summary_state`), for one release."""

from ..util.deprecation import deprecated_names
from . import windowing

__getattr__ = deprecated_names(
    __name__,
    {
        "summarizing": ("noiseaware.adapters.windowing.windowing", windowing.windowing),
        "summary_of": ("noiseaware.adapters.windowing.windowed_of", windowing.windowed_of),
        "SummaryState": ("noiseaware.adapters.windowing.WindowingState", windowing.WindowingState),
        "summary_state": ("noiseaware.adapters.windowing.windowing_state", windowing.windowing_state),
    },
)
