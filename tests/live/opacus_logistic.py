"""What the live Opacus tests share (import it after `pytest.importorskip("torch")`): a mean-field DPVI of the
logistic-3d model as a torch module, its simulated data as a DataLoader, and the training loop that draws one ε per
step for the whole batch."""

import numpy as np
import torch

import noiseaware as na

D = 3
"""The logistic-3d model's θ dimension."""


class MeanFieldLogistic(torch.nn.Module):
    """φ = (μ, ρ'), ρ = rho_scale·ρ' (ρ starts at −2); forward(rows) (B, 2D + 1), rows (x, y, ε) with the step's draw
    ε repeated → each example's share of the negative ELBO over n examples. ε travels in the input: Opacus's
    functorch per-sample gradients run a copy of the module made at the first backward pass, so an attribute would
    stay at step 1's draw."""

    def __init__(self, n: int, rho_scale: float = 1.0):
        super().__init__()
        self.n, self.rho_scale = n, rho_scale
        self.mu = torch.nn.Parameter(torch.zeros(D, dtype=torch.float64))
        self.rho = torch.nn.Parameter(torch.full((D,), -2.0 / rho_scale, dtype=torch.float64))

    def forward(self, rows):
        x, y, eps = rows[..., :D], rows[..., D], rows[..., D + 1 :]
        sd = torch.nn.functional.softplus(self.rho_scale * self.rho)
        theta = self.mu + sd * eps
        nll = torch.nn.functional.softplus(-(2 * y - 1) * (x * theta).sum(-1))
        return nll + 0.5 * (theta**2).sum(-1) / self.n - torch.log(sd).sum() / self.n


def simulated_loader(n: int, batch: int) -> tuple[na.models.BenchmarkModel, dict, torch.utils.data.DataLoader]:
    """logistic-3d at n examples, seed 0's simulated data, and its rows (x, y) in batches of `batch`."""
    bm = na.models.get("logistic-3d")
    bm = na.models.from_numpyro(bm.model, n_examples=n, covariates=bm.covariates, **bm.dpvi_settings)
    _, data = bm.simulate(0)
    xy = torch.tensor(np.column_stack([np.asarray(data["X"]), np.asarray(data["y"])]), dtype=torch.float64)
    return bm, data, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xy), batch_size=batch)


def train(module, optimizer, loader, steps: int) -> None:
    """`steps` optimizer steps over the loader's batches, each with one draw ε ~ N(0, I_D) for its whole batch."""
    done = 0
    while done < steps:
        for (batch,) in loader:
            eps = torch.randn(D, dtype=torch.float64).expand(len(batch), D)
            optimizer.zero_grad()
            module(torch.cat([batch, eps], dim=1)).mean().backward()
            optimizer.step()
            done += 1
            if done == steps:
                return
