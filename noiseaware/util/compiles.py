"""How many programs XLA compiled during a call, and how long that took (jax.monitoring's events).

with counting_compiles() as compiles:
    ...
compiles.programs, compiles.seconds    # programs lowered (each a jit of new shapes or static arguments),
                                       # seconds in XLA's backend compiler (0 for a program the
                                       # persistent compilation cache supplied)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import jax

__all__ = ["Compiles", "counting_compiles"]

LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILED = "/jax/core/compile/backend_compile_duration"


@dataclass
class Compiles:
    """programs: programs lowered for compilation; seconds: time in the backend compiler."""

    programs: int = 0
    seconds: float = 0.0

    def __call__(self, event: str, duration: float, **_) -> None:
        if event == LOWERED:
            self.programs += 1
        elif event == COMPILED:
            self.seconds += duration


@contextlib.contextmanager
def counting_compiles():
    """Count the compilations of the block (module doc); the listener is removed on exit."""
    compiles = Compiles()
    jax.monitoring.register_event_duration_secs_listener(compiles)
    try:
        yield compiles
    finally:
        jax.monitoring.unregister_event_duration_listener(compiles)
