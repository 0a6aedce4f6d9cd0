"""shapelm: reproducible experiments on the shape of Transformer language models."""
__version__ = "0.1.0"
