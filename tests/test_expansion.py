"""The gradient model's extra terms (inference/expansion.py): the closed-form integral over their coefficients
against a brute-force Gaussian marginal, the paper's model as the diagonal special case, and the coverage of φ*
on traces with a coupled Hessian, where the diagonal model is overconfident."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ou import OPTIMUM, ou_trace, ou_traces
from scipy import stats

import noiseaware as na
from noiseaware.inference.exact import fit_exact_batch
from noiseaware.inference.expansion import set_log_likelihoods, term_statistics
from noiseaware.inference.gradient_model import Prior, gradient_model, log_likelihood
from noiseaware.methods import ExactOptions


def _kept(trace, burn_in=0.2):
    start = int(burn_in * trace.steps)
    return np.asarray(trace.params[start:], np.float64), np.asarray(trace.grads[start:], np.float64)


@pytest.mark.parametrize("term_set", ["curved", "coupled", "second-order"])
def test_integrated_likelihood_equals_the_gaussian_marginal(term_set):
    """Σ over t of row j with γ_j ~ N(0, diag(d)²) integrated out = log N(G_j − q a (φ̃_j − δ'); 0, vI + q² X D² Xᵀ),
    evaluated directly on the (T', p) design."""
    trace = ou_trace(steps=150, seed=4)
    params, grads = _kept(trace)
    model = gradient_model(trace)
    stats, q, n_params = model.stats, model.sampling_rate, params.shape[1]
    slope = np.array([30.0, 300.0, 15.0, 4.0])
    (terms,) = term_statistics(params, grads, q, slope, 2, (term_set,), 0.7, 1.3)
    phi = params - params.mean(axis=0)
    spread = np.sqrt(np.mean(phi**2, axis=0))
    offset, hessian, var = np.array([0.01, -0.02, 0.03, 0.0]), np.array([35.0, 410.0, 18.0, 6.0]), model.noise_var * 1.7
    with jax.enable_x64(True):
        got = np.asarray(set_log_likelihoods(stats, (terms,), offset, q * hessian, var, q))[0] - terms.log_prior
    for j in range(n_params):
        columns, sds = [], []
        if term_set in ("coupled", "second-order"):
            for k in range(n_params):
                if k != j:
                    columns.append(phi[:, k])
                    sds.append(0.7 * np.sqrt(slope[j] * slope[k]))
        products = [(j, j)]
        if term_set == "second-order":
            products += [(0, 0), (1, 1), (0, 1)]
            products = list(dict.fromkeys(products))
        if term_set != "coupled":
            for k, m in products:
                column = phi[:, k] * phi[:, m]
                columns.append(column - column.mean())
                sds.append(1.3 * slope[j] * spread[j] / (spread[k] * spread[m]))
        design = np.column_stack(columns) * np.asarray(sds)
        covariance = var[j] * np.eye(len(phi)) + q**2 * design @ design.T
        residual = grads[:, j] - q * hessian[j] * (phi[:, j] - offset[j])
        expected = stats_logpdf(residual, covariance)
        assert got[j] == pytest.approx(expected, rel=1e-9, abs=1e-6), (term_set, j)


def stats_logpdf(x, covariance):
    return stats.multivariate_normal(np.zeros(len(x)), covariance).logpdf(x)


def test_the_diagonal_set_is_the_papers_model():
    """Prior(terms=("diagonal",)) builds no term statistics; a diagonal set among the candidates adds nothing."""
    trace = ou_trace(seed=5)
    assert gradient_model(trace).terms == ()
    model = gradient_model(trace)
    params, grads = _kept(trace)
    diagonal = term_statistics(params, grads, model.sampling_rate, np.ones(4), 2, ("diagonal",), 1.0, 1.0)
    optimum, hessian, extra = np.asarray(OPTIMUM) + 0.01, np.array([40.0, 400.0, 20.0, 5.0]), np.full(4, 0.3)
    with jax.enable_x64(True):
        plain = log_likelihood(model, optimum, hessian, extra)
        mixed = log_likelihood(dataclasses.replace(model, terms=diagonal), optimum, hessian, extra)
    np.testing.assert_allclose(mixed, plain, rtol=1e-12)


def test_prior_terms_are_validated_and_other_routes_refuse_them():
    with pytest.raises(ValueError, match="term sets"):
        Prior(terms=("diagonal", "cubic"))
    with pytest.raises(ValueError, match="term sets"):
        Prior(terms="coupled")
    with pytest.raises(ValueError, match="exact route only"):
        na.fit(ou_trace(seed=6), "laplace", key=0, prior="expanded", checks="off")


def _coverage(traces, prior):
    models = [gradient_model(trace, prior) for trace in traces]
    results = fit_exact_batch(
        models, keys=jax.random.split(jax.random.key(0), len(models)), options=ExactOptions(draws=2000)
    )
    draws = np.stack([r.optimum[0] for r in results])
    low, high = np.quantile(draws, [0.05, 0.95], axis=1)
    return ((np.asarray(OPTIMUM) > low) & (np.asarray(OPTIMUM) < high)).mean(axis=0), results


def test_a_coupled_hessian_is_found_and_its_intervals_cover():
    """OU traces whose first two coordinates are coupled (A_01 = 0.9·A_00): the diagonal model's 90 % intervals of
    φ*_0, φ*_1 cover 0.76 (pooled); the expanded model puts ≥ 0.9 on the coupled sets there and covers at 90 %
    within 3.5 binomial se, while the uncoupled coordinates keep the diagonal set."""
    hessian = np.diag([400.0, 400.0, 20.0, 5.0])
    hessian[0, 1] = hessian[1, 0] = 360.0
    traces = ou_traces(100, steps=4000, hessian=hessian, seed=3)
    diagonal, _ = _coverage(traces, "default")
    expanded, results = _coverage(traces, "expanded")
    limit = 3.5 * np.sqrt(0.09 / 200)
    assert diagonal[:2].mean() < 0.9 - limit
    assert abs(expanded[:2].mean() - 0.9) < limit, expanded
    probability = np.mean([r.diagnostics.term_probability for r in results], axis=0)
    sets = results[0].diagnostics.term_sets
    coupled = [sets.index("coupled"), sets.index("second-order")]
    assert np.all(probability[coupled][:, :2].sum(axis=0) > 0.9)
    assert np.all(probability[coupled][:, 2:].sum(axis=0) < 0.2)


def test_the_posterior_reports_its_terms():
    trace = ou_traces(
        1, steps=4000, hessian=np.array([[400.0, 360, 0, 0], [360, 400, 0, 0], [0, 0, 20, 0], [0, 0, 0, 5]]), seed=8
    )[0]
    post = na.fit(trace, "exact", key=0, prior="expanded", checks="off", draws=500)
    table = post.gradient_terms()
    assert list(table.columns) == ["diagonal", "curved", "coupled", "second-order"]
    np.testing.assert_allclose(table.sum(axis=1), 1.0, rtol=1e-9)
    assert "gradient terms beyond the diagonal" in post.describe()
    assert na.fit(trace, "exact", key=0, checks="off", draws=500).gradient_terms() is None
    assert jnp.all(jnp.isfinite(post.optimum_chains))
