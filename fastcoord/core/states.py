"""The numbers the core keeps a group's state and a shard's status by, in both twins
and in C (`_native/constants.pxd` holds them as C constants; the native member table
checks at import that the two agree). Kafka's names for the states are GroupState's
(errors.py); these are the indexes the hot paths compare.
"""

# A group's state: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead.
EMPTY, PR, CR, STABLE, DEAD = range(5)

# A shard's status in the member table: not this coordinator's, loading, serving.
SHARD_NOT_OWNED, SHARD_LOADING, SHARD_ACTIVE = 0, 1, 2
