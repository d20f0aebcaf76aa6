"""The CCL objective (Liu et al. 2025): ``ccl`` = ``lambda_wacl*W-ACL + lambda_bcl*BCL + lambda_mse*MSE +
lambda_cmse*C-MSE`` (Eq. 3) on the ``pairs`` layout, for bi- and tri-encoders; a weight of 0 drops its part (the
Table 4 ablations).

When BCL or C-MSE is on, :func:`prepare_ccl_model` appends a
:class:`~finesim.models.projection_head.ProjectionHead` (``projection_dim``, ``projection_activation``) to the
model before the trainer is built, so it is trained, saved with the model and synchronised by DDP. Labels must be on
[0, 1] (the recipe's default ``labels: minmax 1..5``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from finesim.models.card import Citation
from finesim.training.objectives.base import Objective

# the CCL paper; BibTeX fields from its title page
CITATION = Citation(
    "CCL",
    "@inproceedings{liu2025ccl,\n"
    "  title = {Conditional Semantic Textual Similarity via Conditional Contrastive Learning},\n"
    "  author = {Liu, Xinyue and Qin, Zeyang and Wang, Zeyu and Liang, Wenxin and Zong, Linlin and Xu, Bo},\n"
    "  booktitle = {Proceedings of the 31st International Conference on Computational Linguistics},\n"
    "  pages = {4548--4560},\n"
    "  year = {2025}\n}",
)

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
HEAD_OPTIONS = ("projection_dim", "projection_activation")


def prepare_ccl_model(model: Any, options: Mapping[str, Any]) -> None:
    """Add the projection head ``g`` when BCL or C-MSE is on."""
    from finesim.models.projection_head import add_projection_head

    if options["lambda_bcl"] or options["lambda_cmse"]:
        add_projection_head(model, out_features=options["projection_dim"], activation=options["projection_activation"])


def build_ccl(model: Any, options: Mapping[str, Any]) -> Any:
    """:class:`~finesim.losses.ccl.CCLLoss` with the loss options (the head options went to the model)."""
    from finesim.losses.ccl import CCLLoss

    return CCLLoss(model, **{k: v for k, v in options.items() if k not in HEAD_OPTIONS})


def check_ccl(options: Mapping[str, Any], train: Any) -> None:
    """The loss's own checks of its values (weights, sigma, temperature, BCL reduction, partner negatives), run by the
    recipe checks before any model is built."""
    from finesim.losses.ccl import check_ccl_options

    weights = {k: options[k] for k in ("lambda_wacl", "lambda_bcl", "lambda_mse", "lambda_cmse")}
    check_ccl_options(
        weights, options["sigma"], options["temperature"], options["bcl_reduction"], options["partner_negative"]
    )


OBJECTIVES = (
    Objective(
        "ccl",
        build_ccl,
        encoders=("bi", "tri"),
        layout="pairs",
        defaults=CCL_DEFAULTS,
        description="CCL: l1*W-ACL + l2*BCL + l3*MSE + l4*C-MSE (Liu et al. 2025); parts logged separately",
        prepare_model=prepare_ccl_model,
        check=check_ccl,
        citations=(CITATION,),
    ),
)
