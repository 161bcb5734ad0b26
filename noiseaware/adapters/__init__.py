"""Adapters: record a run of another DP-SGD library as a noiseaware trace, with its convention (docs/adapters.md).

    optax        `recording_aggregate`: optax's `differentially_private_aggregate`, recording φ_t and the released
                 G̃_t (divided by the batch's leading dimension) into its state; `trace_of(state, …)`
    jax_privacy  `recording_privatizer`: jax-privacy's i.i.d. Gaussian privatizer, recording likewise; correlated
                 noise (BandMF, any non-identity noising matrix) is refused before any work
    opacus       `OpacusRecorder`: chains onto a `DPOptimizer`'s step hook (after the accountant's), recording θ_t and
                 p.grad after `pre_step`; importable without torch
    d3p          `from_d3p`: arrays of a d3p run, whose gradients are the sum scaled to the population
    tf_privacy   `from_tf_privacy`: arrays of a TF Privacy run clipped per microbatch

Only what the library released (parameters before each step, the noisy normalised gradient, the settings) enters a
trace; never per-example gradients or norms, clean sums, or the data.
"""
