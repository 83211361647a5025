"""patchwheel: maintained fixes for transformers/accelerate as patch series, built into +fixed wheels."""

__version__ = "0.1.0"
