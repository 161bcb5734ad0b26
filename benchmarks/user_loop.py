"""A user's own DPVI loop, fitted from the trace alone: coverage of the mean-field VI optimum when the coordinates are
strongly coupled.

    python benchmarks/user_loop.py [--simulations 60 --steps 4000 --clip 10 --clip-count-share 0.01 --seed 7]

The model is a Gaussian regression y = θ₀ + θ₁·x + e, e ~ N(0, 1), x ~ N(3, 1), θ ~ N(0, 10² I), whose posterior
correlation of θ₀ and θ₁ is about −0.95. For each of M simulated data sets (θ ~ N((1, 0.5), I), N = 10 000) the loop
a user writes with optax runs mean-field DPVI: per-example gradients of the negative ELBO's share at one draw ε,
fixed-size batches of B = 100 without replacement, `recording_aggregate` (clip C, noise σ for ε = 1 at δ = 10⁻⁵,
divides by B; with a clip count share r > 0, ε is split between the gradient and the released count of clipped
examples by `na.privacy.split_noise_multiplier`), plain SGD on the batch mean at learning rate 0.05, ρ preconditioned
by s_ρ = 10. The true VI optimum is
in closed form (μ* the posterior mean, sd*_j = Λ_jj^(−½) for the posterior precision Λ). Each trace is fitted by the
exact route under each prior (default, "stein"), without the model; reported per coordinate: the 90 % intervals'
coverage of φ* (target 0.9 ± 3 se) and median width, how often the trace checks fire, and how often the clipping check
does, with the median fraction of examples clipped it measured (per-example gradient norms here are about 2.6 at the
optimum: clip 10 is above them, clip 2 near them).
Results: benchmarks/results/user_loop.json (--out) with the command, seed and machine.
"""

from __future__ import annotations

import argparse
import time
import warnings
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _common import machine, write_json

import noiseaware as na
from noiseaware.adapters import optax as optax_adapter
from noiseaware.util.notes import FitWarning

N, B, LR, S_RHO, EPSILON, DELTA, PRIOR_SD = 10_000, 100, 0.05, 10.0, 1.0, 1e-5, 10.0
PRIORS = ("default", "stein")


def loss(phi, x, y, eps):
    """Example i's share of the negative ELBO at one draw ε (2,): −log p(y | x, θ) + |θ|²/(2·10²·N) − Σ log sd / N,
    with φ = (μ, ρ' = ρ / s_ρ)."""
    sd = jax.nn.softplus(S_RHO * phi["rho_scaled"])
    theta = phi["mu"] + sd * eps
    return (
        0.5 * (y - theta[0] - theta[1] * x) ** 2 + 0.5 * jnp.sum(theta**2) / PRIOR_SD**2 / N - jnp.sum(jnp.log(sd)) / N
    )


PER_EXAMPLE = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0, None))


def run(x, y, key, *, clip, sigma, count_sigma, steps):
    """One run of the user's loop on data (x, y) (N,): its final φ and the recording aggregate's state (count_sigma:
    the clipped count's noise sd σ_b, None for no count)."""
    start = {"mu": jnp.zeros(2), "rho_scaled": jnp.full(2, -4.0 / S_RHO)}
    aggregate = optax_adapter.recording_aggregate(
        clip, sigma, jax.random.fold_in(key, 1), steps=steps, count_noise_multiplier=count_sigma
    )
    opt = optax.chain(aggregate, optax.sgd(LR))

    def step(carry, k):
        phi, state = carry
        k_batch, k_eps = jax.random.split(k)
        batch = jax.random.choice(k_batch, N, (B,), replace=False)
        updates, state = opt.update(PER_EXAMPLE(phi, x[batch], y[batch], jax.random.normal(k_eps, (2,))), state, phi)
        return (optax.apply_updates(phi, updates), state), None

    (phi, state), _ = jax.lax.scan(step, (start, opt.init(start)), jax.random.split(key, steps))
    return phi, state


def simulated(simulations: int, seed: int):
    """x, y (M, N) and the closed-form mean-field VI optima φ* (M, 4) = (μ*, ρ*) of the M data sets."""
    k_x, k_theta, k_e = jax.random.split(jax.random.key(seed), 3)
    theta = jax.random.normal(k_theta, (simulations, 2)) + jnp.array([1.0, 0.5])
    x = 3.0 + jax.random.normal(k_x, (simulations, N))
    y = theta[:, :1] + theta[:, 1:] * x + jax.random.normal(k_e, (simulations, N))
    design = np.stack([np.ones((simulations, N)), np.asarray(x, np.float64)], axis=-1)
    precision = np.einsum("mni,mnj->mij", design, design) + np.eye(2) / PRIOR_SD**2
    mean = np.linalg.solve(precision, np.einsum("mni,mn->mi", design, np.asarray(y, np.float64))[..., None])[..., 0]
    rho = np.log(np.expm1(np.diagonal(precision, axis1=1, axis2=2) ** -0.5))
    return x, y, np.concatenate([mean, rho], axis=1)


