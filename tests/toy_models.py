"""Small numpyro models shared by the tests."""

import numpyro
import numpyro.distributions as dist


def normal_mean(x=None, n_examples=None):
    """μ ~ N(0, 1); x_i ~ N(μ, 1): mean-field VI is exact, q = N(Σx/(N+1), 1/(N+1))."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(mu, 1.0), obs=x)
