"""Helpers the test modules share, one module per concern: no test module imports another."""
