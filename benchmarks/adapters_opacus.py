"""Adapters benchmark, Opacus: the DPVI of `adapters.py` trained with Opacus's `PrivacyEngine`, recorded by
`OpacusRecorder` (needs torch and Opacus: run it with the `make test-adapters` environment).

    .venv-adapters/bin/python benchmarks/adapters_opacus.py [--simulations 100 --steps 3000 --seed 0]

The same M simulated data sets of `logistic-3d` at N = 2 000, non-private optima φ̂, σ for ε = 1 and settings as
`adapters.py` (imported from it), but the loop is Opacus's: `make_private` with its default Poisson sampling at
q = B/N (B = 100 expected), `loss_reduction="mean"` (the noisy sum divided by the expected batch B), functorch
per-sample gradients, plain SGD at lr 0.05, ρ preconditioned by s_ρ = 10 through ρ' = ρ/s_ρ. The runs are
sequential (torch, one thread, float64). Each trace is fitted by the exact route; reported per coordinate: how
often the 90 % interval for φ* = (μ*, ρ*) covers φ̂ (target 0.9 ± 3 se), how often the trace checks fire as
recorded, read as sums (divisor 1 instead of B), and read as divided by the realised batch size |B_t|: a trace
refuses that under Poisson sampling (|B_t| is private), and with the sampling misdeclared "fixed" the divisor is
off by |B_t|/B = 1 ± 0.1 only. Results: benchmarks/results/adapters.json, key "opacus", written after every
`CHUNK` runs; a rerun with the same settings resumes an unfinished entry.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from importlib.metadata import version

import jax
import numpy as np
import opacus
import torch
from _common import machine, read_results, results_path, write_json
from adapters import GRAD_SCALE, LR, NOMINAL_EPSILON, S_RHO, B, C, N, arguments, as_read, covered, fired, simulated

import noiseaware as na
from noiseaware.adapters.opacus import OpacusRecorder
from noiseaware.trace import Convention

CHUNK = 10
"""Runs between two writes of the results file."""
D = 3
SHOWN = ("coverage_90", "flagged_as_recorded", "flagged_read_as_sums", "refused_read_as_realised_batch",
         "flagged_read_as_realised_batch_fixed", "warned_at_recording", "record_seconds", "fit_seconds")  # fmt: skip
"""What each chunk prints."""


class MeanFieldLogistic(torch.nn.Module):
    """φ' = (μ, ρ' = ρ/s_ρ) (D each, float64); forward(rows) (B, 2D + 1), each row (x, y, ε) with the step's draw ε
    repeated → each example's share of the negative ELBO: −log p(y | x, θ) + |θ|²/(2N) − Σ log sd / N,
    θ = μ + softplus(ρ) ⊙ ε (adapters.loss). ε travels in the input because Opacus's functorch per-sample
    gradients run a copy of the module made at the first backward pass: an attribute would stay at step 1's draw."""

    def __init__(self):
        super().__init__()
        self.mu = torch.nn.Parameter(torch.zeros(D, dtype=torch.float64))
        self.rho_scaled = torch.nn.Parameter(torch.full((D,), -2.0 / S_RHO, dtype=torch.float64))

    def forward(self, rows):
        x, y, eps = rows[..., :D], rows[..., D], rows[..., D + 1 :]
        sd = torch.nn.functional.softplus(S_RHO * self.rho_scaled)
        theta = self.mu + sd * eps
        nll = torch.nn.functional.softplus(-(2 * y - 1) * (x * theta).sum(-1))
        return nll + 0.5 * (theta**2).sum(-1) / N - torch.log(sd).sum() / N


def opacus_run(xy: np.ndarray, *, sigma: float, steps: int, seed: int) -> tuple[na.Trace, np.ndarray, list[str]]:
    """One Opacus run on xy (N, D + 1): its trace through `OpacusRecorder`, the realised batch sizes |B_t| (T,) (for
    the misreading only: they are not DP-released), and the warnings raised while the trace was made."""
    torch.manual_seed(seed)
    data = torch.utils.data.TensorDataset(torch.tensor(xy, dtype=torch.float64))
    module = MeanFieldLogistic()
    module, optimizer, loader = opacus.PrivacyEngine().make_private(
        module=module, optimizer=torch.optim.SGD(module.parameters(), lr=LR),
        data_loader=torch.utils.data.DataLoader(data, batch_size=B), noise_multiplier=sigma, max_grad_norm=C,
        grad_sample_mode="functorch",
    )  # fmt: skip
    recorder = OpacusRecorder(optimizer)
    sizes = []
    while len(sizes) < steps:
        for (batch,) in loader:
            eps = torch.randn(D, dtype=torch.float64).expand(len(batch), D)
            optimizer.zero_grad()
            module(torch.cat([batch, eps], dim=1)).mean().backward()
            optimizer.step()
            sizes.append(len(batch))
            if len(sizes) == steps:
                break
    final = torch.cat([module._module.mu, module._module.rho_scaled]).detach().numpy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = recorder.trace(
            n_examples=N, grad_scale=GRAD_SCALE, learning_rate=LR * GRAD_SCALE**2 / B, final_params=final
        )
    return trace, np.array(sizes), [str(w.message) for w in caught]