def traces(x, y, key, *, clip: float, steps: int, share: float) -> list[na.Trace]:
    """The M runs, vmapped in one program, as traces through the optax adapter (share: of ε on the clipped count)."""
    sigma, count_sigma = na.privacy.noise_multiplier(EPSILON, DELTA, B / N, steps), None
    if share > 0:
        sigma, count_sigma = na.privacy.split_noise_multiplier(sigma, share)
    keys = jax.random.split(key, len(x))
    one = partial(run, clip=clip, sigma=sigma, count_sigma=count_sigma, steps=steps)
    phis, states = jax.jit(jax.vmap(one))(x, y, keys)
    scale = np.array([1.0, 1.0, S_RHO, S_RHO])
    out = []
    for m in range(len(x)):
        state, phi = jax.tree.map(lambda a, m=m: a[m], (states, phis))
        out.append(
            optax_adapter.trace_of(
                state, clip=clip, noise_multiplier=sigma, sampling_rate=B / N, n_examples=N, final_params=phi,
                grad_scale=scale, learning_rate=LR * scale**2 / B, epsilon=EPSILON, delta=DELTA,
            )
        )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=60)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--clip", type=float, default=10.0)
    parser.add_argument("--clip-count-share", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "user_loop.json")
    args = parser.parse_args()
    command = (
        f"python benchmarks/user_loop.py --simulations {args.simulations} --steps {args.steps} --clip {args.clip:g} "
        f"--clip-count-share {args.clip_count_share:g} --seed {args.seed}"
    )
    x, y, optimum = simulated(args.simulations, args.seed)
    start = time.perf_counter()
    print(f"recording {args.simulations} runs of {args.steps} steps …", flush=True)
    key = jax.random.fold_in(jax.random.key(args.seed), 1)
    runs = traces(x, y, key, clip=args.clip, steps=args.steps, share=args.clip_count_share)
    entry = {"record_seconds": round(time.perf_counter() - start, 1), "param_names": list(runs[0].param_names)}
    for prior in PRIORS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FitWarning)
            posts = na.fit_batch(runs, "exact", key=3, checks="off", on_error="skip", prior=prior)
        low, high = (np.array(bounds) for bounds in zip(*(post.optimum_interval(0.9) for post in posts)))
        entry[prior] = {
            "coverage_90": np.round(((low <= optimum) & (optimum <= high)).mean(axis=0), 3).tolist(),
            "median_width": np.round(np.median(high - low, axis=0), 4).tolist(),
        }
    reports = [na.diagnose(r) for r in runs]
    entry["flagged"] = float(np.mean([not report.ok for report in reports]))
    if args.clip_count_share > 0:
        entry["clipping_fired"] = float(np.mean(["clipping" in report.fired for report in reports]))
        entry["median_clipped_fraction"] = round(float(np.median([r.clipping.fraction for r in reports])), 4)
        widths = [r.clipping.upper - r.clipping.lower for r in reports]
        entry["median_clipped_interval_width"] = round(float(np.median(widths)), 4)
    se = np.sqrt(0.09 / args.simulations)
    print(f"90 % coverage of φ* per coordinate (target 0.9 ± {3 * se:.2f}); median width in brackets")
    print(f"  {'coordinate':14s}" + "".join(f"{prior:>22s}" for prior in PRIORS))
    for j, name in enumerate(entry["param_names"]):
        cells = "".join(f"{entry[p]['coverage_90'][j]:>12.2f} ({entry[p]['median_width'][j]:7.3g})" for p in PRIORS)
        print(f"  {name:14s}{cells}")
    print(f"any trace check fires on {entry['flagged']:.2f} of the runs")
    if "clipping_fired" in entry:
        print(
            f"the clipping check fires on {entry['clipping_fired']:.2f} of the runs (median fraction clipped after "
            f"the burn-in {entry['median_clipped_fraction']:.1%}, its 90 % interval "
            f"{entry['median_clipped_interval_width']:.1%} wide)"
        )
    entry |= {
        "M": args.simulations, "T": args.steps, "N": N, "B": B, "C": args.clip, "epsilon": EPSILON, "seed": args.seed,
        "clip_count_share": args.clip_count_share,
        "command": command, "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(),
    }  # fmt: skip
    write_json(args.out, entry)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
