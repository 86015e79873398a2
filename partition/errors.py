"""The exceptions the library raises.

Every error a user can cause by their input is a :class:`PartitionError`; the CLI prints its
message as one line and exits non-zero. Anything else escaping is a bug.
"""

from __future__ import annotations


class PartitionError(Exception):
    """Base class of every error caused by input or by an impossible request."""


class InputError(PartitionError):
    """A file or argument is missing, malformed or inconsistent."""


class ModelError(InputError):
    """An ONNX model cannot be read or turned into an operator graph."""


class ClusterError(InputError):
    """A cluster or device-catalog description is invalid."""


class InfeasibleError(PartitionError):
    """The request has no valid placement (e.g. more stages than devices, memory too small)."""


class SolverError(PartitionError):
    """A solver name is unknown or a solver cannot handle the instance it was given."""
