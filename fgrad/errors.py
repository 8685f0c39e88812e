"""fgrad's exceptions and warnings: the public face of `fgrad.core.errors`.

Every misuse has its own subclass of `FgradError`, so callers can catch
exactly what they expect:

>>> import numpy as np, fgrad
>>> try:
...     fgrad.grad(lambda x: x)(np.ones(3))
... except fgrad.errors.NonScalarOutputError as e:
...     print(type(e).__name__)
NonScalarOutputError
"""
from fgrad.core.errors import ArgnumError as ArgnumError
from fgrad.core.errors import ArrayNamespaceError as ArrayNamespaceError
from fgrad.core.errors import ArraySubclassError as ArraySubclassError
from fgrad.core.errors import BackendMismatchError as BackendMismatchError
from fgrad.core.errors import BatchAxisError as BatchAxisError
from fgrad.core.errors import BatchedConversionError as BatchedConversionError
from fgrad.core.errors import CallbackDerivativeError as CallbackDerivativeError
from fgrad.core.errors import CallbackError as CallbackError
from fgrad.core.errors import CheckpointError as CheckpointError
from fgrad.core.errors import CheckpointMismatchError as CheckpointMismatchError
from fgrad.core.errors import ConcretizationError as ConcretizationError
from fgrad.core.errors import ConvergenceError as ConvergenceError
from fgrad.core.errors import ControlFlowError as ControlFlowError
from fgrad.core.errors import CotangentError as CotangentError
from fgrad.core.errors import CustomRuleError as CustomRuleError
from fgrad.core.errors import DerivativeConversionError as DerivativeConversionError
from fgrad.core.errors import DaskArgumentError as DaskArgumentError
from fgrad.core.errors import DeviceError as DeviceError
from fgrad.core.errors import FgradError as FgradError
from fgrad.core.errors import ImmutableArrayError as ImmutableArrayError
from fgrad.core.errors import MemoryLayoutError as MemoryLayoutError
from fgrad.core.errors import ImplicitSolveError as ImplicitSolveError
from fgrad.core.errors import IndexUpdateError as IndexUpdateError
from fgrad.core.errors import IntegrationError as IntegrationError
from fgrad.core.errors import InvalidInputError as InvalidInputError
from fgrad.core.errors import LinalgDerivativeError as LinalgDerivativeError
from fgrad.core.errors import LaxArgumentError as LaxArgumentError
from fgrad.core.errors import LoopBatchingWarning as LoopBatchingWarning
from fgrad.core.errors import MissingRuleError as MissingRuleError
from fgrad.core.errors import NNArgumentError as NNArgumentError
from fgrad.core.errors import NonFiniteError as NonFiniteError
from fgrad.core.errors import NonScalarOutputError as NonScalarOutputError
from fgrad.core.errors import NumpyArgumentError as NumpyArgumentError
from fgrad.core.errors import OdeArgumentError as OdeArgumentError
from fgrad.core.errors import ScipyArgumentError as ScipyArgumentError
from fgrad.core.errors import SingularMatrixError as SingularMatrixError
from fgrad.core.errors import SparseShapeError as SparseShapeError
from fgrad.core.errors import SparseStructureError as SparseStructureError
from fgrad.core.errors import NumpyFunctionError as NumpyFunctionError
from fgrad.core.errors import RandomArgumentError as RandomArgumentError
from fgrad.core.errors import RandomKeyError as RandomKeyError
from fgrad.core.errors import RetracingWarning as RetracingWarning
from fgrad.core.errors import OptionalDependencyError as OptionalDependencyError
from fgrad.core.errors import StatefulRandomnessError as StatefulRandomnessError
from fgrad.core.errors import StaticArgumentError as StaticArgumentError
from fgrad.core.errors import TapError as TapError
from fgrad.core.errors import TraceLimitError as TraceLimitError
from fgrad.core.errors import TracerLeakError as TracerLeakError

__all__ = [
    "FgradError",
    "NonScalarOutputError",
    "InvalidInputError",
    "CotangentError",
    "MissingRuleError",
    "BackendMismatchError",
    "ArgnumError",
    "ImmutableArrayError",
    "MemoryLayoutError",
    "TracerLeakError",
    "CustomRuleError",
    "NumpyFunctionError",
    "BatchAxisError",
    "BatchedConversionError",
    "LoopBatchingWarning",
    "CheckpointError",
    "CheckpointMismatchError",
    "ConcretizationError",
    "StaticArgumentError",
    "TraceLimitError",
    "ControlFlowError",
    "IndexUpdateError",
    "DeviceError",
    "NNArgumentError",
    "LinalgDerivativeError",
    "TapError",
    "NonFiniteError",
    "NumpyArgumentError",
    "LaxArgumentError",
    "DerivativeConversionError",
    "RetracingWarning",
    "ArraySubclassError",
    "DaskArgumentError",
    "OptionalDependencyError",
    "CallbackError",
    "CallbackDerivativeError",
    "ConvergenceError",
    "ImplicitSolveError",
    "IntegrationError",
    "OdeArgumentError",
    "SparseShapeError",
    "SparseStructureError",
    "SingularMatrixError",
    "RandomArgumentError",
    "RandomKeyError",
    "StatefulRandomnessError",
]
