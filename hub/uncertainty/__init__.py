"""How sure a prediction is, kept in the model card and applied by ``attnhub predict``.

- :mod:`~hub.uncertainty.calibration`: temperature scaling, expected calibration error, the trust score,
  ``attnhub calibrate``; :func:`~hub.uncertainty.calibration.choose_temperature` is the one rule that decides the
  temperature a card keeps, at the end of training and in ``calibrate`` alike.
- :mod:`~hub.uncertainty.conformal`: a card's ``calibration`` (a classifier's temperature, a regression's Mondrian
  split conformal intervals) and the interval columns of ``predict``.
- :mod:`~hub.uncertainty.cross_conformal`: intervals from cross-fitted residuals when the validation split is small.
- :mod:`~hub.uncertainty.ood`: out-of-distribution scores, their threshold and the statistics' sidecar.

Nothing is imported here until :func:`fit_card` runs, so that ``predict`` loads only the modules it uses.
"""
from __future__ import annotations

from typing import Any

FITTERS = ("calibration", "ood", "cross_conformal")


def fit_card(name: str, what: str = "calibration", **kwargs: Any) -> dict[str, Any]:
    """Fit one uncertainty section of the tag or run folder ``name`` into its card (weights untouched); returns it.

    ``what``: ``"calibration"`` (a classifier's temperature or a regression's intervals, on the validation split:
    :func:`hub.uncertainty.conformal.fit_card`), ``"ood"`` (the OOD scores: :func:`hub.uncertainty.ood.fit_card`) or
    ``"cross_conformal"`` (intervals on cross-fitted residuals: :func:`hub.uncertainty.cross_conformal.fit_card`).
    ``kwargs`` go to that function (e.g. ``data_overrides``, ``progress``, ``rate``, ``runs``)."""
    from hub.errors import HubError

    if what == "calibration":
        from hub.uncertainty.conformal import fit_card as fit
    elif what == "ood":
        from hub.uncertainty.ood import fit_card as fit
    elif what == "cross_conformal":
        from hub.uncertainty.cross_conformal import fit_card as fit
    else:
        raise HubError(f"fit_card fits one of {list(FITTERS)}, not {what!r}")
    return fit(name, **kwargs)
