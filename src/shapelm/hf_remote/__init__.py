"""trust_remote_code files copied into Hugging Face exports of non-conventional shapes.

`configuration_shapelm.py` and `modeling_shapelm.py` are self-contained (torch + transformers
only) so an exported directory loads without shapelm installed.
"""
