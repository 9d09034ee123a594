"""Tests of the fault lab."""
