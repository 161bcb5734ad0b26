"""The trace checks (docs/diagnostics.md): does a trace meet what the gradient model assumes? `diagnose` returns a
typed report (`diagnosis`) of the tests and rules computed from the trace alone (`statistics`). The layer sits
beside `inference`: it reads traces and is read by the fits, the studies, the figures and the command line.

    report = na.diagnose(trace)       # TraceDiagnosis: verdict, findings, per-coordinate flags and statistics
    print(report)                     # the verdict, the findings and the verdict per θ coordinate
"""

from .diagnosis import (
    CHECKS,
    LEVEL,
    MIN_STEPS,
    Finding,
    TraceCheckError,
    TraceDiagnosis,
    diagnose,
    diagnose_if_long_enough,
)

__all__ = [
    "CHECKS",
    "LEVEL",
    "MIN_STEPS",
    "Finding",
    "TraceCheckError",
    "TraceDiagnosis",
    "diagnose",
    "diagnose_if_long_enough",
]
