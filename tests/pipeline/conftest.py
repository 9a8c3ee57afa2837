"""The pipeline tier's shared fixture: one local Spark session for the tests that use it."""
import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    # the session a user's local run gets (fastcoord.pipeline.spark.session), with few
    # shuffle partitions for small traces
    from fastcoord.pipeline.spark import session
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    s = session("local[2]", app="fastcoord-tests", shuffle_partitions=2)
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()
