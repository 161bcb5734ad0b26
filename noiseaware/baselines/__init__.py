"""Baselines (docs/baselines.md): built from the same trace as the noise-aware posterior (naive last iterate,
DPVIm), or from their own sufficient-statistic release at the same ε (Bernstein & Sheldon 2018, 2019).

Each module is imported by name (`noiseaware.baselines.dpvim`, …); their methods are registered in
`noiseaware.methods`.
"""
