"""
Tests of txnsq.spark on a real local Spark session (``tox -e spark``).
"""
