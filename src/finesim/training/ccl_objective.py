"""Registers the CCL objectives with the training runner (``objective.name: ccl`` in a recipe).

``ccl`` is ``lambda_wacl*W-ACL + lambda_bcl*BCL + lambda_mse*MSE + lambda_cmse*C-MSE`` (Liu et al. 2025, Eq.
3) on the ``pairs`` layout, for bi- and tri-encoders; a weight of 0 drops its part (the Table 4 ablations).
When BCL or C-MSE is on, a :class:`~finesim.models.projection_head.ProjectionHead` (``projection_dim``,
``projection_activation``) is appended to the model here, before the trainer is built, so it is trained, saved
with the model and synchronised by DDP. Labels must be on [0, 1] (the recipe's default ``labels: minmax
1..5``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from finesim.training.registry import Objective, register_objective

CCL_DEFAULTS: dict[str, Any] = {
    "lambda_wacl": 1.0,
    "lambda_bcl": 1.0,
    "lambda_mse": 1.0,
    "lambda_cmse": 1.0,
    "sigma": 0.5,
    "temperature": 0.05,
    "bcl_reduction": "mean",
    "gather_across_devices": True,
    "partner_negative": "keep",
    "projection_dim": None,
    "projection_activation": "tanh",
}


def build_ccl(model: Any, options: Mapping[str, Any]) -> Any:
    """Build :class:`~finesim.losses.ccl.CCLLoss`, adding the projection head to ``model`` when needed."""
    from finesim.losses.ccl import CCLLoss
    from finesim.models.projection_head import add_projection_head

    opts = dict(options)
    projection_dim = opts.pop("projection_dim")
    activation = opts.pop("projection_activation")
    if opts["lambda_bcl"] or opts["lambda_cmse"]:
        add_projection_head(model, out_features=projection_dim, activation=activation)
    return CCLLoss(model, **opts)


register_objective(
    Objective(
        "ccl",
        build_ccl,
        encoders=("bi", "tri"),
        layout="pairs",
        defaults=CCL_DEFAULTS,
        description="CCL: l1*W-ACL + l2*BCL + l3*MSE + l4*C-MSE (Liu et al. 2025); parts logged separately",
    ),
    replace=True,
)
