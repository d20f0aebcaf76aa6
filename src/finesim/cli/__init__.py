"""The ``finesim`` command line."""
