"""The priors the rate estimator may be asked for by name (``--prior``, flow parameters).

Apart from ``models.estimation.change_rate`` so that the command line can list them without
importing
scipy; what each does, and what stands in where one cannot be fitted, is there
(``estimate_from_moments``, ``FALLBACKS``).
"""

from __future__ import annotations

from typing import Literal

PriorName = Literal["mixture", "empirical", "none"]
PRIOR_NAMES: tuple[PriorName, ...] = ("mixture", "empirical", "none")
