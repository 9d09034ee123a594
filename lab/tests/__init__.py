"""Tests of the fault lab (run with ``python -m twisted.trial lab.tests``)."""
