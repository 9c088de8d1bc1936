"""One local Spark session for every test in this directory.

PySpark's Python workers (the data-source planner and the executors) run the interpreter named
by ``PYSPARK_PYTHON``; it must be this one (the venv with pyarrow and rocketq), and it has to be
in the environment before the JVM starts. ``SPARK_LOCAL_IP`` keeps Spark on the loopback
interface. Tests that need a Spark session are marked ``spark`` (``pytest -m "not spark"`` runs
everything else without a JVM).
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = pathlib.Path(__file__).resolve().parent
    for item in items:
        if here in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    conf_dir = tmp_path_factory.mktemp("spark-conf")
    (conf_dir / "log4j2.properties").write_text(LOG4J2)
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rocketq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
