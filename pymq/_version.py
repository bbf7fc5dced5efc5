"""Single source of pymq's version string."""

__version__ = "0.1.0"
