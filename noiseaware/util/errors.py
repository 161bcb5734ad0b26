"""The two kinds of error noiseaware tells apart: a fit that failed for a statistical reason, and a user error.

A `FitFailure` is a value: a method returns it in place of a posterior (or raises it, and `fit_problems`
turns it into the outcome of the problems it concerns), a study counts it by its `reason`, and it is stored
as plain data (`as_data()` → {"reason": …, "message": …}, `FitFailure.from_data`). Anything else raised while
fitting — a TypeError, an IndexError, an untyped ValueError of some library — is a bug: it propagates and
stops the study with its traceback.

A `UserError` is a marker base for errors that mean the user's input is wrong (a model, a trace, a data or
settings file): the command line prints it as one `error: …` line, never as a bug.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "DIVERGED",
    "FitFailure",
    "FROZEN",
    "NON_FINITE",
    "NO_NOISE",
    "NO_OPTIMUM",
    "UNINFORMATIVE",
    "UserError",
    "VARYING_SETTINGS",
]

NO_OPTIMUM = "no finite optimum"
"""A mode search that found no finite, positive-definite optimum (Laplace)."""
DIVERGED = "sampler diverged"
"""A sampler or a DPVI run whose draws or iterates are not finite (NUTS, the Gibbs samplers, a diverged trace)."""
NON_FINITE = "non-finite posterior"
"""A posterior computed in closed form or by quadrature whose weights or moments are not finite."""
FROZEN = "coordinate never moved"
"""A trace coordinate that never moves after burn-in: its Hessian is not identified."""
NO_NOISE = "no gradient noise"
"""A non-private trace whose gradients are an exact function of φ: the gradient model cannot weigh its steps."""
UNINFORMATIVE = "trace uninformative"
"""A private trace whose DP noise exceeds anything its clipped gradients could show (`checks.clip_reach`) fitted
without the model: only the model's prior could then say where the optimum is."""
VARYING_SETTINGS = "settings vary per step"
"""A trace whose σ_t, C_t or s_t change from step to step (adaptive clipping, a noise schedule, a per-step scale):
the gradient model and the bootstrap's replay need one of each for the run."""


class UserError(Exception):
    """Marker base of the errors that mean the user's input is wrong; the CLI prints them as `error: …`."""


class FitFailure(ValueError):
    """The statistical failure of one problem's fit: `reason`, a short kind (NO_OPTIMUM, DIVERGED, …; a
    plug-in may name its own), and `message`, what happened and what to do.

    A ValueError, so `na.fit` raising it reads as before; a value, so a study stores it as
    `as_data()` and counts it by reason. Equal failures (same type, reason and message) compare equal.
    """

    def __init__(self, reason: str, message: str):
        if not (isinstance(reason, str) and reason and isinstance(message, str)):
            raise TypeError(f"FitFailure(reason, message) takes two strings, a non-empty reason; got {reason!r}")
        super().__init__(message)
        self.reason, self.message = reason, message

    def __reduce__(self):
        """Pickled by its two strings (a study's worker sends its outcomes to the process that counts them)."""
        return type(self), (self.reason, self.message)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and (self.reason, self.message) == (other.reason, other.message)

    def __hash__(self) -> int:
        return hash((type(self), self.reason, self.message))

    def __repr__(self) -> str:
        return f"FitFailure({self.reason!r}, {self.message!r})"

    def as_data(self) -> dict[str, str]:
        """{"reason": …, "message": …}: what a study file stores."""
        return {"reason": self.reason, "message": self.message}

    @classmethod
    def from_data(cls, data: Mapping[str, str]) -> FitFailure:
        """The failure that `as_data` gave."""
        return cls(data["reason"], data["message"])

    def within(self, context: str) -> FitFailure:
        """The same failure, its message prefixed by `context` (e.g. "trace 3")."""
        return type(self)(self.reason, f"{context}: {self.message}")
