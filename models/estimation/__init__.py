"""Change-rate estimation: per-page Poisson rates from fetch history, smoothed toward each
page's group (the mixture prior), with a fallback chain where a prior cannot be fitted. Pure
numpy/scipy.

Pure: no Prefect, httpx, DuckDB or I/O; imports only models.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "estimate_from_moments": "change_rate",
    "estimate_from_stats": "change_rate",
    "estimate_rates": "change_rate",
    "naive_rate": "change_rate",
    "improved_rate": "change_rate",
    "FALLBACKS": "change_rate",
    "MIN_RATE": "change_rate",
    "MAX_RATE": "change_rate",
    "RateEstimates": "rate_data",
    "PageMoments": "rate_data",
    "IntervalStats": "rate_data",
    "GammaPrior": "rate_data",
    "EstimationInputError": "rate_data",
    "MixturePrior": "mixture_prior",
    "fit_mixture_prior": "mixture_prior",
    "PRIOR_NAMES": "prior_names",
    "PriorName": "prior_names",
    "generate_web": "synthetic",
    "generate_history": "synthetic",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
