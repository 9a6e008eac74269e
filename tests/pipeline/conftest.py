"""One SparkSession for every test under tests/pipeline, with Spark's Kafka connector when it is supplied.

Spark reads ``spark.jars`` onto the driver's classpath only when it starts the JVM: a later session in the same
process (even after ``stop()``) reuses that JVM, so a session built without the jars would hide the ``kafka``
source from every test after it. Hence one session-scoped session, built with the jars of the
``WALGATE_SPARK_KAFKA_JARS`` folder whenever that variable is set, whichever test asks for it first. Its Python
workers (the stand-in Kafka source, kafka_standin.py) run this interpreter, the one with the project's packages,
not whichever ``python3`` is first on the PATH, unless ``PYSPARK_PYTHON`` says otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    builder = (SparkSession.builder.master("local[2]").appName("walgate-pipeline-test")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC"))
    # the JVM reads it when it starts, for the Python workers of Python data sources (planning and reading)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = os.environ.get("WALGATE_SPARK_KAFKA_JARS")  # test_spark_kafka_source.py: the connector's folder
    if jars:
        builder = builder.config("spark.jars", ",".join(str(p) for p in sorted(Path(jars).glob("*.jar"))))
    session = builder.getOrCreate()
    yield session
    session.stop()
