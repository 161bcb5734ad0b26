"""Three routes to the posterior of the gradient model (docs/method.md §2): exact quadrature, Laplace, NUTS.

Every route takes a `GradientModel` (noiseaware.inference.gradient_model) and returns `Draws`: K draws of the
unknowns per chain. Routes never change the model; they only differ in how they explore it.
"""
