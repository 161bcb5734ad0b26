"""Site maps: named transforms, their log-Jacobians, the presets, and SiteMap flatten/constrain round trips."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from messages import mentions
from numpyro.distributions import constraints

from noiseaware.trace.sites import (
    AdditiveLogRatioTransform,
    SiteMap,
    SiteSpec,
    choose_transform_name,
    default_transform_name,
    transform_from_name,
)

# name → (unconstrained test point, a check that the constrained value lies in the support)
SCALAR_TRANSFORMS = {
    "identity": lambda y: np.isfinite(y),
    "exp": lambda y: y > 0,
    "softplus": lambda y: y > 0,
    "sigmoid": lambda y: (0 < y) & (y < 1),
    "interval(-1.5,2.5)": lambda y: (-1.5 < y) & (y < 2.5),
    "greater_than(1.5)": lambda y: y > 1.5,
    "less_than(-0.5)": lambda y: y < -0.5,
}
SIMPLEX_TRANSFORMS = ("alr", "stick_breaking")
U_SCALAR = np.array([-2.3, -0.4, 0.0, 0.7, 1.9], np.float32)
U_VECTOR = np.array([0.3, -1.2, 0.8], np.float32)  # K − 1 = 3, a 4-simplex


@pytest.mark.parametrize("name", sorted(SCALAR_TRANSFORMS))
def test_scalar_transform_round_trip_and_jacobian(name):
    t = transform_from_name(name)
    y = np.asarray(t(jnp.asarray(U_SCALAR)))
    assert y.shape == U_SCALAR.shape
    assert np.all(SCALAR_TRANSFORMS[name](y)), (name, y)
    np.testing.assert_allclose(np.asarray(t.inv(jnp.asarray(y))), U_SCALAR, rtol=1e-5, atol=1e-5)
    u = jnp.asarray(U_SCALAR)
    derivative = jax.vmap(jax.grad(lambda v: t(v)))(u)
    expected = np.log(np.abs(np.asarray(derivative, np.float64)))
    got = np.asarray(t.log_abs_det_jacobian(u, t(u)))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=name)


def test_named_scalar_transforms_are_the_documented_maps():
    u = jnp.asarray(U_SCALAR)
    np.testing.assert_allclose(transform_from_name("identity")(u), U_SCALAR)
    np.testing.assert_allclose(transform_from_name("exp")(u), np.exp(U_SCALAR), rtol=1e-6)
    np.testing.assert_allclose(transform_from_name("softplus")(u), np.log1p(np.exp(U_SCALAR)), rtol=1e-6)
    sig = 1 / (1 + np.exp(-U_SCALAR))
    np.testing.assert_allclose(transform_from_name("sigmoid")(u), sig, rtol=1e-6)
    np.testing.assert_allclose(transform_from_name("interval(-1.5,2.5)")(u), -1.5 + 4.0 * sig, rtol=1e-6)
    np.testing.assert_allclose(transform_from_name("interval( -1.5 , 2.5 )")(u), -1.5 + 4.0 * sig, rtol=1e-6)
    np.testing.assert_allclose(transform_from_name("greater_than(1.5)")(u), 1.5 + np.exp(U_SCALAR), rtol=1e-6)
    np.testing.assert_allclose(transform_from_name("less_than(-0.5)")(u), -0.5 - np.exp(U_SCALAR), rtol=1e-6)


@pytest.mark.parametrize("name", SIMPLEX_TRANSFORMS)
def test_simplex_transform_round_trip_and_jacobian(name):
    t = transform_from_name(name)
    assert t.forward_shape((3,)) == (4,) and t.inverse_shape((4,)) == (3,)

    @jax.jit
    def check(u):
        p = t(u)
        # the map onto the first K − 1 coordinates is a bijection of R^{K−1}: its Jacobian is square
        jac = jax.jacobian(lambda v: t(v)[:-1])(u)
        batch = jnp.stack([u, -u, 2 * u])
        return p, t.inv(p), jac, t.log_abs_det_jacobian(u, p), batch, t.inv(t(batch))

    p, back, jac, logdet, batch, batch_back = check(jnp.asarray(U_VECTOR))
    assert p.shape == (4,)
    assert np.all(np.asarray(p) > 0)
    np.testing.assert_allclose(float(jnp.sum(p)), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(back), U_VECTOR, rtol=1e-5, atol=1e-5)
    assert jac.shape == (3, 3)
    sign, expected = np.linalg.slogdet(np.asarray(jac, np.float64))
    assert sign != 0
    np.testing.assert_allclose(float(logdet), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(batch_back), np.asarray(batch), rtol=1e-5, atol=1e-5)


def test_alr_is_softmax_with_a_zero_and_its_inverse_is_log_ratios():
    t = AdditiveLogRatioTransform()
    u = np.array([[0.3, -1.2], [2.0, 0.5]], np.float32)
    p = np.asarray(t(jnp.asarray(u)))
    padded = np.concatenate([u, np.zeros((2, 1), np.float32)], axis=-1)
    expected = np.exp(padded) / np.exp(padded).sum(-1, keepdims=True)
    np.testing.assert_allclose(p, expected, rtol=1e-6)
    q = np.array([0.2, 0.5, 0.3], np.float32)
    np.testing.assert_allclose(np.asarray(t.inv(jnp.asarray(q))), np.log(q[:2] / q[2]), rtol=1e-6)
    # log|det| = Σ_k log p_k (K terms)
    np.testing.assert_allclose(
        float(t.log_abs_det_jacobian(jnp.asarray(u[0]), jnp.asarray(p[0]))), np.log(p[0]).sum(), rtol=1e-6
    )
    assert transform_from_name("alr") == AdditiveLogRatioTransform()


SUPPORTS = [
    # (support, numpyro preset name, research preset name)
    (constraints.real, "identity", "identity"),
    (constraints.real_vector, "identity", "identity"),
    (constraints.real_matrix, "identity", "identity"),
    (constraints.positive, "exp", "softplus"),
    (constraints.independent(constraints.positive, 1), "exp", "softplus"),
    (constraints.greater_than(0.0), "exp", "softplus"),
    (constraints.softplus_positive, "softplus", "softplus"),
    (constraints.unit_interval, "sigmoid", "sigmoid"),
    (constraints.interval(0.0, 2.0), "interval(0.0,2.0)", "interval(0.0,2.0)"),
    (constraints.open_interval(-1.0, 1.0), "interval(-1.0,1.0)", "interval(-1.0,1.0)"),
    (constraints.greater_than(1.0), "greater_than(1.0)", "greater_than(1.0)"),
    (constraints.less_than(2.0), "less_than(2.0)", "less_than(2.0)"),
    (constraints.simplex, "stick_breaking", "alr"),
]


@pytest.mark.parametrize("support,numpyro_name,research_name", SUPPORTS, ids=[str(s[0]) for s in SUPPORTS])
def test_default_transform_name_per_preset(support, numpyro_name, research_name):
    assert default_transform_name(support) == numpyro_name
    assert default_transform_name(support, "numpyro") == numpyro_name
    assert default_transform_name(support, "research") == research_name
    assert choose_transform_name("site", support, "research") == research_name
    # every default name can be rebuilt into a transform
    transform_from_name(numpyro_name)
    transform_from_name(research_name)


@pytest.mark.parametrize(
    "support",
    [
        constraints.corr_cholesky,
        constraints.lower_cholesky,
        constraints.positive_definite,
        constraints.ordered_vector,
        constraints.positive_ordered_vector,
        constraints.nonnegative_integer,
        constraints.boolean,
        constraints.sphere,
    ],
    ids=str,
)
def test_unsupported_supports_raise(support):
    with pytest.raises(ValueError) as info:
        default_transform_name(support)
    mentions(info, str(support))
    with pytest.raises(ValueError) as info:
        default_transform_name(support, "research")
    mentions(info, str(support))


@pytest.mark.parametrize(
    "name", ["logit", "Softplus", "interval(2,1)", "interval(1)", "greater_than(1,2)", "less_than()", "", "alr2"]
)
def test_unknown_transform_names_raise(name):
    with pytest.raises(ValueError) as info:
        transform_from_name(name)
    mentions(info, repr(name))


def test_choose_transform_name_presets_and_overrides():
    assert choose_transform_name("a", constraints.positive, {"a": "exp"}) == "exp"
    assert choose_transform_name("a", constraints.positive, {"b": "exp"}) == "exp"  # '*' defaults to numpyro
    assert choose_transform_name("a", constraints.positive, {"*": "research"}) == "softplus"
    assert choose_transform_name("p", constraints.simplex, {"p": "alr"}) == "alr"
    with pytest.raises(ValueError) as info:
        choose_transform_name("a", constraints.positive, "paper")
    mentions(info, "'paper'")
    with pytest.raises(ValueError) as info:
        choose_transform_name("p", constraints.simplex, {"p": "softplus"})
    mentions(info, "'softplus'", "p")
    with pytest.raises(ValueError) as info:
        choose_transform_name("a", constraints.positive, {"a": "alr"})
    mentions(info, "'alr'", "a")
    with pytest.raises(ValueError) as info:
        choose_transform_name("a", constraints.positive, {"a": "cube"})
    mentions(info, "'cube'")


MIXED = SiteMap(
    (
        SiteSpec("scale", (), "softplus"),
        SiteSpec("w", (3,), "identity"),
        SiteSpec("p", (4,), "alr"),
        SiteSpec("q", (3,), "stick_breaking"),
        SiteSpec("m", (2, 2), "identity"),
        SiteSpec("r", (), "interval(0.0,2.0)"),
    )
)
MIXED_DIM = 1 + 3 + 3 + 2 + 4 + 1


def test_site_map_layout_and_names():
    assert MIXED.dim == MIXED_DIM
    assert MIXED.names == ("scale", "w", "p", "q", "m", "r")
    assert [s.unconstrained_shape for s in MIXED.sites] == [(), (3,), (3,), (2,), (2, 2), ()]
    assert [s.size for s in MIXED.sites] == [1, 3, 3, 2, 4, 1]
    labels = ("scale", "w[0]", "w[1]", "w[2]", "p[0]", "p[1]", "p[2]", "q[0]", "q[1]",
              "m[0,0]", "m[0,1]", "m[1,0]", "m[1,1]", "r")  # fmt: skip
    assert MIXED.theta_names() == labels
    assert MIXED.param_names() == tuple(f"mu:{x}" for x in labels) + tuple(f"rho:{x}" for x in labels)


def test_site_map_unflatten_is_slicing_in_site_order():
    theta = jnp.arange(MIXED_DIM, dtype=jnp.float32) / 10
    parts = MIXED.unflatten(theta)
    assert list(parts) == ["scale", "w", "p", "q", "m", "r"]
    np.testing.assert_array_equal(parts["scale"], theta[0])
    np.testing.assert_array_equal(parts["w"], theta[1:4])
    np.testing.assert_array_equal(parts["p"], theta[4:7])
    np.testing.assert_array_equal(parts["q"], theta[7:9])
    np.testing.assert_array_equal(parts["m"], theta[9:13].reshape(2, 2))
    np.testing.assert_array_equal(parts["r"], theta[13])
    batched = MIXED.unflatten(jnp.stack([theta, 2 * theta]))
    assert batched["m"].shape == (2, 2, 2) and batched["scale"].shape == (2,) and batched["p"].shape == (2, 3)


def test_site_map_constrain_unconstrain_round_trip_and_jacobian():
    constrain, unconstrain = jax.jit(MIXED.constrain), jax.jit(MIXED.unconstrain)
    theta = jnp.asarray(np.random.default_rng(0).normal(size=MIXED_DIM), jnp.float32)
    values = constrain(theta)
    assert values["scale"].shape == () and float(values["scale"]) > 0
    np.testing.assert_allclose(float(values["scale"]), np.log1p(np.exp(float(theta[0]))), rtol=1e-6)
    assert values["p"].shape == (4,) and values["q"].shape == (3,) and values["m"].shape == (2, 2)
    np.testing.assert_allclose(float(values["p"].sum()), 1.0, rtol=1e-6)
    np.testing.assert_allclose(float(values["q"].sum()), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(values["w"], theta[1:4])
    np.testing.assert_array_equal(values["m"], theta[9:13].reshape(2, 2))
    assert 0 < float(values["r"]) < 2
    np.testing.assert_allclose(np.asarray(unconstrain(values)), np.asarray(theta), rtol=1e-5, atol=1e-5)
    # batched
    thetas = jnp.stack([theta, -theta, 0.5 * theta])
    batch_values = constrain(thetas)
    assert batch_values["m"].shape == (3, 2, 2) and batch_values["p"].shape == (3, 4)
    np.testing.assert_allclose(np.asarray(unconstrain(batch_values)), np.asarray(thetas), rtol=1e-5, atol=1e-5)

    # the site map's log-Jacobian is log|det| of the Jacobian of θ ↦ (constrained values without the
    # simplexes' last entry), a square d × d matrix
    def flat_constrained(th):
        v = MIXED.constrain(th)
        return jnp.concatenate([v["scale"][None], v["w"], v["p"][:-1], v["q"][:-1], v["m"].ravel(), v["r"][None]])

    jac = jax.jit(jax.jacobian(flat_constrained))(theta)
    assert jac.shape == (MIXED_DIM, MIXED_DIM)
    _, logdet = jnp.linalg.slogdet(jac)
    got = float(jax.jit(MIXED.log_abs_det_jacobian)(theta))
    np.testing.assert_allclose(got, float(logdet), rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-4.0, 4.0, allow_nan=False, width=32), min_size=MIXED_DIM, max_size=MIXED_DIM))
def test_site_map_round_trip_property(values):
    theta = jnp.asarray(values, jnp.float32)
    back, logdet = _round_trip(theta)
    np.testing.assert_allclose(np.asarray(back), np.asarray(theta), rtol=1e-3, atol=2e-3)
    assert np.isfinite(float(logdet))


@jax.jit
def _round_trip(theta):
    return MIXED.unconstrain(MIXED.constrain(theta)), MIXED.log_abs_det_jacobian(theta)


def test_pull_back_equals_reverse_mode_through_the_constraint():
    """J_T(u)ᵀ g formed once per θ (diagonal or unrolled matrix) equals jax.vjp through the map, per example."""
    theta = jnp.linspace(-1.5, 1.2, MIXED_DIM, dtype=jnp.float32)
    unconstrained = MIXED.unflatten(theta)
    values, vjp = jax.vjp(MIXED.constrain_sites, unconstrained)
    keys = jax.random.split(jax.random.key(3), len(values))
    grads = {name: jax.random.normal(k, (5,) + v.shape) for k, (name, v) in zip(keys, values.items())}
    expected = jax.vmap(lambda g: vjp(g)[0])(grads)
    got = MIXED.pull_back(unconstrained)(grads)
    assert set(got) == set(expected)
    for name in expected:
        assert got[name].shape == expected[name].shape
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(expected[name]), rtol=1e-5, atol=1e-6)
