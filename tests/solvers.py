"""The routes' solvers called directly, as the routes call them: a gradient model as a batch of one."""

from noiseaware.util.errors import FitFailure
from noiseaware.util.keys import as_key


def fit_one(solve, model, key, options):
    """solve (`fit_exact_batch`, `fit_laplace_batch` or `fit_nuts_batch`) on [model] with key and the route's options
    object (e.g. `ExactOptions(draws=100)`): its Draws, or its FitFailure raised."""
    (result,) = solve([model], keys=as_key(key)[None], options=options)
    if isinstance(result, FitFailure):
        raise result
    return result
