"""Curve fits for sensitivity analyses: logistic regression by IRLS (numpy only) and ordinary least squares,
each with a pointwise 95% confidence band on a grid of factor values."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from evalfleet.analysis.stats import Z95, normal_two_sided_p


@dataclass
class CurveFit:
    model: str  # "logistic" | "quasi_logistic" | "linear"
    intercept: float
    slope: float  # per unit of the factor
    slope_se: float
    slope_ci: tuple[float, float]
    slope_p: float
    converged: bool
    n: int
    grid: list[float] = field(default_factory=list)
    curve: list[float] = field(default_factory=list)
    band_lower: list[float] = field(default_factory=list)
    band_upper: list[float] = field(default_factory=list)
    note: str | None = None

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "intercept": _finite(self.intercept),
            "slope": _finite(self.slope),
            "slope_se": _finite(self.slope_se),
            "slope_ci": [_finite(self.slope_ci[0]), _finite(self.slope_ci[1])],
            "slope_p": _finite(self.slope_p),
            "converged": self.converged,
            "n": self.n,
            "note": self.note,
            "grid": self.grid,
            "curve": self.curve,
            "band_lower": self.band_lower,
            "band_upper": self.band_upper,
        }


def _finite(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def _sigmoid(eta: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(eta, -40.0, 40.0)))


def logistic_fit(
    x: np.ndarray | list[float],
    y: np.ndarray | list[float],
    *,
    grid_points: int = 60,
    quasi: bool = False,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> CurveFit | None:
    """Fit P(y=1) = sigmoid(a + b·x) by iteratively reweighted least squares.

    `y` may be 0/1 outcomes or fractions in [0, 1] (then use `quasi=True`: the covariance is scaled by the
    Pearson dispersion). Returns None when there is nothing to fit (fewer than 3 points, a constant factor
    or a constant outcome). Near-separated data get a tiny ridge on the slope and `converged` False."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n = int(x.size)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    centre, scale = float(x.mean()), float(x.std())
    z = (x - centre) / scale
    design = np.column_stack([np.ones(n), z])
    beta = np.zeros(2)
    ridge = np.diag([0.0, 1e-8])
    converged = False
    hessian = design.T @ design
    for _ in range(max_iter):
        p = _sigmoid(design @ beta)
        w = np.clip(p * (1 - p), 1e-12, None)
        gradient = design.T @ (y - p) - ridge @ beta
        hessian = design.T @ (design * w[:, None]) + ridge
        step = np.linalg.solve(hessian, gradient)
        beta = beta + step
        if np.max(np.abs(step)) < tol:
            converged = True
            break
    p = _sigmoid(design @ beta)
    w = np.clip(p * (1 - p), 1e-12, None)
    cov = np.linalg.inv(design.T @ (design * w[:, None]) + ridge)
    note = None
    if quasi:
        dispersion = float(np.sum((y - p) ** 2 / w) / max(n - 2, 1))
        cov = cov * dispersion
    if abs(beta[1]) > 25:
        converged = False
        note = "outcome (nearly) separated by the factor: the fit is unreliable"
    elif not converged:
        note = "IRLS did not converge (outcome likely separated by the factor): the fit is unreliable"

    slope = beta[1] / scale
    slope_se = math.sqrt(cov[1, 1]) / scale
    grid = np.linspace(float(x.min()), float(x.max()), grid_points)
    zg = (grid - centre) / scale
    eta = beta[0] + beta[1] * zg
    se = np.sqrt(np.clip(cov[0, 0] + zg * zg * cov[1, 1] + 2 * zg * cov[0, 1], 0.0, None))
    return CurveFit(
        model="quasi_logistic" if quasi else "logistic",
        intercept=float(beta[0] - beta[1] * centre / scale),
        slope=float(slope),
        slope_se=float(slope_se),
        slope_ci=(float(slope - Z95 * slope_se), float(slope + Z95 * slope_se)),
        slope_p=normal_two_sided_p(slope / slope_se) if slope_se > 0 else 1.0,
        converged=converged,
        n=n,
        grid=[float(g) for g in grid],
        curve=[float(v) for v in _sigmoid(eta)],
        band_lower=[float(v) for v in _sigmoid(eta - Z95 * se)],
        band_upper=[float(v) for v in _sigmoid(eta + Z95 * se)],
        note=note,
    )


def linear_fit(x: np.ndarray | list[float], y: np.ndarray | list[float], *, grid_points: int = 60) -> CurveFit | None:
    """Ordinary least squares y = a + b·x with a pointwise 95% band on the mean (normal approximation)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n = int(x.size)
    if n < 3 or np.ptp(x) == 0:
        return None
    design = np.column_stack([np.ones(n), x])
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ beta
    sigma2 = float(resid @ resid) / (n - 2)
    cov = sigma2 * np.linalg.inv(design.T @ design)
    slope_se = math.sqrt(cov[1, 1])
    grid = np.linspace(float(x.min()), float(x.max()), grid_points)
    mean = beta[0] + beta[1] * grid
    se = np.sqrt(np.clip(cov[0, 0] + grid * grid * cov[1, 1] + 2 * grid * cov[0, 1], 0.0, None))
    return CurveFit(
        model="linear",
        intercept=float(beta[0]),
        slope=float(beta[1]),
        slope_se=slope_se,
        slope_ci=(float(beta[1] - Z95 * slope_se), float(beta[1] + Z95 * slope_se)),
        slope_p=normal_two_sided_p(beta[1] / slope_se) if slope_se > 0 else (0.0 if beta[1] != 0 else 1.0),
        converged=True,
        n=n,
        grid=[float(g) for g in grid],
        curve=[float(v) for v in mean],
        band_lower=[float(v) for v in mean - Z95 * se],
        band_upper=[float(v) for v in mean + Z95 * se],
    )
