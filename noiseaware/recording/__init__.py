"""Recording DPVI: the numpyro model contract, the site map and DP-SGD on the ELBO → Trace."""

from .config import DPVISettings
from .contract import ModelError
from .dpvi import record_dpvi, record_dpvi_batch
from .optimizer import Optimizer
from .sparse import SparseFeatures

__all__ = ["DPVISettings", "ModelError", "Optimizer", "SparseFeatures", "record_dpvi", "record_dpvi_batch"]
