"""Exceptions with messages that name the offending key, file or value."""


class ShapelmError(Exception):
    """Base class: every user-facing error of shapelm."""


class ConfigError(ShapelmError):
    """A configuration key or value is invalid; the message names it."""


class DataError(ShapelmError):
    """A data file is missing, corrupt or of the wrong dtype; the message names it."""


class EvalError(ShapelmError):
    """Bad evaluation input (checkpoint, tokenizer, task file, data set); names the culprit."""
