"""Recording DPVI: the numpyro model contract, the site map and DP-SGD on the ELBO → Trace."""

from .contract import ModelError
from .dpvi import record_dpvi, record_dpvi_batch

__all__ = ["ModelError", "record_dpvi", "record_dpvi_batch"]
