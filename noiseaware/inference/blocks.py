"""Fits of many coordinates in blocks: the diagonal gradient model's rows are independent given the trace, so a route
solves P coordinates B at a time (memory O(B), not O(P)), each block padded to B coordinates so that every block
runs one compiled program. Block b draws with fold_in(key, b); a model of P ≤ B is one block, solved as it always was.
Where jax has several devices (GPUs, or CPU devices made with XLA_FLAGS=--xla_force_host_platform_device_count=n),
block b runs on device b mod n, one thread per device: the same draws as on one device. A block's solve sets what it
needs (the exact route its float64); other thread-local jax contexts of the caller do not reach the threads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np

from ..util.errors import FitFailure
from ..util.progress import Progress, progress_bar
from .draws import Draws
from .gradient_model import GradientModel, select_rows

__all__ = ["BLOCK", "solve_in_blocks"]

BLOCK = 2048
"""Coordinates per block: the exact route's grid over them (96 × 32 nodes per coordinate) takes about 50 MB; measured
on P = 3.3·10⁴ (400 draws), 0.26 ms per coordinate against 0.29 at 1 024, 4 096 and 8 192."""

Solve = Callable[..., list[Draws | FitFailure]]


def solve_in_blocks(
    solve: Solve,
    models: Sequence[GradientModel],
    *,
    keys,
    options,
    block: int,
    progress: Progress = False,
    devices: int | None = None,
) -> list[Draws | FitFailure]:
    """solve(models, keys=…, options=…) over blocks of `block` coordinates, joined into one Draws per model (a model
    whose solve fails in any block gets that block's FitFailure). Models with extra terms are solved whole. devices:
    how many of jax's devices share the blocks (None: all of them; module doc)."""
    size = models[0].n_params
    if size <= block or any(model.terms for model in models):
        return solve(models, keys=keys, options=options)
    starts = range(0, size, block)
    used = jax.devices()[: len(jax.devices()) if devices is None else devices]

    def one(number: int) -> list[Draws | FitFailure]:
        start = starts[number]
        rows = np.minimum(np.arange(start, start + block), size - 1)  # the last block repeats its last row
        kept = min(block, size - start)
        block_keys = jax.vmap(lambda key: jax.random.fold_in(key, number))(keys)
        chosen = [select_rows(model, rows) for model in models]
        if len(used) == 1:  # the caller's own default device stands
            results = solve(chosen, keys=block_keys, options=options)
        else:
            with jax.default_device(used[number % len(used)]):
                results = solve(chosen, keys=block_keys, options=options)
        return [r if isinstance(r, FitFailure) else _first_columns(r, block, kept) for r in results]

    title = f"{size} coordinates in blocks of {block}" + (f" on {len(used)} devices" if len(used) > 1 else "")
    with progress_bar(len(starts), title, progress, unit="block") as advance:
        if len(used) == 1:
            blocks = [(one(number), advance(1))[0] for number in range(len(starts))]
        else:
            with ThreadPoolExecutor(len(used)) as pool:
                futures = [pool.submit(one, number) for number in range(len(starts))]
                try:
                    blocks = [(future.result(), advance(1))[0] for future in futures]
                except BaseException:  # an error or an interrupt: the blocks not started are not run
                    for future in futures:
                        future.cancel()
                    raise
    return [_joined([results[m] for results in blocks]) for m in range(len(models))]


def _first_columns(draws: Draws, block: int, kept: int) -> Draws:
    """The draws and per-coordinate diagnostics (arrays whose last axis is the block's) of the first `kept`
    coordinates."""

    def cut(value):
        return value[..., :kept] if isinstance(value, np.ndarray) and value.shape[-1:] == (block,) else value

    fields = {f.name: cut(getattr(draws.diagnostics, f.name)) for f in dataclasses.fields(draws.diagnostics)}
    extra = None if draws.extra_noise is None else cut(draws.extra_noise)
    return Draws(cut(draws.optimum), cut(draws.hessian), extra, type(draws.diagnostics)(**fields))


def _joined(outcomes: list[Draws | FitFailure]) -> Draws | FitFailure:
    """The blocks' draws side by side along P (scalars from the first block); the first FitFailure if any."""
    failure = next((outcome for outcome in outcomes if isinstance(outcome, FitFailure)), None)
    if failure is not None:
        return failure
    first = outcomes[0]
    sizes = {o.optimum.shape[-1] for o in outcomes}

    def join(name: str, value):
        if not (isinstance(value, np.ndarray) and value.shape[-1] in sizes):
            return value
        return np.concatenate([np.asarray(getattr(o.diagnostics, name)) for o in outcomes], axis=-1)

    fields = {f.name: join(f.name, getattr(first.diagnostics, f.name)) for f in dataclasses.fields(first.diagnostics)}
    return Draws(
        np.concatenate([o.optimum for o in outcomes], axis=-1),
        np.concatenate([o.hessian for o in outcomes], axis=-1),
        None if first.extra_noise is None else np.concatenate([o.extra_noise for o in outcomes], axis=-1),
        type(first.diagnostics)(**fields),
    )
