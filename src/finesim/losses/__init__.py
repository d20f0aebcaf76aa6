"""Training losses: one per module, each a pure function over tensors plus a thin ``nn.Module`` that follows
sentence-transformers' ``forward(features, labels)`` contract.

Import the module you need (``from finesim.losses.quad import QuadLoss``); this package imports nothing
eagerly so one loss's dependencies never burden another. The training runner reaches a loss through the recipe's
objective: each :class:`~finesim.training.objectives.base.Objective` in
:data:`finesim.training.objectives.OBJECTIVES` builds its loss.
"""
