"""nnt - read and edit the internals of mixture-of-experts language models from Python, over
libnnt's C API (ctypes; the forward pass, the edits, the tokenizer all run in libnnt).

    import nnt
    model = nnt.Model("examples/tiny-minimax-m2")
    out = model.trace("The cat sat", save=["layers.1.mlp.expert_indices"],
                      edits=[("layers.1.mlp.expert_weights", "zero")])
    out["layers.1.mlp.expert_indices"]        # numpy int array [batch, seq, top_k]

Value paths are nnterp's names, as the nnt command takes them (README.md, "The command line").
"""

from ._core import (AblateExpert, AttributionResult, EditContext, Error, Generation, Model, ModelInfo, PatchResult,
                    Session, SkipLayers, Steer, Steps, SupportRow, Tokenizer, Values, to_torch)
from ._lib import PACKAGE_VERSION, find_library
from . import harvest  # nnt.harvest.open(folder): what `nnt harvest` wrote
from .remote import Remote  # a model that `nnt serve` holds


def load_library(path=None):
    """Opens libnnt (see nnt._lib for where it is looked for) and returns its path."""
    from . import _lib

    return _lib.load(path).nnt_path


__all__ = ["AblateExpert", "AttributionResult", "EditContext", "Error", "Generation", "Model", "ModelInfo", "PatchResult", "Remote", "Session",
           "SkipLayers", "Steer", "Steps", "SupportRow", "Tokenizer", "Values", "find_library", "harvest", "load_library",
           "to_torch"]
# the project's one version number (CMakeLists.txt's project(), see nnt._lib), not a second copy
__version__ = PACKAGE_VERSION
