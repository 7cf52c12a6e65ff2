"""Residual variants as torch modules, one module per variant, registered by its ``model.norm`` name (the
torch-free descriptions are in ``lnrepro.norms``). Every module of this package is imported here, so a new
variant is its module (plus its description and test): ``base.py`` describes the interface."""

import importlib
import pkgutil

from .base import RESIDUALS, LayerNormResidual, Residual, register_residual, residual_class

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["RESIDUALS", "LayerNormResidual", "Residual", "register_residual", "residual_class"]
