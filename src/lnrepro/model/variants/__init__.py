"""Residual variants as torch modules, one module per variant, registered by its ``model.norm`` name (the
torch-free descriptions are in ``lnrepro.norms``). Every module of this package is imported here, so a new
variant is its module (plus its description and test): ``base.py`` describes the interface."""

import importlib
import pkgutil

from ...norms import NORMS
from .base import RESIDUALS, LayerNormResidual, Residual, register_residual, residual_class

# In the order of lnrepro.norms.NORMS (a variant's module is named after it), so that RESIDUALS lists the variants
# as NORMS does; then any other module (base).
_ORDER = {name: i for i, name in enumerate(NORMS)}
for _name in sorted((m.name for m in pkgutil.iter_modules(__path__)), key=lambda n: (_ORDER.get(n, len(_ORDER)), n)):
    importlib.import_module(f"{__name__}.{_name}")

__all__ = ["RESIDUALS", "LayerNormResidual", "Residual", "register_residual", "residual_class"]
