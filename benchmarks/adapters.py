"""Adapters benchmark: DPVI of a logistic regression run in optax and jax-privacy, recorded through the adapters.

    python benchmarks/adapters.py [--simulations 100 --steps 3000 --seed 0 --libraries optax,jax-privacy]

For each of M simulated data sets of `logistic-3d` at N = 2 000 (θ ~ N(0, I₃)), the user-side loop of
docs/adapters.md (per-example gradients of the negative ELBO's share, fixed-size batches of B = 100, plain SGD on
the batch mean, ρ preconditioned by s_ρ = 10 through the parameterisation ρ' = ρ/s_ρ, recorded with grad_scale) runs
at σ = 10.29 (the Poisson accountant's σ for ε = 1 at q = 0.05, T = 3 000; these batches of B of N drawn without
replacement each step spend ε = 5.19 at it under replace-one, the ε reported) with
  optax        `recording_aggregate` (optax's `differentially_private_aggregate`, divides by B), and
  jax-privacy  the clipped sum / B from `jax_privacy.clipping.clipped_grad(normalize_by=B)` and
               `recording_privatizer` (σ = B·stddev/C);
all M runs of a library in one vmapped program. Each trace (recorded with the model's site map) is fitted by the
exact route three times, as a foreign trace alone, with the user's model (`fit_batch(..., model=MODEL)`: the model's
own prior on the VI optimum, docs/method.md §2.3), and alone with the scale rows tied to the mean rows
(`prior="stein"`, §2.11), and its 90 % intervals for φ* = (μ*, ρ*) are checked against the
non-private VI optimum φ̂ of the same data (`simulation_facts`: Adam, no noise, no clipping). Reported per library
and coordinate: coverage alone, with the model and alone under "stein" (target 0.9 ± 3 se), and how often the
trace checks flag the same traces read with a wrong convention: as sums (divisor 1 instead of B), and, for a run
whose batches are padded to 1.5 B (optax then divides by 1.5 B), as divided by the expected batch q·N = B.
Results: benchmarks/results/adapters.json with the command, seed and machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _common import machine, read_results, results_path, write_json

import noiseaware as na
from noiseaware.adapters import jax_privacy as jp_adapter
from noiseaware.adapters import optax as optax_adapter
from noiseaware.trace import Convention
from noiseaware.tuning.facts import simulation_facts

N, B, C, LR, NOMINAL_EPSILON, DELTA = 2000, 100, 2.0, 0.05, 1.0, 1e-5
"""The runs' σ is the Poisson accountant's for ε = NOMINAL_EPSILON (the noise level these results have kept since
they began); their fixed-size batches spend more at it, the ε reported."""
S_RHO = 10.0
"""The run optimises ρ' = ρ / s_ρ (preconditioning): ρ's gradient is s_ρ × larger, its step s_ρ² × larger."""
GRAD_SCALE = np.array([1.0] * 3 + [S_RHO] * 3)
PADDED = 150
"""Rows a padded batch is filled to: optax's aggregate divides by it, not by B."""
_BASE = na.models.get("logistic-3d")
MODEL = na.models.from_numpyro(
    _BASE.model, n_examples=N, covariates=_BASE.covariates, name="logistic-3d", **_BASE.dpvi_settings
)
"""The user's model as numpyro sees it (θ ~ N(0, I₃), y ~ Bernoulli(sigmoid(x·θ))) at the benchmark's N."""


def loss(phi, x, y, eps):
    """Example i's share of the negative ELBO at one draw ε (d,): −log p(y | x, θ) + |θ|²/(2N) − Σ log sd / N,
    with φ = (μ, ρ' = ρ / s_ρ)."""
    sd = jax.nn.softplus(S_RHO * phi["rho_scaled"])
    theta = phi["mu"] + sd * eps
    return jax.nn.softplus(-(2 * y - 1) * (theta @ x)) + 0.5 * jnp.sum(theta**2) / N - jnp.sum(jnp.log(sd)) / N


PER_EXAMPLE = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0, None))
PHI0 = {"mu": jnp.zeros(3), "rho_scaled": jnp.full(3, -2.0 / S_RHO)}


