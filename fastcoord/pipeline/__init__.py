"""The data pipeline (issue 6): trace format and ingest, single-process and Spark replay.

Needs the `spark` extra (pyspark, pyarrow, pandas) for Spark; the trace format, the
generator and the single-process replay need only pyarrow.
"""
