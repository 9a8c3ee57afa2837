# cython: language_level=3
# The engines' C-level API for other Cython modules (the group state machine, the
# pipeline's runs): the declarations of each part, in dependency order.
include "parts/timer.pxd"
include "parts/purgatory.pxd"
include "parts/members.pxd"