def optax_run(X, y, key, *, sigma, steps, padded):
    """One optax run; per-example gradients of `padded` rows (zeros beyond B) when padded > B."""
    opt = optax.chain(
        optax_adapter.recording_aggregate(C, sigma, jax.random.fold_in(key, 1), steps=steps), optax.sgd(LR)
    )

    def step(carry, k):
        phi, state = carry
        k_batch, k_eps = jax.random.split(k)
        batch = jax.random.choice(k_batch, N, (B,), replace=False)
        grads = PER_EXAMPLE(phi, X[batch], y[batch], jax.random.normal(k_eps, (3,)))
        grads = jax.tree.map(lambda g: jnp.concatenate([g, jnp.zeros((padded - B, *g.shape[1:]), g.dtype)]), grads)
        updates, state = opt.update(grads, state, phi)
        return (optax.apply_updates(phi, updates), state), None

    (phi, state), _ = jax.lax.scan(step, (PHI0, opt.init(PHI0)), jax.random.split(key, steps))
    return phi, state


def jax_privacy_run(X, y, key, *, sigma, steps):
    """One jax-privacy run: clipped sum / B by clipped_grad, i.i.d. noise of sd σC/B by the recording privatizer."""
    from jax_privacy import clipping

    clipped = clipping.clipped_grad(
        lambda phi, xy, eps: loss(phi, xy[:3], xy[3], eps), l2_clip_norm=C, normalize_by=B, keep_batch_dim=False
    )
    opt = optax.chain(
        jp_adapter.recording_privatizer(
            stddev=sigma * C / B, prng_key=jax.random.fold_in(key, 1), steps=steps, normalize_by=B
        ),
        optax.sgd(LR),
    )
    xy = jnp.concatenate([X, y[:, None]], axis=1)

    def step(carry, k):
        phi, state = carry
        k_batch, k_eps = jax.random.split(k)
        batch = jax.random.choice(k_batch, N, (B,), replace=False)
        grads = clipped(phi, xy[batch], jax.random.normal(k_eps, (3,)))
        updates, state = opt.update(grads, state, phi)
        return (optax.apply_updates(phi, updates), state), None

    (phi, state), _ = jax.lax.scan(step, (PHI0, opt.init(PHI0)), jax.random.split(key, steps))
    return phi, state


def traces(library: str, data, keys, *, sigma, steps, padded=B) -> list[na.Trace]:
    """The M runs of `library` on data (M, …), vmapped, as traces through the adapter."""
    X, y = jnp.asarray(data["X"]), jnp.asarray(data["y"])
    if library == "optax":
        run = jax.jit(jax.vmap(lambda a, b, k: optax_run(a, b, k, sigma=sigma, steps=steps, padded=padded)))
    else:
        run = jax.jit(jax.vmap(lambda a, b, k: jax_privacy_run(a, b, k, sigma=sigma, steps=steps)))
    phis, states = run(X, y, keys)
    out = []
    for m in range(len(keys)):
        state, phi = jax.tree.map(lambda a, m=m: a[m], (states, phis))
        common = {
            "sampling_rate": B / N, "n_examples": N, "final_params": phi, "grad_scale": GRAD_SCALE,
            "learning_rate": LR * GRAD_SCALE**2 / B, "sites": MODEL.site_map.sites,
        }  # fmt: skip
        if library == "optax":
            trace = optax_adapter.trace_of(state, clip=C, noise_multiplier=sigma, **common)
        else:
            trace = jp_adapter.trace_of(state, clip=C, stddev=sigma * C / B, normalize_by=B, sampling="fixed",
                                        neighbouring="replace", **common)  # fmt: skip
        out.append(trace)
    return out


def covered(runs: list[na.Trace], optimum: np.ndarray, key, model=None, prior="default") -> np.ndarray:
    """(M, P) booleans: whether run m's exact-route 90 % interval for coordinate j of φ* covers φ̂_mj (fitted with
    the model's own prior where `model` is given, under `prior`)."""
    posts = na.fit_batch(runs, method="exact", key=key, checks="off", on_error="skip", model=model, prior=prior)
    inside = []
    for post, phi_hat in zip(posts, optimum):
        if post is None:  # a failed fit counts as not covering
            inside.append(np.zeros_like(phi_hat, bool))
            continue
        low, high = post.optimum_interval(0.9)
        inside.append((low <= phi_hat) & (phi_hat <= high))
    return np.array(inside)


def fired(runs: list[na.Trace]) -> np.ndarray:
    """(M,) booleans: whether any trace check fires on run m."""
    return np.array([not na.diagnose(run).ok for run in runs])