def as_realised(run: na.Trace, sizes: np.ndarray, sampling: str) -> na.Trace:
    """The run's released grads (its sums over B) read as divided by the realised batch sizes |B_t| (T,)."""
    convention = Convention(normaliser="realised-batch", sampling=sampling)
    return dataclasses.replace(run, grads=run.grads * (sizes / B)[:, None], convention=convention, batch_sizes=sizes)


def refused(run: na.Trace, sizes: np.ndarray) -> bool:
    """Whether the trace refuses the realised-batch reading under the Poisson sampling Opacus used."""
    try:
        as_realised(run, sizes, "poisson")
    except na.TraceError:
        return True
    return False


def chunk_rows(runs: list[na.Trace], sizes: list[np.ndarray], optimum: np.ndarray, key) -> dict[str, list]:
    """Per run of a chunk: coverage (P booleans) and whether the checks fire as recorded and under each misreading."""
    return {
        "covered": covered(runs, optimum, key).astype(int).tolist(),
        "flagged_as_recorded": fired(runs).astype(int).tolist(),
        "flagged_read_as_sums": fired([as_read(r, Convention(), B) for r in runs]).astype(int).tolist(),
        "refused_read_as_realised_batch": [int(refused(r, s)) for r, s in zip(runs, sizes)],
        "flagged_read_as_realised_batch_fixed": fired([as_realised(r, s, "fixed") for r, s in zip(runs, sizes)])
        .astype(int)
        .tolist(),
    }


def summary(per_run: dict[str, list]) -> dict:
    """The shares over the runs done so far."""
    out = {"coverage_90": [round(float(c), 3) for c in np.mean(per_run["covered"], axis=0)]}
    for name, values in per_run.items():
        if name.startswith(("flagged", "refused")):
            out[name] = round(float(np.mean(values)), 3)
    out["warned_at_recording"] = round(float(np.mean([bool(w) for w in per_run["warnings"]])), 3)
    out["record_seconds"] = round(float(np.sum(per_run["seconds"])), 1)
    out["fit_seconds"] = round(float(np.sum(per_run["fit_seconds"])), 1)
    return out


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    torch.set_num_threads(1)
    command = (
        f"python benchmarks/adapters_opacus.py --simulations {args.simulations} --steps {args.steps} --seed {args.seed}"
    )
    start = time.perf_counter()
    key, data, optimum, sigma = simulated(args.simulations, args.seed, args.steps)
    xy = np.concatenate([np.asarray(data["X"]), np.asarray(data["y"])[..., None]], axis=-1)
    settings = {"M": args.simulations, "T": args.steps, "N": N, "B": B, "sigma": round(sigma, 4),
                "epsilon": NOMINAL_EPSILON, "seed": args.seed, "command": command}  # fmt: skip
    previous = read_results(args.out).get("opacus", {})
    resume = all(previous.get(k) == v for k, v in settings.items()) and previous.get("done", 0) < args.simulations
    per_run = previous["per_run"] if resume else {"seconds": [], "warnings": [], "fit_seconds": []}
    done = previous["done"] if resume else 0
    print(f"σ = {sigma:.4f}; setup {time.perf_counter() - start:.0f} s; {done} runs done before")
    for first in range(done, args.simulations, CHUNK):
        stop = min(first + CHUNK, args.simulations)
        runs, sizes = [], []
        for m in range(first, stop):
            tic = time.perf_counter()
            seed = int(np.random.SeedSequence([args.seed, m]).generate_state(1)[0])
            trace, realised, caught = opacus_run(xy[m], sigma=sigma, steps=args.steps, seed=seed)
            per_run["seconds"].append(round(time.perf_counter() - tic, 2))
            per_run["warnings"].append(caught)
            runs.append(trace)
            sizes.append(realised)
        tic = time.perf_counter()
        rows = chunk_rows(runs, sizes, optimum[first:stop], jax.random.fold_in(jax.random.fold_in(key, 3), first))
        for name, values in rows.items():
            per_run.setdefault(name, []).extend(values)
        per_run["fit_seconds"].append(round(time.perf_counter() - tic, 2))
        entry = {"param_names": list(runs[0].param_names), **summary(per_run), "done": stop, **settings,
                 "date": time.strftime("%Y-%m-%d %H:%M"),
                 "machine": machine() | {"torch": torch.__version__, "opacus": version("opacus")},
                 "per_run": per_run}  # fmt: skip
        results = read_results(args.out)  # re-read: keep what other scripts wrote meanwhile
        results["opacus"] = entry
        write_json(args.out, results)
        print(f"{stop} runs ({time.perf_counter() - start:.0f} s):", {k: v for k, v in entry.items() if k in SHOWN})
    se = np.sqrt(0.9 * 0.1 / args.simulations)
    print(f"opacus: 90 % coverage of φ̂ per coordinate (target 0.9 ± {3 * se:.2f}); wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
