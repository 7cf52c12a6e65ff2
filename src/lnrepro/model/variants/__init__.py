"""Residual variants as torch modules, one module per variant, registered by its ``model.norm`` name (the
torch-free descriptions are in ``lnrepro.norms``). Every module of this package is imported here, so a new
variant is its module (plus its description and test): ``base.py`` describes the interface. The modules are
imported in the order of their descriptions, so ``RESIDUALS`` lists the variants in ``NORMS``'s order."""

import importlib
import pkgutil

from ...norms import NORMS
from .base import RESIDUALS, LayerNormResidual, Residual, Stream, register_residual, residual_class

# In the order of the descriptions (lnrepro.norms.NORMS), so that RESIDUALS lists the variants as NORMS does
# (a module is named after its variant), then any other module by name.
_order = {name: i for i, name in enumerate(NORMS)}
for _name in sorted((m.name for m in pkgutil.iter_modules(__path__)), key=lambda n: (_order.get(n, len(_order)), n)):
    importlib.import_module(f"{__name__}.{_name}")

__all__ = ["RESIDUALS", "LayerNormResidual", "Residual", "Stream", "register_residual", "residual_class"]