def as_read(run: na.Trace, convention: Convention, divisor: float) -> na.Trace:
    """The run's released grads (its sums over `divisor`) read under `convention` with no batch sizes."""
    return dataclasses.replace(run, grads=run.grads / divisor, convention=convention, batch_sizes=None)


def simulated(simulations: int, seed: int, steps: int) -> tuple[jax.Array, dict, np.ndarray, float]:
    """The benchmark's M data sets of `logistic-3d` at N (X (M, N, 3), y (M, N)), from the key of `seed` (returned,
    for the runs' keys), their non-private VI optima φ̂ (M, 6) by `simulation_facts`, and σ for ε, δ at T steps."""
    bm = MODEL
    key = jax.random.key(seed)
    truth, data = jax.vmap(bm.simulate)(jax.random.split(key, simulations))
    settings = bm.dpvi_settings
    arrays = {k: np.asarray(v) for k, v in data.items()}
    facts = simulation_facts(
        bm, np.asarray(truth), arrays, key=jax.random.fold_in(key, 1), init=settings["init"],
        mc_draws=settings["mc_draws"], transforms=settings["transforms"],
    )  # fmt: skip
    return key, data, facts.optimum, na.privacy.noise_multiplier(NOMINAL_EPSILON, DELTA, B / N, steps)


def arguments(description: str) -> argparse.Namespace:
    """The command line both adapters benchmarks take: --simulations, --steps, --seed, --out."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--simulations", type=int, default=100)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--libraries", default="optax,jax-privacy", help="adapters.py only: the libraries to run")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "adapters.json")
    return parser.parse_args()


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    command = (
        f"python benchmarks/adapters.py --simulations {args.simulations} --steps {args.steps} --seed {args.seed} "
        f"--libraries {args.libraries}"
    )
    key, data, optimum, sigma = simulated(args.simulations, args.seed, args.steps)
    results = read_results(args.out)
    keys = jax.random.split(jax.random.fold_in(key, 2), args.simulations)
    for library in args.libraries.split(","):
        start = time.perf_counter()
        runs = traces(library, data, keys, sigma=sigma, steps=args.steps)
        record_seconds = time.perf_counter() - start
        coverage = covered(runs, optimum, jax.random.fold_in(key, 3)).mean(axis=0)
        with_model = covered(runs, optimum, jax.random.fold_in(key, 3), MODEL).mean(axis=0)
        stein = covered(runs, optimum, jax.random.fold_in(key, 3), prior="stein").mean(axis=0)
        entry = {
            "coverage_90": [round(float(c), 3) for c in coverage],
            "coverage_90_model": [round(float(c), 3) for c in with_model],
            "coverage_90_stein": [round(float(c), 3) for c in stein],
            "param_names": list(runs[0].param_names),
            "flagged_as_recorded": float(fired(runs).mean()),
            "flagged_read_as_sums": float(fired([as_read(r, Convention(), B) for r in runs]).mean()),
        }
        if library == "optax":
            padded = traces(library, data, keys, sigma=sigma, steps=args.steps, padded=PADDED)
            entry["flagged_padded_read_as_expected_batch"] = float(
                fired([as_read(r, Convention(normaliser="expected-batch"), PADDED / B) for r in padded]).mean()
            )
        entry |= {
            "record_seconds": round(record_seconds, 1),
            "M": args.simulations, "T": args.steps, "N": N, "B": B, "sigma": round(sigma, 4),
            "epsilon": na.epsilon_spent(sigma, DELTA, B / N, args.steps, sampling="fixed", dataset_size=N),
            "seed": args.seed, "command": command, "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(),
        }  # fmt: skip
        se = np.sqrt(0.9 * 0.1 / args.simulations)
        print(f"\n{library}: 90 % coverage of φ̂ per coordinate (target 0.9 ± {3 * se:.2f})")
        print(f"  {'coordinate':14s} {'alone':>6s} {'with the model':>15s} {'alone, Stein':>13s}")
        columns = (entry["param_names"], entry["coverage_90"], entry["coverage_90_model"], entry["coverage_90_stein"])
        for name, c, m, s in zip(*columns):
            print(f"  {name:14s} {c:6.2f} {m:15.2f} {s:13.2f}")
        print({k: v for k, v in entry.items() if k.startswith("flagged")})
        results[library] = entry
        write_json(args.out, results)
    print(f"wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
