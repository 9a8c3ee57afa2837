# cython: language_level=3, freethreading_compatible=True
"""The native core's engines in one extension: the hierarchical timing wheel
(parts/timer.pyx), the delayed-operation purgatory (parts/purgatory.pyx) and the member
tables with their group locks (parts/members.pyx). One module, so their C types and
functions reach one another within it, without a cross-module C API; each part is
read on its own, beside its pure twin in ../_pure/ (timer.py, purgatory.py,
members.py), which fastcoord._twins pairs with this module; and the consumer group
protocol's assignors (parts/assignors.pyx, twin ../_pure/assignors.py).
"""
include "parts/timer.pyx"
include "parts/purgatory.pyx"
include "parts/members.pyx"
include "parts/assignors.pyx"

__all__ = ["ManualStepper", "StepLock", "Timer", "TimerHandle", "TimerSink",
           "DelayedOperation", "OperationLock", "Purgatory", "GroupRecord", "MemberTable",
           "ASSIGNORS", "compute_assignment"]
