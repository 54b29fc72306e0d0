"""The bundled gfx1250 kernels (RMSNorm, GEMM, MegaMoE) with their numpy references.

Importing the package registers the kernels' mutation-campaign cases with `ldssan.mutate`
(`campaigns`), so `ldssan mutate ldssan.kernels.<name>` finds them; it sets no environment
variable (each launch selects gfx1250 for itself, `_launch.gfx1250_target`).
"""

from . import campaigns  # noqa: F401  (registers the campaign cases)
