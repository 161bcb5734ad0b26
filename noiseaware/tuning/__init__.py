"""Settings that need no data: tune and check DP-SGD settings on prior-predictive simulations (docs/tuning.md)."""

from .curve import PrivacyUtilityCurve, privacy_utility
from .preflight import preflight
from .preflight_report import PreflightReport, PreflightWarning
from .presets import tuned_epsilons, tuned_model, tuned_preset
from .search import tune
from .space import SearchSpace
from .tuned import SettingsFileError, TunedSettings

__all__ = [
    "PreflightReport",
    "PreflightWarning",
    "PrivacyUtilityCurve",
    "SearchSpace",
    "SettingsFileError",
    "TunedSettings",
    "preflight",
    "privacy_utility",
    "tune",
    "tuned_epsilons",
    "tuned_model",
    "tuned_preset",
]
